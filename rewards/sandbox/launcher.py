"""The launcher: the script the run's interpreter executes inside the namespaces, before the code."""

__all__ = ["LAUNCHER"]

# The launcher runs with the chosen interpreter (`-I -S`), as root or the calling
# user, inside the namespaces. It joins the run's cgroup, builds the filesystem
# view, then forks: the child sets the limits, drops privileges, installs the
# seccomp filter, reports what took effect on the status pipe and execs the
# interpreter on main.py; the launcher stays as the pid namespace's init, reaps,
# and reports the code's exit status. When the launcher dies (the code's main
# process exited, or the parent killed it), the kernel kills the whole namespace.
LAUNCHER = r"""
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
