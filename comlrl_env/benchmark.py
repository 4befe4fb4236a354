"""Benchmark runner: evaluate policies on every environment of a suite, write a table and a chart.

A *policy* is any callable `policy(observations, envs) -> actions` that maps a
batch of observations (one `{agent: text}` dict per live episode) to a batch
of actions; `envs` are the live environments, for scripted policies that need
the task (a model-backed policy ignores them). `learners.models.policy.AgentPolicy` is
the policy made of saved Hugging Face agents; `comlrl-bench` joins the two:

    from comlrl_env.benchmark import run_suite
    from learners.models.policy import AgentPolicy

    team = AgentPolicy.from_saved("outputs/quickstart/agents")   # the sampling settings it was trained with
    results = run_suite("smoke", {"demo": team}, episodes=32, out_dir="bench/")
    print(results["rows"][0]["reward_mean"], results["rows"][0]["reward_ci95"])

Each environment plays `episodes` episodes (task instances 0..N-1 of a finite
task set, or seeds `seed..seed+N-1` of a procedural one) in lockstep: one
policy call per turn for the whole batch. Metrics per (policy, env):

- `reward_mean`: mean over episodes of the mean per-agent undiscounted return, with `reward_std` (over
  episodes) and `reward_ci95`, the half-width of its 95% confidence interval (1.96 std / sqrt(episodes));
- `episodes`: episodes played (task instances x `samples_per_task`);
- `pass_at_k`: with `samples_per_task=k > 1` and a success threshold, the fraction of task instances
  whose k episodes include a success;
- `success_rate`: fraction of episodes whose joint return reaches the env's
  `metadata["success_threshold"]` (pass@1 for code tasks), where defined;
- `return_<agent>`: each seat's mean return (what tells players apart in a competitive game, where
  `reward_mean` is 0 for any zero-sum play);
- `invalid_action_rate`: flagged agent actions / agent actions;
- `tokens_per_episode`: generated tokens per episode, for policies that count them;
- `episodes_per_second`;
- `used_partner_info_rate` and its `used_partner_info_ci95` (over episodes), only for envs that report
  `infos[agent]["used_partner_info"]` (private-information tasks, `comlrl_env.info_flow`): the share of
  agent-answers that contain the partner's private part.

`evaluate_policy(..., episodes_path=...)` (and `run_suite(..., record_episodes=True)`, into
`out_dir/episodes/`) also writes one JSONL row per episode of such an env: `episode`, `task_index`, each
agent's `messages` (what it sent at the message turn), `answers`, `used_partner_info` and `returns`.

Scripted reference rows show where agents stand: `empty` (every agent answers
"") for every env, `canonical` for envs that provide `canonical_actions()`, and
each of an env's `reference_bots()` (OpenSpiel games: random and MCTS) in every seat.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Any, Callable, Sequence

import matplotlib
from tqdm.auto import tqdm

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.info_flow import episode_record, used_partner_info_rate, write_records
from comlrl_env.policies import FixedPolicy
from comlrl_env.registry import make
from comlrl_env.suites import suites

__all__ = ["Episodes", "Policy", "empty_policy", "evaluate_policy", "fixed_team", "markdown_table", "play_episodes",
           "run_suite", "scripted_policies", "seated", "team_table"]

Policy = Callable[[list[dict[AgentID, str]], list[TextParallelEnv]], list[dict[AgentID, str]]]
METRICS = ("reward_mean", "success_rate", "invalid_action_rate", "tokens_per_episode", "episodes_per_second")
OPTIONAL_METRICS = ("used_partner_info_rate",)  # columns of the table only where some row has them


def empty_policy(observations: list[dict[AgentID, str]], envs: list[TextParallelEnv]) -> list[dict[AgentID, str]]:
    """Every agent answers the empty string (a floor for every task)."""
    return [{agent: "" for agent in obs} for obs in observations]


def canonical_policy(observations: list[dict[AgentID, str]], envs: list[TextParallelEnv]) -> list[dict[AgentID, str]]:
    """The task's own reference answer (`env.canonical_actions()`)."""
    return [env.canonical_actions() for env in envs]


