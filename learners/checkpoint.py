"""Training checkpoints: exact resume for every learner, atomic and safe to load.

Layout of `checkpoint_dir/checkpoint-{sequence}/` (`sequence` counts this run's saves: 1, 2, ...):

    state.json                  metadata (read without loading weights): format version, learner class,
                                library version, run id, sequence, progress counters, agent count,
                                config, tokenizer fingerprints, data order fingerprint, parameter
                                names/shapes/dtypes, stateful callbacks, wandb identity, file sizes,
                                and the numerics settings (`numerics`: thread count, device types,
                                dtypes, autocast, deterministic algorithms, library versions)
    models/{name}.safetensors   weights of every trained module (`agent_0`, ...; critics, heads and
                                frozen reference copies when the learner has them)
    optim.pt                    optimizer and LR-scheduler state_dicts   (torch.load(weights_only=True))
    rng.pt                      python, numpy, torch CPU and CUDA RNG states (weights_only=True)
    callbacks.pt                `state_dict()` of stateful callbacks, datasets, reward functions,
                                formatters, ... and the learner's `extra_state()` (weights_only=True)

Nothing is unpickled: JSON, safetensors and `torch.load(weights_only=True)`.

A checkpoint is written into a hidden staging directory next to its target
(`.checkpoint-3.tmp-<run>-XXXX`), every file and directory is fsynced, and
the staging directory is renamed into place (an existing target is swapped
atomically with `renameat2(RENAME_EXCHANGE)` where the OS offers it), then
the parent is fsynced: a crash mid-save leaves the previous checkpoints
loadable and, at worst, a hidden staging directory that the next run of the
same id removes.

Loading validates everything first (learner class, agent count, tokenizers,
non-portable config, data, stateful callbacks, files and their sizes, weight
names/shapes/dtypes, optimizer structure, RNG states) and only then mutates
the learner, so an incompatible or corrupt checkpoint raises
`CheckpointError` and leaves the learner as it was.

The data order is a pure function of the seed and the epoch, and minibatch
shuffles of the rollout counter, so restoring the counters and the RNG states
makes a resumed run continue bit for bit under the settings it was saved with:
float reductions depend on the torch thread count, the device types, dtypes
and autocast, the deterministic-algorithms flag and the torch, transformers
and peft versions. Each checkpoint records them (`numerics`); resuming under
other values continues, with one `InexactResumeWarning` naming each difference.
Config fields in `PORTABLE_FIELDS` may change on resume: raising
`num_train_epochs` continues the run (the LR schedule follows the new length,
so decaying schedules differ from a run that had the longer length from the
start); changing the `eval_*` fields changes how many random numbers
evaluation draws, so the continuation is then no longer bit-identical;
changing `gradient_accumulation_steps` changes only float rounding.

Under torchrun (`learner.dist.enabled`) saving is collective: every rank calls
it, rank 0 writes the files with every rank's RNG states (`rng.pt["ranks"]`),
and all ranks share rank 0's run id; on resume each rank reads the checkpoint
(a shared file system) and restores its own RNG streams. Weights, optimizer
states, callbacks and `extra_state()` are rank 0's (identical on every rank).
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import importlib.metadata
import io
import json
import math
import os
import random
import re
import shutil
import tempfile
import time
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

if TYPE_CHECKING:
    from learners.base import Learner

__all__ = [
    "CheckpointError",
    "InexactResumeWarning",
    "CheckpointManager",
    "FORMAT_VERSION",
    "PORTABLE_FIELDS",
    "STATE_FILE",
    "load_checkpoint",
    "read_checkpoint_metadata",
    "save_checkpoint",
]

FORMAT_VERSION = 1
STATE_FILE = "state.json"
CHECKPOINT_PREFIX = "checkpoint-"
# Config fields that may change between a run and its resume (plus every field ending in "_dir").
PORTABLE_FIELDS = frozenset({
    "num_train_epochs", "num_iterations", "agent_devices", "critic_devices", "reference_devices",
    "reward_model_device", "parallel_training", "logging_steps", "verbose", "output_dir", "eval_interval",
    "eval_num_samples", "eval_batch_size", "eval_greedy", "gradient_accumulation_steps", "mixed_precision",
})
_PROGRESS_KEYS = ("epoch", "batch_in_epoch", "rollouts_done", "env_steps")
_DATA_FILES = ("optim.pt", "rng.pt", "callbacks.pt")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: corrupt, foreign or incompatible with this learner."""


class InexactResumeWarning(UserWarning):
    """A resume under other numerics settings than the save: it continues, but not bit for bit."""


# ----- public functions ---------------------------------------------------------------


