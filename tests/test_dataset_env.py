"""`DatasetEnv`: a dataset, a reward function, formatters and a transition as a `TextParallelEnv`.

Reward functions, formatters and transitions used with `check_env` are module-level so that the
env pickles; the recording ones append to module-level lists that a fixture clears.
"""

from __future__ import annotations

import pickle

import datasets
import pytest

from comlrl_env import DatasetEnv
from comlrl_env.dataset_env import TransitionError
from comlrl_env.testing import check_env
from rewards import RewardFunctionError, length_ratio

ROWS = [
    {"prompt": "Write about cats.", "topic": "cats", "answer": "meow"},
    {"prompt": "Write about dogs.", "topic": "dogs", "answer": "woof"},
    {"prompt": "Write about birds.", "topic": "birds", "answer": "tweet"},
]

CALLS: list[tuple[str, dict]] = []  # (function name, arguments) of every recorded reward/transition call


@pytest.fixture(autouse=True)
def _clear_calls():
    CALLS.clear()
    yield
    CALLS.clear()


def hf(rows=ROWS) -> datasets.Dataset:
    return datasets.Dataset.from_list(list(rows))


# ----- module-level reward functions, formatters and transitions -------------------------------------


def shorter_first(c0, c1):
    """Joint reward: 1 where agent 0's text is shorter than agent 1's."""
    return [float(len(a) < len(b)) for a, b in zip(c0, c1)]


def per_agent(c0, c1):
    """Per-agent rewards for one joint action."""
    return [0.25, 0.75]


def numbers_said(c0, c1):
    """Per-agent rewards: the number each agent wrote (0 when it wrote none)."""
    return [_number(c0[0]), _number(c1[0])]


def _number(text):
    try:
        return float(text)
    except ValueError:
        return 0.0


def topic_formatter(row):
    return f"[{row['topic']}] {row['prompt']}"


def shout_formatter(row):
    return row["prompt"].upper()


def external_formatter(row, external_prompts=None):
    return f"external={external_prompts!r} prompt={row['prompt']!r}"


def echo_transition(prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent):
    return [
        f"turn {len(response_history_per_agent[i])} for agent {i}: you said {agent_completions[i]!r}. {prompt}"
        for i in range(num_agents)
    ]


def item_transition(prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent,
                    batch_item):
    return [f"{batch_item['answer']}? ({agent_completions[i][:10]!r})" for i in range(num_agents)]


# Recorders: they store exactly what they were called with.


def rec_lists(c0, c1):
    CALLS.append(("rec_lists", {"c0": c0, "c1": c1}))
    return 1.0


def rec_prompts_first(prompts, c0, c1):
    CALLS.append(("rec_prompts_first", {"prompts": prompts, "c0": c0, "c1": c1}))
    return 1.0


def rec_keywords(c0, c1, prompts=None, batch_items=None):
    CALLS.append(("rec_keywords", {"c0": c0, "c1": c1, "prompts": prompts, "batch_items": batch_items}))
    return 1.0


def rec_var_keywords(c0, c1, **kwargs):
    CALLS.append(("rec_var_keywords", {"c0": c0, "c1": c1, "kwargs": kwargs}))
    return 1.0


def rec_list_of_lists(completions):
    CALLS.append(("rec_list_of_lists", {"completions": completions}))
    return 1.0


def rec_star(*lists):
    CALLS.append(("rec_star", {"lists": lists}))
    return 1.0


def rec_single(completions):
    CALLS.append(("rec_single", {"completions": completions}))
    return 1.0


def rec_single_prompts(prompts, completions):
    CALLS.append(("rec_single_prompts", {"prompts": prompts, "completions": completions}))
    return 1.0


def rec_transition(prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent):
    CALLS.append(("rec_transition", dict(
        prompt=prompt, agent_completions=agent_completions, num_agents=num_agents,
        prompt_history_per_agent=prompt_history_per_agent, response_history_per_agent=response_history_per_agent,
    )))
    return [f"next for agent {i}" for i in range(num_agents)]


def rec_transition_item(prompt, agent_completions, num_agents, prompt_history_per_agent,
                        response_history_per_agent, batch_item):
    CALLS.append(("rec_transition_item", {"batch_item": batch_item}))
    return [f"next {i}" for i in range(num_agents)]


def rec_transition_kwargs(**kwargs):
    CALLS.append(("rec_transition_kwargs", kwargs))
    return [f"next {i}" for i in range(kwargs["num_agents"])]


