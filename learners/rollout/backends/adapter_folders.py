"""The folders a vLLM backend loads LoRA adapters from, and how they are cleaned up.

vLLM reads adapters from folders only, so each backend keeps one, `comlrl-vllm-adapters-<pid>-*`, in memory
(`/dev/shm`) where it can: the PEFT config of each agent's adapter, and its tensors for the moment the engine
reads them. A folder in /dev/shm outlives its process unless someone deletes it, so ownership is a lock, not a
guess from pids and times: the backend holds an exclusive `flock` on the folder's `.owner` file for as long as
it lives. The kernel drops that lock when the process ends, however it ends (SIGKILL included), so the next
backend to start on the machine takes the lock of a dead owner's folder and deletes it at once, and can never
take a live one's (the pid in the name is for people reading `ls`). A backend deletes its own folder when it is
closed or collected and at a normal exit; `learn()` turns SIGTERM into a normal exit (see
`learners.Preempted`).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
import time

__all__ = ["ADAPTER_PREFIX", "OWNER_FILE", "adapter_root", "adapter_scratch", "remove_adapter_root"]

ADAPTER_PREFIX = "comlrl-vllm-adapters-"
OWNER_FILE = ".owner"
"""The file in an adapter folder whose `flock` its owner holds while it lives."""
LEGACY_STALE_SECONDS = 600
"""A folder without an owner file (written before owner files, or one being created this moment) is removed
only when its pid is not running and it was not modified for this long."""

_OWNED: dict[str, int] = {}  # adapter folder -> the open file descriptor that holds its lock


def adapter_scratch() -> str | None:
    """Where adapter folders go: `/dev/shm` (memory, no disk) when it exists and is writable, else None (the
    temp dir)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK) else None


def adapter_root() -> str:
    """A new adapter folder in `adapter_scratch()`, locked by this process, after deleting the folders whose
    owners are gone."""
    scratch = adapter_scratch() or tempfile.gettempdir()
    for name in os.listdir(scratch):
        owner = re.fullmatch(rf"{ADAPTER_PREFIX}(\d+)-\w+", name)
        if owner:
            _remove_if_abandoned(os.path.join(scratch, name), int(owner.group(1)))
    root = tempfile.mkdtemp(prefix=f"{ADAPTER_PREFIX}{os.getpid()}-", dir=scratch)
    # Locked under another name, then renamed: an `.owner` that another backend can open is already locked.
    pending = os.path.join(root, OWNER_FILE + ".new")
    fd = os.open(pending, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(pending, os.path.join(root, OWNER_FILE))
    _OWNED[root] = fd
    return root


def remove_adapter_root(root: str) -> None:
    """Delete this process's adapter folder `root` and drop its lock (a no-op the second time)."""
    shutil.rmtree(root, ignore_errors=True)
    fd = _OWNED.pop(root, None)
    if fd is not None:
        os.close(fd)


def _remove_if_abandoned(path: str, pid: int) -> None:
    """Delete `path` when its owner's lock is free (the owner is gone); keep it while the lock is held."""
    if path in _OWNED:
        return  # this process's own (flock would grant it to us again)
    try:
        fd = os.open(os.path.join(path, OWNER_FILE), os.O_RDWR)
    except FileNotFoundError:
        if not _running(pid) and _idle_seconds(path) > LEGACY_STALE_SECONDS:
            shutil.rmtree(path, ignore_errors=True)
        return
    except OSError:  # another user's folder, or one being deleted
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # its owner lives
        os.close(fd)
        return
    shutil.rmtree(path, ignore_errors=True)
    os.close(fd)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _idle_seconds(path: str) -> float:
    try:
        return time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return 0.0