def read_checkpoint_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint's metadata without loading weights.

    `path` is a `checkpoint-*` directory or its `state.json`. Returns a dict with
    `wandb` (`{"id", "project", "entity", "name"}` with the known keys, or None),
    `learner` (class name), `learner_class` (module.qualname), `sequence`,
    `run_id`, `progress` (`epoch`, `batch_in_epoch`, `rollouts_done`,
    `env_steps`), `num_agents`, `library_version`, `format_version`,
    `saved_at` (Unix time) and `numerics` (the settings exact resume depends on:
    `torch_num_threads`, `device_types`, `dtypes`, `mixed_precision`,
    `deterministic_algorithms`, `torch_version`, `transformers_version`,
    `peft_version`; None in checkpoints written before they were recorded).
    Raises `CheckpointError` for a missing or corrupt one.

    The W&B recipe of the seed system works as written:

        identity = read_checkpoint_metadata(checkpoint)["wandb"]
        if identity and "id" not in wandb_config and "resume" not in wandb_config:
            wandb_config = {**wandb_config, **identity, "resume": "allow"}
    """
    state = _read_state(_expand(path))
    meta = {k: state.get(k) for k in ("wandb", "learner", "learner_class", "sequence", "run_id", "progress",
                                      "num_agents", "library_version", "format_version", "saved_at",
                                      "numerics")}
    meta["wandb"] = dict(meta["wandb"]) if meta["wandb"] else None
    meta["progress"] = dict(meta["progress"])
    return meta


def save_checkpoint(learner: "Learner", path: str | os.PathLike) -> str:
    """Atomically write `learner`'s full training state to directory `path`; returns its absolute path.

    An existing checkpoint at `path` is replaced; any other existing file or non-empty directory is
    refused (a checkpoint never overwrites unrelated data).
    """
    path = _expand(path)
    dist = _dist(learner)
    if dist is not None and not dist.is_main:  # rank 0 writes; the others hand over their RNG states
        dist.gather(_capture_rng())
        dist.barrier()
        return path
    if os.path.lexists(path):
        if not os.path.isdir(path) or os.path.islink(path):
            raise FileExistsError(f"cannot write a checkpoint to {path!r}: it exists and is not a directory.")
        if os.listdir(path) and not os.path.isfile(os.path.join(path, STATE_FILE)):
            raise FileExistsError(
                f"cannot write a checkpoint to {path!r}: it is a non-empty directory that is not a checkpoint."
            )
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tag = _staging_tag(learner.run_id)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}{tag}", dir=parent)
    try:
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it 0700; a checkpoint gets normal permissions
        _write(learner, staging)
        _fsync_tree(staging)
        if not os.path.isdir(path):
            os.rename(staging, path)
            _fsync_dir(parent)
        elif _exchange(staging, path):  # one atomic swap: staging now holds the old checkpoint
            _fsync_dir(parent)
        else:  # no atomic exchange on this OS / file system: move the old one aside, then rename
            trash = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}{tag}old-", dir=parent)
            os.rename(path, os.path.join(trash, "old"))
            try:
                os.rename(staging, path)
            except BaseException:
                os.rename(os.path.join(trash, "old"), path)  # put the old checkpoint back
                raise
            _fsync_dir(parent)
            shutil.rmtree(trash, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone after a rename; the old checkpoint after a swap
    if dist is not None:
        dist.barrier()
    return path


def load_checkpoint(learner: "Learner", path: str | os.PathLike) -> dict[str, Any]:
    """Restore `learner` from `path`; every check runs before anything is mutated. Returns the progress.

    Restores weights, optimizer and scheduler states, stateful callbacks, `extra_state`, the
    progress counters, run id, sequence, wandb identity and the global RNG states.
    """
    path = _expand(path)
    if not os.path.isdir(path):
        raise CheckpointError(f"{path!r} is not a checkpoint directory.")
    state = _read_state(path)
    modules = checkpoint_modules(learner)
    tensors = _validate(learner, path, state, modules)
    optim = _load_pt(path, "optim.pt")
    rng = _load_pt(path, "rng.pt")
    extras = _load_pt(path, "callbacks.pt")
    optimizers, schedulers = learner.checkpoint_optimizers()
    _check_optim(path, optim, optimizers, schedulers)
    _check_rng(path, rng)
    holders = _stateful(learner)
    if (not isinstance(extras, dict) or not isinstance(extras.get("states"), list)
            or len(extras["states"]) != len(holders) or not isinstance(extras.get("extra", {}), dict)):
        raise CheckpointError(f"checkpoint {path!r}: callbacks.pt does not hold the {len(holders)} saved states.")

    # Validation passed: mutate. User code first (it may raise), then our own, validated, state.
    for (_, holder), sd in zip(holders, extras["states"]):
        holder.load_state_dict(sd)
    learner.load_extra_state(extras.get("extra", {}))
    with torch.no_grad():
        for name, module in modules.items():
            own = module.state_dict()
            for key, value in tensors[name].items():
                own[key].copy_(value)
    for opt, sd in zip(optimizers, optim["optimizers"]):
        opt.load_state_dict(sd)
    for sch, sd in zip(schedulers, optim["schedulers"]):
        sch.load_state_dict(sd)
    progress = dict(state["progress"])
    for key in _PROGRESS_KEYS:
        setattr(learner, key, progress[key])
    _warn_if_inexact(path, state.get("numerics"), _numerics(learner))
    learner.run_id = state["run_id"]
    learner.checkpoint_sequence = state["sequence"]
    learner.wandb_identity = dict(state["wandb"]) if state["wandb"] else None
    _restore_rng(rng, _dist(learner))
    return progress


def checkpoint_modules(learner: "Learner") -> dict[str, torch.nn.Module]:
    """The learner's `checkpoint_modules()` plus its frozen reference copies (`reference_{i}`), if any."""
    modules = dict(learner.checkpoint_modules())
    seen = {id(m) for m in modules.values()}
    for i, ref in enumerate(getattr(learner, "reference_models", None) or []):
        if isinstance(ref, torch.nn.Module) and id(ref) not in seen and f"reference_{i}" not in modules:
            modules[f"reference_{i}"] = ref
    return modules


