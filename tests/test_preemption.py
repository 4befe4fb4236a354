"""Preemption: SIGTERM or SIGUSR1 stops `learn()` after the current rollout step with a checkpoint and exit
status 75 (`learners.Preempted`), and the relaunched command resumes to the weights of a run never stopped;
a second signal and an exceeded `preemption_timeout` end the process at once; the handlers last only as long
as `learn()`. Each run is a child process: this file run as a script (`python tests/test_preemption.py
--out DIR ...`), alone or under torchrun.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
EPOCHS = 2  # 8 task instances, 4 per rollout: 2 rollouts an epoch, 4 in all
SIGNAL_AT = 1  # the rollout whose on_step_end sends the signal: mid-epoch 1


def run(out: Path, model: str, *args: str, nproc: int = 0) -> subprocess.CompletedProcess[str]:
    """This file as a script (`nproc` 0: one plain process; else under torchrun with `nproc` ranks)."""
    from procs import child_env

    runner = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] if nproc else []
    cmd = [sys.executable, *runner, str(HERE), "--out", str(out), "--model", model, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=300)


def checkpoints(out: Path) -> list[str]:
    d = out / "checkpoints"
    return sorted(n for n in os.listdir(d) if n.startswith("checkpoint-")) if d.is_dir() else []


def logged_rollouts(out: Path) -> list[int]:
    """The `step` of each training row in the run's metrics.jsonl."""
    rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if "train/reward_mean" in r]


def digest(out: Path, rank: int = 0) -> str:
    return json.loads((out / f"weights-rank{rank}.json").read_text())["sha256"]


@pytest.fixture(scope="module")
def uninterrupted(tiny_dir, tmp_path_factory) -> str:
    """SHA-256 of both agents' weights after a run of 2 epochs that no signal stopped."""
    out = tmp_path_factory.mktemp("full")
    done = run(out, tiny_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return digest(out)


def stopped_and_resumed(tiny_dir: str, out: Path, signame: str, nproc: int = 0) -> str:
    """Stop a run with `signame` at rollout SIGNAL_AT, check its exit and checkpoint, then relaunch the same
    command (`resume_from_checkpoint=True`: the newest complete checkpoint); returns the resumed run's weight
    digest (every rank's the same)."""
    from learners import read_checkpoint_metadata

    done = run(out, tiny_dir, "--send", signame, *(["--send-rank", "1"] if nproc else []), nproc=nproc)
    if nproc:  # torchrun reports a failed worker as 1 and prints each rank's exit code
        assert done.returncode != 0 and done.stderr.count("exitcode  : 75") >= 1, done.stderr[-3000:]
        statuses = [json.loads((out / f"stopped-rank{r}.json").read_text()) for r in range(nproc)]
        assert [s["code"] for s in statuses] == [75] * nproc, statuses  # every rank, the unsignalled one too
    else:
        assert done.returncode == 75, done.stderr[-3000:]
    assert f"{signame} received" in done.stderr
    assert checkpoints(out) == ["checkpoint-1"]  # the first scheduled one ends epoch 1 (rollout 2): the stop wrote it
    meta = read_checkpoint_metadata(out / "checkpoints" / "checkpoint-1")
    assert meta["progress"]["rollouts_done"] == SIGNAL_AT and meta["progress"]["batch_in_epoch"] == SIGNAL_AT
    assert len(logged_rollouts(out)) == SIGNAL_AT
    resumed = run(out, tiny_dir, nproc=nproc)  # the same command, as a requeued job runs it
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert logged_rollouts(out) == [8, 16, 24, 32]  # env steps at each rollout's row: each rollout once
    assert checkpoints(out) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]  # epochs 1 and 2, numbered on
    digests = {digest(out, r) for r in range(max(nproc, 1))}
    assert len(digests) == 1
    return digests.pop()


@pytest.mark.parametrize("signame", ["SIGTERM", pytest.param("SIGUSR1", marks=pytest.mark.slow)])  # one handler
def test_a_signal_stops_after_the_step_with_a_checkpoint_and_the_resumed_run_matches(signame, tiny_dir, tmp_path,
                                                                                    uninterrupted):
    """SIGTERM (preemption, scancel) and SIGUSR1 (Slurm's --signal warning): exit 75 after a checkpoint at the
    rollout that finished; resumed, the run ends with the weights of the run no signal stopped."""
    assert stopped_and_resumed(tiny_dir, tmp_path, signame) == uninterrupted


