"""Stopping a run cleanly when the scheduler asks: SIGTERM (preemption, `scancel`) and SIGUSR1 (Slurm's
`--signal=USR1@seconds` warning before the time limit).

While `learn()` trains, the handlers only note the signal. At the next rollout boundary (the rollout's update,
logging, callbacks, evaluation and scheduled checkpoint done) every rank learns whether any rank was signalled
(one MAX all-reduce of the signal number), and then all ranks write a checkpoint together and raise `Preempted`,
which ends the process with exit status 75 (EX_TEMPFAIL): a job script tells it from a failure (1) or a kill
(137, 143) and requeues the job. A second signal ends the process at once, as the default handler would;
`preemption_timeout` bounds the whole stop. Checkpoints are written atomically, so neither leaves a half-written
one behind.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import types
import warnings
from typing import Any, Callable

from learners.checkpointing.manager import CHECKPOINT_PREFIX, CheckpointManager
from learners.parallel.distributed import Distributed

__all__ = ["EXIT_STATUS", "Preempted", "Preemption", "REPEAT_GRACE_S", "SIGNALS"]

EXIT_STATUS = 75
"""EX_TEMPFAIL (sysexits.h): "try again later", the status of a run stopped by a signal after its checkpoint."""

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
"""The signals that stop a run at the next rollout boundary."""

REPEAT_GRACE_S = 2.0
"""A repeat of a signal within this many seconds of the first is the same request delivered twice, not a second
one: Slurm signals every process of a job step, and torchrun forwards the signal it got to its workers too."""

Handler = Callable[[int, types.FrameType | None], Any] | int | None


class Preempted(SystemExit):
    """Raised by `learn()` when a signal stopped it after a finished rollout step and a checkpoint.

    A `SystemExit`, so `except Exception` does not catch it and, uncaught, the process exits with status 75.

    Attributes:
        signum: The signal that stopped the run (under torchrun, the highest number any rank got).
        checkpoint: The checkpoint to resume from, or None when `learn()` had no `checkpoint_dir`.
    """

    def __init__(self, signum: int, checkpoint: str | None) -> None:
        super().__init__(EXIT_STATUS)
        self.signum = signum
        self.checkpoint = checkpoint

    def __str__(self) -> str:
        saved = f"resume from {self.checkpoint}" if self.checkpoint else "nothing was saved (no checkpoint_dir)"
        return f"training stopped by {signal.Signals(self.signum).name} after a finished rollout; {saved}"


class Preemption:
    """The signal handlers of one `learn()` call, as a context manager; `check` runs at every rollout boundary.

    The handlers are installed only in the main thread (Python allows no other) and the previous ones are put
    back on exit, however the block ends. The agreement in `check` is a collective: every rank calls it.

    Args:
        dist: The process group (`check` agrees over it).
        timeout: Seconds from the first signal after which the process exits with status 75 whatever it is
            doing (None: the stop takes as long as the step and the checkpoint need).
    """

    def __init__(self, dist: Distributed, timeout: float | None = None) -> None:
        self.dist = dist
        self.timeout = timeout
        self.signum: int | None = None  # the first signal this process got
        self._first_at = 0.0
        self._previous: dict[int, Handler] = {}
        self._timer: threading.Timer | None = None

    def __enter__(self) -> Preemption:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for sig, handler in self._previous.items():
            # None: a handler installed outside Python, which cannot be put back; the default is the nearest
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        restored, self._previous = bool(self._previous), {}
        if restored and exc_type is None and self.signum is not None:
            # The signal came after the last rollout boundary and the run finished: learn() only defers
            # signals while it trains, so the handler the process had before gets it now.
            signal.raise_signal(self.signum)

    def check(self, ckpt: CheckpointManager, saved: bool) -> None:
        """At a rollout boundary: if any rank got a signal, write a checkpoint (unless `saved`: the manager has
        just written one for this rollout) on every rank and raise `Preempted`."""
        signum = self.dist.max(self.signum or 0)
        if not signum:
            return
        self._start_timer()  # also on the ranks that got no signal: the stop is bounded everywhere
        name = signal.Signals(signum).name
        if self.dist.is_main:
            warnings.warn(f"{name} received: the rollout step is finished; writing a checkpoint and stopping "
                          f"with exit status {EXIT_STATUS}.", stacklevel=3)
        if ckpt.dir is None:
            if self.dist.is_main:
                warnings.warn(f"{name} received but learn() has no checkpoint_dir: nothing could be saved, and a "
                              "restarted run starts from the beginning; pass checkpoint_dir=... to resume.",
                              stacklevel=3)
            raise Preempted(signum, None)
        if not saved:
            ckpt.save_now()
        raise Preempted(signum, os.path.join(ckpt.dir, f"{CHECKPOINT_PREFIX}{ckpt.sequence}"))

    def _handle(self, signum: int, frame: types.FrameType | None) -> None:
        now = time.monotonic()
        if self.signum is None:
            self.signum, self._first_at = signum, now
            # os.write: print() may be in the middle of a write on this very thread, and would raise
            _say(f"{signal.Signals(signum).name} received: stopping after the current rollout step and its "
                 "checkpoint; a second signal ends the process at once.")
            self._start_timer()
            return
        if now - self._first_at < REPEAT_GRACE_S:
            return
        _say(f"second signal ({signal.Signals(signum).name}): exiting now, without a checkpoint.")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # dies of the signal, as it would have without a handler
        os.kill(os.getpid(), signal.SIGKILL)  # only if the signal is blocked

    def _start_timer(self) -> None:
        if self.timeout is not None and self._timer is None:
            self._timer = threading.Timer(self.timeout, _expire, args=(self.timeout,))
            self._timer.daemon = True
            self._timer.start()


def _expire(timeout: float) -> None:
    _say(f"preemption_timeout ({timeout:g} s) exceeded: exiting with status {EXIT_STATUS} before the stop finished.")
    os._exit(EXIT_STATUS)


def _say(message: str) -> None:
    os.write(2, f"comlrl-env: {message}\n".encode())
