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

Each environment plays `episodes` (N) task instances, each `samples_per_task` (k) times with the same instance
and reset seed, in lockstep. A finite task set's instances are the first N of a shuffle seeded by `seed`
(`instance_order`; every instance once when N is the set's size, then the shuffle again), never instances
0..N-1, whose order a task may have made uneven (SecretPair's first 12 share a colour); a procedural env's are
reset seeds `seed..seed+N-1`. Episode i has reset seed `seed + i` either way. In lockstep: one policy call per turn for the whole batch. Every 95% interval is over the task instances, the unit
the benchmark samples (`comlrl_env.intervals`): k repeats of one instance are one unit, so they never narrow
it. Each interval comes as `<name>_low`, `<name>_high` and `<name>_ci95` (the larger side). Metrics per
(policy, env):

- `reward_mean`: mean over episodes of the mean per-agent undiscounted return, with `reward_std` (over
  episodes) and its interval `reward_*`, chosen by what the task declares, never by the rewards seen
  (`reward_interval`): the t interval over per-task means (t quantile with tasks - 1 degrees of freedom),
  which assumes roughly symmetric per-task means (a long-tailed reward covers less); the Wilson interval of a
  rate (below) when `metadata["binary_reward"]` says every reward is 0 or 1; a bounded width when
  `metadata["reward_range"]` is declared and the tasks showed no spread; else, with no spread, an infinite
  interval and `reward_no_spread` (the table says "no spread observed");
- `episodes`: episodes played (task instances x k); `tasks`: distinct task instances among them;
- `success_rate`: fraction of episodes whose joint return reaches the env's
  `metadata["success_threshold"]` (pass@1 for code tasks), where defined;
- `pass_at_k`: with k > 1 and a success threshold, the fraction of task instances whose k episodes include
  a success;
- `return_<agent>`: each seat's mean return (what tells players apart in a competitive game, where
  `reward_mean` is 0 for any zero-sum play);
- `invalid_action_rate`: flagged agent actions / agent actions;
- `tokens_per_episode`: generated tokens per episode, for policies that count them;
- `episodes_per_second`;
- `used_partner_info_rate` (interval `used_partner_info_*`), only for envs that report
  `infos[agent]["used_partner_info"]` (private-information tasks, `comlrl_env.info_flow`): the share of
  agent-answers that contain the partner's private part; a lucky guess counts too, so
  `used_partner_info_chance` (the task's `metadata["partner_info_chance"]`, where it states one) is the rate
  that answers reach without the partner's message, in the column beside it.

Each rate (success, pass@k, invalid actions, used partner info) has the Wilson score interval at the effective
sample size of its per-task counts, which never collapses at 0 or 1 (8 failures of 8: [0, 0.32]).
`results.md` opens with this (`INTERVAL`), and its team table names the teams whose intervals overlap.

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
import numpy as np
from tqdm.auto import tqdm

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.info_flow import episode_record, partner_info_chance, used_partner_info_rate, write_records
from comlrl_env.intervals import Interval, bounded_interval, mean_interval, rate_interval
from comlrl_env.policies import FixedPolicy
from comlrl_env.registry import make
from comlrl_env.suites import suites

__all__ = ["Episodes", "Policy", "empty_policy", "evaluate_policy", "fixed_team", "instance_order", "interval_header",
           "markdown_table", "play_episodes", "run_suite", "scripted_policies", "seated", "team_table"]

Policy = Callable[[list[dict[AgentID, str]], list[TextParallelEnv]], list[dict[AgentID, str]]]
"""A batched policy, `policy(observations, envs) -> actions`: one `{agent: observation}` dict per live episode
in, one `{agent: action text}` dict per episode out; `envs` are the live environments (for scripted players
that read the task; a model-backed policy such as `AgentPolicy` ignores them)."""
METRICS = ("reward_mean", "success_rate", "invalid_action_rate", "tokens_per_episode", "episodes_per_second")
OPTIONAL_METRICS = ("used_partner_info_rate", "used_partner_info_chance")  # columns only where some row has them
INTERVAL_KEYS = {"reward_mean": "reward", "used_partner_info_rate": "used_partner_info"}  # else the metric's
ORDER = ("a finite task set's instances are drawn in a shuffle seeded by {seed} (every instance once when there are "
         "as many episodes as instances), a procedural env's are reset seeds {seed}, {seed} + 1, ....")
INTERVAL = ("95% intervals over task instances (the k samples of a task are one unit, so repeats do not "
            "narrow them): a reward's is the t interval over per-task means (t quantile, tasks - 1 degrees of "
            "freedom; infinite for one task); a 0/1 reward's and each rate's (success, pass@k, invalid actions, "
            "used partner info) is the Wilson score interval at the effective sample size of the per-task counts "
            "(between the tasks and the trials; the tasks at a rate of 0 or 1).")


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
    invalid_per_episode: list[int] = dataclasses.field(default_factory=list)  # flagged actions, all agents
    actions_per_episode: list[int] = dataclasses.field(default_factory=list)  # actions taken, all agents
    # each episode's task instance: its index in a finite task set, else i (reset seed `seed + i`)
    instances: list[int] = dataclasses.field(default_factory=list)


def instance_order(num_tasks: int, episodes: int, seed: int) -> list[int]:
    """The task instances of `episodes` episodes on a set of `num_tasks`: a permutation of 0..num_tasks-1 seeded
    by `seed`, repeated as often as needed, cut at `episodes` (so every instance once when they are equal)."""
    order = np.random.default_rng(seed).permutation(num_tasks)
    return [int(order[i % num_tasks]) for i in range(episodes)]


def play_episodes(env: TextParallelEnv, policy: Policy, episodes: int, seed: int = 0,
                  samples_per_task: int = 1) -> Episodes:
    """Play `episodes` task instances of `env` (a finite task set's `instance_order(num_tasks, episodes, seed)`,
    else reset seeds `seed + i`), each `samples_per_task` times, with `policy` in lockstep: one call per turn
    for the batch. Episode `j * episodes + i` is sample j of the i-th instance, with reset seed `seed + i`
    for every j, so the k samples differ only by the policy's (and a bot's) own randomness, on procedural
    envs too. `Episodes.instances` says which instance each episode played."""
    if episodes < 1 or samples_per_task < 1:
        raise ValueError(f"episodes and samples_per_task must be >= 1, got {episodes} and {samples_per_task}.")
    live: list[TextParallelEnv] = []
    observations: list[dict[AgentID, str]] = []
    agents = list(env.possible_agents)
    finite = env.num_tasks is not None
    instances = instance_order(env.num_tasks, episodes, seed) if finite else list(range(episodes))
    for j in range(samples_per_task):
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i, options={"task_index": instances[i]} if finite else None)
            live.append(env.clone())
            observations.append(obs)
    returns = [dict.fromkeys(e.possible_agents, 0.0) for e in live]
    forfeited: list[list[AgentID]] = [[] for _ in live]
    owner = list(range(len(live)))
    invalid, taken = dict.fromkeys(agents, 0), dict.fromkeys(agents, 0)
    invalid_per_episode, actions_per_episode = [0] * len(live), [0] * len(live)
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    while live:
        actions = policy(observations, live)
        next_live, next_obs, next_owner = [], [], []
        for copy, act, k in zip(live, actions, owner):
            for agent in copy.to_move():  # a waiting agent's text is ignored: not an action
                taken[agent] += 1
                actions_per_episode[k] += 1
            obs, rew, term, trunc, infos = copy.step(act)
            for agent, r in rew.items():
                returns[k][agent] += r
            for agent in act:
                invalid[agent] += "invalid_action" in infos.get(agent, {})
                invalid_per_episode[k] += "invalid_action" in infos.get(agent, {})
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
    return Episodes(returns, forfeited, invalid, taken, time.perf_counter() - start, records, invalid_per_episode,
                    actions_per_episode, instances * samples_per_task)


def evaluate_policy(env: str | TextParallelEnv, policy: Policy, episodes: int, seed: int = 0,
                    samples_per_task: int = 1, episodes_path: str | None = None) -> dict[str, float]:
    """Play `episodes` task instances of `env`, each `samples_per_task` times, with `policy` in lockstep
    (`play_episodes`); return the metrics of the module docstring, with intervals over task instances (a
    finite task set's seeded shuffle, `instance_order`, else reset seeds `seed + i`). With `episodes_path`, write the
    per-episode info-flow rows there as JSONL (an env that reports no `used_partner_info` writes no file).

    Args:
        env: An env id (built with `make`) or an env instance.
        policy: A batched policy, `policy(observations, envs) -> actions` (see `Policy`), e.g. an `AgentPolicy`.
        episodes: Task instances to play (N).
        seed: Seeds the instance order and the reset seeds.
        samples_per_task: Episodes per task instance (k), with the same instance and reset seed.
        episodes_path: A JSONL file for the per-episode info-flow rows; None writes none.

    Returns:
        `{metric: value}`: `reward_mean` and its interval, `episodes`, `tasks`, `invalid_action_rate`,
        `return_<agent>`, `episodes_per_second`, and the optional metrics of the module docstring.
    """
    template = make(env) if isinstance(env, str) else env
    tokens_before = getattr(policy, "tokens_generated", None)
    played_episodes = play_episodes(template, policy, episodes, seed, samples_per_task)
    returns, seconds = played_episodes.returns, played_episodes.seconds
    played = len(returns)
    # each episode's task, numbered 0..tasks-1 (the per-task sums below have no empty task)
    task = np.unique(played_episodes.instances, return_inverse=True)[1].reshape(-1)
    per_task = lambda x: np.bincount(task, weights=np.asarray(x, dtype=float))  # noqa: E731
    counts = per_task(np.ones(played))
    per_episode = np.array([sum(r.values()) / len(r) for r in returns])
    reward, no_spread = reward_interval(template, per_episode, per_task, counts)
    metrics = {
        "reward_mean": float(reward.estimate),
        "reward_std": float(per_episode.std(ddof=1)) if played > 1 else 0.0,
        **_bounds("reward", reward),
        "episodes": float(played),
        "tasks": float((counts > 0).sum()),
        "invalid_action_rate": sum(played_episodes.invalid.values()) / max(sum(played_episodes.actions.values()), 1),
        **{f"return_{agent}": sum(r[agent] for r in returns) / played for agent in template.possible_agents},
        "episodes_per_second": played / max(seconds, 1e-9),
    }
    if no_spread:
        metrics["reward_no_spread"] = 1.0
    if sum(played_episodes.actions_per_episode):
        metrics.update(_bounds("invalid_action_rate", rate_interval(per_task(played_episodes.invalid_per_episode),
                                                                    per_task(played_episodes.actions_per_episode))))
    threshold = template.metadata.get("success_threshold")
    if threshold is not None:
        success = per_episode >= threshold
        metrics["success_rate"] = float(success.mean())
        metrics.update(_bounds("success_rate", rate_interval(per_task(success), counts)))
        if samples_per_task > 1:
            passed = success.reshape(samples_per_task, episodes).any(0)  # per instance: a success in its k
            at_k = rate_interval(np.bincount(task[:episodes], weights=passed.astype(float)),
                                 np.bincount(task[:episodes]))
            metrics["pass_at_k"] = float(at_k.estimate)
            metrics.update(_bounds("pass_at_k", at_k))
    if tokens_before is not None:
        metrics["tokens_per_episode"] = (policy.tokens_generated - tokens_before) / played
    flow = used_partner_info_rate(played_episodes.records, task=lambda row: int(task[row["episode"]]))
    if flow is not None:
        metrics["used_partner_info_rate"] = float(flow.estimate)
        metrics.update(_bounds("used_partner_info", flow))
        if partner_info_chance(template) is not None:
            metrics["used_partner_info_chance"] = partner_info_chance(template)
        if episodes_path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(episodes_path)), exist_ok=True)
            write_records(episodes_path, played_episodes.records)
    return metrics