def seated(policies: Sequence[Policy]) -> Policy:
    """One benchmark policy from one policy per seat (a league match, a bot beside a model): seat i's policy is
    asked, in one call, for agent i's action in the envs where agent i is to move, and sees only agent i's
    observation; a waiting seat answers ""."""
    def team(observations: list[dict[AgentID, str]], envs: list[TextParallelEnv]) -> list[dict[AgentID, str]]:
        actions: list[dict[AgentID, str]] = [dict.fromkeys(obs, "") for obs in observations]
        for agent, policy in zip(envs[0].possible_agents, policies):
            rows = [k for k, env in enumerate(envs) if agent in observations[k] and agent in env.to_move()]
            if rows:
                answers = policy([{agent: observations[k][agent]} for k in rows], [envs[k] for k in rows])
                for k, answer in zip(rows, answers):
                    actions[k][agent] = answer.get(agent, "")
        return actions

    return team


def fixed_team(policies: Sequence[FixedPolicy]) -> Policy:
    """Fixed policies (one per seat, or one for every seat) as a benchmark policy: each is asked, in one call,
    for the envs where its seat is to move; a waiting seat answers ""."""
    def fixed(policy: FixedPolicy) -> Policy:
        def one_seat(observations: list[dict[AgentID, str]], envs: list[TextParallelEnv]) -> list[dict[AgentID, str]]:
            (agent,) = observations[0]  # `seated` asks for one seat
            return [{agent: text} for text in policy.act(envs, agent, 1)]
        return one_seat

    def team(observations: list[dict[AgentID, str]], envs: list[TextParallelEnv]) -> list[dict[AgentID, str]]:
        seats = len(envs[0].possible_agents)
        return seated([fixed(policies[s] if len(policies) > 1 else policies[0]) for s in range(seats)])(
            observations, envs)

    return team


def scripted_policies(env: TextParallelEnv) -> dict[str, Policy]:
    """The scripted reference rows that apply to `env`: `empty`, `canonical` where the task has reference
    answers, and the env's `reference_bots()` (e.g. OpenSpiel's random and MCTS bots) in every seat."""
    out: dict[str, Policy] = {"empty": empty_policy}
    if hasattr(env, "canonical_actions"):
        out["canonical"] = canonical_policy
    if hasattr(env, "reference_bots"):
        out.update({name: fixed_team([bot]) for name, bot in env.reference_bots().items()})
    return out


@dataclasses.dataclass
class Episodes:
    """What `play_episodes` saw: each episode's undiscounted return per agent and the agents whose answer forfeited
    it (`infos[agent]["forfeit"]`, as a game reports it), the actions per agent, and the info-flow rows of the
    steps that reported `used_partner_info` (`comlrl_env.info_flow.episode_record`, plus `episode`)."""

    returns: list[dict[AgentID, float]]
    forfeited: list[list[AgentID]]
    invalid: dict[AgentID, int]  # actions flagged invalid
    actions: dict[AgentID, int]  # actions taken (an agent's turns to move)
    seconds: float
    records: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # empty when the env reports none


