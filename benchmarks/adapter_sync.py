"""Where one LoRA adapter's sync into an in-process vLLM engine spends its time (issue 42), before and after.

    PYTHONPATH=. .venv-vllm/bin/python benchmarks/adapter_sync.py --model benchmarks/_work/qwen31m [--repeats 20]

One PEFT adapter (LoRA r=8 on q/k/v/o, as `benchmarks/adapters.py`) on the model, one engine with LoRA; each
repeat changes the adapter's tensors and syncs them, and each phase is timed on its own. Prints the median
seconds per phase over the repeats, per adapter:

- before (main up to issue 42): gather the adapter's tensors from `state_dict()`, PEFT's `save_pretrained`
  into a temp folder (split below into its model card, its config, its state dict and its tensors file, each
  timed apart in a fresh scratch folder), `add_lora` under a new id, `remove_lora` of the old one, `rmtree`
  of its folder;
- after (`push_adapter`): gather (`adapter_tensors`), write the tensors file into the adapter's folder in
  `/dev/shm` (`write_adapter_tensors`), `add_lora` with `load_inplace` under the adapter's id, remove the file;
- the call cost: `add_lora` of an id the engine holds (no load), the least one engine call costs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from adapters import LORA  # noqa: E402

NAME = "agent_0"  # a named adapter, as the learners make (PEFT nests its save_pretrained folder)


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a local HF model folder (benchmarks/make_models.py)")
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm.lora.request import LoRARequest

    from learners.rollout.backends import vllm_engines as ve
    from learners.rollout.backends.adapter_folders import adapter_scratch

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(args.model)
    peft = get_peft_model(AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32),
                          LoraConfig(**LORA), adapter_name=NAME)
    spec = ve.EngineSpec(peft.get_base_model().config, tok, torch.float32, adapters=1, lora_rank=LORA["r"],
                         logprobs_mode="processed_logprobs", memory_share=0.3, sleep_mode=False,
                         engine_args={"kv_cache_memory_bytes": 64 << 20, "max_model_len": 1024})
    engine = ve.acquire_engine(spec)
    ve.push_weights(engine, ve.base_weights(peft).items())
    lora_params = [v for k, v in peft.named_parameters() if "lora_" in k]

    def change() -> None:
        with torch.no_grad():
            for v in lora_params:
                v.add_(torch.randn_like(v), alpha=1e-3)

    rows: dict[str, list[float]] = {}

    def add(key: str, seconds: float) -> None:
        rows.setdefault(key, []).append(seconds)

    # ----- before: save_pretrained, a new id each time, the old one removed -----
    root, scratch, ids = tempfile.mkdtemp(), tempfile.mkdtemp(), itertools.count(10_000)
    old = None
    with torch.no_grad():
        for _ in range(args.repeats + 1):  # the first round warms up
            change()
            lora_id = next(ids)
            directory = os.path.join(root, f"{NAME}-{lora_id}")
            t = {}
            t["gather"], adapter = timed(lambda: {k: ve.whole(v) for k, v in peft.state_dict().items()
                                                  if "lora_" in k and f".{NAME}." in k})
            t["save_pretrained"], _ = timed(peft.save_pretrained, directory, selected_adapters=[NAME],
                                            state_dict=adapter)
            card = os.path.join(scratch, str(lora_id))  # a fresh folder, as save_pretrained's (no README yet)
            t["  of which the model card"], _ = timed(peft.create_or_update_model_card, card)
            t["  of which the config"], _ = timed(peft.peft_config[NAME].save_pretrained, card)
            t["  of which PEFT's state dict"], named = timed(get_peft_model_state_dict, peft, state_dict=adapter,
                                                             adapter_name=NAME)
            t["  of which the tensors file"], _ = timed(save_file, named, os.path.join(card, "adapter.safetensors"))
            nested = os.path.join(directory, NAME)
            request = LoRARequest(f"{NAME}-{lora_id}", lora_id, nested if os.path.isdir(nested) else directory)
            with ve.kept_process_state():
                t["add_lora (new id)"], _ = timed(engine.llm_engine.add_lora, request)
                t["remove_lora (old id)"], _ = timed(engine.llm_engine.remove_lora, old.lora_int_id) if old \
                    else (0.0, None)
            t["rmtree (old folder)"], _ = timed(shutil.rmtree, os.path.join(root, old.lora_name)) if old \
                else (0.0, None)
            t["total"] = sum(v for k, v in t.items() if not k.startswith("  "))
            if old is not None:
                for k, v in t.items():
                    add(f"before: {k}", v)
            old = request
        engine.llm_engine.remove_lora(old.lora_int_id)
    shutil.rmtree(root)
    shutil.rmtree(scratch)

    # ----- after: the tensors only, in /dev/shm, reloaded in place under one id -----
    root = tempfile.mkdtemp(dir=adapter_scratch())
    request = ve.push_adapter(engine, peft, NAME, root)
    inplace = LoRARequest(request.lora_name, request.lora_int_id, request.lora_path, load_inplace=True)
    with torch.no_grad():
        for i in range(args.repeats + 1):
            change()
            t = {}
            t["gather"], adapter = timed(ve.adapter_tensors, peft, NAME)
            t["write tensors"], path = timed(ve.write_adapter_tensors, request.lora_path, adapter)
            with ve.kept_process_state():
                t["add_lora (load_inplace)"], _ = timed(engine.llm_engine.add_lora, inplace)
            t["remove the tensors file"], _ = timed(os.remove, path)
            with ve.kept_process_state():
                t["add_lora of a held id (call only)"], _ = timed(engine.llm_engine.add_lora, request)
            t["total"] = sum(t[k] for k in ("gather", "write tensors", "add_lora (load_inplace)",
                                            "remove the tensors file"))
            t["push_adapter (all of it)"], _ = timed(ve.push_adapter, engine, peft, NAME, root, request)
            if i:
                for k, v in t.items():
                    add(f"after: {k}", v)
    shutil.rmtree(root)

    size = sum(v.numel() * v.element_size() for v in lora_params)
    print(f"{os.path.basename(os.path.normpath(args.model))}: one adapter of {len(lora_params)} tensors, "
          f"{size / 1e6:.2f} MB; adapter folder in {adapter_scratch() or tempfile.gettempdir()}; "
          f"median ms of {args.repeats} syncs")
    for key, values in rows.items():
        print(f"  {key:<48} {1e3 * statistics.median(values):8.2f}")
    print(json.dumps({k: round(1e3 * statistics.median(v), 3) for k, v in rows.items()}))
    ve.shutdown_engines()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
