"""Run model-written Python in a sandboxed subprocess; every outcome is an `ExecutionResult`.

    result = execute("print(sum(range(10)))", timeout=5.0)
    result.ok, result.stdout, result.protections   # True, "45\\n", ("disk_quota", "drop_privileges", ...)
    results = execute_many(snippets, workers=2)    # input order, one subprocess each

Each run gets a fresh temporary directory (its cwd, HOME and TMPDIR, removed
afterwards) and a scrubbed environment: PATH, HOME, TMPDIR, LANG,
PYTHONHASHSEED=0, PYTHONDONTWRITEBYTECODE, PYTHONUNBUFFERED and
MALLOC_ARENA_MAX, nothing of the parent's. The parent starts, in a new session,
`unshare` (when it works here; probed once per process) and under it a small
launcher in the chosen interpreter (`-I -S`). The launcher mounts, sets the
limits, drops privileges, reports on a pipe what took effect, and `execve`s
the interpreter on the code saved as `main.py`. No `preexec_fn`, so
`execute_many`'s threads are safe. `ExecutionResult.protections` lists what was
active for that run:

- ``rlimit_cpu``: CPU seconds, ceil(timeout) + 1 soft (SIGXCPU), + 2 hard (SIGKILL).
- ``rlimit_as``: `memory_mb` of address space per process; big allocations raise MemoryError.
- ``rlimit_nproc``: `MAX_PROCESSES` tasks (processes and threads). The kernel
  ignores it for root, so it is listed only after the drop to `nobody`, in a
  user namespace, or (plain non-root) as your current task count + `MAX_PROCESSES`.
- ``rlimit_fsize``: no file over `MAX_FILE_MB` (Python sees EFBIG, "File too large").
- ``rlimit_nofile``: `MAX_OPEN_FILES` descriptors. ``rlimit_core``: no core files.
- ``drop_privileges``: as root, after the limits: setgroups([]), setgid(nogroup),
  setuid(nobody); the launcher refuses to run the code if this fails. It needs
  an interpreter `nobody` may execute, so the default is `/usr/bin/python3` when
  it is (the pyenv Python under /root, mode 700, is not), else `sys.executable`,
  which runs without this protection.
- ``drop_capabilities``: whenever there is no drop to `nobody`, the code runs in
  a fresh user namespace where it holds no capability over the mounts,
  network or pids set up for it, so it cannot undo them.
- ``no_new_privs``: setuid binaries (su, sudo, ping) do not raise privileges.
- ``no_network``: a new network namespace holding only a downed loopback
  (`unshare -n` as root, `unshare --user --map-root-user -n` otherwise): even
  127.0.0.1 is unreachable. Listed when the launcher sees no interface but `lo`.
- ``pid_namespace``: the code is pid 1 of its own pid namespace. It cannot
  address any process outside (its parent is pid 0), and when it exits or is
  killed the kernel kills every process in it, setsid() escapees included.
- ``own_proc``: a fresh, read-only /proc that shows only the sandbox's processes.
- ``readonly_fs``: in a private mount namespace, every mount except /proc and
  /dev is remounted read-only (the host's own mounts are untouched).
- ``private_tmp``: fresh 16 MiB tmpfs over /tmp, /var/tmp, /dev/shm and
  /run/lock. A directory holding the interpreter (a venv in /tmp) is left
  visible instead, read-only when ``readonly_fs`` holds.
- ``disk_quota``: the working directory is a tmpfs of `MAX_DISK_MB`, so the
  total written is capped, not only each file. It vanishes with the namespace.
- ``own_tmpdir``, ``scrubbed_env``: as above, always.
- ``process_group_kill``: at the timeout, at the output cap, after a normal exit
  (for leftovers) and on any error, the whole process group gets SIGKILL.

The parent also enforces a wall-clock `timeout` (so `time.sleep(1000)` and
blocked reads end; `timed_out` is set) and reads stdout and stderr
incrementally, each capped at `max_output_bytes`: reaching the cap kills the
run and sets `output_truncated`.

Not enforced:

- Limits are per process: a fork spray may hold `MAX_PROCESSES` x `memory_mb` of
  address space and as many CPU budgets; only the wall clock bounds the run
  as a whole. No cgroup caps total memory or CPU share.
- As root, concurrent runs are all `nobody` and share its `MAX_PROCESSES`
  budget: a fork spray running alongside can make another run fail to start
  ("Resource temporarily unavailable"). Their pid namespaces keep them from
  signalling each other.
- No seccomp filter: any system call the sandbox user may make is allowed.
  Reads are not restricted: anything world-readable on the host is visible.
- `RLIMIT_AS` counts reserved, not used, memory: a thread costs its 8 MB stack.
- As pid 1, the code ignores signals it sends itself with the default action
  (`os.kill(os.getpid(), 9)` returns), and a kill at the CPU hard limit shows as
  returncode -9 with `timed_out` False.
- Without a pid namespace, a child that calls setsid() escapes the
  process-group kill and lives on until its CPU limit (forever if it sleeps).
- Without a mount namespace, only `RLIMIT_FSIZE` bounds writes: many files, in
  the working directory or anywhere the sandbox user may write (for `nobody`:
  world-writable places such as /tmp), are not capped in total, and such files
  are not removed afterwards.
- Without root and without user namespaces, nothing that needs a namespace or
  a user switch is active: the code runs as you, can write your files, signal
  your processes and use the network. Rlimits, the timeout, the output cap,
  the scrubbed environment and the temporary directory remain. Check
  `protections` before running untrusted code there.
- As root with an interpreter `nobody` cannot execute, the code keeps uid 0
  without capabilities: it may still open root-owned files and device nodes
  (mode bits are enough) that no read-only mount covers, and NPROC does not hold.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import platform
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

__all__ = ["ExecutionResult", "execute", "execute_many"]

MAX_PROCESSES = 32
"""RLIMIT_NPROC: processes plus threads the code may have at once."""
MAX_FILE_MB = 64
"""RLIMIT_FSIZE: the largest file the code may write."""
MAX_DISK_MB = 128
"""Size of the working-directory tmpfs (when a mount namespace is available)."""
MAX_OPEN_FILES = 128
"""RLIMIT_NOFILE."""
SYSTEM_PYTHON = "/usr/bin/python3"
"""Preferred interpreter: one that `nobody` can execute."""
_SHARED_TMPFS_MB = 16
_GRACE_S = 0.5  # drain time after the main process exits, before stragglers' pipes are abandoned
_READ_CHUNK = 65536


@dataclass(frozen=True)
class ExecutionResult:
    """What happened to one snippet. `ok` is exit status 0 within the timeout."""

    ok: bool
    stdout: str
    stderr: str
    returncode: int | None
    """Exit status; negative for a signal (-9 when killed); None if the code never started or was not reaped."""
    timed_out: bool
    """Wall-clock timeout, or the CPU soft limit (SIGXCPU)."""
    duration: float
    """Seconds from the call to the result, setup and cleanup included."""
    output_truncated: bool
    """stdout or stderr reached `max_output_bytes`; the run was killed there."""
    protections: tuple[str, ...]
    """Protections active for this run (see the module docstring), sorted."""


# The launcher runs with the chosen interpreter (`-I -S`), as root or the calling
# user, inside the namespaces: it mounts, sets limits, drops privileges, reports
# what took effect on the status pipe, and execs the interpreter on main.py.
_LAUNCHER = r"""
import json, os, re, sys
cfg = json.loads(sys.argv[1])
status_fd = cfg["status_fd"]
os.set_inheritable(status_fd, False)  # a successful exec closes it
active = []

