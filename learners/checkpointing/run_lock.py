"""One run per folder: the lock file `learn()` holds in its checkpoint and output folders while it trains.

`.comlrl-run.lock` is created with O_CREAT|O_EXCL and holds JSON: `run_id`, `host`, `pid`, `started` (UTC) and
a random `token`. A second run that finds a live owner's lock refuses at once, naming it. A lock whose owner is
gone (same host, its pid no longer alive) is taken over with a warning. A lock written on another host cannot be
checked for liveness, so it is refused with how to remove it. The lock is removed when `learn()` ends, however it
ends; under torchrun only rank 0 holds it and every rank learns the outcome.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import time
import uuid
import warnings
from typing import Any, Iterable, Iterator

from learners.checkpointing.checkpoint import CheckpointError
from learners.parallel.distributed import Distributed

__all__ = ["LOCK_FILE", "RunLock", "locked_folders"]

LOCK_FILE = ".comlrl-run.lock"
_HELD: dict[str, str] = {}  # lock file -> run id, held by this process: the same run's nested learn() shares it


class RunLock:
    """The lock files of one run in its folders (each folder once, however it is spelled).

    Args:
        folders: The folders to lock (None entries are skipped); each is created if missing.
        run_id: The run that holds them (recorded in the lock files).
    """

    def __init__(self, folders: Iterable[str | os.PathLike | None], run_id: str) -> None:
        real = {os.path.realpath(os.path.expanduser(os.fspath(f))) for f in folders if f}
        self.folders = sorted(real)
        self.run_id = run_id
        self.held: list[str] = []  # lock files this object created and still holds
        self._record: dict[str, Any] = {}

    def acquire(self) -> None:
        """Take every folder's lock, or none: CheckpointError naming the owner of a lock that is held."""
        self._record = {"run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(),
                        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                        "token": uuid.uuid4().hex}
        try:
            for folder in self.folders:
                os.makedirs(folder, exist_ok=True)
                self._take(os.path.join(folder, LOCK_FILE))
        except BaseException:
            self.release()
            raise

    def set_run_id(self, run_id: str) -> None:
        """Record another run id in the held locks (a resume continues the checkpoint's run)."""
        self.run_id = run_id
        self._record["run_id"] = run_id
        for path in self.held:
            _HELD[path] = run_id
            tmp = f"{path}.{self._record['token']}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self._record, f)
            os.replace(tmp, path)  # the lock file exists throughout: no other run can take it meanwhile

    def release(self) -> None:
        """Remove the lock files this object holds (a file another run wrote since is left alone)."""
        for path in reversed(self.held):
            _HELD.pop(path, None)
            if (_read(path) or {}).get("token") == self._record.get("token"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
        self.held = []

    def _take(self, path: str) -> None:
        if _HELD.get(path) == self.run_id:  # this run holds it already (MARLHF's policy phases): nothing to take
            return
        owner: dict[str, Any] | None = None
        for _ in range(3):  # a stale lock taken over by someone else meanwhile: look again
            if self._create(path):
                self.held.append(path)
                _HELD[path] = self.run_id
                return
            owner = _read(path)
            if not owner:  # removed meanwhile, or still being written: look again
                time.sleep(0.2)
                continue
            refusal = _refusal(path, owner)
            if refusal is not None:
                raise CheckpointError(refusal)
            if _remove_stale(path, owner):
                warnings.warn(f"taking over the lock {path!r} of run {owner.get('run_id')!r} (pid {owner.get('pid')} "
                              "on this host), whose process has ended.", stacklevel=6)  # learn()'s caller
        if owner == {}:
            raise CheckpointError(f"the lock {path!r} is unreadable; if no run uses {os.path.dirname(path)!r}, "
                                  "delete it and start again.")
        raise CheckpointError(f"could not take the lock {path!r}: other runs keep taking it; start one run per folder.")

    def _create(self, path: str) -> bool:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self._record, f)
        return True


@contextlib.contextmanager
def locked_folders(dist: Distributed, run_id: str, folders: Iterable[str | os.PathLike | None]) -> Iterator[
        RunLock | None]:
    """Hold `folders`' locks for the block (rank 0 takes them; every rank raises its refusal). Yields rank 0's
    `RunLock`, None on the other ranks. Collective under torchrun."""
    lock = RunLock(folders, run_id) if dist.is_main else None
    refusal = None
    if lock is not None:
        try:
            lock.acquire()
        except CheckpointError as exc:
            if not dist.enabled:
                raise
            refusal = str(exc)
    refusal = dist.gather(refusal)[0]
    if refusal is not None:
        raise CheckpointError(refusal)
    try:
        yield lock
    finally:
        if lock is not None:
            lock.release()


def _refusal(path: str, owner: dict[str, Any]) -> str | None:
    """Why `owner`'s lock at `path` cannot be taken over; None when its process has ended."""
    who = (f"run {owner.get('run_id')!r} (host {owner.get('host')!r}, pid {owner.get('pid')}, "
           f"started {owner.get('started')})")
    folder = os.path.dirname(path)
    if owner.get("host") != socket.gethostname():
        return (f"{folder!r} is in use by {who}, on another host, whose process cannot be checked from here; "
                f"use another folder, or if that run has ended, delete {path!r} and start again.")
    if _alive(owner.get("pid")):
        return (f"{folder!r} is in use by {who}, which is still running: one run per folder. Use another "
                "checkpoint_dir or output_dir, or wait for that run to end (to continue it later, pass "
                "resume_from_checkpoint=True once it has stopped).")
    return None


def _alive(pid: Any) -> bool:
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except OSError:  # no signals here (Windows): assume alive, the message says how to remove the lock
        return True
    return True


def _read(path: str) -> dict[str, Any] | None:
    """The lock file's record; {} for an unreadable one (it cannot name a live owner); None when absent."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _remove_stale(path: str, owner: dict[str, Any]) -> bool:
    """Remove the stale lock `owner` at `path`, unless another run replaced it meanwhile (then put it back)."""
    aside = f"{path}.stale-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    if (_read(aside) or {}) != owner:  # a fresh lock, taken over by someone else: restore it unless replaced
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
        os.remove(aside)
        return False
    os.remove(aside)
    return True
