"""The league on TextArena games: `comlrl-bench --league` rates saved tiny agents and the random bot with Elo and
95% intervals, and every game of the `textarena` suite is one the league plays (two players, a winner)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("textarena")

from comlrl_env import make  # noqa: E402
from comlrl_env.games.textarena import TextArenaBot  # noqa: E402
from comlrl_env.games.textarena_bots import LEGAL_SHARES  # noqa: E402
from comlrl_env.suites import suites  # noqa: E402
from learners import MAGRPO, MAGRPOConfig  # noqa: E402
from learners.cli import build_parser, main  # noqa: E402

GAMES = ["textarena/KuhnPoker-v0", "textarena/TicTacToe-v0"]


def test_the_suite_is_two_player_games_with_a_winner_where_the_bot_plays_legally():
    assert build_parser().parse_args(["--suite", "textarena", "--league", "--out", "x"]).suite == "textarena"
    assert 6 <= len(suites["textarena"]) <= 8
    for env_id in suites["textarena"]:
        env = make(env_id)
        assert len(env.possible_agents) == 2 and env.metadata["reward_structure"] == "competitive", env_id
        assert set(env.reference_bots()) == {"random-bot"}
        assert LEGAL_SHARES[env.game_name] >= 0.9, env_id


def test_comlrl_bench_league_on_two_textarena_games(tiny_dir, tiny_dir_b, tmp_path, capsys):
    """A saved MAGRPO agent (one epoch against the bot) and another tiny model against the random bot, 2 episodes
    per seat order. The tiny models forfeit nearly every game they move in, so each game is quick."""
    cfg = MAGRPOConfig(num_train_epochs=1, episodes_per_epoch=4, rollout_buffer_size=4, num_generations=2,
                       rollout_mode="parallel", max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None,
                       gradient_accumulation_steps=2, eval_interval=0, verbose=False, seed=0)
    learner = MAGRPO(env=make(GAMES[0], max_observation_length=2048), agents=[tiny_dir, TextArenaBot(seed=0)],
                     args=cfg)
    learner.learn()
    learner.save_model(str(tmp_path / "trained"))
    out = tmp_path / "league"
    argv = ["--league", "--agents", f"trained={tmp_path / 'trained'}", "--agents", f"other={tiny_dir_b}",
            "--episodes", "2", "--out", str(out)]
    for env_id in GAMES:
        argv += ["--env", env_id]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    league = json.loads((out / "league.json").read_text())
    assert (out / "league.md").read_text() in printed
    assert list(league["games"]) == GAMES and league["skipped"] == {}
    players = {"trained", "other", "random-bot"}
    for game in league["games"].values():
        assert {(r["a"], r["b"]) for r in game["rows"]} == {("trained", "other"), ("trained", "random-bot"),
                                                            ("other", "random-bot")}
        for r in game["rows"]:
            assert r["games"] == 4 and r["wins"] + r["draws"] + r["losses"] == 4
        assert set(game["ratings"]) == players
        for rating in game["ratings"].values():
            assert np.isfinite(rating["elo"]) and rating["low"] <= rating["elo"] <= rating["high"]
        assert game["first_move"]["low"] < game["first_move"]["high"]
    assert set(league["overall"]) == players and league["overall"]["random-bot"]["elo"] == 1000.0
    for name, rating in league["overall"].items():
        assert rating["games"] == 16 and np.isfinite(rating["elo"]), name
        assert rating["low"] < rating["elo"] < rating["high"] or name == "random-bot"  # the anchor alone is fixed
    for name in players:
        assert f"| {name} |" in printed
    assert "## All games" in printed and "profile-likelihood" in printed
    assert league["settings"]["trained"]["max_new_tokens"] == 6  # the saved team samples as it was trained


def test_comlrl_bench_league_on_the_textarena_suite(tiny_dir, tmp_path, capsys):
    """The whole suite, a tiny model against the random bot, 1 episode per seat order (about 2 s: the model
    forfeits at once except where any text is a move)."""
    out = tmp_path / "league"
    assert main(["--suite", "textarena", "--league", "--agents", f"tiny={tiny_dir}", "--episodes", "1",
                 "--max-new-tokens", "6", "--out", str(out)]) == 0
    league = json.loads((out / "league.json").read_text())
    assert list(league["games"]) == suites["textarena"] and league["skipped"] == {}
    for game in league["games"].values():
        assert set(game["ratings"]) == {"tiny", "random-bot"}
        assert all(r["low"] <= r["elo"] <= r["high"] for r in game["ratings"].values())
    assert set(league["overall"]) == {"tiny", "random-bot"} and league["overall"]["tiny"]["games"] == 14
    assert "## All games" in capsys.readouterr().out
