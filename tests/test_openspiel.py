"""OpenSpiel games as text envs: the games suite, rewards vs OpenSpiel's returns, parsing, turns, bots, errors."""

from __future__ import annotations

import contextlib
import io
import pickle

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")

from pettingzoo.test import parallel_api_test  # noqa: E402

import comlrl_env  # noqa: E402
from comlrl_env import EnvNotFound, make  # noqa: E402
from comlrl_env import openspiel as os_module  # noqa: E402
from comlrl_env.openspiel import OpenSpielBot, OpenSpielEnv  # noqa: E402
from comlrl_env.policies import FixedPolicy  # noqa: E402
from comlrl_env.suites import suites  # noqa: E402
from comlrl_env.testing import check_env  # noqa: E402

GAMES = suites["games"]
OTHER_GAMES = ["openspiel/connect_four-v0", "openspiel/phantom_ttt-v0", "openspiel/first_sealed_auction-v0"]
"""OpenSpiel games no suite lists, resolved by name."""


def random_legal(env: OpenSpielEnv, rng: np.random.Generator) -> dict[str, str]:
    """A legal action text for every agent to move, junk for the others (which must be ignored)."""
    actions = {}
    for agent in env.agents:
        legal = env.legal_actions(agent)
        actions[agent] = legal[int(rng.integers(len(legal)))] if legal else "junk from a waiting agent"
    return actions


def replay(env: OpenSpielEnv, moves: list[dict[int, str]]):
    """A fresh pyspiel state that replays `moves` (action texts per player per step) and the env's chance record."""
    game = pyspiel.load_game(env.game_name, env.game.get_parameters())
    state = game.new_initial_state()
    chance = iter(env.chance_history)

    def resolve_chance():
        while state.is_chance_node():
            state.apply_action(next(chance))

    def action_id(player: int, text: str) -> int:
        return {state.action_to_string(player, a): a for a in state.legal_actions(player)}[text]

    resolve_chance()
    for step in moves:
        if state.is_simultaneous_node():
            state.apply_actions([action_id(p, step[p]) for p in range(game.num_players())])
        else:
            (player, text), = step.items()
            assert player == state.current_player()
            state.apply_action(action_id(player, text))
        resolve_chance()
    assert next(chance, None) is None, "the env recorded chance outcomes the replay did not use"
    return state


# ----- every suite game passes the project's checks and PettingZoo's API test -----------------


def test_games_suite_lists_registered_ids():
    assert len(GAMES) == 10
    for env_id in GAMES:
        assert env_id in comlrl_env.registry
        env = make(env_id)
        assert env.metadata["name"] == env_id and env.metadata["num_tasks"] is None
        assert env.possible_agents == [f"agent_{i}" for i in range(env.game.num_players())]
    assert make("openspiel/hanabi-v0").game.get_parameters()["colors"] == 2  # small defaults


@pytest.mark.parametrize("env_id", GAMES)
def test_check_env_and_parallel_api_test(env_id):
    check_env(env_id)
    env = make(env_id)
    with contextlib.redirect_stdout(io.StringIO()):
        parallel_api_test(env, num_cycles=env.num_turns + 1)


def test_reward_structures():
    structures = {env_id: make(env_id).metadata["reward_structure"] for env_id in GAMES}
    assert structures["openspiel/tiny_hanabi-v0"] == structures["openspiel/hanabi-v0"] == "cooperative"
    assert structures["openspiel/coop_box_pushing-v0"] == "cooperative"
    assert structures["openspiel/bargaining-v0"] == structures["openspiel/negotiation-v0"] == "general"
    assert structures["openspiel/kuhn_poker-v0"] == structures["openspiel/goofspiel-v0"] == "competitive"


# ----- rewards add up to OpenSpiel's returns ------------------------------------------------------


