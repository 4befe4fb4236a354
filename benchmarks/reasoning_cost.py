"""What making and scoring reasoning-gym items costs, against what training on them costs.

    .venv/bin/python benchmarks/reasoning_cost.py [--all] [--repeats 3] [--out benchmarks/results/reasoning_cost]

For each dataset of the `reasoning` suite (`--all`: every offered one), a fresh env of 64 items: the seconds to
make them all, then to score 4 completions per item (the oracle's answer, a wrong number, filler text, no
answer; the first score of an item also computes its floor). Median of `--repeats` runs, each a fresh env.
The training cost it is compared with is measured, not assumed: the MAGRPO team unit of the cooperation
results (SmolLM2-135M, LoRA, 2 CPU cores) spent `seconds_train / completions` per completion, with
completions of at most 16 tokens; reasoning completions are longer, so the share printed is an upper bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ITEMS, PER_ITEM = 64, 4
TRAINING_UNIT = os.path.join(HERE, "results", "coop", "secretpair", "seed0", "team-magrpo-lora.json")


def measure(dataset: str) -> dict[str, float]:
    """Seconds to make ITEMS items of a fresh env and to score PER_ITEM completions of each."""
    from comlrl_env import make

    env = make(f"reasoning_gym/{dataset}-v0", size=ITEMS, seed=0)
    start = time.perf_counter()
    items = [env.source[i] for i in range(ITEMS)]
    made = time.perf_counter() - start
    start = time.perf_counter()
    for i, item in enumerate(items):
        for text in (f"<answer>{item['answer']}</answer>", "<answer>12345</answer>", "<answer>the answer</answer>",
                     "I am not sure."):
            env.source.reward(text, i)
    scored = time.perf_counter() - start
    return {"make": made, "score": scored}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every offered dataset, not only the suite's")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "reasoning_cost"))
    args = parser.parse_args()

    from reasoning_gym.factory import DATASETS

    from comlrl_env.qa.reasoning_gym import REASONING_SUITE, REFUSED

    names = sorted(set(DATASETS) - set(REFUSED)) if args.all else list(REASONING_SUITE)
    unit = json.load(open(TRAINING_UNIT))
    completions = 2 * unit["training"]["completions_per_agent"]
    train_per_completion = unit["training"]["seconds"] / completions
    rows = []
    for name in names:
        runs = [measure(name) for _ in range(args.repeats)]
        make_ms = 1000 * statistics.median(r["make"] for r in runs) / ITEMS
        score_ms = 1000 * statistics.median(r["score"] for r in runs) / (ITEMS * PER_ITEM)
        # per training completion: one item made per completion at most (K >= 1 per instance), one score each
        share = (make_ms + score_ms) / 1000 / train_per_completion
        rows.append({"dataset": name, "make_ms_per_item": make_ms, "score_ms_per_completion": score_ms,
                     "share_of_training": share})
    os.makedirs(args.out, exist_ok=True)
    result = {"items": ITEMS, "completions_per_item": PER_ITEM, "repeats": args.repeats,
              "train_seconds_per_completion": train_per_completion,
              "training_unit": os.path.relpath(TRAINING_UNIT, HERE), "rows": rows}
    with open(os.path.join(args.out, "reasoning_cost.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = [f"training: {train_per_completion:.3f} s per completion (MAGRPO, SmolLM2-135M, LoRA, <= 16 tokens; "
             f"{os.path.relpath(TRAINING_UNIT, HERE)})",
             f"median of {args.repeats} fresh envs of {ITEMS} items, {PER_ITEM} completions scored per item",
             "| dataset | make ms/item | score ms/completion | share of training, upper bound |", "|---|---|---|---|"]
    lines += [f"| {r['dataset']} | {r['make_ms_per_item']:.2f} | {r['score_ms_per_completion']:.3f} | "
              f"{100 * r['share_of_training']:.2f}% |" for r in rows]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "reasoning_cost.txt"), "w") as f:
        f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