def test_a_second_signal_ends_the_process_at_once(tiny_dir, tmp_path):
    """A second SIGTERM while the checkpoint is about to be written: the process dies of the signal, with no
    checkpoint and no 75."""
    done = run(tmp_path, tiny_dir, "--send", "SIGTERM", "--second-signal")
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stderr[-3000:])
    assert "second signal (SIGTERM): exiting now" in done.stderr
    assert checkpoints(tmp_path) == []


def test_the_same_signal_twice_at_once_is_one_request(tiny_dir, tmp_path):
    """Slurm signals every process of a step and torchrun forwards the signal to its workers: a repeat within
    REPEAT_GRACE_S of the first is the same request, and the run still stops with its checkpoint."""
    done = run(tmp_path, tiny_dir, "--send", "SIGTERM", "--repeat-signal")
    assert done.returncode == 75, done.stderr[-3000:]
    assert checkpoints(tmp_path) == ["checkpoint-1"]


def test_an_exceeded_preemption_timeout_exits_75_at_once(tiny_dir, tmp_path):
    """The checkpoint write hangs (60 s here); preemption_timeout=1 ends the process 1 s after the signal."""
    start = time.monotonic()
    done = run(tmp_path, tiny_dir, "--send", "SIGUSR1", "--timeout", "1", "--slow-save", "60")
    assert done.returncode == 75, done.stderr[-3000:]
    assert time.monotonic() - start < 50
    assert "preemption_timeout (1 s) exceeded" in done.stderr
    assert checkpoints(tmp_path) == []


def test_without_a_checkpoint_dir_it_warns_that_nothing_was_saved(tiny_dir, tmp_path):
    done = run(tmp_path, tiny_dir, "--send", "SIGTERM", "--no-checkpoints")
    assert done.returncode == 75, done.stderr[-3000:]
    assert "nothing could be saved" in done.stderr


@pytest.mark.torchrun
def test_two_ranks_stop_together_and_resume_to_the_uninterrupted_run(tiny_dir, tmp_path):
    """torchrun, 2 gloo ranks: SIGTERM reaches rank 1 only; both ranks agree at the rollout boundary, write the
    checkpoint together and exit 75; resumed on 2 ranks, the run ends as a 2-rank run no signal stopped.
    About a minute on 2 CPU cores."""
    full = tmp_path / "full"
    done = run(full, tiny_dir, nproc=2)
    assert done.returncode == 0, done.stderr[-3000:]
    assert stopped_and_resumed(tiny_dir, tmp_path / "stopped", "SIGTERM", nproc=2) == digest(full)


@pytest.mark.vllm
def test_with_vllm_a_signal_stops_the_run_and_removes_its_adapter_folder(tmp_path):
    """The vLLM backend with a LoRA adapter per agent: SIGTERM ends the run with status 75, and the adapter
    folder the backend kept in memory (/dev/shm) is gone with it."""
    pytest.importorskip("vllm")
    from comlrl_env.testing import tiny_model

    model = str(tiny_model(tmp_path / "tiny-qwen2-hd64", hidden_size=128, num_heads=2, num_kv_heads=1))
    done = run(tmp_path, model, "--send", "SIGTERM", "--vllm")
    assert done.returncode == 75, done.stderr[-3000:]
    root = (tmp_path / "adapter-root.txt").read_text()
    assert root and not os.path.exists(root)
    assert checkpoints(tmp_path) == ["checkpoint-1"]


def test_handlers_last_only_as_long_as_learn(tiny_dir):
    """Inside learn() SIGTERM and SIGUSR1 have the preemption handler; before and after, the process's own,
    also when learn() raises; in a thread other than the main one learn() installs none and runs. A signal
    that comes after the last rollout boundary lets the run finish and then reaches the process's own handler."""
    from learners import MAGRPO
    from learners.loop.preemption import SIGNALS, Preemption

    got = []

    def mine(signum, frame):
        got.append(signum)

    before = {s: signal.signal(s, mine) for s in SIGNALS}
    seen = []
    try:
        class Look:
            def on_step_end(self, learner, metrics):
                seen.append({s: signal.getsignal(s) for s in SIGNALS})

        learner = MAGRPO(agent_model=tiny_dir, num_agents=2, env="smoke/FormatAgreement-v1",
                         args=config(epochs=1), callbacks=[Look()])
        learner.learn()
        assert all(h is not mine and isinstance(getattr(h, "__self__", None), Preemption) for h in seen[0].values())
        assert all(signal.getsignal(s) is mine for s in SIGNALS)

        class Boom:
            def on_step_end(self, learner, metrics):
                raise RuntimeError("boom")

        learner.callbacks = [Boom()]
        learner.args.num_train_epochs = 2
        with pytest.raises(RuntimeError, match="boom"):
            learner.learn()
        assert all(signal.getsignal(s) is mine for s in SIGNALS)
        learner.callbacks = [Look()]
        learner.args.num_train_epochs = 3
        seen.clear()
        thread = threading.Thread(target=learner.learn)
        thread.start()
        thread.join()
        assert seen and all(h is mine for h in seen[0].values())

        class Late:  # a signal after the last rollout boundary: the run finishes, then the old handler gets it
            def on_learn_end(self, learner):
                os.kill(os.getpid(), signal.SIGUSR1)

        learner.callbacks = [Late()]
        learner.args.num_train_epochs = 4
        assert got == []
        learner.learn()
        assert learner.epoch == 4 and got == [signal.SIGUSR1]
    finally:
        for s, h in before.items():
            signal.signal(s, h)


