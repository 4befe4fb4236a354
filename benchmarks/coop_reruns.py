"""How far a rerun of a cooperation unit moves: the stored unit against its reruns, as a markdown table.

    .venv/bin/python benchmarks/coop_reruns.py            # prints the table docs/results.md holds

A rerun trains the same condition with the same seed and code (`results_coop.py --units DIR --only
TASK/seedN/team-magrpo-lora`); its unit file lands in one of `RERUNS`, named by the CPU kernels it ran with
(`coop-rerun`: this machine's own, AVX-512; `coop-rerun-avx2`: torch and MKL held to AVX2 with
`ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2`). Per rerun the table gives the rollouts whose
training reward equals the stored unit's before the first that differs, both held-out sampled rewards, and
what the rerun's messages carried, counted over all its evaluation episodes (`coop_report.info_flow`).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import coop_report  # noqa: E402

UNITS = os.path.join(HERE, "results", "coop")
RERUNS = {"coop-rerun": "AVX-512 (this CPU's own)", "coop-rerun-avx2": "AVX2 (torch and MKL held to it)"}
NAME = "team-magrpo-lora"


def equal_prefix(stored: list[float], rerun: list[float]) -> int:
    """How many training rewards, from the first rollout on, the two curves share exactly."""
    n = 0
    for a, b in zip(stored, rerun):
        if a != b:
            break
        n += 1
    return n


def rows(units: str = UNITS, reruns: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per rerun unit found under `reruns` (folders beside `units`), with its stored unit's figures."""
    import results_coop  # torch and the environments: only when the table is built

    out = []
    for folder, kernels in (reruns or RERUNS).items():
        root = os.path.join(os.path.dirname(units), folder)
        for task in results_coop.TASKS:
            for seed in range(10):
                path = os.path.join(root, task, f"seed{seed}", f"{NAME}.json")
                if not os.path.isfile(path):
                    continue
                with open(path, encoding="utf-8") as f:
                    rerun = json.load(f)
                with open(os.path.join(units, task, f"seed{seed}", f"{NAME}.json"), encoding="utf-8") as f:
                    stored = json.load(f)
                flow = coop_report.info_flow(rerun, results_coop.task_env(task, "team", "held_out"))
                out.append({"task": task, "seed": seed, "kernels": kernels, "rollouts": len(stored["curve"][1]),
                            "equal": equal_prefix(stored["curve"][1], rerun["curve"][1]),
                            "stored": stored["sampled"]["reward_mean"], "rerun": rerun["sampled"]["reward_mean"],
                            "flow": flow})
    return out


def markdown(table: list[dict[str, Any]]) -> str:
    """The table: per rerun, its kernels, the shared training rewards, both held-out rewards, the rerun's flow."""
    lines = ["| task | seed | rerun's CPU kernels | training rewards equal | held-out reward, stored | "
             "rerun | messages naming the sender's own value | answers using the partner's value |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table:
        f = r["flow"]
        roles = dict(zip(f["message_named_own"], f["roles"]))
        share = lambda key: ", ".join(f"{roles[a]} {v}/{f['episodes']}" for a, v in f[key].items())  # noqa: E731
        lines.append(f"| {r['task']} | {r['seed']} | {r['kernels']} | first {r['equal']} of {r['rollouts']} | "
                     f"{r['stored']:.3f} | {r['rerun']:.3f} | {share('message_named_own')} | "
                     f"{share('answer_used_partner')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(rows()), end="")
