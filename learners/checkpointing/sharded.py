"""The sharded part of a training checkpoint: models split by FSDP and their optimizers, one file per rank.

Under `sharding="fsdp"` no rank holds a whole model, so `checkpoint-N/shards/` is written by all ranks at once
through torch.distributed.checkpoint (DCP) in its safetensors format: rank r writes the pieces it holds to
`shard-0000{r+1}-model-00001-of-00001.safetensors`, each piece's place in the whole tensor recorded in the
file's header, and rank 0 writes `optimizers.json`. Keys are flat:

    {module}/model/{name}             a weight (`get_model_state_dict`; tied aliases stored once)
    {module}/optim/{parameter}/{key}  an AdamW state of a parameter: step, exp_avg, exp_avg_sq
                                      (`get_optimizer_state_dict`, parameters by their names)

`optimizers.json` holds each optimizer's hyperparameters (its `param_groups`: lr, betas, ..., parameter
names) and the number of ranks that wrote the shards. Nothing is pickled: safetensors and JSON.

Resume validates first (files, modules, every weight's name, global shape and dtype, every optimizer state's
parameter), then loads in place: each rank reads the pieces of its own shards, so a checkpoint written by N
ranks also loads on another number of ranks (DCP reshards; the ranks' sampling streams then start afresh, see
`learners.checkpointing.rng`). A checkpoint resumed on as many ranks as wrote it continues bit for bit.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from learners.parallel.distributed import Distributed
from learners.parallel.fsdp import fsdp_root

__all__ = ["SHARDS_DIR", "ShardedState"]

SHARDS_DIR = "shards"
GROUPS_FILE = "optimizers.json"


class ShardedState:
    """The FSDP-sharded modules of a training state (by checkpoint name) and the optimizer of each.

    `split` builds it from a learner's modules and optimizers; `write` (every rank), `place` (rank 0),
    `check` and `load` (every rank) are what `learners.checkpointing.checkpoint` calls.
    """

    def __init__(self, modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer],
                 dist: Distributed) -> None:
        self.modules, self.optimizers, self.dist = modules, optimizers, dist
        self.staged: str | None = None  # where `write` put this rank's shards, until `place` moves them

    @classmethod
    def split(cls, modules: dict[str, nn.Module], optimizers: list[torch.optim.Optimizer], dist: Distributed
              ) -> tuple["ShardedState | None", dict[str, nn.Module], list[torch.optim.Optimizer]]:
        """`(sharded part, other modules, other optimizers)`: modules sharded with FSDP, each with the optimizer
        that steps its parameters, go to the sharded part (None when there are none)."""
        sharded = {name: m for name, m in modules.items() if fsdp_root(m) is not None}
        if not sharded:
            return None, modules, optimizers
        owner = {id(p): name for name, m in sharded.items() for p in m.parameters()}
        mine: dict[str, torch.optim.Optimizer] = {}
        rest = []
        for opt in optimizers:
            name = next((owner[id(p)] for g in opt.param_groups for p in g["params"] if id(p) in owner), None)
            if name is None:
                rest.append(opt)
            else:
                mine[name] = opt
        plain = {name: m for name, m in modules.items() if name not in sharded}
        return cls(sharded, mine, dist), plain, rest

    def summary(self) -> dict[str, Any]:
        """What `state.json` records of the shards."""
        return {"world_size": self.dist.world_size, "modules": sorted(self.modules),
                "optimizers": sorted(self.optimizers)}

    # ----- writing -----------------------------------------------------------------

    def write(self, checkpoint: str, tag: str) -> None:
        """Write every rank's shards beside the checkpoint directory `checkpoint`, in a hidden directory whose
        name holds the staging `tag` (a crash leaves it for `remove_staging`). Collective."""
        parent, name = os.path.split(checkpoint)
        self.staged = os.path.join(parent, f".{name}{tag}{SHARDS_DIR}")
        if self.dist.is_main:
            shutil.rmtree(self.staged, ignore_errors=True)
            os.makedirs(self.staged)
        self.dist.barrier()
        tensors, groups = self.flat_state()
        dcp.save(tensors, storage_writer=HuggingFaceStorageWriter(self.staged, save_distributed=True))
        if self.dist.is_main:
            with open(os.path.join(self.staged, GROUPS_FILE), "w", encoding="utf-8") as f:
                json.dump({"world_size": self.dist.world_size, "param_groups": groups}, f, indent=1)
        self.dist.barrier()

    def place(self, out: str) -> None:
        """Move the written shards into the checkpoint being assembled in `out` (rank 0, before state.json)."""
        if self.staged is None:
            raise RuntimeError("ShardedState.place() needs write() first.")
        os.rename(self.staged, os.path.join(out, SHARDS_DIR))
        self.staged = None

    def flat_state(self) -> tuple[dict[str, torch.Tensor], dict[str, list[dict[str, Any]]]]:
        """The flat tensors to save (this rank's shards; see the module docstring) and each optimizer's
        `param_groups` as JSON values."""
        tensors: dict[str, torch.Tensor] = {}
        groups: dict[str, list[dict[str, Any]]] = {}
        for name, module in self.modules.items():
            tensors.update({f"{name}/model/{k}": v for k, v in _distinct(get_model_state_dict(module)).items()})
            opt = self.optimizers.get(name)
            if opt is None:
                continue
            osd = get_optimizer_state_dict(module, opt)
            for param, state in osd["state"].items():
                for key, value in state.items():
                    if not isinstance(value, torch.Tensor):
                        raise TypeError(f"optimizer state {param}.{key} of {name} is a {type(value).__name__}; "
                                        "sharded checkpoints hold tensors only (an AdamW keeps tensors).")
                    tensors[f"{name}/optim/{param}/{key}"] = value
            groups[name] = [{k: _plain(v) for k, v in g.items()} for g in osd["param_groups"]]
        return tensors, groups

    # ----- reading -----------------------------------------------------------------

    def check(self, checkpoint: str) -> None:
        """Raise ValueError when `checkpoint/shards` would not load into these modules; changes nothing."""
        directory = os.path.join(checkpoint, SHARDS_DIR)
        try:
            with open(os.path.join(directory, GROUPS_FILE), encoding="utf-8") as f:
                groups = json.load(f)["param_groups"]
            saved = HuggingFaceStorageReader(directory).read_metadata().state_dict_metadata
        except (OSError, KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"its {SHARDS_DIR}/ cannot be read ({type(exc).__name__}: {exc})") from exc
        if sorted(groups) != sorted(self.optimizers):
            raise ValueError(f"its shards hold the optimizers of {sorted(groups)}, this learner's are "
                             f"{sorted(self.optimizers)}")
        for name, module in self.modules.items():
            own = {k: v for k, v in _distinct(get_model_state_dict(module)).items()}
            stored = {k.split("/", 2)[2]: m for k, m in saved.items() if k.startswith(f"{name}/model/")}
            if set(stored) != set(own):
                missing, extra = sorted(set(own) - set(stored))[:3], sorted(set(stored) - set(own))[:3]
                raise ValueError(f"its {name} weights do not match this model (missing {missing}, unexpected {extra})")
            for key, meta in stored.items():
                if tuple(meta.size) != tuple(own[key].shape) or meta.properties.dtype != own[key].dtype:
                    raise ValueError(f"{name}.{key} is {tuple(meta.size)} {meta.properties.dtype}, the model has "
                                     f"{tuple(own[key].shape)} {own[key].dtype}")
            params = {n: p for n, p in module.named_parameters()}
            for key, meta in saved.items():
                if key.startswith(f"{name}/optim/"):
                    param = params.get(key.split("/")[2])
                    if param is None or (len(meta.size) and tuple(meta.size) != tuple(param.shape)):
                        raise ValueError(f"its optimizer state {key} belongs to no parameter of this {name}")

    def load(self, checkpoint: str) -> None:
        """Load `checkpoint/shards` (checked by `check`) into the modules and optimizers in place. Collective."""
        directory = os.path.join(checkpoint, SHARDS_DIR)
        with open(os.path.join(directory, GROUPS_FILE), encoding="utf-8") as f:
            groups = json.load(f)["param_groups"]
        saved = set(HuggingFaceStorageReader(directory).read_metadata().state_dict_metadata)
        targets: dict[str, torch.Tensor] = {}
        models, optims = {}, {}
        for name, module in self.modules.items():
            models[name] = get_model_state_dict(module)
            targets.update({f"{name}/model/{k}": v for k, v in _distinct(models[name]).items()})
            if name in self.optimizers:
                # Fresh optimizers get zero states here (a step at lr 0), the room the saved ones load into.
                optims[name] = get_optimizer_state_dict(module, self.optimizers[name])
                for param, state in optims[name]["state"].items():
                    targets.update({k: v for k, v in ((f"{name}/optim/{param}/{key}", v) for key, v in state.items())
                                    if k in saved})
        dcp.load(targets, storage_reader=HuggingFaceStorageReader(directory))
        for name, module in self.modules.items():
            set_model_state_dict(module, models[name])
            if name not in self.optimizers:
                continue
            state = {param: {key: targets[f"{name}/optim/{param}/{key}"] for key in entry
                             if f"{name}/optim/{param}/{key}" in saved}
                     for param, entry in optims[name]["state"].items()}
            state = {param: entry for param, entry in state.items() if entry}  # parameters that never stepped
            set_optimizer_state_dict(module, self.optimizers[name], {
                "state": state, "param_groups": [_from_json(g) for g in groups[name]]})


def _distinct(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` without aliases of one tensor (tied embeddings): the first name of each, in order."""
    seen, out = set(), {}
    for key, value in state.items():
        local = value.to_local() if hasattr(value, "to_local") else value
        mark = (local.untyped_storage().data_ptr(), local.storage_offset(), tuple(local.shape)) if local.numel() \
            else None
        if mark is None or mark not in seen:
            out[key] = value
            seen.add(mark)
    return out


def _plain(value: Any) -> Any:
    """A `param_groups` value as JSON: numbers, bools, None, strings and lists of them (tensor scalars: numbers)."""
    if isinstance(value, torch.Tensor):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"an optimizer setting of type {type(value).__name__} cannot be saved as JSON.")


def _from_json(group: dict[str, Any]) -> dict[str, Any]:
    """A parameter group read back: `betas` (the only tuple an AdamW holds) as a tuple again."""
    return {k: tuple(v) if k == "betas" else v for k, v in group.items()}
