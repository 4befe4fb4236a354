"""Invalid play never pays: `check_game` on every registered game and on games no suite lists, in both
invalid-action modes, and it catches a game that pays for pasting the legal-action list."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspiel")

import comlrl_env  # noqa: E402
from comlrl_env import make  # noqa: E402
from comlrl_env.action_text import parse_action  # noqa: E402
from comlrl_env.openspiel import OpenSpielEnv  # noqa: E402
from comlrl_env.testing import GameCheckError, check_game  # noqa: E402

REGISTERED = sorted(i for i in comlrl_env.registry if i.startswith("openspiel/"))
UNLISTED = ["openspiel/connect_four-v0", "openspiel/phantom_ttt-v0", "openspiel/first_sealed_auction-v0"]


def test_the_registered_games_are_the_games_suite():
    from comlrl_env.suites import suites

    assert REGISTERED == sorted(suites["games"]) and not set(UNLISTED) & set(REGISTERED)


@pytest.mark.parametrize("env_id", REGISTERED + UNLISTED)
def test_degenerate_answers_earn_less_than_random_legal_play_in_every_seat(env_id):
    means = check_game(env_id, episodes=200)
    agents = make(env_id).possible_agents
    assert set(means) == {"random", "empty", "babble", "echo", "all_legal"}
    for label, by_seat in means.items():
        assert list(by_seat) == agents
        if label != "random":
            assert all(by_seat[a] < means["random"][a] for a in agents), (label, means)


@pytest.mark.parametrize("env_id", ["openspiel/tic_tac_toe-v0", "openspiel/tiny_hanabi-v0",
                                    "openspiel/goofspiel-v0", "openspiel/negotiation-v0"])
def test_random_mode_never_pays_either(env_id):
    means = check_game(env_id, episodes=100, invalid_action="random")
    env = make(env_id)
    floor = env.game.min_utility()
    # every seat's episode has an invalid move, so it returns at most the minimum utility
    assert all(v <= floor + 1e-9 for label in ("empty", "babble", "echo") for v in means[label].values()), means


class FirstListed(OpenSpielEnv):
    """The bug the check exists for: an answer that names no single action plays the first-listed one."""

    def score(self, actions):
        fixed = dict(actions)
        for agent in self.to_move():
            legal = self.legal_actions(agent)
            if parse_action(actions.get(agent, ""), legal) is None:
                fixed[agent] = legal[0]
        return super().score(fixed)


def test_check_game_catches_a_game_that_pays_for_the_pasted_list():
    with pytest.raises(GameCheckError, match=r"(?s)tic_tac_toe.*'all_legal' in seat agent_0 returned 0\.\d+ on average, "
                                             r"random legal play 0\.\d+ \(200 episodes"):
        check_game(FirstListed("tic_tac_toe"), episodes=200)


def test_check_game_needs_a_game():
    with pytest.raises(TypeError, match="needs a game env with legal_actions.*use check_task"):
        check_game("coop/LengthRatio-v1")
    with pytest.raises(ValueError, match="episodes must be >= 1, got 0"):
        check_game("openspiel/kuhn_poker-v0", episodes=0)
