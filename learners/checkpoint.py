"""Training checkpoints: exact resume for every learner, atomic and safe to load.

Layout of `checkpoint_dir/checkpoint-{sequence}/`:

    state.json          learner class, run id, sequence, progress counters, config, library
                        version, wandb identity, tokenizer fingerprints, parameter shapes
    models/{name}.safetensors   weights of every trained module (agents, critics, heads)
    optim.pt            optimizer and LR-scheduler states   (torch.load(weights_only=True))
    rng.pt              python, numpy, torch (and CUDA) RNG states (weights_only=True)
    callbacks.pt        state_dict() of stateful callbacks / datasets (weights_only=True)

Nothing is unpickled: JSON, safetensors and `torch.load(weights_only=True)`.
A checkpoint is written into a hidden temporary directory, fsynced, then
renamed into place, so a crash mid-save leaves the previous one loadable.
Data order, minibatch shuffles and environment seeds are functions of the
seed and the progress counters, so restoring the counters and the RNG
states makes a resumed run continue bit for bit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

if TYPE_CHECKING:
    from learners.base import Learner

__all__ = ["CheckpointError", "CheckpointManager", "load_checkpoint", "read_checkpoint_metadata", "save_checkpoint"]

FORMAT_VERSION = 1
STATE_FILE = "state.json"
# Config fields that may change between a run and its resume.
PORTABLE_FIELDS = {
    "num_train_epochs", "agent_devices", "critic_devices", "reference_devices", "reward_model_device",
    "parallel_training", "logging_steps", "verbose", "output_dir", "eval_interval", "eval_num_samples",
    "eval_batch_size", "eval_greedy", "num_iterations",
}


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: corrupt, foreign or incompatible with this learner."""


# ----- public functions ---------------------------------------------------------------


def read_checkpoint_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint's metadata without loading weights.

    Returns at least `wandb` (identity dict or None), `learner`, `sequence`,
    `run_id`, `progress` and `library_version`.
    """
    state = _read_state(os.fspath(path))
    return {k: state.get(k) for k in ("wandb", "learner", "sequence", "run_id", "progress", "library_version",
                                       "format_version")}


def save_checkpoint(learner: "Learner", path: str | os.PathLike) -> str:
    """Atomically write `learner`'s full training state to directory `path` (replaced if it exists)."""
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}-", dir=parent)
    try:
        _write(learner, staging)
        _fsync_tree(staging)
        if os.path.exists(path):
            trash = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}-old-", dir=parent)
            os.rename(path, os.path.join(trash, "old"))
            os.rename(staging, path)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.rename(staging, path)
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path


def load_checkpoint(learner: "Learner", path: str | os.PathLike) -> dict[str, Any]:
    """Restore `learner` from `path`; every check runs before anything is mutated. Returns the progress."""
    path = os.fspath(path)
    state = _read_state(path)
    modules = learner.checkpoint_modules()
    tensors = _validate(learner, path, state, modules)
    try:
        optim = torch.load(os.path.join(path, "optim.pt"), map_location="cpu", weights_only=True)
        rng = torch.load(os.path.join(path, "rng.pt"), map_location="cpu", weights_only=True)
        callbacks = torch.load(os.path.join(path, "callbacks.pt"), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"checkpoint {path!r} has unreadable optimizer/RNG files: {exc}") from exc
    optimizers, schedulers = learner.checkpoint_optimizers()
    if len(optim.get("optimizers", [])) != len(optimizers) or len(optim.get("schedulers", [])) != len(schedulers):
        raise CheckpointError(f"checkpoint {path!r} holds {len(optim.get('optimizers', []))} optimizers, "
                              f"this learner has {len(optimizers)}.")
    # Validation passed: mutate.
    with torch.no_grad():
        for name, module in modules.items():
            own = module.state_dict()
            for key, value in tensors[name].items():
                own[key].copy_(value)
    for opt, sd in zip(optimizers, optim["optimizers"]):
        opt.load_state_dict(sd)
    for sch, sd in zip(schedulers, optim["schedulers"]):
        sch.load_state_dict(sd)
    for holder, sd in zip(_stateful(learner), callbacks.get("states", [])):
        holder.load_state_dict(sd)
    learner.load_extra_state(callbacks.get("extra", {}))
    _restore_rng(rng)
    progress = state["progress"]
    learner.epoch = progress["epoch"]
    learner.batch_in_epoch = progress["batch_in_epoch"]
    learner.rollouts_done = progress["rollouts_done"]
    learner.env_steps = progress["env_steps"]
    learner.run_id = state["run_id"]
    return progress


# ----- the manager learn() uses --------------------------------------------------------


