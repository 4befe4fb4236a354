"""The global random number generators' states: capture, check and restore, also across torchrun ranks.

A state is a dict that `torch.load(weights_only=True)` reads back: `python`
(`random.getstate()`), `numpy` (the legacy global `RandomState`, its 624 keys
as an int64 tensor), `torch` (CPU) and, once CUDA is in use, `cuda` (one state
per device). Under torchrun `gather_rng` adds `ranks`, every process's own
state in rank order, and `restore_rng` gives each rank its own back.
"""

from __future__ import annotations

import math
import random
import warnings
from typing import Any

import numpy as np
import torch

from learners.parallel.distributed import Distributed

__all__ = ["capture_rng", "check_rng", "gather_rng", "restore_rng"]


def capture_rng() -> dict[str, Any]:
    """This process's python, numpy, torch CPU and (when initialized) CUDA generator states."""
    state: dict[str, Any] = {"python": random.getstate(), "numpy": _numpy_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def gather_rng(dist: Distributed | None) -> dict[str, Any]:
    """`capture_rng()`, plus under torchrun every rank's states under `ranks` (collective: all ranks call it)."""
    state = capture_rng()
    if dist is not None:  # the top level stays this rank's
        state["ranks"] = dist.gather(state)
    return state


def check_rng(state: Any) -> None:
    """Raise ValueError when `state` (as `gather_rng` returns it) would not restore; changes no generator."""
    try:
        _check_one(state)
        ranks = state.get("ranks")  # one state per torchrun process
        if ranks is not None:
            if not isinstance(ranks, list) or not ranks:
                raise TypeError("'ranks' must be a non-empty list of per-process states")
            for one in ranks:
                _check_one(one)
    except Exception as exc:  # whatever a malformed state makes setstate raise
        raise ValueError(f"invalid RNG states ({exc!r})") from exc


def restore_rng(state: dict[str, Any], dist: Distributed | None = None) -> None:
    """Set the global generators to a checked `state`; under torchrun each rank takes its own from `ranks`.

    With another number of ranks or CUDA devices than at capture, it restores what matches and warns.
    """
    ranks = state.get("ranks")
    if dist is not None:
        if ranks and len(ranks) == dist.world_size:
            state = ranks[dist.rank]
        else:
            warnings.warn(
                f"the checkpoint holds RNG states of {len(ranks) if ranks else 1} process(es), this run has "
                f"{dist.world_size}; the ranks keep their own seeds (sampling differs from the original run).",
                stacklevel=3)
            if dist.rank >= len(ranks or [state]):
                return
            state = ranks[dist.rank] if ranks else state
    random.setstate(_python_state(state["python"]))
    np.random.set_state(_numpy_state_tuple(state["numpy"]))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        n = torch.cuda.device_count()
        if n != len(cuda):
            warnings.warn(f"the checkpoint holds RNG states of {len(cuda)} CUDA devices, this machine has {n}; "
                          "restoring the first ones (sampling may differ from the original run).", stacklevel=3)
        for i, s in enumerate(cuda[:n]):
            torch.cuda.set_rng_state(s, device=i)
    elif cuda:
        warnings.warn("the checkpoint holds CUDA RNG states but CUDA is not available; sampling will differ "
                      "from the original run.", stacklevel=3)


def _check_one(state: Any) -> None:
    """Load one process's states into throwaway generators (raises what they raise)."""
    if not isinstance(state, dict):
        raise TypeError(f"expected a dict, got {type(state).__name__}")
    random.Random().setstate(_python_state(state["python"]))
    np.random.RandomState().set_state(_numpy_state_tuple(state["numpy"]))
    cpu = state["torch"]
    if not isinstance(cpu, torch.Tensor) or cpu.dtype != torch.uint8 or cpu.shape != torch.get_rng_state().shape:
        raise TypeError("the torch CPU state must be a uint8 tensor of the size torch.get_rng_state() has")
    torch.Generator().set_state(cpu)
    cuda = state.get("cuda", [])
    if not isinstance(cuda, list) or not all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1
                                             for t in cuda):
        raise TypeError("CUDA states must be a list of 1-d uint8 tensors")


def _numpy_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"name": str(name), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached": float(cached)}


def _python_state(py: Any) -> tuple:
    return (int(py[0]), tuple(int(x) for x in py[1]), None if py[2] is None else float(py[2]))


def _numpy_state_tuple(state: dict[str, Any]) -> tuple:
    """The `np.random.set_state` tuple of a saved numpy state, refusing what numpy would wrap or accept silently
    (keys outside [0, 2**32), a position past the key table, a NaN cached gaussian)."""
    keys = state["keys"]
    if not isinstance(keys, torch.Tensor) or keys.shape != (624,) or keys.dtype != torch.int64:
        raise ValueError("numpy keys must be 624 int64 integers")
    if bool(((keys < 0) | (keys >= 2**32)).any()):
        raise ValueError("numpy keys must lie in [0, 2**32)")
    pos, has_gauss, cached = int(state["pos"]), int(state["has_gauss"]), float(state["cached"])
    if state["name"] != "MT19937" or not 0 <= pos <= 624 or has_gauss not in (0, 1) or not math.isfinite(cached):
        raise ValueError(f"numpy state (name {state['name']!r}, pos {pos}, has_gauss {has_gauss}, cached "
                         f"{cached}) is not an MT19937 state")
    return (state["name"], keys.numpy().astype(np.uint32), pos, has_gauss, cached)
