"""Training checkpoints: exact resume for every learner, atomic and safe to load.

`save_checkpoint(path, state)` and `load_checkpoint(path, state)` take a
`learners.checkpointing.state.TrainingState`, the plain data a learner hands over
(`Learner.training_state()`): its modules, optimizers, schedulers, stateful
objects, progress counters, ids, config and fingerprints. This module imports no
learner and sets no learner attribute: `load_checkpoint` restores the objects in
place and returns the counters and ids for the learner to take back.

Layout of `checkpoint_dir/checkpoint-{sequence}/` (`sequence` counts this run's saves: 1, 2, ...):

    state.json                  metadata (read without loading weights): format version, learner class,
                                library version, run id, sequence, progress counters, agent count,
                                config, tokenizer fingerprints, data order fingerprint, parameter
                                names/shapes/dtypes, stateful callbacks, wandb identity, the size and
                                SHA-256 of every other file (`files`), and the numerics settings
                                (`numerics`: thread count, device types, dtypes, autocast,
                                deterministic algorithms, library versions)
    models/{name}.safetensors   weights of every module in `state.modules` (`agent_0`, ...; critics, heads
                                and frozen reference copies when the learner has them)
    optim.pt                    optimizer and LR-scheduler state_dicts   (torch.load(weights_only=True))
    rng.pt                      python, numpy, torch CPU and CUDA RNG states (`rng.py`; weights_only=True)
    callbacks.pt                `state_dict()` of stateful callbacks, datasets, reward functions,
                                formatters, ... and the learner's `extra_state()` (weights_only=True)
    shards/                     under FSDP: the sharded models and their optimizers, one safetensors file
                                per rank (`sharded.py`; each file's digest and writing rank in state.json);
                                `models/` and `optim.pt` then hold the rest

Nothing is unpickled: JSON, safetensors and `torch.load(weights_only=True)`.

A checkpoint is written with `learners.checkpointing.atomic.write_directory_atomically`: into
a hidden staging directory next to its target (`.checkpoint-3.tmp-<run>-XXXX`),
every file and directory fsynced, the staging directory renamed into place (an
existing target is swapped atomically with `renameat2(RENAME_EXCHANGE)` where
the OS offers it), then the parent fsynced: a crash mid-save leaves the
previous checkpoints loadable and, at worst, a hidden staging directory that
the next run of the same id removes (`CheckpointManager.start`).

Loading validates everything first and only then mutates the state's objects,
so an incompatible or corrupt checkpoint raises `CheckpointError`, naming the
file and the problem, and leaves the learner as it was:

1. `state.json` (`metadata.py`): size, nesting and number limits, then its schema;
   learner class, agent count, tokenizers, non-portable config, data and stateful
   callbacks against the learner.
2. Every file (`digests.py`) before any is parsed: no symlinks, a regular file, the
   recorded size and SHA-256. The digests bind the files to this `state.json` and so
   to its run id and sequence: a flipped byte, or a file copied in from another run
   or checkpoint (even of the same shapes), is refused. (A whole checkpoint of another
   run, `state.json` included, is that run's: `CheckpointManager` refuses it in a
   `checkpoint_dir` owned by another run.)
3. Every state (`validation.py`, `weights.py`, `rng.py`): weight names, shapes,
   dtypes and finiteness; optimizer groups, hyperparameters and per-parameter states
   (shapes, dtypes, finiteness, 0-d steps); scheduler states; RNG states; the callback
   and learner states against the kinds they have now.
4. Apply: user objects first (a `load_state_dict` that raises rolls back the ones
   already loaded, then `CheckpointError`), then weights, optimizers, schedulers, RNG.

Checkpoints of format 1 (before digests) load with their sizes checked instead.

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
changing `gradient_accumulation_steps` changes only float rounding. A field
added to the config after a checkpoint was written counts as unchanged while it
holds its default, and a saved field the config no longer has is ignored.

Under torchrun (`state.dist`) saving is collective: every rank calls it, rank
0 writes the files with every rank's RNG states (`rng.pt["ranks"]`), and all
ranks share rank 0's run id; on resume each rank reads the checkpoint (a shared
file system) and restores its own RNG streams. Weights, optimizer states,
callbacks and `extra_state()` are rank 0's (identical on every rank).
"""

from __future__ import annotations

import copy
import io
import json
import os
import time
import warnings
from typing import Any, BinaryIO, Callable

import torch

