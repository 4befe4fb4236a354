"""`Learner`, the one shallow base class of every learner: construction, the `learn()` loop, evaluation,
export and the training state a checkpoint holds. The base owns what every algorithm needs, nothing algorithmic:

- the task source: an env id, an env instance or factory, or `train_dataset` + `reward_func` (a `DatasetEnv`);
- agent loading (`learners.models.agents`), devices, one AdamW and LR schedule per model;
- the data order (`learners.loop.data`): each epoch visits every task instance in a seeded order, in
  batches of `rollout_buffer_size` instances;
- the `learn()` loop, which calls the learner's `step(roots)` once per batch: collect a rollout,
  compute advantages, `update`, return metrics;
- evaluation, logging, `save_model()` and training checkpoints (`learners.checkpointing`).

A learner driving another one (MARLHF drives its policy learner) sets `relabel`, a `Rollout -> Rollout`
function applied to every training rollout, and `wrapper`, whose `state_dict()` and
`checkpoint_modules()` join the checkpoints.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import math
import os
import uuid
import warnings
from typing import Any, Callable, Sequence

import torch

import comlrl_env
from comlrl_env import TextParallelEnv
from learners.checkpointing.checkpoint import resume_checkpoint, save_checkpoint
from learners.checkpointing.fingerprints import data_fingerprint
from learners.checkpointing.manager import CheckpointManager
from learners.checkpointing.sharded import ShardedState
from learners.checkpointing.state import (
    StateHooks,
    TrainingState,
    config_defaults,
    find_stateful,
    modules_as_saved,
    qualified_name,
)
from learners.loop import data
from learners.loop.config import LearnerConfig
from learners.loop.evaluation import evaluate
from learners.loop.logger import RunLogger
from learners.loop.metrics import warn_if_no_signal
from learners.loop.optim import adamw, lr_schedule
from learners.models.agents import (
    agent_count,
    agents_by_model,
    enable_gradient_checkpointing,
    load_agents,
    model_groups,
    model_name,
    save_gathered,
)
from learners.models.fixed import Frozen, seat_record, split_seats
from learners.models.lora import attach_adapters
from learners.parallel.distributed import Distributed
from learners.parallel.fsdp import Sharding
from learners.parallel.placement import check_shared_devices, resolve_devices
from learners.rollout import Rollout, RolloutEngine, check_rollout_size
from learners.rollout.backends import backend_for, generation_weights
from learners.rollout.scoring import Support, sampled_logprobs

__all__ = ["Learner", "LearnerConfig"]

LIBRARY_VERSION = comlrl_env.__version__


class Learner(abc.ABC):
    """Base of MAGRPO, IAC and MAAC (and the policy learner inside MARLHF): builds the env and agents,
    runs `learn()`.

    Subclasses set `config_class` and implement `step(roots) -> dict[str, float]`: collect a rollout
    from the freshly reset environments `roots`, update on it, return metrics.
    """

    config_class: type[LearnerConfig] = LearnerConfig

    def __init__(
        self,
        *,
        env: str | TextParallelEnv | Callable[[], TextParallelEnv] | None = None,
        train_dataset: Sequence[dict[str, Any]] | None = None,
        reward_func: Callable[..., Any] | None = None,
        agent_model: Any = None,
        agents: Sequence[Any] | None = None,
        num_agents: int | None = None,
        tokenizer: Any = None,
        critic_model: Any = None,
        critics: Sequence[Any] | None = None,
        model_config: dict[str, Any] | None = None,
        formatters: Any = None,
        external_transition: Callable[..., Sequence[str]] | None = None,
        reward_processor: Callable[[float], float] | None = None,
        eval_env: str | TextParallelEnv | Callable[[], TextParallelEnv] | None = None,
        eval_dataset: Sequence[dict[str, Any]] | None = None,
        wandb_config: dict[str, Any] | None = None,
        callbacks: Sequence[Any] | None = None,
        eval_logger: Callable[..., list[dict[str, float]]] | None = None,
        eval_aggregator: Callable[..., dict[str, float]] | None = None,
        args: LearnerConfig | None = None,
    ) -> None:
        # Everything cheap is validated before any model loads.
        self.args = args if args is not None else self.config_class()
        if not isinstance(self.args, self.config_class):
            raise TypeError(f"args must be a {self.config_class.__name__}, got {type(self.args).__name__}.")
        cfg = self.args
        if (eval_logger is None) != (eval_aggregator is None):
            raise ValueError("eval_logger and eval_aggregator work together: pass both or neither.")
        count = agent_count(num_agents, agents, cfg.num_agents)  # seats, fixed ones included
        cfg.check_per_agent(count)  # per-agent sampling values: one per seat
        given_tokenizer = tokenizer  # one for every seat, or one per seat: a Frozen seat without its own uses it
        agents, self.fixed, tokenizer = split_seats(agents, tokenizer)
        self.dist = Distributed.from_env()
        task = dict(reward_func=reward_func, num_agents=count, formatters=formatters, transition=external_transition,
                    reward_processor=reward_processor, cfg=cfg)
        self.env = data.build_env(env, train_dataset, what="env", **task)
        if len(self.env.possible_agents) != count:
            raise ValueError(
                f"the environment has {len(self.env.possible_agents)} agents but {count} were configured "
                f"(num_agents / agents); make them equal."
            )
        if env is not None and cfg.num_turns not in (1, self.env.num_turns):
            warnings.warn(f"num_turns={cfg.num_turns} in the config does not apply to this env, which plays "
                          f"{self.env.num_turns} turn(s); set it on the env (comlrl_env.make(id, num_turns=...)). "
                          "The run records the env's count as env_num_turns.", stacklevel=2)
        has_eval = eval_env is not None or eval_dataset is not None
        self.eval_env = data.build_env(eval_env, eval_dataset, what="eval_env", **task) if has_eval else self.env
        self.num_seats = count
        self.num_agents = count - len(self.fixed)  # the trained agents
        self.seats = [s for s in range(count) if s not in self.fixed]  # the seat each trained agent plays
        self.model_index = model_groups(agents, self.num_agents)  # agent -> its model (self-play: shared)
        count = self.num_agents
        self.reward_func = reward_func
        self.callbacks = list(callbacks or [])
        self.eval_logger, self.eval_aggregator = eval_logger, eval_aggregator
        seat_devices = resolve_devices(cfg.agent_devices, self.num_seats, local_rank=self.dist.local_rank,
                                       parallel_training=cfg.parallel_training)  # one per seat, fixed ones too
        self.devices = [seat_devices[s] for s in self.seats]
        self.sharding = Sharding(cfg, self.dist, self.devices)  # FSDP: under torchrun, one device per process
        self.model_config = dict(model_config or {})
        self.critic_model, self.critic_sources = critic_model, critics
        check_shared_devices(self.devices, self.model_agents(), [self.env.possible_agents[s] for s in self.seats])
        self._validate()
        K, mode, joint = self.rollout_plan()  # the rollout's size is refused here, before any model loads
        check_rollout_size(self.env, cfg.seed, cfg.rollout_buffer_size, K, mode, joint, cfg.max_rollout_samples)

        # With LoRA, homogeneous agents load one base model that all their adapters share.
        shared_base = cfg.peft_config is not None and agents is None
        if shared_base and isinstance(tokenizer, (list, tuple)):
            tokenizer = tokenizer[0]
        self.agents, self.tokenizers = load_agents(agent_model, agents,
                                                   (1 if shared_base else count) if agents is None else None,
                                                   tokenizer, self.model_config, None if cfg.peft_config else self.sharding)
        if shared_base:
            self.agents, self.tokenizers = self.agents * count, self.tokenizers * count
        if cfg.peft_config is not None:
            data.seed_everything(cfg.seed)  # adapters start identical across runs and ranks
            self.agents = attach_adapters(self.agents, cfg.peft_config, cfg.merge_adapters_on_save, self.model_index)
        self.agent_names = [model_name(a) for a in (agents if agents is not None else [agent_model] * count)]
        for first, *_ in self.model_agents():
            self.sharding.place(self.agents[first], self.devices[first])  # FSDP: sharded where it lands
            if cfg.gradient_checkpointing:
                enable_gradient_checkpointing(self.agents[first])
        self.reference_models: list[torch.nn.Module] = []  # frozen copies of the agents as loaded, per agent
        if cfg.reference_kl_enabled:
            devices = resolve_devices(cfg.reference_devices, self.num_seats, what="reference", default=self.devices,
                                      seats=self.seats)
            copies = [self.sharding.place(self.sharding.copy(self.agents[a[0]]), devices[a[0]], frozen=True)
                      .eval().requires_grad_(False) for a in self.model_agents()]
            self.reference_models = [copies[m] for m in self.model_index]
        self.schedule_epochs: int | None = None  # LR schedule length; None: num_train_epochs (MARLHFIter: the run's)
        self._setup_models()
        for seat, policy in self.fixed.items():
            if isinstance(policy, Frozen):
                per_seat = isinstance(given_tokenizer, (list, tuple))
                policy.prepare(cfg.generation_settings().for_agent(seat), seat_devices[seat], self.model_config,
                               given_tokenizer[seat] if per_seat and len(given_tokenizer) == self.num_seats
                               else None if per_seat else given_tokenizer)
        # One optimizer and schedule per model: a model in several seats (self-play) steps once per minibatch.
        self.optimizers = [adamw(self.agents[a[0]].parameters(), cfg.agent_learning_rate, cfg.weight_decay)
                           for a in self.model_agents()]
        self.schedulers = [self._scheduler(o) for o in self.optimizers]
        self.relabel: Callable[[Rollout], Rollout] | None = None  # MARLHF: its reward model's scores as rewards
        self.wrapper: Any = None  # a learner driving this one (MARLHF): its state joins checkpoints
        self.sharding.shard(self.checkpoint_modules(), self.checkpoint_optimizers()[0], frozen=self.reference_models)
        self.engine = RolloutEngine(self.agents, self.tokenizers, cfg.generation_settings(), self.fixed,
                                    backend_for(cfg, self.agents, self.tokenizers, self.seats))  # on the filled models
        self.engine.backend.follow([self.optimizers[m] for m in self.model_index])  # weights reach the backend
        self.run_id = self.dist.gather(uuid.uuid4().hex)[0]  # one run id, rank 0's, on every rank
        self.checkpoint_sequence = 0
        self.wandb_identity: dict[str, Any] | None = None  # the last wandb run's, kept for later checkpoints
        self.env_steps = 0  # joint actions played (the x-axis of every metric)
        self.epoch = 0
        self.batch_in_epoch = 0
        self.rollouts_done = 0
        self.optimizer_steps = 0  # per agent: one per minibatch of every update
        self.completions_sampled = 0  # per agent, in training rollouts
        self.last_rollout: Rollout | None = None
        self.flat_rollouts = 0  # rollouts in a row in which no group's returns differed
        main = self.dist.is_main  # only rank 0 writes files, opens wandb and shows a bar
        self.logger = RunLogger(cfg.output_dir if main else None, wandb_config if main else None,
                                self._run_config(), cfg.verbose and main, run_id=self.run_id,
                                tensorboard="tensorboard" in (cfg.report_to or ()),
                                completions_every=cfg.log_completions_steps)

    # ----- what a learner writes -------------------------------------------------

    def _validate(self) -> None:
        """Learner-specific checks that must run before models load (critics are rejected by default)."""
        if self.critic_model is not None or self.critic_sources is not None:
            raise ValueError(f"{type(self).__name__} has no critic: leave critic_model and critics unset "
                             "(IAC and MAAC take them).")

    def _setup_models(self) -> None:
        """Attach heads, load critics and their optimizers (runs after the agents load)."""

    def rollout_plan(self) -> tuple[int, str, str]:
        """`(num_generations, rollout_mode, joint_mode)` of this learner's training rollouts."""
        return self.args.num_generations, "parallel", "aligned"

    def model_agents(self) -> list[list[int]]:  # model m's optimizer is optimizers[m]
        return agents_by_model(self.model_index)

    @abc.abstractmethod
    def step(self, roots: list[TextParallelEnv]) -> dict[str, float]:
        """Roll out the reset environments `roots`, update the agents, return metrics."""

    # ----- the training loop -----------------------------------------------------

    def learn(
        self,
        checkpoint_dir: str | None = None,
        checkpoint_interval: int = 1,
        resume_from_checkpoint: str | None = None,
        checkpoint_total_limit: int | None = None,
        checkpoint_steps: int | None = None,
    ) -> dict[str, float]:
        """Train until `num_train_epochs` epochs are done; return the last training metrics merged with the
        last evaluation's (`train/*`, `perf/*` and `eval/*` keys).

        Args:
            checkpoint_dir: Write training checkpoints here (off when None): at completed epochs
                (every `checkpoint_interval`), every `checkpoint_steps` rollouts, and at the end.
            checkpoint_interval: Epochs between checkpoints.
            resume_from_checkpoint: A `checkpoint-*` directory to continue from exactly.
            checkpoint_total_limit: Keep only this run's newest N checkpoints.
            checkpoint_steps: Also checkpoint every N rollouts, mid-epoch.
        """
        cfg = self.args
        ckpt = CheckpointManager(self, checkpoint_dir, checkpoint_interval, checkpoint_total_limit, checkpoint_steps)
        if resume_from_checkpoint is not None:
            ckpt.resume(resume_from_checkpoint)
            self.logger.resume_wandb(self.wandb_identity)
        ckpt.start()
        size = self.epoch_size(self.env)
        if self.dist.enabled and any(n % self.dist.world_size for n in (cfg.rollout_buffer_size, size,
                                                                         cfg.train_batch_size or 0)):
            raise ValueError(
                f"with {self.dist.world_size} ranks, rollout_buffer_size ({cfg.rollout_buffer_size}), the epoch "
                f"size ({size}) and train_batch_size ({cfg.train_batch_size}) must be multiples of the world size "
                "so that every rank gets an equal shard; change them or the number of processes."
            )
        self.logger.start(total=cfg.num_train_epochs * self.batches_per_epoch,
                          initial=self.epoch * self.batches_per_epoch + self.batch_in_epoch)
        self._callback("on_learn_begin")
        last: dict[str, float] = {}
        evaluation: dict[str, float] = {}
        try:
            while self.epoch < cfg.num_train_epochs:
                order = self.epoch_order(self.env, self.epoch)
                batches = [order[i:i + cfg.rollout_buffer_size] for i in range(0, len(order), cfg.rollout_buffer_size)]
                while self.batch_in_epoch < len(batches):
                    roots = data.reset_roots(self.env, self.dist.shard(batches[self.batch_in_epoch]))
                    with self._autocast():
                        metrics = self.dist.mean_metrics(self.step(roots))
                    for s in self.checkpoint_optimizers()[1]:  # every schedule steps once per rollout
                        s.step()
                    self.batch_in_epoch += 1
                    self.rollouts_done += 1
                    metrics["train/epoch"] = self.epoch + self.batch_in_epoch / len(batches)
                    metrics["train/optimizer_steps"] = float(self.optimizer_steps)
                    metrics["train/completions"] = float(self.completions_sampled)
                    logged = metrics if self.rollouts_done % cfg.logging_steps == 0 else {}
                    self.logger.log(logged, self.env_steps, advance=1)
                    self.logger.log_rollout(self.last_rollout, self.env_steps, self.rollouts_done, bool(logged))
                    last = metrics
                    self.flat_rollouts = warn_if_no_signal(metrics, self.flat_rollouts)
                    self._callback("on_step_end", metrics)
                    if cfg.eval_interval and self.rollouts_done % cfg.eval_interval == 0:
                        evaluation = self.evaluate()
                    ckpt.after_step()
                self.epoch += 1
                self.batch_in_epoch = 0
                self._callback("on_epoch_end")
                ckpt.after_epoch(final=self.epoch == cfg.num_train_epochs)
            if cfg.eval_interval and self.rollouts_done % cfg.eval_interval != 0:
                evaluation = self.evaluate()
            self._callback("on_learn_end")
        finally:
            self.logger.close()
        return {**last, **evaluation}

    def train(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Alias of `learn()` (the seed system's name)."""
        return self.learn(*args, **kwargs)

    def collect(self, roots: list[TextParallelEnv], num_generations: int, rollout_mode: str = "parallel",
                joint_mode: str = "aligned") -> Rollout:
        """Play the reset `roots` to the end (training sampling), apply `relabel`, count into `env_steps`."""
        with generation_weights(self.engine.backend, self.sharding, self.agents):
            rollout = self.engine.collect(roots, num_generations, rollout_mode, joint_mode, self.args.discount)
        rollout.timings.update(self.engine.backend.finish_rollout())  # e.g. the seconds of weight sync
        if self.relabel is not None:
            rollout = self.relabel(rollout)
        self.env_steps += int(self.dist.sum(rollout.num_joint_actions))
        sampled = rollout.num_samples if rollout.acted is None else int(rollout.acted.sum()) // max(self.num_agents, 1)
        self.completions_sampled += int(self.dist.sum(sampled))  # per agent; a waiting agent's rows sample nothing
        self.last_rollout = rollout
        return rollout

    def evaluate(self, num_eval_samples: int | None = None, greedy: bool | None = None) -> dict[str, float]:
        """Play `num_eval_samples` episodes of `eval_env` with one sample per agent per turn, always under the
        task reward; log and return the `eval/*` metrics (see `learners.loop.evaluation.evaluate`)."""
        with generation_weights(self.engine.backend, self.sharding, self.agents):  # every rank; rank 0 evaluates
            return evaluate(self, num_eval_samples, greedy)

    # ----- evaluation and export -----------------------------------------------------

    def save_model(self, output_dir: str) -> None:
        """Write `output_dir/agent_{seat}/` for every trained seat (model + tokenizer, loadable by the Auto classes; a
        self-play model under each of its seats) and `comlrl_env.json`; rank 0 writes (FSDP: gathered from all)."""
        if not self.dist.is_main and not self.sharding.enabled:  # weights are identical on every rank
            return self.dist.barrier()
        os.makedirs(output_dir, exist_ok=True)
        for a, (model, tok) in enumerate(zip(self.agents, self.tokenizers)):
            save_gathered(model, os.path.join(output_dir, self.seat_name(a)), tok, self.sharding)
        self._save_extra_models(output_dir)
        if self.dist.is_main:
            manifest = {"learner": type(self).__name__, "library_version": LIBRARY_VERSION,
                        "num_agents": self.num_agents, "agent_sources": self.agent_names,
                        **seat_record(self.env.possible_agents, self.fixed),
                        "env_num_turns": self.env.num_turns, "config": dataclasses.asdict(self.args)}
            with open(os.path.join(output_dir, "comlrl_env.json"), "w", encoding="utf-8") as f:
                json.dump(manifest, f, indent=2, default=str)
        self.dist.barrier()

    def _save_extra_models(self, output_dir: str) -> None:
        """Critics, value heads, reward models: written by the learners that have them."""

    # ----- the training state (checkpoints) ---------------------------------------

    def training_state(self, epoch: int | None = None) -> TrainingState:
        """Everything a checkpoint holds, as plain data; the data order fingerprinted at `epoch` (default: now)."""
        optimizers, schedulers = self.checkpoint_optimizers()
        shards, modules, optimizers = ShardedState.split(self.checkpoint_modules(), optimizers, self.dist)
        order = self.epoch_order(self.env, self.epoch if epoch is None else epoch)
        return TrainingState(
            learner=type(self).__name__, learner_class=qualified_name(type(self)),
            library_version=LIBRARY_VERSION, num_agents=self.num_agents,
            config=dataclasses.asdict(self.args), config_defaults=config_defaults(self.args),
            modules=modules, optimizers=optimizers, schedulers=schedulers, shards=shards,
            stateful=find_stateful(self.callbacks, {"env": self.env, "eval_env": self.eval_env},
                                   {"reward_func": self.reward_func, "eval_logger": self.eval_logger,
                                    "eval_aggregator": self.eval_aggregator}, owner=self),
            extra=StateHooks(self.extra_state, self.load_extra_state), tokenizers=list(self.tokenizers),
            data=data_fingerprint(self.env, self.epoch_size(self.env), order),
            batches_per_epoch=self.batches_per_epoch,
            progress={"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
                      "rollouts_done": self.rollouts_done, "env_steps": self.env_steps},
            run_id=self.run_id, sequence=self.checkpoint_sequence, wandb=self.wandb_identity,
            dist=self.dist if self.dist.enabled else None,
        )

    def save_checkpoint(self, path: str) -> str:
        """Write the full training state to `path` (see `learners.checkpoint`); returns the path."""
        if self.logger.run is not None:  # else the identity of the last run, which may have closed
            self.wandb_identity = self.logger.wandb_identity()
        return save_checkpoint(path, self.training_state())

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        """Restore the full training state from `path`; returns the progress counters."""
        restored = resume_checkpoint(path, self._state_to_resume)
        progress = restored["progress"]
        self.epoch, self.batch_in_epoch = progress["epoch"], progress["batch_in_epoch"]
        self.rollouts_done, self.env_steps = progress["rollouts_done"], progress["env_steps"]
        self.run_id, self.checkpoint_sequence = restored["run_id"], restored["sequence"]
        self.logger.run_id = self.run_id
        self.wandb_identity = restored["wandb"]
        return progress

    def _state_to_resume(self, saved: dict[str, Any]) -> TrainingState:
        """The training state at the checkpoint's epoch (its data-order fingerprint depends on it), its modules
        under the saved names: by seat, or by trained-agent index in checkpoints from before seat names."""
        state = self.training_state(epoch=saved["progress"]["epoch"])
        by_index = {f"{kind}_{self.seats[a]}": f"{kind}_{a}" for a in range(self.num_agents)
                    for kind in ("agent", "reference")}
        state.modules = modules_as_saved(state.modules, set(saved["shapes"]), by_index)
        return state

    def seat_name(self, a: int) -> str:
        """`agent_{seat}`: the name trained agent `a` is saved under (export dirs, checkpoint modules), by the
        seat it plays, so `agent_1/` is always the policy that played seat 1."""
        return f"agent_{self.seats[a]}"

    def checkpoint_modules(self) -> dict[str, torch.nn.Module]:
        """Every trained module by a stable name: each model under its first seat (`agent_{seat}`), its
        frozen reference copy (`reference_{seat}`); learners with critics or heads add theirs."""
        firsts = [agents[0] for agents in self.model_agents()]
        modules = {self.seat_name(a): self.agents[a] for a in firsts}
        if self.reference_models:
            modules.update({f"reference_{self.seats[a]}": self.reference_models[a] for a in firsts})
        if self.wrapper is not None:
            modules.update(self.wrapper.checkpoint_modules())
        return modules

    def checkpoint_optimizers(self) -> tuple[list[torch.optim.Optimizer], list[Any]]:
        """Optimizers and schedulers, in a stable order."""
        return list(self.optimizers), list(self.schedulers)

    def extra_state(self) -> dict[str, Any]:
        """Learner-specific state for checkpoints: the step and completion counters, and the wrapper's state."""
        state: dict[str, Any] = {"counters": [self.optimizer_steps, self.completions_sampled]}
        return {**state, "wrapper": self.wrapper.state_dict()} if self.wrapper is not None else state

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state()` returned (older checkpoints have no counters: they restart at 0)."""
        self.optimizer_steps, self.completions_sampled = state.get("counters", [0, 0])
        if self.wrapper is not None and "wrapper" in state:
            self.wrapper.load_state_dict(state["wrapper"])

    # ----- data order and helpers for subclasses ------------------------------------

    def epoch_size(self, env: TextParallelEnv) -> int:
        """Episodes per epoch of `env` under this config (`learners.loop.data.epoch_size`)."""
        return data.epoch_size(env, self.args.episodes_per_epoch)

    @property
    def batches_per_epoch(self) -> int:
        """Rollouts per training epoch."""
        return math.ceil(self.epoch_size(self.env) / self.args.rollout_buffer_size)

    def epoch_order(self, env: TextParallelEnv, epoch: int, limit: int | None = None,
                    shuffle: bool | None = None) -> list[tuple[int, int | None]]:
        """`(reset seed, task index or None)` of each episode of `epoch` (-1: evaluation) under this config."""
        size = limit if limit is not None else self.epoch_size(env)
        return data.epoch_order(env, self.args.seed, epoch, size, self.args.shuffle if shuffle is None else shuffle)

    def minibatches(self, n: int, pass_index: int = 0) -> list[torch.Tensor]:
        """This rank's minibatches of its `n` local items (groups or samples) for one pass over a rollout.

        Each holds this rank's share of `train_batch_size` (which counts the global minibatch), in the
        seeded order of `learners.loop.data.minibatch_order`, padded with empty ones so all ranks step together.
        """
        size = self.args.train_batch_size // self.dist.world_size if self.args.train_batch_size else max(n, 1)
        chunks = data.minibatch_order(n, size, self.args.seed, self.rollouts_done, pass_index)
        steps = self.dist.max(len(chunks))
        self.optimizer_steps += steps  # each minibatch is one optimizer step of every model
        return chunks + [torch.zeros(0, dtype=torch.long)] * (steps - len(chunks))

    def old_logprobs(self, a: int, rollout: Rollout) -> torch.Tensor:
        """log pi_old of agent `a`'s sampled tokens `(S, T)`: as sampled, or else one batched no-grad forward."""
        samples = rollout.samples[a]
        if samples.logprobs is not None:
            return samples.logprobs
        with self.sharding.gathered([self.agents[a]]):  # FSDP: ranks may score different numbers of rows
            return sampled_logprobs(self.agents[a], samples, temperature=self.engine.backend.support(a))

    def scoring_supports(self) -> list[Support]:
        """The distribution each trained agent's tokens are scored under: its generation backend's
        (`GenerationBackend.support`: the seat's `logprob_temperature_of`, and with vLLM its top-k/top-p)."""
        return [self.engine.backend.support(a) for a in range(self.num_agents)]

    def _autocast(self) -> torch.autocast:
        """bfloat16 autocast on the agents' device type when `mixed_precision="bf16"` (else a no-op)."""
        return torch.autocast(self.devices[0].type, dtype=torch.bfloat16, enabled=self.args.mixed_precision == "bf16")

    def _scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        """`lr_schedule` over `schedule_epochs` (else `num_train_epochs`) epochs, a length read at every step:
        a resume that raises `num_train_epochs`, and MARLHFIter, keep one schedule over the whole run."""
        per_epoch, cfg = self.batches_per_epoch, self.args
        return lr_schedule(optimizer, cfg.lr_scheduler_type, cfg.warmup_steps,
                           lambda: (self.schedule_epochs or cfg.num_train_epochs) * per_epoch)

    def _callback(self, event: str, *args: Any) -> None:
        for cb in self.callbacks:
            fn = getattr(cb, event, None)
            if fn is not None:
                fn(self, *args)

    def _run_config(self) -> dict[str, Any]:
        """What the run logs as its settings: the config, plus the env's own turn count and seats."""
        return {"learner": type(self).__name__, "num_agents": self.num_agents, **dataclasses.asdict(self.args),
                "env_num_turns": self.env.num_turns, **seat_record(self.env.possible_agents, self.fixed)}
