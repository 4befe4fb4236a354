"""`make results-reasoning` (`benchmarks/results_reasoning.py`) at toy sizes on the tiny fixture model: each
stage writes its own unit file with every evaluation episode's texts, every trained row samples the same
budget of completions, a rerun skips finished units; what the finalizer did with the proposal is counted by
hand; and the committed results page is what the committed unit files give."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
pytest.importorskip("reasoning_gym")
import results_reasoning  # noqa: E402
from results import read_block  # noqa: E402

from comlrl_env.qa import VerifiedQA, plain_answer  # noqa: E402


def test_smoke_units_hold_every_episode_an_equal_budget_and_are_not_run_twice(capsys, tiny_dir, tmp_path):
    out = tmp_path / "r"
    args = ["--smoke", "--model-dir", tiny_dir, "--out", str(out), "--only", "syllogism/seed0"]
    assert results_reasoning.main(args) == 0
    units = out.parent / "r-smoke" / "units" / "syllogism" / "seed0"
    made = {p.stem: json.loads(p.read_text()) for p in units.glob("*.json")}
    assert set(made) == {c.name for c in results_reasoning.CONDITIONS}
    for name, unit in made.items():
        episodes = unit["episodes"]
        assert len(episodes) == 8 and all(set(e["sent"]) == {"agent_0", "agent_1"} for e in episodes)
        turns = 2 if unit["protocol"] != "independent" else 1
        assert all(len(texts) == turns for e in episodes for texts in e["sent"].values())
        if unit["trained"]:  # 32 completions in all, whichever protocol: 2 agents x 16
            assert unit["training"]["completions_per_agent"] == 16, name
    assert "finalizer_action" in made["proposer_finalizer"]["episodes"][0]
    stamp = (units / "debate.json").stat().st_mtime_ns
    capsys.readouterr()
    assert results_reasoning.main(args) == 0  # every unit exists: nothing runs again
    assert (units / "debate.json").stat().st_mtime_ns == stamp
    assert "| syllogism | proposer_finalizer | 0 |" in capsys.readouterr().out


def test_the_finalizer_copies_corrects_spoils_or_changes_the_proposal():
    source = VerifiedQA([{"question": "2 + 3?", "answer": "5"}], extract=plain_answer,
                        score=lambda answer, item: float(answer == item["answer"]))
    action = results_reasoning.finalizer_action
    assert action(source, 0, "5.", " 5") == "copied"
    assert action(source, 0, "4", "5") == "corrected"
    assert action(source, 0, "5", "6") == "spoiled"
    assert action(source, 0, "4", "6") == "changed"


def test_the_results_page_is_what_the_committed_units_give():
    units = results_reasoning.load_units(results_reasoning.UNITS)
    assert units, f"no unit files under {results_reasoning.UNITS}: the page's table has nothing behind it"
    block = read_block(str(ROOT / "docs" / "results.md"), "results-reasoning")
    assert block is not None, "docs/results.md has no results-reasoning block"
    assert results_reasoning.docs_section(results_reasoning.report(units), units).strip() == block.strip()
