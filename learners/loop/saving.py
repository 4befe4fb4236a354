"""What a learner writes: its export (`save_model`: one loadable folder per trained seat and `comlrl_env.json`),
the settings a run records, and its training state (everything a checkpoint holds, as plain data; writing and
reading it is `learners.checkpointing`). `Learner` calls these with itself; they read its public members only.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Protocol

import torch

import comlrl_env
from comlrl_env import TextParallelEnv
from comlrl_env.policies import FixedPolicy
from learners.checkpointing.fingerprints import data_fingerprint
from learners.checkpointing.sharded import ShardedState
from learners.checkpointing.state import (
    StateHooks,
    TrainingState,
    config_defaults,
    find_stateful,
    modules_as_saved,
    qualified_name,
)
from learners.models.agents import save_gathered
from learners.models.fixed import seat_record
from learners.parallel.distributed import Distributed
from learners.parallel.fsdp import Sharding

__all__ = ["LIBRARY_VERSION", "Saved", "run_config", "save_agents", "state_to_resume", "training_state",
           "write_manifest"]

LIBRARY_VERSION = comlrl_env.__version__
"""The library version recorded in exports and checkpoints."""


class Saved(Protocol):
    """What saving reads of a learner (`learners.Learner` is one)."""

    args: Any  # its config dataclass
    dist: Distributed
    sharding: Sharding
    env: TextParallelEnv
    eval_env: TextParallelEnv
    agents: list[torch.nn.Module]
    tokenizers: list[Any]
    agent_names: list[str | None]
    num_agents: int
    seats: list[int]
    fixed: dict[int, FixedPolicy]
    callbacks: list[Any]
    reward_func: Callable[..., Any] | None
    eval_logger: Callable[..., Any] | None
    eval_aggregator: Callable[..., Any] | None
    epoch: int
    batch_in_epoch: int
    rollouts_done: int
    env_steps: int
    batches_per_epoch: int
    run_id: str
    checkpoint_sequence: int
    wandb_identity: dict[str, Any] | None

    def seat_name(self, a: int) -> str:
        """`agent_{seat}`: the name trained agent `a` is saved under."""

    def checkpoint_modules(self) -> dict[str, torch.nn.Module]:
        """Every trained module by a stable name."""

    def checkpoint_optimizers(self) -> tuple[list[torch.optim.Optimizer], list[Any]]:
        """Optimizers and schedulers, in a stable order."""

    def extra_state(self) -> dict[str, Any]:
        """Learner-specific state for checkpoints."""

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state()` returned."""

    def epoch_size(self, env: TextParallelEnv) -> int:
        """Episodes per epoch of `env`."""

    def epoch_order(self, env: TextParallelEnv, epoch: int, limit: int | None = None,
                    shuffle: bool | None = None) -> list[tuple[int, int | None]]:
        """`(reset seed, task index or None)` of each episode of `epoch`."""

    def training_state(self, epoch: int | None = None) -> TrainingState:
        """Everything a checkpoint holds."""


# ----- the export ------------------------------------------------------------------------------


def save_agents(learner: Saved, output_dir: str) -> None:
    """`output_dir/agent_{seat}/` for every trained agent: model and tokenizer, loadable by the Auto classes (a
    self-play model under each of its seats). Under FSDP every rank calls this (the weights are gathered)."""
    os.makedirs(output_dir, exist_ok=True)
    for a, (model, tok) in enumerate(zip(learner.agents, learner.tokenizers)):
        save_gathered(model, os.path.join(output_dir, learner.seat_name(a)), tok, learner.sharding)


def write_manifest(learner: Saved, output_dir: str) -> None:
    """`output_dir/comlrl_env.json` (rank 0 writes): the learner, the library version, the agents' sources, the
    seats, the env's turn count and the config."""
    if not learner.dist.is_main:
        return
    manifest = {"learner": type(learner).__name__, "library_version": LIBRARY_VERSION,
                "num_agents": learner.num_agents, "agent_sources": learner.agent_names,
                **seat_record(learner.env.possible_agents, learner.fixed),
                "env_num_turns": learner.env.num_turns, "config": dataclasses.asdict(learner.args)}
    with open(os.path.join(output_dir, "comlrl_env.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, default=str)


def run_config(learner: Saved) -> dict[str, Any]:
    """What a run logs as its settings: the config, plus the env's own turn count and seats."""
    return {"learner": type(learner).__name__, "num_agents": learner.num_agents, **dataclasses.asdict(learner.args),
            "env_num_turns": learner.env.num_turns, **seat_record(learner.env.possible_agents, learner.fixed)}


# ----- the training state --------------------------------------------------------------------------


def training_state(learner: Saved, epoch: int | None = None) -> TrainingState:
    """Everything a checkpoint of `learner` holds, as plain data; the data order fingerprinted at `epoch`
    (default: the learner's current epoch)."""
    optimizers, schedulers = learner.checkpoint_optimizers()
    shards, modules, optimizers = ShardedState.split(learner.checkpoint_modules(), optimizers, learner.dist)
    order = learner.epoch_order(learner.env, learner.epoch if epoch is None else epoch)
    return TrainingState(
        learner=type(learner).__name__, learner_class=qualified_name(type(learner)),
        library_version=LIBRARY_VERSION, num_agents=learner.num_agents,
        config=dataclasses.asdict(learner.args), config_defaults=config_defaults(learner.args),
        modules=modules, optimizers=optimizers, schedulers=schedulers, shards=shards,
        stateful=find_stateful(learner.callbacks, {"env": learner.env, "eval_env": learner.eval_env},
                               {"reward_func": learner.reward_func, "eval_logger": learner.eval_logger,
                                "eval_aggregator": learner.eval_aggregator}, owner=learner),
        extra=StateHooks(learner.extra_state, learner.load_extra_state), tokenizers=list(learner.tokenizers),
        data=data_fingerprint(learner.env, learner.epoch_size(learner.env), order),
        batches_per_epoch=learner.batches_per_epoch,
        progress={"epoch": learner.epoch, "batch_in_epoch": learner.batch_in_epoch,
                  "rollouts_done": learner.rollouts_done, "env_steps": learner.env_steps},
        run_id=learner.run_id, sequence=learner.checkpoint_sequence, wandb=learner.wandb_identity,
        dist=learner.dist if learner.dist.enabled else None,
    )


def state_to_resume(learner: Saved, saved: dict[str, Any]) -> TrainingState:
    """The training state at the checkpoint's epoch (its data-order fingerprint depends on it), its modules
    under the saved names: by seat, or by trained-agent index in checkpoints from before seat names."""
    state = learner.training_state(epoch=saved["progress"]["epoch"])
    by_index = {f"{kind}_{learner.seats[a]}": f"{kind}_{a}" for a in range(learner.num_agents)
                for kind in ("agent", "reference")}
    state.modules = modules_as_saved(state.modules, set(saved["shapes"]), by_index)
    return state