# ----- the manager learn() uses --------------------------------------------------------


class CheckpointManager:
    """Decides when `learn()` writes checkpoints, enforces ownership and retention.

    Args:
        learner: The learner to save.
        checkpoint_dir: Directory of `checkpoint-*` snapshots (None: checkpoints off).
        interval: Save every `interval` completed epochs (the final one always).
        total_limit: Keep at most this many of this run's snapshots (others' are never touched).
        steps: Also save every `steps` rollouts (mid-epoch).

    `learn()` calls `resume(path)` (optional), `start()`, then `after_step()` after every
    rollout and `after_epoch(final)` after every epoch.
    """

    def __init__(
        self,
        learner: "Learner",
        checkpoint_dir: str | os.PathLike | None,
        interval: int = 1,
        total_limit: int | None = None,
        steps: int | None = None,
    ) -> None:
        for name, value, allow_none in (("checkpoint_interval", interval, False),
                                        ("checkpoint_total_limit", total_limit, True),
                                        ("checkpoint_steps", steps, True)):
            if value is None and allow_none:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int{' or None' if allow_none else ''}, got {value!r}.")
        if checkpoint_dir is None or checkpoint_dir == "":
            for name, value in (("checkpoint_total_limit", total_limit), ("checkpoint_steps", steps)):
                if value is not None:
                    raise ValueError(f"{name}={value} has no effect without checkpoint_dir; pass checkpoint_dir=...")
        self.learner = learner
        self.dir = _expand(checkpoint_dir) if checkpoint_dir else None
        self.interval, self.total_limit, self.steps = interval, total_limit, steps
        self.sequence = int(getattr(learner, "checkpoint_sequence", 0) or 0)
        self._resumed_from: str | None = None
        if self.dir is not None and os.path.lexists(self.dir) and not os.path.isdir(self.dir):
            raise ValueError(f"checkpoint_dir {self.dir!r} exists and is not a directory.")

    def resume(self, path: str | os.PathLike) -> dict[str, Any]:
        """Validate (including `checkpoint_dir` ownership) and load `path`; returns the progress."""
        path = _expand(path)
        if not os.path.isdir(path):
            raise CheckpointError(f"resume_from_checkpoint {path!r} is not a checkpoint directory.")
        state = _read_state(path)
        total = getattr(self.learner.args, "num_train_epochs", None)
        epoch = state["progress"]["epoch"]
        if isinstance(total, int) and epoch > total:
            raise CheckpointError(
                f"checkpoint {path!r} has completed {epoch} epochs but num_train_epochs={total}; "
                f"num_train_epochs counts the whole run, so pass at least {epoch}."
            )
        self._check_dir(state["run_id"])  # refuse before anything is mutated
        progress = load_checkpoint(self.learner, path)
        self.sequence = int(state["sequence"])
        self._resumed_from = path
        return progress

    def start(self) -> None:
        """Refuse a checkpoint_dir that holds another run's snapshots; remove this run's stale staging dirs.

        Under torchrun every rank takes rank 0's run id (collective: every rank calls `learn()`)."""
        dist = _dist(self.learner)
        if dist is not None:
            self.learner.run_id = dist.gather(self.learner.run_id)[0]
        if self.dir is None:
            return
        self._check_dir(self.learner.run_id)
        if os.path.isdir(self.dir) and (dist is None or dist.is_main):
            tag = _staging_tag(self.learner.run_id)
            for name in os.listdir(self.dir):
                if name.startswith(".") and tag in name:
                    shutil.rmtree(os.path.join(self.dir, name), ignore_errors=True)

    def after_step(self) -> None:
        """Save every `steps` rollouts, unless the epoch ends here and `after_epoch` saves anyway."""
        learner = self.learner
        if self.dir is None or not self.steps or learner.rollouts_done % self.steps != 0:
            return
        per_epoch = _batches_per_epoch(learner)
        if per_epoch is not None and learner.batch_in_epoch >= per_epoch:
            next_epoch = learner.epoch + 1
            if next_epoch == learner.args.num_train_epochs or next_epoch % self.interval == 0:
                return
        self._save()

    def after_epoch(self, final: bool) -> None:
        if self.dir is not None and (final or self.learner.epoch % self.interval == 0):
            self._save()

    def save_now(self) -> None:
        """A checkpoint outside the epoch schedule (e.g. right after a preference stage)."""
        if self.dir is not None:
            self._save()

    # ----- internals -------------------------------------------------------------

    def _check_dir(self, run_id: str) -> None:
        if self.dir is None:
            return
        foreign = [name for name, meta in self._snapshots() if meta.get("run_id") != run_id]
        if foreign:
            foreign.sort(key=_sequence_of)
            raise CheckpointError(
                f"checkpoint_dir {self.dir!r} holds checkpoints of another run or unreadable ones "
                f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); use an empty directory, "
                "or resume_from_checkpoint= a checkpoint of that run to continue it."
            )

    def _save(self) -> None:
        self.sequence += 1
        self.learner.checkpoint_sequence = self.sequence
        name = f"{CHECKPOINT_PREFIX}{self.sequence}"
        target = os.path.join(self.dir, name)
        dist = _dist(self.learner)
        if dist is not None and not dist.is_main:
            save_checkpoint(self.learner, target)  # hands over this rank's RNG states, waits for rank 0
            return
        if os.path.lexists(target):
            try:
                owner = _read_state(target).get("run_id")
            except CheckpointError:
                owner = None
            if owner != self.learner.run_id:
                raise CheckpointError(f"{target!r} appeared and belongs to another run; not overwriting it.")
        save_checkpoint(self.learner, target)
        if self.total_limit is not None:
            own = [n for n, meta in self._snapshots() if meta.get("run_id") == self.learner.run_id and n != name]
            # Delete first this run's abandoned later snapshots (resumed from an earlier one), then the oldest.
            own.sort(key=lambda n: (_sequence_of(n) < self.sequence, _sequence_of(n)))
            for old in own[: max(len(own) - (self.total_limit - 1), 0)]:
                shutil.rmtree(os.path.join(self.dir, old), ignore_errors=True)

    def _snapshots(self) -> list[tuple[str, dict[str, Any]]]:
        if self.dir is None or not os.path.isdir(self.dir):
            return []
        out = []
        for name in os.listdir(self.dir):
            if _sequence_of(name) >= 0:
                try:
                    out.append((name, _read_state(os.path.join(self.dir, name))))
                except CheckpointError:
                    out.append((name, {}))
        return out


