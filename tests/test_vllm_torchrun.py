"""vLLM rollouts under torchrun (`make test-vllm`): `examples/vllm_torchrun.py` on 2 gloo ranks, each sampling its
share of every batch on engines of its own, with data parallelism and with FSDP2.

- after every optimizer step, on every rank, the engine's log-probs of a fixed completion equal the trainer's
  (full weights streamed from FSDP shards, LoRA adapters gathered);
- MAGRPO, IAC and MAAC train; the 2-agent toy learns on 2 ranks about as well as in one process;
- engines go down before the process group (a clean exit); a rank that raises ends the run on all ranks with
  its error, within 60 s;
- resume: a killed run resumed on 2 ranks is exact; a data-parallel checkpoint resumes on 1 process and an FSDP one on 4 ranks, whose
  samples continue the saved seeds;
- a tensor-parallel engine group (k=2) gives the greedy completions of k=1.

Four torchrun launches and one plain process (the 4-rank resume is `slow`: one more launch), each job of a
launch reusing the engines the previous one returned: about 9 minutes on the loaded 2-core machine.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from procs import torchrun

pytest.importorskip("vllm")

pytestmark = pytest.mark.vllm

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "vllm_torchrun.py"


def run(out: Path, *args: str, nproc: int = 2, ok: bool = True):
    """The example under torchrun; with `ok`, it succeeds and exits cleanly: its engines went down before the
    process group (the example ends with `destroy_process_group()`; in the other order vLLM's teardown prints
    `ValueError: Invalid process group specified` at exit, with exit status 0 all the same)."""
    done = torchrun(EXAMPLE, out, *args, nproc=nproc, timeout=600)
    if ok:
        assert done.returncode == 0, done.stderr[-4000:]
        assert "Traceback" not in done.stderr and "Invalid process group" not in done.stderr, done.stderr[-4000:]
    return done


def report(out: Path, job: str, rank: int = 0) -> dict:
    return json.loads((out / job / f"rank{rank}.json").read_text())


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory):
    """FSDP2 on 2 ranks: IAC, MAAC, MAGRPO with LoRA and the learning toy, the log-probs checked after every
    optimizer step; then MAGRPO (2 epochs, a checkpoint after each rollout) whose last rank raises after its
    second rollout (trained, not yet checkpointed): a kill between a rollout and its checkpoint."""
    out = tmp_path_factory.mktemp("vllm-fsdp")
    done = run(out, "--sharding", "fsdp", "--learners", "iac", "maac", "lora", "learn", "magrpo", "--check",
               "--fail-at", "2", ok=False)
    return out, done, time.time()


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    """Data parallelism on 2 ranks: IAC, MAAC, the learning toy and MAGRPO (checkpoints), log-probs checked."""
    out = tmp_path_factory.mktemp("vllm-ddp")
    run(out, "--sharding", "none", "--learners", "iac", "maac", "learn", "magrpo", "--check")
    return out


@pytest.fixture(scope="module")
def single(tmp_path_factory, ddp):
    """One process: the learning toy, and MAGRPO resumed from the 2-rank data-parallel run's checkpoint-1."""
    out = tmp_path_factory.mktemp("vllm-one")
    run(out, "--learners", "learn", "magrpo", "--resume", str(ddp / "magrpo" / "checkpoints" / "checkpoint-1"),
        nproc=0)
    return out


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, fsdp):
    """FSDP on 2 ranks: MAGRPO resumed from the killed run's checkpoint-1, then greedy completions of fixed
    prompts on engines of one rank each (k=1)."""
    out = tmp_path_factory.mktemp("vllm-fsdp-resumed")
    run(out, "--sharding", "fsdp", "--learners", "magrpo", "greedy",
        "--resume", str(fsdp[0] / "magrpo" / "checkpoints" / "checkpoint-1"))
    return out


@pytest.mark.parametrize("setup", ["fsdp", "ddp"])
def test_engines_hold_the_trained_weights_after_every_step_on_every_rank(setup, request):
    out = request.getfixturevalue(setup)
    out = out[0] if setup == "fsdp" else out
    jobs = ("iac", "maac", "lora", "learn") if setup == "fsdp" else ("iac", "maac", "learn", "magrpo")
    for job in jobs:
        for rank in (0, 1):
            record = report(out, job, rank)
            steps = {"magrpo": 2, "lora": 2, "learn": 12}.get(job, 1)
            assert len(record["checks"]) == 2 * steps, (job, rank)  # each agent's optimizer, every step
            assert max(record["checks"]) < 1e-4, (job, rank, record["checks"])
            assert all(s > 0 for s in record["sync"]), (job, record["sync"])  # seconds of weight sync per rollout


