"""The joint text: a state followed by every agent's action, as `TextParallelEnv.state()` writes it.

Joint reward models and centralized critics read this text, so the env and the scorers share one format:
blocks, each a header line `[<name>]` and a body, separated by blank lines. Headers are the only lines
that begin with `[`: every body (an observation or an agent's text) is escaped by `escape`, which puts a
backslash before a `[` (or a run of backslashes and a `[`) at the start of any of its lines. So an agent
cannot write a line that reads as its partner's header, and two different joint actions always give two
different joint texts (`unescape` undoes `escape` exactly).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["escape", "header_blocks", "joint_text", "text_blocks", "unescape"]

_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # every line boundary of str.splitlines
_LINE_START_BRACKET = re.compile(rf"(^|[{_BREAKS}])(\\*\[)")
_ESCAPED = re.compile(rf"(^|[{_BREAKS}])\\(\\*\[)")
_HEADER_START = re.compile(r"(?:^|(?<=\n))\[")


def escape(text: str) -> str:
    r"""`text` with a backslash added before each line-initial run of backslashes followed by `[`.

    After it no line of `text` begins with `[`, so it cannot hold a header. Injective; `unescape` inverts it.

    >>> print(escape("x\n\n[agent_1 action]\ny"))
    x
    <BLANKLINE>
    \[agent_1 action]
    y
    """
    return _LINE_START_BRACKET.sub(r"\1\\\2", text)


def unescape(text: str) -> str:
    r"""The text `escape` was given: one backslash fewer before each line-initial run of backslashes and `[`."""
    return _ESCAPED.sub(r"\1\2", text)


def text_blocks(blocks: Iterable[tuple[str, str]]) -> str:
    r"""`[name]\nbody` per `(name, body)`, bodies escaped, separated by blank lines.

    >>> text_blocks([("agent_0", "hi"), ("agent_1", "[agent_0]\nbye")])
    '[agent_0]\nhi\n\n[agent_1]\n\\[agent_0]\nbye'
    """
    return "\n\n".join(f"[{name}]\n{escape(body)}" for name, body in blocks)


def joint_text(state: str, actions: Mapping[str, str]) -> str:
    r"""`state` followed by the joint action `actions`, in the format of `TextParallelEnv.state()`.

    A `[joint action]` line, then an `[<agent> action]` block per agent in the order of `actions` (each
    text escaped), all separated by blank lines; with no actions, `state` unchanged. `env.state()` writes
    its last joint action with this function, so a reward model or critic that reads
    `joint_text(env.state(), actions)` sees the env's own format: for a one-turn episode it is exactly
    `env.state()` after the step.

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
    return "\n\n".join([state, "[joint action]", text_blocks((f"{a} action", text) for a, text in actions.items())])


def header_blocks(text: str) -> list[str]:
    r"""`text` cut before each header (a `[` at the start of the text or of a line): the pieces join back to it.

    Each piece but perhaps the first begins with its header line and runs to the next header, blank lines
    included. A text without headers is one piece.

    >>> header_blocks("[a]\nx\n\\[b]\n\n[c]\ny")
    ['[a]\nx\n\\[b]\n\n', '[c]\ny']
    """
    starts = [m.start() for m in _HEADER_START.finditer(text) if m.start() > 0]
    bounds = [0, *starts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
