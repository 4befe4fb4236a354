"""Team protocols over verifiable question-answer sources (`comlrl_env.qa`): the turns, what each agent sees
and what is paid, checked by hand on our arithmetic and on a user's own dataset; every protocol trains one
epoch with MAGRPO (arithmetic), IAC (a user's dataset) and MAAC (a reasoning-gym dataset) on the tiny model."""

from __future__ import annotations

import pytest

from comlrl_env import make
from comlrl_env.qa import TeamQA, VerifiedQA, arithmetic_questions, tag_answer
from comlrl_env.testing import check_env, check_task
from learners import IAC, MAAC, MAGRPO, IACConfig, MAACConfig, MAGRPOConfig

ROWS = [{"q": "Capital of France?", "a": "Paris"}, {"q": "Capital of Italy?", "a": "Rome"},
        {"q": "Capital of Spain?", "a": "Madrid"}, {"q": "Capital of Peru?", "a": "Lima"}]


def exact(answer: str, row: dict) -> float:
    return float(answer.lower() == row["a"].lower())


def capitals() -> VerifiedQA:
    """A user's own dataset: other keys, an exact-match scorer (a module-level function: envs pickle)."""
    return VerifiedQA(ROWS, score=exact, question="q", name="capitals")


def answer(text: str) -> str:
    return f"Let me think. <answer>{text}</answer>"


def test_tag_answer_takes_the_last_tag():
    assert tag_answer("<answer>1</answer> no, <answer> 2 </answer>") == "2"
    assert tag_answer("2") is None and tag_answer("<answer></answer>") == ""


def test_independent_pays_each_agent_its_own_answer():
    env = TeamQA(arithmetic_questions(), protocol="independent")
    obs, _ = env.reset(options={"task_index": 23})  # 2 + 3
    assert env.task == {"question": "What is 2 + 3?", "answer": "5"} and env.to_move() == ["agent_0", "agent_1"]
    assert obs["agent_0"] == obs["agent_1"] and obs["agent_0"].startswith("What is 2 + 3?\n\n")
    _, rewards, terms, _, infos = env.step({"agent_0": answer("5"), "agent_1": answer("7")})
    assert rewards == {"agent_0": 1.0, "agent_1": pytest.approx(0.8)}  # partial credit: 1 - |7 - 5| / 10
    assert all(terms.values()) and env.metadata["reward_structure"] == "general"


def test_proposer_finalizer_pays_both_the_final_answer_only():
    env = TeamQA(capitals(), protocol="proposer_finalizer")
    obs, infos = env.reset(options={"task_index": 1})
    assert env.to_move() == ["agent_0"] and infos["agent_1"]["to_move"] is False
    assert obs["agent_0"].startswith("Capital of Italy?\n\nPropose a solution")
    proposal = answer("Rome")
    obs, rewards, terms, truncs, _ = env.step({"agent_0": proposal, "agent_1": "ignored"})
    assert rewards == {"agent_0": 0.0, "agent_1": 0.0} and not any(terms.values()) and not any(truncs.values())
    assert env.to_move() == ["agent_1"] and env.response_history["agent_1"] == [""]  # not its turn: ignored
    assert proposal in obs["agent_1"] and obs["agent_1"].startswith("Capital of Italy?\n\nA teammate proposed:")
    _, rewards, terms, _, _ = env.step({"agent_0": "ignored", "agent_1": answer("Milan")})
    assert rewards == {"agent_0": 0.0, "agent_1": 0.0} and all(terms.values())  # a good proposal, a bad final
    env.reset(options={"task_index": 1})
    env.step({"agent_0": answer("Milan")})
    _, rewards, _, _, _ = env.step({"agent_1": answer("Rome")})
    assert rewards == {"agent_0": 1.0, "agent_1": 1.0}  # corrected: the joint reward of the final answer
    assert env.metadata["reward_structure"] == "cooperative"


@pytest.mark.parametrize("mode, expected", [("joint", {"agent_0": 0.5, "agent_1": 0.5, "agent_2": 0.5}),
                                            ("per_agent", {"agent_0": 1.0, "agent_1": 0.5, "agent_2": 0.0})])
