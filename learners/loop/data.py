"""Where episodes come from and in which order: the env a learner trains on (`build_env`), which task
instances a run visits, in which order, and how a rollout is cut into minibatches. The orders are pure
functions of the seed and counters, so a resumed run repeats them exactly.

- An epoch visits every task instance of a finite env once, in a seeded shuffled order (or
  `episodes_per_epoch` seeded draws of a procedural env); each episode gets its own reset seed.
- A rollout's items (groups or samples) are cut into minibatches by a seeded shuffle that depends on the
  seed, the rollout counter and the pass over the rollout (`ppo_epochs`) only.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import torch

import comlrl_env
from comlrl_env import DatasetEnv, TextParallelEnv

__all__ = ["build_env", "epoch_order", "epoch_size", "minibatch_order", "reset_roots", "seed_everything"]

PROCEDURAL_EPOCH = 64
"""Task instances per epoch of an env without a finite task list, unless `episodes_per_epoch` says."""


def build_env(env: Any, dataset: Any, *, what: str, reward_func: Any, num_agents: int, formatters: Any,
              transition: Any, reward_processor: Any, cfg: Any) -> TextParallelEnv:
    """The env `env` names (an id), is, or builds (a factory), or `dataset` + `reward_func` wrapped in a
    `DatasetEnv` with the config's episode settings (`num_turns`, ...); `what` names the argument in errors."""
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
        dataset, reward_func, num_agents=num_agents, formatters=formatters, external_transition=transition,
        num_turns=cfg.num_turns, reward_processor=reward_processor,
        external_prompt_passthrough=cfg.external_prompt_passthrough,
        early_termination_threshold=cfg.early_termination_threshold,
    )


def epoch_size(env: TextParallelEnv, episodes_per_epoch: int | None = None) -> int:
    """Episodes per epoch: `episodes_per_epoch`, else every task of a finite env, else `PROCEDURAL_EPOCH`."""
    if episodes_per_epoch is not None:
        return episodes_per_epoch
    return env.num_tasks if env.num_tasks is not None else PROCEDURAL_EPOCH


def epoch_order(env: TextParallelEnv, seed: int, epoch: int, size: int, shuffle: bool = True
                ) -> list[tuple[int, int | None]]:
    """`(reset seed, task index or None)` of each of the `size` episodes of `epoch`.

    Negative epochs name orders outside training (-1: evaluation; MARLHF's preference stages use -2, -3, ...).
    Finite envs: a fresh permutation of the task indices per pass over them (index order without
    `shuffle`); procedural envs: task index None and the reset seed alone picks the instance.
    """
    gen = torch.Generator().manual_seed(seed * 100_003 + epoch + 1)
    seeds = torch.randint(0, 2**31 - 1, (size,), generator=gen).tolist()
    if env.num_tasks is None:
        return [(s, None) for s in seeds]
    n = env.num_tasks
    if shuffle:
        idx = torch.cat([torch.randperm(n, generator=gen) for _ in range(math.ceil(size / n))])[:size]
    else:
        idx = torch.arange(size) % n
    return list(zip(seeds, idx.tolist()))


def reset_roots(env: TextParallelEnv, batch: list[tuple[int, int | None]]) -> list[TextParallelEnv]:
    """One independent copy of `env` per `(reset seed, task index)`, each reset to its episode's start."""
    roots = []
    for seed, index in batch:
        env.reset(seed=seed, options=None if index is None else {"task_index": index})
        roots.append(env.clone())
    return roots


def minibatch_order(n: int, size: int, seed: int, rollout: int, pass_index: int = 0) -> list[torch.Tensor]:
    """Indices of `n` items cut into minibatches of `size` (the last may be smaller), in a seeded shuffle.

    The shuffle depends only on the seed, the rollout counter and the pass over the rollout, so every
    pass (`ppo_epochs`) and rollout is reshuffled and a resumed run repeats it.
    """
    gen = torch.Generator().manual_seed(seed * 7919 + rollout + 1_000_003 * pass_index)
    order = torch.randperm(n, generator=gen)
    return [order[i:i + size] for i in range(0, n, size)]


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (sampling draws from torch's global generator)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