class CheckpointManager:
    """Decides when `learn()` writes checkpoints, enforces ownership and retention.

    Args:
        learner: The learner to save.
        checkpoint_dir: Directory of `checkpoint-*` snapshots (None: checkpoints off).
        interval: Save every `interval` completed epochs (the final one always).
        total_limit: Keep at most this many of this run's snapshots.
        steps: Also save every `steps` rollouts (mid-epoch).
    """

    def __init__(
        self,
        learner: "Learner",
        checkpoint_dir: str | None,
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
        self.learner = learner
        self.dir = os.path.abspath(os.path.expanduser(checkpoint_dir)) if checkpoint_dir else None
        self.interval, self.total_limit, self.steps = interval, total_limit, steps
        self.sequence = 0
        self._resumed_from: str | None = None
        if self.dir is not None and os.path.exists(self.dir) and not os.path.isdir(self.dir):
            raise ValueError(f"checkpoint_dir {self.dir!r} exists and is not a directory.")

    def resume(self, path: str) -> None:
        path = os.path.abspath(os.path.expanduser(path))
        if not os.path.isdir(path):
            raise CheckpointError(f"resume_from_checkpoint {path!r} is not a checkpoint directory.")
        progress = load_checkpoint(self.learner, path)
        self.sequence = int(_read_state(path)["sequence"])
        self._resumed_from = path
        del progress

    def start(self) -> None:
        """Refuse a checkpoint_dir that holds another run's snapshots (unless resuming from it)."""
        if self.dir is None:
            return
        foreign = [name for name, meta in self._snapshots() if meta.get("run_id") != self.learner.run_id]
        if foreign:
            raise CheckpointError(
                f"checkpoint_dir {self.dir!r} holds checkpoints of another run ({', '.join(sorted(foreign)[:3])}); "
                "use an empty directory, or resume_from_checkpoint= one of them to continue that run."
            )

    def after_step(self) -> None:
        if self.dir is not None and self.steps and self.learner.rollouts_done % self.steps == 0:
            self._save()

    def after_epoch(self, final: bool) -> None:
        if self.dir is not None and (final or self.learner.epoch % self.interval == 0):
            self._save()

    def _save(self) -> None:
        self.sequence += 1
        self.learner.checkpoint_sequence = self.sequence
        save_checkpoint(self.learner, os.path.join(self.dir, f"checkpoint-{self.sequence}"))
        if self.total_limit is not None:
            own = [name for name, meta in self._snapshots() if meta.get("run_id") == self.learner.run_id]
            own.sort(key=lambda n: int(n.split("-")[1]))
            for name in own[: max(len(own) - self.total_limit, 0)]:
                shutil.rmtree(os.path.join(self.dir, name), ignore_errors=True)

    def _snapshots(self) -> list[tuple[str, dict[str, Any]]]:
        if self.dir is None or not os.path.isdir(self.dir):
            return []
        out = []
        for name in os.listdir(self.dir):
            if name.startswith("checkpoint-") and name.split("-")[1].isdigit():
                try:
                    out.append((name, _read_state(os.path.join(self.dir, name))))
                except CheckpointError:
                    out.append((name, {}))
        return out


# ----- internals ---------------------------------------------------------------------


def _write(learner: "Learner", out: str) -> None:
    modules = learner.checkpoint_modules()
    os.makedirs(os.path.join(out, "models"))
    shapes = {}
    for name, module in modules.items():
        sd = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
        sd = _untie(sd)
        save_file(sd, os.path.join(out, "models", f"{name}.safetensors"))
        shapes[name] = {k: list(v.shape) for k, v in sd.items()}
    optimizers, schedulers = learner.checkpoint_optimizers()
    torch.save({"optimizers": [o.state_dict() for o in optimizers],
                "schedulers": [s.state_dict() for s in schedulers]}, os.path.join(out, "optim.pt"))
    torch.save(_capture_rng(), os.path.join(out, "rng.pt"))
    torch.save({"states": [h.state_dict() for h in _stateful(learner)], "extra": learner.extra_state()},
               os.path.join(out, "callbacks.pt"))
    state = {
        "format_version": FORMAT_VERSION,
        "learner": type(learner).__name__,
        "library_version": learner.library_version,
        "run_id": learner.run_id,
        "sequence": getattr(learner, "checkpoint_sequence", 0),
        "progress": {"epoch": learner.epoch, "batch_in_epoch": learner.batch_in_epoch,
                     "rollouts_done": learner.rollouts_done, "env_steps": learner.env_steps},
        "num_agents": learner.num_agents,
        "config": json.loads(json.dumps(dataclasses.asdict(learner.args), default=str)),
        "tokenizers": [_fingerprint(t) for t in learner.tokenizers],
        "shapes": shapes,
        "stateful": [type(h).__name__ for h in _stateful(learner)],
        "wandb": learner.logger.wandb_identity or getattr(learner, "wandb_identity", None),
    }
    with open(os.path.join(out, STATE_FILE), "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1)


def _validate(learner: "Learner", path: str, state: dict[str, Any], modules: dict[str, torch.nn.Module]) -> dict:
    if state.get("learner") != type(learner).__name__:
        raise CheckpointError(f"checkpoint {path!r} was written by {state.get('learner')}, not {type(learner).__name__}.")
    if state.get("num_agents") != learner.num_agents:
        raise CheckpointError(f"checkpoint {path!r} has {state.get('num_agents')} agents, this learner {learner.num_agents}.")
    if state.get("tokenizers") != [_fingerprint(t) for t in learner.tokenizers]:
        raise CheckpointError(f"checkpoint {path!r} was trained with different tokenizers; load the same ones.")
    saved_cfg = state.get("config", {})
    current = json.loads(json.dumps(dataclasses.asdict(learner.args), default=str))
    changed = sorted(k for k in set(saved_cfg) | set(current)
                     if k not in PORTABLE_FIELDS and saved_cfg.get(k) != current.get(k))
    if changed:
        raise CheckpointError(
            f"checkpoint {path!r} used a different config for {changed} "
            f"(saved {[saved_cfg.get(k) for k in changed]}, now {[current.get(k) for k in changed]}); only "
            f"{sorted(PORTABLE_FIELDS)} may change on resume."
        )
    progress = state.get("progress", {})
    if not all(isinstance(progress.get(k), int) for k in ("epoch", "batch_in_epoch", "rollouts_done", "env_steps")):
        raise CheckpointError(f"checkpoint {path!r} has no valid progress record.")
    if state.get("stateful") != [type(h).__name__ for h in _stateful(learner)]:
        raise CheckpointError(f"checkpoint {path!r} saved callbacks {state.get('stateful')}; pass the same ones.")
    tensors = {}
    for name, module in modules.items():
        file = os.path.join(path, "models", f"{name}.safetensors")
        try:
            sd = load_file(file)
        except Exception as exc:
            raise CheckpointError(f"checkpoint {path!r}: cannot read {name} weights ({exc}).") from exc
        own = module.state_dict()
        if set(sd) != set(_untie(dict(own))):
            raise CheckpointError(f"checkpoint {path!r}: {name} parameters do not match this model.")
        for k, v in sd.items():
            if own[k].shape != v.shape or own[k].dtype != v.dtype:
                raise CheckpointError(f"checkpoint {path!r}: {name}.{k} is {tuple(v.shape)} {v.dtype}, "
                                      f"the model has {tuple(own[k].shape)} {own[k].dtype}.")
        tensors[name] = sd
    return tensors


def _untie(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop aliases of shared storage (tied embeddings): safetensors refuses shared tensors."""
    seen: dict[tuple, str] = {}
    out = {}
    for k, v in sd.items():
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), v.dtype) if v.numel() else None
        if key is not None and key in seen:
            continue
        if key is not None:
            seen[key] = k
        out[k] = v
    return out


def _read_state(path: str) -> dict[str, Any]:
    file = path if path.endswith(STATE_FILE) else os.path.join(path, STATE_FILE)
    try:
        with open(file, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError as exc:
        raise CheckpointError(f"{path!r} is not a checkpoint: {STATE_FILE} is missing.") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {path!r} has a corrupt {STATE_FILE}: {exc}") from exc
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path!r} has an unknown format (format_version={state.get('format_version') if isinstance(state, dict) else None}).")
    return state


def _fingerprint(tokenizer: Any) -> str:
    vocab = sorted(tokenizer.get_vocab().items())
    blob = json.dumps([vocab, tokenizer.all_special_tokens, getattr(tokenizer, "chat_template", None)], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _stateful(learner: "Learner") -> list[Any]:
    """Objects with state_dict()/load_state_dict(): callbacks, the datasets, the reward function."""
    candidates = list(learner.callbacks) + [getattr(learner.env, "dataset", None), learner.reward_func]
    return [c for c in candidates if c is not None and hasattr(c, "state_dict") and hasattr(c, "load_state_dict")
            and not isinstance(c, torch.nn.Module)]


def _capture_rng() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": _numpy_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _numpy_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached": float(cached)}


def _restore_rng(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    np_state = state["numpy"]
    np.random.set_state((np_state["name"], np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["cached"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
