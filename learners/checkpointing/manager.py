"""When `learn()` writes checkpoints, which of them it keeps, and whose `checkpoint_dir` it writes into.

`CheckpointManager` saves `checkpoint_dir/checkpoint-{sequence}` at completed
epochs (every `interval`, and the final one), every `steps` rollouts, and on
request; keeps only this run's newest `total_limit`; and refuses a directory
that holds another run's checkpoints (a run is its `run_id`). It drives the
learner through the public members that `Checkpointable` lists.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Protocol

from learners.checkpointing.atomic import remove_staging, staging_tag
from learners.checkpointing.checkpoint import CheckpointError, read_checkpoint_metadata
from learners.parallel.distributed import Distributed

__all__ = ["CHECKPOINT_PREFIX", "CheckpointManager", "Checkpointable"]

CHECKPOINT_PREFIX = "checkpoint-"


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

    `learn()` calls `resume(path)` (optional), `start()`, then `after_step()` after every
    rollout and `after_epoch(final)` after every epoch.
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
        if self.dir is not None and os.path.lexists(self.dir) and not os.path.isdir(self.dir):
            raise ValueError(f"checkpoint_dir {self.dir!r} exists and is not a directory.")

    def resume(self, path: str | os.PathLike) -> dict[str, Any]:
        """Validate (including `checkpoint_dir` ownership) and load `path`; returns the progress."""
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
        if isinstance(total, int) and epoch == total and getattr(self.learner, "wrapper", None) is None:
            # (a learner driven by another, MARLHF's policy, resumes at its phase's end and the driver goes on)
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
        if os.path.isdir(self.dir) and dist.is_main:
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
        if not self.learner.dist.is_main:
            self.learner.save_checkpoint(target)  # hands over this rank's RNG states, waits for rank 0
            return
        if os.path.lexists(target):
            try:
                owner = read_checkpoint_metadata(target)["run_id"]
            except CheckpointError:
                owner = None
            if owner != self.learner.run_id:
                raise CheckpointError(f"{target!r} appeared and belongs to another run; not overwriting it.")
        self.learner.save_checkpoint(target)
        if self.total_limit is not None:
            own = [n for n, meta in self._snapshots() if meta.get("run_id") == self.learner.run_id and n != name]
            # Delete first this run's abandoned later snapshots (resumed from an earlier one), then the oldest.
            own.sort(key=lambda n: (_sequence_of(n) < self.sequence, _sequence_of(n)))
            for old in own[: max(len(own) - (self.total_limit - 1), 0)]:
                shutil.rmtree(os.path.join(self.dir, old), ignore_errors=True)

    def _snapshots(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, metadata) of every `checkpoint-N` in the directory; {} for an unreadable one."""
        if self.dir is None or not os.path.isdir(self.dir):
            return []
        out = []
        for name in os.listdir(self.dir):
            if _sequence_of(name) >= 0:
                try:
                    out.append((name, read_checkpoint_metadata(os.path.join(self.dir, name))))
                except CheckpointError:
                    out.append((name, {}))
        return out


def _sequence_of(name: str) -> int:
    """The sequence number of a `checkpoint-N` directory name, or -1 for anything else."""
    rest = name[len(CHECKPOINT_PREFIX):] if name.startswith(CHECKPOINT_PREFIX) else ""
    return int(rest) if rest.isdigit() else -1


def _expand(path: str | os.PathLike) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(path)))
