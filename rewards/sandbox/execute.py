"""Run model-written Python in a sandboxed subprocess; every outcome is an `ExecutionResult`.

    result = execute("print(sum(range(10)))", timeout=5.0)
    result.ok, result.stdout, result.protections   # True, "45\\n", ("cgroup_memory", "disk_quota", ...)
    results = execute_many(snippets, workers=2)    # input order, one subprocess each

Each run gets a fresh temporary directory (its cwd, HOME and TMPDIR, removed
afterwards), a scrubbed environment (PATH, HOME, TMPDIR, LANG,
PYTHONHASHSEED=0, PYTHONDONTWRITEBYTECODE, PYTHONUNBUFFERED, MALLOC_ARENA_MAX,
nothing of the parent's) and, where the machine allows it, a memory cgroup of
its own. The parent starts, in a new session, `unshare --fork` (when it works
here; probed once per process) and under it a small launcher in the chosen
interpreter (`-I -S`). The launcher joins the cgroup, builds the filesystem
view and forks: it stays as the pid namespace's init (pid 1), reaps, and
reports the code's exit status; the child sets the limits, drops privileges,
installs a seccomp filter and `execve`s the interpreter on `main.py`. The
init exits when the code's main process does; at the timeout, the output cap
or an error the parent SIGKILLs it. Either way the kernel kills every process
of the namespace, and `execute` returns after `unshare` has seen them all go
and the kernel has freed what they left (``no_leftovers``). No `preexec_fn`,
so `execute_many`'s threads are safe.
The interpreter is `python` resolved to its real file (a venv's python runs
as its base interpreter, without the venv's packages). `docs/sandbox.md`
has the design and the attacks it was tested against.
`ExecutionResult.protections` lists what was active for that run:

- ``sandbox_init``: the pid namespace's init is the launcher, which the code
  cannot kill (another uid; else the kernel drops signals sent to a
  namespace's init from inside) or trace (another uid, or non-dumpable).
  Killing it kills every process of the run, setsid() escapees without a
  death signal included, and `execute` returns only after they are gone.
- ``pid_namespace``: the code cannot address any process outside.
- ``cgroup_memory``: the run's processes share one memory cgroup (v2 under this
  process's cgroup where the memory controller is delegated, else v1 memory
  under this process's memory cgroup) limited to `memory_mb` +
  `CGROUP_SLACK_MB`: anonymous memory, memfd, shared memory and the tmpfs
  files of the run all count; at the limit the kernel kills the code
  (returncode -9). Needs a writable cgroup: root, or a delegated v2 subtree.
- ``no_memfd``: without ``cgroup_memory``, seccomp denies memfd_create (EPERM).
- ``no_keyring``: seccomp denies add_key, request_key and keyctl (EPERM), and
  every system call of another ABI (i386, x32). x86_64 and aarch64 only.
- ``ipc_namespace``: System V objects and POSIX message queues of the run are
  its own and vanish with it. ``ipc_limits``: in that namespace, shared memory
  is capped at `memory_mb` and queues at 16 (set as its root; also a bound
  without a cgroup).
- ``whitelist_fs``: a new root (pivot_root) on a small tmpfs holding only
  /usr and the interpreter's prefix (read-only, bind mounts), the /bin, /lib,
  /sbin links or directories, a synthetic /etc (passwd, group, plus the host's
  ld.so.cache, localtime, alternatives), /dev with null, zero, full, random,
  urandom and a tmpfs /dev/shm, a fresh /proc, and tmpfs /tmp and /var/tmp.
  Nothing else of the host: not /run (its sockets), /root, /home, /work, /sys,
  the project or its virtualenv (with the HumanEval data). ``readonly_fs``:
  everything but the tmpfs areas is read-only. ``private_tmp``: /tmp,
  /var/tmp and /dev/shm are fresh 16 MiB tmpfs. ``disk_quota``: the working
  directory is a tmpfs of `MAX_DISK_MB`. ``own_proc``: /proc shows only the
  run's processes, read-only. The view vanishes with the namespace; if it
  cannot be built, the code does not run.
- ``rlimit_cpu``: CPU seconds, ceil(timeout) + 1 soft (SIGXCPU), + 2 hard (SIGKILL).
- ``rlimit_as``: `memory_mb` of address space per process; big allocations raise MemoryError.
- ``rlimit_nproc``: `MAX_PROCESSES` tasks (processes and threads). The kernel
  ignores it for root, so it is listed only after the drop to `nobody`, in a
  user namespace, or (plain non-root) as your current task count + `MAX_PROCESSES`.
- ``rlimit_fsize``: no file over `MAX_FILE_MB` (Python sees EFBIG, "File too large").
- ``rlimit_nofile``: `MAX_OPEN_FILES` descriptors. ``rlimit_core``: no core files.
- ``drop_privileges``: as root, after the limits: setgroups([]), setgid(nogroup),
  setuid(nobody); the launcher refuses to run the code if this fails. It needs
  an interpreter `nobody` may execute: one it may execute on the host, or,
  with ``whitelist_fs``, one whose own prefix is world-readable (the pyenv
  Python under /root, mode 700, qualifies there: the view puts its prefix
  below fresh 0755 directories). The default is `/usr/bin/python3` when
  `nobody` may execute it, else `sys.executable`.
- ``drop_capabilities``: whenever there is no drop to `nobody`, the code runs in
  a fresh user namespace where it holds no capability over the mounts,
  network or pids set up for it, so it cannot undo them.
- ``no_new_privs``: setuid binaries (su, sudo, ping) do not raise privileges.
- ``no_network``: a new network namespace holding only a downed loopback
  (`unshare -n` as root, `unshare --user --map-root-user -n` otherwise): even
  127.0.0.1 and abstract unix sockets of the host are unreachable. Listed
  when the launcher sees no interface but `lo`.
- ``no_leftovers``: once every process of the run is gone, the parent makes the
  kernel collect unix-socket descriptor cycles (it does so only when some unix
  socket is released) and waits, at most 1 s, until the run's cgroup holds no
  shared memory: memfds, System V segments and tmpfs files kept alive by
  descriptors in flight (SCM_RIGHTS on a socket whose own descriptor is in
  flight), or by an IPC namespace the kernel frees from a work queue, are gone
  when `execute` returns. Listed when that was seen (``sandbox_init`` and
  ``cgroup_memory``); elsewhere the collection is still started and finishes
  within milliseconds, unobserved.
- ``own_tmpdir``, ``scrubbed_env``: as above, always.
- ``process_group_kill``: at the end, the whole process group gets SIGKILL too
  (what is left where there is no pid namespace).

The parent also enforces a wall-clock `timeout` (so `time.sleep(1000)` and
blocked reads end; `timed_out` is set) and reads stdout and stderr
incrementally, each capped at `max_output_bytes`: reaching the cap kills the
run and sets `output_truncated`. Output is decoded as it arrives, and the
parent closes its ends of the pipes as soon as it stops reading, so no writer
blocked on a full pipe (the code, or `unshare` reporting its killed child)
holds up the end: whatever the code writes, `execute` returns within tens of
milliseconds of the timeout or the cap, plus one copy of the output kept
(about 2 ms per MiB on the development machine).

Not enforced:

- No CPU share: concurrent runs compete for the cores like any process; each
  process has its CPU budget and the run its wall clock.
- As root, concurrent runs are all `nobody` and share its `MAX_PROCESSES`
  budget (the kernel counts per user): a fork spray running alongside can
  make another run fail to fork. Each run's processes end with it, so a run
  cannot starve later ones.
- Reads inside the view are not restricted: /usr (and the interpreter's
  prefix, e.g. a pyenv or conda base with its own site-packages) is readable.
- The seccomp filter denies only the keyring calls (and memfd_create without a
  cgroup); other system calls the sandbox user may make are allowed, e.g.
  creating its own user namespaces where the kernel lets unprivileged users
  (it then holds capabilities over nothing of the host's). On machines other
  than x86_64 and aarch64 there is no filter.
- The fresh /proc still shows machine-wide facts (cpuinfo, meminfo, the
  run's cgroup path, uptime), as does `uname`.
- Without ``cgroup_memory`` (not root, no delegated v2 memory controller),
  limits are per process: a fork spray may hold `MAX_PROCESSES` x `memory_mb`
  of address space, plus the tmpfs areas and `ipc_limits`' shared memory.
- `RLIMIT_AS` counts reserved, not used, memory: a thread costs its 8 MB stack.
- Leftovers are checked by their shared memory only, and only with
  ``cgroup_memory`` and ``sandbox_init``; the wait stops after 1 s (no case is
  known that needs it). Other memory in flight (pipe and socket buffers) is
  freed by the same collection, unobserved.
- Without a pid namespace, a child that calls setsid() escapes the kill (the
  cgroup, where there is one, is still emptied by SIGKILL at the end).
- Without a mount namespace, there is no filesystem view: the code sees the
  host's files (world-readable ones, as `nobody`), including the project and
  its virtualenv, and can reach host unix sockets it may write to; only
  `RLIMIT_FSIZE` bounds writes, and files written outside the working
  directory stay. Without an IPC namespace, System V objects outlive the run.
- Without root and without user namespaces, nothing that needs a namespace or
  a user switch is active: the code runs as you, can write your files, signal
  your processes and use the network. Rlimits, the seccomp filter, the
  timeout, the output cap, the scrubbed environment and the temporary
  directory remain. Check `protections` before running untrusted code there.
- As root with an interpreter `nobody` cannot execute (without a view, one
  under /root), the code keeps uid 0 without capabilities (in a user
  namespace): it may still open root-owned files and device nodes it can
  see (mode bits are enough), and NPROC does not hold.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rewards.sandbox.cgroups import make_cgroup, remove_cgroup, shared_memory, stat_slack
from rewards.sandbox.launcher import LAUNCHER
from rewards.sandbox.limits import MAX_DISK_MB, SHARED_TMPFS_MB
from rewards.sandbox.plan import make_plan, rlimits, seccomp_table, view_binds
from rewards.sandbox.process import close_pipes, collect_unix_garbage, communicate, end_run

__all__ = ["ExecutionResult", "execute", "execute_many"]

_RELEASE_WAIT_S = 1.0
"""Longest wait, after the run's processes are gone, for the kernel to free the shared memory they left."""


