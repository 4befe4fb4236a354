"""TextParallelEnv, TextSpace and check_env, on small tasks defined in this file."""

from __future__ import annotations

import pickle
import random
import re

import numpy as np
import pytest

import rewards.models
from comlrl_env import TextParallelEnv, TextSpace, joint_text, make, register
from comlrl_env.testing import check_env
from comlrl_env.testing.checks import EnvCheckError

# ----- small tasks ----------------------------------------------------------------


class Echo(TextParallelEnv):
    """Single turn, cooperative: every agent must say the word; one joint reward."""

    metadata = {**TextParallelEnv.metadata, "name": "echo-v0", "num_tasks": 3}
    WORDS = ["red", "green", "blue"]

    def load_task(self, task_index):
        i = task_index if task_index is not None else int(self.np_random.integers(len(self.WORDS)))
        return {"word": self.WORDS[i]}

    def prompts(self):
        return {a: f"Say {self.task['word']!r}." for a in self.agents}

    def score(self, actions):
        hits = [self.task["word"] in text.lower() for text in actions.values()]
        return float(all(hits)), all(hits)


class Guess(TextParallelEnv):
    """Multi-turn, procedural: guess a number in 0..99; the next prompt says higher or lower."""

    metadata = {**TextParallelEnv.metadata, "name": "guess-v0", "reward_structure": "general", "num_tasks": None}

    def __init__(self, num_agents: int = 2, num_turns: int = 3, **kwargs):
        super().__init__(num_agents=num_agents, num_turns=num_turns, **kwargs)

    def load_task(self, task_index):
        target = task_index % 100 if task_index is not None else int(self.np_random.integers(100))
        return {"target": target, "solved": []}

    def prompts(self):
        out = {}
        for a in self.agents:
            if not self.response_history[a]:
                out[a] = f"{a}: guess a number between 0 and 99."
                continue
            guess = self._parse(self.response_history[a][-1])
            if guess is None:
                feedback = "that was not a number"
            else:
                feedback = "higher" if guess < self.task["target"] else "lower"
            out[a] = f"{a}: turn {self.turn}, your last guess was wrong: {feedback}."
        return out

    def score(self, actions):
        rewards = {}
        for a, text in actions.items():
            guess = self._parse(text)
            if guess is None:
                self.flag_invalid(a, "no number in the answer")
                rewards[a] = 0.0
            elif guess == self.task["target"]:
                self.task["solved"].append(a)
                rewards[a] = 1.0
            else:
                rewards[a] = -abs(guess - self.task["target"]) / 100
        return rewards, set(self.task["solved"]) >= set(self.agents)

    @staticmethod
    def _parse(text):
        match = re.search(r"\d{1,3}", text)
        return int(match.group()) if match else None


class Bid(TextParallelEnv):
    """Single turn, competitive, per-agent rewards: the highest bid wins (10 - bid) plus a seeded bonus."""

    metadata = {**TextParallelEnv.metadata, "name": "bid-v0", "reward_structure": "competitive", "num_tasks": None}

    def load_task(self, task_index):
        return {"bonus": float(self.np_random.random())}

    def prompts(self):
        return {a: f"Bid 0-10; the winner gets 10 - bid + {self.task['bonus']:.3f}." for a in self.agents}

    def score(self, actions):
        bids = {}
        for a, text in actions.items():
            digits = re.findall(r"\d+", text)
            bids[a] = min(int(digits[0][:2]), 10) if digits else 0
        winner = max(self.agents, key=lambda a: (bids[a], a))
        return {a: (10 - bids[a] + self.task["bonus"]) if a == winner else 0.0 for a in self.agents}, True


class Tagged(TextParallelEnv):
    """Single turn, cooperative, answers go in <answer></answer>; a missing tag costs the team 0.5."""

    metadata = {**TextParallelEnv.metadata, "name": "tagged-v0", "num_tasks": 2}
    invalid_action_penalty = 0.5
    QUESTIONS = [("2 + 2", "4"), ("3 * 3", "9")]

    def load_task(self, task_index):
        i = task_index if task_index is not None else int(self.np_random.integers(2))
        question, answer = self.QUESTIONS[i]
        return {"question": question, "answer": answer}

    def prompts(self):
        return {a: f"What is {self.task['question']}? Reply <answer>N</answer>." for a in self.agents}

    def score(self, actions):
        correct = 0
        for a, text in actions.items():
            match = re.search(r"<answer>(.*?)</answer>", text, re.S)
            if match is None:
                self.flag_invalid(a, "missing <answer> tag")
            elif match.group(1).strip() == self.task["answer"]:
                correct += 1
        return correct / len(actions), True


