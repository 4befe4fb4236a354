"""TextArena games as envs: the allowlist plays to the end and every refusal says why, `check_env` on every
game, hidden information stays hidden, the caller's random generators are left alone, clones, invalid moves,
degenerate seats, the bot's legal shares, team games, the guide's block, and one MAGRPO epoch."""

from __future__ import annotations

import pathlib
import random
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("textarena")

import torch  # noqa: E402

from comlrl_env import EnvNotFound, make  # noqa: E402
from comlrl_env.games import textarena as ta_env  # noqa: E402
from comlrl_env.games.textarena import ALLOWED, REFUSED, TextArenaBot, TextArenaEnv, listed_moves  # noqa: E402
from comlrl_env.games.textarena_bots import LEGAL_SHARES  # noqa: E402
from comlrl_env.testing import check_env  # noqa: E402
from comlrl_env.testing.episodes import GIBBERISH  # noqa: E402
from comlrl_env.testing.task_checks import DEGENERATE_POLICIES  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
TWO_PLAYER = [game for game, entry in ALLOWED.items() if entry["players"][0] == 2]
SETUPS = [(game, n) for game, entry in ALLOWED.items() for n in entry["players"]]


def play(env: TextArenaEnv, seed: int, answers: dict | None = None, bot_seed: int = 0) -> dict:
    """One episode, a `TextArenaBot` per seat (seeded `1000 * seed + seat + bot_seed`) unless `answers` gives the
    seat's `answer(env, agent, observation)`: its returns, steps, prompts and whether it was truncated."""
    answers = answers or {}
    bots = {a: TextArenaBot(seed=1000 * seed + i + bot_seed) for i, a in enumerate(env.possible_agents)}
    obs, _ = env.reset(seed=seed)
    returns, prompts, steps, truncated = dict.fromkeys(env.possible_agents, 0.0), [dict(obs)], 0, False
    while env.agents:
        actions = {a: answers[a](env, a, obs[a]) if a in answers else bots[a].act([env], a)[0] for a in env.to_move()}
        obs, rewards, _, truncations, _ = env.step(actions)
        for agent, reward in rewards.items():
            returns[agent] += reward
        prompts.append(dict(obs))
        steps += 1
        truncated = truncated or any(truncations.values())
    return {"returns": returns, "steps": steps, "prompts": prompts, "truncated": truncated}


# ----- the allowlist and the refusals ---------------------------------------------------------------------


@pytest.mark.parametrize("game, num_players", SETUPS, ids=[f"{g}-{n}" for g, n in SETUPS])
def test_every_allowed_game_plays_to_the_end_with_bots(game, num_players):
    for mode in ("forfeit", "retry"):
        env = make(f"textarena/{game}-v0", num_players=num_players, invalid_action=mode)
        for seed in range(3):
            episode = play(env, seed)
            assert not episode["truncated"] and 1 <= episode["steps"] <= env.num_turns, (mode, seed, episode["steps"])
            assert all(-1.0 <= r <= 1.0 for r in episode["returns"].values()), episode["returns"]


@pytest.mark.parametrize("game", sorted(REFUSED))
def test_every_refused_game_is_refused_with_its_reason(game):
    with pytest.raises(EnvNotFound, match=re.escape(REFUSED[game])):
        make(f"textarena/{game}-v0")
    with pytest.raises(EnvNotFound, match="is refused"):
        TextArenaEnv(game)


def test_unknown_names_and_versions_say_what_exists():
    with pytest.raises(EnvNotFound, match="Did you mean: TicTacToe"):
        make("textarena/TicTacToo-v0")
    with pytest.raises(EnvNotFound, match="version 0 only"):
        make("textarena/TicTacToe-v1")
    with pytest.raises(ValueError, match=r"num_players in \(2,\)"):
        make("textarena/TicTacToe-v0", num_players=3)
    with pytest.raises(ValueError, match="could not build 'KuhnPoker'"):
        make("textarena/KuhnPoker-v0", no_such_setting=1)
    with pytest.raises(ValueError, match=r"one of \('forfeit', 'retry', 'random'\)"):
        make("textarena/TicTacToe-v0", invalid_action="resign")
    assert not set(ALLOWED) & set(REFUSED)