def play(env, *turns, task_index=0):
    """Reset on `task_index`, then step once per joint action in `turns` (each a list of texts, one per agent)."""
    first = env.reset(seed=0, options={"task_index": task_index})
    steps = [env.step(dict(zip(env.agents, texts))) for texts in turns]
    return first, steps


# ----- check_env ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_env",
    [
        # single turn, a datasets.Dataset, a rule-based joint reward
        pytest.param(lambda: DatasetEnv(hf(), length_ratio, num_agents=2), id="hf single turn"),
        # single turn, a list of dicts, per-agent formatters and per-agent rewards
        pytest.param(lambda: DatasetEnv(ROWS, per_agent, 2, formatters=[topic_formatter, shout_formatter]),
                     id="list single turn per-agent"),
        # one agent
        pytest.param(lambda: DatasetEnv(hf(), rec_single, num_agents=1), id="one agent"),
        # three turns through a shared formatter
        pytest.param(lambda: DatasetEnv(hf(), shorter_first, 2, formatters=topic_formatter,
                                        external_transition=echo_transition, num_turns=3), id="hf multi-turn"),
        # three turns, a formatter with external_prompts, a transition reading the row, a reward processor
        pytest.param(lambda: DatasetEnv(ROWS, numbers_said, 2, formatters=external_formatter,
                                        external_transition=item_transition, num_turns=3,
                                        reward_processor=abs, early_termination_threshold=0.5),
                     id="list multi-turn early stop"),
        # passthrough: next prompts verbatim
        pytest.param(lambda: DatasetEnv(hf(), rec_keywords, 2, formatters=shout_formatter,
                                        external_transition=echo_transition, num_turns=2,
                                        external_prompt_passthrough=True), id="passthrough"),
    ],
)
def test_check_env_passes(make_env):
    check_env(make_env())
    check_env(make_env)  # as a factory too


# ----- observations ----------------------------------------------------------------------------------


def test_default_observation_is_row_prompt():
    (observations, infos), _ = play(DatasetEnv(hf(), shorter_first, 2), task_index=1)
    assert observations == {"agent_0": "Write about dogs.", "agent_1": "Write about dogs."}
    assert infos["agent_0"]["task_index"] == 1


def test_one_formatter_shared_by_every_agent():
    (observations, _), _ = play(DatasetEnv(ROWS, rec_star, 3, formatters=topic_formatter), task_index=2)
    assert observations == {f"agent_{i}": "[birds] Write about birds." for i in range(3)}


@pytest.mark.parametrize("container", [list, tuple])
def test_one_formatter_per_agent(container):
    env = DatasetEnv(hf(), shorter_first, 2, formatters=container([topic_formatter, shout_formatter]))
    (observations, _), _ = play(env)
    assert observations == {"agent_0": "[cats] Write about cats.", "agent_1": "WRITE ABOUT CATS."}


def test_wrong_number_of_formatters():
    with pytest.raises(ValueError, match=r"got 3 formatters for num_agents=2"):
        DatasetEnv(ROWS, shorter_first, 2, formatters=[topic_formatter] * 3)


@pytest.mark.parametrize("formatters", ["prompt", 3, [topic_formatter, "prompt"], {"agent_0": topic_formatter}])
def test_non_callable_formatters(formatters):
    with pytest.raises(TypeError, match="formatters must be None, a callable, or a list of callables"):
        DatasetEnv(ROWS, shorter_first, 2, formatters=formatters)


def test_formatter_returning_non_str():
    with pytest.raises(TypeError, match=r"formatter 1 \(.*<lambda>\) returned a int at dataset index 0"):
        DatasetEnv(ROWS, shorter_first, 2, formatters=[topic_formatter, lambda row: 7])


def test_formatter_returning_non_str_on_a_later_row():
    env = DatasetEnv(ROWS, shorter_first, 2, formatters=lambda row: row["prompt"] if row["topic"] == "cats" else None)
    with pytest.raises(TypeError, match=r"returned a NoneType at dataset index 1, turn 0"):
        env.reset(options={"task_index": 1})


def test_observations_are_clipped_to_the_space():
    env = DatasetEnv([{"prompt": "x" * 50}], shorter_first, 2, max_observation_length=10)
    (observations, infos), _ = play(env)
    assert observations["agent_0"] == "x" * 10
    assert infos["agent_0"]["observation_clipped"] == 50


