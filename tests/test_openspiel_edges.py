"""OpenSpiel wrapper edge cases (issue 48): infos hold only what the seat knows, the restatement check reads
only the seat's own observations, and `env.replay` rebuilds every registered game's episodes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyspiel")

import comlrl_env  # noqa: E402
from comlrl_env import make  # noqa: E402

REGISTERED = sorted(i for i in comlrl_env.registry if i.startswith("openspiel/"))
UNLISTED = ["openspiel/connect_four-v0", "openspiel/phantom_ttt-v0", "openspiel/first_sealed_auction-v0"]


def random_legal(env, rng: np.random.Generator) -> dict[str, str]:
    return {a: legal[int(rng.integers(len(legal)))] if (legal := env.legal_actions(a)) else "" for a in env.agents}


def history_fields(info: dict) -> tuple:
    """The fields that describe the episode so far (the others report the step that just happened)."""
    return info["turn"], tuple(info["prompt_history"]), tuple(info["response_history"]), info["to_move"]


# ----- 6. infos carry nothing the seat's information state does not ------------------------------------


def test_phantom_ttt_infos_do_not_count_the_opponents_failed_attempts():
    env = make("openspiel/phantom_ttt-v0")

    def play(moves):
        obs, infos = env.reset(seed=0)
        for text in moves:
            obs, _, _, _, infos = env.step({env.to_move()[0]: text})
        return obs["agent_1"], env.game_state.information_state_string(1), infos["agent_1"]

    # Player 0's failed attempt at o's cell (1,1) is hidden from player 1: same information, same prompt.
    failed = play(["x(0,0)", "o(1,1)", "x(1,1)", "x(2,2)"])
    direct = play(["x(0,0)", "o(1,1)", "x(2,2)"])
    assert failed[:2] == direct[:2]
    assert failed[2] == direct[2]
    assert failed[2]["turn"] == 1 and failed[2]["response_history"] == ["o(1,1)"]


@pytest.mark.parametrize("env_id", ["openspiel/phantom_ttt-v0", "openspiel/kuhn_poker-v0",
                                    "openspiel/goofspiel-v0"])
def test_one_information_state_gives_one_info(env_id):
    """Over random episodes: whenever a seat has the same information state and prompt, its infos' turn and
    histories agree."""
    env = make(env_id)
    rng = np.random.default_rng(0)
    seen: dict[tuple, tuple] = {}
    repeats = 0
    for episode in range(150):
        obs, infos = env.reset(seed=episode)
        while env.agents:
            for agent in env.agents:
                player = env.player(agent)
                key = (agent, env.game_state.information_state_string(player), obs[agent])
                value = history_fields(infos[agent])
                repeats += key in seen
                assert seen.setdefault(key, value) == value, (env_id, key)
            obs, _, _, _, infos = env.step(random_legal(env, rng))
    assert repeats > 50


# ----- 7. the restatement check reads the seat's own observations only --------------------------------


def test_a_copy_of_the_opponents_prompt_is_judged_alike_whatever_card_it_holds():
    """Kuhn poker: the mover answers with the waiting seat's prompt (its card guessed) and an answer line. The
    verdict must not depend on whether the guess holds the opponent's true card."""
    env = make("openspiel/kuhn_poker-v0")
    by_card: dict[str, dict[str, str]] = {}  # the mover's prompt -> the waiter's prompt, per opponent card
    for seed in range(40):
        obs, _ = env.reset(seed=seed)
        mover, = env.to_move()
        waiter = next(a for a in env.agents if a != mover)
        by_card.setdefault(obs[mover], {})[env.game_state.information_state_string(1)] = obs[waiter]
    verdicts = set()
    checked = 0
    for seed in range(40):
        obs, _ = env.reset(seed=seed)
        mover, = env.to_move()
        waiter = next(a for a in env.agents if a != mover)
        for guess in by_card[obs[mover]].values():
            twin = env.clone()
            answer = guess + "\nI hold a good card, so I will bet." * 20 + "\nAction: Bet"  # too long to be "nearly" it
            _, rewards, _, _, infos = twin.step({mover: answer, waiter: ""})
            reason = infos[mover].get("invalid_action", "").removeprefix(f"{answer[:80]!r}: ")
            verdicts.add((guess == obs[waiter], reason, infos[mover].get("action_played")))
            checked += 1
    assert checked >= 40 and {right for right, *_ in verdicts} == {True, False}
    assert len({tuple(v) for _, *v in verdicts}) == 1, verdicts  # the right guess is told apart by nothing
    # A restatement of the seat's own prompt is still invalid.
    obs, _ = env.reset(seed=0)
    mover, = env.to_move()
    _, _, _, _, infos = env.step({mover: obs[mover] + "\nAction: Bet"})
    assert infos[mover]["invalid_action"].endswith("it restates the observation")


# ----- 8. replay ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", REGISTERED + UNLISTED)
def test_replay_rebuilds_every_episode(env_id):
    env = make(env_id)
    rng = np.random.default_rng(0)
    for episode in range(10):
        env.reset(seed=episode)
        steps = 0
        while env.agents:
            if steps == 1:  # mid-episode, too
                middle = env.replay()
                assert middle.history() == env.game_state.history() and str(middle) == str(env.game_state)
            env.step(random_legal(env, rng))
            steps += 1
        state = env.game_state
        for replayed in (env.replay(), env.replay(state.history())):  # a second replay deals the same
            assert replayed.history() == state.history() and str(replayed) == str(state), (env_id, episode)
            assert replayed.is_terminal() and replayed.returns() == state.returns()
            for p in range(env.game.num_players()):
                if env.view == "observation":
                    assert replayed.observation_string(p) == state.observation_string(p)
                else:
                    assert replayed.information_state_string(p) == state.information_state_string(p)