@pytest.mark.parametrize("env_id", GAMES)
def test_summed_rewards_equal_openspiel_returns(env_id):
    env = make(env_id)
    rng = np.random.default_rng(0)
    for episode in range(100):
        env.reset(seed=episode)
        totals = dict.fromkeys(env.possible_agents, 0.0)
        moves = []
        while env.agents:
            actions = random_legal(env, rng)
            movers = env.to_move()
            _, rewards, terminations, truncations, infos = env.step(actions)
            assert not any("invalid_action" in info for info in infos.values()), infos
            moves.append({env.player(a): infos[a]["action_played"] for a in movers})
            assert all(infos[a]["action_played"] == actions[a] for a in movers)
            for agent, reward in rewards.items():
                totals[agent] += reward
        assert all(terminations.values()) and not any(truncations.values()), "the turn limit cut a game short"
        state = replay(env, moves)
        assert state.is_terminal()
        assert state.history() == env.game_state.history()
        returns = state.returns()
        assert [totals[a] for a in env.possible_agents] == pytest.approx(returns, abs=1e-9), (episode, moves)


# ----- answers: played, invalid, forfeited ----------------------------------------------------------


def first_mover(env_id: str, seed: int = 0, **kwargs) -> tuple[OpenSpielEnv, str, str]:
    env = make(env_id, **kwargs)
    env.reset(seed=seed)
    (mover,) = env.to_move()
    (waiter,) = [a for a in env.agents if a != mover]
    return env, mover, waiter


def test_exact_and_normalised_text_is_played_without_penalty():
    for text, played in (("Bet", "Bet"), ("  bet ", "Bet"), ("PASS.", "Pass"), ("p", "Pass"), ("`Bet`", "Bet"),
                         ("Let me think.\nAction: Pass", "Pass")):
        env, mover, waiter = first_mover("openspiel/kuhn_poker-v0")
        _, rewards, _, _, infos = env.step({mover: text, waiter: "ignored"})
        assert "invalid_action" not in infos[mover] and infos[mover]["action_played"] == played
        assert env.game_state.history()[-1] == {"Pass": 0, "Bet": 1}[played]
        assert rewards == {"agent_0": 0.0, "agent_1": 0.0} and env.agents


BAD_ANSWERS = ["", "nonsense", "   ", "🙂", None, 42, ["Bet"], "Pass\nBet", "I will bet now"]


@pytest.mark.parametrize("bad", BAD_ANSWERS)
def test_an_invalid_answer_forfeits_a_zero_sum_game(bad):
    for seed in range(3):
        env, mover, waiter = first_mover("openspiel/kuhn_poker-v0", seed=seed)
        _, rewards, terminations, truncations, infos = env.step({mover: bad, waiter: "whatever"})
        assert "invalid_action" in infos[mover] and "invalid_action" not in infos[waiter]
        assert infos[mover]["forfeit"] and "action_played" not in infos[mover]
        # the offender gets the game's minimum utility, the other seat the rest of the zero sum: a win by forfeit
        assert rewards == {mover: -2.0, waiter: 2.0}
        assert all(terminations.values()) and not any(truncations.values()) and env.agents == []
        assert env.to_move() == [] and not infos[waiter]["to_move"]


def test_forfeit_after_paid_moves_and_in_cooperative_games():
    env = make("openspiel/hanabi-v0")  # pays 1 per successful play as it goes; min utility 0, shared
    for seed in range(40):
        env.reset(seed=seed)
        paid = dict.fromkeys(env.possible_agents, 0.0)
        rng = np.random.default_rng(seed)
        while env.agents and sum(paid.values()) == 0:
            _, rewards, _, _, _ = env.step(random_legal(env, rng))
            for agent, reward in rewards.items():
                paid[agent] += reward
        if env.agents:
            break
    else:
        pytest.fail("no hanabi episode paid before its end")
    (mover,) = env.to_move()
    _, rewards, terminations, _, infos = env.step({mover: "?"})
    # the whole team's return becomes the minimum (0): this step takes back what was paid
    assert {a: paid[a] + rewards[a] for a in env.possible_agents} == dict.fromkeys(env.possible_agents, 0.0)
    assert all(terminations.values()) and infos[mover]["forfeit"]
    general = make("openspiel/bargaining-v0")  # general sum: the other seat keeps what it has (0), the offender 0
    general.reset(seed=0)
    (mover,) = general.to_move()
    assert general.step({mover: ""})[1] == {"agent_0": 0.0, "agent_1": 0.0} and not general.agents