# ----- the reward function's calling convention -------------------------------------------------------


@pytest.mark.parametrize(
    "fn, expected",
    [
        # one positional list per agent: nothing else (no keyword declared)
        (rec_lists, {"c0": ["x"], "c1": ["yy"]}),
        # N + 1 positionals: agent 0's observation first
        (rec_prompts_first, {"prompts": ["[dogs] Write about dogs."], "c0": ["x"], "c1": ["yy"]}),
        # declared keywords: prompts (agent 0's observation) and batch_items (the row)
        (rec_keywords, {"c0": ["x"], "c1": ["yy"], "prompts": ["[dogs] Write about dogs."], "batch_items": [ROWS[1]]}),
        # **kwargs gets both keywords
        (rec_var_keywords, {"c0": ["x"], "c1": ["yy"],
                            "kwargs": {"prompts": ["[dogs] Write about dogs."], "batch_items": [ROWS[1]]}}),
        # one positional with two agents: a list of the two lists
        (rec_list_of_lists, {"completions": [["x"], ["yy"]]}),
        # *args: one list per agent
        (rec_star, {"lists": (["x"], ["yy"])}),
    ],
)
def test_reward_function_receives_the_convention(fn, expected):
    env = DatasetEnv(hf(), fn, 2, formatters=[topic_formatter, shout_formatter])
    _, [(_, rewards, _, _, _)] = play(env, ["x", "yy"], task_index=1)
    assert CALLS == [(fn.__name__, expected)]
    assert rewards == {"agent_0": 1.0, "agent_1": 1.0}


@pytest.mark.parametrize(
    "fn, expected",
    [
        # one agent, one positional: its list
        (rec_single, {"completions": ["solo"]}),
        # one agent, two positionals: prompts then its list
        (rec_single_prompts, {"prompts": ["Write about cats."], "completions": ["solo"]}),
    ],
)
def test_single_agent_reward_convention(fn, expected):
    play(DatasetEnv(ROWS, fn, 1), ["solo"])
    assert CALLS == [(fn.__name__, expected)]


def test_reward_function_sees_each_turns_observation():
    env = DatasetEnv(ROWS, rec_keywords, 2, external_transition=rec_transition, num_turns=2)
    play(env, ["a", "b"], ["c", "d"])
    prompts = [args["prompts"] for name, args in CALLS if name == "rec_keywords"]
    assert prompts == [["Write about cats."], ["next for agent 0"]]


def test_reward_function_gets_the_seed_drawn_row():
    env = DatasetEnv(hf(), rec_keywords, 2)
    _, infos = env.reset(seed=123)
    index = infos["agent_0"]["task_index"]
    assert isinstance(index, int) and 0 <= index < 3
    env.step({"agent_0": "a", "agent_1": "b"})
    assert CALLS[0][1]["batch_items"] == [ROWS[index]]


# ----- rewards ----------------------------------------------------------------------------------------


def test_joint_reward_reaches_every_agent():
    _, [(_, rewards, _, _, _)] = play(DatasetEnv(hf(), shorter_first, 2), ["a", "bbb"])
    assert rewards == {"agent_0": 1.0, "agent_1": 1.0}
    assert all(type(r) is float for r in rewards.values())


def test_per_agent_rewards_reach_the_right_agent():
    _, [(_, rewards, _, _, _)] = play(DatasetEnv(hf(), per_agent, 2), ["a", "b"])
    assert rewards == {"agent_0": 0.25, "agent_1": 0.75}


def test_per_agent_rewards_three_agents():
    env = DatasetEnv(ROWS, lambda a, b, c: [float(len(a[0])), float(len(b[0])), float(len(c[0]))], 3)
    _, [(_, rewards, _, _, _)] = play(env, ["a", "bb", "ccc"])
    assert rewards == {"agent_0": 1.0, "agent_1": 2.0, "agent_2": 3.0}


def test_reward_processor_applied_to_each_value():
    _, [(_, joint, _, _, _)] = play(DatasetEnv(ROWS, shorter_first, 2, reward_processor=lambda r: 10 * r - 1),
                                    ["a", "bbb"])
    assert joint == {"agent_0": 9.0, "agent_1": 9.0}
    _, [(_, split, _, _, _)] = play(DatasetEnv(ROWS, per_agent, 2, reward_processor=lambda r: 10 * r - 1), ["a", "b"])
    assert split == {"agent_0": 1.5, "agent_1": 6.5}