def reward_interval(env: TextParallelEnv, per_episode: np.ndarray, per_task: Callable[[Any], np.ndarray],
                    counts: np.ndarray) -> tuple[Interval, bool]:
    """The 95% interval of `reward_mean` and whether it rests on no observed spread, by what the task declares
    (never by the rewards seen: a 0-or-100 reward that happened to score 0 every time is not a 0/1 rate).

    - `metadata["binary_reward"]`: every episode's reward is 0 or 1, a rate: Wilson's interval
      (`comlrl_env.intervals.rate_interval`);
    - `metadata["reward_range"] = (a, b)`: the t interval over tasks, with a bounded width where the tasks
      showed no spread (`comlrl_env.intervals.bounded_interval`);
    - neither: the t interval; where the tasks showed no spread it is infinite and `reward_no_spread` is set
      (the table says "no spread observed"), never 0 wide.
    """
    name = env.metadata.get("name", type(env).__name__)
    if env.metadata.get("binary_reward", False):
        if not np.isin(per_episode, (0.0, 1.0)).all():
            odd = sorted(set(per_episode[~np.isin(per_episode, (0.0, 1.0))].tolist()))[:3]
            raise ValueError(f"{name} declares metadata['binary_reward'] = True, but episodes scored {odd}; "
                             "declare reward_range=(low, high) instead, or pay 0 or 1 per episode.")
        return rate_interval(per_task(per_episode), counts), False
    sums, reward_range = per_task(per_episode), env.metadata.get("reward_range")
    if reward_range is not None:
        return bounded_interval(sums, counts, reward_range), False
    interval = mean_interval(sums, counts)
    if len(sums) > 1 and float(interval.high - interval.low) == 0.0:
        return Interval(interval.estimate, -math.inf, math.inf), True
    return interval, False