class TaggedSolo(Tagged):
    """Tagged with per-agent scoring: only the offender pays the penalty."""

    metadata = {**Tagged.metadata, "name": "tagged-solo-v0", "reward_structure": "general"}

    def score(self, actions):
        joint, done = super().score(actions)
        return {a: joint for a in actions}, done


GOOD_ENVS = [Echo, Guess, Bid, Tagged, TaggedSolo]

# ----- broken tasks check_env must reject -----------------------------------------


class GlobalRandom(Echo):
    """Ignores the reset seed: draws from the global `random` module."""

    metadata = {**Echo.metadata, "name": "global-random-v0"}

    def load_task(self, task_index):
        return {"word": random.choice(self.WORDS), "nonce": random.random()}

    def prompts(self):
        return {a: f"Say {self.task['word']!r} (id {self.task['nonce']})." for a in self.agents}


class FreshSpace(Echo):
    """Builds a new observation space on every call."""

    def observation_space(self, agent):
        return TextSpace(16_384)


class AsciiOnly(Echo):
    """Crashes on any non-ASCII answer."""

    def score(self, actions):
        for text in actions.values():
            text.encode("ascii")
        return super().score(actions)


class Float32Reward(Echo):
    """Returns numpy float32 rewards instead of Python floats."""

    def step(self, actions):
        obs, rewards, terms, truncs, infos = super().step(actions)
        return obs, {a: np.float32(r) for a, r in rewards.items()}, terms, truncs, infos


class NanReward(Echo):
    """Scores gibberish as NaN."""

    def score(self, actions):
        return (float("nan") if any(not t.isascii() for t in actions.values()) else 0.0), True


class LeakyClone(Guess):
    """Keeps episode state in an attribute that `clone()` does not deep-copy."""

    def reset(self, seed=None, options=None):
        self.log = []
        return super().reset(seed=seed, options=options)

    def prompts(self):
        return {a: f"{len(self.log)} answers so far; guess 0-99." for a in self.agents}

    def score(self, actions):
        self.log.extend(actions.values())
        return super().score(actions)