from learners.checkpointing.atomic import staging_tag, write_directory_atomically
from learners.checkpointing.compatibility import PORTABLE_FIELDS, check_compatible, stateful_slots
from learners.checkpointing.digests import open_verified, record_files, still_verified
from learners.checkpointing.fingerprints import numerics, plain_config, tokenizer_fingerprints
from learners.checkpointing.metadata import (
    FORMAT_VERSION,
    PROGRESS_KEYS,
    READABLE_FORMATS,
    STATE_FILE,
    check_schema,
    read_state_json,
)
from learners.checkpointing.rng import check_rng, gather_rng, restore_rng
from learners.checkpointing.state import TrainingState
from learners.checkpointing.validation import check_like, check_optimizer_state, check_scheduler_state
from learners.checkpointing.weights import read_weights, write_weights

__all__ = [
    "CheckpointError",
    "InexactResumeWarning",
    "FORMAT_VERSION",
    "PORTABLE_FIELDS",
    "STATE_FILE",
    "load_checkpoint",
    "read_checkpoint_metadata",
    "resume_checkpoint",
    "save_checkpoint",
]

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

    CoMLRL 1.4.3's W&B recipe works as written:

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


def save_checkpoint(path: str | os.PathLike, state: TrainingState) -> str:
    """Atomically write the training state `state` to directory `path`; returns its absolute path.

    An existing checkpoint at `path` is replaced; any other existing file or non-empty directory is
    refused (a checkpoint never overwrites unrelated data). Under torchrun every rank calls it.
    """
    path = _expand(path)
    dist = state.dist
    if state.shards is not None:  # every rank writes its shards; rank 0 moves them into the checkpoint
        state.shards.write(path, staging_tag(state.run_id))
    if dist is not None and not dist.is_main:  # rank 0 writes; the others hand over their RNG states
        gather_rng(dist)
        dist.barrier()
        return path
    if os.path.lexists(path):
        if not os.path.isdir(path) or os.path.islink(path):
            raise FileExistsError(f"cannot write a checkpoint to {path!r}: it exists and is not a directory.")
        if os.listdir(path) and not os.path.isfile(os.path.join(path, STATE_FILE)):
            raise FileExistsError(
                f"cannot write a checkpoint to {path!r}: it is a non-empty directory that is not a checkpoint."
            )
    write_directory_atomically(path, lambda out: _write(state, out), staging_tag(state.run_id))
    if dist is not None:
        dist.barrier()
    return path


def load_checkpoint(path: str | os.PathLike, state: TrainingState) -> dict[str, Any]:
    """Load checkpoint `path` into `state`'s objects; every check runs before anything is mutated.

    Restores the weights of `state.modules`, the optimizer and scheduler states, the stateful objects,
    `state.extra` and the global RNG states in place. Returns what the learner sets on itself:
    `{"progress": {epoch, batch_in_epoch, rollouts_done, env_steps}, "run_id", "sequence", "wandb"}`.
    `state.data` must be the data fingerprint at the saved epoch (`resume_checkpoint` builds it so).
    """
    return resume_checkpoint(path, lambda saved: state)


def resume_checkpoint(path: str | os.PathLike, state_for: Callable[[dict[str, Any]], TrainingState]) -> dict[str, Any]:
    """Resume in one pass: read `path`'s metadata (`state.json`), take the learner's `state_for(metadata)`
    (its data order fingerprinted at the saved epoch, its modules under the saved names), verify every file
    and validate every state against it, then apply (as `load_checkpoint`)."""
    path = _expand(path)
    if not os.path.isdir(path):
        raise CheckpointError(f"{path!r} is not a checkpoint directory.")
    saved = _read_state(path)
    state = state_for(saved)
    try:
        check_compatible(saved, state)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path!r} {exc}") from exc
    shards = None
    if state.shards is not None:  # every shard file verified, then this rank's pieces read and validated
        try:
            state.shards.check(path, saved)
            shards = state.shards.read(path)
        except ValueError as exc:
            raise CheckpointError(f"checkpoint {path!r}: {exc}.") from exc
    tensors, optim, rng, extras = _read_files(path, saved, state.modules)
    _check_optim(path, optim, state.optimizers, state.schedulers)
    try:
        check_rng(rng)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path!r}: rng.pt holds {exc}.") from exc
    befores = _check_stateful(path, extras, state)

    # Validation passed: mutate. User code first (it may raise: then it is rolled back), then our own state.
    _load_stateful(path, extras, state, befores)
    with torch.no_grad():
        for name, module in state.modules.items():
            own = module.state_dict()
            for key, value in tensors[name].items():
                own[key].copy_(value)
    for opt, sd in zip(state.optimizers, optim["optimizers"]):
        opt.load_state_dict(sd)
    for sch, sd in zip(state.schedulers, optim["schedulers"]):
        sch.load_state_dict(sd)
    if shards is not None:
        state.shards.apply(shards)
    _warn_if_inexact(path, saved.get("numerics"), numerics(state.modules, state.config.get("mixed_precision")))
    restore_rng(rng, state.dist)
    return {"progress": dict(saved["progress"]), "run_id": saved["run_id"], "sequence": saved["sequence"],
            "wandb": dict(saved["wandb"]) if saved["wandb"] else None}


