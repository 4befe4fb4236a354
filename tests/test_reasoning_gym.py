"""reasoning-gym's datasets as environments (`comlrl_env.qa.reasoning_gym`): every dataset it registers is
either offered and passes `check_env` and `check_task` (its oracle answers score 1, nothing else scores above
0, random words in answer tags included) or refused with its reason; items stay Python objects; a scorer that
raises costs one flagged answer."""

from __future__ import annotations

import builtins
import pickle
import random
import re
import sys

import pytest

from comlrl_env import make
from comlrl_env.qa.reasoning_gym import REFUSED
from comlrl_env.registry import EnvNotFound
from comlrl_env.testing import check_env, check_task
from comlrl_env.testing.task_checks import _play

pytest.importorskip("reasoning_gym")
from reasoning_gym.factory import DATASETS, create_dataset  # noqa: E402

WORDS = "apple river stone cloud seven blue quickly under table window".split()
OFFERED = sorted(set(DATASETS) - set(REFUSED))
SAMPLE = {"basic_arithmetic", "simple_equations", "knights_knaves", "shortest_path", "propositional_logic",
          "prime_factorization"}
"""Checked in the default suite; the others carry the `suites` marker (`make test-suites`, which .ci/run runs)."""


def oracle(env, obs):
    return {a: f"<answer>{env.task['answer']}</answer>" for a in obs}


def tagged_words(env, obs):
    """Random words in answer tags: the babble a scorer with partial credit for any text would pay."""
    rng = random.Random(env.task["question"])
    return {a: "<answer>" + " ".join(rng.choice(WORDS) for _ in range(4)) + "</answer>" for a in obs}


def test_every_registered_dataset_is_offered_or_refused_with_a_reason():
    assert set(OFFERED) | set(REFUSED) == set(DATASETS) and len(OFFERED) == 91
    for name, reason in REFUSED.items():
        with pytest.raises(EnvNotFound, match=re.escape(f"reasoning_gym/{name} is not offered: {reason}")):
            make(f"reasoning_gym/{name}-v0")


@pytest.mark.parametrize("name", [n if n in SAMPLE else pytest.param(n, marks=pytest.mark.suites) for n in OFFERED])
def test_an_offered_dataset_passes_the_env_and_task_checks(name):
    """4 items each (about 30 s for all on 2 cores): the oracle scores 1 where items carry their answer (5
    datasets score from metadata instead), every degenerate policy scores 0."""
    def build():
        return make(f"reasoning_gym/{name}-v0", size=4, seed=0)

    env = build()
    check_env(build)
    with_answers = all(env.source[i]["answer"] is not None for i in range(4))
    means = check_task(env, good_policy=oracle if with_answers else None, episodes=4)
    assert not with_answers or means["good"] == 1.0, means
    words = [_play(env, tagged_words, e, e)[0] for e in range(4)]
    assert max(v for r in words for v in r.values()) == 0.0, words
    ran = []
    real_eval, real_exec = builtins.eval, builtins.exec

    def spy(real):  # code made from the answer below names `getpid` (sympy's parse_expr keeps names too)
        def run(source, *args, **kwargs):
            if "getpid" in str(source):
                ran.append(real.__name__)
            return real(source, *args, **kwargs)
        return run

    with pytest.MonkeyPatch.context() as patch:  # model text never reaches eval or exec (sympy's parse_expr too)
        patch.setattr(builtins, "eval", spy(real_eval))
        patch.setattr(builtins, "exec", spy(real_exec))
        for i in range(4):
            env.source.reward("<answer>__import__('os').getpid()</answer>", i)
    assert not ran, f"{name}: the scorer ran {ran} on model text"


def test_unknown_names_name_close_ones_and_the_version_is_0():
    with pytest.raises(EnvNotFound, match="no dataset 'basic_arithmetc'. Did you mean 'basic_arithmetic'"):
        make("reasoning_gym/basic_arithmetc-v0")
    with pytest.raises(EnvNotFound, match="version 0 only"):
        make("reasoning_gym/basic_arithmetic-v1")
    with pytest.raises(TypeError, match="reasoning_gym/basic_arithmetic: .*no_such_field"):
        make("reasoning_gym/basic_arithmetic-v0", no_such_field=3)


def test_without_reasoning_gym_the_error_gives_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym.factory", None)  # import fails
    with pytest.raises(ImportError, match=r'pip install "comlrl-env\[reasoning\]"'):
        make("reasoning_gym/basic_arithmetic-v0")


