"""`check_task`: does a task's reward mean what it says? Agents learn whatever a reward pays for.

Three invariants, played on real episodes:

1. **Doing nothing earns nothing.** Degenerate policies earn at most 0 per episode, for every agent:
   `empty` (""), `babble` (random lowercase words: no digits, no punctuation), `echo` (each agent
   answers its own observation) and `repeat` (each agent answers a teammate's last answer, or its
   observation on the first turn). A task that has a `stub_actions()` method (its answer format with
   nothing in it; the code tasks: the prompt's signature with `pass`) also plays `stub`, every turn.
   A code task, one that also names the function it asks for in `env.entry_point`, plays `copy
   feedback` too: the stub, plus a lookup table of every `entry_point(args) -> value` the
   observations showed after the first turn (`rewards.docstring_examples.stated_calls`: "f(1) == 2",
   "f(1): expected 2", ...), grown over the turns. Feedback that a table can turn into a pass pays it.
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

import os
from typing import Any, Callable

import numpy as np

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.registry import make
from rewards.docstring_examples import stated_calls
from rewards.plain_data import literal
from rewards.text import extract_code

__all__ = [
    "ANSWER_FORMAT_POLICIES", "DEGENERATE_POLICIES", "TaskCheckError", "check_task", "degenerate_policies",
]

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


def _stub(env: TextParallelEnv, obs: dict[AgentID, str]) -> dict[AgentID, str]:
    stub = env.stub_actions()
    return {a: stub[a] for a in obs}


def _copy_feedback(seed: int) -> Policy:
    """The stub, with the entry point answering from a table of every call and value shown after turn 0."""
    first: dict[AgentID, str] = {}
    table: dict[str, object] = {}

    def copy(env: TextParallelEnv, obs: dict[AgentID, str]) -> dict[AgentID, str]:
        entry = env.entry_point
        if env.turn == 0:
            first.clear()
            first.update(obs)
            table.clear()
        for agent, text in obs.items():
            shown = text[len(os.path.commonprefix([first.get(agent, ""), text])):]  # what this turn added
            for args, kwargs, value in stated_calls(shown, entry):
                table[repr((args, kwargs))] = value
        rows = "".join(f"    {key!r}: {literal(value)},\n" for key, value in table.items())
        lookup = (f"\n_COPIED = {{\n{rows}}}\n_stub_{entry} = {entry}\n\n\ndef {entry}(*args, **kwargs):\n"
                  f"    key = repr((args, kwargs))\n    if key in _COPIED:\n        return _COPIED[key]\n"
                  f"    return _stub_{entry}(*args, **kwargs)\n")
        stub = _stub(env, obs)
        out = {}
        for agent, answer in stub.items():
            code = extract_code([answer])[0]
            out[agent] = f"```python\n{code}{lookup}```" if f"def {entry}(" in code else answer
        return out

    return copy


DEGENERATE_POLICIES: dict[str, Callable[[int], Policy]] = {
    "empty": lambda seed: _empty,
    "babble": _babble,
    "echo": lambda seed: _echo,
    "repeat": lambda seed: _repeat,
}
"""Name -> factory(seed) of each degenerate policy `check_task` plays on every task."""

ANSWER_FORMAT_POLICIES: dict[str, Callable[[int], Policy]] = {
    "stub": lambda seed: _stub,
    "copy feedback": _copy_feedback,
}
"""Name -> factory(seed) of the policies played on tasks with `stub_actions()` ("copy feedback": and `entry_point`)."""


def degenerate_policies(env: TextParallelEnv, seed: int = 0) -> dict[str, Policy]:
    """The policies that do nothing which `check_task` plays on `env`, by name (the module docstring lists them)."""
    policies = {key: factory(seed) for key, factory in DEGENERATE_POLICIES.items()}
    if callable(getattr(env, "stub_actions", None)):
        policies["stub"] = ANSWER_FORMAT_POLICIES["stub"](seed)
        if getattr(type(env), "entry_point", None) is not None:  # read per episode: a property of the task
            policies["copy feedback"] = ANSWER_FORMAT_POLICIES["copy feedback"](seed)
    return policies


def check_task(
    env: TextParallelEnv | str,
    good_policy: Policy | None = None,
    episodes: int = 6,
    seed: int = 0,
    **env_kwargs: Any,
) -> dict[str, float]:
    """Play the degenerate policies (`degenerate_policies(env)`, and `good_policy`) on `episodes` task instances.

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
    policies = degenerate_policies(env, seed)
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
        for label in policies:
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
