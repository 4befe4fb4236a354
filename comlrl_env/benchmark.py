"""Benchmark runner: evaluate policies on every environment of a suite, write a table and a chart.

A *policy* is any callable `policy(observations, envs) -> actions` that maps a
batch of observations (one `{agent: text}` dict per live episode) to a batch
of actions; `envs` are the live environments, for scripted policies that need
the task (a model-backed policy ignores them). `learners.AgentPolicy` is the
policy made of saved Hugging Face agents; `comlrl-bench` joins the two.

Each environment plays `episodes` episodes (task instances 0..N-1 of a finite
task set, or seeds `seed..seed+N-1` of a procedural one) in lockstep: one
policy call per turn for the whole batch. Metrics per (policy, env):

- `reward_mean`: mean over episodes of the mean per-agent undiscounted return;
- `success_rate`: fraction of episodes whose joint return reaches the env's
  `metadata["success_threshold"]` (pass@1 for code tasks), where defined;
- `invalid_action_rate`: flagged agent actions / agent actions;
- `tokens_per_episode`: generated tokens per episode, for policies that count them;
- `episodes_per_second`.

Scripted reference rows show where agents stand: `empty` (every agent answers
"") for every env, and `canonical` for envs that provide `canonical_actions()`.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Sequence

import matplotlib
from tqdm.auto import tqdm

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.registry import make
from comlrl_env.suites import suites

__all__ = ["Policy", "empty_policy", "evaluate_policy", "run_suite", "scripted_policies"]

Policy = Callable[[list[dict[AgentID, str]], list[TextParallelEnv]], list[dict[AgentID, str]]]
METRICS = ("reward_mean", "success_rate", "invalid_action_rate", "tokens_per_episode", "episodes_per_second")


def empty_policy(observations: list[dict[AgentID, str]], envs: list[TextParallelEnv]) -> list[dict[AgentID, str]]:
    """Every agent answers the empty string (a floor for every task)."""
    return [{agent: "" for agent in obs} for obs in observations]


def canonical_policy(observations: list[dict[AgentID, str]], envs: list[TextParallelEnv]) -> list[dict[AgentID, str]]:
    """The task's own reference answer (`env.canonical_actions()`)."""
    return [env.canonical_actions() for env in envs]


def scripted_policies(env: TextParallelEnv) -> dict[str, Policy]:
    """The scripted reference rows that apply to `env`."""
    out: dict[str, Policy] = {"empty": empty_policy}
    if hasattr(env, "canonical_actions"):
        out["canonical"] = canonical_policy
    return out


def evaluate_policy(env: str | TextParallelEnv, policy: Policy, episodes: int, seed: int = 0) -> dict[str, float]:
    """Play `episodes` episodes of `env` with `policy` in lockstep; return the metrics of the module docstring."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}.")
    template = make(env) if isinstance(env, str) else env
    live: list[TextParallelEnv] = []
    observations: list[dict[AgentID, str]] = []
    for i in range(episodes):
        finite = template.num_tasks is not None
        obs, _ = template.reset(seed=seed + i, options={"task_index": i % template.num_tasks} if finite else None)
        live.append(template.clone())
        observations.append(obs)
    returns = [dict.fromkeys(e.possible_agents, 0.0) for e in live]
    owner = list(range(episodes))
    invalid = actions_taken = 0
    tokens_before = getattr(policy, "tokens_generated", None)
    start = time.perf_counter()
    while live:
        actions = policy(observations, live)
        next_live, next_obs, next_owner = [], [], []
        for env, act, k in zip(live, actions, owner):
            obs, rew, term, trunc, infos = env.step(act)
            for agent, r in rew.items():
                returns[k][agent] += r
            actions_taken += len(act)
            invalid += sum("invalid_action" in infos.get(agent, {}) for agent in act)
            if env.agents:
                next_live.append(env)
                next_obs.append(obs)
                next_owner.append(k)
        live, observations, owner = next_live, next_obs, next_owner
    seconds = time.perf_counter() - start
    per_episode = [sum(r.values()) / len(r) for r in returns]
    metrics = {
        "reward_mean": sum(per_episode) / episodes,
        "invalid_action_rate": invalid / max(actions_taken, 1),
        "episodes_per_second": episodes / max(seconds, 1e-9),
    }
    threshold = template.metadata.get("success_threshold")
    if threshold is not None:
        metrics["success_rate"] = sum(sum(r.values()) / len(r) >= threshold for r in returns) / episodes
    if tokens_before is not None:
        metrics["tokens_per_episode"] = (policy.tokens_generated - tokens_before) / episodes
    return metrics


def run_suite(
    suite: str | Sequence[str],
    policies: dict[str, Policy],
    episodes: int,
    out_dir: str | None = None,
    seed: int = 0,
    scripted: bool = True,
) -> dict[str, Any]:
    """Evaluate every policy (plus scripted reference rows) on every env of `suite`.

    Writes `results.json`, `results.md` (a table: env x policy x metric) and `results.png` into `out_dir`.
    """
    if isinstance(suite, str) and suite not in suites:
        raise ValueError(f"unknown suite {suite!r}; known: {sorted(suites)}.")
    env_ids = suites[suite] if isinstance(suite, str) else list(suite)
    rows = []
    jobs = []
    for env_id in env_ids:
        env = make(env_id)
        extra = scripted_policies(env) if scripted else {}
        jobs += [(env_id, name, p) for name, p in {**policies, **extra}.items()]
    for env_id, name, policy in tqdm(jobs, desc=f"bench {suite if isinstance(suite, str) else 'envs'}"):
        rows.append({"env": env_id, "policy": name, **evaluate_policy(env_id, policy, episodes, seed)})
    results = {"suite": suite, "episodes": episodes, "seed": seed, "rows": rows}
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
        with open(os.path.join(out_dir, "results.md"), "w", encoding="utf-8") as f:
            f.write(markdown_table(rows))
        _chart(rows, os.path.join(out_dir, "results.png"))
    return results


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One line per (env, policy); '-' where a metric is not defined."""
    lines = ["| env | policy | " + " | ".join(METRICS) + " |", "|---|---|" + "---|" * len(METRICS)]
    for r in rows:
        cells = [f"{r[m]:.3f}" if m in r else "-" for m in METRICS]
        lines.append(f"| {r['env']} | {r['policy']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _chart(rows: list[dict[str, Any]], path: str) -> None:
    envs = list(dict.fromkeys(r["env"] for r in rows))
    names = list(dict.fromkeys(r["policy"] for r in rows))
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(envs)), 3.8))
    for j, name in enumerate(names):
        values = [next((r["reward_mean"] for r in rows if r["env"] == e and r["policy"] == name), 0.0) for e in envs]
        ax.bar([i + j * width for i in range(len(envs))], values, width, label=name)
    ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(envs))])
    ax.set_xticklabels(envs, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("mean reward")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
