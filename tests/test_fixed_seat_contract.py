"""A fixed seat that breaks its contract (one str per env and sample, env-major) fails with an error naming the
seat, the policy and what was wrong, not an IndexError deep in the rollout engine: when the learner is built,
before any model loads (each fixed seat is asked once then), not at `learn()`."""

from __future__ import annotations

import pytest
from test_mixed_teams import TakeTurns, magrpo

from comlrl_env.policies import FixedPolicy
from learners.loop import learner as learner_module


class Returns(FixedPolicy):
    """A fixed policy whose act() returns `make(n)` for n requested texts."""

    def __init__(self, make):
        self.make = make

    def act(self, envs, agent, num_samples=1):
        return self.make(len(envs) * num_samples)


@pytest.mark.parametrize("policy, error, match", [
    (Returns(lambda n: ["a b"] * (n - 1)), ValueError,
     r"fixed policy of seat 'agent_1' \(Returns .*\) returned \d+ texts from act\(\); it must return one str per env "
     r"and sample, env-major: \d+ x 2 = \d+"),
    (Returns(lambda n: ["a b"] * (n + 1)), ValueError, r"seat 'agent_1' .* returned \d+ texts"),
    (Returns(lambda n: "a b"), TypeError, r"seat 'agent_1' .* returned str from act\(\); it must return a list"),
    (Returns(lambda n: ["a b"] * (n - 1) + [7]), TypeError, r"seat 'agent_1' .* returned a int as text \d+ from act"),
    (lambda observation: None, TypeError,
     r"seat 'agent_1' \(CallablePolicy \{'policy': 'callable', .*\) returned a NoneType as text 0"),
])
def test_a_fixed_seat_that_breaks_its_contract_names_itself(tiny_dir, policy, error, match, monkeypatch):
    monkeypatch.setattr(learner_module, "load_agents", no_loading)
    with pytest.raises(error, match=match):
        magrpo(tiny_dir, TakeTurns(num_turns=2), agents=[tiny_dir, policy])


def no_loading(*args, **kwargs):
    raise AssertionError("a model loaded before the fixed seat was checked")


class Raises(FixedPolicy):
    """A fixed policy whose act() fails."""

    def act(self, envs, agent, num_samples=1):
        return {}["no such key"]

    def describe(self):
        return {"policy": "raises"}


def test_a_fixed_seat_whose_act_raises_names_the_seat_and_chains_the_error(tiny_dir):
    """It used to surface as a bare KeyError from the user's act(), with nothing naming the seat."""
    with pytest.raises(RuntimeError, match=r"the fixed policy of seat 'agent_1' \(Raises \{'policy': 'raises'\}\) "
                                           r"raised in act\(\): KeyError: 'no such key'") as info:
        magrpo(tiny_dir, TakeTurns(num_turns=2), agents=[tiny_dir, Raises()])
    assert isinstance(info.value.__cause__, KeyError)


class Counts(FixedPolicy):
    """A well-behaved fixed policy that counts its calls."""

    calls = 0

    def act(self, envs, agent, num_samples=1):
        Counts.calls += 1
        return ["a b"] * (len(envs) * num_samples)


def test_the_construction_probe_asks_a_copy_and_leaves_a_good_seat_alone(tiny_dir):
    seat = Counts()
    learner = magrpo(tiny_dir, TakeTurns(num_turns=2), agents=[tiny_dir, seat])
    assert Counts.calls == 1 and learner.fixed[1] is seat  # asked once, through a copy; the seat plays as given
    learner.learn()