# ----- writing -------------------------------------------------------------------------


def _write(learner: "Learner", out: str) -> None:
    modules = checkpoint_modules(learner)
    os.makedirs(os.path.join(out, "models"))
    shapes = {}
    for name, module in modules.items():
        sd = _untie(module.state_dict())
        sd = {k: v.detach().cpu().contiguous() for k, v in sd.items()}
        file = os.path.join(out, "models", f"{name}.safetensors")
        save_file(_unshare(sd), file)
        os.chmod(file, 0o666 & ~_umask())  # safetensors creates 0600 files
        shapes[name] = {k: [list(v.shape), str(v.dtype)] for k, v in sd.items()}
    optimizers, schedulers = learner.checkpoint_optimizers()
    torch.save({"optimizers": [o.state_dict() for o in optimizers],
                "schedulers": [s.state_dict() for s in schedulers]}, os.path.join(out, "optim.pt"))
    rng = _capture_rng()
    dist = _dist(learner)
    if dist is not None:  # every rank's states; the top level stays rank 0's
        rng["ranks"] = dist.gather(rng)
    torch.save(rng, os.path.join(out, "rng.pt"))
    holders = _stateful(learner)
    states = []
    for slot, holder in holders:
        sd = holder.state_dict()
        _check_safe(sd, f"{slot} ({type(holder).__name__}).state_dict()")
        states.append(sd)
    extra = learner.extra_state()
    _check_safe(extra, f"{type(learner).__name__}.extra_state()")
    torch.save({"states": states, "extra": extra}, os.path.join(out, "callbacks.pt"))

    identity = _wandb_identity(learner)
    learner.wandb_identity = identity  # kept for saves after the wandb run has closed
    state = {
        "format_version": FORMAT_VERSION,
        "learner": type(learner).__name__,
        "learner_class": _qualname(type(learner)),
        "library_version": getattr(learner, "library_version", None),
        "torch_version": torch.__version__,
        "numerics": _numerics(learner),
        "saved_at": time.time(),
        "run_id": learner.run_id,
        "sequence": int(getattr(learner, "checkpoint_sequence", 0) or 0),
        "progress": {k: int(getattr(learner, k)) for k in _PROGRESS_KEYS},
        "num_agents": learner.num_agents,
        "world_size": dist.world_size if dist is not None else 1,
        "config": _config(learner),
        "tokenizers": _fingerprints(learner.tokenizers),
        "data": _data_fingerprint(learner),
        "shapes": shapes,
        "optimizers": len(optimizers),
        "schedulers": len(schedulers),
        "stateful": [[slot, type(h).__name__] for slot, h in holders],
        "wandb": identity,
        "files": {rel: os.path.getsize(os.path.join(out, rel))
                  for rel in [*(f"models/{n}.safetensors" for n in modules), *_DATA_FILES]},
    }
    with open(os.path.join(out, STATE_FILE), "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1)


def _wandb_identity(learner: "Learner") -> dict[str, Any] | None:
    logger = getattr(learner, "logger", None)
    run = getattr(logger, "run", None)
    if run is not None:
        mode = getattr(getattr(run, "settings", None), "mode", None)
        if getattr(run, "disabled", False) or mode == "disabled":
            return None
        identity = {k: getattr(run, k, None) for k in ("id", "project", "entity", "name")}
        identity = {k: v for k, v in identity.items() if isinstance(v, str) and v}
        return identity if "id" in identity else None
    return getattr(learner, "wandb_identity", None)


def _check_safe(obj: Any, what: str) -> None:
    """Fail at save time (not at resume) when a state would not load with weights_only=True."""
    buffer = io.BytesIO()
    try:
        torch.save(obj, buffer)
        buffer.seek(0)
        torch.load(buffer, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise TypeError(
            f"{what} must hold only tensors, numbers, strings, bools, None, lists, tuples and dicts "
            f"(it is loaded with torch.load(weights_only=True)): {exc}"
        ) from exc


# ----- validation ------------------------------------------------------------------------


def _validate(learner: "Learner", path: str, state: dict[str, Any], modules: dict[str, torch.nn.Module]) -> dict:
    name = type(learner).__name__
    if state["learner"] != name or state.get("learner_class", _qualname(type(learner))) != _qualname(type(learner)):
        raise CheckpointError(
            f"checkpoint {path!r} was written by {state.get('learner_class') or state['learner']}, "
            f"not {_qualname(type(learner))}; resume it with the same learner class."
        )
    if state["num_agents"] != learner.num_agents:
        raise CheckpointError(
            f"checkpoint {path!r} has {state['num_agents']} agents, this learner {learner.num_agents}."
        )
    now_tok = _fingerprints(learner.tokenizers)
    if state["tokenizers"] != now_tok:
        which = [i for i, (a, b) in enumerate(zip(state["tokenizers"], now_tok)) if a != b] or "all"
        raise CheckpointError(
            f"checkpoint {path!r} was trained with different tokenizers (agent(s) {which}: vocabulary, special "
            "tokens, chat template or padding differ); build the learner with the same tokenizers."
        )
    saved_cfg, current = state["config"], _config(learner)
    changed = sorted(k for k in set(saved_cfg) | set(current)
                     if not _portable(k) and saved_cfg.get(k) != current.get(k))
    if changed:
        detail = ", ".join(f"{k}: saved {saved_cfg.get(k)!r}, now {current.get(k)!r}" for k in changed)
        raise CheckpointError(
            f"checkpoint {path!r} used a different config ({detail}); only {sorted(PORTABLE_FIELDS)} and "
            "*_dir fields may change on resume."
        )
    data = _data_fingerprint(learner, state["progress"]["epoch"])
    saved_data = state.get("data") or {}
    for key in ("num_tasks", "epoch_size", "sample_sha", "order_sha"):
        if key in saved_data and key in data and saved_data[key] != data[key]:
            raise CheckpointError(
                f"checkpoint {path!r} was trained on different data ({key}: saved {saved_data[key]!r}, now "
                f"{data[key]!r}); pass the same dataset / environment."
            )
    progress = state["progress"]
    per_epoch = _batches_per_epoch(learner)
    if per_epoch is not None and progress["batch_in_epoch"] > per_epoch:
        raise CheckpointError(f"checkpoint {path!r} is at batch {progress['batch_in_epoch']} of an epoch of "
                              f"{per_epoch} batches.")
    now_stateful = [[slot, type(h).__name__] for slot, h in _stateful(learner)]
    if state["stateful"] != now_stateful:
        raise CheckpointError(
            f"checkpoint {path!r} saved the state of {_describe(state['stateful'])}; this learner has "
            f"{_describe(now_stateful)}. Pass the same stateful callbacks, datasets and functions."
        )
    if set(state["shapes"]) != set(modules):
        raise CheckpointError(f"checkpoint {path!r} holds modules {sorted(state['shapes'])}, this learner "
                              f"{sorted(modules)}.")
    files = state.get("files") or {}
    for rel in [*(f"models/{n}.safetensors" for n in modules), *_DATA_FILES]:
        file = os.path.join(path, rel)
        if not os.path.isfile(file):
            raise CheckpointError(f"checkpoint {path!r} is incomplete: {rel} is missing.")
        if rel in files and os.path.getsize(file) != files[rel]:
            raise CheckpointError(f"checkpoint {path!r} is corrupt: {rel} has {os.path.getsize(file)} bytes, "
                                  f"{files[rel]} were written.")
    tensors = {}
    for name, module in modules.items():
        try:
            sd = load_file(os.path.join(path, "models", f"{name}.safetensors"))
        except Exception as exc:
            raise CheckpointError(f"checkpoint {path!r}: cannot read the {name} weights ({exc}).") from exc
        own = module.state_dict()
        expected = set(_untie(own))
        if set(sd) != expected:
            missing, extra = sorted(expected - set(sd))[:3], sorted(set(sd) - expected)[:3]
            raise CheckpointError(f"checkpoint {path!r}: {name} parameters do not match this model "
                                  f"(missing {missing}, unexpected {extra}).")
        for k, v in sd.items():
            if own[k].shape != v.shape or own[k].dtype != v.dtype:
                raise CheckpointError(f"checkpoint {path!r}: {name}.{k} is {tuple(v.shape)} {v.dtype}, "
                                      f"the model has {tuple(own[k].shape)} {own[k].dtype}.")
        tensors[name] = sd
    return tensors


def _check_optim(path: str, optim: Any, optimizers: list, schedulers: list) -> None:
    if not isinstance(optim, dict) or not isinstance(optim.get("optimizers"), list) \
            or not isinstance(optim.get("schedulers"), list):
        raise CheckpointError(f"checkpoint {path!r}: optim.pt has an unknown structure.")
    if len(optim["optimizers"]) != len(optimizers) or len(optim["schedulers"]) != len(schedulers):
        raise CheckpointError(
            f"checkpoint {path!r} holds {len(optim['optimizers'])} optimizers and {len(optim['schedulers'])} "
            f"schedulers, this learner has {len(optimizers)} and {len(schedulers)}."
        )
    for i, (opt, sd) in enumerate(zip(optimizers, optim["optimizers"])):
        where = f"checkpoint {path!r}: optimizer {i}"
        if not isinstance(sd, dict) or not isinstance(sd.get("state"), dict) \
                or not isinstance(sd.get("param_groups"), list):
            raise CheckpointError(f"{where} has an unknown structure.")
        groups = sd["param_groups"]
        if len(groups) != len(opt.param_groups) or any(
                not isinstance(g, dict) or not isinstance(g.get("params"), list) or len(g["params"]) != len(o["params"])
                for g, o in zip(groups, opt.param_groups)):
            raise CheckpointError(f"{where} has other parameter groups than this learner's.")
        params = [p for g in opt.param_groups for p in g["params"]]
        ids = [pid for g in groups for pid in g["params"]]
        for pid, param in zip(ids, params):
            entry = sd["state"].get(pid)
            if entry is None:
                continue
            if not isinstance(entry, dict):
                raise CheckpointError(f"{where} has a malformed state for parameter {pid}.")
            for key, value in entry.items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                    raise CheckpointError(f"{where}: {key} of parameter {pid} is {tuple(value.shape)}, "
                                          f"the parameter {tuple(param.shape)}.")
    for i, sd in enumerate(optim["schedulers"]):
        if not isinstance(sd, dict):
            raise CheckpointError(f"checkpoint {path!r}: scheduler {i} has an unknown structure.")


def _check_rng(path: str, rng: Any) -> None:
    def check(state: Any) -> None:
        if not isinstance(state, dict):
            raise TypeError(f"expected a dict, got {type(state).__name__}")
        random.Random().setstate(_python_state(state["python"]))
        np.random.RandomState().set_state(_numpy_state_tuple(state["numpy"]))
        torch.Generator().set_state(state["torch"])
        cuda = state.get("cuda", [])
        if not isinstance(cuda, list) or not all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda):
            raise TypeError("CUDA states must be a list of uint8 tensors")

    try:
        check(rng)
        ranks = rng.get("ranks")  # one state per torchrun process
        if ranks is not None:
            if not isinstance(ranks, list) or not ranks:
                raise TypeError("'ranks' must be a non-empty list of per-process states")
            for state in ranks:
                check(state)
    except Exception as exc:
        raise CheckpointError(f"checkpoint {path!r}: rng.pt holds invalid RNG states ({exc!r}).") from exc


# ----- reading ---------------------------------------------------------------------------


def _read_state(path: str) -> dict[str, Any]:
    file = path if os.path.basename(path) == STATE_FILE else os.path.join(path, STATE_FILE)
    try:
        with open(file, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError as exc:
        raise CheckpointError(f"{path!r} is not a checkpoint: {STATE_FILE} is missing.") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {path!r} has a corrupt {STATE_FILE}: {exc}") from exc
    version = state.get("format_version") if isinstance(state, dict) else None
    if version != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path!r} has an unknown format (format_version={version!r}, "
                              f"this library reads {FORMAT_VERSION}).")
    _check_schema(path, state)
    return state


def _check_schema(path: str, state: dict[str, Any]) -> None:
    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {path!r} has a corrupt {STATE_FILE}: {what}.")

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    for key, kind in (("learner", str), ("run_id", str), ("config", dict), ("tokenizers", list),
                      ("shapes", dict), ("stateful", list), ("progress", dict)):
        if not isinstance(state.get(key), kind):
            raise bad(f"{key!r} is missing or not a {kind.__name__}")
    if not is_int(state.get("sequence")) or state["sequence"] < 0:
        raise bad("'sequence' is not a non-negative int")
    if not is_int(state.get("num_agents")) or state["num_agents"] < 1:
        raise bad("'num_agents' is not a positive int")
    progress = state["progress"]
    if not all(is_int(progress.get(k)) and progress[k] >= 0 for k in _PROGRESS_KEYS):
        raise bad(f"'progress' needs non-negative ints {list(_PROGRESS_KEYS)}")
    wandb_id = state.get("wandb")
    if wandb_id is not None and not (isinstance(wandb_id, dict) and isinstance(wandb_id.get("id"), str)):
        raise bad("'wandb' is neither null nor an identity with an 'id'")
    for key in ("files", "data"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            raise bad(f"{key!r} is not an object")


def _load_pt(path: str, name: str) -> Any:
    try:
        return torch.load(os.path.join(path, name), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"checkpoint {path!r}: cannot read {name} safely ({type(exc).__name__}: {exc})") from exc


# ----- fingerprints and helpers ------------------------------------------------------------


def _numerics(learner: "Learner") -> dict[str, Any]:
    """The settings a run's float results depend on; a resume is bit-identical only when they all match.

    `torch_num_threads` (the CPU reduction order), `device_types` and `dtypes` of the trained modules,
    `mixed_precision` (autocast), `deterministic_algorithms`, and the torch, transformers and peft versions.
    """
    params = [p for m in checkpoint_modules(learner).values() for p in m.parameters()]
    return {
        "torch_num_threads": torch.get_num_threads(),
        "device_types": sorted({p.device.type for p in params}),
        "dtypes": sorted({str(p.dtype) for p in params}),
        "mixed_precision": learner.args.mixed_precision,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "torch_version": torch.__version__,
        "transformers_version": _version("transformers"),
        "peft_version": _version("peft"),
    }


def _warn_if_inexact(path: str, saved: dict[str, Any] | None, now: dict[str, Any]) -> None:
    """One warning naming every numerics setting that differs from the save (none for older checkpoints)."""
    if not isinstance(saved, dict):
        return
    changed = [k for k in now if k in saved and saved[k] != now[k]]
    if changed:
        detail = "; ".join(f"{k}: saved {saved[k]!r}, now {now[k]!r}" for k in changed)
        warnings.warn(
            f"resuming {path!r} under other numerics settings ({detail}). Training continues, but the "
            "continuation is bit-identical to the uninterrupted run only under the recorded settings.",
            InexactResumeWarning, stacklevel=4)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _config(learner: "Learner") -> dict[str, Any]:
    cfg = json.loads(json.dumps(dataclasses.asdict(learner.args), default=_stable_repr))
    cfg.pop("num_agents", None)  # the agent count is checked on its own (None and N mean the same run)
    return cfg


def _stable_repr(obj: Any) -> str:
    """repr() without memory addresses, so an object in the config (a logits processor) compares equal."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj))


def _portable(field: str) -> bool:
    return field in PORTABLE_FIELDS or field.endswith("_dir")


def _fingerprints(tokenizers: list[Any]) -> list[str]:
    memo: dict[int, str] = {}  # agents often share one tokenizer
    for t in tokenizers:
        if id(t) not in memo:
            memo[id(t)] = _fingerprint(t)
    return [memo[id(t)] for t in tokenizers]


def _fingerprint(tokenizer: Any) -> str:
    vocab = sorted(tokenizer.get_vocab().items())
    blob = json.dumps([
        vocab, sorted(tokenizer.all_special_tokens), getattr(tokenizer, "special_tokens_map", None),
        getattr(tokenizer, "chat_template", None), getattr(tokenizer, "padding_side", None),
        getattr(tokenizer, "truncation_side", None),
    ], default=str, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _data_fingerprint(learner: "Learner", epoch: int | None = None) -> dict[str, Any]:
    """Number of task instances, epoch size, a content hash of sampled rows and the epoch's data order."""
    env = getattr(learner, "env", None)
    out: dict[str, Any] = {}
    if env is None:
        return out
    out["num_tasks"] = getattr(env, "num_tasks", None)
    dataset = getattr(env, "dataset", None)
    if dataset is not None:
        try:
            n = len(dataset)
            picks = sorted({*range(min(n, 8)), *(int(i * (n - 1) / 15) for i in range(16))})
            rows = [dataset[i] for i in picks]
            out["sample_sha"] = hashlib.sha256(json.dumps([n, rows], sort_keys=True).encode()).hexdigest()[:16]
        except Exception:  # rows that are not JSON (images, ...): rely on the count and order
            pass
    try:
        out["epoch_size"] = learner._epoch_size(env)
        order = learner._epoch_order(env, learner.epoch if epoch is None else epoch)
        out["order_sha"] = hashlib.sha256(json.dumps(order).encode()).hexdigest()[:16]
    except Exception:  # a learner with another notion of data order keeps it in extra_state()
        pass
    return out


def _batches_per_epoch(learner: "Learner") -> int | None:
    try:
        return math.ceil(learner._epoch_size(learner.env) / learner.args.rollout_buffer_size)
    except Exception:
        return None


def _stateful(learner: "Learner") -> list[tuple[str, Any]]:
    """(slot, object) of everything with state_dict()/load_state_dict(): callbacks, datasets, user functions."""
    candidates: list[tuple[str, Any]] = [(f"callbacks[{i}]", c) for i, c in enumerate(learner.callbacks)]
    for label in ("env", "eval_env"):
        env = getattr(learner, label, None)
        if env is None or (label == "eval_env" and env is learner.env):
            continue
        candidates.append((label, env))
        for attr in ("dataset", "reward_func", "external_transition", "reward_processor"):
            candidates.append((f"{label}.{attr}", getattr(env, attr, None)))
        for i, fmt in enumerate(getattr(env, "formatters", None) or []):
            candidates.append((f"{label}.formatters[{i}]", fmt))
    for attr in ("reward_func", "eval_logger", "eval_aggregator"):
        candidates.append((attr, getattr(learner, attr, None)))
    out, seen = [], set()
    for slot, obj in candidates:
        if obj is None or id(obj) in seen or obj is learner or isinstance(obj, (torch.nn.Module,
                                                                                 torch.optim.Optimizer)):
            continue
        if callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)):
            seen.add(id(obj))
            out.append((slot, obj))
    return out