def _bounds(name: str, interval: Interval) -> dict[str, float]:
    """`<name>_low`, `<name>_high` and `<name>_ci95`, the larger side (`estimate ± ci95` holds the interval)."""
    return {f"{name}_ci95": float(interval.half_width), f"{name}_low": float(interval.low),
            f"{name}_high": float(interval.high)}


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

    Returns and writes to `out_dir` `results.json` (`metadata`, e.g. the settings, agents and versions,
    `interval`: how the intervals are made, then `rows`: one per env and team), `results.md` (that method,
    then the mean reward and its 95% interval per team side by side with the teams it cannot tell apart, then
    every metric) and `results.png` (the same means with their intervals). With `record_episodes` (and
    `out_dir`), each (env, team) whose env reports `used_partner_info` also writes its per-episode rows to
    `out_dir/episodes/<env>__<team>.jsonl` (`/` in names written as `_`).

    Args:
        suite: A suite name (a key of `comlrl_env.suites.suites`), or env ids and env instances.
        policies: `{team name: policy}`; each policy is a batched `Policy`, e.g. an `AgentPolicy`.
        episodes: Task instances per env (N); see `evaluate_policy`.
        out_dir: Where to write `results.json`, `results.md` and `results.png`; None writes nothing.
        seed: Seeds the instance order and the reset seeds, the same for every team.
        scripted: Add the scripted reference rows: `empty`, `canonical` and each env's `reference_bots()`.
        samples_per_task: Episodes per task instance (k).
        metadata: Keys added to the result and `results.json` (e.g. the agents, settings and versions).
        record_episodes: With `out_dir`, write the per-episode info-flow rows of each (env, team).
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
               "samples_per_task": samples_per_task, "seed": seed, "interval": INTERVAL, "rows": rows}
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, default=str)
        with open(os.path.join(out_dir, "results.md"), "w", encoding="utf-8") as f:
            f.write(interval_header(results) + "\n" + team_table(rows) + "\n" + markdown_table(rows))
        _chart(rows, os.path.join(out_dir, "results.png"), _title(results))
    return results