@pytest.mark.parametrize("processor, pattern", [
    (lambda r: float("nan"), r"to nan"),
    (lambda r: "high", r"to 'high'"),
    (lambda r: 1 / 0, r"raised ZeroDivisionError"),
])
def test_reward_processor_errors(processor, pattern):
    env = DatasetEnv(ROWS, per_agent, 2, reward_processor=processor)
    env.reset(options={"task_index": 2})
    with pytest.raises(RewardFunctionError, match=rf"reward_processor .*{pattern}.*dataset index 2"):
        env.step({"agent_0": "a", "agent_1": "b"})


def test_reward_processor_must_be_callable():
    with pytest.raises(TypeError, match="reward_processor must be callable"):
        DatasetEnv(ROWS, per_agent, 2, reward_processor=2.0)


def test_missing_action_is_scored_as_empty_text():
    env = DatasetEnv(ROWS, rec_lists, 2)
    env.reset(options={"task_index": 0})
    _, rewards, _, _, infos = env.step({"agent_0": "hello"})
    assert CALLS == [("rec_lists", {"c0": ["hello"], "c1": [""]})]
    assert infos["agent_1"]["invalid_action"] == "no action given"
    assert rewards == {"agent_0": 1.0, "agent_1": 1.0}


# ----- episode ends -----------------------------------------------------------------------------------


def test_single_turn_terminates():
    env = DatasetEnv(ROWS, shorter_first, 2)
    _, [(observations, _, terminations, truncations, _)] = play(env, ["a", "b"])
    assert terminations == {"agent_0": True, "agent_1": True}
    assert truncations == {"agent_0": False, "agent_1": False}
    assert env.agents == []
    with pytest.raises(RuntimeError, match="finished episode"):
        env.step({"agent_0": "a", "agent_1": "b"})


def test_multi_turn_truncates_at_num_turns():
    env = DatasetEnv(hf(), shorter_first, 2, external_transition=echo_transition, num_turns=3)
    _, steps = play(env, ["a", "b"], ["c", "d"], ["e", "f"])
    assert [s[2]["agent_0"] for s in steps] == [False, False, False]  # terminations
    assert [s[3]["agent_0"] for s in steps] == [False, False, True]  # truncations
    assert env.agents == []


@pytest.mark.parametrize(
    "turns, steps_played, terminated",
    [
        # mean of 0.4 and 0.8 is 0.6 > 0.5: terminated after the first turn
        ([["0.4", "0.8"]], 1, True),
        # mean 0.5 is not above 0.5; then mean 0.75: terminated after turn 2
        ([["0.5", "0.5"], ["1", "0.5"]], 2, True),
        # means 0.1, 0.3, 0.5 never exceed 0.5: truncated at num_turns
        ([["0.1", "0.1"], ["0.2", "0.4"], ["0.5", "0.5"]], 3, False),
    ],
)
def test_early_termination_threshold(turns, steps_played, terminated):
    env = DatasetEnv(ROWS, numbers_said, 2, external_transition=echo_transition, num_turns=3,
                     early_termination_threshold=0.5)
    _, steps = play(env, *turns)
    assert len(steps) == steps_played and env.agents == []
    _, _, terminations, truncations, _ = steps[-1]
    assert terminations["agent_0"] is terminated and truncations["agent_0"] is (not terminated)
    for _, _, earlier_terms, earlier_truncs, _ in steps[:-1]:
        assert not earlier_terms["agent_0"] and not earlier_truncs["agent_0"]


def test_early_termination_uses_processed_rewards():
    # raw mean 0.2 scaled by 10 is 2 > 1: terminated after the first turn
    env = DatasetEnv(ROWS, numbers_said, 2, external_transition=echo_transition, num_turns=3,
                     reward_processor=lambda r: 10 * r, early_termination_threshold=1.0)
    _, [(_, rewards, terminations, _, _)] = play(env, ["0.1", "0.3"])
    assert rewards == {"agent_0": 1.0, "agent_1": 3.0} and terminations["agent_0"] is True


@pytest.mark.parametrize("threshold, error", [("0.5", TypeError), (True, TypeError), (float("nan"), ValueError)])
def test_bad_early_termination_threshold(threshold, error):
    with pytest.raises(error, match="early_termination_threshold"):
        DatasetEnv(ROWS, numbers_said, 2, external_transition=echo_transition, num_turns=2,
                   early_termination_threshold=threshold)


