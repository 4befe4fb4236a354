"""The numbers of `make results-coop` (`results_coop.py`): a row's reward over seeds and episodes, the
differences between rows, what the messages carried, and the markdown the results page shows (table,
differences, findings, information flow, messages).

What a unit file keeps of its evaluation episodes, and how it is read back: `Recorder` keeps the first
`EXAMPLES` sampled exchanges (`examples`: what each agent saw and sent, turn by turn) and a lone agent's
episodes; a team's episode rows are `comlrl_env.info_flow.episode_record` rows (each agent's message and
answer, `used_partner_info`, returns), under `episodes` (`sampled`, `greedy`), gzip + base64 (`packed`) when the
unit would be large; `episode_rows` reads either. `info_flow` counts, per agent of a team unit, the episodes
whose message named the agent's own private value and whose answer used the partner's: over every stored
episode, or, for units made before the episodes were stored, over their stored exchanges, played again
through the task (`replayed`).
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import math
import os
import textwrap
from typing import Any, Callable

import numpy as np

from comlrl_env.info_flow import episode_record
from comlrl_env.tasks.private_info import words
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
            # each evaluation's own bounds (Wilson's is not symmetric at 0 or 1)
            "seed_bounds": [[m.get("reward_low", m["reward_mean"] - m["reward_ci95"]),
                             m.get("reward_high", m["reward_mean"] + m["reward_ci95"])] for m in metrics],
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


# ----- what a unit keeps of its episodes --------------------------------------------------------------------


class Recorder:
    """A policy that plays `policy` and keeps the env copies of every episode (all start in its first call);
    after the episodes their `prompt_history`, `response_history` and `last_rewards` hold the exchange."""

    def __init__(self, policy: Any) -> None:
        self.policy, self.envs = policy, []

    @property
    def tokens_generated(self) -> int:
        """The model's count (a scripted policy has none: AttributeError, so no tokens are reported)."""
        return self.policy.tokens_generated

    def __call__(self, observations: list[dict[str, str]], envs: list[Any]) -> list[dict[str, str]]:
        if not self.envs:
            self.envs = list(envs)
        return self.policy(observations, envs)

    def examples(self, n: int, clip: int = 700) -> list[dict[str, Any]]:
        """Per episode of the first `n`: per turn, what each agent saw (the last `clip` characters) and sent;
        the rewards."""
        return [{"instance": env.task_index, "rewards": dict(env.last_rewards), "turns": [
            {a: {"saw": env.prompt_history[a][t][-clip:], "sent": env.response_history[a][t]}
             for a in env.possible_agents} for t in range(len(env.prompt_history[env.possible_agents[0]]))]}
            for env in self.envs[:n]]

    def rows(self) -> list[dict[str, Any]]:
        """A lone agent's episodes (its env reports no info flow): `episode`, `task_index`, `answers`, `returns`."""
        return [{"episode": k, "task_index": env.task_index,
                 "answers": {a: env.response_history[a][-1] for a in env.possible_agents},
                 "returns": {a: float(r) for a, r in env.last_rewards.items()}} for k, env in enumerate(self.envs)]