# ----- writing -------------------------------------------------------------------------


def _write(state: TrainingState, out: str) -> None:
    """Write every file of a checkpoint into the (staging) directory `out`, `state.json` last."""
    shapes = write_weights(state.modules, os.path.join(out, "models"))
    if state.shards is not None:
        state.shards.place(out)
    torch.save({"optimizers": [o.state_dict() for o in state.optimizers],
                "schedulers": [s.state_dict() for s in state.schedulers]}, os.path.join(out, "optim.pt"))
    torch.save(gather_rng(state.dist), os.path.join(out, "rng.pt"))
    states = []
    for slot, holder in state.stateful:
        sd = holder.state_dict()
        _check_safe(sd, f"{slot} ({type(holder).__name__}).state_dict()")
        states.append(sd)
    extra = state.extra.state_dict() if state.extra is not None else {}
    _check_safe(extra, f"{state.learner}.extra_state()")
    torch.save({"states": states, "extra": extra}, os.path.join(out, "callbacks.pt"))

    metadata = {
        "format_version": FORMAT_VERSION,
        "learner": state.learner,
        "learner_class": state.learner_class,
        "library_version": state.library_version,
        "torch_version": torch.__version__,
        "numerics": numerics(state.modules, state.config.get("mixed_precision")),
        "saved_at": time.time(),
        "run_id": state.run_id,
        "sequence": int(state.sequence),
        "progress": {k: int(state.progress[k]) for k in PROGRESS_KEYS},
        "num_agents": state.num_agents,
        "world_size": state.dist.world_size if state.dist is not None else 1,
        "sharded": state.shards.summary() if state.shards is not None else None,
        "config": plain_config(state.config),
        "tokenizers": tokenizer_fingerprints(state.tokenizers),
        "data": state.data,
        "shapes": shapes,
        "optimizers": len(state.optimizers),
        "schedulers": len(state.schedulers),
        "stateful": stateful_slots(state),
        "wandb": state.wandb,
        "files": record_files(out, _file_names(state.modules) + (state.shards.files() if state.shards else [])),
    }
    with open(os.path.join(out, STATE_FILE), "w", encoding="utf-8") as f:
        json.dump(metadata, f, indent=1)


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


def _read_files(path: str, saved: dict[str, Any], modules: dict[str, torch.nn.Module]) -> tuple:
    """Verify every file (no symlink, recorded size and SHA-256) before parsing any, then parse them:
    returns each module's weights (checked against the module), optim.pt, rng.pt and callbacks.pt."""
    if set(saved["shapes"]) != set(modules):
        raise CheckpointError(f"checkpoint {path!r} holds modules {sorted(saved['shapes'])}, this learner "
                              f"{sorted(modules)}.")
    records = saved.get("files") or {}
    opened: dict[str, BinaryIO] = {}
    try:
        for rel in _file_names(modules):
            if saved["format_version"] >= 2 and rel not in records:
                raise CheckpointError(f"checkpoint {path!r} is corrupt: state.json records no SHA-256 for {rel}.")
            try:
                opened[rel] = open_verified(path, rel, records.get(rel))
            except ValueError as exc:
                raise CheckpointError(f"checkpoint {path!r} is corrupt: {exc}.") from exc
        tensors = {}
        for name, module in modules.items():
            rel = f"models/{name}.safetensors"
            try:  # memory-mapped from its path (one copy in memory), then proven to be the file hashed
                tensors[name] = read_weights(name, os.path.join(path, rel), module)
            except ValueError as exc:
                raise CheckpointError(f"checkpoint {path!r}: {rel}: {exc}") from exc
            try:
                still_verified(path, rel, opened[rel])
            except ValueError as exc:
                raise CheckpointError(f"checkpoint {path!r}: {exc}.") from exc
        return (tensors, *(_load_pt(path, rel, opened[rel]) for rel in _DATA_FILES))
    finally:
        for f in opened.values():
            f.close()


