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
of the namespace, and `execute` returns after `unshare` has seen them all go. No `preexec_fn`, so `execute_many`'s threads are safe.
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
- ``own_tmpdir``, ``scrubbed_env``: as above, always.
- ``process_group_kill``: at the end, the whole process group gets SIGKILL too
  (what is left where there is no pid namespace).

The parent also enforces a wall-clock `timeout` (so `time.sleep(1000)` and
blocked reads end; `timed_out` is set) and reads stdout and stderr
incrementally, each capped at `max_output_bytes`: reaching the cap kills the
run and sets `output_truncated`.

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
CGROUP_SLACK_MB = 32
"""Added to `memory_mb` for the run's cgroup: the launcher that stays as the namespace's init, page tables."""
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
# user, inside the namespaces. It joins the run's cgroup, builds the filesystem
# view, then forks: the child sets the limits, drops privileges, installs the
# seccomp filter, reports what took effect on the status pipe and execs the
# interpreter on main.py; the launcher stays as the pid namespace's init, reaps,
# and reports the code's exit status. When the launcher dies (the code's main
# process exited, or the parent killed it), the kernel kills the whole namespace.
_LAUNCHER = r"""
import json, os, signal, struct, sys
cfg = json.loads(sys.argv[1])
os.umask(0o022)  # the view's directories must be traversable by the sandbox user
signal.signal(signal.SIGINT, signal.SIG_DFL)  # as init, a signal without a handler from inside is dropped
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

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_MOVE = 1, 2, 4, 8, 32, 4096, 8192

def mount(src, target, fstype, flags, data):
    if libc is None:
        raise OSError("no libc: cannot mount " + target)
    enc = lambda s: None if s is None else os.fsencode(s)
    if libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount %s on %s: %s" % (src or fstype, target, os.strerror(err)))

def prctl(option, arg):
    return libc is not None and libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) == 0

def kept_flags(path):
    # flags a bind remount must keep (locked in a user namespace): nosuid, nodev, noexec, atime
    f = os.statvfs(path).f_flag
    return (f & (2 | 4 | 8 | 1024 | 2048)) | ((1 << 21) if f & 4096 else 0)

def bind_ro(root, src, extra=MS_NOSUID | MS_NODEV | MS_NOEXEC):
    dst = root + src
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    mount(src, dst, None, MS_BIND, None)
    mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | extra | kept_flags(src), None)

def build_view(root, workdir, uid, gid):
    # A new root on a small tmpfs holding only what the whitelist names; the host's
    # /run, /tmp, /root, /home, /work, /sys and every other path stay out of reach.
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    for src in cfg["binds"]:
        bind_ro(root, src, MS_NOSUID | MS_NODEV)  # interpreter and stdlib: executable, read-only
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = "/" + name
        if os.path.islink(path):
            os.symlink(os.readlink(path), root + path)
        elif os.path.isdir(path) and path not in cfg["binds"]:
            bind_ro(root, path, MS_NOSUID | MS_NODEV)
    os.makedirs(root + "/etc")
    with open(root + "/etc/passwd", "w") as f:
        f.write("root:x:0:0:root:/:/bin/sh\nnobody:x:%d:%d:nobody:/:/bin/sh\n" % (uid or 65534, gid or 65534))
    with open(root + "/etc/group", "w") as f:
        f.write("root:x:0:\nnogroup:x:%d:\n" % (gid or 65534))
    for path in ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"):
        if os.path.exists(path):
            bind_ro(root, path)
    os.makedirs(root + "/dev")
    for name in ("null", "zero", "full", "random", "urandom"):
        bind_ro(root, "/dev/" + name, MS_NOSUID | MS_NOEXEC)  # writes to a device node pass a read-only mount
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, root + "/dev/" + name)
    shared = "size=%dm,nr_inodes=1024,mode=1777" % cfg["shared_mb"]
    for path in ("/tmp", "/var/tmp", "/dev/shm"):
        os.makedirs(root + path, exist_ok=True)
        mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV, shared)
    os.makedirs(root + workdir, exist_ok=True)
    mount("tmpfs", root + workdir, "tmpfs", MS_NOSUID | MS_NODEV,
          "size=%dm,nr_inodes=4096,mode=0700,uid=%d,gid=%d" % (cfg["disk_mb"], uid, gid))
    if os.getpid() == 1:
        os.makedirs(root + "/proc")
        mount("proc", root + "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    os.chdir(root)
    pivot = {"x86_64": 155, "aarch64": 41, "riscv64": 41}.get(os.uname().machine)
    if pivot is not None and libc.syscall(pivot, b".", b".") == 0:
        if libc.umount2(b".", 2) != 0:  # MNT_DETACH: the host's tree leaves this namespace
            raise OSError(ctypes.get_errno(), "could not detach the old root")
    else:  # e.g. an initramfs root, which pivot_root refuses
        mount(".", "/", None, MS_MOVE, None)
        if libc.chroot(b".") != 0:
            raise OSError(ctypes.get_errno(), "chroot failed")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)

def seccomp_deny(arch, numbers, x32):
    # Classic BPF: other ABIs (i386 via int 0x80, x32) get EPERM for everything,
    # the listed native syscalls get EPERM, the rest is allowed.
    deny = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
    prog = [(0x20, 0, 0, 4), (0x15, 1, 0, arch), (0x06, 0, 0, deny), (0x20, 0, 0, 0)]
    body = ([(0x35, 0x40000000)] if x32 else []) + [(0x15, nr) for nr in numbers]
    for i, (op, k) in enumerate(body):
        prog.append((op, len(body) - i, 0, k))
    prog += [(0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, deny)]
    buf = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *ins) for ins in prog))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(prog), ctypes.addressof(buf))
    return libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER

def join_cgroup(fd):
    try:
        os.write(fd, b"0")  # this process; the code, forked later, inherits the cgroup
        active.append("cgroup_memory")
    except OSError:
        pass
    os.close(fd)

if cfg["cgroup"]:  # a move may wait for an RCU grace period (~10 ms): overlap it with the mounts
    import threading
    try:
        procs_fd = os.open(os.path.join(cfg["cgroup"], "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        procs_fd = -1
    joining = threading.Thread(target=join_cgroup, args=(procs_fd,))
    if procs_fd >= 0:
        joining.start()

if cfg["host_ipc"] and os.stat("/proc/self/ns/ipc").st_ino != cfg["host_ipc"]:
    active.append("ipc_namespace")
    # SysV limits of the fresh IPC namespace (root of it only): a bound even without a cgroup
    pages = cfg["memory_mb"] * 256
    for name, value in (("shmmax", pages * 4096), ("shmall", pages), ("shmmni", 64), ("msgmni", 16)):
        try:
            with open("/proc/sys/kernel/" + name, "w") as f:
                f.write(str(value))
        except OSError:
            break
    else:
        active.append("ipc_limits")

# At the memory limit the kernel kills the code, not its init, so that the init reports the kill:
# the init is spared where it may be (root), the code is the first choice. /proc turns read-only
# below, hence the host's /proc kept open for the child.
proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
try:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("-1000")
except OSError:
    pass

workdir = cfg["workdir"]
main = os.path.join(workdir, "main.py")
with open(main, "rb") as f:
    code = f.read()  # before the new root hides the host directory
uid, gid = cfg["uid"], cfg["gid"]
owner = (uid, gid) if uid is not None else (os.getuid(), os.getgid())

if cfg["mount_ns"]:
    try:
        build_view(workdir, workdir, *owner)
    except (OSError, AttributeError) as exc:
        die("could not build the filesystem view: %s" % exc)  # never run on a half-built view
    active += ["whitelist_fs", "readonly_fs", "private_tmp", "disk_quota"]
    if os.getpid() == 1:
        active.append("own_proc")

with open(main, "wb") as f:
    f.write(code)
if os.getpid() == 1:
    active += ["pid_namespace", "sandbox_init"]
try:
    import socket
    if {name for _, name in socket.if_nameindex()} <= {"lo"}:
        active.append("no_network")
except Exception:
    pass

def run_code():
    import resource
    try:
        fd = os.open("self/oom_score_adj", os.O_WRONLY, dir_fd=proc_fd)
        os.write(fd, b"1000")
        os.close(fd)
    except OSError:
        pass
    os.close(proc_fd)
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
    prctl(1, 9)  # PR_SET_PDEATHSIG=SIGKILL
    if prctl(38, 1):  # PR_SET_NO_NEW_PRIVS
        active.append("no_new_privs")
    sc = cfg["seccomp"]
    if sc and libc is not None and "no_new_privs" in active:
        numbers = sc["keyring"] + ([] if "cgroup_memory" in active else sc["memfd"])
        if seccomp_deny(sc["arch"], numbers, sc["x32"]):
            active.append("no_keyring")
            if "cgroup_memory" not in active:
                active.append("no_memfd")
    if cfg["drop_caps"] and libc is not None and libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER, nothing mapped
        active.append("drop_capabilities")
    os.chdir(workdir)
    os.write(status_fd, (json.dumps(active) + "\n").encode())
    try:
        os.execv(cfg["python"], [cfg["python"], "-s", main])
    except OSError as exc:
        die("could not exec %s: %s" % (cfg["python"], exc))

if cfg["cgroup"] and procs_fd >= 0:
    joining.join()
child = os.fork()
if child == 0:
    try:
        run_code()
    finally:
        os._exit(125)
os.close(proc_fd)
prctl(4, 0)  # PR_SET_DUMPABLE=0: code running as the same user may not ptrace its init
while True:  # as pid 1, also reap orphans until the code's main process exits
    try:
        pid, wstatus = os.waitpid(-1, 0)
    except ChildProcessError:
        os._exit(125)
    except InterruptedError:
        continue
    if pid == child:
        break
os.write(status_fd, b"EXIT %d\n" % wstatus)
os._exit(0)
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


def _plan(python: str | None) -> _Plan:
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


def _view_binds(python: str) -> list[str]:
    """Host directories mounted read-only in the sandbox: /usr and the interpreter's own prefix."""
    prefix = os.path.dirname(os.path.dirname(python))  # python is already a real path: .../bin/python3.x
    binds = ["/usr"]
    if prefix not in ("/", "") and not (prefix + "/").startswith("/usr/"):
        binds.append(prefix)
    return binds