# ----- the child process ---------------------------------------------------------------------------------------


def config(epochs: int, **extra):
    from learners import MAGRPOConfig

    return MAGRPOConfig(num_train_epochs=epochs, episodes_per_epoch=8, num_generations=2, rollout_buffer_size=4,
                        max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None, agent_learning_rate=1e-2,
                        eval_interval=0, verbose=False, **extra)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--send", default=None, help="send this signal to itself at rollout SIGNAL_AT")
    parser.add_argument("--send-rank", type=int, default=None, help="under torchrun, only this rank sends it")
    parser.add_argument("--second-signal", action="store_true", help="signal again as the checkpoint starts")
    parser.add_argument("--repeat-signal", action="store_true", help="send the signal twice in a row")
    parser.add_argument("--slow-save", type=float, default=0.0, help="seconds each checkpoint write waits first")
    parser.add_argument("--timeout", type=float, default=None, help="preemption_timeout")
    parser.add_argument("--no-checkpoints", action="store_true")
    parser.add_argument("--vllm", action="store_true", help="the vLLM backend, a LoRA adapter per agent")
    args = parser.parse_args()

    import torch

    from learners import MAGRPO, Preempted
    from learners.loop import preemption

    sig = getattr(signal, args.send) if args.send else None

    class Signal:
        def on_step_end(self, learner, metrics):
            if sig and learner.rollouts_done == SIGNAL_AT and args.send_rank in (None, learner.dist.rank):
                if args.vllm:  # the backend's adapter folder, while it holds the adapters' configs
                    root = learner.engine.backend.adapter_root
                    with open(os.path.join(args.out, "adapter-root.txt"), "w") as f:
                        f.write(root if os.listdir(root) else "")
                os.kill(os.getpid(), sig)
                if args.repeat_signal:
                    os.kill(os.getpid(), sig)

    extra = {"output_dir": os.path.join(args.out, "run")}
    if args.timeout is not None:
        extra["preemption_timeout"] = args.timeout
    if args.vllm:
        extra.update(generation_backend="vllm", vllm_engine_args={"kv_cache_memory_bytes": 64 << 20},
                     peft_config={"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    learner = MAGRPO(agent_model=args.model, num_agents=2, env="smoke/FormatAgreement-v1", args=config(EPOCHS, **extra),
                     callbacks=[Signal()])
    save = learner.save_checkpoint

    def save_checkpoint(path: str) -> str:
        if args.second_signal:
            preemption.REPEAT_GRACE_S = 0.0  # a real second signal comes later; the test has no time to wait
            os.kill(os.getpid(), sig)
        time.sleep(args.slow_save)
        return save(path)

    learner.save_checkpoint = save_checkpoint
    checkpoint_dir = None if args.no_checkpoints else os.path.join(args.out, "checkpoints")
    rank = learner.dist.rank
    try:
        learner.learn(checkpoint_dir=checkpoint_dir, resume_from_checkpoint=checkpoint_dir is not None)
    except Preempted as stop:
        with open(os.path.join(args.out, f"stopped-rank{rank}.json"), "w") as f:
            json.dump({"code": stop.code, "signum": stop.signum, "checkpoint": stop.checkpoint}, f)
        raise
    weights = b"".join(p.detach().numpy().tobytes() for a in learner.agents for p in a.parameters())
    with open(os.path.join(args.out, f"weights-rank{rank}.json"), "w") as f:
        json.dump({"sha256": hashlib.sha256(weights).hexdigest(), "threads": torch.get_num_threads()}, f)


if __name__ == "__main__":
    main()