def play_episodes(env: TextParallelEnv, policy: Policy, episodes: int, seed: int = 0,
                  samples_per_task: int = 1) -> Episodes:
    """Play `episodes` task instances of `env` (instances 0.. of a finite task set, else reset seeds
    `seed + i`), each `samples_per_task` times, with `policy` in lockstep: one call per turn for the batch."""
    if episodes < 1 or samples_per_task < 1:
        raise ValueError(f"episodes and samples_per_task must be >= 1, got {episodes} and {samples_per_task}.")
    live: list[TextParallelEnv] = []
    observations: list[dict[AgentID, str]] = []
    agents = list(env.possible_agents)
    for j in range(samples_per_task):
        for i in range(episodes):
            options = {"task_index": i % env.num_tasks} if env.num_tasks is not None else None
            obs, _ = env.reset(seed=seed + i + j * episodes, options=options)
            live.append(env.clone())
            observations.append(obs)
    returns = [dict.fromkeys(e.possible_agents, 0.0) for e in live]
    forfeited: list[list[AgentID]] = [[] for _ in live]
    owner = list(range(len(live)))
    invalid, taken = dict.fromkeys(agents, 0), dict.fromkeys(agents, 0)
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    while live:
        actions = policy(observations, live)
        next_live, next_obs, next_owner = [], [], []
        for copy, act, k in zip(live, actions, owner):
            for agent in copy.to_move():  # a waiting agent's text is ignored: not an action
                taken[agent] += 1
            obs, rew, term, trunc, infos = copy.step(act)
            for agent, r in rew.items():
                returns[k][agent] += r
            for agent in act:
                invalid[agent] += "invalid_action" in infos.get(agent, {})
                if infos.get(agent, {}).get("forfeit"):
                    forfeited[k].append(agent)
            record = episode_record(infos, act, returns[k])
            if record is not None:
                records.append({"episode": k, **record})
            if copy.agents:
                next_live.append(copy)
                next_obs.append(obs)
                next_owner.append(k)
        live, observations, owner = next_live, next_obs, next_owner
    records.sort(key=lambda row: row["episode"])
    return Episodes(returns, forfeited, invalid, taken, time.perf_counter() - start, records)


def evaluate_policy(env: str | TextParallelEnv, policy: Policy, episodes: int, seed: int = 0,
                    samples_per_task: int = 1, episodes_path: str | None = None) -> dict[str, float]:
    """Play `episodes` task instances of `env`, each `samples_per_task` times, with `policy` in lockstep
    (`play_episodes`); return the metrics of the module docstring. With `episodes_path`, write the per-episode
    info-flow rows there as JSONL (an env that reports no `used_partner_info` writes no file)."""
    template = make(env) if isinstance(env, str) else env
    tokens_before = getattr(policy, "tokens_generated", None)
    played_episodes = play_episodes(template, policy, episodes, seed, samples_per_task)
    returns, seconds = played_episodes.returns, played_episodes.seconds
    played = len(returns)
    per_episode = [sum(r.values()) / len(r) for r in returns]
    mean = sum(per_episode) / played
    std = math.sqrt(sum((x - mean) ** 2 for x in per_episode) / (played - 1)) if played > 1 else 0.0
    metrics = {
        "reward_mean": mean,
        "reward_std": std,
        "reward_ci95": 1.96 * std / math.sqrt(played),
        "episodes": float(played),
        "invalid_action_rate": sum(played_episodes.invalid.values()) / max(sum(played_episodes.actions.values()), 1),
        **{f"return_{agent}": sum(r[agent] for r in returns) / played for agent in template.possible_agents},
        "episodes_per_second": played / max(seconds, 1e-9),
    }
    threshold = template.metadata.get("success_threshold")
    if threshold is not None:
        success = [x >= threshold for x in per_episode]
        metrics["success_rate"] = sum(success) / played
        if samples_per_task > 1:
            metrics["pass_at_k"] = sum(any(success[i::episodes]) for i in range(episodes)) / episodes
    if tokens_before is not None:
        metrics["tokens_per_episode"] = (policy.tokens_generated - tokens_before) / played
    flow = used_partner_info_rate(played_episodes.records)
    if flow is not None:
        metrics["used_partner_info_rate"], metrics["used_partner_info_ci95"] = flow
        if episodes_path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(episodes_path)), exist_ok=True)
            write_records(episodes_path, played_episodes.records)
    return metrics


