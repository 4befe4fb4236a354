"""Models sharded while they load (`sharding="fsdp"`): no rank holds a whole model at any time.

A causal LM saved as safetensors (a local folder) is first built as a skeleton (`skeleton`): from its config,
with every parameter on the meta device (no memory, no initialization); buffers, such as rotary frequencies,
are computed for real (they are small). Heads and adapters attached later are real too. `Sharding.shard` then
splits it with `fully_shard` (pieces on meta stay on meta), gives each rank storage for its own pieces only
(`allocate`; real tensors stay as they are) and `fill`s them: each rank reads, tensor by tensor, just the
bytes of its rows of each weight from the safetensors files, straight into its storage. FSDP2 splits dim 0 of an n-row tensor over N ranks in chunks
of c = ceil(n / N) rows, so rank r reads rows [min(r c, n), min((r + 1) c, n)).

A rank's parameter memory while a learner is built is then its shards (1/N of the team) plus one tensor's rows
in flight. A model that cannot be built this way (a loaded object, a hub id not in the local cache, extra
`model_kwargs`, a vocabulary that must grow, keys that differ from the model's) loads whole on the CPU and is
sharded unit by unit, so the device still never holds it whole.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from typing import Any, BinaryIO, Iterator

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

__all__ = ["allocate", "fill", "parameters_on_meta", "skeleton", "weight_files"]

_INDEX = "model.safetensors.index.json"
_KWARGS = {"dtype", "attn_implementation"}
"""The `from_pretrained` keyword arguments a skeleton honours; any other sends the model down the whole path."""


def weight_files(source: Any) -> list[str] | None:
    """The safetensors files holding the weights of the model folder `source` (one file, or the files its index
    names), or None for anything else (a loaded object, a hub id, a folder of other formats)."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    folder = os.path.expanduser(os.fspath(source))
    if os.path.isfile(os.path.join(folder, _INDEX)):
        with open(os.path.join(folder, _INDEX), encoding="utf-8") as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(folder, n) for n in names]
    single = os.path.join(folder, "model.safetensors")
    return [single] if os.path.isfile(single) else None


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Inside the block every parameter a module registers moves to the meta device at once (buffers stay)."""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    nn.Module.register_parameter = on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def skeleton(source: Any, kwargs: dict[str, Any], vocabulary: int | None = None) -> tuple[nn.Module, list[str]] | None:
    """`(model, files)`: the causal LM of the folder `source` with its parameters on meta, and the safetensors
    files to fill them from; None when it must load whole (see the module docstring). `kwargs` are the
    `from_pretrained` arguments; `vocabulary` the tokenizer's size (a larger one needs resized embeddings)."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    files = weight_files(source)
    if files is None or set(kwargs) - _KWARGS:
        return None
    folder = os.path.expanduser(os.fspath(source))
    config = AutoConfig.from_pretrained(folder)
    if vocabulary is not None and vocabulary > getattr(config, "vocab_size", vocabulary):
        return None
    dtype = kwargs.get("dtype")
    if dtype is None or dtype == "auto":
        dtype = getattr(config, "dtype", None) or torch.float32
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    extra = {"attn_implementation": kwargs["attn_implementation"]} if "attn_implementation" in kwargs else {}
    with parameters_on_meta():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, **extra)
    names = {n for n, _ in model.named_parameters()}
    stored: set[str] = set()
    for file in files:
        with open(file, "rb") as f:
            stored.update(_header(f)[1])
    if names - stored:  # renamed or missing keys: from_pretrained knows the model's conversions
        return None
    model.eval()
    model.config.name_or_path = model.name_or_path = os.fspath(source)
    with contextlib.suppress(OSError):
        model.generation_config = GenerationConfig.from_pretrained(folder)
    return model, files


def allocate(model: nn.Module, device: torch.device) -> None:
    """Storage on `device` for every parameter of `model` still on meta, once per tensor, so tied weights stay
    tied; real tensors (buffers, heads) stay as they are. A model sharded by FSDP goes through `_apply` (FSDP
    swaps the storage in, keeping each parameter object; `to_empty` would reallocate the real tensors too and
    measured a higher start-up peak); a whole one gets new parameters, shared as before."""
    if isinstance(model, FSDPModule):
        model._apply(lambda t: torch.empty_like(t, device=device) if t.device.type == "meta" else t)
        return
    made: dict[int, tuple[nn.Parameter, nn.Parameter]] = {}  # keeps the meta parameter alive: ids stay unique
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False, remove_duplicate=False)):
            if param.device.type == "meta":
                if id(param) not in made:
                    made[id(param)] = (param, nn.Parameter(torch.empty_like(param, device=device),
                                                           requires_grad=param.requires_grad))
                module.register_parameter(name, made[id(param)][1])


def fill(model: nn.Module, files: list[str], names: set[str], rank: int, world_size: int) -> None:
    """Copy into `model` (sharded by FSDP, or whole) this rank's rows of each parameter in `names` from the
    safetensors `files`: each piece is read straight from its byte range into the rank's storage (through one
    buffer of its size when the dtype differs), never a whole file or a whole tensor."""
    params = {n: p for n, p in model.named_parameters() if n in names}
    with torch.no_grad():
        for file in files:
            with open(file, "rb") as f:
                start_of_data, header = _header(f)
                for key, entry in header.items():
                    param = params.pop(key, None)
                    if param is None:
                        continue
                    local = param.to_local() if hasattr(param, "to_local") else param
                    rows = entry["shape"][0] if entry["shape"] else 1
                    first = 0 if local.shape == param.shape else min(rank * -(-rows // world_size), rows)
                    _read_rows(f, start_of_data, entry, first, local)
    if params:
        raise ValueError(f"the weight files of {model.config.name_or_path!r} lack {sorted(params)[:3]}")


_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}
"""safetensors' dtype names."""


def _header(f: BinaryIO) -> tuple[int, dict[str, Any]]:
    """`(offset of the data, {name: {"dtype", "shape", "data_offsets"}})` of the open safetensors file `f`:
    an 8-byte little-endian header length, then the JSON header, then the tensors' bytes."""
    size = int.from_bytes(f.read(8), "little")
    header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return 8 + size, header


def _read_rows(f: BinaryIO, start_of_data: int, entry: dict[str, Any], first: int, out: torch.Tensor) -> None:
    """Fill `out` with rows `first`, `first + 1`, ... (dim 0, as many as `out` has) of the stored tensor `entry`."""
    dtype = _DTYPES[entry["dtype"]]
    row = math.prod(entry["shape"][1:]) * torch.empty((), dtype=dtype).element_size()
    target = out if out.dtype == dtype and out.is_contiguous() and out.device.type == "cpu" else \
        torch.empty(out.shape, dtype=dtype)
    if target.numel():
        f.seek(start_of_data + entry["data_offsets"][0] + first * row)
        if f.readinto(target.view(-1).view(torch.uint8).numpy()) != target.numel() * target.element_size():
            raise ValueError(f"{f.name} ends inside one of its tensors")
    if target is not out:
        out.copy_(target)
