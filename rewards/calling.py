"""Calling a user's reward function with CoMLRL 1.4.3's convention.

A reward function scores a batch of B joint actions. It receives the
completions as one list per agent (each of length B) and, when it declares
them, `prompts=` (B strings) and `batch_items=` (B dataset rows):

    f(c0, c1)                    # one positional list per agent
    f(prompts, c0, c1)           # N + 1 positional parameters: prompts first (a warning unless
                                 #   the first is named `prompts`: f(a, b, c) for two agents is ambiguous)
    f([c0, c1])                  # one positional parameter and N > 1: a list of lists
    f(*lists)                    # a *args signature
    f(c0)  /  f(prompts, c0)     # a single agent

Only required positional parameters count: `prompts` or any other parameter
with a default, a `batch_items` parameter, and a `prompts` parameter after
the first are passed by keyword (`def f(c0, c1, prompts=None)` takes two lists).

It returns one value per joint action (B values: the joint reward every agent
gets) or, for a batch of one, N values (one per agent). Tensors, numpy arrays
(both flattened), lists, tuples and scalars are accepted. Anything else is the
user's bug and raises `RewardFunctionError` naming the function, the batch and
the value.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import warnings
from typing import Any, Callable, Sequence

from rewards.plain_data import short_repr

__all__ = ["RewardFunctionError", "call_reward_function"]


class RewardFunctionError(ValueError):
    """A reward function raised or returned something unusable."""


def call_reward_function(
    reward_func: Callable[..., Any],
    agent_completions: Sequence[Sequence[str]],
    *,
    prompts: Sequence[str] | None = None,
    batch_items: Sequence[Any] | None = None,
    where: str = "",
) -> list[list[float]]:
    """Call `reward_func` on B joint actions; return rewards as `[B][N]` floats.

    Args:
        reward_func: The user's function, any of the signatures in the module docstring.
        agent_completions: N lists of B completions (agent-major).
        prompts: B prompts, passed when the function declares `prompts` (or as the
            first positional argument when it takes N + 1 positionals).
        batch_items: B dataset rows, passed as `batch_items=` when declared.
        where: Context for error messages (e.g. "dataset index 3").
    """
    num_agents = len(agent_completions)
    lengths = [len(c) for c in agent_completions]
    if len(set(lengths)) > 1:
        raise ValueError(
            f"agent_completions must hold lists of the same length (one completion per joint action), "
            f"got lengths {lengths}."
        )
    batch = lengths[0] if num_agents else 0
    name = _name(reward_func)
    context = f" on {where}" if where else ""
    args, kwargs = _arguments(reward_func, agent_completions, prompts, batch_items)
    try:
        raw = reward_func(*args, **kwargs)
    except Exception as exc:
        raise RewardFunctionError(f"reward function {name} raised {exc!r}{context}.") from exc
    values = _to_floats(raw, name, context)
    if len(values) == batch:
        return [[v] * num_agents for v in values]
    if batch == 1 and len(values) == num_agents:
        return [values]
    raise RewardFunctionError(
        f"reward function {name} returned {len(values)} values{context} for a batch of {batch} joint "
        f"actions of {num_agents} agents: {short_repr(raw)}. Return one value per joint action "
        f"({batch}), or one per agent ({num_agents}) for a single joint action."
    )


def _arguments(
    func: Callable[..., Any],
    lists: Sequence[Sequence[str]],
    prompts: Sequence[str] | None,
    batch_items: Sequence[Any] | None,
) -> tuple[list[Any], dict[str, Any]]:
    lists = [list(c) for c in lists]
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):  # some C callables have no signature
        return lists, {}
    # Count the required positionals: `def f(c0, c1, prompts=None)` takes two lists.
    required = [
        p for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty and p.name != "batch_items"
    ]
    # A required `prompts` after the lists (`def f(c0, c1, prompts)`) is a keyword; only
    # a first positional receives the prompts positionally.
    required = [p for i, p in enumerate(required) if i == 0 or p.name != "prompts"]
    names = {p.name for p in params}
    var_kw = any(p.kind == p.VAR_KEYWORD for p in params)
    n = len(lists)
    prompts_positional = False
    args: list[Any]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        if required and required[0].name == "prompts":  # def f(prompts, *lists)
            args, prompts_positional = [list(prompts or [])] + lists, True
        else:
            args = lists
    elif len(required) == n + 1:
        if required[0].name != "prompts":
            warnings.warn(
                f"reward function {getattr(func, '__name__', func)!r} takes {n + 1} positional parameters for {n} "
                f"agents, so its first, {required[0].name!r}, receives the prompts and the next {n} the agents' "
                "completions (the rule f(prompts, c0, c1, ...)). Name it `prompts` to say so, or give it a default "
                "to receive only the completions.", stacklevel=4)
        args, prompts_positional = [list(prompts or [])] + lists, True
    elif n > 1 and len(required) == 1:
        args = [lists]
    else:
        args = lists
    kwargs: dict[str, Any] = {}
    if prompts is not None and not prompts_positional and ("prompts" in names or var_kw):
        kwargs["prompts"] = list(prompts)
    if batch_items is not None and ("batch_items" in names or var_kw):
        kwargs["batch_items"] = list(batch_items)
    return args, kwargs


def _to_floats(raw: Any, name: str, context: str) -> list[float]:
    if hasattr(raw, "detach"):  # torch tensor
        raw = raw.detach().cpu().reshape(-1).tolist()
    elif hasattr(raw, "reshape") and hasattr(raw, "tolist"):  # numpy array: flattened, like a tensor
        raw = raw.reshape(-1).tolist() if getattr(raw, "ndim", 1) else raw.tolist()
    elif hasattr(raw, "tolist") and not isinstance(raw, (str, bytes)):  # numpy scalar
        raw = raw.tolist()
    if isinstance(raw, numbers.Real) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        raise RewardFunctionError(
            f"reward function {name} returned {short_repr(raw)}{context}; return a number or a list of numbers."
        )
    values = []
    for v in raw:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise RewardFunctionError(
                f"reward function {name} returned a non-number {v!r}{context} (in {short_repr(raw)}); return floats."
            )
        try:
            v = float(v)
        except OverflowError:  # an int beyond float range
            v = math.inf if v > 0 else -math.inf
        if not math.isfinite(v):
            raise RewardFunctionError(
                f"reward function {name} returned {v!r}{context} (in {short_repr(raw)}); rewards must be finite."
            )
        values.append(v)
    return values


def _name(fn: Any) -> str:
    """How error messages name a reward function: its qualified name, a partial's function, an instance's class."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    name = getattr(fn, "__qualname__", None)
    if isinstance(name, str):
        return name
    return f"{type(fn).__qualname__} instance"
