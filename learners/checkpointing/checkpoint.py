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
                                names/shapes/dtypes, stateful callbacks, wandb identity, file sizes,
                                and the numerics settings (`numerics`: thread count, device types,
                                dtypes, autocast, deterministic algorithms, library versions)
    models/{name}.safetensors   weights of every module in `state.modules` (`agent_0`, ...; critics, heads
                                and frozen reference copies when the learner has them)
    optim.pt                    optimizer and LR-scheduler state_dicts   (torch.load(weights_only=True))
    rng.pt                      python, numpy, torch CPU and CUDA RNG states (`rng.py`; weights_only=True)
    callbacks.pt                `state_dict()` of stateful callbacks, datasets, reward functions,
                                formatters, ... and the learner's `extra_state()` (weights_only=True)
    shards/                     under FSDP: the sharded models and their optimizers, one safetensors file
                                per rank (`sharded.py`); `models/` and `optim.pt` then hold the rest

Nothing is unpickled: JSON, safetensors and `torch.load(weights_only=True)`.

A checkpoint is written with `learners.checkpointing.atomic.write_directory_atomically`: into
a hidden staging directory next to its target (`.checkpoint-3.tmp-<run>-XXXX`),
every file and directory fsynced, the staging directory renamed into place (an
existing target is swapped atomically with `renameat2(RENAME_EXCHANGE)` where
the OS offers it), then the parent fsynced: a crash mid-save leaves the
previous checkpoints loadable and, at worst, a hidden staging directory that
the next run of the same id removes (`CheckpointManager.start`).

Loading validates everything first (learner class, agent count, tokenizers,
non-portable config, data, stateful callbacks, files and their sizes, weight
names/shapes/dtypes, optimizer structure, RNG states) and only then mutates
the state's objects, so an incompatible or corrupt checkpoint raises
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

import io
import json
import os
import time
import warnings
from typing import Any, Callable

import torch

from learners.checkpointing.atomic import staging_tag, write_directory_atomically
from learners.checkpointing.fingerprints import numerics, plain_config, tokenizer_fingerprints
from learners.checkpointing.rng import check_rng, gather_rng, restore_rng
from learners.checkpointing.state import TrainingState
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