def run_suite(
    suite: str | Sequence[str | TextParallelEnv],
    policies: dict[str, Policy],
    episodes: int,
    out_dir: str | None = None,
    seed: int = 0,
    scripted: bool = True,
    samples_per_task: int = 1,
    metadata: dict[str, Any] | None = None,
    record_episodes: bool = False,
) -> dict[str, Any]:
    """Evaluate every policy (a team, by name; plus scripted reference rows) on every env of `suite`: a suite
    name, or a list of env ids and env instances.

    Returns and writes to `out_dir` `results.json` (`metadata`, e.g. the settings, agents and versions, then
    `rows`: one per env and team), `results.md` (mean ± 95% CI per team side by side, then every metric) and
    `results.png` (the same means with their CIs). With `record_episodes` (and `out_dir`), each (env, team)
    whose env reports `used_partner_info` also writes its per-episode rows to
    `out_dir/episodes/<env>__<team>.jsonl` (`/` in names written as `_`).
    """
    if isinstance(suite, str) and suite not in suites:
        raise ValueError(f"unknown suite {suite!r}; known: {sorted(suites)}.")
    envs = suites[suite] if isinstance(suite, str) else list(suite)
    jobs = []
    for spec in envs:
        env = make(spec) if isinstance(spec, str) else spec
        name = spec if isinstance(spec, str) else env.metadata.get("name", type(env).__name__)
        extra = scripted_policies(env) if scripted else {}
        jobs += [(name, env, team, p) for team, p in {**policies, **extra}.items()]
    rows = []
    for name, env, team, policy in tqdm(jobs, desc=f"bench {suite if isinstance(suite, str) else 'envs'}"):
        path = None
        if record_episodes and out_dir is not None:
            path = os.path.join(out_dir, "episodes", f"{name}__{team}.jsonl".replace("/", "_"))
        metrics = evaluate_policy(env, policy, episodes, seed, samples_per_task, episodes_path=path)
        rows.append({"env": name, "team": team, "policy": team, **metrics})
    results = {**(metadata or {}), "suite": suite if isinstance(suite, str) else None, "episodes": episodes,
               "samples_per_task": samples_per_task, "seed": seed, "rows": rows}
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, default=str)
        with open(os.path.join(out_dir, "results.md"), "w", encoding="utf-8") as f:
            f.write(team_table(rows) + "\n" + markdown_table(rows))
        _chart(rows, os.path.join(out_dir, "results.png"), _title(results))
    return results


def team_table(rows: list[dict[str, Any]]) -> str:
    """One line per env, one column per team: mean reward ± the half-width of its 95% CI."""
    teams = list(dict.fromkeys(r["team"] for r in rows))
    lines = ["| env | " + " | ".join(teams) + " |", "|---|" + "---|" * len(teams)]
    for env in dict.fromkeys(r["env"] for r in rows):
        cells = [next((f"{r['reward_mean']:.3f} ± {r['reward_ci95']:.3f}" for r in rows
                       if r["env"] == env and r["team"] == t), "-") for t in teams]
        lines.append(f"| {env} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One line per (env, team); '-' where a metric is not defined."""
    optional = [m for m in OPTIONAL_METRICS if any(m in r for r in rows)]
    metrics = ("reward_mean", "reward_ci95", "episodes", *METRICS[1:], *optional)
    lines = ["| env | policy | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for r in rows:
        cells = [f"{r[m]:.3f}" if m in r else "-" for m in metrics]
        lines.append(f"| {r['env']} | {r['team']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _title(results: dict[str, Any]) -> str:
    settings = results.get("settings") or {}
    shown = ", ".join(f"{k}={v}" for k, v in settings.items() if v is not None)
    return f"mean reward ± 95% CI, {results['episodes']} tasks x {results['samples_per_task']}" + (
        f"\n{shown}" if shown else "")


def _chart(rows: list[dict[str, Any]], path: str, title: str) -> None:
    envs = list(dict.fromkeys(r["env"] for r in rows))
    names = list(dict.fromkeys(r["team"] for r in rows))
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(envs)), 4.2))
    for j, name in enumerate(names):
        picked = [next((r for r in rows if r["env"] == e and r["team"] == name), None) for e in envs]
        ax.bar([i + j * width for i in range(len(envs))], [r["reward_mean"] if r else 0.0 for r in picked], width,
               yerr=[r["reward_ci95"] if r else 0.0 for r in picked], capsize=3, label=name)
    ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(envs))])
    ax.set_xticklabels(envs, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("mean reward")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
