"""Module weights as safetensors files, one per module: written without aliases, read back checked.

`write_weights` drops tied aliases (an embedding shared with the LM head is
stored once, under its first name) and clones views of one storage
(safetensors refuses shared memory); `read_weights` loads the files and checks
that names, shapes and dtypes match the modules before anything is copied.
"""

from __future__ import annotations

import os

import torch
from safetensors.torch import load_file, save_file

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


def read_weights(directory: str, modules: dict[str, torch.nn.Module]) -> dict[str, dict[str, torch.Tensor]]:
    """Read each module's `directory/{name}.safetensors` (CPU tensors by key), copying nothing into the modules.

    Raises ValueError when a file is unreadable or its names, shapes or dtypes differ from the module's.
    """
    tensors = {}
    for name, module in modules.items():
        try:
            sd = load_file(os.path.join(directory, f"{name}.safetensors"))
        except Exception as exc:
            raise ValueError(f"cannot read the {name} weights ({exc}).") from exc
        own = module.state_dict()
        expected = set(_untie(own))
        if set(sd) != expected:
            missing, extra = sorted(expected - set(sd))[:3], sorted(set(sd) - expected)[:3]
            raise ValueError(f"{name} parameters do not match this model (missing {missing}, unexpected {extra}).")
        for k, v in sd.items():
            if own[k].shape != v.shape or own[k].dtype != v.dtype:
                raise ValueError(f"{name}.{k} is {tuple(v.shape)} {v.dtype}, the model has "
                                 f"{tuple(own[k].shape)} {own[k].dtype}.")
        tensors[name] = sd
    return tensors


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
