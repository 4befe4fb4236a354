"""`Learner`, the one shallow base class of every learner, and the fields all configs share.

The base owns what every algorithm needs and nothing algorithmic:

- the task source: an env id, an env instance or factory, or `train_dataset` +
  `reward_func` wrapped into a `DatasetEnv`;
- agent loading (`learners.agents`), devices, one AdamW and LR schedule per agent;
- the data order: each epoch visits every task instance of a finite env in a
  seeded shuffled order (or `episodes_per_epoch` seeded draws of a procedural
  env), in batches of `rollout_buffer_size` instances;
- the `learn()` loop (`step()` is the algorithm), evaluation, logging,
  `save_model()` and training checkpoints.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import math
import os
import random
import uuid
from typing import Any, Callable, Sequence

import numpy as np
import torch

import comlrl_env
from comlrl_env import DatasetEnv, TextParallelEnv
from learners.agents import load_agents, model_name
from learners.distributed import Distributed
from learners.lora import attach_adapters
from learners.checkpoint import CheckpointManager, load_checkpoint, read_checkpoint_metadata, save_checkpoint
from learners.logger import RunLogger
from learners.rollout import GenerationSettings, Rollout, RolloutEngine, sampled_logprobs
from rewards.models import RewardModel, joint_text

__all__ = ["Learner", "LearnerConfig", "accumulate_gradients", "clip_grad",
           "enable_gradient_checkpointing", "save_pretrained_with_head", "seed_everything"]

LIBRARY_VERSION = comlrl_env.__version__

_LossTerms = torch.Tensor | tuple[torch.Tensor, ...]
"""What a micro-batch loss function returns: the loss to backward, or a tuple of it and terms only logged."""


@dataclasses.dataclass
class LearnerConfig:
    """Fields every learner config shares (the reference library's names and meanings)."""

    num_train_epochs: int = 20
    """Passes over the task instances. Counts the whole run, also when resuming."""
    agent_learning_rate: float = 5e-6
    """AdamW learning rate of every agent."""
    num_agents: int | None = None
    """Number of agents; None takes it from the constructor (`num_agents` or `len(agents)`)."""
    num_turns: int = 1
    """Turns per episode (default 1; the reference defaulted to 2, which failed without a transition)."""
    discount: float = 1.0
    """Discount of later turns' rewards in returns (applied; the reference ignored it)."""
    max_new_tokens: int = 256
    """Most tokens a completion may have, its EOS included."""
    temperature: float = 0.6
    """Sampling temperature (> 0) in training and sampled evaluation; greedy is `eval_greedy`."""
    top_p: float = 0.6
    """Nucleus sampling: keep the most likely tokens until their mass reaches top_p; 1.0 disables it."""
    top_k: int | None = 50
    """Top-k sampling; None disables it."""
    tempered_logprobs: bool = True
    """Score sampled tokens under softmax(z / temperature), the distribution they were drawn from (before
    top-k/top-p), in the ratio and the gradient, as TRL does; False: under the raw softmax(z), as the
    reference library does. Measured in docs/DESIGN.md (Policy-gradient details)."""
    early_termination_threshold: float | None = None
    """End a multi-turn episode once a turn's mean reward exceeds this (default off; the reference's -0.2
    silently disabled later turns for non-negative rewards)."""
    external_prompt_passthrough: bool = False
    """Use the transition's prompts verbatim instead of passing them through the formatters."""
    rollout_buffer_size: int = 2
    """Task instances rolled out together (one batched generate per agent per turn)."""
    train_batch_size: int | None = None
    """Per optimizer step: groups (MAGRPO: tree nodes or task instances per turn) or samples (IAC, MAAC);
    None = all of a rollout. It counts the global minibatch: under torchrun each rank takes an equal share,
    so the optimizer steps per rollout do not depend on the number of processes."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step: each minibatch is split into this many parts (as even as possible, in
    order; fewer when it has fewer samples), each forwarded and backwarded on its own, then one optimizer step.
    The update equals the unsplit one up to float rounding; activation memory falls by about this factor."""
    logging_steps: int = 1
    """Log training metrics every this many rollouts."""
    eval_interval: int = 16
    """Evaluate every this many rollouts, and at the end; 0 = only when `evaluate()` is called."""
    eval_num_samples: int = 4
    """Evaluation episodes (task instances); 0 evaluates nothing."""
    eval_batch_size: int = 8
    """Evaluation episodes played together."""
    eval_greedy: bool = False
    """Greedy decoding in evaluation (the reference could only sample)."""
    parallel_training: str = "none"
    """"none" or "mp" (agents on distinct devices); accepted for compatibility."""
    agent_devices: str | list[str] | None = None
    """Device of every agent (a string), or one per agent; None: cuda:0 if available, else cpu."""
    max_grad_norm: float | None = 1.0
    """Clip each agent's gradient norm; None disables clipping."""
    lr_scheduler_type: str = "constant"
    """"constant", "linear" or "cosine" decay over the run's rollouts, after `warmup_steps` rollouts."""
    warmup_steps: int = 0
    """Rollouts of linear learning-rate warm-up before the schedule."""
    weight_decay: float = 0.0
    """AdamW weight decay of every agent and critic."""
    seed: int = 0
    """Seeds the data order, sampling and environments."""
    shuffle: bool = True
    """Visit task instances in a fresh seeded order every epoch (False: dataset order)."""
    episodes_per_epoch: int | None = None
    """Task instances per epoch; None = all of a finite env, 64 draws of a procedural one."""
    use_chat_template: bool = False
    """Render each observation with the agent tokenizer's chat template."""
    stop_strings: list[str] | None = None
    """End a completion at the first of these strings (kept in it); sampling then uses `generate`."""
    max_prompt_length: int | None = None
    """Truncate prompts (from the left) to this many tokens; None keeps them whole."""
    generation_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Extra `generate` arguments for training and evaluation."""
    peft_config: Any = None
    """A `peft.LoraConfig` (or a dict of its arguments): each agent trains its own LoRA adapter, and agents
    loaded from one `agent_model` share one frozen base model in memory (needs `comlrl-env[peft]`)."""
    merge_adapters_on_save: bool = False
    """With `peft_config`, `save_model` writes merged full models instead of adapter dirs."""
    gradient_checkpointing: bool = False
    """Recompute layer activations in the backward pass (agents and critics): less memory, more compute."""
    mixed_precision: str | None = None
    """"bf16": run rollouts and losses under bfloat16 autocast on the agents' device type; None: full precision."""
    output_dir: str | None = None
    """Where `metrics.jsonl` is written; None writes no file."""
    verbose: bool = True
    """Show the progress bar."""

    def __post_init__(self) -> None:
        _positive(self, "num_train_epochs", "agent_learning_rate", "num_turns", "max_new_tokens",
                  "rollout_buffer_size", "logging_steps", "eval_batch_size")
        _positive(self, "num_agents", "train_batch_size", "episodes_per_epoch", "max_prompt_length",
                  "top_k", allow_none=True)
        for name in ("eval_interval", "eval_num_samples", "warmup_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}.")
        if not 0.0 <= self.discount <= 1.0:
            raise ValueError(f"discount must be in [0, 1], got {self.discount}.")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}; use eval_greedy for greedy decoding.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.lr_scheduler_type not in ("constant", "linear", "cosine"):
            raise ValueError(f"lr_scheduler_type must be 'constant', 'linear' or 'cosine', got {self.lr_scheduler_type!r}.")
        if self.mixed_precision not in (None, "bf16"):
            raise ValueError(f"mixed_precision must be None or 'bf16', got {self.mixed_precision!r}.")
        if self.parallel_training in ("null", None):
            self.parallel_training = "none"
        if self.parallel_training not in ("none", "mp"):
            raise ValueError(f"parallel_training must be 'none' or 'mp', got {self.parallel_training!r}.")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0 or None, got {self.max_grad_norm}.")
        steps = self.gradient_accumulation_steps
        if isinstance(steps, bool) or not isinstance(steps, int):
            raise TypeError(f"gradient_accumulation_steps must be an int, got {steps!r}; use e.g. 1 (no accumulation) "
                            "or 4.")
        if steps < 1:
            raise ValueError(f"gradient_accumulation_steps must be >= 1, got {steps}; use 1 to step on whole "
                             "minibatches.")