def die(msg):
    os.write(2, ("sandbox launcher: " + msg + "\n").encode())
    try:
        os.write(status_fd, b"FAILED\n")  # the code never ran
    except OSError:
        pass
    os._exit(125)

try:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
except Exception:
    libc = None

def mount(src, target, fstype, flags, data):
    if libc is None:
        return False
    enc = lambda s: None if s is None else os.fsencode(s)
    return libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) == 0

def prctl(option, arg):
    return libc is not None and libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) == 0

workdir = cfg["workdir"]
main = os.path.join(workdir, "main.py")
with open(main, "rb") as f:
    code = f.read()  # before a tmpfs hides the host directory
uid, gid = cfg["uid"], cfg["gid"]

if cfg["mount_ns"]:
    keep = {"nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048,
            "relatime": 1 << 21, "strictatime": 1 << 24}
    ro_ok = libc is not None
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        lines, ro_ok = [], False
    for line in lines:
        fields = line.split()
        target = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        opts = fields[5].split(",")
        if "ro" in opts or any(target == p or target.startswith(p + "/") for p in ("/proc", "/dev")):
            continue
        flags = 1 | 32 | 4096  # MS_RDONLY | MS_REMOUNT | MS_BIND: this mount only, this namespace only
        for opt in opts:
            flags |= keep.get(opt, 0)
        if not mount(None, target, None, flags, None):
            ro_ok = False
    if ro_ok:
        active.append("readonly_fs")
    shared_ok = True
    for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
        if any(p == d or p.startswith(d + "/") for p in cfg["keep_visible"]):
            shared_ok = False  # the interpreter lives there (a venv in /tmp); read-only is all we can do
        elif os.path.isdir(d) and not mount("tmpfs", d, "tmpfs", 2 | 4, "size=%dm,mode=1777" % cfg["shared_mb"]):
            shared_ok = False
    if shared_ok and libc is not None:
        active.append("private_tmp")
    os.makedirs(workdir, exist_ok=True)
    owner = (uid, gid) if uid is not None else (os.getuid(), os.getgid())
    if mount("tmpfs", workdir, "tmpfs", 2 | 4,
             "size=%dm,nr_inodes=4096,mode=0700,uid=%d,gid=%d" % (cfg["disk_mb"], owner[0], owner[1])):
        active.append("disk_quota")
    if os.getpid() == 1 and mount("proc", "/proc", "proc", 1 | 2 | 4 | 8, None):
        active.append("own_proc")

