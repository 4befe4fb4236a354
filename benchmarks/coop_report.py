"""The numbers of `make results-coop` (`results_coop.py`): a row's reward over seeds and episodes, the
differences between rows, and the markdown the results page shows (table, differences, findings, messages)."""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap
from typing import Any

import numpy as np

from results import apart

CODE_WIDTH = 85
"""Characters per line of the example exchanges' code block, the most the site's content column shows at 1280 px
(longer lines are wrapped, later pieces indented)."""

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
"""t_{0.975, df}: the half-width factor of a 95% t-interval over n = df + 1 seed means."""


# ----- statistics over seeds ----------------------------------------------------------------------------------


def over_seeds(metrics: list[dict[str, Any]], seeds: list[int] | None = None) -> dict[str, Any]:
    """Reward of one row over its seeds (each `evaluate_policy` metrics of `episodes` episodes; `seeds` names
    them, 0, 1, ... when None).

    mean = (1/n) sum_i m_i over the n seed means, ci95_seeds = t_{0.975, n-1} s_m / sqrt(n) (None for one seed);
    pooled over all N = sum_i N_i episodes: M = sum_i N_i m_i / N,
    var = (sum_i (N_i - 1) s_i^2 + N_i (m_i - M)^2) / (N - 1), pooled_ci95 = 1.96 sqrt(var / N).
    """
    means = np.array([m["reward_mean"] for m in metrics])
    stds = np.array([m["reward_std"] for m in metrics])
    counts = np.array([m["episodes"] for m in metrics])
    n, total = len(means), counts.sum()
    pooled = float((counts * means).sum() / total)
    var = float(((counts - 1) * stds**2 + counts * (means - pooled) ** 2).sum() / max(total - 1, 1))
    return {"mean": float(means.mean()), "ci95_seeds": float(T975[n - 1] * means.std(ddof=1) / math.sqrt(n))
            if n > 1 else None, "pooled_mean": pooled, "pooled_std": math.sqrt(var),
            "pooled_ci95": 1.96 * math.sqrt(var / total), "episodes": int(total), "seed_means": means.tolist(),
            "seed_ci95": [m["reward_ci95"] for m in metrics],
            "seeds": list(range(n)) if seeds is None else list(seeds)}


