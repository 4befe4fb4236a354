"""Data parallelism with torch.distributed: the same script under `torchrun --nproc_per_node N`.

Every rank holds full copies of the agents (identical weights), plays its
shard of each batch of task instances (instances r, r + N, ... of the global
batch), and computes its loss on its own samples. Before each optimizer step
the gradients of each agent are averaged across ranks in one flat all-reduce,
weighted so that the result equals the gradient of the mean over the global
minibatch; every rank then takes the same step and keeps identical weights.
Ranks sample with different seeds (seed + rank). Rank 0 alone logs (console,
JSONL, wandb), writes checkpoints and saves models; metrics are averaged
across ranks. The backend is NCCL for CUDA tensors and gloo for CPU ones (on GPUs the
control values, such as the preemption flag, stay CPU tensors); several machines
use torchrun's usual rendezvous (`--nnodes`, `--rdzv-endpoint`).

Restarts (`torchrun --max-restarts N`): torchrun's agent hosts one key-value store for all of a job's worker
groups, and torch's default group keeps its keys (each rank's gloo or NCCL address) under the same names in
every group. A restarted rank can then read a dead rank's address and fail to connect ("Connection refused")
or hang, whichever rank reaches `init_process_group` first. On one node the group is joined through that store
under a prefix per restart (`TORCHELASTIC_RESTART_COUNT`, the same for every rank of one agent). Several nodes
count restarts each on their own, so there the job script must set `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` (a
new store per group); `from_env` warns when it is missing.

Without torchrun (no `WORLD_SIZE` in the environment, or 1) everything is a
no-op and a learner runs as a single process. With `sharding="fsdp"` the models
are split over the ranks instead (`fsdp.py`) and FSDP reduces their gradients.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["Distributed"]


@dataclasses.dataclass
class Distributed:
    """The process group seen by one learner: rank, world size, and the collectives it needs.

    Build it with `Distributed.from_env()`, which joins torchrun's process group (a script that needs its
    rank before building a learner calls it too); `Distributed()` is one process alone.
    """

    rank: int = 0
    """This process's rank in the group (0 alone)."""
    world_size: int = 1
    """Processes in the group (1 alone)."""
    local_rank: int = 0
    """This process's rank on its machine (`LOCAL_RANK`): its GPU index."""

    @classmethod
    def from_env(cls) -> "Distributed":
        """Join the torchrun process group when `WORLD_SIZE > 1` (initializing it if needed)."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        if not dist.is_initialized():
            # CUDA tensors over NCCL; the small control values (sums, the preemption flag) are CPU tensors: gloo
            backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
            store = restart_store()
            if store is None:
                dist.init_process_group(backend=backend)
            else:
                dist.init_process_group(backend=backend, store=store, rank=int(os.environ["RANK"]), world_size=world)
        return cls(rank=dist.get_rank(), world_size=dist.get_world_size(),
                   local_rank=int(os.environ.get("LOCAL_RANK", "0")))

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, items: list[Any]) -> list[Any]:
        """This rank's share of a global batch: items rank, rank + N, ..."""
        return items[self.rank::self.world_size]

    def sum(self, value: float) -> float:
        if not self.enabled:
            return value
        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t[0])

    def max(self, value: int) -> int:
        if not self.enabled:
            return value
        t = torch.tensor([int(value)], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t[0])

    def mean_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Average each metric over the ranks that report it (ranks may see different turns)."""
        if not self.enabled:
            return metrics
        merged: dict[str, list[float]] = {}
        for part in self.gather(metrics):
            for k, v in part.items():
                merged.setdefault(k, []).append(float(v))
        return {k: sum(v) / len(v) for k, v in merged.items()}

    def average_gradients(self, model: torch.nn.Module, weight: float) -> None:
        """grad <- sum over ranks of weight_r * grad_r, in one flat all-reduce per model.

        Callers pass weight_r = local samples / global samples of the minibatch, so a loss that is
        a mean over the local samples yields the gradient of the mean over the global minibatch.
        Parameters without a gradient on this rank (an empty local minibatch) contribute zeros.
        """
        params = [p for p in model.parameters() if p.requires_grad]
        if not self.enabled or not params:
            return
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) * weight
                          for p in params])
        dist.all_reduce(flat)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).clone()
            offset += n

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def from_main(self, text: str | None) -> str | None:
        """Rank 0's `text` on every rank (its UTF-8 bytes in a tensor; None is length -1)."""
        if not self.enabled:
            return text
        data = torch.tensor(list(text.encode()) if self.is_main and text is not None else [], dtype=torch.uint8)
        size = torch.tensor([data.numel() if self.is_main and text is not None else -1], dtype=torch.int64)
        dist.broadcast(size, src=0)
        if int(size[0]) < 0:
            return None
        if not self.is_main:
            data = torch.empty(int(size[0]), dtype=torch.uint8)
        dist.broadcast(data, src=0)
        return bytes(data.tolist()).decode()

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj` on every rank (used for RNG states in checkpoints)."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out


def restart_store() -> dist.Store | None:
    """The store this group joins through under torchrun's shared agent store: a prefix per restart on one node
    (so a restarted group never reads the keys of the group before it); None elsewhere (torch's default: the
    job's own store, or no torchrun agent)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    if int(os.environ.get("GROUP_WORLD_SIZE", "1")) > 1:  # agents that count restarts each on their own
        if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0:
            warnings.warn("torchrun --max-restarts on several nodes needs TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in "
                          "the environment of every node's torchrun: with the store shared, a restarted group "
                          "can read the previous group's addresses and fail to connect", stacklevel=3)
        return None
    shared = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                           int(os.environ["WORLD_SIZE"]), is_master=False, timeout=dist.default_pg_timeout)
    return dist.PrefixStore(f"comlrl/restart-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", shared)
