"""Fixed seats under the rollout's contract: a bot, a scripted player or a frozen model must return one text
per env and sample from `act()`. The engine asks them through `fixed_act` and checks what they return with
`check_fixed_actions`; `check_fixed_seats` asks each once when a learner is built, before any model loads, so a
seat that raises or returns too few texts is reported then, not at the first rollout.
"""

from __future__ import annotations

import copy
from typing import Any

from comlrl_env.base import TextParallelEnv
from comlrl_env.policies import FixedPolicy

__all__ = ["check_fixed_actions", "check_fixed_seats", "fixed_act", "policy_label"]

PROBE_ENVS = 2
"""Env copies (and samples per env) a fixed seat is asked about at construction: two of each, so a policy that
returns one text per call, or per env, is caught."""


def check_fixed_seats(env: TextParallelEnv, fixed: dict[int, FixedPolicy], seed: int, max_steps: int = 64) -> None:
    """Ask each seat of `fixed` to act once, where it first moves in `env` reset at `seed`, on `PROBE_ENVS` copies
    with `PROBE_ENVS` samples each, and raise what the rollout would raise (naming the seat) if it fails.

    Seats reach their first move by stepping a copy of the env: fixed seats play their own texts, trained seats
    the env's first legal action (`env.legal_actions`, where the env lists them), else an empty answer. A seat
    that is not reached so (the episode ends first) is checked at the first rollout instead. The seats asked
    are copies, so a bot's random generator is left as it was.
    """
    agents = env.possible_agents
    fixed = {seat: _spare(policy) for seat, policy in fixed.items()}
    for seat, policy in fixed.items():
        agent, node = agents[seat], env.clone()
        node.reset(seed=seed)
        for _ in range(max_steps):
            movers = node.to_move() if node.agents else []
            if agent in movers or not movers:
                break
            actions = {}
            for mover in movers:
                other = agents.index(mover)
                if other in fixed:
                    acted = fixed_act(fixed[other], [node], mover, 1)
                    check_fixed_actions(fixed[other], mover, acted, 1, 1)
                    actions[mover] = acted[0]
                else:  # a trained seat: a legal move where the env lists them, else an empty answer
                    legal = node.legal_actions(mover) if callable(getattr(node, "legal_actions", None)) else []
                    actions[mover] = legal[0] if legal else ""
            node.step(actions)
        if agent not in (node.to_move() if node.agents else []):
            continue
        copies = [node] + [node.clone() for _ in range(PROBE_ENVS - 1)]
        acted = fixed_act(policy, copies, agent, PROBE_ENVS)
        check_fixed_actions(policy, agent, acted, PROBE_ENVS, PROBE_ENVS)


def _spare(policy: FixedPolicy) -> FixedPolicy:
    """A copy of `policy` to ask, so the probe leaves its state (a bot's random generator) as it was; the policy
    itself when it cannot be copied."""
    try:
        return copy.deepcopy(policy)
    except Exception:  # e.g. a handle to a native object: asking the original is the best left
        return policy


def fixed_act(policy: FixedPolicy, envs: list[Any], agent: str, per_node: int) -> Any:
    """`policy.act(envs, agent, per_node)`; an exception it raises is re-raised as a RuntimeError naming the seat
    and the policy, the original chained (`raise ... from`)."""
    try:
        return policy.act(envs, agent, per_node)
    except Exception as exc:
        raise RuntimeError(f"the fixed policy of seat {agent!r} ({policy_label(policy)}) raised in act(): "
                           f"{type(exc).__name__}: {exc}") from exc


def policy_label(policy: FixedPolicy) -> str:
    """The policy's class and `describe()`, for a message (its class alone when `describe()` fails)."""
    try:
        return f"{type(policy).__name__} {policy.describe()}"
    except Exception:  # a describe() that fails must not hide the real error
        return type(policy).__name__


def check_fixed_actions(policy: FixedPolicy, agent: str, acted: Any, num_envs: int, per_node: int) -> None:
    """Raise, naming the seat and what was wrong, unless the fixed policy `policy` of seat `agent` returned
    what `FixedPolicy.act` promises: a list of `num_envs * per_node` strings (env-major)."""
    expected = f"one str per env and sample, env-major: {num_envs} x {per_node} = {num_envs * per_node}"
    if not isinstance(acted, (list, tuple)):
        error, problem = TypeError, f"returned {type(acted).__name__} from act(); it must return a list of {expected}"
    elif len(acted) != num_envs * per_node:
        error, problem = ValueError, f"returned {len(acted)} texts from act(); it must return {expected}"
    else:
        bad = next((i for i, text in enumerate(acted) if not isinstance(text, str)), None)
        if bad is None:
            return
        error, problem = TypeError, f"returned a {type(acted[bad]).__name__} as text {bad} from act(); every action " \
                                    "must be a str"
    raise error(f"the fixed policy of seat {agent!r} ({policy_label(policy)}) {problem}.")
