"""The joint text: a state followed by every agent's action, as `TextParallelEnv.state()` writes it.

Joint reward models and centralized critics read this text, so the env and the scorers share one format.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["joint_text"]


def joint_text(state: str, actions: Mapping[str, str]) -> str:
    r"""`state` followed by the joint action `actions`, in the format of `TextParallelEnv.state()`.

    A `[joint action]` line, then an `[<agent> action]` block per agent in the order of `actions`, all
    separated by blank lines; with no actions, `state` unchanged. `env.state()` writes its last joint
    action with this function, so a reward model or critic that reads `joint_text(env.state(), actions)`
    sees the env's own format: for a one-turn episode it is exactly `env.state()` after the step.

    >>> print(joint_text("[agent_0]\nSay hi.\n\n[agent_1]\nSay bye.", {"agent_0": "hi", "agent_1": "bye"}))
    [agent_0]
    Say hi.
    <BLANKLINE>
    [agent_1]
    Say bye.
    <BLANKLINE>
    [joint action]
    <BLANKLINE>
    [agent_0 action]
    hi
    <BLANKLINE>
    [agent_1 action]
    bye
    """
    if not actions:
        return state
    return "\n\n".join([state, "[joint action]", *(f"[{a} action]\n{text}" for a, text in actions.items())])
