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

`state.json` records every file of `shards/` with its size and SHA-256 (under `files`, as for the other files of
a checkpoint) and the rank that wrote it (`sharded.files`). Resume checks, before anything changes: that
`shards/` holds exactly the recorded files, each of its recorded size and digest (a missing, truncated, flipped
or swapped shard, or one copied in from another checkpoint, is named with its rank); every weight's name, global
shape and dtype and every optimizer state's parameter; then each rank reads its pieces into fresh tensors and
validates them (finite weights, AdamW states as `validation.py` checks them without FSDP). Only then are they
copied into the modules and optimizers. Each rank reads the pieces of its own shards, so a checkpoint written
by N ranks also loads on another number of ranks (DCP reshards; the ranks' sampling streams then start afresh,
see `learners.checkpointing.rng`). A checkpoint resumed on as many ranks as wrote it continues bit for bit.
"""

from __future__ import annotations

import json
import os
import re
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

from learners.checkpointing.digests import open_verified
from learners.checkpointing.validation import all_finite, check_group, check_param_state
from learners.parallel.distributed import Distributed
from learners.parallel.fsdp import fsdp_root

__all__ = ["SHARDS_DIR", "ShardedState"]

SHARDS_DIR = "shards"
GROUPS_FILE = "optimizers.json"
_RECORDED = re.compile(r"shards/(?!\.\.?$)[A-Za-z0-9_.-]+")
_SHARD_FILE = re.compile(r"shard-(\d{5})-model-\d{5}-of-\d{5}\.safetensors")
"""DCP's name for the file of rank r: `shard-{r+1:05d}-model-...` (`HuggingFaceStorageWriter(save_distributed)`)."""


