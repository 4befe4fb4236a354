"""Module weights as safetensors files, one per module: written without aliases, read back checked.

`write_weights` drops tied aliases (an embedding shared with the LM head is
stored once, under its first name) and clones views of one storage
(safetensors refuses shared memory); `read_weights` loads a file (memory-mapped) and checks
that names, shapes and dtypes match the modules, and that the values are finite, before anything is copied.
"""

from __future__ import annotations

import os

import torch
from safetensors.torch import load_file, save_file

from learners.checkpointing.validation import all_finite

__all__ = ["read_weights", "write_weights"]


def write_weights(modules: dict[str, torch.nn.Module], directory: str) -> dict[str, dict[str, list]]:
    """Write `directory/{name}.safetensors` for each module (on CPU); returns `{name: {key: [shape, dtype]}}`."""
    os.makedirs(directory)
    shapes = {}
    for name, module in modules.items():
        sd = _untie(module.state_dict())
        sd = {k: v.detach().cpu().contiguous() for k, v in sd.items()}
        save_file(_unshare(sd), os.path.join(directory, f"{name}.safetensors"))
        shapes[name] = {k: [list(v.shape), str(v.dtype)] for k, v in sd.items()}
    return shapes


def read_weights(name: str, file: str, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Read the safetensors `file` of module `name` (CPU tensors by key), copying nothing into `module`.

    Raises ValueError when the file does not parse, the names, shapes or dtypes differ from the module's, or
    a tensor holds NaN or infinity where the module's is a parameter or is finite now.
    """
    try:
        sd = load_file(file)
    except Exception as exc:
        raise ValueError(f"cannot read the {name} weights ({exc}).") from exc
    own = module.state_dict()
    expected = set(_untie(own))
    if set(sd) != expected:
        missing, extra = sorted(expected - set(sd))[:3], sorted(set(sd) - expected)[:3]
        raise ValueError(f"{name} parameters do not match this model (missing {missing}, unexpected {extra}).")
    params = {k for k, _ in module.named_parameters()}
    for k, v in sd.items():
        if own[k].shape != v.shape or own[k].dtype != v.dtype:
            raise ValueError(f"{name}.{k} is {tuple(v.shape)} {v.dtype}, the model has "
                             f"{tuple(own[k].shape)} {own[k].dtype}.")
        if not all_finite(v) and (k in params or all_finite(own[k])):
            raise ValueError(f"{name}.{k} holds NaN or infinite values.")
    return sd


def _untie(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop aliases of the same tensor (tied embeddings), keeping the first name; order is kept."""
    seen: set[tuple] = set()
    out = {}
    for k, v in sd.items():
        key = (v.device, v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()),
               v.dtype) if v.numel() else None
        if key is not None and key in seen:
            continue
        if key is not None:
            seen.add(key)
        out[k] = v
    return out


def _unshare(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Clone distinct views of one storage (safetensors refuses shared memory)."""
    count: dict[int, int] = {}
    for v in sd.values():
        if v.numel():
            count[v.untyped_storage().data_ptr()] = count.get(v.untyped_storage().data_ptr(), 0) + 1
    return {k: v.clone() if v.numel() and count[v.untyped_storage().data_ptr()] > 1 else v for k, v in sd.items()}
