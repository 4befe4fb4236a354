"""When `learn()` writes checkpoints, which of them it keeps, and whose `checkpoint_dir` it writes into.

`CheckpointManager` saves `checkpoint_dir/checkpoint-{sequence}` at completed
epochs (every `interval`, and the final one), every `steps` rollouts, and on
request; keeps only this run's newest `total_limit`; and refuses a directory
that holds another run's checkpoints (a run is its `run_id`). It drives the
learner through the public members that `Checkpointable` lists.

Only complete checkpoints count: a `checkpoint-N` whose `state.json` is missing
or unreadable, or whose files are not all there at their recorded sizes (a
save or a deletion that was killed), is warned about and ignored, never taken
for another run's. `resolve_resume(True)` (or `"latest"`) finds the newest
complete one, so a requeued job relaunches the same command. A save creates its
folder without replacing one that appeared meanwhile (`atomic.creating`), and a
full or unwritable disk stops the run with a `CheckpointError` that says so.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import warnings
from typing import Any, Protocol

from learners.checkpointing.atomic import creating, remove_directory, remove_staging, staging_tag
from learners.checkpointing.checkpoint import CheckpointError, read_checkpoint_metadata
from learners.checkpointing.metadata import read_state_json
from learners.parallel.distributed import Distributed

__all__ = ["CHECKPOINT_PREFIX", "CheckpointManager", "Checkpointable", "ResumeFrom", "incomplete_reason"]

CHECKPOINT_PREFIX = "checkpoint-"
ResumeFrom = str | os.PathLike | bool | None
"""`learn(resume_from_checkpoint=...)`: a checkpoint path, True or "latest" (the newest complete checkpoint in
`checkpoint_dir`, or a fresh start without one), or None / False (a fresh start)."""
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_UNWRITABLE = (errno.EACCES, errno.EROFS, errno.EPERM)


class Checkpointable(Protocol):
    """What the manager reads and calls on a learner (`learners.Learner` is one)."""

    args: Any  # its config: `num_train_epochs` bounds a resume
    dist: Distributed
    run_id: str
    checkpoint_sequence: int
    epoch: int
    batch_in_epoch: int
    rollouts_done: int
    batches_per_epoch: int

    def save_checkpoint(self, path: str) -> str:
        """Write the full training state to `path`."""

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        """Restore the full training state from `path`; returns the progress counters."""


class CheckpointManager:
    """Decides when `learn()` writes checkpoints, enforces ownership and retention.

    Args:
        learner: The learner to save.
        checkpoint_dir: Directory of `checkpoint-*` snapshots (None: checkpoints off).
        interval: Save every `interval` completed epochs (the final one always).
        total_limit: Keep at most this many of this run's snapshots (others' are never touched).
        steps: Also save every `steps` rollouts (mid-epoch).

    `learn()` calls `resolve_resume(value)`, `resume(path)` (when it found one), `start()`, then
    `after_step()` after every rollout and `after_epoch(final)` after every epoch.
    """

    def __init__(
        self,
        learner: Checkpointable,
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
        self.sequence = learner.checkpoint_sequence
        self._warned: set[str] = set()  # incomplete checkpoints already warned about
        if self.dir is not None and os.path.lexists(self.dir) and not os.path.isdir(self.dir):
            raise ValueError(f"checkpoint_dir {self.dir!r} exists and is not a directory.")

    def resolve_resume(self, value: ResumeFrom) -> str | None:
        """The checkpoint `resume_from_checkpoint=value` names: a path as given; for True or "latest" the
        newest complete checkpoint in `checkpoint_dir` (None when it has none: a fresh start), as rank 0
        sees it (every rank resumes from the same one, whatever its own view of a network filesystem); None
        for None or False."""
        if value is None or value is False:
            return None
        if value is True or value == "latest":
            if self.dir is None:
                raise ValueError(f"resume_from_checkpoint={value!r} resumes from the newest checkpoint in "
                                 "checkpoint_dir, which is not set; pass checkpoint_dir=... (the folder the run "
                                 "saves into), or a checkpoint path.")
            dist = self.learner.dist
            return dist.from_main(self.latest() if dist.is_main else None)
        if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"resume_from_checkpoint must be a path, True, 'latest' or None, got {value!r}.")
        return _expand(value)

    def latest(self) -> str | None:
        """The newest complete `checkpoint-N` in `checkpoint_dir` (by save time, then number), or None.

        Incomplete ones and leftover staging folders of interrupted saves are skipped with a warning."""
        snapshots = self._snapshots()
        if self.dir is not None and os.path.isdir(self.dir):
            for name in sorted(os.listdir(self.dir)):
                if name.startswith(f".{CHECKPOINT_PREFIX}") and ".tmp-" in name and name not in self._warned:
                    self._warned.add(name)
                    warnings.warn(f"ignoring {os.path.join(self.dir, name)!r}, the staging folder of a save or "
                                  "deletion that was interrupted; resuming from the newest complete checkpoint.",
                                  stacklevel=4)  # learn()'s caller
        if not snapshots:
            return None
        name, _ = max(snapshots, key=lambda s: (s[1].get("saved_at") or 0.0, _sequence_of(s[0])))
        return os.path.join(self.dir, name)

    def resume(self, path: str | os.PathLike, finished_ok: bool = False) -> dict[str, Any]:
        """Validate (including `checkpoint_dir` ownership) and load `path`; returns the progress.

        A checkpoint of a finished run is refused unless `finished_ok` (a requeued run that had finished:
        it loads and trains nothing more)."""
        path = _expand(path)
        if not os.path.isdir(path):
            raise CheckpointError(f"resume_from_checkpoint {path!r} is not a checkpoint directory.")
        meta = read_checkpoint_metadata(path)
        total = self.learner.args.num_train_epochs
        epoch = meta["progress"]["epoch"]
        if isinstance(total, int) and epoch > total:
            raise CheckpointError(
                f"checkpoint {path!r} has completed {epoch} epochs but num_train_epochs={total}; "
                f"num_train_epochs counts the whole run, so pass at least {epoch}."
            )
        self._check_dir(meta["run_id"])  # refuse before anything is mutated
        driven = getattr(self.learner, "wrapper", None) is not None  # MARLHF's policy: the driver goes on
        if isinstance(total, int) and epoch == total and not (finished_ok or driven):
            raise CheckpointError(
                f"checkpoint {path!r} has completed {epoch} epochs and num_train_epochs={total}: the run is "
                f"finished, nothing is left to train; num_train_epochs counts the whole run, so pass more than "
                f"{epoch} to train on."
            )
        progress = self.learner.load_checkpoint(path)
        self.sequence = meta["sequence"]
        return progress

    def start(self) -> None:
        """Refuse a checkpoint_dir that holds another run's snapshots; remove this run's stale staging dirs.

        Under torchrun every rank takes rank 0's run id (collective: every rank calls `learn()`)."""
        dist = self.learner.dist
        if dist.enabled:
            self.learner.run_id = dist.gather(self.learner.run_id)[0]
        if self.dir is None:
            return
        self._check_dir(self.learner.run_id)
        if os.path.isdir(self.dir) and dist.is_main:  # this run's interrupted saves and deletions
            remove_staging(self.dir, staging_tag(self.learner.run_id))

    def after_step(self) -> None:
        """Save every `steps` rollouts, unless the epoch ends here and `after_epoch` saves anyway."""
        learner = self.learner
        if self.dir is None or not self.steps or learner.rollouts_done % self.steps != 0:
            return
        if learner.batch_in_epoch >= learner.batches_per_epoch:
            next_epoch = learner.epoch + 1
            if next_epoch == learner.args.num_train_epochs or next_epoch % self.interval == 0:
                return
        self._save()

    def after_epoch(self, final: bool) -> None:
        """Save at every `interval`-th completed epoch and after the `final` one."""
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
        foreign = [name for name, meta in self._snapshots() if meta["run_id"] != run_id]
        if foreign:
            foreign.sort(key=_sequence_of)
            raise CheckpointError(
                f"checkpoint_dir {self.dir!r} holds checkpoints of another run "
                f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); use an empty directory, "
                "or resume_from_checkpoint= a checkpoint of that run to continue it."
            )

    def _save(self) -> None:
        self.sequence += 1
        self.learner.checkpoint_sequence = self.sequence
        name = f"{CHECKPOINT_PREFIX}{self.sequence}"
        target = os.path.join(self.dir, name)
        if not self.learner.dist.is_main:
            self.learner.save_checkpoint(target)  # hands over this rank's RNG states, waits for rank 0
            return
        replace = False
        if os.path.lexists(target):
            reason = incomplete_reason(target)
            if reason is not None and os.path.isdir(target) and not os.path.islink(target):
                # Debris of a save or deletion that was killed (a live run stages hidden, and this run holds
                # the folder's lock): it cannot be resumed from, and it holds this save's name.
                warnings.warn(f"replacing the incomplete {target!r} ({reason}).", stacklevel=5)
                remove_directory(target, staging_tag(self.learner.run_id))
            elif reason is not None or read_checkpoint_metadata(target)["run_id"] != self.learner.run_id:
                raise CheckpointError(f"{target!r} appeared and belongs to another run; not overwriting it.")
            else:
                replace = True  # this run's own, from before it resumed from an earlier checkpoint
        try:
            with contextlib.nullcontext() if replace else creating(target):
                self.learner.save_checkpoint(target)
        except FileExistsError as exc:
            raise CheckpointError(
                f"{target!r} appeared while this run was writing it (another run's checkpoint); not replacing "
                f"it. Two runs are saving into {self.dir!r}: give each its own checkpoint_dir."
            ) from exc
        except (OSError, RuntimeError) as exc:
            failure = self._storage_failure(target, exc)
            if failure is None:
                raise
            raise failure from exc
        if self.total_limit is not None:
            own = [n for n, meta in self._snapshots() if meta["run_id"] == self.learner.run_id and n != name]
            # Delete first this run's abandoned later snapshots (resumed from an earlier one), then the oldest.
            own.sort(key=lambda n: (_sequence_of(n) < self.sequence, _sequence_of(n)))
            for old in own[: max(len(own) - (self.total_limit - 1), 0)]:
                remove_directory(os.path.join(self.dir, old), staging_tag(self.learner.run_id))

    def _storage_failure(self, target: str, exc: BaseException) -> CheckpointError | None:
        """The CheckpointError for a save that failed because the disk is full or unwritable; None for another
        failure. (torch.save reports a failed write as a RuntimeError without the OS error.)"""
        code = _errno_of(exc)
        unexplained_write = code is None and isinstance(exc, RuntimeError) and any(
            s in str(exc) for s in ("write failed", "PytorchStreamWriter", "unexpected pos"))
        if code in _UNWRITABLE:
            return CheckpointError(
                f"could not save checkpoint {target!r}: {os.strerror(code)} ({errno.errorcode[code]}): the folder "
                "is not writable (permissions, or a read-only filesystem). The earlier checkpoints are intact; fix "
                "the folder (or pass another checkpoint_dir) and relaunch with resume_from_checkpoint=True."
            )
        if code not in _DISK_FULL and not unexplained_write:
            return None
        what = ("the disk is full (no space left, or the quota is used up)" if code is not None
                else f"a write failed ({str(exc)[:120]}), most likely because the disk is full")
        previous = self._previous_size(target)
        need = (f"the previous checkpoint took {_bytes(previous)}, about what a save needs" if previous is not None
                else "no earlier checkpoint of this run to measure what a save needs")
        return CheckpointError(
            f"could not save checkpoint {target!r}: {what}. {_bytes(shutil.disk_usage(self.dir).free)} are free on "
            f"that filesystem; {need}. The earlier checkpoints are intact (the partial save was removed). Free "
            "space (checkpoint_total_limit keeps fewer checkpoints) and relaunch with resume_from_checkpoint=True."
        )

    def _previous_size(self, target: str) -> int | None:
        """Bytes of this run's newest complete checkpoint other than `target`."""
        own = [(meta.get("saved_at") or 0.0, _sequence_of(n), n) for n, meta in self._snapshots()
               if meta["run_id"] == self.learner.run_id and os.path.join(self.dir, n) != target]
        if not own:
            return None
        root = os.path.join(self.dir, max(own)[2])
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)

    def _snapshots(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, metadata) of every complete `checkpoint-N` in the directory; incomplete ones are warned about
        (once) and left out."""
        if self.dir is None or not os.path.isdir(self.dir):
            return []
        out = []
        for name in os.listdir(self.dir):
            if _sequence_of(name) < 0:
                continue
            path = os.path.join(self.dir, name)
            meta, reason = _inspect(path)
            if meta is not None:
                out.append((name, meta))
            elif name not in self._warned:
                self._warned.add(name)
                warnings.warn(f"ignoring the incomplete checkpoint {path!r}: {reason} (a save or deletion that "
                              "was interrupted, or a damaged copy); it is never resumed from.", stacklevel=5)
        return out


def incomplete_reason(path: str) -> str | None:
    """Why `path` is not a complete checkpoint (its state.json missing or unreadable, a recorded file missing or
    of another size); None when it is complete. Sizes only: the SHA-256s are checked when it loads."""
    return _inspect(path)[1]


def _inspect(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(metadata, None) for a complete checkpoint, else (None, why it is incomplete)."""
    try:
        meta = read_checkpoint_metadata(path)
        files = read_state_json(path).get("files") or {}
    except (CheckpointError, OSError, ValueError) as exc:
        return None, str(exc)
    for rel, record in files.items():
        size = record.get("bytes") if isinstance(record, dict) else record
        try:
            actual = os.stat(os.path.join(path, rel)).st_size
        except OSError:
            return None, f"its file {rel} is missing"
        if isinstance(size, int) and actual != size:
            return None, f"its file {rel} has {actual} bytes, state.json records {size}"
    return meta, None


def _errno_of(exc: BaseException) -> int | None:
    """The errno of the first OSError in `exc`'s chain of causes, or None."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno is not None:
            return exc.errno
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _bytes(n: int) -> str:
    """`n` bytes for a reader: `123 bytes`, else `4.2 GiB (4509715660 bytes)`."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit} ({n} bytes)"
        size /= 1024
    return f"{n} bytes"


def _sequence_of(name: str) -> int:
    """The sequence number of a `checkpoint-N` directory name, or -1 for anything else."""
    rest = name[len(CHECKPOINT_PREFIX):] if name.startswith(CHECKPOINT_PREFIX) else ""
    return int(rest) if rest.isdigit() else -1


def _expand(path: str | os.PathLike) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(path)))
