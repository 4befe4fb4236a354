"""The run's process from the parent's side: feed stdin, read capped output, end every process of it and
free what it left in flight on unix sockets."""

from __future__ import annotations

import codecs
import os
import selectors
import signal
import socket
import subprocess
import time

__all__ = ["close_pipes", "collect_unix_garbage", "communicate", "end_run"]

_GRACE_S = 0.5  # drain time after the main process exits, before stragglers' pipes are abandoned
_READ_CHUNK = 65536


def communicate(
    proc: subprocess.Popen[bytes],
    stdin_bytes: bytes | None,
    status_fd: int,
    deadline: float,
    cap: int,
) -> tuple[str, str, bytes, bool, bool]:
    """Feed stdin and read stdout, stderr and the launcher's status until exit, the deadline or the cap.

    Output is decoded (UTF-8, invalid bytes replaced) as it arrives, so that after the deadline only one
    join per stream is left to do, whatever the code wrote: a flood pays for its decoding in its own time.
    """
    assert proc.stdout is not None and proc.stderr is not None
    streams = {proc.stdout.fileno(): _Text(cap), proc.stderr.fileno(): _Text(cap)}
    status = bytearray()
    timed_out = truncated = False
    with selectors.DefaultSelector() as sel:
        for fd in (*streams, status_fd):
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
                elif not streams[fd].add(chunk):
                    truncated = True
    out, err = (streams[f.fileno()].text() for f in (proc.stdout, proc.stderr))
    return out, err, bytes(status), timed_out, truncated


class _Text:
    """One output stream: at most `cap` bytes, decoded piece by piece."""

    def __init__(self, cap: int) -> None:
        self.room = cap
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")  # keeps a character split across reads
        self.pieces: list[str] = []

    def add(self, chunk: bytes) -> bool:
        """Keep what fits under the cap; False when `chunk` did not fit."""
        kept = chunk[: self.room]
        self.room -= len(kept)
        self.pieces.append(self.decoder.decode(kept))
        return len(kept) == len(chunk)

    def text(self) -> str:
        return "".join(self.pieces) + self.decoder.decode(b"", final=True)


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


def close_pipes(proc: subprocess.Popen[bytes]) -> None:
    """Close the parent's ends of stdin, stdout and stderr.

    Done as soon as the output is no longer read: a writer blocked on a full pipe (the code's flood, or
    `unshare`'s own message once its child was killed) then gets EPIPE or SIGPIPE instead of waiting for a
    reader that will never come, so the end of the run never waits on what it wrote.
    """
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


def collect_unix_garbage() -> None:
    """Make the kernel free descriptor cycles in flight on unix sockets, machine-wide.

    A descriptor sent with SCM_RIGHTS and never received is held by the receiving socket's queue. When
    that socket's own descriptor is in flight too (sent on itself, or on a socket in the same cycle),
    nothing but the kernel's garbage collector can free the cycle and what it holds (memfds, an IPC or
    mount namespace, tmpfs files), and the kernel runs it only when some unix socket is released (or when
    very many descriptors are in flight). Releasing a socket pair here schedules a collection; it costs
    microseconds when nothing is in flight.
    """
    try:
        a, b = socket.socketpair()
    except OSError:  # e.g. no descriptor left in this process: the next run's end tries again
        return
    a.close()
    b.close()


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
