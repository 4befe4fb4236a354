"""Data parallelism under torchrun on CPU (gloo, two processes): identical weights, single-process
agreement, rank-0-only files, and checkpoint -> resume on two ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from procs import child_env

pytestmark = pytest.mark.torchrun  # two processes per run: `make test-torchrun`, out of the default suite

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "distributed.py"


def torchrun(out: Path, *args: str, nproc: int = 2) -> list[dict]:
    env = child_env()  # every run compared here has this process's thread count
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(EXAMPLE),
           "--out", str(out), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((out / f"weights-rank{r}.json").read_text()) for r in range(nproc)]


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp-full")
    return out, torchrun(out, "--epochs", "2")


def test_ranks_keep_identical_weights_and_only_rank_0_writes(two_epochs):
    out, ranks = two_epochs
    assert ranks[0]["sha256"] == ranks[1]["sha256"]
    assert ranks[0]["env_steps"] == 2 * 8 * 4  # global count: 2 epochs x 8 tasks x 4 samples
    lines = (out / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 4  # 2 epochs x 2 rollouts, logged once (by rank 0)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["checkpoint-1", "checkpoint-2"]
    assert (out / "agents" / "agent_1" / "model.safetensors").exists()


def test_resume_on_two_ranks_matches_the_uninterrupted_run(two_epochs, tmp_path):
    _, full = two_epochs
    first = torchrun(tmp_path, "--epochs", "1")
    assert first[0]["epoch"] == 1
    resumed = torchrun(tmp_path, "--epochs", "2", "--resume", str(tmp_path / "checkpoints" / "checkpoint-1"))
    assert resumed[0]["sha256"] == resumed[1]["sha256"] == full[0]["sha256"]


def test_two_ranks_agree_with_one_process_over_the_same_global_batch(tmp_path):
    """Deterministic (beam-search) rollouts: two ranks' averaged gradients equal one process's."""
    from safetensors.torch import load_file

    torchrun(tmp_path / "two", "--epochs", "1", "--beams")
    torchrun(tmp_path / "one", "--epochs", "1", "--beams", nproc=1)
    start = load_file(tmp_path / "one" / "tiny-model" / "model.safetensors")
    for i in range(2):
        a = load_file(tmp_path / "two" / "agents" / f"agent_{i}" / "model.safetensors")
        b = load_file(tmp_path / "one" / "agents" / f"agent_{i}" / "model.safetensors")
        diff = sum(float((a[k] - b[k]).abs().sum()) for k in a)
        update = sum(float((b[k] - start[k]).abs().sum()) for k in a)
        # Float-level differences only (Adam amplifies them on near-zero gradients): measured ~0.2% of the
        # update; a wrong gradient weighting would be tens of percent.
        assert update > 0 and diff / update < 0.01, diff / update


def test_train_batch_size_is_global_so_the_step_count_does_not_depend_on_the_ranks(tmp_path):
    """It counted per rank: 2 ranks took half the optimizer steps of 1 process on the same data."""
    two = torchrun(tmp_path / "two", "--epochs", "1", "--train-batch-size", "2")
    one = torchrun(tmp_path / "one", "--epochs", "1", "--train-batch-size", "2", nproc=1)
    # 8 task instances (groups) per epoch in 2 rollouts of 4; 2 groups per step: 4 steps either way.
    assert two[0]["optimizer_steps"] == two[1]["optimizer_steps"] == one[0]["optimizer_steps"] == 4


def test_a_two_rank_checkpoint_resumes_in_one_process(two_epochs, tmp_path):
    out, _ = two_epochs
    resumed = torchrun(tmp_path, "--epochs", "2", "--resume", str(out / "checkpoints" / "checkpoint-1"), nproc=1)
    assert resumed[0]["epoch"] == 2 and resumed[0]["env_steps"] == 2 * 8 * 4
