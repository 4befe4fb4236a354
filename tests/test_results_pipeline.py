"""`make results` (`benchmarks/results.py`) at toy sizes on the tiny fixture model: every training, every
held-out evaluation row, the table and the curves are written, and a second invocation reuses every stage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "results.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
import results  # noqa: E402


def run(tiny_dir: str, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--model", tiny_dir, "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)


def test_smoke_run_writes_every_row_and_resumes(tiny_dir, tmp_path):
    proc = run(tiny_dir, tmp_path / "r")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = tmp_path / "r-smoke"
    rows = json.loads((out / "results.json").read_text())["rows"]
    trained = {(r["task"], r["row"]) for r in rows if "completions" in r}
    assert trained == {(t.task, t.name) for t in results.TRAININGS}
    assert {("hanabi", "scripted: random-bot"), ("arithmetic", "base alone"), ("format", "base pair")} <= {
        (r["task"], r["row"]) for r in rows}
    for r in rows:
        assert r["sampled"]["episodes"] == 8 and r["greedy"]["episodes"] == 8
    for t in results.TRAININGS:
        assert (out / "runs" / t.key / "final" / "done.json").is_file()
        assert not (out / "runs" / t.key / "checkpoints").exists()
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| arithmetic | magrpo-lora |" in (out / "results.md").read_text()
    stages = sorted([*(out / "evals").glob("*.json"), *(out / "runs").glob("*/*/final/done.json")])
    assert len(stages) == len(results.TRAININGS) + len(list((out / "evals").glob("*.json")))
    written = [p.stat().st_mtime_ns for p in stages]
    again = run(tiny_dir, tmp_path / "r")
    assert again.returncode == 0, again.stderr[-4000:]
    assert [p.stat().st_mtime_ns for p in stages] == written  # every stage reused, nothing redone
    assert json.loads((out / "results.json").read_text())["rows"] == rows


def test_held_out_instances_never_meet_the_training_ones():
    for task in results.TASKS.values():
        train, held_out = task.env("train"), task.env("held_out")
        if train.num_tasks is None:
            continue
        assert held_out.num_tasks == results.EVAL_EPISODES
        assert not set(train.task_subset) & set(held_out.task_subset)
        assert len(train.task_subset) + len(held_out.task_subset) == train.metadata["num_tasks"]
        alone = task.env("held_out", alone=True)
        assert alone.task_subset == held_out.task_subset and len(alone.possible_agents) == 1


@pytest.mark.parametrize("trained, base, expected", [
    ((0.6, 0.05), (0.4, 0.05), "up"),
    ((0.5, 0.06), (0.4, 0.05), ""),  # 0.44 < 0.45: the intervals touch
    ((0.2, 0.05), (0.4, 0.05), "down"),
])
def test_ci_apart_compares_the_two_intervals(trained, base, expected):
    as_metrics = lambda m: {"reward_mean": m[0], "reward_ci95": m[1]}  # noqa: E731
    assert results.apart(as_metrics(trained), as_metrics(base)) == expected
