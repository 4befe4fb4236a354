"""Checks that a checkpoint's optimizer, scheduler and stateful-object states load what was saved, run before
anything changes. Each raises ValueError naming the entry and what is wrong.

- `check_optimizer_state`: the structure torch's `load_state_dict` expects (groups, their sizes, parameter
  ids), every hyperparameter a finite number of the kind the optimizer holds (lr, eps and weight decay >= 0,
  betas in [0, 1)), and every per-parameter state: Adam's `step` a finite, whole, non-negative number (a
  0-d tensor or a number) and its moments dense tensors of the parameter's shape and dtype, finite, the
  second moments >= 0. A 0-d `exp_avg` would otherwise load and let the fused kernel read past its end.
- `check_scheduler_state`: only keys the scheduler has (its `load_state_dict` sets every key as an
  attribute), `last_epoch` and `base_lrs` present, every value of the kind and length it has now, finite.
- `check_like`: a user object's state has the kinds of the state it has now (a dict of the same value
  kinds, recursively), so a wrong-typed state is refused before its `load_state_dict` runs.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rewards.plain_data import short_repr

__all__ = ["all_finite", "check_group", "check_like", "check_optimizer_state", "check_param_state",
           "check_scheduler_state"]

ADAM_STATE = ("step", "exp_avg", "exp_avg_sq")
"""Per-parameter state of Adam and AdamW (plus `max_exp_avg_sq` with amsgrad)."""
NON_NEGATIVE_MOMENTS = ("exp_avg_sq", "max_exp_avg_sq")
GROUP_MINIMUM = {"lr": 0.0, "initial_lr": 0.0, "eps": 0.0, "weight_decay": 0.0}
"""Hyperparameters that may not be negative."""


def check_optimizer_state(sd: Any, optimizer: torch.optim.Optimizer) -> None:
    """Raise ValueError unless `sd` is a state dict `optimizer.load_state_dict` takes and steps on safely."""
    if not isinstance(sd, dict) or not isinstance(sd.get("state"), dict) or not isinstance(sd.get("param_groups"),
                                                                                          list):
        raise ValueError("has an unknown structure (expected {'state': {...}, 'param_groups': [...]})")
    groups, own_groups = sd["param_groups"], optimizer.param_groups
    if len(groups) != len(own_groups):
        raise ValueError(f"has {len(groups)} parameter groups, this learner's optimizer {len(own_groups)}")
    ids: list[int] = []
    for gi, (group, own) in enumerate(zip(groups, own_groups)):
        if not isinstance(group, dict) or not isinstance(group.get("params"), list):
            raise ValueError(f"parameter group {gi} has no list of parameters")
        if len(group["params"]) != len(own["params"]):
            raise ValueError(f"parameter group {gi} has {len(group['params'])} parameters, this learner's "
                             f"{len(own['params'])}")
        if not all(_is_int(pid) for pid in group["params"]):
            raise ValueError(f"parameter group {gi} lists parameter ids that are not ints")
        ids += group["params"]
        check_group(gi, group, own)
    if len(set(ids)) != len(ids):
        raise ValueError("lists a parameter in two places")
    known = set(ids)
    stray = [short_repr(k) for k in sd["state"] if not _is_int(k) or k not in known]
    if stray:
        raise ValueError(f"holds state for parameters {stray[:3]} that no parameter group lists")
    adam = isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))
    for group, own in zip(groups, own_groups):
        expected = (*ADAM_STATE, "max_exp_avg_sq") if group.get("amsgrad") else ADAM_STATE
        for pid, param in zip(group["params"], own["params"]):
            entry = sd["state"].get(pid)
            if entry is None:
                continue
            if not isinstance(entry, dict):
                raise ValueError(f"the state of parameter {pid} is {type(entry).__name__}, not a dict")
            now = optimizer.state.get(param)
            keys = set(expected) if adam else set(now) if now else None
            if keys is not None and set(entry) != keys:
                raise ValueError(f"the state of parameter {pid} has keys {sorted(map(short_repr, entry))}, expected "
                                 f"{sorted(keys)}")
            for key, value in entry.items():
                check_param_state(f"{key} of parameter {pid}", key, value, param, (now or {}).get(key))


def check_scheduler_state(sd: Any, scheduler: Any) -> None:
    """Raise ValueError unless `sd` has only `scheduler`'s own keys, with values of the kinds and lengths it has."""
    if not isinstance(sd, dict):
        raise ValueError(f"is {type(sd).__name__}, not a dict")
    own = scheduler.state_dict()
    unknown = sorted(short_repr(k) for k in sd if k not in own)
    if unknown:
        raise ValueError(f"has keys this scheduler does not have: {unknown[:5]}")
    missing = [k for k in ("last_epoch", "base_lrs") if k in own and k not in sd]
    if missing:
        raise ValueError(f"lacks {missing}")
    for key, value in sd.items():
        check_like(value, own[key], key, strict=True)
    for key in ("last_epoch", "_step_count"):
        if key in sd and sd[key] < 0:
            raise ValueError(f"{key} is {sd[key]}, below 0")