def test_items_are_reasoning_gyms_own_objects_and_its_config_passes_through():
    env = make("reasoning_gym/arc_agi-v0", size=3, seed=5)
    env.reset(options={"task_index": 2})
    made = create_dataset("arc_agi", seed=5, size=3)[2]
    assert env.task is env.source[2] and repr(env.task) == repr(made)  # the same item, tuples and all
    _, rewards, _, _, _ = env.step(oracle(env, {a: "" for a in env.agents}))
    assert set(rewards.values()) == {1.0}  # a JSON round trip would drop this to 0.05
    env = make("reasoning_gym/basic_arithmetic-v0", size=5, seed=1, min_terms=2, max_terms=2, protocol="debate")
    assert all(env.source[i]["metadata"]["num_terms"] == 2 for i in range(5)) and env.num_turns == 2


def test_a_scorer_that_raises_costs_one_flagged_answer():
    env = make("reasoning_gym/prime_factorization-v0", size=2, seed=0)
    env.reset(options={"task_index": 0})
    _, rewards, _, _, infos = env.step({"agent_0": "<answer>twelve</answer>", "agent_1": oracle(env, {"x": ""})["x"]})
    assert rewards == {"agent_0": 0.0, "agent_1": 1.0}
    assert infos["agent_0"]["invalid_action"].startswith("the scorer raised ValueError")
    assert "invalid_action" not in infos["agent_1"]


def questions(env) -> set[str]:
    return {env.source[i]["question"] for i in range(env.num_tasks)}


def test_held_out_items_are_disjoint_from_training_ones_and_another_seed_is_not_held_out():
    train = make("reasoning_gym/basic_arithmetic-v0", size=300)
    assert len(questions(train) & questions(make("reasoning_gym/basic_arithmetic-v0", size=300, seed=1))) >= 290
    held_out = make("reasoning/basic_arithmetic-v0")
    assert held_out.num_tasks == 200 and not questions(train) & questions(held_out)


def test_comlrl_bench_runs_the_reasoning_suite_on_saved_agents(tiny_dir, tmp_path):
    import json

    from comlrl_env.suites import suites
    from learners.cli import main

    saved = tmp_path / "agents"
    saved.mkdir()
    for i in range(2):
        (saved / f"agent_{i}").symlink_to(tiny_dir)
    out = tmp_path / "results"
    assert main(["--suite", "reasoning", "--agents", str(saved), "--episodes", "2", "--out", str(out), "--greedy",
                 "--max-new-tokens", "4"]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert len(suites["reasoning"]) == 12
    assert {r["env"] for r in rows if r["policy"] == "agents"} == set(suites["reasoning"])
    assert all(r["reward_mean"] == 0.0 for r in rows if r["policy"] == "empty")


@pytest.mark.parametrize("name", ["course_schedule", "syllogism"])
def test_the_plain_answer_style_scores_the_whole_reply_and_still_pays_nothing_for_nothing(name):
    """`answer_style="plain"` (models too small to write tags): the prompt asks for the answer alone, the
    whole reply (less a closing full stop) is scored, and no degenerate reply earns anything."""
    def build():
        return make(f"reasoning_gym/{name}-v0", size=4, seed=0, answer_style="plain")

    env = build()
    check_env(build)
    means = check_task(env, good_policy=lambda e, obs: {a: f" {e.task['answer']}.\n" for a in obs}, episodes=4)
    assert means["good"] == 1.0, means
    obs, _ = env.reset(options={"task_index": 0})
    assert obs["agent_0"].endswith("Reply with only the final answer, nothing else.")
    _, rewards, _, _, infos = env.step({"agent_0": "  ", "agent_1": f"<answer>{env.task['answer']}</answer>"})
    assert rewards["agent_0"] == 0.0 and infos["agent_0"]["invalid_action"] == "no answer"
    assert 0.0 < rewards["agent_1"] < 1.0  # the dataset's partial credit for the answer inside more text
    copy = pickle.loads(pickle.dumps(env.source))
    assert copy.extract("True.") == "True" and copy.answer_format == env.source.answer_format


def test_bad_config_values_and_styles_are_named():
    with pytest.raises(ValueError, match=r"reasoning_gym/leg_counting: its config .*max_animals must be >= "
                                         "min_animals"):
        make("reasoning_gym/leg_counting-v0", max_animals=1, min_animals=3)
    with pytest.raises(ValueError, match="answer_style must be 'tags' or 'plain', got 'bare'"):
        make("reasoning_gym/gcd-v0", answer_style="bare")