class Unpicklable(Echo):
    """Holds a lambda, which pickle cannot serialize."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.normalize = lambda text: text.lower()


class BadMetadata(Echo):
    metadata = {**Echo.metadata, "reward_structure": "team"}


# ----- check_env ------------------------------------------------------------------


@pytest.mark.parametrize("env_cls", GOOD_ENVS, ids=lambda c: c.__name__)
def test_check_env_passes_on_good_envs(env_cls):
    check_env(env_cls())


def test_check_env_accepts_factory_id_and_made_instance():
    check_env(lambda: Guess(num_agents=3, num_turns=4), seed=7, num_episodes=3)
    register("test/CheckEcho-v0", entry_point=Echo, num_agents=3)
    check_env("test/CheckEcho-v0")
    check_env(make("test/CheckEcho-v0"))


def test_check_env_uses_a_copy_and_leaves_the_instance_usable():
    env = Guess()
    env.reset(seed=3)
    check_env(env)
    obs, _ = env.reset(seed=3)
    assert obs == Guess().reset(seed=3)[0]


def test_env_check_error_is_an_assertion_error():
    assert issubclass(EnvCheckError, AssertionError)


@pytest.mark.parametrize(
    ("env_cls", "pattern"),
    [
        (GlobalRandom, r"global-random-v0.*\[determinism\].*observations\['agent_0'\]"),
        (FreshSpace, r"\[spaces\].*observation_space\('agent_0'\) returned a different object"),
        (AsciiOnly, r"\[gibberish\].*emoji action.*raised UnicodeEncodeError"),
        (Float32Reward, r"reward of agent_0 is float32 .*finite Python floats"),
        (NanReward, r"\[gibberish\].*reward of agent_0 is float nan"),
        (LeakyClone, r"\[clone\].*env\.clone\(\) taken after reset continues differently"),
        (Unpicklable, r"\[pickle\].*pickle\.dumps.*raised"),
        (BadMetadata, r"\[metadata\].*reward_structure.*'team'"),
    ],
    ids=lambda x: x.__name__ if isinstance(x, type) else "",
)
def test_check_env_rejects_broken_envs(env_cls, pattern):
    with pytest.raises(EnvCheckError, match=pattern):
        check_env(env_cls())


def test_check_env_rejects_non_envs():
    with pytest.raises(TypeError, match="TextParallelEnv"):
        check_env(42)
    with pytest.raises(TypeError, match="returned a dict"):
        check_env(lambda: {})
    with pytest.raises(ValueError, match="num_episodes"):
        check_env(Echo(), num_episodes=0)


# ----- TextSpace --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",  # empty
        "Hello, world!",  # ASCII punctuation
        "naïve café — ünïcödé",  # accents and an em dash
        "你好 🙂🚀",  # CJK and emoji
        "\u202eשלום",  # right-to-left override and Hebrew
        "<a>{}[]()!?;:'\"`~\\",  # brackets, quotes, backslash
        "x" * 20,  # exactly max_length
    ],
)
def test_text_space_accepts_any_unicode_within_limits(text):
    assert TextSpace(20).contains(text)


@pytest.mark.parametrize("value", [None, 5, b"bytes", ["a"], 3.5])
def test_text_space_rejects_non_str(value):
    assert not TextSpace(20).contains(value)


def test_text_space_length_limits():
    space = TextSpace(5, min_length=2)
    assert space.contains("abcde") and space.contains("ab")
    assert not space.contains("abcdef")
    assert not space.contains("a")
    assert space.contains(space.sample())


# ----- TextParallelEnv ----------------------------------------------------------------


def test_reset_returns_prompts_and_histories_for_every_agent():
    env = Echo(num_agents=3)
    obs, infos = env.reset(seed=0, options={"task_index": 1})
    assert env.agents == ["agent_0", "agent_1", "agent_2"]
    assert obs == {a: "Say 'green'." for a in env.agents}
    assert infos["agent_0"]["task_index"] == 1
    assert infos["agent_0"]["prompt_history"] == [] and infos["agent_0"]["response_history"] == []


def test_task_index_selects_the_instance():
    env = Echo()
    for i, word in enumerate(Echo.WORDS):
        obs, _ = env.reset(seed=123, options={"task_index": i})
        assert obs["agent_0"] == f"Say {word!r}."


@pytest.mark.parametrize("bad", [3, 100, -1])
def test_out_of_range_task_index_raises_value_error(bad):
    with pytest.raises(ValueError, match=f"task_index {bad} is out of range"):
        Echo().reset(seed=0, options={"task_index": bad})


def test_non_int_task_index_raises_type_error():
    with pytest.raises(TypeError, match="task_index"):
        Echo().reset(options={"task_index": "1"})


def test_same_seed_same_episode_and_seed_alone_draws_an_instance():
    words = {Echo().reset(seed=s)[0]["agent_0"] for s in range(20)}
    assert len(words) > 1  # the seed picks the instance
    assert Guess().reset(seed=5) == Guess().reset(seed=5)


def test_cooperative_reward_goes_to_every_agent_and_termination_ends_the_task():
    env = Echo()
    env.reset(seed=0, options={"task_index": 0})
    obs, rewards, terms, truncs, infos = env.step({"agent_0": "RED!", "agent_1": "red"})
    assert rewards == {"agent_0": 1.0, "agent_1": 1.0}
    assert all(isinstance(r, float) for r in rewards.values())
    assert terms == {"agent_0": True, "agent_1": True}
    assert truncs == {"agent_0": False, "agent_1": False}
    assert env.agents == []
    assert set(obs) == {"agent_0", "agent_1"}


def test_per_agent_rewards():
    env = Bid()
    env.reset(seed=0)
    bonus = env.task["bonus"]
    _, rewards, *_ = env.step({"agent_0": "I bid 3", "agent_1": "7"})
    assert rewards == {"agent_0": 0.0, "agent_1": pytest.approx(3 + bonus)}


def test_turn_limit_truncates_and_next_prompt_has_feedback():
    env = Guess(num_turns=2)
    env.reset(seed=0, options={"task_index": 50})
    obs, rewards, terms, truncs, infos = env.step({"agent_0": "10", "agent_1": "ninety"})
    assert env.agents == ["agent_0", "agent_1"]
    assert not any(terms.values()) and not any(truncs.values())
    assert "higher" in obs["agent_0"] and "not a number" in obs["agent_1"]
    assert infos["agent_1"]["invalid_action"] == "no number in the answer"
    assert "invalid_action" not in infos["agent_0"]
    assert rewards["agent_0"] == pytest.approx(-0.4)
    obs, rewards, terms, truncs, infos = env.step({"agent_0": "60", "agent_1": "50"})
    assert truncs == {"agent_0": True, "agent_1": True}
    assert terms == {"agent_0": False, "agent_1": False}
    assert env.agents == []
    # histories hold every prompt and (clean) response of the episode
    assert infos["agent_0"]["response_history"] == ["10", "60"]
    assert len(infos["agent_0"]["prompt_history"]) == 2
    assert "higher" in infos["agent_0"]["prompt_history"][1]
    assert infos["agent_0"]["turn"] == 2
    with pytest.raises(RuntimeError, match="reset"):
        env.step({"agent_0": "1", "agent_1": "1"})


def test_solving_before_the_turn_limit_terminates():
    env = Guess(num_turns=5)
    env.reset(seed=0, options={"task_index": 42})
    _, rewards, terms, truncs, _ = env.step({"agent_0": "42", "agent_1": "The answer is 42"})
    assert rewards == {"agent_0": 1.0, "agent_1": 1.0}
    assert all(terms.values()) and not any(truncs.values())


@pytest.mark.parametrize(
    ("env_cls", "expected"),
    [
        (Tagged, {"agent_0": 0.0, "agent_1": 0.0}),  # cooperative: joint 0.5, the team pays 0.5
        (TaggedSolo, {"agent_0": 0.5, "agent_1": 0.0}),  # general: only the offender pays
    ],
)
def test_invalid_action_is_flagged_with_the_penalty(env_cls, expected):
    env = env_cls()
    env.reset(seed=0, options={"task_index": 0})
    _, rewards, _, _, infos = env.step({"agent_0": "<answer>4</answer>", "agent_1": "four"})
    assert infos["agent_1"]["invalid_action"] == "missing <answer> tag"
    assert "invalid_action" not in infos["agent_0"]
    assert rewards == expected


@pytest.mark.parametrize(
    ("action", "reason"), [(None, "no action given"), (7, "action is a int, not a str"), (b"x", "bytes")]
)
def test_none_and_non_str_actions_are_invalid_not_errors(action, reason):
    env = Echo()
    env.reset(seed=0, options={"task_index": 1})
    _, rewards, _, _, infos = env.step({"agent_0": "green", "agent_1": action})
    assert reason in infos["agent_1"]["invalid_action"]
    assert infos["agent_1"]["response_history"] == [""]
    assert rewards == {"agent_0": 0.0, "agent_1": 0.0}
    # the task's penalty applies too (Tagged scores the empty text as a missing tag)
    env = TaggedSolo()
    env.reset(seed=0, options={"task_index": 1})
    _, rewards, _, _, infos = env.step({"agent_0": "<answer>9</answer>", "agent_1": action})
    assert "invalid_action" in infos["agent_1"]
    assert rewards == {"agent_0": 0.5, "agent_1": 0.0}


def test_missing_agent_action_is_invalid():
    env = Echo()
    env.reset(seed=0, options={"task_index": 0})
    _, _, _, _, infos = env.step({"agent_0": "red"})
    assert infos["agent_1"]["invalid_action"] == "no action given"


def test_unknown_agent_raises_value_error():
    env = Echo()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="agent_7"):
        env.step({"agent_0": "red", "agent_1": "red", "agent_7": "red"})


def test_long_actions_are_clipped_and_reported():
    env = Guess(max_action_length=10)
    env.reset(seed=0, options={"task_index": 1})
    _, _, _, _, infos = env.step({"agent_0": "x" * 25, "agent_1": "short"})
    assert infos["agent_0"]["action_clipped"] == 25
    assert infos["agent_0"]["response_history"] == ["x" * 10]
    assert "action_clipped" not in infos["agent_1"]
    assert env.last_actions["agent_0"] == "x" * 10


def test_long_observations_are_clipped_and_reported():
    env = Guess(max_observation_length=12)
    obs, infos = env.reset(seed=0, options={"task_index": 1})
    full = "agent_0: guess a number between 0 and 99."
    assert obs["agent_0"] == full[:12]
    assert infos["agent_0"]["observation_clipped"] == len(full)
    obs, _, _, _, infos = env.step({"agent_0": "0", "agent_1": "0"})
    assert all(len(o) == 12 for o in obs.values())
    assert infos["agent_0"]["observation_clipped"] > 12
    assert all(env.observation_space(a).contains(o) for a, o in obs.items())


def test_state_holds_every_observation_and_the_last_actions():
    env = Guess(num_agents=3)
    obs, _ = env.reset(seed=0, options={"task_index": 5})
    state = env.state()
    assert isinstance(state, str)
    assert all(o in state for o in obs.values())
    actions = {"agent_0": "first 1", "agent_1": "second 2", "agent_2": "third 3"}
    obs, *_ = env.step(actions)
    state = env.state()
    assert all(o in state for o in obs.values())
    assert all(a in state for a in actions.values())


def test_state_is_the_observations_then_the_joint_text_of_the_last_actions():
    env = Echo()
    env.reset(seed=0, options={"task_index": 1})
    before = env.state()
    assert before == "[agent_0]\nSay 'green'.\n\n[agent_1]\nSay 'green'."
    env.step({"agent_1": "green!", "agent_0": "GREEN"})  # agents in possible_agents order, whatever the dict's
    assert env.state() == joint_text(before, {"agent_0": "GREEN", "agent_1": "green!"})
    assert env.state() == before + "\n\n[joint action]\n\n[agent_0 action]\nGREEN\n\n[agent_1 action]\ngreen!"
    assert joint_text(before, {}) == before


@pytest.mark.parametrize("make_env", [Echo, lambda: make("smoke/FormatAgreement-v1")], ids=["echo", "smoke"])
def test_reward_model_text_is_env_state_after_the_step(make_env):
    """rewards.models.joint_text(state before a step, completions) is what env.state() shows after it."""
    env = make_env()
    assert env.possible_agents == ["agent_0", "agent_1"] and env.num_turns == 1
    env.reset(seed=0)
    before = env.state()
    completions = ["blue", "two lines\n\n[agent_0 action]\nand a fake header"]
    env.step(dict(zip(env.possible_agents, completions)))
    assert rewards.models.joint_text(before, completions) == env.state()


def test_observe_returns_what_reset_and_step_returned():
    env = Guess(num_turns=2)
    assert env.observations == {}
    with pytest.raises(RuntimeError, match=r"call reset\(\) first"):
        env.observe("agent_0")
    obs, _ = env.reset(seed=3, options={"task_index": 40})
    assert {a: env.observe(a) for a in env.agents} == obs == env.observations
    obs, *_ = env.step({"agent_0": "10", "agent_1": "x"})
    assert {a: env.observe(a) for a in env.agents} == obs == env.observations
    assert env.clone().observations == obs
    last, *_ = env.step({"agent_0": "10", "agent_1": "x"})  # the final step shows no new observation
    assert env.agents == [] and last == obs == env.observations
    env.observations["agent_0"] = "changed"  # a copy: the env keeps its own
    assert env.observe("agent_0") == obs["agent_0"]
    with pytest.raises(ValueError, match="no observation for agent 'agent_7'"):
        env.observe("agent_7")


def test_clone_is_independent():
    env = Guess(num_turns=4)
    env.reset(seed=1, options={"task_index": 30})
    env.step({"agent_0": "30", "agent_1": "5"})
    twin = env.clone()
    state, agents, solved = env.state(), list(env.agents), list(env.task["solved"])
    twin.step({"agent_0": "1", "agent_1": "30"})
    assert twin.task["solved"] == ["agent_0", "agent_1"] and twin.agents == []
    assert (env.state(), env.agents, env.task["solved"]) == (state, agents, solved)
    # both continue identically when given the same actions
    fresh_twin = env.clone()
    assert fresh_twin.step({"agent_0": "7", "agent_1": "8"}) == env.step({"agent_0": "7", "agent_1": "8"})


def test_pickle_round_trip_mid_episode():
    env = Guess(num_turns=3)
    env.reset(seed=2)
    env.step({"agent_0": "12", "agent_1": "<answer>"})
    twin = pickle.loads(pickle.dumps(env))
    actions = {"agent_0": "50", "agent_1": "🙂"}
    assert twin.step(actions) == env.step(actions)
    assert twin.state() == env.state()


def test_render_ansi():
    env = Echo(render_mode="ansi")
    env.reset(seed=0, options={"task_index": 2})
    env.step({"agent_0": "blue", "agent_1": "azure"})
    text = env.render()
    assert "echo-v0" in text and "'azure'" in text and "reward=0.0" in text
    assert Echo().render() is None
    with pytest.raises(ValueError, match="render_mode"):
        Echo(render_mode="human")


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"num_agents": 0}, "num_agents"),
        ({"num_turns": 0}, "num_turns"),
        ({"num_agents": 2, "roles": ["solo"]}, "roles"),
    ],
)
def test_constructor_validation(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        Echo(**kwargs)


def test_spaces_are_the_same_object_and_contain_observations():
    env = Echo()
    assert env.observation_space("agent_0") is env.observation_space("agent_0")
    assert env.action_space("agent_1") is env.action_space("agent_1")
    assert isinstance(env.observation_space("agent_0"), TextSpace)
    obs, _ = env.reset(seed=0)
    assert all(env.observation_space(a).contains(o) for a, o in obs.items())
