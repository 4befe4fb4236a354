"""Fingerprints: what must match between a checkpoint and the run that resumes it, as plain data.

Each is computed from live objects and compared on resume by `learners.checkpoint`:
`data_fingerprint` (task count, sampled dataset rows, epoch size and data order),
`tokenizer_fingerprints`, `plain_config` (the config as JSON compares it) and
`numerics` (the settings float results depend on: a resume under others is not
bit-identical).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
from typing import Any

import torch

__all__ = ["data_fingerprint", "numerics", "plain_config", "tokenizer_fingerprints"]


def data_fingerprint(env: Any, epoch_size: int, order: list[Any]) -> dict[str, Any]:
    """What the resume data check compares: the env's task count, a content hash of sampled dataset rows
    (DatasetEnv; skipped for rows that are not JSON, e.g. images), the epoch size and a hash of `order`,
    the epoch's data order."""
    out: dict[str, Any] = {"num_tasks": env.num_tasks}
    dataset = getattr(env, "dataset", None)  # the rows of a DatasetEnv
    if dataset is not None:
        n = len(dataset)
        picks = sorted({*range(min(n, 8)), *(int(i * (n - 1) / 15) for i in range(16))})
        try:
            blob = json.dumps([n, [dataset[i] for i in picks]], sort_keys=True)
        except (TypeError, ValueError):  # rows that are not JSON: the count and the order still count
            blob = None
        if blob is not None:
            out["sample_sha"] = _sha(blob)
    out["epoch_size"] = epoch_size
    out["order_sha"] = _sha(json.dumps(order))
    return out


def tokenizer_fingerprints(tokenizers: list[Any]) -> list[str]:
    """A hash per tokenizer of its vocabulary, special tokens, chat template and padding/truncation sides."""
    memo: dict[int, str] = {}  # agents often share one tokenizer
    for t in tokenizers:
        if id(t) not in memo:
            memo[id(t)] = _fingerprint(t)
    return [memo[id(t)] for t in tokenizers]


def _fingerprint(tokenizer: Any) -> str:
    vocab = sorted(tokenizer.get_vocab().items())
    blob = json.dumps([
        vocab, sorted(tokenizer.all_special_tokens), getattr(tokenizer, "special_tokens_map", None),
        getattr(tokenizer, "chat_template", None), getattr(tokenizer, "padding_side", None),
        getattr(tokenizer, "truncation_side", None),
    ], default=str, sort_keys=True)
    return _sha(blob)


def plain_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config as JSON compares it: objects by their address-free repr, without `num_agents`."""
    cfg = json.loads(json.dumps(config, default=_stable_repr))
    cfg.pop("num_agents", None)  # the agent count is checked on its own (None and N mean the same run)
    return cfg


def _stable_repr(obj: Any) -> str:
    """repr() without memory addresses, so an object in the config (a logits processor) compares equal."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj))


def numerics(modules: dict[str, torch.nn.Module], mixed_precision: str | None) -> dict[str, Any]:
    """The settings float results depend on, for `modules` trained under autocast `mixed_precision`.

    A resume is bit-identical only when they all match: `torch_num_threads` (the CPU reduction order),
    `device_types` and `dtypes` of the modules, `mixed_precision` (autocast), `deterministic_algorithms`,
    and the torch, transformers and peft versions.
    """
    params = [p for m in modules.values() for p in m.parameters()]
    return {
        "torch_num_threads": torch.get_num_threads(),
        "device_types": sorted({p.device.type for p in params}),
        "dtypes": sorted({str(p.dtype) for p in params}),
        "mixed_precision": mixed_precision,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "torch_version": torch.__version__,
        "transformers_version": _version("transformers"),
        "peft_version": _version("peft"),
    }


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