def test_ranks_sample_their_own_share_with_their_own_seeds(ddp):
    zero, one = report(ddp, "magrpo", 0), report(ddp, "magrpo", 1)
    assert len(zero["completions"][0][0]) == 2 * 4  # 2 of the 4 instances of a rollout, 4 samples each
    assert zero["completions"][0] != one["completions"][0]
    assert zero["rewards"] == one["rewards"]  # metrics are averaged over the ranks


def test_a_rank_that_raises_ends_the_run_on_all_ranks_with_its_error(fsdp):
    out, done, ended = fsdp
    failed = float((out / "failed_at").read_text())
    print(f"the run ended {ended - failed:.1f} s after rank 1 raised")
    assert done.returncode != 0
    assert "RuntimeError: rank 1 fails on purpose after rollout 2" in done.stderr
    assert ended - failed < 60
    # rank 0 may have begun checkpoint-2 (a hidden temporary folder, never a checkpoint) when rank 1 died
    assert sorted(p.name for p in (out / "magrpo" / "checkpoints").glob("checkpoint-*")) == ["checkpoint-1"]


def test_the_toy_learns_on_two_ranks_as_well_as_in_one_process(fsdp, ddp, single):
    finals = {}
    for name, out in (("fsdp", fsdp[0]), ("ddp", ddp), ("one process", single)):
        rewards = report(out, "learn")["rewards"]
        first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
        print(f"{name}: reward {first:.3f} -> {last:.3f}")
        assert len(rewards) == 12 and last > first + 0.1, (name, rewards)
        finals[name] = last
    assert finals["fsdp"] >= 0.8 * finals["one process"] and finals["ddp"] >= 0.8 * finals["one process"], finals


def test_a_killed_fsdp_run_resumed_on_two_ranks_is_exact(fsdp, resumed):
    """Resumed from the last checkpoint before the kill, rollout 2 samples (rank 0's, which it kept) and trains
    (the losses and rewards, means over both ranks) exactly as the killed run did before it died."""
    again, killed = report(resumed, "magrpo", 0), report(fsdp[0], "magrpo", 0)
    assert again["rollouts"] == 2 and len(again["completions"]) == 1 and len(killed["completions"]) == 2
    assert again["completions"][0] == killed["completions"][1]
    assert again["losses"][0] == killed["losses"][1] and again["rewards"][0] == killed["rewards"][1]
    assert again["completions"][0] != report(resumed, "magrpo", 1)["completions"][0]


def test_a_tensor_parallel_engine_group_gives_the_greedy_completions_of_one_engine_per_rank(resumed, tmp_path):
    """k=2: both ranks' prompts gathered into one engine spanning the two ranks, each taking back its rows."""
    run(tmp_path, "--learners", "greedy", "--tensor-parallel", "2")
    for rank in (0, 1):
        k2, k1 = report(tmp_path, "greedy", rank)["completions"], report(resumed, "greedy", rank)["completions"]
        assert k2 == k1 and len(k1[0][0]) == 4 * 2  # 4 prompts of this rank, each greedy twice
    assert report(tmp_path, "greedy", 0)["completions"] != report(tmp_path, "greedy", 1)["completions"]


def test_a_data_parallel_checkpoint_resumes_on_one_process_following_the_seeds(ddp, single):
    """One process continues rank 0's random stream: the first prompt of the next rollout (rank 0's first, agent
    0) gets the same seed, so the same 4 samples, as on rank 0 of the 2-rank run (whose weights it holds)."""
    resumed, rank0 = report(single, "magrpo"), report(ddp, "magrpo", 0)
    assert resumed["rollouts"] == 2 and len(resumed["completions"]) == 1 and len(rank0["completions"]) == 2
    assert len(resumed["completions"][0][0]) == 4 * 4  # all 4 instances in one process
    assert resumed["completions"][0][0][:4] == rank0["completions"][1][0][:4]


@pytest.mark.slow  # four ranks with engines on 2 cores: two minutes (`make test-vllm-slow`)
def test_a_two_rank_fsdp_checkpoint_resumes_on_four_ranks_following_the_seeds(fsdp, tmp_path):
    """Ranks 0 and 1 continue their saved streams (2 and 3 start from their own seeds, with a warning): rank 0's
    first prompt of the next rollout gets the same seed and weights, so the same 4 samples."""
    run(tmp_path, "--sharding", "fsdp", "--learners", "magrpo",
        "--resume", str(fsdp[0] / "magrpo" / "checkpoints" / "checkpoint-1"), nproc=4)
    resumed, killed = report(tmp_path, "magrpo", 0), report(fsdp[0], "magrpo", 0)
    assert resumed["world"] == 4 and resumed["rollouts"] == 2 and len(resumed["completions"]) == 1
    assert len(resumed["completions"][0][0]) == 4  # one instance per rank
    assert resumed["completions"][0][0] == killed["completions"][1][0][:4]
