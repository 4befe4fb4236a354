"""Side-by-side benchmark: comlrl-env vs the reference library (comlrl 1.4.3) or TRL, alternating runs.

    python benchmarks/compare.py --model benchmarks/_work/tiny --model benchmarks/_work/qwen31m \
        --learner magrpo --learner iac --learner maac --learner marlhf --repeats 3
    python benchmarks/compare.py --against trl --model benchmarks/_work/qwen31m   # single agent vs GRPOTrainer

Each run is a fresh process (ours in the project venv, the reference in
`benchmarks/.venv-ref`), alternating sides so that machine noise hits both
alike. Prints a table of median seconds and peak RSS per side with the ratio
reference / ours, and writes every raw result to `benchmarks/_work/results.jsonl`.
Both sides do the same work: 2 agents, 16 prompts x 4 samples x 32 new tokens,
8 optimizer steps per agent; the script checks the counts match. With
`--against trl` the single-agent form runs (`ours.py --num-agents 1` against
`trl_grpo.py` in `benchmarks/.venv-trl`: 1 agent, 8 optimizer steps, 64 completions).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIDES = {
    "reference": (os.path.join(HERE, ".venv-ref", "bin", "python"), os.path.join(HERE, "reference.py")),
    "trl": (os.path.join(HERE, ".venv-trl", "bin", "python"), os.path.join(HERE, "trl_grpo.py")),
    "ours": (sys.executable, os.path.join(HERE, "ours.py")),
}


def run(side: str, model: str, learner: str, wait_quiet: float, against: str, structure: str = "batched") -> dict:
    python, script = SIDES[side]
    args = ["--model", model, "--wait-quiet", str(wait_quiet)]
    if side == "ours":
        args += ["--structure", structure]
    if against == "trl":
        args += ["--num-agents", "1"] if side == "ours" else []
    else:
        args += ["--learner", learner]
    out = subprocess.run([python, script, *args], capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{side} failed on {model}:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return json.loads(lines[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", required=True)
    p.add_argument("--learner", action="append", choices=["magrpo", "iac", "maac", "marlhf"])
    p.add_argument("--against", choices=["reference", "trl"], default="reference")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--wait-quiet", type=float, default=60.0, help="seconds to wait for an idle CPU before each run")
    p.add_argument("--structure", default="batched", choices=["batched", "reference"],
                   help="our step structure (see ours.py); the reference always runs its own")
    a = p.parse_args()
    learners = ["magrpo"] if a.against == "trl" else a.learner or ["magrpo"]
    other = a.against
    os.makedirs(os.path.join(HERE, "_work"), exist_ok=True)
    rows = []
    with open(os.path.join(HERE, "_work", "results.jsonl"), "a") as log:
        for learner, model in [(lr, m) for m in a.model for lr in learners]:
            results: dict[str, list[dict]] = {other: [], "ours": []}
            for i in range(a.repeats):
                order = (other, "ours") if i % 2 == 0 else ("ours", other)
                for side in order:
                    r = run(side, model, learner, a.wait_quiet, other, a.structure)
                    results[side].append(r)
                    log.write(json.dumps(r) + "\n")
                    log.flush()
                    print(f"  {learner} {model} {side}: {r['seconds']:.2f} s, {r['peak_rss_gb']:.2f} GB "
                          f"(foreign cpu {r.get('foreign_cpu_s')})", file=sys.stderr)
            ref, ours = results[other], results["ours"]
            for key in ("optimizer_steps_per_agent", "completions_per_agent"):
                if ref[0][key] != ours[0][key]:
                    raise RuntimeError(f"unequal work on {model}: {key} reference={ref[0][key]} ours={ours[0][key]}")
            med = {s: statistics.median(r["seconds"] for r in results[s]) for s in results}
            rss = {s: max(r["peak_rss_gb"] for r in results[s]) for s in results}
            rows.append((learner, os.path.basename(model), med[other], med["ours"], med[other] / med["ours"],
                         rss[other], rss["ours"], ours[0]["optimizer_steps_per_agent"],
                         ours[0]["completions_per_agent"]))
    print(f"our structure: {a.structure}; medians of {a.repeats} alternating runs per side")
    print(f"| learner | model | {other} s | ours s | speed-up | {other} peak GB | ours peak GB | steps/agent | "
          "completions/agent |")
    print("|---|---|---|---|---|---|---|---|---|")
    for learner, name, rs, os_, ratio, rr, orr, steps, comps in rows:
        print(f"| {learner} | {name} | {rs:.2f} | {os_:.2f} | {ratio:.2f}x | {rr:.2f} | {orr:.2f} | {steps} | {comps} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
