"""N LoRA agents on one base: one MAGRPO epoch with batched multi-adapter rollouts vs one agent at a time.

    .venv/bin/python benchmarks/adapters.py --model benchmarks/_work/qwen31m [--agents 1 2 4 8] [--repeats 3]

Workload (issue 20): 8 prompts x 4 samples x 32 new tokens, LoRA r=8 on q/k/v/o, one rollout of all 8
prompts per epoch and one optimizer step per agent. Every configuration runs in a fresh process; the
configurations alternate within each repeat (a rotated order per repeat), and each row is the median
over the repeats of the epoch's wall time (`learn()`, models already loaded) and the process's peak RSS.
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

PROMPTS = workload.PROMPTS[:8]
LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "lora_dropout": 0.0}


def run(model: str, agents: int, batched: bool) -> dict:
    """One epoch in this process; returns seconds, peak RSS and how many sampling loops ran."""
    import datasets
    import torch

    from learners import MAGRPO, MAGRPOConfig

    torch.manual_seed(0)
    torch.set_num_threads(workload.NUM_THREADS)
    cfg = MAGRPOConfig(num_train_epochs=1, num_generations=4, max_new_tokens=32, temperature=1.0, top_p=1.0,
                       top_k=None, rollout_buffer_size=len(PROMPTS), eval_interval=0, verbose=False,
                       peft_config=LORA, batch_adapters=batched)

    def reward(*completions):
        return [sum(len(c) for c in joint) / 100 for joint in zip(*completions)]

    learner = MAGRPO(agent_model=model, num_agents=agents, reward_func=reward,
                     train_dataset=datasets.Dataset.from_dict({"prompt": PROMPTS}), args=cfg)
    start = time.perf_counter()
    metrics = learner.learn()
    seconds = time.perf_counter() - start
    return {"agents": agents, "batched": batched, "seconds": seconds, "peak_rss_gb": workload.peak_rss_gb(),
            "seconds_generate": metrics.get("perf/seconds_generate"),
            "seconds_update": metrics.get("perf/seconds_update")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--agents", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("--child", nargs=2, metavar=("AGENTS", "BATCHED"))
    a = p.parse_args()
    if a.child:
        print(json.dumps(run(a.model, int(a.child[0]), a.child[1] == "1")))
        return 0
    configs = [(n, batched) for n in a.agents for batched in ((True,) if n == 1 else (True, False))]
    runs: dict[tuple[int, bool], list[dict]] = {c: [] for c in configs}
    for r in range(a.repeats):
        for n, batched in configs[r % len(configs):] + configs[: r % len(configs)]:
            out = subprocess.run([sys.executable, __file__, "--model", a.model, "--child", str(n), str(int(batched))],
                                 capture_output=True, text=True, check=True)
            runs[(n, batched)].append(json.loads(out.stdout.strip().splitlines()[-1]))
    one = statistics.median(x["seconds"] for x in runs[configs[0]])
    one_rss = statistics.median(x["peak_rss_gb"] for x in runs[configs[0]])
    rows = []
    print(f"{os.path.basename(os.path.normpath(a.model))}: median of {a.repeats} alternating fresh-process runs")
    print("| agents | generation | s / epoch | vs 1 agent | generate s | update s | peak RSS GB | vs 1 agent |")
    print("|---|---|---|---|---|---|---|---|")
    for n, batched in configs:
        xs = runs[(n, batched)]
        row = {"agents": n, "batched": batched, **{k: statistics.median(x[k] for x in xs) for k in
                                                  ("seconds", "peak_rss_gb", "seconds_generate", "seconds_update")}}
        rows.append(row)
        print(f"| {n} | {'batched' if batched else 'one by one'} | {row['seconds']:.1f} | {row['seconds'] / one:.2f}x | "
              f"{row['seconds_generate']:.1f} | {row['seconds_update']:.1f} | {row['peak_rss_gb']:.2f} | "
              f"{row['peak_rss_gb'] / one_rss:.2f}x |")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"model": a.model, "repeats": a.repeats, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
