"""`state.json`, a checkpoint's metadata: read within limits and checked against its schema before any use.

`read_state_json` refuses what would make the reader itself fail (a file over `MAX_STATE_BYTES`, nesting
deeper than the interpreter's recursion limit, a number of more than 4300 digits, NaN or Infinity, bytes
that are not UTF-8) and `check_schema` every field the loader reads, so a corrupt file is an error
message, never a RecursionError or KeyError. Format 2 records a size and a SHA-256 per file (`files`, see
`learners.checkpointing.digests`); format 1, written before, a size or nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any

from learners.checkpointing.digests import check_record, open_verified

__all__ = ["FORMAT_VERSION", "MAX_STATE_BYTES", "PROGRESS_KEYS", "READABLE_FORMATS", "STATE_FILE", "check_schema",
           "read_state_json"]

STATE_FILE = "state.json"
FORMAT_VERSION = 2
"""The format this library writes: 2 added a SHA-256 per file."""
READABLE_FORMATS = (1, 2)
MAX_STATE_BYTES = 64 << 20
"""Largest `state.json` read (a 1000-tensor model's is about 0.2 MB)."""
PROGRESS_KEYS = ("epoch", "batch_in_epoch", "rollouts_done", "env_steps")
_COUNTER_LIMIT = 2**63


def read_state_json(directory: str) -> Any:
    """Parse `directory/state.json`. FileNotFoundError when it is absent; ValueError naming the problem else."""
    if not os.path.lexists(os.path.join(directory, STATE_FILE)):
        raise FileNotFoundError(os.path.join(directory, STATE_FILE))
    with open_verified(directory, STATE_FILE, None) as f:
        raw = f.read(MAX_STATE_BYTES + 1)
    if len(raw) > MAX_STATE_BYTES:
        raise ValueError(f"it is larger than {MAX_STATE_BYTES >> 20} MiB")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("it is nested too deeply to parse") from None
    except (UnicodeDecodeError, ValueError) as exc:  # json.JSONDecodeError, or an int over the digit limit
        raise ValueError(str(exc)[:200]) from None


def check_schema(state: dict[str, Any]) -> None:
    """Raise ValueError naming the first field of `state` (a parsed state.json) the loader could not use."""
    for key, kind in (("learner", str), ("run_id", str), ("config", dict), ("tokenizers", list),
                      ("shapes", dict), ("stateful", list), ("progress", dict)):
        if not isinstance(state.get(key), kind):
            raise ValueError(f"{key!r} is missing or not a {kind.__name__}")
    if not _counter(state.get("sequence")):
        raise ValueError("'sequence' is not a non-negative int")
    if not _counter(state.get("num_agents")) or state["num_agents"] < 1:
        raise ValueError("'num_agents' is not a positive int")
    if not all(_counter(state["progress"].get(k)) for k in PROGRESS_KEYS):
        raise ValueError(f"'progress' needs non-negative ints {list(PROGRESS_KEYS)}")
    if state.get("learner_class") is not None and not isinstance(state["learner_class"], str):
        raise ValueError("'learner_class' is not a string")
    if not all(isinstance(t, str) for t in state["tokenizers"]):
        raise ValueError("'tokenizers' is not a list of fingerprints")
    if not all(isinstance(s, list) and len(s) == 2 and all(isinstance(x, str) for x in s) for s in state["stateful"]):
        raise ValueError("'stateful' is not a list of [slot, class name] pairs")
    if not all(isinstance(v, dict) for v in state["shapes"].values()):
        raise ValueError("'shapes' is not an object of objects")
    wandb_id = state.get("wandb")
    if wandb_id is not None and not (isinstance(wandb_id, dict) and isinstance(wandb_id.get("id"), str)):
        raise ValueError("'wandb' is neither null nor an identity with an 'id'")
    for key in ("files", "data", "numerics"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            raise ValueError(f"{key!r} is not an object")
    files = state.get("files") or {}
    if state["format_version"] >= 2:
        if not files:
            raise ValueError("'files' (a size and a SHA-256 per file) is missing")
        for name, record in files.items():
            check_record(name, record)
    elif not all(_counter(size) for size in files.values()):
        raise ValueError("'files' is not an object of file sizes")


def _counter(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _COUNTER_LIMIT


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"it holds {name}, which JSON does not allow")