@dataclass(frozen=True)
class ExecutionResult:
    """What happened to one snippet. `ok` is exit status 0 within the timeout."""

    ok: bool
    """Exit status 0 within the timeout."""
    stdout: str
    """What the snippet printed, decoded as UTF-8 (undecodable bytes replaced), up to `max_output_bytes`."""
    stderr: str
    """Its error output (tracebacks included), decoded and capped as `stdout`."""
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
        memory_mb: Address-space limit per process; with ``cgroup_memory`` also the run's total
            memory (anonymous, memfd, shared, tmpfs files), plus `CGROUP_SLACK_MB`.
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
    plan = make_plan(python)
    workdir = tempfile.mkdtemp(prefix="comlrl-sandbox-")
    proc: subprocess.Popen[bytes] | None = None
    cgroup = make_cgroup(memory_mb)
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
            "binds": view_binds(plan.python),
            "mount_ns": plan.mount_ns,
            "host_ipc": os.stat("/proc/self/ns/ipc").st_ino if "-i" in plan.prefix else 0,
            "cgroup": cgroup[1] if cgroup else None,
            "seccomp": seccomp_table(),
            "memory_mb": memory_mb,
            "nproc_effective": plan.nproc_effective,
            "rlimits": rlimits(plan, timeout, memory_mb),
            "disk_mb": MAX_DISK_MB,
            "shared_mb": SHARED_TMPFS_MB,
            "status_fd": status_w,
        }
        argv = [*plan.prefix, plan.python, "-I", "-S", "-c", LAUNCHER, json.dumps(config)]
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
        out, err, status, timed_out, truncated = communicate(
            proc, stdin_bytes, status_r, start + timeout, max_output_bytes
        )
        close_pipes(proc)  # nothing more is read: a writer blocked on a full pipe must not hold up the end
        end_run(proc)  # the timeout or the cap; before reaping, so the pgid is still ours
        try:
            returncode: int | None = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            returncode = None
        if returncode == -signal.SIGXCPU:
            timed_out = True
        protections = {"own_tmpdir", "scrubbed_env", "process_group_kill"}
        lines = status.decode("utf-8", "replace").splitlines()
        if lines and lines[0].startswith("["):
            protections.update(json.loads(lines[0]))
            if lines[-1].startswith("EXIT "):  # the code's own status, as its init saw it
                returncode = os.waitstatus_to_exitcode(int(lines[-1][5:]))
                timed_out = timed_out or returncode == -signal.SIGXCPU
            elif timed_out or truncated:
                returncode = -signal.SIGKILL  # the parent killed the run (unshare reports its own status)
        else:
            returncode = None  # the sandbox failed before the code ran (stderr says why)
        if "sandbox_init" in protections and proc.returncode is not None and _release_leftovers(cgroup):
            protections.add("no_leftovers")  # every process is gone, so the cgroup's memory was the leftovers'
        return ExecutionResult(
            ok=returncode == 0 and not timed_out,
            stdout=out,
            stderr=err,
            returncode=returncode,
            timed_out=timed_out,
            duration=time.monotonic() - start,
            output_truncated=truncated,
            protections=tuple(sorted(protections)),
        )
    finally:
        if proc is not None:
            close_pipes(proc)
            end_run(proc)
            if proc.returncode is None:
                try:
                    proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
        if status_r >= 0:
            os.close(status_r)
        if cgroup is not None:
            remove_cgroup(*cgroup)
        collect_unix_garbage()  # also after a failure; without a cgroup this is all that can be done
        _remove_tree(workdir)


def _release_leftovers(cgroup: tuple[int, str] | None) -> bool:
    """Collect the run's descriptor cycles; wait, at most `_RELEASE_WAIT_S`, until its cgroup holds no shared memory.

    Called once every process of the run is gone: what the cgroup still holds then is kept alive by
    descriptors in flight on unix sockets (freed by the collection), or by a namespace the kernel frees
    from a work queue (an IPC namespace with its System V segments, a few ms later). True when the cgroup
    was seen empty of shared memory.
    """
    deadline = time.monotonic() + _RELEASE_WAIT_S
    while True:
        collect_unix_garbage()  # again each round: a collection already running when the run ended may miss it
        held = shared_memory(*cgroup) if cgroup is not None else None
        if held is None:
            return False
        if held <= stat_slack():
            return True
        if time.monotonic() >= deadline:
            return False  # something else holds it; the cgroup is removed anyway
        time.sleep(0.002)


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