def _positive(cfg: Any, *names: str, allow_none: bool = False) -> None:
    for name in names:
        value = getattr(cfg, name)
        if value is None and allow_none:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}.")


class Learner(abc.ABC):
    """Base of MAGRPO, IAC, MAAC and MARLHF: builds the env and agents, runs `learn()`.

    Subclasses set `config_class` and implement `step(roots) -> dict[str, float]`:
    collect a rollout from freshly reset environments, update, return metrics.
    """

    config_class: type[LearnerConfig] = LearnerConfig
    name = "learner"

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
        count = _agent_count(num_agents, agents, cfg.num_agents)
        self.dist = Distributed.from_env()
        self.env = self._build_env(env, train_dataset, reward_func, count, formatters, external_transition,
                                   reward_processor, "env")
        if len(self.env.possible_agents) != count:
            raise ValueError(
                f"the environment has {len(self.env.possible_agents)} agents but {count} were configured "
                f"(num_agents / agents); make them equal."
            )
        if eval_env is not None or eval_dataset is not None:
            self.eval_env = self._build_env(eval_env, eval_dataset, reward_func, count, formatters,
                                            external_transition, reward_processor, "eval_env")
        else:
            self.eval_env = self.env
        self.num_agents = count
        self.reward_func = reward_func
        self.callbacks = list(callbacks or [])
        self.eval_logger, self.eval_aggregator = eval_logger, eval_aggregator
        self.devices = _resolve_devices(cfg.agent_devices, count, self.dist.local_rank)
        self.model_config = dict(model_config or {})
        self.critic_model, self.critic_sources = critic_model, critics
        self._validate()

        # With LoRA, homogeneous agents load one base model that all their adapters share.
        shared_base = cfg.peft_config is not None and agents is None
        if shared_base and isinstance(tokenizer, (list, tuple)):
            tokenizer = tokenizer[0]
        self.agents, self.tokenizers = load_agents(agent_model, agents,
                                                   (1 if shared_base else count) if agents is None else None,
                                                   tokenizer, self.model_config)
        if shared_base:
            self.agents, self.tokenizers = self.agents * count, self.tokenizers * count
        if cfg.peft_config is not None:
            seed_everything(cfg.seed)  # adapters start identical across runs and ranks
            self.agents = attach_adapters(self.agents, cfg.peft_config, cfg.merge_adapters_on_save)
        self.agent_names = [model_name(a) for a in (agents if agents is not None else [agent_model] * count)]
        for model, device in zip(self.agents, self.devices):
            model.to(device)
            if cfg.gradient_checkpointing:
                enable_gradient_checkpointing(model)
        self.schedule_epochs: int | None = None  # LR schedule length; None: num_train_epochs (MARLHFIter: the run's)
        self._setup_models()
        self.engine = RolloutEngine(self.agents, self.tokenizers, GenerationSettings(
            max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
            use_chat_template=cfg.use_chat_template, stop_strings=cfg.stop_strings,
            max_prompt_length=cfg.max_prompt_length, generation_kwargs=dict(cfg.generation_kwargs),
            logprob_temperature=self.logprob_temperature,
        ))
        self.optimizers = [self._optimizer(m.parameters(), cfg.agent_learning_rate) for m in self.agents]
        self.schedulers = [self._scheduler(o) for o in self.optimizers]
        self.reward_model: RewardModel | None = None  # set by MARLHF: replaces the task reward in training
        self.reward_normalization: tuple[float, float] | None = None  # (mean, std) applied to its scores
        self.wrapper: Any = None  # a learner driving this one (MARLHF); its state_dict() joins checkpoints
        self.run_id = self.dist.gather(uuid.uuid4().hex)[0]  # one run id, rank 0's, on every rank
        self.library_version = LIBRARY_VERSION
        self.checkpoint_sequence = 0
        self.env_steps = 0  # joint actions played (the x-axis of every metric)
        self.epoch = 0
        self.batch_in_epoch = 0
        self.rollouts_done = 0
        main = self.dist.is_main  # only rank 0 writes files, opens wandb and shows a bar
        self.logger = RunLogger(cfg.output_dir if main else None, wandb_config if main else None,
                                self._run_config(), cfg.verbose and main)

    # ----- what a learner writes -------------------------------------------------

    def _validate(self) -> None:
        """Learner-specific checks that must run before models load (critics are rejected by default)."""
        if self.critic_model is not None or self.critic_sources is not None:
            raise ValueError(f"{type(self).__name__} has no critic: leave critic_model and critics unset "
                             "(IAC and MAAC take them).")

    def _relabel(self, rollout: Rollout) -> Rollout:
        """With a frozen `reward_model` (MARLHF's policy phase), its joint score replaces the task reward.

        Single-turn only: the score of a joint answer is every agent's reward and return. The task
        reward stays available as `task_episode_returns` for metrics.
        """
        if self.reward_model is None:
            return rollout
        if int(rollout.turn.max()) > 0:
            raise ValueError("a learned reward model scores single-turn episodes only; set num_turns=1.")
        A, S = len(rollout.samples), rollout.num_samples
        texts = [joint_text(rollout.states[s], [rollout.samples[a].completions[s] for a in range(A)]) for s in range(S)]
        scores = self.reward_model.score(texts)
        if self.reward_normalization is not None:
            mean, std = self.reward_normalization
            scores = (scores - mean) / std
        rewards = scores.expand(A, S).clone()
        B = rollout.episode_returns.shape[1]
        per_task = torch.zeros(B).index_add_(0, rollout.task, scores) / torch.bincount(rollout.task, minlength=B)
        return dataclasses.replace(rollout, rewards=rewards, returns=rewards.clone(),
                                   episode_returns=per_task.expand(A, B).clone(),
                                   task_episode_returns=rollout.episode_returns)

    def _setup_models(self) -> None:
        """Attach heads, load critics and their optimizers (runs after the agents load)."""

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
        """Train until `num_train_epochs` epochs are done; return the last evaluation (or training) metrics.

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
            identity = read_checkpoint_metadata(resume_from_checkpoint).get("wandb")
            ckpt.resume(resume_from_checkpoint)
            wandb_cfg = self.logger.wandb_config
            if identity and wandb_cfg is not None and "id" not in wandb_cfg and "resume" not in wandb_cfg:
                saved = {k: v for k, v in identity.items() if k in ("project", "entity") and v}
                self.logger.wandb_config = {**saved, **wandb_cfg, "id": identity["id"], "resume": "allow"}
        ckpt.start()
        if self.dist.enabled and (cfg.rollout_buffer_size % self.dist.world_size
                                  or self._epoch_size(self.env) % self.dist.world_size
                                  or (cfg.train_batch_size or 0) % self.dist.world_size):
            raise ValueError(
                f"with {self.dist.world_size} ranks, rollout_buffer_size ({cfg.rollout_buffer_size}), the epoch "
                f"size ({self._epoch_size(self.env)}) and train_batch_size ({cfg.train_batch_size}) must be "
                "multiples of the world size so that every rank gets an equal shard; change them or the number "
                "of processes."
            )
        batches_per_epoch = math.ceil(self._epoch_size(self.env) / cfg.rollout_buffer_size)
        total = cfg.num_train_epochs * batches_per_epoch
        self.logger.start(total=total, initial=self.epoch * batches_per_epoch + self.batch_in_epoch)
        self._callback("on_learn_begin")
        last: dict[str, float] = {}
        try:
            while self.epoch < cfg.num_train_epochs:
                order = self._epoch_order(self.env, self.epoch)
                batches = [order[i:i + cfg.rollout_buffer_size] for i in range(0, len(order), cfg.rollout_buffer_size)]
                while self.batch_in_epoch < len(batches):
                    roots = self._reset_roots(self.env, self.dist.shard(batches[self.batch_in_epoch]))
                    with self._autocast():
                        metrics = self.dist.mean_metrics(self.step(roots))
                    for s in self.checkpoint_optimizers()[1]:  # every schedule steps once per rollout
                        s.step()
                    self.batch_in_epoch += 1
                    self.rollouts_done += 1
                    metrics["train/epoch"] = self.epoch + self.batch_in_epoch / len(batches)
                    if self.rollouts_done % cfg.logging_steps == 0:
                        self.logger.log(metrics, self.env_steps, advance=1)
                    else:
                        self.logger.log({}, self.env_steps, advance=1)
                    last = metrics
                    self._callback("on_step_end", metrics)
                    if cfg.eval_interval and self.rollouts_done % cfg.eval_interval == 0:
                        last = self.evaluate()
                    ckpt.after_step()
                self.epoch += 1
                self.batch_in_epoch = 0
                self._callback("on_epoch_end")
                ckpt.after_epoch(final=self.epoch == cfg.num_train_epochs)
            if cfg.eval_interval and self.rollouts_done % cfg.eval_interval != 0:
                last = self.evaluate()
            self._callback("on_learn_end")
        finally:
            self.logger.close()
        return last

    def train(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Alias of `learn()` (the seed system's name)."""
        return self.learn(*args, **kwargs)

    # ----- evaluation ------------------------------------------------------------

    def evaluate(self, num_eval_samples: int | None = None, greedy: bool | None = None) -> dict[str, float]:
        """Play `num_eval_samples` episodes with one sample per agent per turn; return `eval/*` metrics.

        Metrics: `eval/reward_mean` (mean episode return over agents), `eval/agent_{i}/return_mean`,
        `eval/turn_{t}/reward_mean`, `eval/turn_{t}/expected_return`, `eval/invalid_action_rate`, and
        `eval/<key>` from `eval_logger` + `eval_aggregator`.
        """
        cfg = self.args
        n = cfg.eval_num_samples if num_eval_samples is None else num_eval_samples
        greedy = cfg.eval_greedy if greedy is None else greedy
        if n <= 0 or not self.dist.is_main:  # under torchrun rank 0 evaluates; the others go on
            return {}
        env = self.eval_env
        order = self._epoch_order(env, epoch=-1, limit=n, shuffle=False)
        episode_returns, turn_rewards, turn_returns, invalid, joints = [], {}, {}, 0.0, 0
        completions: list[list[list[str]]] = [[[] for _ in range(n)] for _ in range(self.num_agents)]
        items, first_prompts = [], []
        for start in range(0, n, cfg.eval_batch_size):
            chunk = order[start:start + cfg.eval_batch_size]
            roots = self._reset_roots(env, chunk)
            items += [r.task.get("item", r.task) if isinstance(r.task, dict) else r.task for r in roots]
            first_prompts += [r._observations[r.possible_agents[0]] for r in roots]
            rollout = self.engine.collect(roots, 1, "parallel", "aligned", cfg.discount, greedy=greedy)
            episode_returns.append(rollout.episode_returns)
            invalid += float(rollout.invalid_actions.sum())
            joints += rollout.num_joint_actions
            for t in rollout.turn.unique().tolist():
                at = rollout.turn == t
                turn_rewards.setdefault(t, []).append(rollout.rewards[:, at])
                turn_returns.setdefault(t, []).append(rollout.returns[:, at])
            for a in range(self.num_agents):
                for row in range(rollout.num_samples):
                    completions[a][start + int(rollout.task[row])].append(rollout.samples[a].completions[row])
        returns = torch.cat(episode_returns, 1)  # (A, n)
        metrics = {"eval/reward_mean": float(returns.mean())}
        for a in range(self.num_agents):
            metrics[f"eval/agent_{a}/return_mean"] = float(returns[a].mean())
        for t in sorted(turn_rewards):
            metrics[f"eval/turn_{t + 1}/reward_mean"] = float(torch.cat(turn_rewards[t], 1).mean())
            metrics[f"eval/turn_{t + 1}/expected_return"] = float(torch.cat(turn_returns[t], 1).mean())
        metrics["eval/invalid_action_rate"] = invalid / max(joints * self.num_agents, 1)
        if self.eval_logger is not None:
            rows = self.eval_logger(agent_completions_turns=completions, batch_items=items, prompts=first_prompts)
            extra = self.eval_aggregator(rows, num_turns=cfg.num_turns)
            metrics.update({f"eval/{k}": float(v) for k, v in extra.items()})
        self.logger.log(metrics, self.env_steps)
        return metrics

    # ----- export ---------------------------------------------------------------

    def save_model(self, output_dir: str) -> None:
        """Write `output_dir/agent_{i}/` (model + tokenizer, loadable by the Auto classes) and `comlrl_env.json`."""
        if not self.dist.is_main:  # weights are identical on every rank: rank 0 writes them
            self.dist.barrier()
            return
        os.makedirs(output_dir, exist_ok=True)
        for i, (model, tok) in enumerate(zip(self.agents, self.tokenizers)):
            save_pretrained_with_head(model, os.path.join(output_dir, f"agent_{i}"), tok)
        self._save_extra_models(output_dir)
        manifest = {
            "learner": type(self).__name__,
            "library_version": LIBRARY_VERSION,
            "num_agents": self.num_agents,
            "agent_sources": self.agent_names,
            "config": dataclasses.asdict(self.args),
        }
        with open(os.path.join(output_dir, "comlrl_env.json"), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, default=str)
        self.dist.barrier()

    def _save_extra_models(self, output_dir: str) -> None:
        """Critics, value heads, reward models: written by the learners that have them."""

    def save_checkpoint(self, path: str) -> str:
        """Write the full training state to `path` (see `learners.checkpoint`); returns the path."""
        return save_checkpoint(self, path)

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        """Restore the full training state from `path`; returns the progress counters."""
        return load_checkpoint(self, path)

    def checkpoint_modules(self) -> dict[str, torch.nn.Module]:
        """Every trained module by a stable name (learners with critics or heads add theirs)."""
        modules = {f"agent_{i}": m for i, m in enumerate(self.agents)}
        if self.reward_model is not None:
            modules["reward_model"] = self.reward_model
        return modules

    def checkpoint_optimizers(self) -> tuple[list[torch.optim.Optimizer], list[Any]]:
        """Optimizers and schedulers, in a stable order."""
        return list(self.optimizers), list(self.schedulers)

    def extra_state(self) -> dict[str, Any]:
        """Learner-specific state (tensors, numbers, strings) for checkpoints: here, the wrapper's."""
        return {"wrapper": self.wrapper.state_dict()} if self.wrapper is not None else {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state()` returned."""
        if self.wrapper is not None and "wrapper" in state:
            self.wrapper.load_state_dict(state["wrapper"])

    # ----- helpers for subclasses -----------------------------------------------

    @property
    def logprob_temperature(self) -> float:
        """The softmax temperature the losses score tokens at: the sampling temperature when `tempered_logprobs`."""
        return self.args.temperature if self.args.tempered_logprobs else 1.0

    def _autocast(self) -> torch.autocast:
        """bfloat16 autocast on the agents' device type when `mixed_precision="bf16"` (else a no-op)."""
        return torch.autocast(self.devices[0].type, dtype=torch.bfloat16, enabled=self.args.mixed_precision == "bf16")

    def _old_logprobs(self, a: int, rollout: Rollout) -> torch.Tensor:
        """log pi_old of agent `a`'s sampled tokens `(S, T)`: as kept by the sampling loop, or (after a
        `generate` fallback) from one batched no-grad forward."""
        samples = rollout.samples[a]
        if samples.logprobs is not None:
            return samples.logprobs
        return sampled_logprobs(self.agents[a], samples, temperature=self.logprob_temperature)

    def _accumulated_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, idx: torch.Tensor,
                          loss_fn: Callable[[torch.Tensor], _LossTerms]) -> tuple[float, ...]:
        """One optimizer step on the minibatch `idx`, backwarded in `gradient_accumulation_steps` micro-batches.

        `loss_fn(micro_idx)` is as in `accumulate_gradients`. Returns the grad norm, then the minibatch mean
        of each value `loss_fn` returns: `norm, loss = self._accumulated_step(...)`.
        """
        optimizer.zero_grad(set_to_none=True)
        means = accumulate_gradients(idx, loss_fn, self.args.gradient_accumulation_steps)
        return (self._apply_gradients(model, optimizer, len(idx)), *means)

    def _optimizer_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        loss: torch.Tensor | None, local_count: int) -> float:
        """Backward `loss` (a mean over `local_count` samples; None for an empty local minibatch, which
        joins the other ranks' step with zero gradients), then `_apply_gradients`. Returns the grad norm."""
        optimizer.zero_grad(set_to_none=True)
        if loss is not None:
            loss.backward()
        return self._apply_gradients(model, optimizer, local_count)

    def _apply_gradients(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, local_count: int) -> float:
        """Average the gradients (a mean over this rank's `local_count` samples) across ranks into the
        global-minibatch mean, clip, step. Returns the grad norm."""
        if self.dist.enabled:
            total = self.dist.sum(local_count)
            self.dist.average_gradients(model, local_count / total if total else 0.0)
        norm = clip_grad(model, self.args.max_grad_norm)
        optimizer.step()
        return norm

    def _minibatches(self, n: int, pass_index: int = 0) -> list[torch.Tensor]:
        """This rank's minibatches of its `n` local items (groups or samples) for one pass over a rollout.

        A seeded shuffle, fresh for every pass (`ppo_epochs`) and rollout: a function of the seed, the
        rollout counter and the pass only, so a resumed run repeats it. Each holds this rank's share of
        `train_batch_size` (which counts the global minibatch), padded so all ranks step together.
        """
        size = self.args.train_batch_size // self.dist.world_size if self.args.train_batch_size else max(n, 1)
        gen = torch.Generator().manual_seed(self.args.seed * 7919 + self.rollouts_done + 1_000_003 * pass_index)
        order = torch.randperm(n, generator=gen)
        return self._even_chunks([order[i:i + size] for i in range(0, n, size)])

    def _even_chunks(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        """Pad with empty minibatches so every rank takes the same number of optimizer steps."""
        n = self.dist.max(len(chunks))
        return chunks + [torch.zeros(0, dtype=torch.long)] * (n - len(chunks))

    def _optimizer(self, params: Any, lr: float) -> torch.optim.Optimizer:
        return adamw(params, lr, self.args.weight_decay)

    def _scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        """Warm-up, then constant, linear or cosine decay over `schedule_epochs` (else `num_train_epochs`) epochs.

        The length is read at every step, not fixed here: a resume that raises `num_train_epochs`, and
        MARLHFIter, which raises it every iteration, keep one schedule that spans the whole run.
        """
        cfg = self.args
        batches_per_epoch = math.ceil(self._epoch_size(self.env) / cfg.rollout_buffer_size)

        def factor(step: int) -> float:
            total = max((self.schedule_epochs or cfg.num_train_epochs) * batches_per_epoch, 1)
            if step < cfg.warmup_steps:
                return (step + 1) / (cfg.warmup_steps + 1)
            progress = min((step - cfg.warmup_steps) / max(total - cfg.warmup_steps, 1), 1.0)
            if cfg.lr_scheduler_type == "linear":
                return 1.0 - progress
            if cfg.lr_scheduler_type == "cosine":
                return 0.5 * (1.0 + math.cos(math.pi * progress))
            return 1.0

        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)

    def _callback(self, event: str, *args: Any) -> None:
        for cb in self.callbacks:
            fn = getattr(cb, event, None)
            if fn is not None:
                fn(self, *args)

    def _run_config(self) -> dict[str, Any]:
        return {"learner": type(self).__name__, "num_agents": self.num_agents, **dataclasses.asdict(self.args)}

    # ----- data order -------------------------------------------------------------

    def _epoch_size(self, env: TextParallelEnv) -> int:
        if self.args.episodes_per_epoch is not None:
            return self.args.episodes_per_epoch
        return env.num_tasks if env.num_tasks is not None else 64

    def _epoch_order(
        self, env: TextParallelEnv, epoch: int, limit: int | None = None, shuffle: bool | None = None
    ) -> list[tuple[int, int | None]]:
        """`(reset seed, task index or None)` for each episode of `epoch` (epoch -1: evaluation)."""
        size = limit if limit is not None else self._epoch_size(env)
        shuffle = self.args.shuffle if shuffle is None else shuffle
        gen = torch.Generator().manual_seed(self.args.seed * 100_003 + epoch + 1)
        seeds = torch.randint(0, 2**31 - 1, (size,), generator=gen).tolist()
        if env.num_tasks is None:
            return [(s, None) for s in seeds]
        n = env.num_tasks
        if shuffle:
            idx = torch.cat([torch.randperm(n, generator=gen) for _ in range(math.ceil(size / n))])[:size]
        else:
            idx = torch.arange(size) % n
        return list(zip(seeds, idx.tolist()))

    def _reset_roots(self, env: TextParallelEnv, batch: list[tuple[int, int | None]]) -> list[TextParallelEnv]:
        roots = []
        for seed, index in batch:
            env.reset(seed=seed, options=None if index is None else {"task_index": index})
            roots.append(env.clone())
        return roots

    # ----- construction -----------------------------------------------------------

    def _build_env(
        self,
        env: Any,
        dataset: Any,
        reward_func: Any,
        count: int,
        formatters: Any,
        transition: Any,
        reward_processor: Any,
        what: str,
    ) -> TextParallelEnv:
        cfg = self.args
        if env is not None and dataset is not None:
            raise ValueError(f"pass either {what}= or a dataset with reward_func=, not both.")
        if env is None and dataset is None:
            raise ValueError("no task: pass env= (an env id, instance or factory) or train_dataset= with reward_func=.")
        if env is not None:
            if isinstance(env, str):
                env = comlrl_env.make(env)
            elif not isinstance(env, TextParallelEnv) and callable(env):
                env = env()
            if not isinstance(env, TextParallelEnv):
                raise TypeError(f"{what} must be an env id, a TextParallelEnv or a factory returning one, got {env!r}.")
            return env
        if not callable(reward_func):
            raise TypeError(f"reward_func must be a callable, got {reward_func!r}.")
        return DatasetEnv(
            dataset, reward_func, num_agents=count, formatters=formatters, external_transition=transition,
            num_turns=cfg.num_turns, reward_processor=reward_processor,
            external_prompt_passthrough=cfg.external_prompt_passthrough,
            early_termination_threshold=cfg.early_termination_threshold,
        )


def _agent_count(num_agents: int | None, agents: Sequence[Any] | None, configured: int | None) -> int:
    if num_agents is not None and (isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1):
        raise ValueError(f"num_agents must be a positive int, got {num_agents!r}.")
    if agents is not None and not isinstance(agents, (str, os.PathLike)) and isinstance(agents, Sequence):
        if num_agents is not None and num_agents != len(agents):
            raise ValueError(f"agents has {len(agents)} entries but num_agents={num_agents}; give one entry per agent.")
        count = len(agents)
    else:
        count = num_agents if num_agents is not None else (configured or 2)
    if configured is not None and configured != count:
        raise ValueError(
            f"args.num_agents={configured} but the constructor gives {count} agents; make them equal "
            "(or leave args.num_agents=None)."
        )
    return count


def _resolve_devices(spec: Any, count: int, local_rank: int = 0) -> list[torch.device]:
    if spec is None or spec == "auto":  # under torchrun each process takes its own GPU
        return [torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")] * count
    if isinstance(spec, (str, torch.device)):
        return [torch.device(spec)] * count
    spec = list(spec)
    if len(spec) not in (1, count):
        raise ValueError(f"agent_devices has {len(spec)} entries for {count} agents; give 1 or {count}.")
    return [torch.device(s) for s in (spec * count if len(spec) == 1 else spec)]


def accumulate_gradients(idx: torch.Tensor, loss_fn: Callable[[torch.Tensor], _LossTerms],
                         micro_batches: int) -> tuple[float, ...]:
    """Backward the mean loss over the samples `idx` in up to `micro_batches` parts; return the mean of each term.

    `loss_fn(micro_idx)` returns the mean loss over `micro_idx` (consecutive samples of `idx`), or a tuple
    whose first entry is that loss and whose other entries are only logged. Each micro loss is backwarded
    with weight len(micro_idx) / len(idx), so the gradients add up to those of the mean over `idx`:
    sum_m |m| / |idx| * grad mean_{s in m} l_s = grad mean_{s in idx} l_s. Parts are as even as possible,
    e.g. 5 samples in 2 parts: 3 + 2; never empty.
    """
    means: list[float] = []
    for micro in torch.tensor_split(idx, min(micro_batches, len(idx))):
        weight = len(micro) / len(idx)
        out = loss_fn(micro)
        terms = out if isinstance(out, tuple) else (out,)
        (terms[0] * weight).backward()  # frees this micro-batch's activations before the next forward
        values = [float(t.detach()) * weight for t in terms]
        means = [m + v for m, v in zip(means, values)] if means else values
    return tuple(means)


def adamw(params: Any, lr: float, weight_decay: float = 0.01) -> torch.optim.AdamW:
    """AdamW over the trainable `params`; fused (one kernel per step) when they are all float tensors on
    CPU or CUDA: about 5x faster than the default per-parameter loop (16 vs 84 ms per step at 32M on CPU)."""
    trainable = [p for p in params if p.requires_grad]
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in trainable)
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay, fused=fused or None)
    optimizer.register_load_state_dict_pre_hook(_keep_own_kernel)
    return optimizer


def _keep_own_kernel(optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
    """Load-state-dict pre-hook: a checkpoint from a fused (or unfused) AdamW resumes on this optimizer's own
    kernel; the saved hyperparameters would otherwise overwrite its `fused` and `foreach` flags."""
    saved_groups = state_dict["param_groups"]
    if len(saved_groups) != len(optimizer.param_groups):
        return state_dict  # torch's own error names the mismatch
    groups = [{**saved, "fused": own.get("fused"), "foreach": own.get("foreach")}
              for saved, own in zip(saved_groups, optimizer.param_groups)]
    return {**state_dict, "param_groups": groups}


def clip_grad(model: torch.nn.Module, max_norm: float | None) -> float:
    """Clip the gradient norm of `model` to `max_norm` (None: only measure it); return the norm before clipping."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return 0.0
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm is not None else float("inf"))
    return float(norm)


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Turn on HF gradient checkpointing while the model stays in eval mode (no dropout).

    HF checkpoints a layer only when `layer.training` is set; we set that flag on the checkpointed
    layers alone (not their submodules), so dropout stays off and generation (no grad) is unaffected.
    """
    target = getattr(model, "peft", model)  # a LoRA agent's shared PEFT model
    target.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for module in target.modules():
        if getattr(module, "gradient_checkpointing", False) is True:
            module.training = True


def save_pretrained_with_head(model: torch.nn.Module, path: str, tokenizer: Any = None) -> None:
    """`save_pretrained` the backbone (loadable by the Auto classes); a `value_head` goes to `value_head.pt`."""
    head = getattr(model, "value_head", None)
    if head is None:
        model.save_pretrained(path)
    else:
        state = {k: v for k, v in model.state_dict().items() if not k.startswith("value_head.")}
        model.save_pretrained(path, state_dict=state)
        torch.save(head.state_dict(), os.path.join(path, "value_head.pt"))
    if tokenizer is not None:
        tokenizer.save_pretrained(path)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (sampling draws from torch's global generator)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
