"""What a run gets on this machine: the namespaces that work, the interpreter, the user, the limits.

Probed once per process where probing costs (`unshare`); `make_plan` decides for one run.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

from rewards.sandbox.limits import MAX_FILE_MB, MAX_OPEN_FILES, MAX_PROCESSES, SYSTEM_PYTHON

__all__ = ["Plan", "make_plan", "rlimits", "seccomp_table", "view_binds"]


@dataclass(frozen=True)
class Plan:
    """How one run is started here: the `unshare` prefix, the interpreter, the user and the namespaces."""

    prefix: tuple[str, ...]  # unshare command, or empty
    python: str
    uid: int | None  # drop to this uid (as root), else None
    gid: int | None
    userns: bool
    mount_ns: bool
    nproc_effective: bool


_probe_lock = threading.Lock()
_probe_cache: dict[bool, tuple[str, ...]] = {}


def _namespace_prefix(as_root: bool) -> tuple[str, ...]:
    """The strongest `unshare` invocation that works here, probed once per process."""
    with _probe_lock:
        if as_root not in _probe_cache:
            _probe_cache[as_root] = _probe_namespaces(as_root)
        return _probe_cache[as_root]


def _probe_namespaces(as_root: bool) -> tuple[str, ...]:
    unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
    true = shutil.which("true", path="/usr/bin:/bin")
    if unshare is None or true is None:
        return ()
    user = () if as_root else ("--user", "--map-root-user")
    for flags in (("-n", "-m", "-p", "-i", "--fork", "--kill-child"), ("-n", "-m", "-p", "--fork", "--kill-child"),
                  ("-n",)):
        cmd = (unshare, *user, *flags, "--")
        try:
            done = subprocess.run([*cmd, true], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=10, env={"PATH": "/usr/bin:/bin"})
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return cmd
    return ()


def _executable_by_others(path: str) -> bool:
    """Whether a user with no relation to the file (here `nobody`) may execute it."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
        if not (os.path.isfile(real) and st.st_mode & 0o001):
            return False
        parent = os.path.dirname(real)
        while True:
            if not os.stat(parent).st_mode & 0o001:
                return False
            if parent == os.path.dirname(parent):
                return True
            parent = os.path.dirname(parent)
    except OSError:
        return False


def _executable_below_prefix(python: str) -> bool:
    """Whether `nobody` may run `python` from its prefix down (its lib directory included), ignoring the ancestors."""
    prefix = os.path.dirname(os.path.dirname(python))
    try:
        if not os.stat(python).st_mode & 0o001:
            return False
        for d in (prefix, os.path.dirname(python)):
            if not os.stat(d).st_mode & 0o001:
                return False
        lib = os.path.join(prefix, "lib")
        return not os.path.isdir(lib) or os.stat(lib).st_mode & 0o005 == 0o005
    except OSError:
        return False


def _sandbox_ids() -> tuple[int, int] | None:
    import grp
    import pwd

    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        return None
    try:
        gid = grp.getgrnam("nogroup").gr_gid
    except KeyError:
        gid = user.pw_gid
    return user.pw_uid, gid


def _kernel_counts_nproc_per_userns() -> bool:
    """Linux >= 5.14 counts RLIMIT_NPROC per user namespace (ucounts)."""
    try:
        major, minor = (int(x) for x in platform.release().split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 14)


def _count_tasks_of(uid: int) -> int:
    """Processes plus threads of `uid` now: what RLIMIT_NPROC counts outside a namespace."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                pass
    return count


def make_plan(python: str | None) -> Plan:
    """The plan of one run with `python` (None: `SYSTEM_PYTHON` where usable, else this interpreter)."""
    as_root = os.geteuid() == 0
    ids = _sandbox_ids() if as_root else None
    if python is None:
        usable = _executable_by_others if as_root else (lambda p: os.access(p, os.X_OK))
        python = SYSTEM_PYTHON if usable(SYSTEM_PYTHON) else sys.executable
    elif os.sep not in python:
        python = shutil.which(python) or python  # the launcher's execv does not search PATH
    python = os.path.realpath(python)  # a venv's python runs as its base interpreter, without the venv's packages
    prefix = _namespace_prefix(as_root)
    # In the filesystem view the interpreter's prefix hangs below fresh 0755 directories, so a pyenv
    # Python under /root (mode 700) is usable by `nobody` there when its own tree is.
    in_view = "-m" in prefix and _executable_below_prefix(python)
    drop = as_root and ids is not None and (_executable_by_others(python) or in_view)
    return Plan(
        prefix=prefix,
        python=python,
        uid=ids[0] if drop else None,
        gid=ids[1] if drop else None,
        userns="--user" in prefix,
        mount_ns="-m" in prefix,
        nproc_effective=drop or not as_root,  # the kernel exempts root; non-root limits are set in rlimits
    )


def rlimits(plan: Plan, timeout: float, memory_mb: int) -> list[tuple[str, int, int]]:
    """The (name, soft, hard) resource limits the launcher sets on the code."""
    cpu = math.ceil(timeout) + 1
    nproc = MAX_PROCESSES
    if os.geteuid() != 0 and not (plan.userns and _kernel_counts_nproc_per_userns()):
        nproc += _count_tasks_of(os.getuid())  # the limit counts all of this user's tasks
    file_bytes = MAX_FILE_MB * 2**20
    return [
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_AS", memory_mb * 2**20, memory_mb * 2**20),
        ("RLIMIT_NPROC", nproc, nproc),
        ("RLIMIT_FSIZE", file_bytes, file_bytes),
        ("RLIMIT_NOFILE", MAX_OPEN_FILES, MAX_OPEN_FILES),
        ("RLIMIT_CORE", 0, 0),
    ]


def view_binds(python: str) -> list[str]:
    """Host directories mounted read-only in the sandbox: /usr and the interpreter's own prefix."""
    prefix = os.path.dirname(os.path.dirname(python))  # python is already a real path: .../bin/python3.x
    binds = ["/usr"]
    if prefix not in ("/", "") and not (prefix + "/").startswith("/usr/"):
        binds.append(prefix)
    return binds


def seccomp_table() -> dict[str, Any] | None:
    """Audit arch and syscall numbers for the seccomp filter, where this machine's ABI is known."""
    machine = platform.machine()
    if machine == "x86_64":
        return {"arch": 0xC000003E, "keyring": [248, 249, 250], "memfd": [319], "x32": True}
    if machine in ("aarch64", "arm64"):
        return {"arch": 0xC00000B7, "keyring": [217, 218, 219], "memfd": [279], "x32": False}
    return None