def difference(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """a - b of two rows' `over_seeds`, over the seeds both have (None when none): paired by seed (same seed,
    same held-out episodes), mean(d) +- t_{0.975, n-1} s_d / sqrt(n); pooled over each row's episodes,
    M_a - M_b +- 1.96 sqrt(var_a/N_a + var_b/N_b). `verdict`: "above" / "below" when the seed interval
    excludes 0; with one common seed s, when d_s +- sqrt(ci_a,s^2 + ci_b,s^2) does (`ci95`: the interval
    used). `intervals_apart`: "up" / "down" when the two rows' own intervals (over their seeds; for a row of
    one seed, its evaluation's interval over instances, t or Wilson's, never the pooled normal one, which
    has width 0 when every episode scored the same) do not overlap (`results.apart`), else "no". Example: a
    has seeds 0, 1 and b seed 0: d is seed 0's difference, judged on seed 0's episodes."""
    seeds = [s for s in a["seeds"] if s in b["seeds"]]
    if not seeds:
        return None
    d = np.array([a["seed_means"][a["seeds"].index(s)] - b["seed_means"][b["seeds"].index(s)] for s in seeds])
    n = len(d)
    seeds_ci = float(T975[n - 1] * d.std(ddof=1) / math.sqrt(n)) if n > 1 else None
    pooled = a["pooled_mean"] - b["pooled_mean"]
    pooled_ci = 1.96 * math.sqrt(a["pooled_std"] ** 2 / a["episodes"] + b["pooled_std"] ** 2 / b["episodes"])
    if seeds_ci is None:  # one seed: its two evaluations' own intervals
        one = seeds[0]
        ci = math.hypot(a["seed_ci95"][a["seeds"].index(one)], b["seed_ci95"][b["seeds"].index(one)])
    else:
        ci = seeds_ci
    mean = float(d.mean())
    verdict = "above" if mean - ci > 0 else "below" if mean + ci < 0 else "within CI"
    own = lambda s: {"reward_mean": s["mean"], "reward_ci95": s["ci95_seeds"] if s["ci95_seeds"] is not None  # noqa: E731
                     else s["seed_ci95"][0]}
    return {"mean": mean, "ci95_seeds": seeds_ci, "ci95": ci, "pooled": pooled, "pooled_ci95": pooled_ci,
            "seeds": seeds, "verdict": verdict, "intervals_apart": apart(own(a), own(b)) or "no"}


def summarize(task: str, cond: Any, results: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row: a condition's seeds, reward over seeds (sampled, greedy), partner-info use, budget."""
    trainings = [r["training"] for r in results if r["training"] is not None]
    info = [r["sampled"]["used_partner_info_rate"] for r in results if "used_partner_info_rate" in r["sampled"]]
    return {"task": task, **dataclasses.asdict(cond), "seeds": [r["seed"] for r in results],
            "sampled": over_seeds([r["sampled"] for r in results], [r["seed"] for r in results]),
            "greedy": over_seeds([r["greedy"] for r in results], [r["seed"] for r in results]),
            "used_partner_info_rate": float(np.mean(info)) if info else None,
            "used_partner_info_chance": results[0]["sampled"].get("used_partner_info_chance"),
            "invalid_action_rate": float(np.mean([r["sampled"]["invalid_action_rate"] for r in results])),
            "completions": int(np.mean([t["completions_per_agent"] for t in trainings])) * cond.num_agents
            if trainings else None,
            # wall time of the unit (mean over seeds): training (0 for an untrained row) and held-out evaluation
            "minutes": float(np.mean([r["seconds_train"] for r in results])) / 60 if trainings else None,
            "minutes_eval": float(np.mean([r["seconds_eval"] for r in results])) / 60}


COMPARISONS = [(f"team-{x}-lora", b) for x in ("magrpo", "iac", "maac") for b in
               ("team-base", "alone-own-magrpo-lora", "alone-full-magrpo-lora")] + [
    ("team-maac-lora", "team-iac-lora"), ("alone-full-magrpo-lora", "alone-full-base"),
    ("alone-own-magrpo-lora", "alone-own-base")]
"""(a, b) pairs whose difference a - b the results report: each trained team against the untrained team, the
trained own-part agent and the trained everything-agent; MAAC against IAC; each lone agent against its base."""


def build(results: dict[str, dict[str, Any]], tasks: list[str], conditions: list[Any]) -> dict[str, Any]:
    """The report of unit results (key "task/seedN/condition" -> a unit file's content): `rows` (one per task
    and condition with units, over the seeds it has), `comparisons` (`COMPARISONS` where both rows exist),
    `curves` (per task and trained condition, the training reward averaged over seeds) and `settings` (each
    setting's distinct values over the units, plus the seeds)."""
    rows, curves = [], {}
    for task in tasks:
        for cond in conditions:
            mine = [r for r in results.values() if r["task"] == task and r["name"] == cond.name]
            if not mine:
                continue
            rows.append(summarize(task, cond, mine))
            runs = [r["curve"] for r in mine if r.get("curve") and r["curve"][0]]
            if runs:
                n = min(len(x) for x, _ in runs)  # their rollouts line up
                curves.setdefault(task, {})[cond.name] = (runs[0][0][:n], np.mean([y[:n] for _, y in runs], 0).tolist())
    by = {(r["task"], r["name"]): r for r in rows}
    pairs = [(t, a, b, difference(by[t, a]["sampled"], by[t, b]["sampled"]))
             for t in tasks for a, b in COMPARISONS if (t, a) in by and (t, b) in by]
    comparisons = [{"task": t, "a": a, "b": b, **d} for t, a, b, d in pairs if d is not None]
    made: dict[str, list[Any]] = {"seeds": sorted({r["seed"] for r in results.values()})}
    for r in results.values():
        for name, value in (r.get("settings") or {}).items():
            if name == "budget" and r["learner"] is None:
                continue  # an untrained row samples no completions
            if value not in made.setdefault(name, []):
                made[name].append(value)
    return {"rows": rows, "comparisons": comparisons, "curves": curves, "settings": made}


# ----- table, findings, curves ------------------------------------------------------------------------------


def interval(s: dict[str, Any]) -> str:
    return f"{s['mean']:.3f} ± {s['ci95_seeds']:.3f}" if s["ci95_seeds"] is not None else f"{s['mean']:.3f}"


def table(rows: list[dict[str, Any]]) -> str:
    """One line per (task, condition)."""
    lines = ["| task | condition | budget (completions) | wall min (train + eval) "
             "| held-out reward T=0.8, mean of seeds ± t95 | pooled episodes ± 95% | per seed (± 95%) "
             "| greedy, mean of seeds ± t95 | partner info used (chance) | invalid |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r["sampled"]
        budget = "-" if r["completions"] is None else str(r["completions"])
        wall = (f"{r['minutes_eval']:.1f}" if r["minutes"] is None
                else f"{r['minutes'] + r['minutes_eval']:.1f} ({r['minutes']:.1f} + {r['minutes_eval']:.1f})")
        seeds = ", ".join(f"{m:.2f} ± {c:.2f}" for m, c in zip(s["seed_means"], s["seed_ci95"]))
        info = "-" if r["used_partner_info_rate"] is None else f"{r['used_partner_info_rate']:.2f}"
        if r.get("used_partner_info_chance") is not None:
            info += f" ({r['used_partner_info_chance']:.2f})"
        lines.append(f"| {r['task']} | {r['name']} | {budget} | {wall} | {interval(s)} | {s['pooled_mean']:.3f} ± "
                     f"{s['pooled_ci95']:.3f} ({s['episodes']}) | {seeds} | {interval(r['greedy'])} | {info} "
                     f"| {r['invalid_action_rate']:.2f} |")
    return "\n".join(lines) + "\n"


def comparison_table(comparisons: list[dict[str, Any]]) -> str:
    lines = ["| task | a − b | paired seeds | over seeds (paired, t95) | pooled episodes (95%) | a is "
             "| intervals apart |", "|---|---|---|---|---|---|---|"]
    for c in comparisons:
        seeds = f"{c['mean']:+.3f} ± {c['ci95']:.3f}" + ("" if c["ci95_seeds"] is not None else " (one seed)")
        lines.append(f"| {c['task']} | {c['a']} − {c['b']} | {', '.join(map(str, c['seeds']))} | {seeds} "
                     f"| {c['pooled']:+.3f} ± {c['pooled_ci95']:.3f} "
                     f"| {c['verdict']} | {c['intervals_apart']} |")
    return "\n".join(lines) + "\n"


def findings(rows: list[dict[str, Any]], comparisons: list[dict[str, Any]]) -> str:
    """Plain statements read off the numbers: each trained team against the untrained team, the own-part and
    the everything-agent (differences over seeds), MAAC against IAC, and how often answers used the partner's part."""
    by = {(c["task"], c["a"], c["b"]): c for c in comparisons}
    info = {(r["task"], r["name"]): r["used_partner_info_rate"] for r in rows}
    out = []

    def said(c: dict[str, Any], what: str) -> str:
        return f"{c['verdict'].replace('within CI', 'not apart from')} {what} ({c['mean']:+.3f} ± {c['ci95']:.3f})"

    for r in rows:
        if r["view"] != "team" or r["learner"] is None:
            continue
        t, a = r["task"], r["name"]
        against = (("team-base", "the untrained team"), ("alone-own-magrpo-lora", "the trained own-part agent"),
                   ("alone-full-magrpo-lora", "the trained everything-agent"))
        parts = [said(by[t, a, b], what) for b, what in against if (t, a, b) in by]
        line = f"- {t}, {a}: {interval(r['sampled'])}" + ("; " + ", ".join(parts) if parts else "")
        if info.get((t, a)) is not None and info.get((t, "team-base")) is not None:
            chance = r.get("used_partner_info_chance")
            line += (f"; answers used the partner's part {100 * info[t, a]:.0f}% of the time "
                     f"(untrained team: {100 * info[t, 'team-base']:.0f}%"
                     + (f"; chance: {100 * chance:.0f}%)" if chance is not None else ")"))
        out.append(line + ".")
    out += [f"- {c['task']}: MAAC is {said(c, 'IAC')}." for c in comparisons
            if (c["a"], c["b"]) == ("team-maac-lora", "team-iac-lora")]
    return "\n".join(out) + "\n"


def exchanges(results: dict[str, dict[str, Any]], per_row: int = 2) -> str:
    """The first `per_row` kept episodes of each row: what each agent sent, turn by turn, and the reward."""
    blocks = []
    for key, r in results.items():
        for ex in r["examples"][:per_row]:
            lines = [f"{key} (held-out instance {ex['instance']}), reward {np.mean(list(ex['rewards'].values())):.2f}"]
            for t, turn in enumerate(ex["turns"]):
                for a, v in turn.items():  # wrapped: the site cuts a code line past ~100 characters
                    lines += textwrap.wrap(f"  turn {t} {a}: {json.dumps(v['sent'])[:160]}", CODE_WIDTH,
                                           subsequent_indent=" " * 6, break_on_hyphens=False)
            blocks.append("\n".join(lines))
    return "```\n" + "\n\n".join(blocks) + "\n```\n" if blocks else ""
