"""`torchrun --max-restarts 1`: a rank killed with SIGKILL mid-epoch takes its group down, torchrun starts a new
one, and the same script (`resume_from_checkpoint=True`) resumes from the newest complete checkpoint and ends
with the weights of a run never killed, logging each rollout once:

- on 2 gloo ranks with data parallelism and with FSDP2, and on two "nodes" of one process each (two torchrun
  launches at one c10d rendezvous endpoint, the scaling guide's recipe): `torchrun` marker, `make
  test-torchrun`, which `.ci/run` runs;
- with the vLLM backend and LoRA adapters, whose killed rank's adapter folder the restarted rank deletes as it
  starts: `vllm` marker, `make test-vllm`.

Each run is this file as a script under torchrun (`python -m torch.distributed.run ... tests/test_restarts.py
--out DIR ...`). Without `learners.parallel.distributed.restart_store`, the restarted rank 1 (which starts
first here) reads the dead group's address of rank 0 from torchrun's shared store and fails to connect.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
KILL_AT = 3  # rollouts: 4 task instances, 2 a rollout, 2 epochs; checkpoint-1 ends epoch 1 (rollout 2)


def launch(out: Path, model: str, *args: str) -> subprocess.CompletedProcess[str]:
    from procs import torchrun

    return torchrun(HERE, out, "--model", model, *args, nproc=2, restarts=1, timeout=600)


def report(out: Path, done: subprocess.CompletedProcess[str] | None = None) -> dict:
    """Rank 0's report of a finished run (every rank's weights agree)."""
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["sha256"] == ranks[1]["sha256"]
    return {**ranks[0], "stderr": done.stderr if done else "", "out": out}


def finished(tmp_path: Path, name: str, model: str, *args: str) -> dict:
    out = tmp_path / name
    out.mkdir()
    done = launch(out, model, *args)
    assert done.returncode == 0, done.stderr[-4000:]
    return report(out, done)


def check_resumed(restarted: dict, uninterrupted: dict) -> None:
    """The restarted run resumed from checkpoint-1 and ended as the uninterrupted one, each rollout logged once."""
    assert (restarted["out"] / "killed").exists() and not (uninterrupted["out"] / "killed").exists()
    assert restarted["resumed_from"].endswith("checkpoint-1") and uninterrupted["resumed_from"] is None
    assert restarted["sha256"] == uninterrupted["sha256"]
    rows = restarted["rows"]
    assert [step for step, _ in rows] == [4, 8, 12, 16]  # episodes done; the killed rollout 3 once
    assert rows == uninterrupted["rows"]


@pytest.fixture(scope="module")
def uninterrupted(tiny_dir, tmp_path_factory) -> dict:
    """Data parallelism on 2 ranks (one node), never killed."""
    return finished(tmp_path_factory.mktemp("uninterrupted"), "run", tiny_dir)


@pytest.mark.torchrun
@pytest.mark.parametrize("sharding", ["none", "fsdp"])
def test_a_group_restarted_after_a_kill_resumes_to_the_uninterrupted_run(tiny_dir, tmp_path, sharding,
                                                                          uninterrupted):
    restarted = finished(tmp_path, "restarted", tiny_dir, "--sharding", sharding, "--kill-at", str(KILL_AT))
    assert restarted["attempt"] == 1
    assert "failed (exitcode: -9) local_rank: 1" in restarted["stderr"]  # attempt 0's rank 1
    full = uninterrupted if sharding == "none" else finished(tmp_path, "full", tiny_dir, "--sharding", sharding)
    check_resumed(restarted, full)


@pytest.mark.torchrun
def test_two_nodes_on_one_machine_train_as_one_node_and_restart_after_a_kill(tiny_dir, tmp_path, uninterrupted):
    """The scaling guide's two-node recipe, as two torchrun launches of one process each meeting at a c10d
    rendezvous endpoint, with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` (a new store per group: nodes count
    restarts each on their own). Rank 1 is killed at rollout 3; both nodes restart and the run ends as the
    one-node, 2-rank run."""
    from procs import child_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--max-restarts=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=two-nodes", str(HERE),
           "--out", str(tmp_path), "--model", tiny_dir, "--kill-at", str(KILL_AT)]
    env = child_env(TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    nodes = [subprocess.Popen(cmd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for _ in range(2)]
    try:
        logs = [node.communicate(timeout=600)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(log[-3000:] for log in logs)
    assert "UserWarning" not in "".join(logs)  # no warning that restarts need the variable
    check_resumed(report(tmp_path), uninterrupted)


@pytest.mark.vllm
def test_with_vllm_the_restarted_group_resumes_and_removes_the_killed_ranks_adapter_folder(tmp_path):
    pytest.importorskip("vllm")
    from comlrl_env.testing import tiny_model

    model = str(tiny_model(tmp_path / "tiny-qwen2-hd64", hidden_size=128, num_heads=2, num_kv_heads=1))
    restarted = finished(tmp_path, "restarted", model, "--vllm", "--kill-at", str(KILL_AT))
    uninterrupted = finished(tmp_path, "uninterrupted", model, "--vllm")
    check_resumed(restarted, uninterrupted)
    killed = json.loads((restarted["out"] / "killed-adapters.json").read_text())
    assert killed["existed_at_kill"] and not os.path.exists(killed["adapter_root"])  # the restarted rank 1 swept it
    for report in (restarted, uninterrupted):  # a normal exit leaves none of its own
        for r in (0, 1):
            assert not os.path.exists(json.loads((report["out"] / f"rank{r}.json").read_text())["adapter_root"])


# ----- the store a group joins through (in this process) ---------------------------------------------------------


def agent_env(monkeypatch, port: int, restart: int, nodes: int = 1) -> None:
    """The environment torchrun gives a worker of restart `restart` with the agent's shared store."""
    for k, v in dict(TORCHELASTIC_USE_AGENT_STORE="True", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                     WORLD_SIZE="2", GROUP_WORLD_SIZE=str(nodes), TORCHELASTIC_RESTART_COUNT=str(restart),
                     TORCHELASTIC_MAX_RESTARTS="1").items():
        monkeypatch.setenv(k, v)


def test_a_restarted_group_never_sees_the_keys_of_the_group_before(monkeypatch):
    import datetime

    import torch.distributed as dist

    from learners.parallel.distributed import restart_store

    agent = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # torchrun's agent
    agent_env(monkeypatch, agent.port, restart=0)
    restart_store().set("default_pg/0//0/rank_0", "the first group's address")
    agent_env(monkeypatch, agent.port, restart=1)
    again = restart_store()
    again.set_timeout(datetime.timedelta(milliseconds=200))
    assert not again.check(["default_pg/0//0/rank_0"])
    with pytest.raises(dist.DistStoreError):
        again.get("default_pg/0//0/rank_0")
    agent_env(monkeypatch, agent.port, restart=0)
    assert restart_store().get("default_pg/0//0/rank_0") == b"the first group's address"


def test_several_nodes_sharing_the_agent_store_warn_with_the_fix(monkeypatch):
    from learners.parallel.distributed import restart_store

    agent_env(monkeypatch, 1, restart=0, nodes=2)
    with pytest.warns(UserWarning, match="TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"):
        assert restart_store() is None  # their restart counts differ: torch's own store, and the warning
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")  # the variable set: a new store per group
    assert restart_store() is None


# ----- the script torchrun runs ----------------------------------------------------------------------------------


def metrics_rows(output_dir: str) -> list[tuple[int, float]]:
    with open(os.path.join(output_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [(r["step"], r["train/reward_mean"]) for r in rows if "train/reward_mean" in r]


def weights_digest(learner) -> str:
    """SHA-256 of every agent's full weights (FSDP shards gathered: every rank takes part)."""
    h = hashlib.sha256()
    for agent in learner.agents:
        for name, tensor in agent.state_dict().items():
            full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
            h.update(name.encode())
            h.update(full.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--sharding", default="none")
    parser.add_argument("--vllm", action="store_true", help="the vLLM backend, a LoRA adapter per agent")
    parser.add_argument("--kill-at", type=int, default=None, help="rank 1 of attempt 0 SIGKILLs itself here")
    args = parser.parse_args()

    import torch.distributed
    from datasets import Dataset

    from learners import MAGRPO, MAGRPOConfig

    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    rank = int(os.environ["RANK"])
    if attempt > 0 and rank == 0:  # a restarted rank 0 slower to start than rank 1 (imports, a loaded node): rank 1
        time.sleep(3)  # dials rank 0's address from the store, which must not be the dead group's
    engine = dict(generation_backend="vllm", vllm_engine_args={"kv_cache_memory_bytes": 64 << 20},
                  peft_config={"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}) if args.vllm else {}

    class Kill:
        def on_step_end(self, learner, metrics):
            marker = os.path.join(args.out, "killed")  # once: ranks may move between nodes when they restart
            if rank == 1 and learner.rollouts_done == args.kill_at and not os.path.exists(marker):
                open(marker, "w").close()
                root = getattr(learner.engine.backend, "adapter_root", None)
                with open(os.path.join(args.out, "killed-adapters.json"), "w") as f:
                    json.dump({"adapter_root": root, "existed_at_kill": bool(root) and os.path.isdir(root)}, f)
                os.kill(os.getpid(), signal.SIGKILL)

    def space_reward(first, second):
        return [sum(ch.isspace() for ch in a + b) / max(len(a + b), 1) for a, b in zip(first, second)]

    output_dir = os.path.join(args.out, "run")
    learner = MAGRPO(agent_model=args.model, num_agents=2, reward_func=space_reward,
                     train_dataset=Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(4)]),
                     callbacks=[Kill()],
                     args=MAGRPOConfig(num_train_epochs=2, num_generations=2, max_new_tokens=4, temperature=1.0,
                                       top_p=1.0, top_k=None, eval_interval=0, verbose=False, rollout_buffer_size=2,
                                       agent_learning_rate=1e-2, seed=0, sharding=args.sharding, output_dir=output_dir,
                                       **engine))
    checkpoint_dir = os.path.join(args.out, "checkpoints")
    before = sorted(os.listdir(checkpoint_dir)) if os.path.isdir(checkpoint_dir) else []
    learner.learn(checkpoint_dir=checkpoint_dir, resume_from_checkpoint=True)
    report = {"attempt": attempt, "sha256": weights_digest(learner), "rows": metrics_rows(output_dir),
              "resumed_from": os.path.join(checkpoint_dir, before[-1]) if before else None,
              "adapter_root": getattr(learner.engine.backend, "adapter_root", None)}
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    torch.distributed.destroy_process_group()  # vLLM's engines go down first


if __name__ == "__main__":
    sys.exit(main())
