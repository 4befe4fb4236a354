"""Generation backends side by side: `generation_backend="hf"` against `"vllm"`, 1 agent and 4 LoRA agents.

    .venv-vllm/bin/python benchmarks/vllm_backend.py --model benchmarks/_work/tiny64 [--repeats 3]

Two measurements per run, in one fresh process per (backend, team), the backends alternating:

- tokens/s: one team turn (`RolloutEngine.generate_turn`) of 16 prompts x 8 samples x 64 new tokens per agent
  (temperature 1, no top-k/top-p), after one warm-up turn; sampled tokens over wall seconds;
- one MAGRPO epoch (`learn()`): the README speed workload, 16 prompts x 4 samples x 32 new tokens in one
  rollout, 8 optimizer steps per agent (minibatches of 2 prompts); with vLLM it includes the weight sync and
  the trainer's no-grad recompute of the rollout's log-probs (the sequence-level correction).

Teams: one fully fine-tuned agent, or 4 LoRA agents (r=8 on q/k/v/o) sharing one base (one batched sampling
loop with HF, one engine call with vLLM). Engine start (vLLM) is reported apart: it happens once per process.
Each row is the median over the repeats; 2 torch threads on both sides. Before each timed part the child
waits (up to `--wait` s) for other processes to leave the CPU, and records the CPU seconds they used meanwhile
(`foreign`: near 0 means a clean timing; on a shared machine it rarely is).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import workload  # noqa: E402

LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "lora_dropout": 0.0}
TURN = dict(prompts=16, samples=8, tokens=64)


def run(model: str, backend: str, agents: int, wait: float, turn_size: dict | None = None) -> dict:
    """Tokens/s of one team turn (`turn_size`, default `TURN`), then one MAGRPO epoch, in this process."""
    size = turn_size or TURN
    workload.offline_and_quiet()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    import datasets
    import torch

    from learners import MAGRPO, MAGRPOConfig

    torch.manual_seed(0)
    torch.set_num_threads(workload.NUM_THREADS)
    cfg = MAGRPOConfig(num_train_epochs=1, num_generations=workload.NUM_GENERATIONS,
                       max_new_tokens=workload.MAX_NEW_TOKENS, temperature=1.0, top_p=1.0, top_k=None,
                       rollout_buffer_size=len(workload.PROMPTS), train_batch_size=2, eval_interval=0,
                       verbose=False, generation_backend=backend,
                       peft_config=LORA if agents > 1 else None,
                       vllm_engine_args={"kv_cache_memory_bytes": 1 << 30})

    def reward(*completions):
        return [sum(len(c) for c in joint) / 100 for joint in zip(*completions)]

    start = time.perf_counter()
    learner = MAGRPO(agent_model=model, num_agents=agents, reward_func=reward,
                     train_dataset=datasets.Dataset.from_dict({"prompt": workload.PROMPTS}), args=cfg)
    build = time.perf_counter() - start
    engine = learner.engine
    prompts = [workload.PROMPTS[:size["prompts"]]] * agents
    turn = dict(max_new_tokens=size["tokens"])
    for settings in engine.backend.agent_settings:  # the turn's length; the epoch keeps the workload's
        settings.max_new_tokens = turn["max_new_tokens"]
    engine.generate_turn([p[:2] for p in prompts], 2)  # warm-up
    batches = []
    turn_timing = workload.timed(lambda: batches.extend(engine.generate_turn(prompts, size["samples"])), wait)
    tokens = sum(int(b.completion_mask.sum()) for b in batches)
    for settings in engine.backend.agent_settings:
        settings.max_new_tokens = workload.MAX_NEW_TOKENS
    out = {}
    epoch_timing = workload.timed(lambda: out.update(learner.learn()), wait)
    metrics = out
    return {"backend": backend, "agents": agents, "tokens_per_second": tokens / turn_timing["seconds"],
            "tokens": tokens, "seconds_epoch": epoch_timing["seconds"], "cpu_s_epoch": epoch_timing["own_cpu_s"],
            "foreign_cpu_s": (turn_timing["foreign_cpu_s"] or 0.0) + (epoch_timing["foreign_cpu_s"] or 0.0),
            "seconds_build": build, "peak_rss_gb": workload.peak_rss_gb(),
            "seconds_generate": metrics.get("perf/seconds_generate"),
            "seconds_weight_sync": metrics.get("perf/seconds_weight_sync", 0.0),
            "seconds_update": metrics.get("perf/seconds_update"),
            "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9 if torch.cuda.is_available() else None,
            "rollout_ratio_mean": metrics.get("train/agent_0/rollout_ratio_mean")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--agents", type=int, nargs="+", default=[1, 4])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for a quiet CPU before each timing")
    p.add_argument("--child", nargs=2, metavar=("BACKEND", "AGENTS"))
    a = p.parse_args()
    if a.child:
        print(json.dumps(run(a.model, a.child[0], int(a.child[1]), a.wait)))
        return 0
    configs = [(backend, n) for n in a.agents for backend in ("hf", "vllm")]
    runs: dict[tuple[str, int], list[dict]] = {c: [] for c in configs}
    for r in range(a.repeats):
        order = configs if r % 2 == 0 else [c for pair in zip(configs[1::2], configs[::2]) for c in pair]
        for backend, n in order:  # hf and vllm alternate, and swap places every repeat
            out = subprocess.run([sys.executable, __file__, "--model", a.model, "--wait", str(a.wait), "--child",
                                  backend, str(n)], capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{backend} x{n} failed:\n{out.stderr[-3000:]}")
            runs[(backend, n)].append(json.loads(out.stdout.strip().splitlines()[-1]))
    name = os.path.basename(os.path.normpath(a.model))
    print(f"{name}: median of {a.repeats} alternating fresh-process runs")
    print("| model | agents | backend | tokens/s (turn) | s / MAGRPO epoch | CPU s / epoch | generate s | sync s | "
          "update s | start s | peak RSS GB | foreign CPU s | runs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for backend, n in configs:
        xs = runs[(backend, n)]
        row = {"backend": backend, "agents": n, **{k: statistics.median(x[k] for x in xs) for k in (
            "tokens_per_second", "seconds_epoch", "cpu_s_epoch", "seconds_generate", "seconds_weight_sync",
            "seconds_update", "seconds_build", "peak_rss_gb", "foreign_cpu_s")}}
        rows.append(row)
        team = "1" if n == 1 else f"{n} LoRA"
        print(f"| {name} | {team} | {backend} | {row['tokens_per_second']:,.0f} | {row['seconds_epoch']:.2f} | "
              f"{row['cpu_s_epoch']:.2f} | {row['seconds_generate']:.2f} | {row['seconds_weight_sync']:.3f} | "
              f"{row['seconds_update']:.2f} | {row['seconds_build']:.1f} | {row['peak_rss_gb']:.2f} | "
              f"{row['foreign_cpu_s']:.1f} | {a.repeats} |")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"model": a.model, "repeats": a.repeats, "turn": TURN, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
