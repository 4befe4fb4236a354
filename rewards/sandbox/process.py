"""The run's process from the parent's side: feed stdin, read capped output, and end every process of it."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

__all__ = ["communicate", "end_run"]

_GRACE_S = 0.5  # drain time after the main process exits, before stragglers' pipes are abandoned
_READ_CHUNK = 65536


def communicate(
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


def end_run(proc: subprocess.Popen[bytes]) -> None:
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