def _seccomp_table() -> dict[str, Any] | None:
    """Audit arch and syscall numbers for the seccomp filter, where this machine's ABI is known."""
    machine = platform.machine()
    if machine == "x86_64":
        return {"arch": 0xC000003E, "keyring": [248, 249, 250], "memfd": [319], "x32": True}
    if machine in ("aarch64", "arm64"):
        return {"arch": 0xC00000B7, "keyring": [217, 218, 219], "memfd": [279], "x32": False}
    return None


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


def _make_cgroup(memory_mb: int) -> tuple[int, str] | None:
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
                _remove_cgroup(version, path)
                return None
    return version, path


def _remove_cgroup(version: int, path: str) -> None:
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
    plan = _plan(python)
    workdir = tempfile.mkdtemp(prefix="comlrl-sandbox-")
    proc: subprocess.Popen[bytes] | None = None
    cgroup = _make_cgroup(memory_mb)
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
            "binds": _view_binds(plan.python),
            "mount_ns": plan.mount_ns,
            "host_ipc": os.stat("/proc/self/ns/ipc").st_ino if "-i" in plan.prefix else 0,
            "cgroup": cgroup[1] if cgroup else None,
            "seccomp": _seccomp_table(),
            "memory_mb": memory_mb,
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
        _end_run(proc)  # the timeout or the cap; before reaping, so the pgid is still ours
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
            _end_run(proc)
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
        if cgroup is not None:
            _remove_cgroup(*cgroup)
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


def _end_run(proc: subprocess.Popen[bytes]) -> None:
    """Kill the run and wait until every process of it is gone (with a pid namespace), without reaping `proc`.

    The launcher is `proc`'s child (the namespace's init, under `unshare --fork`) or `proc` itself. Killing
    it makes the kernel kill every process of the namespace, setsid() escapees included, and `unshare`
    exits only once they are all gone.
    """
    if proc.returncode is not None:
        return
    killed = False
    if not _has_exited(proc.pid):
        for pid in _children_of(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed = True
            except OSError:
                pass
    deadline = time.monotonic() + 5
    while killed and not _has_exited(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.002)
    _kill_group(proc)  # unshare itself if it hung; without a pid namespace, what is left in the group


def _children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):  # a kernel without CONFIG_PROC_CHILDREN
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                            found.append(int(name))
                except (OSError, ValueError, IndexError):
                    pass
        return found


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