FORMAT_VERSION = 1
STATE_FILE = "state.json"
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
    (its data order fingerprinted at the saved epoch, its modules under the saved names), validate every
    file against it, then apply (as `load_checkpoint`)."""
    path = _expand(path)
    if not os.path.isdir(path):
        raise CheckpointError(f"{path!r} is not a checkpoint directory.")
    saved = _read_state(path)
    state = state_for(saved)
    _check_compatible(path, saved, state)
    if state.shards is not None:
        try:
            state.shards.check(path)
        except ValueError as exc:
            raise CheckpointError(f"checkpoint {path!r}: {exc}.") from exc
    tensors = _read_weights(path, saved, state.modules)
    optim = _load_pt(path, "optim.pt")
    rng = _load_pt(path, "rng.pt")
    extras = _load_pt(path, "callbacks.pt")
    _check_optim(path, optim, state.optimizers, state.schedulers)
    try:
        check_rng(rng)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path!r}: rng.pt holds {exc}.") from exc
    holders = state.stateful
    if (not isinstance(extras, dict) or not isinstance(extras.get("states"), list)
            or len(extras["states"]) != len(holders) or not isinstance(extras.get("extra", {}), dict)):
        raise CheckpointError(f"checkpoint {path!r}: callbacks.pt does not hold the {len(holders)} saved states.")

    # Validation passed: mutate. User code first (it may raise), then our own, validated, state.
    for (_, holder), sd in zip(holders, extras["states"]):
        holder.load_state_dict(sd)
    if state.extra is not None:
        state.extra.load_state_dict(extras.get("extra", {}))
    with torch.no_grad():
        for name, module in state.modules.items():
            own = module.state_dict()
            for key, value in tensors[name].items():
                own[key].copy_(value)
    for opt, sd in zip(state.optimizers, optim["optimizers"]):
        opt.load_state_dict(sd)
    for sch, sd in zip(state.schedulers, optim["schedulers"]):
        sch.load_state_dict(sd)
    if state.shards is not None:
        state.shards.load(path)
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
        "progress": {k: int(state.progress[k]) for k in _PROGRESS_KEYS},
        "num_agents": state.num_agents,
        "world_size": state.dist.world_size if state.dist is not None else 1,
        "sharded": state.shards.summary() if state.shards is not None else None,
        "config": plain_config(state.config),
        "tokenizers": tokenizer_fingerprints(state.tokenizers),
        "data": state.data,
        "shapes": shapes,
        "optimizers": len(state.optimizers),
        "schedulers": len(state.schedulers),
        "stateful": _stateful_slots(state),
        "wandb": state.wandb,
        "files": {rel: os.path.getsize(os.path.join(out, rel))
                  for rel in [*(f"models/{n}.safetensors" for n in state.modules), *_DATA_FILES]},
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


def _check_compatible(path: str, saved: dict[str, Any], state: TrainingState) -> None:
    """Learner class, agent count, tokenizers, config, data, progress and stateful objects match."""
    if saved["learner"] != state.learner or saved.get("learner_class", state.learner_class) != state.learner_class:
        raise CheckpointError(
            f"checkpoint {path!r} was written by {saved.get('learner_class') or saved['learner']}, "
            f"not {state.learner_class}; resume it with the same learner class."
        )
    if saved["num_agents"] != state.num_agents:
        raise CheckpointError(
            f"checkpoint {path!r} has {saved['num_agents']} agents, this learner {state.num_agents}."
        )
    now_tok = tokenizer_fingerprints(state.tokenizers)
    if saved["tokenizers"] != now_tok:
        which = [i for i, (a, b) in enumerate(zip(saved["tokenizers"], now_tok)) if a != b] or "all"
        raise CheckpointError(
            f"checkpoint {path!r} was trained with different tokenizers (agent(s) {which}: vocabulary, special "
            "tokens, chat template or padding differ); build the learner with the same tokenizers."
        )
    _check_config(path, saved["config"], plain_config(state.config), plain_config(state.config_defaults))
    saved_data = saved.get("data") or {}
    for key in ("num_tasks", "epoch_size", "sample_sha", "order_sha"):
        if key in saved_data and key in state.data and saved_data[key] != state.data[key]:
            raise CheckpointError(
                f"checkpoint {path!r} was trained on different data ({key}: saved {saved_data[key]!r}, now "
                f"{state.data[key]!r}); pass the same dataset / environment."
            )
    if saved["progress"]["batch_in_epoch"] > state.batches_per_epoch:
        raise CheckpointError(f"checkpoint {path!r} is at batch {saved['progress']['batch_in_epoch']} of an "
                              f"epoch of {state.batches_per_epoch} batches.")
    now_stateful = _stateful_slots(state)
    if saved["stateful"] != now_stateful:
        raise CheckpointError(
            f"checkpoint {path!r} saved the state of {_describe(saved['stateful'])}; this learner has "
            f"{_describe(now_stateful)}. Pass the same stateful callbacks, datasets and functions."
        )


def _check_config(path: str, saved: dict[str, Any], current: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Only portable fields may differ. A saved field this config no longer has is ignored; a field the
    checkpoint predates counts as unchanged while it holds its default."""
    def differs(k: str) -> bool:
        if k in saved:
            return saved[k] != current[k]
        return k not in defaults or defaults[k] != current[k]

    changed = [k for k in sorted(current) if not _portable(k) and differs(k)]
    if changed:
        detail = ", ".join(f"{k}: saved {saved[k]!r}, now {current[k]!r}" if k in saved
                           else f"{k}: not saved, now {current[k]!r}" for k in changed)
        raise CheckpointError(
            f"checkpoint {path!r} used a different config ({detail}); only {sorted(PORTABLE_FIELDS)} and "
            "*_dir fields may change on resume."
        )


def _read_weights(path: str, saved: dict[str, Any], modules: dict[str, torch.nn.Module]) -> dict[str, dict]:
    """Check the files and their sizes, then read every module's weights, matched to the module."""
    if set(saved["shapes"]) != set(modules):
        raise CheckpointError(f"checkpoint {path!r} holds modules {sorted(saved['shapes'])}, this learner "
                              f"{sorted(modules)}.")
    files = saved.get("files") or {}
    for rel in [*(f"models/{n}.safetensors" for n in modules), *_DATA_FILES]:
        file = os.path.join(path, rel)
        if not os.path.isfile(file):
            raise CheckpointError(f"checkpoint {path!r} is incomplete: {rel} is missing.")
        if rel in files and os.path.getsize(file) != files[rel]:
            raise CheckpointError(f"checkpoint {path!r} is corrupt: {rel} has {os.path.getsize(file)} bytes, "
                                  f"{files[rel]} were written.")
    try:
        return read_weights(os.path.join(path, "models"), modules)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path!r}: {exc}") from exc


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


def _portable(field: str) -> bool:
    return field in PORTABLE_FIELDS or field.endswith("_dir")


def _stateful_slots(state: TrainingState) -> list[list[str]]:
    return [[slot, type(h).__name__] for slot, h in state.stateful]


def _describe(stateful: list) -> str:
    return "[" + ", ".join(f"{s} ({c})" for s, c in stateful) + "]" if stateful else "no stateful objects"


def _expand(path: str | os.PathLike) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(path)))
