"""`make gpu-check` (benchmarks/gpu_check.py): its CPU path on a tiny model writes every row, and without vLLM
one line says why its rows are skipped."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from procs import child_env

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
sys.path.insert(0, str(SCRIPT.parent))

import gpu_check  # noqa: E402


def test_without_vllm_one_line_says_why_its_rows_are_skipped(tmp_path):
    python = tmp_path / "python"  # a Python that cannot import vllm, whichever venv runs this
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'raise ModuleNotFoundError(\"no vllm here\")'\n")
    python.chmod(0o755)
    found, line = gpu_check.vllm_python(str(python))
    assert found is None and line.startswith(f"vLLM rows skipped: {python} cannot import vllm") and "no vllm" in line


@pytest.mark.vllm
def test_the_cpu_path_writes_every_row(tmp_path):
    """HF and vLLM for 4 LoRA agents (the 1-agent rows, one full-weights engine, left out to save CI time), each in a
    fresh process: numbers in every row, and the engine samples what the trainer holds (ratio 1)."""
    pytest.importorskip("vllm")
    out = tmp_path / "gpu-check.md"
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--out", str(out), "--work", str(tmp_path),
                           "--vllm-python", sys.executable, "--row-timeout", "300", "--agents", "4"],
                          capture_output=True, text=True, env=child_env(VLLM_LOGGING_LEVEL="ERROR"), timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert "- model: a tiny random Qwen2 (smoke run)" in text and "- vLLM 0." in text
    rows = {tuple(m.groups()[:2]): m.group(3) for m in re.finditer(r"^\| (hf|vllm) \| (1|4 LoRA) \| (.*)$", text, re.M)}
    assert sorted(rows) == [("hf", "4 LoRA"), ("vllm", "4 LoRA")], text
    for key, cells in rows.items():
        tokens, epoch, gpu, sync, ratio = [c.strip() for c in cells.split("|")[:5]]
        assert float(tokens.replace(",", "")) > 0 and float(epoch) > 0 and (gpu == "-" or float(gpu) > 0), (key, cells)
        if key[0] == "vllm":
            assert float(sync) > 0 and abs(float(ratio) - 1) < 1e-3, (key, cells)