with open(main, "wb") as f:
    f.write(code)
if os.getpid() == 1:
    active.append("pid_namespace")
try:
    import socket
    if {name for _, name in socket.if_nameindex()} <= {"lo"}:
        active.append("no_network")
except Exception:
    pass

import resource
for name, soft, hard in cfg["rlimits"]:
    try:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    except (AttributeError, ValueError, OSError):
        continue
    if name != "RLIMIT_NPROC" or cfg["nproc_effective"]:
        active.append(name.lower())

if uid is not None:
    try:
        os.chown(main, uid, gid)
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    except OSError as exc:
        die("could not drop privileges: %s" % exc)  # never run the code as root by accident
    active.append("drop_privileges")
prctl(1, 9)  # PR_SET_PDEATHSIG=SIGKILL; setuid cleared unshare's --kill-child setting
if prctl(38, 1):  # PR_SET_NO_NEW_PRIVS
    active.append("no_new_privs")
if cfg["drop_caps"] and libc is not None and libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER, nothing mapped
    active.append("drop_capabilities")

os.chdir(workdir)
os.write(status_fd, (json.dumps(active) + "\n").encode())
try:
    os.execv(cfg["python"], [cfg["python"], "-s", main])
except OSError as exc:
    die("could not exec %s: %s" % (cfg["python"], exc))