@pytest.mark.parametrize("env_id", ["openspiel/kuhn_poker-v0", "openspiel/tiny_hanabi-v0"])
@pytest.mark.parametrize("bad", BAD_ANSWERS)
def test_random_mode_plays_a_random_legal_action_and_charges_the_offender_the_utility_range(env_id, bad):
    for seed in range(3):
        env, mover, waiter = first_mover(env_id, seed=seed, invalid_action="random")
        span = env.game.max_utility() - env.game.min_utility()
        assert env.invalid_action_penalty == span == {"openspiel/kuhn_poker-v0": 4.0}.get(env_id, 10.0)
        legal = env.legal_actions(mover)
        returns_before = list(env.game_state.returns())
        _, rewards, _, _, infos = env.step({mover: bad, waiter: "whatever"})
        assert "invalid_action" in infos[mover] and "invalid_action" not in infos[waiter]
        assert infos[mover]["action_played"] in legal and "forfeit" not in infos[mover]
        gain = [r - b for r, b in zip(env.game_state.returns(), returns_before)]
        index = env.possible_agents.index(mover)
        # charged once, to the offender only, even in a cooperative game (tiny_hanabi)
        assert rewards[mover] == pytest.approx(gain[index] - span)
        assert rewards[waiter] == pytest.approx(gain[1 - index])


def test_random_mode_penalty_is_checked_and_the_fallback_is_seeded():
    played = set()
    for seed in range(12):
        env, mover, waiter = first_mover("openspiel/kuhn_poker-v0", seed=seed, invalid_action="random",
                                         invalid_action_penalty=5)
        _, rewards, _, _, infos = env.step({mover: "?", waiter: "?"})
        assert rewards[mover] == -5.0 and rewards[waiter] == 0.0
        played.add(infos[mover]["action_played"])
        again, mover2, waiter2 = first_mover("openspiel/kuhn_poker-v0", seed=seed, invalid_action="random")
        assert again.step({mover2: "?", waiter2: "?"})[4][mover2]["action_played"] == infos[mover]["action_played"]
    assert played == {"Pass", "Bet"}  # uniformly random: both show up
    with pytest.raises(ValueError, match=r"at least the game's utility range 4 \(max 2 - min -2\).*got 1.0"):
        make("openspiel/kuhn_poker-v0", invalid_action="random", invalid_action_penalty=1.0)
    with pytest.raises(ValueError, match="applies to invalid_action='random'"):
        make("openspiel/kuhn_poker-v0", invalid_action_penalty=4.0)
    with pytest.raises(ValueError, match=r"invalid_action must be one of \('forfeit', 'random'\), got 'skip'"):
        make("openspiel/kuhn_poker-v0", invalid_action="skip")
    with pytest.raises(ValueError, match=r"invalid_action_penalty must be a positive number, got -1"):
        make("openspiel/kuhn_poker-v0", invalid_action="random", invalid_action_penalty=-1)


def test_a_game_without_finite_utilities_takes_the_penalty_it_is_given():
    """With no finite utility range, the given penalty bounds the returns' range; every finite one was refused
    as below an infinite range, which the error for a missing penalty told the user to give."""
    with pytest.raises(ValueError, match="declares no finite utility range; give invalid_action_penalty"):
        make("openspiel/mfg_crowd_modelling-v0", invalid_action="random")
    env = make("openspiel/mfg_crowd_modelling-v0", invalid_action="random", invalid_action_penalty=5.0)
    assert env.invalid_action_penalty == 5.0


