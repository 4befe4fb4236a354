"""What `check_env` plays and how it compares runs: scripted and gibberish actions, and the first difference."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from comlrl_env.base import AgentID

__all__ = ["GIBBERISH", "first_difference", "gibberish", "scripted", "short_repr"]

#: Hostile actions a model may write: (description, text).
GIBBERISH: tuple[tuple[str, str], ...] = (
    ("empty string", ""),
    ("whitespace only", " \n\t \r\n "),
    ("control characters", "\x00\x07\x1b[31m\x08\x7f\x1b[0m"),
    ("emoji", "🙂🚀👩\u200d👩\u200d👧 🏳️\u200d🌈"),
    ("20,000 characters", ("lorem ipsum 42 " * 1334)[:20_000]),
    ("code fences", "```python\nprint('hi')\n```\n```\nunclosed"),
    ("tag soup", "<answer><answer></x>"),
    ("right-to-left text", "\u202eمرحبا بالعالم שלום\u202c"),
    ("brackets and json", '[answer] [/answer] {"answer": } ]]'),
    ("numeric junk", "-1e309 NaN inf 0x1F 1/0"),
    ("combining and zero-width", "e\u0301\u200b\ufeff\u0000"),
)

# Plausible model answers used for the scripted episodes.
_SCRIPT = (
    "Hello, world!",
    "The answer is 42.",
    "def f(x):\n    return x + 1\n",
    "I agree with the other agent; let's finish.",
    "[answer] 7 [/answer]",
    "yes",
)


def scripted(turn: int, agents: list[AgentID]) -> dict[AgentID, str]:
    """Plausible answers for turn `turn`, a different one per agent."""
    return {a: _SCRIPT[(turn + i) % len(_SCRIPT)] for i, a in enumerate(agents)}


def gibberish(turn: int, agents: list[AgentID]) -> dict[AgentID, str]:
    """`GIBBERISH` texts for turn `turn`, a different kind per agent."""
    return {a: GIBBERISH[(turn + i) % len(GIBBERISH)][1] for i, a in enumerate(agents)}


def short_repr(value: Any, limit: int = 120) -> str:
    """`repr(value)` cut to `limit` characters for a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 15] + f"... ({len(text)} chars)"


def first_difference(a: Any, b: Any, path: str) -> str | None:
    """Where `a` and `b` first differ, or None when they are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{path} has keys {sorted(map(str, a))} vs {sorted(map(str, b))}"
        for key in a:
            found = first_difference(a[key], b[key], f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{path} has length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        try:
            same = np.array_equal(a, b, equal_nan=True)
        except TypeError:
            same = np.array_equal(a, b)
        return None if same else f"{path}: {short_repr(a)} vs {short_repr(b)}"
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    try:
        same = bool(a == b)
    except Exception:  # objects whose == is not a bool
        same = a is b
    return None if same else f"{path}: {short_repr(a)} vs {short_repr(b)}"
