"""Generation backends side by side: `generation_backend="hf"` against `"vllm"`, 1 agent and 4 LoRA agents.

    .venv-vllm/bin/python benchmarks/vllm_backend.py --model benchmarks/_work/tiny64 [--repeats 3] [--steps 1 8]

Two measurements per run, in one fresh process per (backend, team, steps), the backends alternating:

- tokens/s: one team turn (`RolloutEngine.generate_turn`) of 16 prompts x 8 samples x 64 new tokens per agent
  (temperature 1, no top-k/top-p), after one warm-up turn; sampled tokens over wall seconds (`--no-turn`
  skips it);
- one MAGRPO epoch (`learn()`): 16 prompts x 4 samples x 32 new tokens in one rollout, with `--steps`
  optimizer steps per agent (1: the library's default, the whole rollout in one minibatch; 8: minibatches of
  2 prompts, the README speed workload), followed by the weight push the next rollout would start with (the
  sync is lazy). The epoch is split into the learner's own timers: generate (sampling only), weight sync
  (vLLM: pushing the trained weights into the engine; the push of building the engine is not counted),
  correction (vLLM: the no-grad pass that scores the rows trained after a step, none at 1 step) and update
  (the rest after the rollout: advantages and optimizer steps). "other" is the epoch minus the four
  (environment, rewards, logging). "epoch - generate" is what the backend adds around its sampling; the
  vLLM rows give its ratio to HF's (of the medians).

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


def run(model: str, backend: str, agents: int, wait: float, turn_size: dict | None = None, steps: int = 8,
        turn: bool = True) -> dict:
    """Tokens/s of one team turn (`turn_size`, default `TURN`; skipped when not `turn`), then one MAGRPO epoch
    of `steps` optimizer steps per agent, in this process."""
    size = turn_size or TURN
    if steps < 1 or len(workload.PROMPTS) % steps:
        raise ValueError(f"steps={steps} must divide the epoch's {len(workload.PROMPTS)} prompts into minibatches")
    workload.offline_and_quiet()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    import datasets
    import torch

    from learners import MAGRPO, MAGRPOConfig

    torch.manual_seed(0)
    torch.set_num_threads(workload.NUM_THREADS)
    cfg = MAGRPOConfig(num_train_epochs=1, num_generations=workload.NUM_GENERATIONS,
                       max_new_tokens=workload.MAX_NEW_TOKENS, temperature=1.0, top_p=1.0, top_k=None,
                       rollout_buffer_size=len(workload.PROMPTS),
                       train_batch_size=None if steps == 1 else len(workload.PROMPTS) // steps, eval_interval=0,
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
    for settings in engine.backend.agent_settings:  # the turn's length; the epoch keeps the workload's
        settings.max_new_tokens = size["tokens"]
    engine.generate_turn([p[:2] for p in prompts], 2)  # warm-up (engine and sampler alike)
    batches: list = []
    turn_timing = {"seconds": float("nan"), "foreign_cpu_s": 0.0}
    if turn:
        turn_timing = workload.timed(lambda: batches.extend(engine.generate_turn(prompts, size["samples"])), wait)
    tokens = sum(int(b.completion_mask.sum()) for b in batches)
    for settings in engine.backend.agent_settings:
        settings.max_new_tokens = workload.MAX_NEW_TOKENS
    metrics: dict = {}
    engine.backend.finish_rollout()  # the weight push of building the backend is not the epoch's

    def epoch() -> None:
        metrics.update(learner.learn())
        engine.backend.sync()  # the trained weights into the engine: what the next rollout pays first

    epoch_timing = workload.timed(epoch, wait)
    assert learner.rollouts_done == 1, "the epoch is one rollout: its metrics are the epoch's"
    after = engine.backend.finish_rollout().get("weight_sync", 0.0)
    return {"backend": backend, "agents": agents, "steps": steps, "tokens_per_second": tokens / turn_timing["seconds"],
            "tokens": tokens, "seconds_epoch": epoch_timing["seconds"], "cpu_s_epoch": epoch_timing["own_cpu_s"],
            "foreign_cpu_s": (turn_timing["foreign_cpu_s"] or 0.0) + (epoch_timing["foreign_cpu_s"] or 0.0),
            "seconds_build": build, "peak_rss_gb": workload.peak_rss_gb(),
            "seconds_generate": metrics["perf/seconds_generate"],
            "seconds_weight_sync": metrics.get("perf/seconds_weight_sync", 0.0) + after,
            "seconds_correction": metrics.get("perf/seconds_correction", 0.0),
            "seconds_update": metrics["perf/seconds_update"],
            "tokens_epoch": metrics["perf/tokens_per_second"] * metrics["perf/seconds_generate"],
            "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9 if torch.cuda.is_available() else None,
            "rollout_ratio_mean": metrics.get("train/agent_0/rollout_ratio_mean")}


SPLIT = ("seconds_generate", "seconds_weight_sync", "seconds_correction", "seconds_update")
COLUMNS = ("tokens_per_second", "seconds_epoch", "cpu_s_epoch", *SPLIT, "seconds_build", "peak_rss_gb",
           "foreign_cpu_s", "tokens_epoch")


def overhead(x: dict) -> float:
    """What a backend adds around its sampling: the epoch minus the generate seconds (sync included)."""
    return x["seconds_epoch"] - x["seconds_generate"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--agents", type=int, nargs="+", default=[1, 4])
    p.add_argument("--steps", type=int, nargs="+", default=[1, 8], help="optimizer steps per agent per epoch")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-turn", action="store_true", help="skip the tokens/s turn (the epoch only)")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for a quiet CPU before each timing")
    p.add_argument("--child", nargs=3, metavar=("BACKEND", "AGENTS", "STEPS"))
    a = p.parse_args()
    if a.child:
        backend, agents, steps = a.child[0], int(a.child[1]), int(a.child[2])
        print(json.dumps(run(a.model, backend, agents, a.wait, steps=steps, turn=not a.no_turn)))
        return 0
    configs = [(backend, n, k) for n in a.agents for k in a.steps for backend in ("hf", "vllm")]
    runs: dict[tuple[str, int, int], list[dict]] = {c: [] for c in configs}
    for r in range(a.repeats):
        order = configs if r % 2 == 0 else [c for pair in zip(configs[1::2], configs[::2]) for c in pair]
        for backend, n, k in order:  # hf and vllm alternate, and swap places every repeat
            out = subprocess.run([sys.executable, __file__, "--model", a.model, "--wait", str(a.wait),
                                  *(["--no-turn"] if a.no_turn else []), "--child", backend, str(n), str(k)],
                                 capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{backend} x{n} ({k} steps) failed:\n{out.stderr[-3000:]}")
            runs[(backend, n, k)].append(json.loads(out.stdout.strip().splitlines()[-1]))
    name = os.path.basename(os.path.normpath(a.model))
    print(f"{name}: median of {a.repeats} alternating fresh-process runs")
    print("| model | agents | steps | backend | tokens/s (turn) | s / epoch | generate s | sync s | correction s | "
          "update s | other s | epoch - generate s | vs hf | sampled tokens | start s | peak RSS GB | foreign CPU s | runs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for backend, n, k in configs:
        xs = runs[(backend, n, k)]
        row = {"backend": backend, "agents": n, "steps": k, "runs": xs,
               **{c: statistics.median(x[c] for x in xs) for c in COLUMNS},
               "overhead": statistics.median(overhead(x) for x in xs),
               "other": statistics.median(x["seconds_epoch"] - sum(x[c] for c in SPLIT) for x in xs)}
        if backend == "vllm":  # the ratio of the medians; paired: the median over repeats of vllm/hf
            row["overhead_ratio"] = row["overhead"] / rows[-1]["overhead"]
            row["overhead_ratio_paired"] = statistics.median(
                overhead(v) / overhead(h) for v, h in zip(xs, runs[("hf", n, k)]))
        rows.append(row)
        team = "1" if n == 1 else f"{n} LoRA"
        ratio = f"{row['overhead_ratio']:.2f}x" if "overhead_ratio" in row else "-"
        speed = "-" if row["tokens_per_second"] != row["tokens_per_second"] else f"{row['tokens_per_second']:,.0f}"
        print(f"| {name} | {team} | {k} | {backend} | {speed} | {row['seconds_epoch']:.2f} | "
              f"{row['seconds_generate']:.2f} | {row['seconds_weight_sync']:.3f} | {row['seconds_correction']:.2f} | "
              f"{row['seconds_update']:.2f} | {row['other']:.2f} | {row['overhead']:.2f} | {ratio} | "
              f"{row['tokens_epoch']:,.0f} | {row['seconds_build']:.1f} | {row['peak_rss_gb']:.2f} | "
              f"{row['foreign_cpu_s']:.1f} | {a.repeats} |")
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"model": a.model, "repeats": a.repeats, "turn": None if a.no_turn else TURN, "rows": rows},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
