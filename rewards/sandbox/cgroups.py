"""A memory cgroup per run, under this process's own cgroup where the machine allows one."""

from __future__ import annotations

import os
import signal
import threading
import time

from rewards.sandbox.limits import CGROUP_SLACK_MB, MAX_PROCESSES

__all__ = ["make_cgroup", "remove_cgroup", "shared_memory", "stat_slack"]


_cgroup_lock = threading.Lock()
_cgroup_cache: list[tuple[int, str] | None] = []


def _cgroup_base() -> tuple[int, str] | None:
    """(version, directory) under which per-run memory cgroups go: this process's own cgroup, probed once."""
    with _cgroup_lock:
        if not _cgroup_cache:
            try:
                _cgroup_cache.append(_probe_cgroup())
            except (OSError, ValueError):
                _cgroup_cache.append(None)
        return _cgroup_cache[0]


def _probe_cgroup() -> tuple[int, str] | None:
    with open("/proc/self/cgroup") as f:
        own = {}
        for line in f.read().splitlines():
            _, controllers, path = line.split(":", 2)
            own[controllers] = path
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f.read().splitlines()]
    for fields in mounts:
        sep = fields.index("-")
        fstype, super_opts = fields[sep + 1], fields[sep + 3].split(",")
        root, mountpoint = fields[3], fields[4]
        if fstype == "cgroup2" and "" in own:
            base = _cgroup_dir(mountpoint, root, own[""])
            if base and _v2_memory_delegated(base):
                return 2, base
        elif fstype == "cgroup" and "memory" in super_opts:
            path = next((p for c, p in own.items() if "memory" in c.split(",")), None)
            base = _cgroup_dir(mountpoint, root, path) if path else None
            if base and os.access(base, os.W_OK):
                return 1, base
    return None


def _cgroup_dir(mountpoint: str, root: str, path: str) -> str | None:
    if root != "/" and not (path == root or path.startswith(root + "/")):
        return None
    rel = path[len(root):] if root != "/" else path
    base = os.path.join(mountpoint, rel.lstrip("/"))
    return base if os.path.isdir(base) else None


def _v2_memory_delegated(base: str) -> bool:
    """Whether children of `base` may get a memory limit (enabling it in `base` if allowed)."""
    try:
        with open(os.path.join(base, "cgroup.subtree_control")) as f:
            if "memory" in f.read().split():
                return os.access(base, os.W_OK)
        with open(os.path.join(base, "cgroup.controllers")) as f:
            if "memory" not in f.read().split():
                return False
        with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
            f.write("+memory")  # refused while this cgroup holds processes ("no internal processes")
        return True
    except OSError:
        return False


def make_cgroup(memory_mb: int) -> tuple[int, str] | None:
    """A fresh cgroup for one run with its memory limit, or None where this machine allows none."""
    found = _cgroup_base()
    if found is None:
        return None
    version, base = found
    path = os.path.join(base, f"comlrl-sandbox-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}")
    limit = str((memory_mb + CGROUP_SLACK_MB) * 2**20)
    if version == 2:
        pids = str(4 * MAX_PROCESSES)  # the init and the code's threads count too
        settings = [("memory.max", limit), ("memory.swap.max", "0"), ("memory.oom.group", "1"), ("pids.max", pids)]
    else:
        settings = [("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit)]
    try:
        os.mkdir(path)
    except OSError:
        return None
    for i, (name, value) in enumerate(settings):
        try:
            with open(os.path.join(path, name), "w") as f:
                f.write(value)
        except OSError:
            if i == 0:  # the memory limit is the point
                remove_cgroup(version, path)
                return None
    return version, path


def shared_memory(version: int, path: str) -> int | None:
    """Bytes of shared memory (memfd, System V, tmpfs pages) charged to the run's cgroup, None if unreadable.

    The kernel's memory statistics lag by up to 64 pages per CPU (MEMCG_CHARGE_BATCH), so a value below
    `stat_slack()` may already be zero.
    """
    key = "shmem" if version == 2 else "total_shmem"  # v1: "shmem" omits child cgroups
    try:
        with open(os.path.join(path, "memory.stat")) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def stat_slack() -> int:
    """Bytes by which `shared_memory` may lag: 64 pages per CPU."""
    return 64 * os.sysconf("SC_PAGE_SIZE") * (os.cpu_count() or 1)


def remove_cgroup(version: int, path: str) -> None:
    """Kill whatever is left in the run's cgroup (nothing, with a pid namespace) and remove it."""
    if version == 2:
        try:
            with open(os.path.join(path, "cgroup.kill"), "w") as f:
                f.write("1")
        except OSError:
            pass
    deadline = time.monotonic() + 5
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return  # left behind, empty or dying; the next run does not depend on it
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                for pid in f.read().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (OSError, ValueError):
                        pass
        except OSError:
            pass
        time.sleep(0.01)
