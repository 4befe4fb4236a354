"""What a training checkpoint holds, as plain data a learner hands to `learners.checkpoint`.

`Learner.training_state()` builds a `TrainingState`; `save_checkpoint(path, state)`
writes it and `load_checkpoint(path, state)` loads into its modules, optimizers,
schedulers and stateful objects in place. The small pure helpers below compute
its plain fields from the learner's objects: `find_stateful` (which callbacks,
datasets and functions have `state_dict()`), `config_defaults` and
`qualified_name`; `learners.checkpointing.fingerprints.data_fingerprint` computes `data`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import torch

from learners.parallel.distributed import Distributed

__all__ = ["StateHooks", "Stateful", "TrainingState", "config_defaults", "find_stateful", "modules_as_saved",
           "qualified_name"]


@runtime_checkable
class Stateful(Protocol):
    """An object whose state a checkpoint saves and restores (callbacks, datasets, reward functions, ...)."""

    def state_dict(self) -> dict[str, Any]:
        """The state: tensors, numbers, strings, bools, None, lists, tuples and dicts only."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict()` returned."""


@dataclasses.dataclass
class StateHooks:
    """A `Stateful` made of two functions, e.g. a learner's `extra_state` and `load_extra_state`."""

    state_dict: Callable[[], dict[str, Any]]
    load_state_dict: Callable[[dict[str, Any]], None]


@dataclasses.dataclass
class TrainingState:
    """Everything a checkpoint holds. Loading mutates the objects in place; the plain fields are compared."""

    learner: str
    """The learner's class name (`MAGRPO`)."""
    learner_class: str
    """The learner's `module.qualname`; a checkpoint loads only into the same class."""
    library_version: str | None
    """The version of this library that wrote it."""
    num_agents: int
    """Agents in the team."""
    config: dict[str, Any]
    """`dataclasses.asdict(args)`; on resume only `PORTABLE_FIELDS` and `*_dir` fields may differ."""
    config_defaults: dict[str, Any]
    """Each config field's default (`config_defaults(args)`): a field missing from an older checkpoint
    counts as unchanged while the current value is its default."""
    modules: dict[str, torch.nn.Module]
    """Every module whose weights are saved, by a stable name (`agent_0`, `critic_0`, `reference_0`, ...)."""
    optimizers: list[torch.optim.Optimizer]
    """Optimizers, in a stable order."""
    schedulers: list[Any]
    """LR schedulers, in a stable order."""
    stateful: list[tuple[str, Stateful]]
    """(slot name, object) of every stateful callback, dataset and function (`find_stateful`)."""
    extra: Stateful | None
    """Learner-specific state (`callbacks.pt["extra"]`), or None."""
    tokenizers: list[Any]
    """One tokenizer per agent; the checkpoint stores their fingerprints."""
    data: dict[str, Any]
    """The data fingerprint (`data_fingerprint`) at the epoch saved or resumed."""
    batches_per_epoch: int
    """Rollouts per epoch: a resumed `batch_in_epoch` may not exceed it."""
    progress: dict[str, int]
    """`epoch`, `batch_in_epoch`, `rollouts_done` and `env_steps`."""
    run_id: str
    """The run's id: checkpoints of one run share it."""
    sequence: int
    """This save's number in the run (`checkpoint-{sequence}`)."""
    wandb: dict[str, Any] | None
    """The wandb run's `id`, `project`, `entity` and `name` (the known ones), or None."""
    dist: Distributed | None
    """The torchrun process group when the run spans several processes, else None."""
    shards: Any = None
    """The modules sharded with FSDP and their optimizers (`learners.checkpointing.sharded.ShardedState`), written
    by every rank to `shards/`; None without FSDP. `modules` and `optimizers` then hold only the others."""


def find_stateful(callbacks: Sequence[Any], envs: dict[str, Any], functions: dict[str, Any],
                  owner: object = None) -> list[tuple[str, Stateful]]:
    """(slot, object) of everything with `state_dict()` and `load_state_dict()`, in a stable order.

    Looks at the `callbacks`, each env of `envs` (by label) and its dataset, reward function,
    transition, reward processor and formatters, then the named `functions`. Each object counts
    once, under its first slot; None, `owner`, modules and optimizers (saved on their own) are skipped.
    """
    candidates: list[tuple[str, Any]] = [(f"callbacks[{i}]", c) for i, c in enumerate(callbacks)]
    for label, env in envs.items():
        if env is None:
            continue
        candidates.append((label, env))
        for attr in ("dataset", "reward_func", "external_transition", "reward_processor"):
            candidates.append((f"{label}.{attr}", getattr(env, attr, None)))  # only a DatasetEnv has them
        for i, fmt in enumerate(getattr(env, "formatters", None) or []):
            candidates.append((f"{label}.formatters[{i}]", fmt))
    candidates += functions.items()
    out, seen = [], set()
    for slot, obj in candidates:
        if obj is None or id(obj) in seen or obj is owner or isinstance(obj, (torch.nn.Module,
                                                                              torch.optim.Optimizer)):
            continue
        if callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)):
            seen.add(id(obj))
            out.append((slot, obj))
    return out


def config_defaults(config: Any) -> dict[str, Any]:
    """The default of each field of the config dataclass `config` (fields without a default are left out)."""
    out = {}
    for field in dataclasses.fields(config):
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            continue
        nested = dataclasses.is_dataclass(value) and not isinstance(value, type)
        out[field.name] = dataclasses.asdict(value) if nested else value  # as asdict(config) has it
    return out


def qualified_name(cls: type) -> str:
    """`module.qualname` of a class."""
    return f"{cls.__module__}.{cls.__qualname__}"


def modules_as_saved(modules: dict[str, torch.nn.Module], saved: set[str],
                     old_names: dict[str, str]) -> dict[str, torch.nn.Module]:
    """`modules` under the names a checkpoint saved them (`saved`): as they are, or renamed by `old_names`
    (current name -> an older version's name) when the checkpoint has exactly the old names."""
    renamed = {old_names.get(name, name): module for name, module in modules.items()}
    return renamed if set(modules) != saved and set(renamed) == saved else modules
