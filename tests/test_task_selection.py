"""Held-out task instances (`TextParallelEnv.select_tasks`) and the one-agent and wider variants of the smoke
tasks that `make results` compares a team against."""

from __future__ import annotations

import pytest

from comlrl_env import make
from comlrl_env.benchmark import evaluate_policy
from comlrl_env.testing import check_env
from comlrl_env.testing.task_checks import check_task
from learners.loop import data


def test_select_tasks_renumbers_and_plays_the_source_instance() -> None:
    env = make("smoke/Arithmetic-v1").select_tasks([37, 5, 90])
    assert env.num_tasks == 3 and env.task_subset == (37, 5, 90)
    observations, infos = env.reset(options={"task_index": 0})
    assert "3 + 7" in observations["agent_0"] and infos["agent_0"]["task_index"] == 0
    env.reset(options={"task_index": 2})
    assert (env.task["a"], env.task["b"]) == (9, 0)
    with pytest.raises(ValueError, match="out of range"):
        env.reset(options={"task_index": 3})


def test_seeded_draws_and_training_epochs_stay_inside_the_selection() -> None:
    held_out = set(range(0, 100, 7))
    train = make("smoke/Arithmetic-v1").select_tasks([i for i in range(100) if i not in held_out])
    drawn = set()
    for seed in range(300):
        train.reset(seed=seed)
        drawn.add(10 * train.task["a"] + train.task["b"])
    assert drawn and not drawn & held_out
    order = data.epoch_order(train, seed=0, epoch=0, size=train.num_tasks)
    assert sorted(index for _, index in order) == list(range(train.num_tasks))
    assert train.clone().task_subset == train.task_subset


def test_a_benchmark_of_the_selection_plays_each_held_out_instance_once() -> None:
    seen = []

    def policy(observations, envs):
        seen.extend(10 * env.task["a"] + env.task["b"] for env in envs)
        return [{agent: "0" for agent in obs} for obs in observations]

    metrics = evaluate_policy(make("smoke/Arithmetic-v1").select_tasks(range(90, 100)), policy, episodes=10)
    assert sorted(seen) == list(range(90, 100)) and metrics["episodes"] == 10


@pytest.mark.parametrize("indices, match", [([1, 1], "repeated"), ([100], "0..99"), ([], "0..99"),
                                             ([True], "not int"), (["3"], "not int")])
def test_select_tasks_rejects_bad_indices(indices, match) -> None:
    with pytest.raises(ValueError, match=match):
        make("smoke/Arithmetic-v1").select_tasks(indices)


def test_select_tasks_refuses_procedural_tasks_and_a_second_selection() -> None:
    with pytest.raises(ValueError, match="procedural"):
        make("coop/GuessNumber-v1").select_tasks([0])
    env = make("smoke/Arithmetic-v1").select_tasks([1, 2])
    with pytest.raises(ValueError, match="already"):
        env.select_tasks([0])


def test_arithmetic_max_operand_widens_the_instances() -> None:
    env = make("smoke/Arithmetic-v1", max_operand=19)
    assert env.num_tasks == 400
    env.reset(options={"task_index": 20 * 17 + 3})
    assert env.task["targets"] == {"agent_0": 34, "agent_1": 20}
    _, rewards, *_ = env.step({"agent_0": "34", "agent_1": "23"})
    assert rewards["agent_0"] == pytest.approx((1.0 + 0.7) / 2)
    with pytest.raises(ValueError, match="max_operand"):
        make("smoke/Arithmetic-v1", max_operand=0)


@pytest.mark.parametrize("answer, expected, flagged", [
    ("34 and 20", 1.0, False),
    ("34, then 23", (1.0 + 0.7) / 2, False),
    ("Twice 17 is 34", 0.0, False),  # the first two integers, in order: 17 and 34, each 14+ off
    ("20, 34", (0.0 + 0.0) / 2, False),  # swapped: each is 14 off
    ("34", 0.5, True),  # one number: the sum is missing
    ("I don't know", 0.0, True),
])
def test_arithmetic_alone_scores_both_numbers_on_the_team_scale(answer, expected, flagged) -> None:
    env = make("smoke/Arithmetic-v1", max_operand=19, num_agents=1)
    assert env.possible_agents == ["agent_0"] and env.roles == ["solver"]
    observations, _ = env.reset(options={"task_index": 20 * 17 + 3})
    assert "twice" in observations["agent_0"] and "sum" in observations["agent_0"]
    _, rewards, _, _, infos = env.step({"agent_0": answer})
    assert rewards["agent_0"] == pytest.approx(expected)
    assert ("invalid_action" in infos["agent_0"]) == flagged


def test_format_agreement_alone_pays_the_per_agent_score() -> None:
    alone, team = make("smoke/FormatAgreement-v1", num_agents=1), make("smoke/FormatAgreement-v1")
    alone.reset(options={"task_index": 3})
    team.reset(options={"task_index": 3})
    good, bad = "[blue]", "blue]"
    assert alone.step({"agent_0": good})[1]["agent_0"] == 1.0
    both = team.step({"agent_0": good, "agent_1": bad})[1]["agent_0"]
    alone.reset(options={"task_index": 3})
    assert both == pytest.approx((1.0 + alone.step({"agent_0": bad})[1]["agent_0"]) / 2)


@pytest.mark.parametrize("kwargs", [{"num_agents": 1}, {"max_operand": 19}, {"max_operand": 19, "num_agents": 1}])
def test_arithmetic_variants_pass_the_env_and_task_checks(kwargs) -> None:
    check_env(make("smoke/Arithmetic-v1", **kwargs))

    def solve(env, observations):
        a, b = env.task["a"], env.task["b"]
        if len(env.possible_agents) == 1:
            return {"agent_0": f"{2 * a} {a + b}"}
        return {"agent_0": str(2 * a), "agent_1": str(a + b)}

    means = check_task("smoke/Arithmetic-v1", solve, **kwargs)
    assert means["good"] == 1.0
