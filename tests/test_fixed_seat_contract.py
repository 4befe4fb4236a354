"""A fixed seat that breaks its contract (one str per env and sample, env-major) fails with an error naming the
seat, the policy and what was wrong, not an IndexError deep in the rollout engine."""

from __future__ import annotations

import pytest
from test_mixed_teams import TakeTurns, magrpo

from comlrl_env.policies import FixedPolicy


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
def test_a_fixed_seat_that_breaks_its_contract_names_itself(tiny_dir, policy, error, match):
    learner = magrpo(tiny_dir, TakeTurns(num_turns=2), agents=[tiny_dir, policy])
    with pytest.raises(error, match=match):
        learner.learn()


class Raises(FixedPolicy):
    """A fixed policy whose act() fails."""

    def act(self, envs, agent, num_samples=1):
        return {}["no such key"]

    def describe(self):
        return {"policy": "raises"}


def test_a_fixed_seat_whose_act_raises_names_the_seat_and_chains_the_error(tiny_dir):
    """It used to surface as a bare KeyError from the user's act(), with nothing naming the seat."""
    learner = magrpo(tiny_dir, TakeTurns(num_turns=2), agents=[tiny_dir, Raises()])
    with pytest.raises(RuntimeError, match=r"the fixed policy of seat 'agent_1' \(Raises \{'policy': 'raises'\}\) "
                                           r"raised in act\(\): KeyError: 'no such key'") as info:
        learner.learn()
    assert isinstance(info.value.__cause__, KeyError)