def interval_header(results: dict[str, Any]) -> str:
    """What the tables' intervals are: their unit (task instances) and method, for the top of the output."""
    return (f"{results['episodes']} task instances per env, each played {results['samples_per_task']} time(s): "
            f"{ORDER.format(seed=results['seed'])} {INTERVAL}\n")


def _cell(row: dict[str, Any], metric: str) -> str:
    """`mean ± half-width` for a symmetric interval, `mean [low, high]` for another (Wilson's), else `mean`."""
    key = INTERVAL_KEYS.get(metric, metric)
    if f"{key}_low" not in row:
        return f"{row[metric]:.3f}"
    mean, low, high = row[metric], row[f"{key}_low"], row[f"{key}_high"]
    if metric == "reward_mean" and row.get("reward_no_spread"):
        return f"{mean:.3f} (no spread observed)"
    if np.isclose(mean - low, high - mean):
        return f"{mean:.3f} ± {high - mean:.3f}"
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def team_table(rows: list[dict[str, Any]]) -> str:
    """One line per env, one column per team: mean reward and its 95% interval; the last column names the
    teams whose intervals overlap, which this many tasks cannot tell apart."""
    teams = list(dict.fromkeys(r["team"] for r in rows))
    lines = ["| env | " + " | ".join(teams) + " | not told apart (intervals overlap) |",
             "|---|" + "---|" * (len(teams) + 1)]
    for env in dict.fromkeys(r["env"] for r in rows):
        mine = {r["team"]: r for r in rows if r["env"] == env}
        cells = [_cell(mine[t], "reward_mean") if t in mine else "-" for t in teams]
        close = [f"{a} ~ {b}" for i, a in enumerate(mine) for b in list(mine)[i + 1:]
                 if mine[a]["reward_low"] <= mine[b]["reward_high"] and mine[b]["reward_low"] <= mine[a]["reward_high"]]
        lines.append(f"| {env} | " + " | ".join(cells) + f" | {', '.join(close) or '-'} |")
    return "\n".join(lines) + "\n"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One line per (env, team); a rate with an interval shows it as `rate [low, high]`; '-' where a metric is
    not defined."""
    optional = [m for m in OPTIONAL_METRICS if any(m in r for r in rows)]
    metrics = ("reward_mean", "episodes", "tasks", *METRICS[1:], *optional)
    lines = ["| env | policy | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for r in rows:
        cells = [_cell(r, m) if m in r else "-" for m in metrics]
        lines.append(f"| {r['env']} | {r['team']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _title(results: dict[str, Any]) -> str:
    settings = results.get("settings") or {}
    shown = ", ".join(f"{k}={v}" for k, v in settings.items() if v is not None)
    return f"mean reward, 95% interval over tasks, {results['episodes']} tasks x {results['samples_per_task']}" + (
        f"\n{shown}" if shown else "")


def _error_bars(rows: list[dict[str, Any] | None]) -> np.ndarray:
    """(2, n) distances from each mean down to its low and up to its high (0 where infinite: one task)."""
    bars = np.array([[r["reward_mean"] - r["reward_low"], r["reward_high"] - r["reward_mean"]] if r else [0, 0]
                     for r in rows], dtype=float).T
    return np.where(np.isfinite(bars), bars, 0.0)


def _chart(rows: list[dict[str, Any]], path: str, title: str) -> None:
    envs = list(dict.fromkeys(r["env"] for r in rows))
    names = list(dict.fromkeys(r["team"] for r in rows))
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(envs)), 4.2))
    for j, name in enumerate(names):
        picked = [next((r for r in rows if r["env"] == e and r["team"] == name), None) for e in envs]
        ax.bar([i + j * width for i in range(len(envs))], [r["reward_mean"] if r else 0.0 for r in picked], width,
               yerr=_error_bars(picked), capsize=3, label=name)
    ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(envs))])
    ax.set_xticklabels(envs, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("mean reward")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
