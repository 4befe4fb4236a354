"""`check_task`: does a task's reward mean what it says? Agents learn whatever a reward pays for.

Three invariants, played on real episodes:

1. **Doing nothing earns nothing.** Degenerate policies earn at most 0 per episode, for every agent:
   `empty` (""), `babble` (random lowercase words: no digits, no punctuation), `echo` (each agent
   answers its own observation) and `repeat` (each agent answers a teammate's last answer, or its
   observation on the first turn).
2. **A better answer never earns less.** A good policy, when given, returns at least as much as
   each degenerate policy, for every agent, on the same task instance.
3. **Solving sooner never returns less.** On multi-turn tasks, the good policy from the first turn
   returns at least as much as the same policy after one `empty` turn.

    from comlrl_env.testing import check_task
    check_task("coop/GuessNumber-v1", good_policy=lambda env, obs: {a: str(env.task["target"]) for a in obs})

A policy is `policy(env, observations) -> actions` (it may read the env, e.g. a task's answer, so a
test can script the good play). Returns are undiscounted sums of each agent's rewards.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.registry import make

__all__ = ["DEGENERATE_POLICIES", "TaskCheckError", "check_task"]

Policy = Callable[[TextParallelEnv, dict[AgentID, str]], dict[AgentID, str]]


class TaskCheckError(AssertionError):
    """A task whose reward breaks an invariant; the message lists every violation with its episode."""


def _empty(env: TextParallelEnv, obs: dict[AgentID, str]) -> dict[AgentID, str]:
    return {a: "" for a in obs}


def _echo(env: TextParallelEnv, obs: dict[AgentID, str]) -> dict[AgentID, str]:
    return dict(obs)


def _repeat(env: TextParallelEnv, obs: dict[AgentID, str]) -> dict[AgentID, str]:
    agents = list(obs)
    out = {}
    for i, agent in enumerate(agents):
        other = agents[(i + 1) % len(agents)]
        history = env.response_history.get(other) or []
        out[agent] = history[-1] if history else obs[other]
    return out


def _babble(seed: int) -> Policy:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))

    def babble(env: TextParallelEnv, obs: dict[AgentID, str]) -> dict[AgentID, str]:
        def words() -> str:
            return " ".join("".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(rng.integers(3, 13)))
        return {a: words() for a in obs}

    return babble


DEGENERATE_POLICIES: dict[str, Callable[[int], Policy]] = {
    "empty": lambda seed: _empty,
    "babble": _babble,
    "echo": lambda seed: _echo,
    "repeat": lambda seed: _repeat,
}
"""Name -> factory(seed) of each degenerate policy `check_task` plays."""


def check_task(
    env: TextParallelEnv | str,
    good_policy: Policy | None = None,
    episodes: int = 6,
    seed: int = 0,
    **env_kwargs: Any,
) -> dict[str, float]:
    """Play the degenerate policies (and `good_policy`) on `episodes` task instances; check the invariants.

    Args:
        env: A `TextParallelEnv` or a registered id (built with `env_kwargs`).
        good_policy: `policy(env, observations) -> actions` that solves the task, or None to check only
            that doing nothing earns nothing.
        episodes: Task instances played by each policy (instances 0.. of a finite task, seeds 0.. of a
            procedural one).
        seed: Seed of the resets and of the babble.

    Returns:
        The mean episode return (over agents and episodes) of each policy, by name.
    Raises:
        TaskCheckError: listing every violation, each with the policy, the task instance, the returns
            and the actions of its first turn.
    """
    env = make(env, **env_kwargs) if isinstance(env, str) else env
    name = env.metadata.get("name", type(env).__name__)
    policies = {key: factory(seed) for key, factory in DEGENERATE_POLICIES.items()}
    violations: list[str] = []
    means: dict[str, float] = {}
    played: dict[str, list[dict[AgentID, float]]] = {}
    instances = list(range(min(episodes, env.num_tasks))) if env.num_tasks else [None] * episodes
    for label, policy in [*policies.items(), *([("good", good_policy)] if good_policy else [])]:
        returns = []
        for e, index in enumerate(instances):
            total, first = _play(env, policy, seed + e, index)
            returns.append(total)
            where = f"task_index={index}" if index is not None else f"seed={seed + e}"
            if label != "good" and any(v > 1e-9 for v in total.values()):
                violations.append(f"doing nothing earns nothing: policy {label!r} returned {_fmt(total)} on "
                                  f"{where}; first actions {_short(first)}")
        played[label] = returns
        means[label] = float(np.mean([v for r in returns for v in r.values()]))
    if good_policy is not None:
        good_returns = played["good"]
        for label in DEGENERATE_POLICIES:
            for e, (bad, good) in enumerate(zip(played[label], good_returns)):
                worse = [a for a in good if good[a] < bad[a] - 1e-9]
                if worse:
                    violations.append(f"a better answer never earns less: the good policy returned {_fmt(good)} "
                                      f"but {label!r} {_fmt(bad)} on instance {instances[e]}")
        if env.num_turns > 1:
            for e, index in enumerate(instances):
                late, _ = _play(env, good_policy, seed + e, index, delay=1)
                if any(late[a] > good_returns[e][a] + 1e-9 for a in late):
                    violations.append(f"solving sooner never returns less: the good policy returned "
                                      f"{_fmt(good_returns[e])} from the first turn but {_fmt(late)} after one "
                                      f"empty turn on instance {index}")
    if violations:
        raise TaskCheckError(f"{name}: {len(violations)} violation(s):\n- " + "\n- ".join(violations))
    return means


def _play(env: TextParallelEnv, policy: Policy, seed: int, task_index: int | None,
          delay: int = 0) -> tuple[dict[AgentID, float], dict[AgentID, str]]:
    """One episode: each agent's undiscounted return, and the first turn's actions."""
    obs, _ = env.reset(seed=seed, options=None if task_index is None else {"task_index": task_index})
    total = {a: 0.0 for a in env.possible_agents}
    first: dict[AgentID, str] = {}
    turn = 0
    while env.agents:
        actions = _empty(env, obs) if turn < delay else policy(env, obs)
        first = first or dict(actions)
        obs, rewards, _, _, _ = env.step(actions)
        for a, r in rewards.items():
            total[a] += r
        turn += 1
    return total, first


def _fmt(returns: dict[AgentID, float]) -> str:
    return "{" + ", ".join(f"{a}: {v:.3f}" for a, v in returns.items()) + "}"


def _short(actions: dict[AgentID, str], limit: int = 60) -> str:
    return "{" + ", ".join(f"{a}: {t[:limit]!r}" for a, t in actions.items()) + "}"