def packed(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Episode rows as gzip-compressed JSON in base64 (`{"gzip_base64": ...}`), for a unit that would be large."""
    return {"gzip_base64": base64.b64encode(gzip.compress(json.dumps(rows).encode("utf-8"))).decode("ascii")}


def episode_rows(unit: dict[str, Any], mode: str = "sampled") -> list[dict[str, Any]] | None:
    """Every `mode` ("sampled", "greedy") evaluation episode's row a unit stores, None when it stores none."""
    rows = (unit.get("episodes") or {}).get(mode)
    if isinstance(rows, dict):
        return json.loads(gzip.decompress(base64.b64decode(rows["gzip_base64"])).decode("utf-8"))
    return rows


def load_units(units: str, tasks: list[str], names: list[str]) -> dict[str, dict[str, Any]]:
    """Every unit file `<units>/<task>/seed<N>/<name>.json`, by key ("task/seedN/name"), in tasks x seeds x
    names order."""
    found = {}
    for task in tasks:
        seeds = sorted(int(d.removeprefix("seed")) for d in os.listdir(os.path.join(units, task))
                       if d.startswith("seed")) if os.path.isdir(os.path.join(units, task)) else []
        for seed, name in ((seed, name) for seed in seeds for name in names):
            path = os.path.join(units, task, f"seed{seed}", name + ".json")
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    unit = json.load(f)
                # units made before the schedule was a setting trained at a constant learning rate
                unit.get("settings", {}).setdefault("lr_schedule", "constant")
                found[f"{task}/seed{seed}/{name}"] = unit
    return found


def replayed(env: Any, example: dict[str, Any]) -> dict[str, Any]:
    """A stored team exchange (`Recorder.examples`) played again through `env`, the task's held-out team env:
    the `episode_record` row of its answer step, as `evaluate_policy` would have written it."""
    env.reset(seed=0, options={"task_index": example["instance"]})
    message, answer = ({a: sent["sent"] for a, sent in turn.items()} for turn in example["turns"])
    env.step(message)
    _, rewards, _, _, infos = env.step(answer)
    return {"task_index": example["instance"], **episode_record(infos, answer, rewards)}  # messages pay 0


def info_flow(unit: dict[str, Any], env: Any) -> dict[str, Any] | None:
    """A team unit's information flow (None for a lone agent's): per agent, in how many sampled episodes its
    message named its own private value (the word is in it, read as answers are: `private_info.words`) and
    its answer used the partner's (`used_partner_info`: it got the partner's part right). Over every stored
    episode (`source` "all"), else over the stored exchanges played again (`replayed`; `source` "examples").
    `env` is the task's held-out team env, which gives each instance's parts."""
    if unit["view"] != "team":
        return None
    rows, source = episode_rows(unit), "all"
    if rows is None:
        rows, source = [replayed(env, ex) for ex in unit["examples"]], "examples"
    named, used = dict.fromkeys(env.possible_agents, 0), dict.fromkeys(env.possible_agents, 0)
    for row in rows:
        env.reset(seed=0, options={"task_index": row["task_index"]})
        for agent in env.possible_agents:
            named[agent] += env.task["parts"][env.held_parts(agent)[0]] in words(row["messages"].get(agent, ""))
            used[agent] += bool(row["used_partner_info"].get(agent))
    return {"source": source, "seed": unit["seed"], "episodes": len(rows), "message_named_own": named,
            "answer_used_partner": used, "roles": list(env.role_names)}


def flow_over_seeds(flows: list[dict[str, Any]]) -> dict[str, Any]:
    """A row's `info_flow` counts summed over its seeds, and where they come from (`source`: what the page says)."""
    groups: dict[tuple[str, int], list[int]] = {}
    for f in flows:
        groups.setdefault((f["source"], f["episodes"]), []).append(f["seed"])
    source = "; ".join((f"all {n} episodes" if kind == "all" else f"{n} stored exchanges")
                       + (f" of seed {s[0]}" if len(s) == 1 else f" of each of {seeds_label(s)}")
                       for (kind, n), s in groups.items())
    total = lambda key: {a: sum(f[key][a] for f in flows) for a in flows[0][key]}  # noqa: E731
    return {"source": "from " + source, "episodes": sum(f["episodes"] for f in flows), "roles": flows[0]["roles"],
            "message_named_own": total("message_named_own"), "answer_used_partner": total("answer_used_partner")}


# ----- rows and comparisons -----------------------------------------------------------------------------------


def summarize(task: str, cond: Any, results: list[dict[str, Any]], env: Any = None) -> dict[str, Any]:
    """One table row: a condition's seeds, reward over seeds (sampled, greedy: None for a scripted row), the
    exact expected reward (a scripted row), partner-info use, information flow (a team row, given `env`: the
    task's held-out team env; `info_flow`), budget."""
    trainings = [r["training"] for r in results if r["training"] is not None]
    info = [r["sampled"]["used_partner_info_rate"] for r in results if "used_partner_info_rate" in r["sampled"]]
    greedy = [r for r in results if r.get("greedy") is not None]
    flows = [info_flow(r, env) for r in results] if env is not None and cond.view == "team" else []
    return {"task": task, **dataclasses.asdict(cond), "seeds": [r["seed"] for r in results],
            "sampled": over_seeds([r["sampled"] for r in results], [r["seed"] for r in results]),
            "greedy": over_seeds([r["greedy"] for r in greedy], [r["seed"] for r in greedy]) if greedy else None,
            "expected_reward": results[0].get("expected_reward"),
            "info_flow": flow_over_seeds(flows) if flows else None,
            "used_partner_info_rate": float(np.mean(info)) if info else None,
            "used_partner_info_chance": results[0]["sampled"].get("used_partner_info_chance"),
            "invalid_action_rate": float(np.mean([r["sampled"]["invalid_action_rate"] for r in results])),
            "completions": int(np.mean([t["completions_per_agent"] for t in trainings])) * cond.num_agents
            if trainings else None,
            # wall time of the unit (mean over seeds): training (0 for an untrained row) and held-out evaluation
            "minutes": float(np.mean([r["seconds_train"] for r in results])) / 60 if trainings else None,
            "minutes_eval": float(np.mean([r["seconds_eval"] for r in results])) / 60}


BEST_OWN = "better own-part baseline"
"""In `COMPARISONS`: whichever of `OWN_BASELINES` has the higher mean reward over seeds on the task."""
OWN_BASELINES = ("alone-own-magrpo-lora", "alone-own-scripted")
COMPARISONS = [(f"team-{x}-lora", b) for x in ("magrpo", "iac", "maac") for b in
               ("team-base", BEST_OWN, "alone-full-magrpo-lora")] + [
    ("team-maac-lora", "team-iac-lora"), ("alone-full-magrpo-lora", "alone-full-base"),
    ("alone-own-magrpo-lora", "alone-own-base"), ("alone-own-magrpo-lora", "alone-own-scripted")]
"""(a, b) pairs whose difference a - b the results report: each trained team against the untrained team, the
better of the two lone own-part baselines (`BEST_OWN`: the trained own-part agent, or the scripted one that
names its part and guesses the other) and the trained everything-agent; MAAC against IAC; each lone agent
against its base, and the trained own-part agent against the scripted one."""


def build(results: dict[str, dict[str, Any]], tasks: list[str], conditions: list[Any],
          env_of: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """The report of unit results (key "task/seedN/condition" -> a unit file's content): `rows` (one per task
    and condition with units, over the seeds it has; a team row's information flow with `env_of(task)`, the
    task's held-out team env), `comparisons` (`COMPARISONS` where both rows exist; `against` is the pair's b
    as listed, `b` the row it names), `curves` (per task and trained condition, the training reward averaged
    over seeds, labelled with them) and `settings` (each setting's distinct values over the units, plus the
    seeds)."""
    rows, curves = [], {}
    for task in tasks:
        env = env_of(task) if env_of is not None else None
        for cond in conditions:
            mine = [r for r in results.values() if r["task"] == task and r["name"] == cond.name]
            if not mine:
                continue
            rows.append(summarize(task, cond, mine, env))
            runs = [(r["seed"], r["curve"]) for r in mine if r.get("curve") and r["curve"][0]]
            if runs:
                n = min(len(x) for _, (x, _) in runs)  # their rollouts line up
                label = f"{cond.name} ({seeds_label([s for s, _ in runs])})"
                curves.setdefault(task, {})[label] = (runs[0][1][0][:n],
                                                      np.mean([y[:n] for _, (_, y) in runs], 0).tolist())
    by = {(r["task"], r["name"]): r for r in rows}
    best = {t: max((by[t, n] for n in OWN_BASELINES if (t, n) in by), key=lambda r: r["sampled"]["mean"])["name"]
            for t in tasks if any((t, n) in by for n in OWN_BASELINES)}
    named = [(t, a, b, best.get(t) if b == BEST_OWN else b) for t in tasks for a, b in COMPARISONS]
    pairs = [(t, a, b, row, difference(by[t, a]["sampled"], by[t, row]["sampled"]))
             for t, a, b, row in named if (t, a) in by and (t, row) in by]
    comparisons = [{"task": t, "a": a, "b": row, "against": b, **d} for t, a, b, row, d in pairs if d is not None]
    made: dict[str, list[Any]] = {"seeds": sorted({r["seed"] for r in results.values()})}
    for r in results.values():
        for name, value in (r.get("settings") or {}).items():
            if name == "budget" and r["learner"] is None:
                continue  # an untrained row samples no completions
            if value not in made.setdefault(name, []):
                made[name].append(value)
    return {"rows": rows, "comparisons": comparisons, "curves": curves, "settings": made}


# ----- table, findings, curves ------------------------------------------------------------------------------


def seeds_label(seeds: list[int]) -> str:
    """"seed 0", "seeds 0-4" (three or more in a row) or "seeds 0, 2"."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seeds " + ", ".join(map(str, seeds))


def seed_groups(rows: list[dict[str, Any]]) -> str:
    """Which rows ran which seeds, e.g. "seeds 0-4 (team-base, ...) and seed 0 only (team-iac-lora, ...)"; a
    condition whose seeds differ between tasks is named with its task."""
    seeds_of: dict[str, set[tuple[int, ...]]] = {}
    for r in rows:
        seeds_of.setdefault(r["name"], set()).add(tuple(r["seeds"]))
    groups: dict[tuple[int, ...], list[str]] = {}
    for r in rows:
        name = r["name"] if len(seeds_of[r["name"]]) == 1 else f"{r['task']} {r['name']}"
        if name not in groups.setdefault(tuple(r["seeds"]), []):
            groups[tuple(r["seeds"])].append(name)
    if len(groups) == 1:
        return f"{seeds_label(list(next(iter(groups))))} for every row"
    return " and ".join(f"{seeds_label(list(s))}{' only' if len(s) == 1 else ''} ({', '.join(names)})"
                        for s, names in sorted(groups.items(), key=lambda g: -len(g[0])))


def interval(s: dict[str, Any]) -> str:
    return f"{s['mean']:.3f} ± {s['ci95_seeds']:.3f}" if s["ci95_seeds"] is not None else f"{s['mean']:.3f}"


def bounds(s: dict[str, Any]) -> tuple[float, float, str]:
    """A row's own 95% interval: over its seeds (t), or for one seed its evaluation's, over instances."""
    if s["ci95_seeds"] is not None:
        return s["mean"] - s["ci95_seeds"], s["mean"] + s["ci95_seeds"], "over seeds"
    low, high = s["seed_bounds"][0]
    return low, high, f"over the instances of {seeds_label(s['seeds'])}"


def fraction(p: float) -> str:
    """0.0833 -> "0.083 = 1/12" (a unit fraction, as chance levels are), else "0.400"."""
    whole = round(1 / p) if p > 0 else 0
    return f"{p:.3f} = 1/{whole}" if whole and math.isclose(p, 1 / whole) else f"{p:.3f}"


def table(rows: list[dict[str, Any]]) -> str:
    """One line per (task, condition)."""
    lines = ["| task | condition | seeds | budget (completions) | wall min (train + eval) "
             "| held-out reward T=0.8, mean of seeds ± t95 | pooled episodes ± 95% | per seed (± 95%) "
             "| greedy, mean of seeds ± t95 | partner info used (chance) | invalid |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r["sampled"]
        budget = "-" if r["completions"] is None else str(r["completions"])
        wall = (f"{r['minutes_eval']:.1f}" if r["minutes"] is None
                else f"{r['minutes'] + r['minutes_eval']:.1f} ({r['minutes']:.1f} + {r['minutes_eval']:.1f})")
        seeds = ", ".join(f"{m:.2f} ± {c:.2f}" for m, c in zip(s["seed_means"], s["seed_ci95"]))
        reward = interval(s) + ("" if r.get("expected_reward") is None
                                else f"; expected exactly {fraction(r['expected_reward'])}")
        info = "-" if r["used_partner_info_rate"] is None else f"{r['used_partner_info_rate']:.2f}"
        if r.get("used_partner_info_chance") is not None:
            info += f" ({r['used_partner_info_chance']:.2f})"
        greedy = "-" if r["greedy"] is None else interval(r["greedy"])
        lines.append(f"| {r['task']} | {r['name']} | {seeds_label(r['seeds']).split(' ', 1)[1]} | {budget} | {wall} "
                     f"| {reward} | {s['pooled_mean']:.3f} ± {s['pooled_ci95']:.3f} ({s['episodes']}) | {seeds} "
                     f"| {greedy} | {info} | {r['invalid_action_rate']:.2f} |")
    return "\n".join(lines) + "\n"


def against(c: dict[str, Any]) -> str:
    """The b of a comparison as the page names it: the row, and its role when it was chosen (`BEST_OWN`)."""
    return c["b"] + (f" ({BEST_OWN})" if c["against"] == BEST_OWN else "")


def comparison_table(comparisons: list[dict[str, Any]]) -> str:
    lines = ["| task | a − b | paired seeds | over seeds (paired, t95) | pooled episodes (95%) | a is "
             "| intervals apart |", "|---|---|---|---|---|---|---|"]
    for c in comparisons:
        seeds = f"{c['mean']:+.3f} ± {c['ci95']:.3f}" + ("" if c["ci95_seeds"] is not None else " (one seed)")
        lines.append(f"| {c['task']} | {c['a']} − {against(c)} | {', '.join(map(str, c['seeds']))} | {seeds} "
                     f"| {c['pooled']:+.3f} ± {c['pooled_ci95']:.3f} "
                     f"| {c['verdict']} | {c['intervals_apart']} |")
    return "\n".join(lines) + "\n"


def info_table(rows: list[dict[str, Any]]) -> str:
    """Per team row: the share of episodes whose message named the sender's own value and whose answer used
    the partner's, per agent, and what the counts come from (every episode, or the stored exchanges)."""
    mine = [r for r in rows if r.get("info_flow")]
    if not mine:
        return ""
    roles = dict.fromkeys(f"{r['task']}: agent_0 the {r['info_flow']['roles'][0]}, agent_1 the "
                          f"{r['info_flow']['roles'][1]}" for r in mine)
    share = lambda n, of: f"{n / of:.2f} ({n} of {of})"  # noqa: E731
    lines = [f"Sampled at T = 0.8; {'; '.join(roles)}. A message named its sender's value when the word is in it "
             "(read as answers are read); an answer used the partner's value when it got it right, which a "
             "guess does at the chance level in the main table. Lone agents send no message. \"Stored exchanges\": "
             "units made before every evaluation episode was kept hold their first sampled episodes only, a small "
             "sample; the others count all their episodes.\n",
             "| task | condition | counted | agent_0's message named its own value | agent_1's message named its "
             "own value | agent_0's answer used agent_1's value | agent_1's answer used agent_0's value |",
             "|---|---|---|---|---|---|---|"]
    for r in mine:
        f, n = r["info_flow"], r["info_flow"]["episodes"]
        cells = [share(f[key][a], n) for key in ("message_named_own", "answer_used_partner")
                 for a in ("agent_0", "agent_1")]
        lines.append(f"| {r['task']} | {r['name']} | {f['source']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def findings(rows: list[dict[str, Any]], comparisons: list[dict[str, Any]]) -> str:
    """Plain statements read off the numbers: each trained team against the untrained team, the better lone
    own-part baseline and the everything-agent (differences over seeds; "seed 0 only" where one seed is
    paired), whether the team's own interval clears what naming its own part and guessing the other earns,
    MAAC against IAC, and how often answers used the partner's part."""
    by = {(c["task"], c["a"], c["against"]): c for c in comparisons}
    info = {(r["task"], r["name"]): r["used_partner_info_rate"] for r in rows}
    guess = {r["task"]: r["expected_reward"] for r in rows if r.get("expected_reward") is not None}
    out = []

    def said(c: dict[str, Any], what: str) -> str:
        one = "" if c["ci95_seeds"] is not None else f", {seeds_label(c['seeds'])} only"
        return (f"{c['verdict'].replace('within CI', 'not apart from')} {what} "
                f"({c['mean']:+.3f} ± {c['ci95']:.3f}{one})")

    for r in rows:
        if r["view"] != "team" or r["learner"] is None:
            continue
        t, a = r["task"], r["name"]
        versus = {"team-base": "the untrained team", "alone-full-magrpo-lora": "the trained everything-agent"}
        parts = [said(c, f"the {BEST_OWN}, {c['b']}" if b == BEST_OWN else versus[b])
                 for b in ("team-base", BEST_OWN, "alone-full-magrpo-lora") for c in [by.get((t, a, b))] if c]
        line = f"- {t}, {a} ({seeds_label(r['seeds'])}): {interval(r['sampled'])}" + (
            "; " + ", ".join(parts) if parts else "")
        chance = guess.get(t, r.get("used_partner_info_chance"))
        if chance is not None:
            low, high, over = bounds(r["sampled"])
            line += (f"; its interval {over}, [{low:.3f}, {high:.3f}], {'clears' if low > chance else 'does not clear'}"
                     f" {fraction(chance)}, what naming its own part and guessing the other earns in expectation")
        if info.get((t, a)) is not None and info.get((t, "team-base")) is not None:
            chance = r.get("used_partner_info_chance")
            line += (f"; answers used the partner's part {100 * info[t, a]:.0f}% of the time "
                     f"(untrained team: {100 * info[t, 'team-base']:.0f}%"
                     + (f"; chance: {100 * chance:.0f}%)" if chance is not None else ")"))
        out.append(line + ".")
    out += [f"- {c['task']}: MAAC is {said(c, 'IAC')}." for c in comparisons
            if (c["a"], c["b"]) == ("team-maac-lora", "team-iac-lora")]
    return "\n".join(out) + "\n"


def markdown(report: dict[str, Any], results: dict[str, dict[str, Any]], kept: int) -> str:
    """The section's text below its settings line: the table, the differences, the findings, the information
    flow and the first seed's example exchanges (`kept`: exchanges per unit file)."""
    first = min(r["seed"] for r in results.values())
    flow = info_table(report["rows"])
    return (table(report["rows"]) + "\n#### Differences between conditions\n\n"
            "Each row is a − b, the held-out reward at T = 0.8. \"a is above/below\": the 95% t-interval of the "
            "seed-paired difference excludes 0 (rows compare on the seeds both have; for one such seed, its two "
            "evaluations' intervals combined); \"intervals apart\": the two rows' own intervals over their seeds do "
            f"not overlap. Each team is compared with the {BEST_OWN} of its task: the better, by mean over seeds, "
            "of the trained own-part agent and `alone-own-scripted` (its part plus a uniform guess of the other).\n\n"
            + comparison_table(report["comparisons"])
            + "\nRead off the numbers:\n\n" + findings(report["rows"], report["comparisons"])
            + ("\n#### What the messages carried\n\n" + flow if flow else "")
            + f"\n#### Example exchanges\n\nSeed {first}, the first two held-out episodes of each row, sampled; a "
            "team's turn 0 is the message and turn 1 the answer, a lone agent's turn 0 its answer; each unit file "
            f"keeps {kept} with what each agent saw.\n\n"
            + exchanges({k: r for k, r in results.items() if r["seed"] == first}))


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
