"""Child processes whose numerics match the test process.

Float reductions on the CPU depend on the torch thread count, so a test that compares weights across
processes must run every process it compares with the same count. conftest pins this process to one
thread; a child started without these variables would take one per core.
"""

from __future__ import annotations

import os

import torch


def child_env(**extra: str) -> dict[str, str]:
    """`os.environ` for a child process: this process's thread count, offline and quiet, plus `extra`."""
    threads = str(torch.get_num_threads())
    return {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error", "TQDM_DISABLE": "1", **extra}