def test_fallback_moves_never_change_chance():
    """The move played for an invalid answer comes from its own stream: an episode where a seat answers
    invalidly deals exactly the cards of the episode where it names the same move itself."""
    env, twin = make("openspiel/hanabi-v0", invalid_action="random"), make("openspiel/hanabi-v0", invalid_action="random")
    compared = 0
    for seed in range(30):
        env.reset(seed=seed)
        twin.reset(seed=seed)
        rng = np.random.default_rng(seed)
        step = 0
        while env.agents:
            (mover,) = env.to_move()
            invalid = step % 3 == 1
            actions = {mover: "no idea"} if invalid else random_legal(env, rng)
            _, _, _, _, infos = env.step(actions)
            twin_actions = {mover: infos[mover]["action_played"]}
            twin_infos = twin.step(twin_actions)[4]
            assert ("invalid_action" in infos[mover]) == invalid and "invalid_action" not in twin_infos[mover]
            step += 1
        assert env.chance_history == twin.chance_history and env.game_state.history() == twin.game_state.history()
        compared += len(env.chance_history)
    assert compared > 100


@pytest.mark.parametrize("env_id", GAMES + OTHER_GAMES)
def test_every_prompt_ends_with_the_answer_rule(env_id):
    env = make(env_id)
    obs, _ = env.reset(seed=0)
    for agent in env.to_move():
        lines = obs[agent].rstrip().splitlines()
        assert lines[-1] == "Your action:"
        assert lines[-2].startswith("How to answer: reply with exactly one legal action")
        assert "An invalid answer forfeits the game" in lines[-2] and f"{env.game.min_utility():g}." in lines[-2]
    assert "plays a random legal action for you" in make(env_id, invalid_action="random").reset(seed=0)[0][
        env.to_move()[0]]


def test_an_answer_that_restates_the_observation_is_invalid():
    env, mover, waiter = first_mover("openspiel/kuhn_poker-v0")
    restated = env.observe(mover) + "\nAction: Bet"  # one answer line, but the rest is the prompt
    _, rewards, _, _, infos = env.step({mover: restated, waiter: ""})
    assert infos[mover]["invalid_action"].endswith("it restates the observation") and rewards[mover] == -2.0


def test_agents_not_to_move_are_ignored():
    env, mover, waiter = first_mover("openspiel/kuhn_poker-v0")
    assert env.legal_actions(waiter) == [] and env.legal_actions(mover) == ["Pass", "Bet"]
    obs, infos = env.reset(seed=0)
    assert infos[mover]["to_move"] and not infos[waiter]["to_move"]
    assert obs[mover].rstrip().endswith("Your action:") and "Pass\nBet" in obs[mover]
    assert "not your turn" in obs[waiter] and "Pass" not in obs[waiter].split("\n\n", 2)[-1]
    # the waiter's text is ignored: never parsed, flagged or charged, whatever it is (or when it is missing)
    for waiter_text in ("Bet", "", None, 42):
        env.reset(seed=0)
        actions = {mover: "Pass"} if waiter_text is None else {mover: "Pass", waiter: waiter_text}
        _, rewards, _, _, infos = env.step(actions)
        assert "invalid_action" not in infos[waiter] and "action_played" not in infos[waiter]
        assert rewards[waiter] == 0.0
        assert env.game_state.history()[-1] == 0  # only the mover's Pass was played
    assert env.to_move() == [waiter] and infos[waiter]["to_move"] and not infos[mover]["to_move"]


