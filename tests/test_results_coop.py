"""`make results-coop` (`benchmarks/results_coop.py`) at toy sizes on the tiny fixture model: every stage runs
(one work unit in a subprocess, as `--jobs` does) and writes its own unit file, every row has an equal budget
of sampled completions, a rerun runs only the units whose file is missing, and the docs are rebuilt from the
unit files alone; plus the split and the statistics by hand."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "results_coop.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
import coop_report  # noqa: E402
import results  # noqa: E402
import results_coop  # noqa: E402


def run(tiny_dir: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--model-dir", tiny_dir, "--out", str(out),
                           "--device", "cpu", *extra],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)


def run_here(capsys: pytest.CaptureFixture, tiny_dir: str, out: Path, *extra: str) -> str:
    """The same command in this process (one process start less; `--jobs 1`: the stages run right here);
    its printout."""
    capsys.readouterr()
    assert results_coop.main(["--smoke", "--model-dir", tiny_dir, "--out", str(out), "--device", "cpu", *extra]) == 0
    return capsys.readouterr().out


FEW = ("team-base", "team-maac-lora", "alone-full-base", "alone-own-base", "alone-own-magrpo-lora")
"""The default suite's stages (one task, both seeds): every view, a team trained with a critic (MAAC: the
critic's branch) and a lone agent trained with MAGRPO, and three comparisons between rows of two seeds each.
The whole grid (both tasks, all eight conditions, IAC and the team's MAGRPO too) is the `slow` test below."""


def check_pipeline(capsys: pytest.CaptureFixture, tiny_dir: str, tmp_path: Path, only: list[str],
                   rows_expected: list[tuple[str, str]], seeds_of: dict[str, list[int]], lost_key: str) -> None:
    """Run two base stages of secretpair/seed0 as one work unit of a `--jobs 2` subprocess, then `only` at
    --seeds 0 1 in this process; check the unit files, rows, comparisons and report; delete `lost_key`'s unit
    and check that only it runs again; rebuild the docs from the unit files alone."""
    out = tmp_path / "r-smoke"
    units = out / "units"  # --smoke keeps the units out of the repo
    part = run(tiny_dir, tmp_path / "r", "--seeds", "0", "--jobs", "2", "--only", "secretpair/seed0/team-base",
               "secretpair/seed0/alone-own-base")  # one work unit: a subprocess
    assert part.returncode == 0, part.stdout[-2000:] + part.stderr[-4000:]
    assert "process of 2 stage(s) exited 0" in part.stdout
    assert (out / "logs" / "secretpair__seed0__team-base.log").is_file()
    assert sorted(p.relative_to(units).as_posix() for p in units.rglob("*.json")) == [
        "secretpair/seed0/alone-own-base.json", "secretpair/seed0/team-base.json"]
    n = sum(len(seeds_of[t]) for t, _ in rows_expected)  # stages
    printed = run_here(capsys, tiny_dir, tmp_path / "r", "--seeds", "0", "1", "--only", *only)
    assert f"2 of {n} stages done before" in printed  # the first run's two
    data = json.loads((out / "results.json").read_text())
    rows = data["rows"]
    assert [(r["task"], r["name"]) for r in rows] == rows_expected
    for r in rows:
        seeds = seeds_of[r["task"]]
        per_seed = 16 if r["view"] == "own" else 8  # the own-part agent: each instance with each part shown
        assert r["seeds"] == seeds and r["sampled"]["episodes"] == r["greedy"]["episodes"] == per_seed * len(seeds)
        assert (r["sampled"]["ci95_seeds"] is None) == (len(seeds) == 1)  # a t-interval needs 2 seeds
        assert r["completions"] == (None if r["learner"] is None else 64)  # equal budget: team and lone alike
        assert (r["used_partner_info_chance"] is None) == (r["view"] != "team")
    present = set(rows_expected)
    assert {(c["a"], c["b"]) for c in data["comparisons"]} == {
        (a, b) for a, b in coop_report.COMPARISONS if {("secretpair", a), ("secretpair", b)} <= present}
    unit_files = sorted(units.rglob("*.json"))
    assert len(unit_files) == n
    for path in unit_files:
        e = json.loads(path.read_text())
        assert path.relative_to(units).as_posix() == f"{e['task']}/seed{e['seed']}/{e['name']}.json"
        assert len(e["examples"]) == results_coop.EXAMPLES and e["settings"]["budget"] == 64
        assert e["settings"]["lr_schedule"] == results_coop.LR_SCHEDULE
        assert len(e["examples"][0]["turns"]) == (2 if e["view"] == "team" else 1)
        assert set(e["examples"][0]["turns"][0]) == ({"agent_0", "agent_1"} if e["view"] == "team" else {"agent_0"})
        assert (e["curve"] is None) == (e["learner"] is None) and e["seconds_train"] >= 0
        assert path.stat().st_size < 100_000  # small JSON, no weights
    md = (out / "results.md").read_text()
    assert "| secretpair | team-maac-lora |" in md and "| secretpair | alone-own-base |" in md
    assert "team-maac-lora − alone-own-magrpo-lora" in md
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    trained = sorted((out / "runs").glob("*/*/*/final/done.json"))
    assert len(trained) == sum(len(seeds_of[t]) for t, c in rows_expected if results_coop.BY_NAME[c].learner)
    assert not list((out / "runs").glob("*/*/*/checkpoints"))
    # a killed unit: only its file is missing, so only it runs again
    lost = units / (lost_key + ".json")
    lost.unlink()
    written = {p: p.stat().st_mtime_ns for p in unit_files if p != lost}
    again = run_here(capsys, tiny_dir, tmp_path / "r", "--seeds", "0", "1", "--only", *only)
    assert f"{n - 1} of {n} stages done before; running 1" in again and lost.is_file()
    assert {p: p.stat().st_mtime_ns for p in written} == written  # every other unit reused, nothing redone
    # the docs come from the unit files alone: without the weights, runs and report, on a page of their own
    for gone in ("runs", "logs", "results.json", "results.md", "curves.png"):
        shutil.rmtree(out / gone) if (out / gone).is_dir() else (out / gone).unlink()
    page = tmp_path / "docs" / "results.md"
    page.parent.mkdir()
    page.write_text("# Results\n\nhand-written\n")
    assert results_coop.main(["--docs-only", "--docs", "--units", str(units), "--out", str(tmp_path / "rebuilt"),
                              "--docs-page", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Results\n\nhand-written\n") and "<!-- results-coop:begin -->" in text
    block = text.split("<!-- results-coop:begin -->")[1]
    assert not re.search(r"^#{1,2} ", block, re.M)  # the page's sections own the top levels; the block nests under
    assert max(map(len, block.split("```")[1].splitlines())) <= coop_report.CODE_WIDTH  # the site cuts long code
    assert f"lr {results_coop.LR} {results_coop.LR_SCHEDULE};" in text
    assert "seeds 0 / 1;" in text and "sampled 64 completions" in text
    assert (page.parent / "img" / "results-coop.png").is_file()
    assert (tmp_path / "rebuilt" / "results.md").read_text() in text
    timeless = lambda rows: [{k: v for k, v in r.items() if not k.startswith("minutes")} for r in rows]  # noqa: E731
    # the same numbers but the wall times (the lost unit ran again)
    assert timeless(json.loads((tmp_path / "rebuilt" / "results.json").read_text())["rows"]) == timeless(rows)


def test_smoke_run_writes_one_file_per_unit_resumes_and_rebuilds_the_docs_from_the_units(capsys, tiny_dir,
                                                                                         tmp_path):
    """One task, two seeds, `FEW` conditions: 10 stages, 4 trainings."""
    check_pipeline(capsys, tiny_dir, tmp_path, [f"secretpair/{c}" for c in FEW], [("secretpair", c) for c in FEW],
                   {"secretpair": [0, 1]}, "secretpair/seed1/team-base")


@pytest.mark.slow
def test_smoke_run_of_every_stage_writes_one_file_per_unit_resumes_and_rebuilds_the_docs(capsys, tiny_dir,
                                                                                           tmp_path):
    """All 24 stages (both seeds of secretpair, seed 0 of picnic; 15 trainings): every learner's branch and
    every comparison, including a row of one seed beside rows of two."""
    check_pipeline(capsys, tiny_dir, tmp_path, ["secretpair", "seed0"],
                   [(t, c.name) for t in results_coop.TASKS for c in results_coop.CONDITIONS],
                   {"secretpair": [0, 1], "picnic": [0]}, "picnic/seed0/team-base")


@pytest.mark.parametrize("task", list(results_coop.TASKS))
def test_held_out_instances_are_the_same_in_every_view_and_never_trained_on(task):
    held_out = {v: results_coop.task_env(task, v, "held_out") for v in ("team", "full", "own")}
    train = results_coop.task_env(task, "team", "train")
    assert held_out["team"].num_tasks == results.EVAL_EPISODES
    assert held_out["team"].task_subset == held_out["full"].task_subset
    # the own view's set has each instance once per shown part: own indices 2h, 2h + 1 are instance h
    assert held_out["own"].task_subset == tuple(2 * h + p for h in held_out["team"].task_subset for p in (0, 1))
    own_train = results_coop.task_env(task, "own", "train")
    assert {i // 2 for i in own_train.task_subset} == set(train.task_subset)
    assert not set(train.task_subset) & set(held_out["team"].task_subset)
    assert len(train.task_subset) + results.EVAL_EPISODES == train.metadata["num_tasks"]
    assert [len(e.possible_agents) for e in held_out.values()] == [2, 1, 1]


def test_over_seeds_and_differences_by_hand():
    a = coop_report.over_seeds([{"reward_mean": 0.2, "reward_std": 0.1, "reward_ci95": 0.0, "episodes": 100},
                                 {"reward_mean": 0.4, "reward_std": 0.3, "reward_ci95": 0.0, "episodes": 100}])
    assert a["mean"] == pytest.approx(0.3)
    assert a["ci95_seeds"] == pytest.approx(12.706 * math.sqrt(0.02) / math.sqrt(2))  # sd of (0.2, 0.4)
    # pooled: (99 * 0.01 + 99 * 0.09 + 100 * 0.01 + 100 * 0.01) / 199
    assert a["pooled_std"] ** 2 == pytest.approx((99 * 0.1 + 200 * 0.01) / 199)
    assert a["pooled_ci95"] == pytest.approx(1.96 * a["pooled_std"] / math.sqrt(200))
    b = coop_report.over_seeds([{"reward_mean": 0.1, "reward_std": 0.1, "reward_ci95": 0.0, "episodes": 100},
                                 {"reward_mean": 0.2, "reward_std": 0.1, "reward_ci95": 0.0, "episodes": 100}])
    d = coop_report.difference(a, b)  # paired by seed: (0.1, 0.2)
    assert d["mean"] == pytest.approx(0.15)
    assert d["ci95_seeds"] == pytest.approx(12.706 * math.sqrt(0.005) / math.sqrt(2))
    assert d["verdict"] == "within CI" and d["intervals_apart"] == "no" and d["seeds"] == [0, 1]
    # rows with different seeds pair on the seeds both have: here seed 1 alone, judged on its episodes
    late = coop_report.over_seeds([{"reward_mean": 0.1, "reward_std": 0.1, "reward_ci95": 0.02, "episodes": 100}],
                                  seeds=[1])
    d = coop_report.difference(a, late)
    assert d["seeds"] == [1] and d["mean"] == pytest.approx(0.4 - 0.1) and d["ci95_seeds"] is None
    assert d["ci95"] == pytest.approx(math.hypot(0.0, 0.02)) and d["verdict"] == "above"  # 0.3 ± 0.02
    assert d["pooled"] == pytest.approx(0.3 - 0.1)  # every episode of each row, for reference
    assert d["intervals_apart"] == "no"  # a's own interval over its 2 seeds is wide
    other = coop_report.over_seeds([{"reward_mean": 0.1, "reward_std": 0.1, "reward_ci95": 0.02, "episodes": 100}],
                                   seeds=[2])
    assert coop_report.difference(late, other) is None  # no seed in common: no comparison


def test_a_row_of_one_seed_is_judged_on_its_evaluations_interval_even_when_every_episode_scored_alike():
    # Picnic's IAC team (seed 0) scored 0 in all 100 episodes: the pooled normal interval is 0.000 wide, the
    # evaluation's own (Wilson, for rewards all 0 or 1) is 0.037. The untrained team over 5 seeds:
    # 0.012 +- 2.776 * 0.00447 / sqrt(5) = 0.012 +- 0.0056, so a zero-width interval would sit below it.
    zero = coop_report.over_seeds([{"reward_mean": 0.0, "reward_std": 0.0, "reward_ci95": 0.037, "episodes": 100}])
    base = coop_report.over_seeds([{"reward_mean": m, "reward_std": 0.1, "reward_ci95": 0.012, "episodes": 100}
                                   for m in (0.01, 0.01, 0.02, 0.01, 0.01)])
    assert zero["pooled_ci95"] == 0.0 and base["mean"] - base["ci95_seeds"] > 0.006
    d = coop_report.difference(zero, base)
    assert d["verdict"] == "within CI" and d["intervals_apart"] == "no"


def test_units_made_before_the_lr_schedule_setting_read_as_constant(tmp_path):
    old, new = tmp_path / "secretpair" / "seed0", tmp_path / "secretpair" / "seed1"
    for folder, settings in ((old, {"lr": 5e-4}), (new, {"lr": 1e-3, "lr_schedule": "linear"})):
        folder.mkdir(parents=True)
        (folder / "team-base.json").write_text(json.dumps({"settings": settings}))
    units = results_coop.load_units(str(tmp_path))
    assert units["secretpair/seed0/team-base"]["settings"] == {"lr": 5e-4, "lr_schedule": "constant"}
    assert units["secretpair/seed1/team-base"]["settings"] == {"lr": 1e-3, "lr_schedule": "linear"}


def test_only_picks_stages_by_the_parts_of_their_keys():
    key = "secretpair/seed1/team-iac-lora"
    assert all(results_coop.selected(key, [o]) for o in ("secretpair", "seed1/team-iac-lora", key))
    assert not any(results_coop.selected(key, [o]) for o in ("picnic", "seed0", "secretpair/team-base"))


def test_replace_block_keeps_the_rest_of_the_page(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("# Title\n\nhand-written\n")
    results.replace_block(str(page), "coop", "table v1")
    results.replace_block(str(page), "other", "B")
    results.replace_block(str(page), "coop", "table v2")
    assert page.read_text() == ("# Title\n\nhand-written\n\n<!-- coop:begin -->\ntable v2\n<!-- coop:end -->\n\n"
                                "<!-- other:begin -->\nB\n<!-- other:end -->\n")
