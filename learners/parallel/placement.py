"""Where models run: one device per model, and per-agent work in threads when the models sit on distinct
accelerators.

`resolve_devices` turns a config's `agent_devices` / `critic_devices` / `reference_devices` into one
checked device per model; `per_agent` runs one function per agent, concurrently only when
`distinct_accelerators` says the agents cannot contend for one device or the CPU's random generator.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import torch

__all__ = ["check_device", "check_shared_devices", "distinct_accelerators", "per_agent", "resolve_devices"]


def resolve_devices(spec: Any, count: int, what: str = "agent", default: list[torch.device] | None = None,
                    local_rank: int = 0, parallel_training: str = "none",
                    seats: Sequence[int] | None = None) -> list[torch.device]:
    """The device of each of `seats` (default: all `count` seats) under the setting `spec`.

    `spec` is a device for every seat, or a list with one per seat (a list of one repeats it); the entries
    of seats not asked for (fixed seats) are ignored. None: the `default` devices (one per seat asked for,
    e.g. critics follow their agents), else cuda (this torchrun process's GPU) if available, else cpu;
    with `parallel_training="mp"`, seat s on GPU s modulo the GPUs there are. `what` names the setting
    (`{what}_devices`) in errors.
    """
    seats = list(range(count)) if seats is None else list(seats)
    if spec is None or spec == "auto":
        if default is not None:
            return list(default) if len(default) == len(seats) else [default[0]] * len(seats)
        if not torch.cuda.is_available():
            return [torch.device("cpu")] * len(seats)
        if parallel_training == "mp":
            return [torch.device(f"cuda:{s % torch.cuda.device_count()}") for s in seats]
        return [torch.device(f"cuda:{local_rank}")] * len(seats)
    if isinstance(spec, (str, torch.device)):
        return [check_device(spec, f"{what}_devices")] * len(seats)
    spec = list(spec)
    if len(spec) not in (1, count):
        raise ValueError(
            f"{what}_devices has {len(spec)} entries for {count} {what}{'s' * (count != 1)} (seats of the env, "
            f"fixed ones included), got {spec!r}: give one device for every seat, or a list with one per seat "
            "(a fixed seat's entry places its Frozen model and is ignored for other fixed policies).")
    return [check_device(spec[0] if len(spec) == 1 else spec[s], f"{what}_devices") for s in seats]


def check_shared_devices(devices: Sequence[torch.device], groups: Sequence[Sequence[int]],
                         names: Sequence[str]) -> None:
    """Refuse a model that plays several seats (each of `groups` lists its agents) on different `devices`;
    `names` are the agents' seats, for the message."""
    for agents in groups:
        places = sorted({str(devices[a]) for a in agents})
        if len(places) > 1:
            raise ValueError(f"one model plays seats {[names[a] for a in agents]} (self-play) but agent_devices puts "
                             f"them on {places}: give those seats the same device.")


def check_device(spec: Any, what: str) -> torch.device:
    """`spec` as a device this machine has; a ValueError naming the setting (`what`) and the fix otherwise,
    before anything loads."""
    try:
        device = torch.device(spec)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{what}={spec!r} is not a device ({exc}); use e.g. 'cpu' or 'cuda:0'.") from exc
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{what}={spec!r} but CUDA is not available on this machine; use 'cpu' or None.")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{what}={spec!r} but this machine has {torch.cuda.device_count()} CUDA device(s); "
                             f"use an index below {torch.cuda.device_count()}.")
    return device


def distinct_accelerators(devices: Sequence[torch.device]) -> bool:
    """True when every model sits on its own accelerator, so per-agent work can overlap in threads.

    CPU models never run concurrently: they would share the CPU's random generator (sampling
    order would depend on thread timing) and its cores.
    """
    devices = [torch.device(d) for d in devices]
    return len(devices) > 1 and all(d.type != "cpu" for d in devices) and len(set(devices)) == len(devices)


def per_agent(fn: Any, num_agents: int, concurrent: bool) -> list[Any]:
    """`[fn(0), ..., fn(A - 1)]`, in threads (one per agent) when `concurrent`; results in agent order."""
    if not concurrent:
        return [fn(a) for a in range(num_agents)]
    with ThreadPoolExecutor(max_workers=num_agents) as pool:
        return list(pool.map(fn, range(num_agents)))