"""


@dataclass(frozen=True)
class _Plan:
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
    for flags in (("-n", "-m", "-p", "--fork", "--kill-child"), ("-n",)):
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


def _plan(python: str | None) -> _Plan:
    as_root = os.geteuid() == 0
    ids = _sandbox_ids() if as_root else None
    if python is None:
        usable = _executable_by_others if as_root else (lambda p: os.access(p, os.X_OK))
        python = SYSTEM_PYTHON if usable(SYSTEM_PYTHON) else sys.executable
    elif os.sep not in python:
        python = shutil.which(python) or python  # the launcher's execv does not search PATH
    python = os.path.abspath(python)
    drop = as_root and ids is not None and _executable_by_others(python)
    prefix = _namespace_prefix(as_root)
    return _Plan(
        prefix=prefix,
        python=python,
        uid=ids[0] if drop else None,
        gid=ids[1] if drop else None,
        userns="--user" in prefix,
        mount_ns="-m" in prefix,
        nproc_effective=drop or not as_root,  # the kernel exempts root; non-root limits are set in _rlimits
    )


def _rlimits(plan: _Plan, timeout: float, memory_mb: int) -> list[tuple[str, int, int]]:
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


def _interpreter_dirs(python: str) -> list[str]:
    """Directories the interpreter needs (a venv and the Python it points to), which must not be hidden."""
    return sorted({os.path.dirname(os.path.dirname(os.path.abspath(p))) for p in (python, os.path.realpath(python))})


def _child_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONUNBUFFERED": "1",  # partial output survives a kill
        "MALLOC_ARENA_MAX": "2",  # glibc reserves 64 MB of address space per thread arena otherwise
    }


def execute(
    code: str,
    *,
    timeout: float = 5.0,
    memory_mb: int = 512,
    stdin: str | None = None,
    max_output_bytes: int = 1_000_000,
    python: str | None = None,
) -> ExecutionResult:
    """Run `code` with Python in a sandboxed subprocess and report what happened; never raises on its behaviour.

    Args:
        code: Python source, run as the script `main.py` in a fresh directory.
        timeout: Wall-clock seconds before the whole process group is killed.
        memory_mb: Address-space limit per process.
        stdin: Text fed to the code's standard input (empty input when None).
        max_output_bytes: Cap on stdout and on stderr each; reaching it kills the run.
        python: Interpreter to use; default `/usr/bin/python3` if the sandbox user may run it.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {type(code).__name__}.")
    if stdin is not None and not isinstance(stdin, str):
        raise TypeError(f"stdin must be a str or None, got {type(stdin).__name__}.")
    if not 0 < timeout < math.inf:
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout}.")
    if memory_mb < 16:
        raise ValueError(f"memory_mb must be >= 16 (the interpreter alone needs ~10 MB), got {memory_mb}.")
    if max_output_bytes < 0:
        raise ValueError(f"max_output_bytes must be >= 0, got {max_output_bytes}.")
    start = time.monotonic()
    try:
        return _execute(code, timeout, memory_mb, stdin, max_output_bytes, python, start)
    except Exception as exc:  # a sandbox failure is a failed run, not a crash of the caller
        return ExecutionResult(
            ok=False,
            stdout="",
            stderr=f"sandbox error: {type(exc).__name__}: {exc}\n",
            returncode=None,
            timed_out=False,
            duration=time.monotonic() - start,
            output_truncated=False,
            protections=(),
        )


