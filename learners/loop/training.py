"""The training loop `Learner.learn()` runs once its checkpoints are set up: epochs of rollout batches in the
seeded data order (`learners.loop.data`), each batch one call of the learner's `step(roots)`, then the LR
schedules' step, the counters, logging, callbacks, evaluation every `eval_interval` rollouts, and the
checkpoint manager's turn. A SIGTERM or SIGUSR1 stops it at the next rollout boundary with a checkpoint and
`Preempted` (`learners.loop.preemption`). It drives the learner through its public members.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from comlrl_env import TextParallelEnv
from learners.checkpointing.manager import CheckpointManager
from learners.loop import data
from learners.loop.logger import RunLogger
from learners.loop.metrics import warn_if_no_signal
from learners.loop.preemption import Preemption
from learners.parallel.distributed import Distributed
from learners.rollout import Rollout

__all__ = ["Trained", "autocast", "callback", "check_even_shards", "run_epochs", "run_rollout"]


class Trained(Protocol):
    """What the loop reads, calls and counts on a learner (`learners.Learner` is one)."""

    args: Any  # its config: `num_train_epochs`, `rollout_buffer_size`, `logging_steps`, `eval_interval`, ...
    dist: Distributed
    env: TextParallelEnv
    logger: RunLogger
    callbacks: list[Any]
    devices: list[torch.device]
    epoch: int
    batch_in_epoch: int
    rollouts_done: int
    env_steps: int
    optimizer_steps: int
    completions_sampled: int
    last_rollout: Rollout | None
    flat_rollouts: int
    batches_per_epoch: int

    def step(self, roots: list[TextParallelEnv]) -> dict[str, float]:
        """Roll out the reset environments `roots`, update the agents, return metrics."""

    def checkpoint_optimizers(self) -> tuple[list[torch.optim.Optimizer], list[Any]]:
        """Optimizers and schedulers, in a stable order."""

    def epoch_size(self, env: TextParallelEnv) -> int:
        """Episodes per epoch of `env`."""

    def epoch_order(self, env: TextParallelEnv, epoch: int, limit: int | None = None,
                    shuffle: bool | None = None) -> list[tuple[int, int | None]]:
        """`(reset seed, task index or None)` of each episode of `epoch`."""

    def evaluate(self, num_eval_samples: int | None = None, greedy: bool | None = None) -> dict[str, float]:
        """Play evaluation episodes; log and return the `eval/*` metrics."""


def run_epochs(learner: Trained, ckpt: CheckpointManager) -> dict[str, float]:
    """Train `learner` from its counters (a resumed run's included) until `num_train_epochs` epochs are done;
    return the last training metrics merged with the last evaluation's. The logger closes however it ends."""
    cfg = learner.args
    check_even_shards(cfg, learner.epoch_size(learner.env), learner.dist)
    learner.logger.start(total=cfg.num_train_epochs * learner.batches_per_epoch,
                         initial=learner.epoch * learner.batches_per_epoch + learner.batch_in_epoch)
    callback(learner, "on_learn_begin")
    last: dict[str, float] = {}
    evaluation: dict[str, float] = {}
    with Preemption(learner.dist, cfg.preemption_timeout) as preemption:
        try:
            while learner.epoch < cfg.num_train_epochs:
                order = learner.epoch_order(learner.env, learner.epoch)
                size = cfg.rollout_buffer_size
                batches = [order[i:i + size] for i in range(0, len(order), size)]
                while learner.batch_in_epoch < len(batches):
                    last = run_rollout(learner, batches)
                    if cfg.eval_interval and learner.rollouts_done % cfg.eval_interval == 0:
                        evaluation = learner.evaluate()
                    saved = ckpt.sequence
                    ckpt.after_step()
                    preemption.check(ckpt, saved=ckpt.sequence != saved)  # a signal stops the run here
                learner.epoch += 1
                learner.batch_in_epoch = 0
                callback(learner, "on_epoch_end")
                ckpt.after_epoch(final=learner.epoch == cfg.num_train_epochs)
            if cfg.eval_interval and learner.rollouts_done % cfg.eval_interval != 0:
                evaluation = learner.evaluate()
            callback(learner, "on_learn_end")
        finally:
            learner.logger.close()
    return {**last, **evaluation}


def run_rollout(learner: Trained, batches: list[list[tuple[int, int | None]]]) -> dict[str, float]:
    """Roll out and learn from the epoch's next batch, step the LR schedules, count, log, call `on_step_end`;
    return the rollout's metrics."""
    cfg = learner.args
    roots = data.reset_roots(learner.env, learner.dist.shard(batches[learner.batch_in_epoch]))
    with autocast(learner):
        metrics = learner.dist.mean_metrics(learner.step(roots))
    for s in learner.checkpoint_optimizers()[1]:  # every schedule steps once per rollout
        s.step()
    learner.batch_in_epoch += 1
    learner.rollouts_done += 1
    metrics["train/epoch"] = learner.epoch + learner.batch_in_epoch / len(batches)
    metrics["train/optimizer_steps"] = float(learner.optimizer_steps)
    metrics["train/completions"] = float(learner.completions_sampled)
    if learner.curriculum is not None:  # the level the next rollout plays at
        metrics["train/curriculum_level"] = float(learner.curriculum.after_rollout(metrics["train/reward_mean"]))
    logged = metrics if learner.rollouts_done % cfg.logging_steps == 0 else {}
    learner.logger.log(logged, learner.env_steps, advance=1)
    learner.logger.log_rollout(learner.last_rollout, learner.env_steps, learner.rollouts_done, bool(logged))
    learner.flat_rollouts = warn_if_no_signal(metrics, learner.flat_rollouts)
    callback(learner, "on_step_end", metrics)
    return metrics


def check_even_shards(cfg: Any, epoch_size: int, dist: Distributed) -> None:
    """Under torchrun, refuse batch sizes and an epoch size that the ranks cannot share equally."""
    if dist.enabled and any(n % dist.world_size for n in (cfg.rollout_buffer_size, epoch_size,
                                                          cfg.train_batch_size or 0)):
        raise ValueError(
            f"with {dist.world_size} ranks, rollout_buffer_size ({cfg.rollout_buffer_size}), the epoch "
            f"size ({epoch_size}) and train_batch_size ({cfg.train_batch_size}) must be multiples of the world size "
            "so that every rank gets an equal shard; change them or the number of processes."
        )


def autocast(learner: Trained) -> torch.autocast:
    """bfloat16 autocast on the agents' device type when `mixed_precision="bf16"` (else a no-op)."""
    return torch.autocast(learner.devices[0].type, dtype=torch.bfloat16,
                          enabled=learner.args.mixed_precision == "bf16")


def callback(learner: Trained, event: str, *args: Any) -> None:
    """Call `event` (e.g. `on_step_end`) with `(learner, *args)` on every callback that defines it."""
    for cb in learner.callbacks:
        fn = getattr(cb, event, None)
        if fn is not None:
            fn(learner, *args)
