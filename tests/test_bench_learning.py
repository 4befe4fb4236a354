"""The learning benchmark's smoke configuration (`benchmarks/learning.py --smoke --no-reference`) runs every
learner on every task and writes results.json, learning.md and learning.png. Slow (about 2 minutes on two
cores): run it with `pytest -m slow`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "learning.py"


@pytest.mark.slow
def test_smoke_run_writes_results_table_and_plot(tiny_dir, tmp_path):
    out = tmp_path / "learning"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--no-reference", "--model", tiny_dir,
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    tasks = {"dense", "sparse", "multiturn", "coord", "hanabi", "tictactoe"}
    assert set(results["tasks"]) == tasks
    runs = results["runs"]
    assert {(r["learner"], r["task"]) for r in runs} == {
        (lr, t) for lr in ("magrpo", "magrpo_global", "magrpo_cross", "magrpo_cf", "iac_separate", "iac_shared", "maac", "marlhf") for t in tasks}
    for r in runs:
        if (r["learner"] == "marlhf" and r["task"] in ("multiturn", "hanabi")) or (
                r["task"] == "tictactoe" and r["learner"] != "magrpo"):
            assert r["error"].startswith("not supported")
            continue
        assert r["error"] is None, r
        assert r["completions"] >= results["budget"] and r["curve"], r
        # The games play invalid_action="random": tiny_hanabi pays 0..10 minus 10 per invalid move (2 moves),
        # tic_tac_toe -1..1 minus 2 per invalid move (at most 5); the dataset tasks pay [0, 1].
        low, high = {"hanabi": (-20.0, 10.0), "tictactoe": (-11.0, 1.0)}.get(r["task"], (0.0, 1.0))
        assert low <= r["final"] <= high, r
    table = (out / "learning.md").read_text()
    assert "| magrpo_cross |" in table and "| coord |" in table.splitlines()[4]
    assert (out / "learning.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