def execute_many(codes: list[str], *, workers: int = 2, **kw: Any) -> list[ExecutionResult]:
    """Run each snippet with `execute(code, **kw)` on `workers` threads; results in input order."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}.")
    codes = list(codes)
    if not codes:
        return []
    inspect.signature(execute).bind("", **kw)  # a misspelt keyword fails here, not in every thread
    with ThreadPoolExecutor(max_workers=min(workers, len(codes)), thread_name_prefix="sandbox") as pool:
        return list(pool.map(lambda code: execute(code, **kw), codes))


def _execute(
    code: str,
    timeout: float,
    memory_mb: int,
    stdin: str | None,
    max_output_bytes: int,
    python: str | None,
    start: float,
) -> ExecutionResult:
    plan = _plan(python)
    workdir = tempfile.mkdtemp(prefix="comlrl-sandbox-")
    proc: subprocess.Popen[bytes] | None = None
    status_r = status_w = -1
    try:
        main = os.path.join(workdir, "main.py")
        with open(main, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(code)
        if plan.uid is not None and not plan.mount_ns:
            os.chown(workdir, plan.uid, plan.gid)  # its home; a mount namespace gives it a tmpfs instead
        status_r, status_w = os.pipe()
        config = {
            "workdir": workdir,
            "python": plan.python,
            "uid": plan.uid,
            "gid": plan.gid,
            "drop_caps": plan.uid is None,  # no user switch: shed capabilities instead
            "keep_visible": _interpreter_dirs(plan.python),
            "mount_ns": plan.mount_ns,
            "nproc_effective": plan.nproc_effective,
            "rlimits": _rlimits(plan, timeout, memory_mb),
            "disk_mb": MAX_DISK_MB,
            "shared_mb": _SHARED_TMPFS_MB,
            "status_fd": status_w,
        }
        argv = [*plan.prefix, plan.python, "-I", "-S", "-c", _LAUNCHER, json.dumps(config)]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env=_child_env(workdir),
                start_new_session=True,
                pass_fds=(status_w,),
            )
        finally:
            os.close(status_w)
        stdin_bytes = None if stdin is None else stdin.encode("utf-8", "surrogatepass")
        out, err, status, timed_out, truncated = _communicate(
            proc, stdin_bytes, status_r, start + timeout, max_output_bytes
        )
        _kill_group(proc)  # stragglers, the timeout or the cap; before reaping, so the pgid is still ours
        try:
            returncode: int | None = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            returncode = None
        if returncode == -signal.SIGXCPU:
            timed_out = True
        protections = {"own_tmpdir", "scrubbed_env", "process_group_kill"}
        lines = status.decode("utf-8", "replace").splitlines()
        if lines and lines[-1] != "FAILED":
            protections.update(json.loads(lines[0]))
        else:
            returncode = None  # the sandbox failed before the code ran (stderr says why)
        return ExecutionResult(
            ok=returncode == 0 and not timed_out,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            returncode=returncode,
            timed_out=timed_out,
            duration=time.monotonic() - start,
            output_truncated=truncated,
            protections=tuple(sorted(protections)),
        )
    finally:
        if proc is not None:
            _kill_group(proc)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    try:
                        pipe.close()
                    except OSError:
                        pass
            if proc.returncode is None:
                try:
                    proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
        if status_r >= 0:
            os.close(status_r)
        _remove_tree(workdir)


def _communicate(
    proc: subprocess.Popen[bytes],
    stdin_bytes: bytes | None,
    status_fd: int,
    deadline: float,
    cap: int,
) -> tuple[bytes, bytes, bytes, bool, bool]:
    """Feed stdin and read stdout, stderr and the launcher's status until exit, the deadline or the cap."""
    assert proc.stdout is not None and proc.stderr is not None
    buffers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    status = bytearray()
    timed_out = truncated = False
    with selectors.DefaultSelector() as sel:
        for fd in (*buffers, status_fd):
            sel.register(fd, selectors.EVENT_READ)
        pending = memoryview(stdin_bytes or b"")
        if proc.stdin is not None:
            if pending:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        exited_at = None
        while sel.get_map() and not truncated:
            now = time.monotonic()
            if exited_at is None and _has_exited(proc.pid):
                exited_at = now
                _kill_group(proc)  # leftovers keep the pipes open; EOF follows once they die
            if exited_at is not None and now - exited_at > _GRACE_S:
                break
            if now >= deadline:
                timed_out = exited_at is None
                break
            for key, events in sel.select(min(deadline - now, 0.05)):
                fd = key.fd
                if events & selectors.EVENT_WRITE:
                    try:
                        pending = pending[os.write(fd, pending[:_READ_CHUNK]):]
                    except BlockingIOError:
                        continue
                    except OSError:  # the code closed stdin or exited
                        pending = memoryview(b"")
                    if not pending:
                        sel.unregister(fd)
                        proc.stdin.close()  # type: ignore[union-attr]
                    continue
                try:
                    chunk = os.read(fd, _READ_CHUNK)
                except OSError:
                    chunk = b""
                if not chunk:
                    sel.unregister(fd)
                elif fd == status_fd:
                    status += chunk[: 65536 - len(status)]
                else:
                    buf = buffers[fd]
                    room = cap - len(buf)
                    buf += chunk[:room]
                    if len(chunk) > room:
                        truncated = True
    out, err = (bytes(buffers[f.fileno()]) for f in (proc.stdout, proc.stderr))
    return out, err, bytes(status), timed_out, truncated


def _has_exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (its pid stays ours for killpg)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.returncode is not None:
        return  # reaped: the pgid may belong to someone else now
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(path):  # without a mount namespace the code may have chmod-ed its own files
        for root, dirs, _ in os.walk(path):
            for d in dirs:
                try:
                    os.chmod(os.path.join(root, d), 0o700)
                except OSError:
                    pass
        shutil.rmtree(path, ignore_errors=True)