def test_simultaneous_moves_take_every_players_action_in_one_step():
    env = make("openspiel/goofspiel-v0")
    obs, infos = env.reset(seed=3)
    assert env.to_move() == ["agent_0", "agent_1"] and all(info["to_move"] for info in infos.values())
    turns = len(env.game_state.history())
    _, _, _, _, infos = env.step({"agent_0": "[P0]Bid: 4", "agent_1": "bid 1"})
    assert infos["agent_0"]["action_played"] == "[P0]Bid: 4" and infos["agent_1"]["action_played"] == "[P1]Bid: 1"
    assert not any("invalid_action" in info for info in infos.values())
    assert len(env.game_state.history()) == turns + 2 + 1  # two bids, then the next point card
    assert "4" not in env.observe("agent_0").split("P0 hand:")[1].split("\n")[0]


# ----- seeding, chance, clone ----------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["openspiel/hanabi-v0", "openspiel/negotiation-v0", "openspiel/goofspiel-v0"])
def test_same_seed_same_chance_and_observations(env_id):
    def episode(env, seed):
        obs, _ = env.reset(seed=seed)
        seen = [obs]
        while env.agents:
            seen.append(env.step({a: "no idea" for a in env.agents})[0])  # random legal plays, seeded at reset
        return env.chance_history, seen

    first, second = make(env_id, invalid_action="random"), make(env_id, invalid_action="random")
    assert episode(first, 7) == episode(second, 7) == episode(first, 7)
    assert episode(first, 7)[0] != episode(first, 8)[0] or episode(first, 7)[1] != episode(first, 8)[1]


def test_clone_is_independent():
    env = make("openspiel/leduc_poker-v0")
    env.reset(seed=1)
    env.step({a: "Call" for a in env.agents})
    twin = env.clone()
    assert twin.game_state is not env.game_state and twin.game is env.game
    assert twin.game_state.history() == env.game_state.history() and twin.chance_history == env.chance_history
    history, chance, state = env.game_state.history(), env.chance_history, env.state()
    while twin.agents:
        twin.step({a: "Raise" for a in twin.agents})
    assert env.game_state.history() == history and env.chance_history == chance and env.state() == state
    copied = pickle.loads(pickle.dumps(env))
    assert copied.game_state.history() == history


# ----- bots ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", GAMES)
def test_random_bot_plays_legal_text(env_id):
    env = make(env_id)
    env.reset(seed=0)
    bot, twin = OpenSpielBot("random", seed=0), OpenSpielBot("random", seed=0)
    assert isinstance(bot, FixedPolicy) and bot.describe() == {"policy": "openspiel_bot", "kind": "random", "seed": 0}
    while env.agents:
        movers = env.to_move()
        actions = {}
        for agent in env.agents:
            texts = bot.act([env, env], agent, num_samples=2)
            assert texts == twin.act([env, env], agent, num_samples=2) and len(texts) == 4
            if agent in movers:
                assert all(t in env.legal_actions(agent) for t in texts)
            else:
                assert texts == [""] * 4
            actions[agent] = texts[0]
        _, _, _, _, infos = env.step(actions)
        assert not any("invalid_action" in info for info in infos.values())


def test_mcts_bot_plays_legal_reproducible_text():
    env = make("openspiel/tic_tac_toe-v0")
    env.reset(seed=0)
    env.step({"agent_0": "x(0,0)", "agent_1": ""})
    env.step({"agent_0": "", "agent_1": "o(1,1)"})
    env.step({"agent_0": "x(0,1)", "agent_1": ""})
    a = OpenSpielBot("mcts", seed=3, simulations=40, rollouts=2).act([env], "agent_1", num_samples=2)
    b = OpenSpielBot("mcts", seed=3, simulations=40, rollouts=2).act([env], "agent_1", num_samples=2)
    assert a == b and all(t in env.legal_actions("agent_1") for t in a)
    assert a[0] == "o(0,2)"  # the only move that stops x(0,2)
    assert OpenSpielBot("mcts", seed=3).describe()["simulations"] == 100
    assert OpenSpielBot("mcts").act([env], "agent_0") == [""]  # not to move