def check_like(saved: Any, own: Any, where: str, strict: bool = False) -> None:
    """Raise ValueError unless `saved` has the kind of `own`, recursively through dicts, lists and tuples.

    Kinds: None, bool, number (int or float), str, tensor, sequence (list or tuple), dict. Lenient (a user
    object's state): None on either side matches anything, dict keys only one side has and lists of other
    lengths are fine. `strict` (our own objects): None only matches None, a number must be finite and an int
    where `own` has an int, a tensor has `own`'s dtype and shape, a list `own`'s length, a dict no other keys.
    """
    if not strict and (saved is None or own is None):
        return
    kind, expected = _kind(saved), _kind(own)
    if kind != expected:
        raise ValueError(f"{where} is {_show(saved)}, expected {expected}")
    if kind == "number" and strict:
        if not _finite(saved):
            raise ValueError(f"{where} is {short_repr(saved)}, not finite")
        if isinstance(own, int) and not isinstance(saved, int):
            raise ValueError(f"{where} is {short_repr(saved)}, expected an int")
    elif kind == "tensor" and strict and (saved.dtype != own.dtype or saved.shape != own.shape):
        raise ValueError(f"{where} is a {tuple(saved.shape)} {saved.dtype} tensor, expected {tuple(own.shape)} "
                         f"{own.dtype}")
    elif kind == "sequence":
        if strict and len(saved) != len(own):
            raise ValueError(f"{where} has {len(saved)} entries, expected {len(own)}")
        for i, (a, b) in enumerate(zip(saved, own)):
            check_like(a, b, f"{where}[{i}]", strict)
    elif kind == "dict":
        extra = [k for k in saved if k not in own]
        if strict and extra:
            raise ValueError(f"{where} has keys {sorted(map(short_repr, extra))[:5]} it should not have")
        for k in saved:
            if k in own:
                check_like(saved[k], own[k], f"{where}[{short_repr(k)}]", strict)


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether every value of `tensor` is finite (integer tensors always are).

    A finite sum proves it (a NaN or an infinity makes the sum NaN or infinite); only when the sum is not
    finite, which finite values can also cause by overflowing, do min and max decide. About 10x faster on a
    CPU than `torch.isfinite(t).all()`, which writes a mask first.
    """
    if not (tensor.is_floating_point() or tensor.is_complex()) or tensor.numel() == 0:
        return True
    values = tensor.detach().abs() if tensor.is_complex() else tensor.detach()
    if math.isfinite(float(values.sum())):
        return True
    low, high = torch.aminmax(values)  # propagates NaN
    return math.isfinite(float(low)) and math.isfinite(float(high))


# ----- helpers ----------------------------------------------------------------------------------


def check_group(index: int, group: dict, own: dict) -> None:
    """Every hyperparameter of a saved group is plain, finite, of the kind the optimizer has, and in range."""
    for key, value in group.items():
        if key == "params":
            continue
        where = f"parameter group {index}: {key}"
        values = value if isinstance(value, (list, tuple)) else [value]
        if not all(v is None or isinstance(v, (bool, int, float, str)) for v in values):
            raise ValueError(f"{where} is {_show(value)}, not a plain value")
        if any(_number(v) and not _finite(v) for v in values):
            raise ValueError(f"{where} is {short_repr(value)}, not finite")
        if key in own and own[key] is not None and value is not None:
            check_like(value, own[key], where)
        if key in GROUP_MINIMUM and _number(value) and value < GROUP_MINIMUM[key]:
            raise ValueError(f"{where} is {short_repr(value)}, below {GROUP_MINIMUM[key]}")
        if key == "betas" and not (len(values) == 2 and all(_number(b) and 0 <= b < 1 for b in values)):
            raise ValueError(f"{where} is {short_repr(value)}, expected two numbers in [0, 1)")


def check_param_state(where: str, key: Any, value: Any, param: torch.Tensor, now: Any) -> None:
    """Raise ValueError (its message opens with `where`) unless the optimizer state `key` = `value` of `param`
    is sound: a step a whole number >= 0, a moment a dense finite tensor of the parameter's shape and dtype (a
    second moment >= 0), anything else a finite plain value; of the kind of `now`, the state it has now (None:
    none)."""
    if key == "step":
        number = value
        if isinstance(value, torch.Tensor):
            if value.dim() != 0 or not (value.is_floating_point() or value.dtype in (torch.int32, torch.int64)):
                raise ValueError(f"{where} is a {tuple(value.shape)} {value.dtype} tensor, expected a 0-d float")
            number = value.item()
        if not _number(number) or not _finite(number) or number < 0 or number != int(number):
            raise ValueError(f"{where} is {_show(value)}, expected a whole number >= 0")
        return
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_quantized:
            raise ValueError(f"{where} is a {value.layout} tensor, expected a dense one")
        if value.shape != param.shape or (param.is_floating_point() and value.dtype != param.dtype):
            raise ValueError(f"{where} is {tuple(value.shape)} {value.dtype}, the parameter {tuple(param.shape)} "
                             f"{param.dtype}")
        if not value.is_contiguous() and value.stride() != param.stride():
            raise ValueError(f"{where} has strides {value.stride()}, the parameter {param.stride()}")
        if not all_finite(value):
            raise ValueError(f"{where} holds NaN or infinite values")
        if key in NON_NEGATIVE_MOMENTS and value.numel() and float(value.amin()) < 0:
            raise ValueError(f"{where} holds negative values (a second moment is >= 0)")
    elif not (value is None or isinstance(value, (bool, str)) or (_number(value) and _finite(value))):
        raise ValueError(f"{where} is {_show(value)}, not a tensor or a finite number")
    if now is not None:
        check_like(value, now, where)


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, (list, tuple)):
        return "sequence"
    if isinstance(value, dict):
        return "dict"
    return type(value).__name__


def _show(value: Any) -> str:
    """`value` for a message: its kind, and its repr cut short."""
    if isinstance(value, torch.Tensor):
        return f"a {tuple(value.shape)} {value.dtype} tensor"
    return f"{_kind(value)} {short_repr(value)}"




def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: int | float) -> bool:
    return isinstance(value, int) or math.isfinite(value)  # math.isfinite overflows on huge ints


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