def test_a_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setattr(ta_env, "_TEXTARENA", None)
    monkeypatch.setitem(sys.modules, "textarena", None)
    with pytest.raises(ImportError, match=re.escape('pip install "comlrl-env[textarena]"')):
        make("textarena/TicTacToe-v0")


def test_comlrl_env_imports_and_resolves_ids_without_textarena():
    code = ("import sys; sys.modules['textarena'] = None\n"
            "import comlrl_env\n"
            "assert comlrl_env.spec('textarena/KuhnPoker-v0').kwargs == {'game': 'KuhnPoker'}\n"
            "try:\n    comlrl_env.make('textarena/KuhnPoker-v0')\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and "comlrl-env[textarena]" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("game", list(ALLOWED))
def test_check_env(game):
    check_env(f"textarena/{game}-v0")


# ----- what each seat sees --------------------------------------------------------------------------------


def test_kuhn_poker_prompts_never_show_the_other_seats_card():
    env = make("textarena/KuhnPoker-v0")
    for seed in range(20):
        env.reset(seed=seed)
        bots = TextArenaBot(seed=seed)
        while env.agents:
            for agent, other in (("agent_0", "agent_1"), ("agent_1", "agent_0")):
                theirs = [t for _, _, t in env.seat_messages(other) if "Your card is" in t]
                assert theirs and not any(t in env.observe(agent) for t in theirs), (seed, agent)
            env.step({a: bots.act([env], a)[0] for a in env.to_move()})


def test_secret_mafia_night_talk_and_teammates_reach_the_mafia_only():
    env = make("textarena/SecretMafia-v0")
    for seed in range(5):
        episode = play(env, seed)
        mafia = env.teams[0]
        for prompts in episode["prompts"]:
            for agent, prompt in prompts.items():
                if agent not in mafia:
                    assert "Mafia, agree on a victim" not in prompt and "Your teammates are" not in prompt


def test_views_keep_the_rules_and_the_latest_messages_within_the_length():
    env = make("textarena/PigDice-v0", max_observation_length=1500)
    episode = play(env, 0)
    assert episode["steps"] > 30
    for prompts in episode["prompts"][1:]:
        for prompt in prompts.values():
            assert len(prompt) <= 1500 and "playing a game of Pig Dice" in prompt
    assert "earlier messages left out" in episode["prompts"][-2]["agent_0"]


# ----- randomness -----------------------------------------------------------------------------------------


def test_the_callers_generators_are_left_alone_and_a_seed_replays_the_game():
    random.seed(123)
    np.random.seed(7)
    py_state, np_state = random.getstate(), np.random.get_state()
    runs = []
    for _ in range(2):
        env = make("textarena/KuhnPoker-v0")
        episode = play(env, seed=5)
        twin = env.clone()
        env.reset(seed=6)
        twin = env.clone()
        twin.step({a: "[check]" for a in twin.to_move()})
        runs.append(episode)
    assert random.getstate() == py_state
    now = np.random.get_state()
    assert now[0] == np_state[0] and np.array_equal(now[1], np_state[1]) and now[2:] == np_state[2:]
    assert runs[0]["prompts"] == runs[1]["prompts"] and runs[0]["returns"] == runs[1]["returns"]
    deals = {play(make("textarena/KuhnPoker-v0"), seed=s)["prompts"][0]["agent_1"] for s in range(6)}
    assert len(deals) > 1  # the seed reaches the deal


def test_the_private_states_replay_numpy_draws_too():
    states = ta_env._seeded(3)
    outer = np.random.get_state()
    with ta_env._own_rng(states):
        first = np.random.random(3), random.random()
    with ta_env._own_rng(ta_env._seeded(3)):
        again = np.random.random(3), random.random()
    assert np.array_equal(first[0], again[0]) and first[1] == again[1]
    assert np.array_equal(np.random.get_state()[1], outer[1])


# ----- clones and invalid moves ---------------------------------------------------------------------------


def test_a_clone_plays_on_independently():
    env = make("textarena/TicTacToe-v0")
    env.reset(seed=0)
    env.step({"agent_0": "[4]"})
    before = env.state(), env.seat_messages("agent_0")
    twin = env.clone()
    assert twin.game is not env.game
    twin.step({"agent_1": "[0]"})
    twin.step({"agent_0": "[8]"})
    assert (env.state(), env.seat_messages("agent_0")) == before and env.to_move() == ["agent_1"]
    again = env.clone()
    _, r1, *_ = env.step({"agent_1": "[2]"})
    _, r2, *_ = again.step({"agent_1": "[2]"})
    assert r1 == r2 and env.state() == again.state()


def test_an_invalid_move_forfeits_by_default():
    env = make("textarena/TicTacToe-v0")
    env.reset(seed=0)
    _, rewards, terminations, _, infos = env.step({"agent_0": "I pass"})
    assert all(terminations.values()) and rewards == {"agent_0": -1.0, "agent_1": 1.0}
    assert infos["agent_0"]["forfeit"] and "judged it invalid" in infos["agent_0"]["invalid_action"]
    env.reset(seed=0)
    _, rewards, *_ = env.step({"agent_0": "[0] or [4]"})  # names two listed moves
    assert rewards["agent_0"] == -1.0


def test_retry_gives_one_retry_per_move():
    env = make("textarena/TicTacToe-v0", invalid_action="retry")
    obs, _ = env.reset(seed=0)
    assert env.num_turns == 2 * ALLOWED["TicTacToe"]["num_turns"] and "one retry" in obs["agent_0"]
    obs, rewards, terminations, _, infos = env.step({"agent_0": "hmm"})  # the game judges it
    assert not any(terminations.values()) and env.to_move() == ["agent_0"] and rewards["agent_0"] == 0.0
    assert "invalid_action" in infos["agent_0"] and "attempted an invalid move" in obs["agent_0"]
    env.step({"agent_0": "[4]"})  # a valid move clears the count
    obs, *_ = env.step({"agent_1": ""})  # empty: invalid before the game sees it
    assert env.to_move() == ["agent_1"] and "Your answer was not a valid move" in obs["agent_1"]
    _, rewards, terminations, _, infos = env.step({"agent_1": "[4]"})  # occupied: a second invalid answer
    assert all(terminations.values()) and rewards == {"agent_0": 1.0, "agent_1": -1.0}
    assert infos["agent_1"]["forfeit"]


def test_random_plays_a_listed_move_for_an_invalid_answer_and_charges_the_utility_range():
    env = make("textarena/TicTacToe-v0", invalid_action="random")
    obs, _ = env.reset(seed=0)
    assert env.num_turns == ALLOWED["TicTacToe"]["num_turns"] and "random one of the listed moves" in obs["agent_0"]
    _, rewards, terminations, _, infos = env.step({"agent_0": "hmm"})  # the game judges it
    played = infos["agent_0"]["action_played"]
    assert played in [f"[{i}]" for i in range(9)] and rewards == {"agent_0": -2.0, "agent_1": 0.0}
    assert not any(terminations.values()) and env.to_move() == ["agent_1"]  # the game went on
    obs, rewards, *_ = env.step({"agent_1": ""})  # empty: invalid before the game sees it
    assert rewards["agent_1"] == -2.0 and env.to_move() == ["agent_0"]
    assert f"'{played}'" not in obs["agent_0"].split("Available Moves:")[-1]  # both squares are taken


def test_random_fallbacks_replay_and_invalid_play_never_pays():
    env = make("textarena/TicTacToe-v0", invalid_action="random")

    def junk_game(seed):
        env.reset(seed=seed)
        returns, played = {"agent_0": 0.0, "agent_1": 0.0}, []
        while env.agents:
            (mover,) = env.to_move()
            _, rewards, _, _, infos = env.step({mover: "junk"})
            played.append(infos[mover]["action_played"])
            for agent, reward in rewards.items():
                returns[agent] += reward
        return returns, played

    first = [junk_game(seed) for seed in range(5)]
    assert [junk_game(seed) for seed in range(5)] == first  # the fallback stream is the episode's
    assert len({tuple(played) for _, played in first}) > 1  # and differs between seeds
    for returns, played in first:  # every move was invalid: at best a win (+1) less 2 per invalid move
        assert all(r <= 1.0 - 2.0 * (len(played) // 2) for r in returns.values()), (returns, played)


def test_random_forfeits_when_the_listed_move_is_invalid_too():
    env = make("textarena/ColonelBlotto-v0", invalid_action="random")  # its view lists a format, not moves
    env.reset(seed=0)
    _, rewards, terminations, _, infos = env.step({"agent_0": "junk"})
    assert all(terminations.values()) and infos["agent_0"]["forfeit"]
    assert rewards == {"agent_0": -3.0, "agent_1": 1.0}  # the forfeit's -1 and the invalid answer's 2


@pytest.mark.parametrize("mode", ["forfeit", "retry", "random"])
@pytest.mark.parametrize("game", ["TicTacToe", "KuhnPoker", "IteratedPrisonersDilemma", "SecretMafia", "Taboo"])
def test_bad_model_text_never_raises(game, mode):
    env = make(f"textarena/{game}-v0", invalid_action=mode)
    junk = ["", None, 7, ["[4]"], *(text for _, text in GIBBERISH)]
    for seed, text in enumerate(junk):
        env.reset(seed=seed)
        for _ in range(3):
            if not env.agents:
                break
            _, rewards, *_ = env.step({a: text for a in env.to_move()})
            assert all(isinstance(r, float) for r in rewards.values())


# ----- degenerate seats -----------------------------------------------------------------------------------


def _babble(env, agent, obs, _words={}):
    words = _words.setdefault(id(env), DEGENERATE_POLICIES["babble"](0))
    return words(env, {agent: obs})[agent]


DEGENERATE = {
    "empty": lambda env, agent, obs: "",
    "echo": lambda env, agent, obs: obs,
    "gibberish": _babble,
    "every_option": lambda env, agent, obs: "\n".join(listed_moves(env.seat_messages(agent))),
}
"""The degenerate seats: nothing, its own prompt, random words, every move its view lists."""


def degenerate_gaps(game: str, episodes: int) -> list[str]:
    """Each (answer, seat) whose mean return beats the random bot's in that seat by more than twice the standard
    error of the paired difference (the same seeds and the same bots in the other seat)."""
    env = make(f"textarena/{game}-v0")
    bot = [play(env, e)["returns"] for e in range(episodes)]
    found = []
    for name, answer in DEGENERATE.items():
        for agent in env.possible_agents:
            diff = np.array([play(env, e, {agent: answer})["returns"][agent] - bot[e][agent] for e in range(episodes)])
            margin = 2 * diff.std(ddof=1) / np.sqrt(episodes)
            if diff.mean() > margin:
                found.append(f"{name} in {agent}: {diff.mean():+.3f} over the bot (margin {margin:.3f})")
    return found


@pytest.mark.parametrize("game", ["TicTacToe", "KuhnPoker", "SimpleNegotiation"])
def test_degenerate_seats_do_no_better_than_the_bot_on_a_sample(game):
    assert not degenerate_gaps(game, episodes=30)


@pytest.mark.suites
@pytest.mark.parametrize("game", TWO_PLAYER)
def test_degenerate_seats_do_no_better_than_the_bot(game):
    assert not degenerate_gaps(game, episodes=200)


# ----- the bot --------------------------------------------------------------------------------------------


def legal_share(game: str, episodes: int = 50) -> float:
    """The share of `TextArenaBot("random", seed=0)`'s moves that were valid, as `LEGAL_SHARES` measures it."""
    env, bot, moves, valid = make(f"textarena/{game}-v0"), TextArenaBot("random", seed=0), 0, 0
    for seed in range(episodes):
        env.reset(seed=seed)
        while env.agents:
            actions = {a: bot.act([env], a)[0] for a in env.to_move()}
            infos = env.step(actions)[4]
            moves += len(actions)
            valid += sum("invalid_action" not in infos[a] for a in actions)
    return round(valid / moves, 2)


@pytest.mark.parametrize("game", ["KuhnPoker", "Nim"])
def test_the_legal_share_table_is_measured(game):
    assert set(LEGAL_SHARES) == set(ALLOWED)
    assert legal_share(game) == LEGAL_SHARES[game]


@pytest.mark.suites
def test_the_legal_share_table_is_measured_for_every_game():
    assert {game: legal_share(game) for game in ALLOWED} == LEGAL_SHARES


def test_the_bot_plays_listed_moves_and_is_the_reference_row():
    env = make("textarena/TicTacToe-v0")
    env.reset(seed=0)
    env.step({"agent_0": "[4]"})
    bot = TextArenaBot("random", seed=0)
    moves = set(bot.act([env], "agent_1", num_samples=20))
    assert moves <= {f"[{i}]" for i in range(9) if i != 4} and len(moves) > 3
    assert bot.act([env], "agent_0") == [""]  # not to move
    assert set(env.reference_bots()) == {"random-bot"} and env.legal_actions("agent_1") == []
    with pytest.raises(ValueError, match="kind"):
        TextArenaBot("mcts")


# ----- teams and rewards ----------------------------------------------------------------------------------


def test_teams_come_from_the_deal():
    mafia = make("textarena/SecretMafia-v0")
    assert mafia.teams is None and mafia.metadata["reward_structure"] == "general"
    dealt = []
    for seed in range(6):
        mafia.reset(seed=seed)
        roles = mafia.game.player_roles
        assert mafia.teams[0] == [f"agent_{p}" for p in range(6) if roles[p] == "Mafia"]
        assert sorted(sum(mafia.teams, [])) == sorted(mafia.possible_agents)
        dealt.append(tuple(mafia.teams[0]))
    assert len(set(dealt)) > 1
    taboo = make("textarena/Taboo-v0")
    taboo.reset(seed=0)
    assert taboo.teams == [["agent_0", "agent_1"], ["agent_2", "agent_3"]]
    kuhn = make("textarena/KuhnPoker-v0")
    kuhn.reset(seed=0)
    assert kuhn.teams == [["agent_0"], ["agent_1"]] and kuhn.metadata["reward_structure"] == "competitive"


# ----- the guide's block and one MAGRPO epoch -------------------------------------------------------------


def guide_blocks() -> list[str]:
    text = (ROOT / "docs" / "guide" / "games.md").read_text(encoding="utf-8")
    return re.findall(r"^<!-- run by tests/test_textarena\.py[^\n]*-->\n```python\n(.*?)^```", text, re.M | re.S)


def test_the_guide_block_runs_as_written(tiny_dir):
    blocks = guide_blocks()
    assert len(blocks) == 1
    exec(compile(blocks[0], "docs/guide/games.md", "exec"), {"model_dir": tiny_dir})


@pytest.mark.parametrize("game, settings", [("TruthAndDeception", {}), ("IteratedPrisonersDilemma", {"num_rounds": 2})],
                         ids=["TruthAndDeception", "IteratedPrisonersDilemma"])
def test_one_magrpo_epoch_against_the_bot(tiny_dir, game, settings):
    """Games where a random model's text is a move (talk; IPD reads it as cooperating), so the bot's play varies
    the returns within a group and the update moves the weights. Where the model must name a move ([bet]) it
    forfeits every episode, the advantages are all 0 and nothing moves."""
    from learners import MAGRPO, MAGRPOConfig

    cfg = MAGRPOConfig(num_train_epochs=1, episodes_per_epoch=4, rollout_buffer_size=4, num_generations=4,
                       rollout_mode="parallel", max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=None,
                       agent_learning_rate=1e-3, gradient_accumulation_steps=4, eval_interval=0, verbose=False,
                       seed=0)
    env = make(f"textarena/{game}-v0", max_observation_length=2048, **settings)
    learner = MAGRPO(env=env, agents=[tiny_dir, TextArenaBot("random", seed=0)], args=cfg)
    before = [p.detach().clone() for p in learner.agents[0].parameters()]
    learner.learn()
    assert any(not torch.equal(b, p) for b, p in zip(before, learner.agents[0].parameters()))
