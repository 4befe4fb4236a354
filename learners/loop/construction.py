"""The steps that build a `Learner`, in the order `Learner.__init__` takes them: check the config and the
arguments, build the training and evaluation envs, resolve the devices, attach LoRA adapters, place the
models, copy the reference models, prepare the fixed seats, make the optimizers, start the rollout engine and
open the run's logger.

Each step is a function of what it needs and returns what the learner keeps. The steps that call a learner's
own hooks (`_validate`, `_setup_models`) and the agent loading stay methods in `learner.py`.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import torch

from comlrl_env import TextParallelEnv
from comlrl_env.policies import FixedPolicy
from learners.loop import data
from learners.loop.config import LearnerConfig
from learners.loop.logger import RunLogger
from learners.loop.optim import adamw
from learners.models.agents import enable_gradient_checkpointing
from learners.models.fixed import Frozen
from learners.models.lora import attach_adapters
from learners.parallel.distributed import Distributed
from learners.parallel.fsdp import Sharding
from learners.parallel.placement import resolve_devices
from learners.rollout import RolloutEngine
from learners.rollout.backends import backend_for

__all__ = ["agent_optimizers", "attach_lora", "build_envs", "check_eval_hooks", "checked_config", "open_logger",
           "place_models", "prepare_fixed_seats", "reference_models", "seat_devices", "start_engine"]

EnvSource = str | TextParallelEnv | Callable[[], TextParallelEnv] | None
"""What `env=` and `eval_env=` take: a registered id, an env, a zero-argument factory, or None."""


def checked_config(args: LearnerConfig | None, config_class: type[LearnerConfig]) -> LearnerConfig:
    """`args`, or the defaults `config_class()` when None; a TypeError when it is not a `config_class`."""
    cfg = args if args is not None else config_class()
    if not isinstance(cfg, config_class):
        raise TypeError(f"args must be a {config_class.__name__}, got {type(cfg).__name__}.")
    return cfg


def check_eval_hooks(eval_logger: Callable[..., Any] | None, eval_aggregator: Callable[..., Any] | None) -> None:
    """`eval_logger` feeds `eval_aggregator`: a ValueError unless both or neither are given."""
    if (eval_logger is None) != (eval_aggregator is None):
        raise ValueError("eval_logger and eval_aggregator work together: pass both or neither.")


def build_envs(env: EnvSource, train_dataset: Sequence[dict[str, Any]] | None, eval_env: EnvSource,
               eval_dataset: Sequence[dict[str, Any]] | None, *, num_seats: int, cfg: LearnerConfig,
               reward_func: Callable[..., Any] | None, formatters: Any,
               external_transition: Callable[..., Sequence[str]] | None,
               reward_processor: Callable[[float], float] | None) -> tuple[TextParallelEnv, TextParallelEnv]:
    """The training env and the evaluation env (the training env itself when neither `eval_env` nor
    `eval_dataset` is given), each from an id, an env, a factory or a dataset (`learners.loop.data.build_env`).

    The training env must have `num_seats` agents; a config `num_turns` the given env does not play warns."""
    task = dict(reward_func=reward_func, num_agents=num_seats, formatters=formatters, transition=external_transition,
                reward_processor=reward_processor, cfg=cfg)
    train = data.build_env(env, train_dataset, what="env", **task)
    if len(train.possible_agents) != num_seats:
        raise ValueError(
            f"the environment has {len(train.possible_agents)} agents but {num_seats} were configured "
            f"(num_agents / agents); make them equal."
        )
    if env is not None and cfg.num_turns not in (1, train.num_turns):
        warnings.warn(f"num_turns={cfg.num_turns} in the config does not apply to this env, which plays "
                      f"{train.num_turns} turn(s); set it on the env (comlrl_env.make(id, num_turns=...)). "
                      "The run records the env's count as env_num_turns.", stacklevel=3)
    has_eval = eval_env is not None or eval_dataset is not None
    return train, data.build_env(eval_env, eval_dataset, what="eval_env", **task) if has_eval else train


def seat_devices(cfg: LearnerConfig, dist: Distributed, num_seats: int) -> list[torch.device]:
    """The device of every seat, fixed ones included (`agent_devices`, `parallel_training`; under torchrun
    the process's own)."""
    return resolve_devices(cfg.agent_devices, num_seats, local_rank=dist.local_rank,
                           parallel_training=cfg.parallel_training)


def attach_lora(agents: list[torch.nn.Module], cfg: LearnerConfig, model_index: list[int]) -> list[torch.nn.Module]:
    """With `peft_config`, each model's LoRA adapter on its (possibly shared) base; without, `agents` as they are."""
    if cfg.peft_config is None:
        return agents
    data.seed_everything(cfg.seed)  # adapters start identical across runs and ranks
    return attach_adapters(agents, cfg.peft_config, cfg.merge_adapters_on_save, model_index)


def place_models(agents: list[torch.nn.Module], model_agents: list[list[int]], devices: list[torch.device],
                 sharding: Sharding, gradient_checkpointing: bool) -> None:
    """Move each model (once, under its first agent) to its device, sharded there under FSDP, and turn on
    gradient checkpointing when asked."""
    for first, *_ in model_agents:
        sharding.place(agents[first], devices[first])
        if gradient_checkpointing:
            enable_gradient_checkpointing(agents[first])


def reference_models(agents: list[torch.nn.Module], model_agents: list[list[int]], model_index: list[int],
                     cfg: LearnerConfig, sharding: Sharding, num_seats: int, devices: list[torch.device],
                     seats: list[int]) -> list[torch.nn.Module]:
    """Frozen copies of the agents as loaded, one per trained agent (a self-play model's copy serves all its
    seats), on `reference_devices` (default: each agent's device); none without `reference_kl_enabled`."""
    if not cfg.reference_kl_enabled:
        return []
    placed = resolve_devices(cfg.reference_devices, num_seats, what="reference", default=devices, seats=seats)
    copies = [sharding.place(sharding.copy(agents[a[0]]), placed[a[0]], frozen=True).eval().requires_grad_(False)
              for a in model_agents]
    return [copies[m] for m in model_index]


def prepare_fixed_seats(fixed: dict[int, FixedPolicy], cfg: LearnerConfig, devices: list[torch.device],
                        model_config: dict[str, Any], tokenizer: Any) -> None:
    """Load every `Frozen` seat on its seat's device (`devices`: every seat's), sampling with the config's
    settings for that seat, with the learner's `tokenizer` as given: the one for every seat, or this seat's
    entry of a per-seat list (a list of another length gives none: the seat's own is loaded)."""
    per_seat = isinstance(tokenizer, (list, tuple))
    for seat, policy in fixed.items():
        if isinstance(policy, Frozen):
            own = tokenizer[seat] if per_seat and len(tokenizer) == len(devices) else None if per_seat else tokenizer
            policy.prepare(cfg.generation_settings().for_agent(seat), devices[seat], model_config, own)


def agent_optimizers(agents: list[torch.nn.Module], model_agents: list[list[int]],
                     cfg: LearnerConfig) -> list[torch.optim.Optimizer]:
    """One AdamW per model: a model in several seats (self-play) steps once per minibatch."""
    return [adamw(agents[a[0]].parameters(), cfg.agent_learning_rate, cfg.weight_decay) for a in model_agents]


def start_engine(cfg: LearnerConfig, agents: list[torch.nn.Module], tokenizers: list[Any],
                 fixed: dict[int, FixedPolicy], seats: list[int], optimizers: list[torch.optim.Optimizer],
                 model_index: list[int]) -> RolloutEngine:
    """The rollout engine on the filled models, with its generation backend (`generation_backend`), which
    follows each agent's optimizer so that new weights reach it after every step."""
    engine = RolloutEngine(agents, tokenizers, cfg.generation_settings(), fixed,
                           backend_for(cfg, agents, tokenizers, seats))
    engine.backend.follow([optimizers[m] for m in model_index])
    return engine


def open_logger(cfg: LearnerConfig, dist: Distributed, wandb_config: dict[str, Any] | None,
                run_config: dict[str, Any], run_id: str) -> RunLogger:
    """The run's logger. Only rank 0 writes files, opens wandb and shows a progress bar; nothing opens before
    `learn()` starts it."""
    main = dist.is_main
    return RunLogger(cfg.output_dir if main else None, wandb_config if main else None, run_config,
                     cfg.verbose and main, run_id=run_id, tensorboard="tensorboard" in (cfg.report_to or ()),
                     completions_every=cfg.log_completions_steps)
