"""Rule-based reward functions: pure, batched, one float per joint action.

Each takes one list of completions per agent role (all of length B) and
returns B floats, so it can be passed as a `reward_func` directly
(`DatasetEnv(dataset, reward_func=length_ratio, num_agents=2)`) or called by
a task's `score`.
"""

from __future__ import annotations

import math
import re

__all__ = ["exact_match", "length_ratio", "word_overlap"]

_WORD = re.compile(r"\w+", re.UNICODE)


def length_ratio(shorts: list[str], longs: list[str], target: float = 2.0) -> list[float]:
    """Reward `exp(-|log(len(long) / len(short) / target)|)`: 1 at the target ratio, in (0, 1].

    Lengths are in words (at least 1, so empty text is scored, not a crash). A
    ratio off by a factor f in either direction scores 1/f.
    """
    if not 0 < target < math.inf:  # also rejects NaN, which would score every pair NaN
        raise ValueError(f"target ratio must be a finite number > 0, got {target}.")
    rewards = []
    for short, long in zip(shorts, longs, strict=True):
        ratio = max(len(_WORD.findall(long)), 1) / max(len(_WORD.findall(short)), 1)
        rewards.append(math.exp(-abs(math.log(ratio / target))))
    return rewards


def word_overlap(first: list[str], second: list[str]) -> list[float]:
    """Jaccard overlap of the lower-cased word sets of paired texts, in [0, 1] (0 when both are empty)."""
    rewards = []
    for a, b in zip(first, second, strict=True):
        wa, wb = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
        rewards.append(len(wa & wb) / len(wa | wb) if wa | wb else 0.0)
    return rewards


def exact_match(completions: list[str], answers: list[str]) -> list[float]:
    """1.0 where the stripped completion equals the stripped answer, else 0.0."""
    return [float(c.strip() == a.strip()) for c, a in zip(completions, answers, strict=True)]