def _describe(stateful: list) -> str:
    return "[" + ", ".join(f"{s} ({c})" for s, c in stateful) + "]" if stateful else "no stateful objects"


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _untie(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop aliases of the same tensor (tied embeddings), keeping the first name; order is kept."""
    seen: set[tuple] = set()
    out = {}
    for k, v in sd.items():
        key = (v.device, v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()),
               v.dtype) if v.numel() else None
        if key is not None and key in seen:
            continue
        if key is not None:
            seen.add(key)
        out[k] = v
    return out


def _unshare(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Clone distinct views of one storage (safetensors refuses shared memory)."""
    count: dict[int, int] = {}
    for v in sd.values():
        if v.numel():
            count[v.untyped_storage().data_ptr()] = count.get(v.untyped_storage().data_ptr(), 0) + 1
    return {k: v.clone() if v.numel() and count[v.untyped_storage().data_ptr()] > 1 else v for k, v in sd.items()}


def _capture_rng() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "numpy": _numpy_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def _numpy_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"name": str(name), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached": float(cached)}


def _python_state(py: Any) -> tuple:
    return (int(py[0]), tuple(int(x) for x in py[1]), None if py[2] is None else float(py[2]))


def _numpy_state_tuple(state: dict[str, Any]) -> tuple:
    keys = state["keys"]
    if not isinstance(keys, torch.Tensor) or keys.shape != (624,):
        raise ValueError("numpy keys must be 624 integers")
    return (state["name"], keys.numpy().astype(np.uint32), int(state["pos"]), int(state["has_gauss"]),
            float(state["cached"]))


def _restore_rng(state: dict[str, Any], dist: Any = None) -> None:
    ranks = state.get("ranks")
    if dist is not None:
        if ranks and len(ranks) == dist.world_size:
            state = ranks[dist.rank]
        else:
            warnings.warn(
                f"the checkpoint holds RNG states of {len(ranks) if ranks else 1} process(es), this run has "
                f"{dist.world_size}; the ranks keep their own seeds (sampling differs from the original run).",
                stacklevel=3)
            if dist.rank >= len(ranks or [state]):
                return
            state = ranks[dist.rank] if ranks else state
    random.setstate(_python_state(state["python"]))
    np.random.set_state(_numpy_state_tuple(state["numpy"]))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        n = torch.cuda.device_count()
        if n != len(cuda):
            warnings.warn(f"the checkpoint holds RNG states of {len(cuda)} CUDA devices, this machine has {n}; "
                          "restoring the first ones (sampling may differ from the original run).", stacklevel=3)
        for i, s in enumerate(cuda[:n]):
            torch.cuda.set_rng_state(s, device=i)
    elif cuda:
        warnings.warn("the checkpoint holds CUDA RNG states but CUDA is not available; sampling will differ "
                      "from the original run.", stacklevel=3)


def _dist(learner: "Learner") -> Any:
    """The learner's torch.distributed group when it spans several processes (torchrun), else None."""
    dist = getattr(learner, "dist", None)
    return dist if dist is not None and getattr(dist, "enabled", False) else None


def _expand(path: str | os.PathLike) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def _sequence_of(name: str) -> int:
    """The sequence number of a `checkpoint-N` directory name, or -1 for anything else."""
    rest = name[len(CHECKPOINT_PREFIX):] if name.startswith(CHECKPOINT_PREFIX) else ""
    return int(rest) if rest.isdigit() else -1


def _staging_tag(run_id: str) -> str:
    return f".tmp-{str(run_id)[:12]}-"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except Exception:  # no libc by that name (Windows) or no renameat2 (macOS, old glibc)
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _fsync_tree(root: str) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(dirpath)


def _fsync_dir(path: str) -> None:
    if os.name == "nt":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
