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
from typing import Any, Callable, Hashable, Iterable, Mapping

import numpy as np

from comlrl_env.base import AgentID
from comlrl_env.intervals import Interval, rate_interval

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


def used_partner_info_rate(records: Iterable[Mapping[str, Any]],
                           task: Callable[[Mapping[str, Any]], Hashable] | None = None) -> Interval | None:
    """The rate over the agent-answers of `records` (rows of `episode_record`) with its 95% interval, None
    without any.

    The rate is the share of agent-answers that used the partner's information. Its interval is over task
    instances (`comlrl_env.intervals.rate_interval`: Wilson at the effective sample size of the per-task
    counts): `task(row)` names a row's task (the benchmark's k samples of one instance share one); by default
    each row is its own. Example: flags [True, False] and [True, True] -> rate 0.75 (3 of 4).
    """
    used: dict[Hashable, int] = {}
    total: dict[Hashable, int] = {}
    for n, row in enumerate(records):
        flags = list(row["used_partner_info"].values())
        if flags:
            key = task(row) if task is not None else n
            used[key] = used.get(key, 0) + sum(flags)
            total[key] = total.get(key, 0) + len(flags)
    if not total:
        return None
    interval = rate_interval(np.array([used[k] for k in total]), np.array(list(total.values())))
    return Interval(*(float(x) for x in interval))


def write_records(path: str, records: Iterable[Mapping[str, Any]], extra: Mapping[str, Any] | None = None,
                  mode: str = "w") -> None:
    """Write `records` to the JSONL file `path`, one row per line, each prefixed with the fields of `extra`."""
    with open(path, mode, encoding="utf-8") as f:
        for row in records:
            f.write(json.dumps({**(extra or {}), **row}, ensure_ascii=False) + "\n")
