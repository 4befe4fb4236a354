"""Child processes whose numerics match the test process.

Float reductions on the CPU depend on the torch thread count, so a test that compares weights across
processes must run every process it compares with the same count. conftest pins this process to one
thread; a child started without these variables would take one per core.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings

import torch


def child_env(**extra: str) -> dict[str, str]:
    """`os.environ` for a child process: this process's thread count, offline and quiet, plus `extra`."""
    threads = str(torch.get_num_threads())
    return {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error", "TQDM_DISABLE": "1", **extra}


def torchrun(script: "os.PathLike[str] | str", out: "os.PathLike[str] | str", *args: str, nproc: int = 2,
             restarts: int = 0, timeout: float = 300, **popen: object) -> "subprocess.CompletedProcess[str] | subprocess.Popen[str]":
    """Run `script --out OUT args` under `torchrun --standalone` with `nproc` processes (0: as one plain process)
    and `--max-restarts restarts`, with `child_env`; waits and returns the completed process, or with `popen` arguments returns the Popen.

    gloo on an oversubscribed CPU has (once in CI, never in 54 local tries) aborted a rank in native code with no
    Python error: such a run is rerun once from a clean `out`, with a warning in the summary."""
    runner = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
              f"--max-restarts={restarts}"] if nproc else []
    cmd = [sys.executable, *runner, str(script), "--out", str(out), *args]
    env = child_env(PYTHONFAULTHANDLER="1")  # a native abort prints its Python stack
    if popen:
        return subprocess.Popen(cmd, env=env, text=True, **popen)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0 and native_abort(done.stderr) and not any(str(out) in a for a in args):
        warnings.warn(f"a rank aborted in native code; rerunning once:\n{done.stderr[-3000:]}", stacklevel=2)
        shutil.rmtree(out)
        os.makedirs(out)
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return done


def native_abort(stderr: str) -> bool:
    """A rank died of SIGABRT after C++'s `std::terminate` (a Python exception in a script exits with 1)."""
    return "terminate called" in stderr and "exitcode  : -6" in stderr