# ----- the external transition ------------------------------------------------------------------------


def test_transition_arguments_and_histories_over_three_turns():
    env = DatasetEnv(hf(), shorter_first, 2, formatters=[topic_formatter, shout_formatter],
                     external_transition=rec_transition, num_turns=3)
    (observations, _), steps = play(env, ["a0", "b0"], ["a1", "b1"], ["a2", "b2"], task_index=1)
    assert observations == {"agent_0": "[dogs] Write about dogs.", "agent_1": "WRITE ABOUT DOGS."}
    # called before turns 1 and 2, not after the last one
    assert [name for name, _ in CALLS] == ["rec_transition", "rec_transition"]
    first, second = (args for _, args in CALLS)
    assert first == {
        "prompt": "Write about dogs.",  # the raw dataset prompt, never formatted
        "agent_completions": ["a0", "b0"],
        "num_agents": 2,
        "prompt_history_per_agent": [["[dogs] Write about dogs."], ["WRITE ABOUT DOGS."]],
        "response_history_per_agent": [["a0"], ["b0"]],
    }
    # turn-1 observations: the transition's prompts through each agent's formatter, as row["prompt"]
    assert steps[0][0] == {"agent_0": "[dogs] next for agent 0", "agent_1": "NEXT FOR AGENT 1"}
    assert second == {
        "prompt": "Write about dogs.",
        "agent_completions": ["a1", "b1"],
        "num_agents": 2,
        "prompt_history_per_agent": [["[dogs] Write about dogs.", "[dogs] next for agent 0"],
                                     ["WRITE ABOUT DOGS.", "NEXT FOR AGENT 1"]],
        "response_history_per_agent": [["a0", "a1"], ["b0", "b1"]],
    }
    # the infos after the last step hold all three turns
    infos = steps[-1][4]
    assert infos["agent_1"]["prompt_history"] == ["WRITE ABOUT DOGS.", "NEXT FOR AGENT 1", "NEXT FOR AGENT 1"]
    assert infos["agent_1"]["response_history"] == ["b0", "b1", "b2"]
    assert [s[4]["agent_0"]["turn"] for s in steps] == [1, 2, 3]


def test_transition_histories_are_copies():
    # a transition that mutates its histories does not corrupt the env's
    def greedy(prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent):
        for history in response_history_per_agent:
            history.clear()
        agent_completions.clear()
        return ["x", "y"]

    env = DatasetEnv(ROWS, shorter_first, 2, external_transition=greedy, num_turns=2)
    _, [(_, _, _, _, infos)] = play(env, ["a", "b"])
    assert infos["agent_0"]["response_history"] == ["a"]


@pytest.mark.parametrize(
    "transition, name, has_item",
    [
        # no batch_item parameter: not passed
        (rec_transition, "rec_transition", False),
        # a declared batch_item: the row
        (rec_transition_item, "rec_transition_item", True),
        # **kwargs: the row too, plus the five standard keywords
        (rec_transition_kwargs, "rec_transition_kwargs", True),
    ],
)
def test_transition_batch_item_only_when_declared(transition, name, has_item):
    env = DatasetEnv(hf(), shorter_first, 2, external_transition=transition, num_turns=2)
    play(env, ["a", "b"], task_index=2)
    [(called, args)] = CALLS
    assert called == name
    assert ("batch_item" in args) is has_item
    if has_item:
        assert args["batch_item"] == ROWS[2]
    if name == "rec_transition_kwargs":
        assert set(args) == {"prompt", "agent_completions", "num_agents", "prompt_history_per_agent",
                             "response_history_per_agent", "batch_item"}


def test_formatter_with_external_prompts():
    env = DatasetEnv(ROWS, shorter_first, 2, formatters=external_formatter,
                     external_transition=rec_transition, num_turns=2)
    (observations, _), [(next_observations, *_)] = play(env, ["a", "b"])
    # turn 0: called as f(row), no external prompt
    assert observations["agent_0"] == "external=None prompt='Write about cats.'"
    # turn 1: external_prompts= the transition's text, and row["prompt"] replaced by it
    assert next_observations == {
        "agent_0": "external='next for agent 0' prompt='next for agent 0'",
        "agent_1": "external='next for agent 1' prompt='next for agent 1'",
    }