class ShardedState:
    """The FSDP-sharded modules of a training state (by checkpoint name) and the optimizer of each.

    `split` builds it from a learner's modules and optimizers; `write` (every rank), `place` (rank 0),
    `check`, `read` and `apply` (every rank) are what `learners.checkpointing.checkpoint` calls.
    """

    def __init__(self, modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer],
                 dist: Distributed) -> None:
        self.modules, self.optimizers, self.dist = modules, optimizers, dist
        self.staged: str | None = None  # where `write` put this rank's shards, until `place` moves them
        self.placed: dict[str, int | None] = {}  # the files `place` moved into the checkpoint: the rank of each

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
        """What `state.json` records of the shards: the world size, modules, optimizers and the rank that wrote
        each file (`files`, by its path in the checkpoint; None for `optimizers.json`)."""
        return {"world_size": self.dist.world_size, "modules": sorted(self.modules),
                "optimizers": sorted(self.optimizers), "files": dict(self.placed)}

    def files(self) -> list[str]:
        """The files `place` moved into the checkpoint, by their paths in it (their digests go to `state.json`)."""
        return sorted(self.placed)

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
        self.placed = {f"{SHARDS_DIR}/{name}": _writer(name) for name in sorted(os.listdir(os.path.join(out, SHARDS_DIR)))}

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

    def check(self, checkpoint: str, saved: dict[str, Any]) -> None:
        """Raise ValueError when `checkpoint/shards` is not what its `state.json` (`saved`) records (`verify`) or
        would not load into these modules and optimizers; changes nothing. Collective."""
        self.verify(checkpoint, saved)
        directory = os.path.join(checkpoint, SHARDS_DIR)
        try:
            with open(os.path.join(directory, GROUPS_FILE), encoding="utf-8") as f:
                groups = json.load(f)["param_groups"]
            stored = HuggingFaceStorageReader(directory).read_metadata().state_dict_metadata
        except (OSError, KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"its {SHARDS_DIR}/ cannot be read ({type(exc).__name__}: {exc})") from exc
        if not isinstance(groups, dict) or sorted(groups) != sorted(self.optimizers):
            raise ValueError(f"its shards hold the optimizers of {sorted(groups)}, this learner's are "
                             f"{sorted(self.optimizers)}")
        for name, optimizer in self.optimizers.items():
            own = optimizer.param_groups
            if not isinstance(groups[name], list) or len(groups[name]) != len(own):
                raise ValueError(f"{SHARDS_DIR}/{GROUPS_FILE} holds other parameter groups of {name}'s optimizer")
            for gi, group in enumerate(groups[name]):
                try:
                    check_group(gi, group, own[gi])
                except ValueError as exc:
                    raise ValueError(f"{SHARDS_DIR}/{GROUPS_FILE}: the optimizer of {name}: {exc}") from None
        for name, module in self.modules.items():
            own = _distinct(get_model_state_dict(module))
            weights = {k.split("/", 2)[2]: m for k, m in stored.items() if k.startswith(f"{name}/model/")}
            if set(weights) != set(own):
                missing, extra = sorted(set(own) - set(weights))[:3], sorted(set(weights) - set(own))[:3]
                raise ValueError(f"its {name} weights do not match this model (missing {missing}, unexpected {extra})")
            for key, meta in weights.items():
                if tuple(meta.size) != tuple(own[key].shape) or meta.properties.dtype != own[key].dtype:
                    raise ValueError(f"{name}.{key} is {tuple(meta.size)} {meta.properties.dtype}, the model has "
                                     f"{tuple(own[key].shape)} {own[key].dtype}")
            params = dict(module.named_parameters())
            for key, meta in stored.items():
                if key.startswith(f"{name}/optim/"):
                    param = params.get(key.split("/")[2])
                    if param is None or (len(meta.size) and tuple(meta.size) != tuple(param.shape)):
                        raise ValueError(f"its optimizer state {key} belongs to no parameter of this {name}")

    def verify(self, checkpoint: str, saved: dict[str, Any]) -> None:
        """Raise ValueError unless `checkpoint/shards` holds exactly the files its `state.json` (`saved`) records,
        each of the recorded size and SHA-256 (`digests.py`); the message names the file and the rank that wrote
        it. Rank r hashes files r, r + N, ...; the ranks then share what they found and all raise the same error
        (collective). Checkpoints written before shards had digests: every writing rank's file must be there."""
        summary = saved.get("sharded") if isinstance(saved.get("sharded"), dict) else {}
        writers, records = summary.get("files"), saved.get("files") or {}
        if writers is None:  # written before the shards had digests: a file per rank, and optimizers.json
            world = summary.get("world_size")
            if isinstance(world, bool) or not isinstance(world, int) or world < 1:
                raise ValueError(f"its state.json records no shard files (sharded.world_size is {world!r})")
            writers = {f"{SHARDS_DIR}/{GROUPS_FILE}": None,
                       **{f"{SHARDS_DIR}/shard-{r + 1:05d}-model-00001-of-00001.safetensors": r for r in range(world)}}
            records = dict.fromkeys(writers)
        if not isinstance(writers, dict) or not all(
                _RECORDED.fullmatch(str(n)) and (r is None or isinstance(r, int)) for n, r in writers.items()):
            raise ValueError(f"its state.json records shard files that are not {SHARDS_DIR}/<name>: rank")
        directory = os.path.join(checkpoint, SHARDS_DIR)
        present = os.listdir(directory) if os.path.isdir(directory) else []
        extra = sorted(f"{SHARDS_DIR}/{n}" for n in present if f"{SHARDS_DIR}/{n}" not in writers)
        if extra:
            raise ValueError(f"{extra[0]} is a file its state.json does not record (copied in from another "
                             "checkpoint?); DCP would read it: remove it")
        found = []
        for name in sorted(writers)[self.dist.rank::self.dist.world_size]:
            try:
                if name not in records:
                    raise ValueError(f"{name} has no SHA-256 recorded in state.json")
                open_verified(checkpoint, name, records[name]).close()
            except ValueError as exc:
                found.append((name, str(exc) if writers[name] is None else f"rank {writers[name]}'s shard {exc}"))
        found = sorted(item for part in self.dist.gather(found) for item in part)
        if found:
            raise ValueError(found[0][1])

    def read(self, checkpoint: str) -> dict[str, Any]:
        """This rank's pieces of `checkpoint/shards` (checked by `check`), read into fresh tensors and validated:
        weights finite, AdamW states as without FSDP (`validation.check_param_state`: finite, second moments
        >= 0, whole steps). Nothing changes; `apply` loads what this returns. Collective: a problem on any rank
        raises the same ValueError on every rank."""
        directory = os.path.join(checkpoint, SHARDS_DIR)
        with open(os.path.join(directory, GROUPS_FILE), encoding="utf-8") as f:
            groups = json.load(f)["param_groups"]
        stored = HuggingFaceStorageReader(directory).read_metadata().state_dict_metadata
        live: dict[str, torch.Tensor] = {}
        fresh: dict[str, torch.Tensor] = {}
        for name, module in self.modules.items():
            weights = {f"{name}/model/{k}": v for k, v in _distinct(get_model_state_dict(module)).items()}
            live.update(weights)
            fresh.update({k: torch.empty_like(v) for k, v in weights.items()})
            params = dict(module.named_parameters())
            for key, meta in stored.items():  # the states of the optimizer: pieces shaped like their parameter's
                if key.startswith(f"{name}/optim/"):
                    param = params[key.split("/")[2]].detach()
                    dtype = meta.properties.dtype
                    fresh[key] = torch.empty_like(param, dtype=dtype) if len(meta.size) else torch.empty((), dtype=dtype)
        dcp.load(fresh, storage_reader=HuggingFaceStorageReader(directory))
        problems = self._problems(fresh)
        problems = [p for part in self.dist.gather(problems) for p in part]
        if problems:
            raise ValueError(problems[0])
        return {"live": live, "fresh": fresh, "groups": groups}

    def apply(self, read: dict[str, Any]) -> None:
        """Load what `read` returned into the modules (in place) and their optimizers. Collective."""
        fresh = read["fresh"]
        with torch.no_grad():
            for key, target in read["live"].items():
                _local(target).copy_(_local(fresh[key]))
        for name, module in self.modules.items():
            if name not in self.optimizers:
                continue
            state: dict[str, dict[str, torch.Tensor]] = {}
            for key, value in fresh.items():
                if key.startswith(f"{name}/optim/"):
                    _, _, param, entry = key.split("/", 3)
                    state.setdefault(param, {})[entry] = value
            set_optimizer_state_dict(module, self.optimizers[name], {
                "state": state, "param_groups": [_from_json(g) for g in read["groups"][name]]})

    def _problems(self, fresh: dict[str, torch.Tensor]) -> list[str]:
        """What is wrong with this rank's pieces `fresh` (see `read`), as messages naming the tensor and rank."""
        problems = []
        for name, module in self.modules.items():
            params = dict(module.named_parameters())
            for key, value in fresh.items():
                where = f"{SHARDS_DIR}: {key} (rank {self.dist.rank}'s piece)"
                if key.startswith(f"{name}/model/") and not all_finite(_local(value)):
                    problems.append(f"{where} holds NaN or infinite values")
                elif key.startswith(f"{name}/optim/"):
                    _, _, param, entry = key.split("/", 3)
                    try:
                        check_param_state(where, entry, _local(value), _local(params[param].detach()), None)
                    except ValueError as exc:
                        problems.append(str(exc))
        return problems


def _writer(name: str) -> int | None:
    """The rank that wrote the shard file `name` (None for `optimizers.json`)."""
    match = _SHARD_FILE.fullmatch(name)
    return int(match.group(1)) - 1 if match else None


def _local(t: torch.Tensor) -> torch.Tensor:
    """What this rank holds of `t`: a DTensor's local piece, a plain tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


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
