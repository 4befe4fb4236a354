"""Information flow between agents: what each agent told the others, and whether its answer used it.

Private-information tasks (`coop/*`) have a message turn and an answer turn. At the answer step they put
two fields in `infos[agent]`:

- `"message_sent"`: the text this agent sent at the message turn (clipped by the task);
- `"used_partner_info"`: True when this agent's answer contains the partner's private part correctly.

A task that does not report `"used_partner_info"` gets no record: everything here is off for it.
`episode_record` turns one such step into a row (what the benchmark's and the learners' episode JSONL
files hold); `used_partner_info_rate` aggregates rows:

    rate = (agent-answers with used_partner_info True) / (agent-answers that report the flag)
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping

from comlrl_env.base import AgentID

__all__ = ["MESSAGE_KEY", "USED_KEY", "episode_record", "used_partner_info_rate", "write_records"]

MESSAGE_KEY = "message_sent"
USED_KEY = "used_partner_info"
ANSWER_CHARS = 500  # an answer is kept to this many characters in a record (a rambling model's rows stay small)


def episode_record(infos: Mapping[AgentID, Mapping[str, Any]], actions: Mapping[AgentID, str],
                   returns: Mapping[AgentID, float]) -> dict[str, Any] | None:
    """The info-flow row of one step, or None when no agent's info reports `used_partner_info`.

    Args:
        infos: The step's `infos` (per agent).
        actions: The joint action just played (each agent's answer text).
        returns: Each agent's undiscounted return of the episode so far (its return, at the final step).

    Returns:
        `{"task_index", "messages", "answers", "used_partner_info", "returns"}` (answers clipped to
        `ANSWER_CHARS` characters): `messages` and
        `used_partner_info` cover the agents that report them, `answers` and `returns` every agent.
    """
    flagged = [a for a, info in infos.items() if USED_KEY in info]
    if not flagged:
        return None
    first = next(iter(infos.values()))
    return {
        "task_index": first.get("task_index"),
        "messages": {a: str(info[MESSAGE_KEY]) for a, info in infos.items() if MESSAGE_KEY in info},
        "answers": {a: actions.get(a, "")[:ANSWER_CHARS] for a in infos},
        "used_partner_info": {a: bool(infos[a][USED_KEY]) for a in flagged},
        "returns": {a: float(r) for a, r in returns.items()},
    }


def used_partner_info_rate(records: Iterable[Mapping[str, Any]]) -> tuple[float, float] | None:
    """`(rate, ci95)` over the agent-answers of `records` (rows of `episode_record`), None without any.

    `rate` is the share of agent-answers that used the partner's information; `ci95` is the half-width of its
    95% confidence interval over episodes, 1.96 std / sqrt(n) of the per-episode shares (each episode counts
    once, as `reward_ci95` does). Example: flags [True, False] and [True, True] -> rate 0.75, shares
    [0.5, 1.0].
    """
    shares, used, total = [], 0, 0
    for row in records:
        flags = list(row["used_partner_info"].values())
        if flags:
            shares.append(sum(flags) / len(flags))
            used, total = used + sum(flags), total + len(flags)
    if not total:
        return None
    n = len(shares)
    mean = sum(shares) / n
    std = math.sqrt(sum((s - mean) ** 2 for s in shares) / (n - 1)) if n > 1 else 0.0
    return used / total, 1.96 * std / math.sqrt(n)


def write_records(path: str, records: Iterable[Mapping[str, Any]], extra: Mapping[str, Any] | None = None,
                  mode: str = "w") -> None:
    """Write `records` to the JSONL file `path`, one row per line, each prefixed with the fields of `extra`."""
    with open(path, mode, encoding="utf-8") as f:
        for row in records:
            f.write(json.dumps({**(extra or {}), **row}, ensure_ascii=False) + "\n")