def test_debate_shows_each_the_others_answers_and_pays_the_last_round(mode, expected):
    env = TeamQA(arithmetic_questions(), protocol="debate", num_agents=3, rounds=2, reward=mode)
    assert env.num_turns == 3
    env.reset(options={"task_index": 23})
    first = {"agent_0": answer("5"), "agent_1": answer("6"), "agent_2": answer("9")}
    obs, rewards, terms, _, _ = env.step(first)
    assert set(rewards.values()) == {0.0} and not any(terms.values())
    assert obs["agent_1"].index(f"Your previous answer:\n{first['agent_1']}") > 0
    assert f"agent_0:\n{first['agent_0']}" in obs["agent_1"] and f"agent_2:\n{first['agent_2']}" in obs["agent_1"]
    assert f"agent_1:\n" not in obs["agent_1"]
    _, rewards, _, _, _ = env.step({"agent_0": answer("1"), "agent_1": answer("1"), "agent_2": answer("1")})
    assert set(rewards.values()) == {0.0}  # an earlier round: not paid, however good or bad
    _, rewards, terms, _, _ = env.step({"agent_0": answer("5"), "agent_1": answer("10"), "agent_2": "no tags"})
    assert rewards == pytest.approx(expected) and all(terms.values())


def test_a_missing_answer_and_a_scorer_that_raises_are_flagged_answers_not_crashes():
    def fragile(answer, row):
        return float(int(answer) == len(row["a"]))  # raises on text that is not a number

    env = TeamQA(VerifiedQA(ROWS, score=fragile, question="q"), protocol="independent")
    env.reset(options={"task_index": 0})
    _, rewards, _, _, infos = env.step({"agent_0": "Paris", "agent_1": answer("Paris")})
    assert rewards == {"agent_0": 0.0, "agent_1": 0.0}
    assert infos["agent_0"]["invalid_action"] == "no <answer>...</answer> in the completion"
    assert infos["agent_1"]["invalid_action"].startswith("the scorer raised ValueError")


def test_a_floor_the_scorer_pays_any_text_is_taken_off():
    source = VerifiedQA(ROWS, score=lambda answer, row: 1.0 if answer == row["a"] else 0.2, question="q")
    assert source.floor(0) == 0.2
    assert source.reward(answer("Paris"), 0) == (1.0, None) and source.reward(answer("Lyon"), 0) == (0.0, None)


@pytest.mark.parametrize("protocol", ["independent", "proposer_finalizer", "debate"])
@pytest.mark.parametrize("source", ["arithmetic", "capitals"])
def test_every_protocol_passes_the_env_and_task_checks(protocol, source):
    def build():
        return TeamQA(arithmetic_questions(3) if source == "arithmetic" else capitals(), protocol=protocol)

    check_env(build)
    key = "answer" if source == "arithmetic" else "a"
    means = check_task(build(), good_policy=lambda env, obs: {a: answer(env.task[key]) for a in obs})
    assert means["good"] == 1.0


def test_arithmetic_is_registered_with_every_protocol():
    env = make("qa/Arithmetic-v0", protocol="debate", max_operand=3)
    assert env.num_tasks == 16 and env.metadata["name"] == "qa/Arithmetic[debate]"


def test_bad_arguments_fail_with_the_fix():
    with pytest.raises(ValueError, match="protocol must be one of independent, proposer_finalizer, debate"):
        TeamQA(capitals(), protocol="vote")
    with pytest.raises(ValueError, match="'proposer_finalizer' has 2 agents"):
        TeamQA(capitals(), protocol="proposer_finalizer", num_agents=3)
    with pytest.raises(TypeError, match=r"wrap a dataset with VerifiedQA\(rows, score=...\)"):
        TeamQA(ROWS)


# ----- the learners ---------------------------------------------------------------------------------------------

FAST = dict(num_train_epochs=1, episodes_per_epoch=2, max_new_tokens=6, temperature=1.0, top_p=1.0, eval_interval=0,
            verbose=False)


@pytest.mark.parametrize("protocol", ["independent", "proposer_finalizer", "debate"])
@pytest.mark.parametrize("learner", ["magrpo", "iac", "maac"])
def test_each_protocol_trains_an_epoch_with_each_learner(tiny_dir, learner, protocol):
    if learner == "maac":
        env = make("reasoning_gym/basic_arithmetic-v0", size=8, seed=0, protocol=protocol)
    else:
        env = TeamQA(capitals() if learner == "iac" else arithmetic_questions(3), protocol=protocol)
    if learner == "magrpo":
        run = MAGRPO(env=env, agent_model=tiny_dir, num_agents=2,
                     args=MAGRPOConfig(**FAST, num_generations=2, rollout_buffer_size=2))
    elif learner == "iac":
        run = IAC(env=env, agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, args=IACConfig(**FAST))
    else:
        run = MAAC(env=env, agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, args=MAACConfig(**FAST))
    metrics = run.learn()
    assert run.env_steps > 0 and metrics