def test_mcts_bot_rejects_games_it_cannot_search():
    env = make("openspiel/kuhn_poker-v0")
    env.reset(seed=0)
    (mover,) = env.to_move()
    with pytest.raises(ValueError, match=r"perfect-information.*Use OpenSpielBot\('random'\)"):
        OpenSpielBot("mcts", seed=0).act([env], mover)
    with pytest.raises(ValueError, match="kind must be one of"):
        OpenSpielBot("alphazero")


# ----- any game by name, and clear errors ------------------------------------------------------------


def test_any_openspiel_game_resolves_by_name():
    env = make("openspiel/pig-v0", winscore=10, horizon=30)
    assert "openspiel/pig-v0" not in comlrl_env.registry
    assert env.game.get_parameters()["winscore"] == 10 and env.metadata["name"] == "openspiel/pig-v0"
    env.reset(seed=0)
    assert env.legal_actions("agent_0") == ["roll", "stop"]
    copied = pickle.loads(pickle.dumps(env))  # the spec pickles by id, through the namespace resolver
    assert copied.spec.kwargs == {"game": "pig", "winscore": 10, "horizon": 30}
    liars = make("openspiel/liars_dice-v0")  # no observation strings: falls back to information states
    assert liars.view == "information_state"
    assert make("openspiel/kuhn_poker-v0", view="information_state").view == "information_state"


def test_unknown_game_names_give_close_matches():
    with pytest.raises(EnvNotFound, match=r"No OpenSpiel game named 'kuhn_pokr'.*Did you mean: kuhn_poker"):
        make("openspiel/kuhn_pokr-v0")
    with pytest.raises(EnvNotFound, match="version 0 only"):
        make("openspiel/kuhn_poker-v1")
    with pytest.raises(EnvNotFound, match="No OpenSpiel game named"):
        OpenSpielEnv("tic_tac_tow")
    with pytest.raises(ValueError, match="could not load 'goofspiel'"):
        make("openspiel/goofspiel-v0", no_such_param=3)


def test_games_without_string_views_are_rejected(monkeypatch):
    real_load = pyspiel.load_game

    class NoStrings:
        """A game whose type says it provides neither string view."""

        def __init__(self, game):
            self._game = game

        def get_type(self):
            t = self._game.get_type()
            return pyspiel.GameType(
                short_name=t.short_name, long_name=t.long_name, dynamics=t.dynamics, chance_mode=t.chance_mode,
                information=t.information, utility=t.utility, reward_model=t.reward_model,
                max_num_players=t.max_num_players, min_num_players=t.min_num_players,
                provides_information_state_string=False, provides_information_state_tensor=False,
                provides_observation_string=False, provides_observation_tensor=True, parameter_specification={},
            )

        def __getattr__(self, name):
            return getattr(self._game, name)

    monkeypatch.setattr(pyspiel, "load_game", lambda name, params=None: NoStrings(real_load(name, params or {})))
    with pytest.raises(ValueError, match="neither observation strings nor information-state strings"):
        make("openspiel/tic_tac_toe-v0")


def test_missing_pyspiel_names_the_extra(monkeypatch):
    monkeypatch.setattr(os_module, "pyspiel", None)
    with pytest.raises(ImportError, match=r"pip install 'comlrl-env\[games\]'"):
        make("openspiel/kuhn_poker-v0")
    with pytest.raises(ImportError, match=r"pip install 'comlrl-env\[games\]'"):
        make("openspiel/chess-v0")


def test_a_given_rng_seed_fixes_the_sampled_instance():
    env = make("openspiel/negotiation-v0", rng_seed=11)
    first = [env.reset(seed=s)[0]["agent_0"] for s in (0, 1)]
    assert first[0] == first[1] == make("openspiel/negotiation-v0", rng_seed=11).reset(seed=5)[0]["agent_0"]
    drawn = make("openspiel/negotiation-v0")
    assert len({drawn.reset(seed=s)[0]["agent_0"] for s in range(4)}) > 1
