"""`make results-textarena` (`benchmarks/results_textarena.py`) at toy sizes on the tiny fixture model: each
stage writes its own unit file holding every evaluation episode's moves in order, a rerun skips finished
units, seat 0's outcome is read as a user would read the game, and the committed results page is what the
committed unit files give."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
pytest.importorskip("textarena")
import coop_report  # noqa: E402
import results_textarena  # noqa: E402
from results import read_block  # noqa: E402


def test_smoke_units_hold_every_move_of_every_episode_and_are_not_run_twice(capsys, tiny_dir, tmp_path):
    out = tmp_path / "t"
    args = ["--smoke", "--model-dir", tiny_dir, "--out", str(out), "--only", "seed0"]
    assert results_textarena.main(args) == 0
    units = out.parent / "t-smoke" / "units" / results_textarena.GAME / "seed0"
    made = {p.stem: json.loads(p.read_text()) for p in units.glob("*.json")}
    assert set(made) == set(results_textarena.CONDITIONS)
    for unit in made.values():
        rows = coop_report.episode_rows({"episodes": {"sampled": unit["episodes"]}})
        assert len(rows) == 8 == unit["episodes_played"]
        for row in rows:
            seats = [seat for seat, _ in row["moves"]]
            assert "agent_0" in seats and all(a != b for a, b in zip(seats, seats[1:]))  # players alternate
            assert row["outcome"] in results_textarena.OUTCOMES
        assert sum(r["rate"] for r in unit["rates"].values()) == pytest.approx(1.0)
    assert made["trained"]["training"]["config"]["episodes"] == 2 * results_textarena.GROUP
    assert made["trained"]["curve"] is not None and made["base"]["training"] is None
    stamp = (units / "trained.json").stat().st_mtime_ns
    capsys.readouterr()
    assert results_textarena.main(args) == 0  # every unit exists: nothing runs again
    assert (units / "trained.json").stat().st_mtime_ns == stamp
    assert f"| trained ({2 * results_textarena.GROUP} games) | 0 |" in capsys.readouterr().out


def test_seat_zeros_outcome_is_a_forfeit_before_it_is_a_loss():
    outcome = results_textarena.outcome
    assert outcome({"agent_0": 1.0, "agent_1": -1.0}, []) == "win"
    assert outcome({"agent_0": 0.0, "agent_1": 0.0}, []) == "draw"
    assert outcome({"agent_0": -1.0, "agent_1": 1.0}, []) == "loss"
    assert outcome({"agent_0": -1.0, "agent_1": 1.0}, ["agent_0"]) == "forfeit"
    assert outcome({"agent_0": 1.0, "agent_1": -1.0}, ["agent_1"]) == "win"  # the bot's forfeit is our win


def test_the_results_page_is_what_the_committed_units_give():
    units = results_textarena.load_units(results_textarena.UNITS)
    assert units, f"no unit files under {results_textarena.UNITS}: the page's table has nothing behind it"
    block = read_block(str(ROOT / "docs" / "results.md"), "results-textarena")
    assert block is not None, "docs/results.md has no results-textarena block"
    assert results_textarena.docs_section(results_textarena.report(units), units).strip() == block.strip()