def test_passthrough_uses_transition_prompts_verbatim():
    env = DatasetEnv(ROWS, shorter_first, 2, formatters=[topic_formatter, shout_formatter],
                     external_transition=rec_transition, num_turns=2, external_prompt_passthrough=True)
    (observations, _), [(next_observations, *_)] = play(env, ["a", "b"])
    assert observations == {"agent_0": "[cats] Write about cats.", "agent_1": "WRITE ABOUT CATS."}
    assert next_observations == {"agent_0": "next for agent 0", "agent_1": "next for agent 1"}


def test_multi_turn_without_transition():
    with pytest.raises(ValueError, match=r"num_turns=2 needs an external_transition"):
        DatasetEnv(ROWS, shorter_first, 2, num_turns=2)


def test_transition_must_be_callable():
    with pytest.raises(TypeError, match="external_transition must be callable"):
        DatasetEnv(ROWS, shorter_first, 2, num_turns=2, external_transition="next")


def make_bad_transition(value):
    def bad_transition(**kwargs):
        return value

    return bad_transition


@pytest.mark.parametrize(
    "value, pattern",
    [
        # one prompt for two agents
        (["only one"], r"returned 1 values .*\['only one'\]"),
        # three prompts for two agents
        (["a", "b", "c"], r"returned 3 values"),
        # a bare string, not a list
        ("one prompt", r"returned a str .*'one prompt'"),
        # None (a forgotten return)
        (None, r"returned a NoneType .*None"),
        # a non-str prompt for agent 1
        (["ok", 42], r"returned a int for agent 1 .*\['ok', 42\]"),
    ],
)
def test_transition_bad_return(value, pattern):
    env = DatasetEnv(ROWS, shorter_first, 2, external_transition=make_bad_transition(value), num_turns=2)
    env.reset(options={"task_index": 1})
    with pytest.raises(TransitionError, match=rf"external_transition .*bad_transition {pattern}") as info:
        env.step({"agent_0": "a", "agent_1": "b"})
    assert "dataset index 1, turn 1" in str(info.value)
    assert "list of 2 prompt strings" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_transition_that_raises_is_chained():
    def broken(**kwargs):
        raise KeyError("history")

    env = DatasetEnv(ROWS, shorter_first, 2, external_transition=broken, num_turns=2)
    env.reset(options={"task_index": 0})
    with pytest.raises(TransitionError, match=r"broken raised KeyError\('history'\) on dataset index 0") as info:
        env.step({"agent_0": "a", "agent_1": "b"})
    assert isinstance(info.value.__cause__, KeyError)


# ----- reward-function errors inside the env ----------------------------------------------------------


def make_bad_reward(value):
    def bad_reward(c0, c1):
        if isinstance(value, Exception):
            raise value
        return value

    return bad_reward


@pytest.mark.parametrize(
    "value, pattern",
    [
        # the function raises: the original error is named (and chained)
        (RuntimeError("judge offline"), r"raised RuntimeError\('judge offline'\)"),
        # three values for two agents and one joint action
        ([1.0, 2.0, 3.0], r"returned 3 values.*\[1\.0, 2\.0, 3\.0\]"),
        # NaN
        (float("nan"), r"nan.*finite"),
        # inf
        ([float("inf")], r"inf.*finite"),
        # a string
        ("good", r"returned 'good'"),
        # None
        (None, r"returned None"),
    ],
)
def test_reward_function_errors(value, pattern):
    env = DatasetEnv(hf(), make_bad_reward(value), 2)
    env.reset(options={"task_index": 2})
    with pytest.raises(RewardFunctionError, match=pattern) as info:
        env.step({"agent_0": "a", "agent_1": "b"})
    message = str(info.value)
    assert "make_bad_reward.<locals>.bad_reward" in message and "dataset index 2" in message
    if isinstance(value, Exception):
        assert info.value.__cause__ is value


def test_reward_func_must_be_callable():
    with pytest.raises(TypeError, match="reward_func must be callable"):
        DatasetEnv(ROWS, "exact_match", 2)


# ----- the dataset ------------------------------------------------------------------------------------


def test_missing_field_fails_at_construction():
    with pytest.raises(ValueError, match=r"formatter 0 \(topic_formatter\) needs dataset field 'topic'") as info:
        DatasetEnv([{"prompt": "hi"}], shorter_first, 2, formatters=topic_formatter)
    assert "fields: ['prompt']" in str(info.value)