def _check_optim(path: str, optim: Any, optimizers: list, schedulers: list) -> None:
    if not isinstance(optim, dict) or not isinstance(optim.get("optimizers"), list) \
            or not isinstance(optim.get("schedulers"), list):
        raise CheckpointError(f"checkpoint {path!r}: optim.pt has an unknown structure.")
    if len(optim["optimizers"]) != len(optimizers) or len(optim["schedulers"]) != len(schedulers):
        raise CheckpointError(
            f"checkpoint {path!r} holds {len(optim['optimizers'])} optimizers and {len(optim['schedulers'])} "
            f"schedulers, this learner has {len(optimizers)} and {len(schedulers)}."
        )
    for what, check, objects, states in (("optimizer", check_optimizer_state, optimizers, optim["optimizers"]),
                                         ("scheduler", check_scheduler_state, schedulers, optim["schedulers"])):
        for i, (obj, sd) in enumerate(zip(objects, states)):
            try:
                check(sd, obj)
            except ValueError as exc:
                raise CheckpointError(f"checkpoint {path!r}: optim.pt: {what} {i}: {exc}.") from exc


def _check_stateful(path: str, extras: Any, state: TrainingState) -> list[Any]:
    """Check callbacks.pt's structure and each saved state against the kinds its object's state has now;
    returns those current states (copies), to roll back to should a `load_state_dict` raise."""
    holders = state.stateful
    if (not isinstance(extras, dict) or not isinstance(extras.get("states"), list)
            or len(extras["states"]) != len(holders) or not isinstance(extras.get("extra", {}), dict)):
        raise CheckpointError(f"checkpoint {path!r}: callbacks.pt does not hold the {len(holders)} saved states.")
    objects = [*holders, *([("extra_state", state.extra)] if state.extra is not None else [])]
    saved = [*extras["states"], extras.get("extra", {})]
    befores = []
    for (slot, holder), sd in zip(objects, saved):
        before = holder.state_dict()
        try:
            if not isinstance(sd, dict):
                raise ValueError(f"it is {type(sd).__name__}, not a dict")
            check_like(sd, before, "state")
        except ValueError as exc:
            raise CheckpointError(f"checkpoint {path!r}: callbacks.pt: the state of {slot} "
                                  f"({type(holder).__name__}) does not fit it: {exc}.") from exc
        befores.append(_copy(before))
    return befores


def _load_stateful(path: str, extras: dict[str, Any], state: TrainingState, befores: list[Any]) -> None:
    """Load the checked user and learner states; when a `load_state_dict` raises, give every object loaded
    so far (the failing one included) its state from before, then raise CheckpointError."""
    objects = [*state.stateful, *([("extra_state", state.extra)] if state.extra is not None else [])]
    touched = []
    for (slot, holder), sd, before in zip(objects, [*extras["states"], extras.get("extra", {})], befores):
        touched.append((slot, holder, before))
        try:
            holder.load_state_dict(sd)
        except Exception as exc:
            failed = []
            for done_slot, done, old in reversed(touched):
                try:
                    done.load_state_dict(old)
                except Exception:  # report it, and keep restoring the others
                    failed.append(done_slot)
            outcome = f"could not restore {failed} to their states before" if failed else "nothing was loaded"
            raise CheckpointError(f"checkpoint {path!r}: callbacks.pt: {slot} ({type(holder).__name__}) refused "
                                  f"its saved state ({type(exc).__name__}: {exc}); {outcome}.") from exc


# ----- reading ---------------------------------------------------------------------------


def _read_state(path: str) -> dict[str, Any]:
    directory = os.path.dirname(path) if os.path.basename(path) == STATE_FILE else path
    try:
        state = read_state_json(directory)
    except FileNotFoundError as exc:
        raise CheckpointError(f"{path!r} is not a checkpoint: {STATE_FILE} is missing.") from exc
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {path!r} has a corrupt {STATE_FILE}: {exc}.") from exc
    version = state.get("format_version") if isinstance(state, dict) else None
    if isinstance(version, bool) or version not in READABLE_FORMATS:
        raise CheckpointError(f"checkpoint {path!r} has an unknown format (format_version={version!r}, "
                              f"this library reads {', '.join(map(str, READABLE_FORMATS))}).")
    try:
        check_schema(state)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path!r} has a corrupt {STATE_FILE}: {exc}.") from exc
    return state


def _load_pt(path: str, name: str, f: BinaryIO) -> Any:
    try:
        return torch.load(f, map_location="cpu", weights_only=True)
    except Exception as exc:  # any unpickling error, RecursionError included
        raise CheckpointError(f"checkpoint {path!r}: cannot read {name} safely ({type(exc).__name__}: "
                              f"{str(exc)[:300]})") from exc


# ----- helpers ----------------------------------------------------------------------------


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


def _file_names(modules: dict[str, Any]) -> list[str]:
    """Every file of a checkpoint but state.json, relative to its directory."""
    return [*(f"models/{n}.safetensors" for n in modules), *_DATA_FILES]


def _copy(obj: Any) -> Any:
    try:
        return copy.deepcopy(obj)
    except Exception:  # an object that cannot be copied: roll back to the state_dict() as returned
        return obj


def _expand(path: str | os.PathLike) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(path)))
