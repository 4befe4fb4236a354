"""Sharding each trainable model over the torchrun ranks with FSDP2 (`sharding="fsdp"`).

Under data parallelism (`distributed.py`) every rank holds every model whole. With `sharding="fsdp"`, each
trainable model (agents with their value heads, critics; for LoRA agents the frozen base and the adapters) is
split over the N ranks by PyTorch's `fully_shard`: every decoder layer is one unit, the rest of the model
(embeddings, final norm, LM head, heads) the root unit. A rank keeps 1/N of each parameter (dim 0, padded),
its gradient and its AdamW moments, so parameters + gradients + optimizer states cost 16 P / N bytes per rank
in fp32 instead of 16 P. A unit's weights are all-gathered when it runs and freed after; gradients are
reduce-scattered in the backward pass, so no manual all-reduce happens for a sharded model.

Every FSDP forward and backward is a collective, so ranks must run the same passes. Three rules ensure it:

1. Passes without gradients (sampling, evaluation, old log-probs) run inside `gathered(models)`: each unit is
   all-gathered once, kept whole for the block, then freed. Ranks may then run any number of forwards (their
   samples end at different lengths) at the memory cost of one whole model (in `param_dtype`) for the block.
2. Gradient passes run sharded, and every rank runs as many per optimizer step as the busiest one: a rank
   with fewer micro-batches (an empty minibatch, fewer acting rows) adds zero-weight passes (`PassSync`).
3. FSDP averages gradients over ranks. Rank r, holding n_r of the N samples of the global minibatch, scales its
   mean loss by W n_r / N, so that (1/W) sum_r (W n_r / N) g_r = sum_r (n_r / N) g_r, the gradient of the
   global mean, as under data parallelism.

On GPUs `mixed_precision="bf16"` becomes FSDP's `MixedPrecisionPolicy(param_dtype=bfloat16,
reduce_dtype=float32)` (bf16 compute and all-gathers, fp32 gradient reduction and fp32 master shards), and
`fsdp_cpu_offload=True` its `CPUOffloadPolicy` (shards, gradients and AdamW states in CPU memory).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
from typing import Any, Iterator, Sequence

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from learners.parallel.distributed import Distributed
from learners.parallel.loading import allocate, fill, skeleton

__all__ = ["PassSync", "SHARDINGS", "Sharding", "check_sharding", "decoder_layers", "fsdp_root", "pass_sync",
           "shard_target"]

SHARDINGS = ("none", "fsdp")
"""Values of the `sharding` config field."""


def check_sharding(sharding: str, world_size: int, launched: bool) -> None:
    """Refuse FSDP where it cannot shard: outside torchrun (`launched`: WORLD_SIZE is set) or on one rank."""
    if sharding != "fsdp":
        return
    if not launched:
        raise ValueError("sharding='fsdp' shards each model over torchrun's processes, but this process was not "
                         "started by torchrun (no WORLD_SIZE): launch the script with `torchrun --nproc_per_node N "
                         "script.py` (N >= 2 devices), or use sharding='none'.")
    if world_size < 2:
        raise ValueError(f"sharding='fsdp' with {world_size} process shards nothing: launch torchrun with "
                         "--nproc_per_node >= 2 (one per device), or use sharding='none'.")


def shard_target(model: nn.Module) -> nn.Module:
    """The transformers model that FSDP shards for `model`: the model itself, or, for a LoRA agent
    (`learners.models.lora.AdapterAgent`), the base model its adapters sit in (shared by its sibling agents)."""
    peft = getattr(model, "peft", None)
    return peft.get_base_model() if peft is not None else model


def fsdp_root(model: nn.Module) -> FSDPModule | None:
    """The FSDP root unit behind `model`, or None when it is not sharded."""
    target = shard_target(model)
    return target if isinstance(target, FSDPModule) else None


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of a transformers model: the modules whose class it names in `_no_split_modules`
    (e.g. `Qwen2DecoderLayer`), the units FSDP shards one at a time."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if any(c.__name__ in names for c in type(m).__mro__)]  # FSDP<name> too


@dataclasses.dataclass
class PassSync:
    """How one rank joins the backward passes of a sharded model's optimizer step (module docstring, rules 2-3).

    `scale` = W n_r / N multiplies this rank's loss; `padding(passes)` is how many zero-weight passes it adds
    so that every rank runs as many as the busiest one."""

    dist: Distributed
    scale: float

    def padding(self, passes: int) -> int:
        return self.dist.max(passes) - passes


def pass_sync(model: nn.Module, dist: Distributed | None, local_count: int) -> PassSync | None:
    """The `PassSync` of an optimizer step of `model` on this rank's `local_count` samples (collective), or
    None when `model` is not sharded (data parallelism then averages gradients after the backward)."""
    if dist is None or not dist.enabled or fsdp_root(model) is None:
        return None
    total = dist.sum(local_count)
    return PassSync(dist, dist.world_size * local_count / total if total else 0.0)


class Sharding:
    """A learner's FSDP setting: validates it, shards the trainable models and keeps ranks' passes in step.

    Args:
        config: The learner's config: `sharding` ("none": every method is a no-op, or "fsdp"), `mixed_precision`
            ("bf16": bf16 compute and all-gathers, fp32 reduction) and `fsdp_cpu_offload`.
        dist: The torchrun process group.
        devices: The device of each trained agent, checked to be this process's own under FSDP.
    """

    def __init__(self, config: Any, dist: Distributed, devices: Sequence[torch.device] = ()) -> None:
        check_sharding(config.sharding, dist.world_size, "WORLD_SIZE" in os.environ)
        self.enabled = config.sharding == "fsdp"
        self.dist = dist
        self.mixed_precision = config.mixed_precision
        self.cpu_offload = config.fsdp_cpu_offload
        self.device = torch.device(f"cuda:{dist.local_rank}" if torch.cuda.is_available() else "cpu")
        self.roots: list[FSDPModule] = []  # the root unit of every sharded model
        self.pending: dict[int, tuple[list[str], set[str]]] = {}  # skeletons by id: their files, meta parameters
        if self.enabled and self.cpu_offload and self.device.type != "cuda":
            raise ValueError("fsdp_cpu_offload=True moves the shards of GPU processes to CPU memory, but these "
                             "processes run on the CPU already: leave fsdp_cpu_offload=False.")
        self.check_devices(devices)

    def check_devices(self, devices: Sequence[torch.device], what: str = "agent") -> None:
        """Under FSDP every model of a rank sits on its own device (cuda:LOCAL_RANK, or cpu without CUDA)."""
        if not self.enabled:
            return
        wrong = sorted({str(d) for d in devices if torch.device(d) != self.device})
        if wrong:
            raise ValueError(f"sharding='fsdp' places each rank's shards on its own device ({self.device} on this "
                             f"rank) but {what}_devices puts models on {wrong}: leave {what}_devices=None and "
                             "parallel_training='none' (each torchrun process uses cuda:LOCAL_RANK, or the cpu).")

    # ----- building: sharded while loading (`loading.py`) --------------------------------------------------

    def build(self, source: Any, kwargs: dict[str, Any], vocabulary: int | None = None) -> nn.Module | None:
        """Under FSDP, a skeleton of the model folder `source` (parameters on meta) that `shard` fills with this
        rank's pieces only; None when sharding is off or the model must load whole (`loading.skeleton`)."""
        built = skeleton(source, kwargs, vocabulary) if self.enabled else None
        if built is None:
            return None
        model, files = built
        self.pending[id(model)] = (files, {n for n, p in model.named_parameters() if p.device.type == "meta"})
        return model

    def place(self, model: nn.Module, device: torch.device, frozen: bool = False) -> nn.Module:
        """`model` on `device`; under FSDP a model to shard stays where it is (`fully_shard` moves one unit at a
        time, so the device never holds it whole) and a skeleton on meta until `shard` fills it."""
        if id(shard_target(model)) in self.pending or (self.enabled and not frozen):
            return model
        return model.to(device)

    def copy(self, model: nn.Module) -> nn.Module:
        """A deep copy of `model` (a frozen reference); a skeleton's copy is filled from the same files."""
        twin = copy.deepcopy(model)
        if id(model) in self.pending:
            files, names = self.pending[id(model)]
            self.pending[id(twin)] = (files, set(names))
        return twin

    def materialize(self, model: nn.Module) -> None:
        """Give the skeleton `model` (sharded or not) storage for its pieces on meta on this rank's device, each
        once (tied weights too), and fill them from its files; its real tensors (buffers, heads attached after
        it was built) stay as they are. Collective-free."""
        files, names = self.pending.pop(id(model))
        allocate(model, self.device)
        fill(model, files, names, self.dist.rank, self.dist.world_size)

    def shard(self, models: dict[str, nn.Module], optimizers: Sequence[torch.optim.Optimizer],
              frozen: Sequence[nn.Module] = ()) -> None:
        """Shard every model of `models` but the `frozen` ones (each once, a shared LoRA base once) and point
        `optimizers`, and any module holding their parameters (LoRA agents), at the sharded parameters. Raises a
        ValueError for a model class without decoder layers to shard (before any model is touched)."""
        if not self.enabled:
            return
        models = [m for m in models.values() if all(m is not f for f in frozen)]
        targets = list({id(shard_target(m)): shard_target(m) for m in models}.values())
        for target in targets:
            if not decoder_layers(target):
                raise ValueError(
                    f"sharding='fsdp' cannot shard {type(target).__name__}: it names no decoder layer class in "
                    "`_no_split_modules` (transformers models such as Qwen2, Llama, Mistral and GPT-2 do). Use a "
                    "transformers causal LM, or sharding='none'.")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        mesh = init_device_mesh(self.device.type, (self.dist.world_size,))
        precision = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                     if self.mixed_precision == "bf16" else MixedPrecisionPolicy())
        offload = CPUOffloadPolicy() if self.cpu_offload else OffloadPolicy()
        renamed: dict[int, nn.Parameter] = {}
        for target in targets:
            before = {name: id(p) for name, p in target.named_parameters()}
            for layer in decoder_layers(target):
                fully_shard(layer, mesh=mesh, mp_policy=precision, offload_policy=offload)
            fully_shard(target, mesh=mesh, mp_policy=precision, offload_policy=offload, reshard_after_forward=False)
            if id(target) in self.pending:  # a skeleton: this rank's pieces filled from its files
                self.materialize(target)
            after = dict(target.named_parameters())
            renamed.update({old: after[name] for name, old in before.items()})
            self.roots.append(target)
        for optimizer in optimizers:
            for group in optimizer.param_groups:
                group["params"] = [renamed.get(id(p), p) for p in group["params"]]
        for model in models:  # wrappers that registered the model's parameters as their own (LoRA agents)
            for name, param in list(model.named_parameters(recurse=False)):
                if id(param) in renamed:
                    model.register_parameter(name, renamed[id(param)])
        for model in frozen:  # skeletons of frozen copies (references): filled whole
            if id(shard_target(model)) in self.pending:
                self.materialize(shard_target(model))

    def is_sharded(self, model: nn.Module) -> bool:
        return self.enabled and fsdp_root(model) is not None

    @contextlib.contextmanager
    def gathered(self, models: Sequence[nn.Module]) -> Iterator[None]:
        """Inside the block `models` run whole on every rank without collectives (rule 1): each unit of each
        sharded model is all-gathered on entry (collective: every rank enters) and freed on exit."""
        roots = list({id(r): r for r in (fsdp_root(m) for m in models) if r is not None}.values())
        units = [u for root in roots for u in root.modules() if isinstance(u, FSDPModule)]
        for unit in units:
            unit.set_reshard_after_forward(False, recurse=False)
            unit.unshard()
        try:
            yield
        finally:
            for unit in units:
                unit.reshard()
                unit.set_reshard_after_forward(all(unit is not r for r in roots), recurse=False)

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor] | None:
        """`model`'s whole state dict gathered on rank 0 in CPU memory ({} on the other ranks; collective), or
        None when it is not sharded (its own `state_dict()` is then whole)."""
        if not self.is_sharded(model):
            return None
        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