def test_missing_prompt_fails_at_construction():
    with pytest.raises(ValueError, match=r"needs dataset field 'prompt'.*fields: \['question'\]"):
        DatasetEnv(hf([{"question": "2 + 2?"}]), shorter_first, 2)


def test_missing_field_on_a_later_row_names_the_row():
    rows = [{"prompt": "a", "topic": "x"}, {"prompt": "b"}]
    env = DatasetEnv(rows, shorter_first, 2, formatters=topic_formatter)
    with pytest.raises(ValueError, match=r"needs dataset field 'topic' that the row at dataset index 1"):
        env.reset(options={"task_index": 1})


def test_rows_that_are_not_dicts():
    with pytest.raises(TypeError, match=r"row\['prompt'\].*strs.*formatters="):
        DatasetEnv(["just a string"], shorter_first, 2)
    # a formatter that reads them works
    (observations, _), _ = play(DatasetEnv(["just a string"], shorter_first, 2, formatters=str.upper))
    assert observations["agent_0"] == "JUST A STRING"


@pytest.mark.parametrize("dataset", [[], datasets.Dataset.from_list([])], ids=["list", "Dataset"])
def test_empty_dataset(dataset):
    with pytest.raises(ValueError, match="dataset is empty"):
        DatasetEnv(dataset, shorter_first, 2)


def test_generator_dataset():
    with pytest.raises(TypeError, match=r"len\(\) and indexing.*generator.*Dataset\.from_list"):
        DatasetEnv((row for row in ROWS), shorter_first, 2)


def test_dataset_dict_of_splits():
    splits = datasets.DatasetDict({"train": hf(), "test": hf()})
    with pytest.raises(TypeError, match=r"DatasetDict.*\['train', 'test'\].*dataset\['train'\]"):
        DatasetEnv(splits, shorter_first, 2)


def test_task_index_picks_the_row():
    env = DatasetEnv(hf(), shorter_first, 2, formatters=topic_formatter)
    for i, row in enumerate(ROWS):
        observations, infos = env.reset(options={"task_index": i})
        assert observations["agent_1"] == f"[{row['topic']}] {row['prompt']}"
        assert infos["agent_1"]["task_index"] == i


@pytest.mark.parametrize("index", [3, 100, -1])
def test_task_index_out_of_range(index):
    env = DatasetEnv(hf(), shorter_first, 2)
    with pytest.raises(ValueError, match=rf"task_index {index} is out of range; this env has 3 task instances"):
        env.reset(options={"task_index": index})


def test_task_index_must_be_an_int():
    with pytest.raises(TypeError, match="must be an int"):
        DatasetEnv(hf(), shorter_first, 2).reset(options={"task_index": "0"})


def test_seed_draws_rows_deterministically():
    env = DatasetEnv(ROWS, shorter_first, 2)
    drawn = [env.reset(seed=s)[1]["agent_0"]["task_index"] for s in range(20)]
    assert drawn == [env.reset(seed=s)[1]["agent_0"]["task_index"] for s in range(20)]
    assert set(drawn) == {0, 1, 2}


def test_metadata():
    env = DatasetEnv(hf(), shorter_first, 2)
    assert env.num_tasks == 3 and env.metadata["num_tasks"] == 3
    assert "shorter_first" in env.metadata["name"]
    assert env.metadata["reward_structure"] == "cooperative"


def test_state_holds_every_agents_prompt():
    env = DatasetEnv(ROWS, shorter_first, 2, formatters=[topic_formatter, shout_formatter],
                     external_transition=rec_transition, num_turns=2)
    env.reset(options={"task_index": 0})
    state = env.state()
    assert "[cats] Write about cats." in state and "WRITE ABOUT CATS." in state
    assert "agent_0" in state and "agent_1" in state
    env.step({"agent_0": "first answer", "agent_1": "second answer"})
    state = env.state()
    assert "[cats] next for agent 0" in state and "NEXT FOR AGENT 1" in state
    assert "first answer" in state and "second answer" in state


def test_pickle_mid_episode_continues_the_same():
    env = DatasetEnv(hf(), shorter_first, 2, formatters=topic_formatter, external_transition=echo_transition,
                     num_turns=3)
    env.reset(options={"task_index": 1})
    env.step({"agent_0": "a", "agent_1": "bb"})
    twin = pickle.loads(pickle.dumps(env))
    actions = {"agent_0": "ccc", "agent_1": "d"}
    assert twin.step(actions) == env.step(actions)
