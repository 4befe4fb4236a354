"""The league: matches in both seat orders, Elo ratings by hand, and `comlrl-bench --suite games --league` at a
small setting (a tiny model against the games' bots)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("pyspiel")

from comlrl_env import make  # noqa: E402
from comlrl_env.benchmark import empty_policy, fixed_team  # noqa: E402
from comlrl_env.league import elo_ratings, league_table, play_match, run_league  # noqa: E402
from comlrl_env.openspiel import OpenSpielBot  # noqa: E402


def row(a, b, wins, draws, losses):
    return {"a": a, "b": b, "wins": wins, "draws": draws, "losses": losses}


def test_elo_by_hand():
    # 3 wins, 1 loss, plus the virtual draw: scores 3.5 : 1.5, so 10^(d/400) = 3.5 / 1.5
    ratings = elo_ratings([row("x", "random-bot", 3, 0, 1)])["players"]
    assert ratings["random-bot"]["elo"] == pytest.approx(1000.0)  # the anchor
    assert ratings["x"]["elo"] == pytest.approx(1000 + 400 * math.log10(3.5 / 1.5), abs=1e-6)
    assert ratings["x"]["low"] <= ratings["x"]["elo"] <= ratings["x"]["high"] and ratings["x"]["games"] == 4
    # an even record is an even rating; without the random bot the mean is the anchor value
    even = elo_ratings([row("p", "q", 2, 4, 2)])["players"]
    assert even["p"]["elo"] == pytest.approx(1000.0) == pytest.approx(even["q"]["elo"])
    # a player that wins everything still has a finite rating (the virtual draw): 0.5 : 10.5
    sweep = elo_ratings([row("p", "q", 10, 0, 0)])["players"]
    assert sweep["p"]["elo"] - sweep["q"]["elo"] == pytest.approx(400 * math.log10(10.5 / 0.5))


def test_elo_is_the_maximum_likelihood_fit():
    """At the fit, each player's expected score equals its score (the likelihood's stationarity condition)."""
    rows = [row("a", "b", 7, 2, 3), row("a", "c", 9, 0, 3), row("b", "c", 4, 4, 4), row("a", "random-bot", 11, 1, 0),
            row("b", "random-bot", 8, 2, 2), row("c", "random-bot", 6, 3, 3)]
    ratings = elo_ratings(rows)["players"]
    for p in ratings:
        score = expected = 0.0
        for r in rows:
            if p not in (r["a"], r["b"]):
                continue
            me, other = (r["a"], r["b"]) if r["a"] == p else (r["b"], r["a"])
            wins, losses = (r["wins"], r["losses"]) if r["a"] == p else (r["losses"], r["wins"])
            n = r["wins"] + r["draws"] + r["losses"] + 1  # with the virtual draw
            score += wins + 0.5 * r["draws"] + 0.5
            expected += n / (1 + 10 ** ((ratings[other]["elo"] - ratings[me]["elo"]) / 400))
        assert expected == pytest.approx(score, abs=1e-6), p
    assert ratings["a"]["elo"] > ratings["b"]["elo"] > ratings["c"]["elo"] > ratings["random-bot"]["elo"]


def test_splitting_a_pairs_record_into_rows_leaves_its_rating_unchanged():
    """One virtual draw per pair, however its games are split: a 16-0 sweep was 1607 as one row and 1382 as
    four 4-0 rows (one per game), so `overall` drifted toward 1000 as a suite gained games."""
    one = elo_ratings([row("x", "random-bot", 16, 0, 0)])["players"]["x"]
    assert one["elo"] == pytest.approx(1000 + 400 * math.log10(16.5 / 0.5))
    four = elo_ratings([{**row("x", "random-bot", 4, 0, 0), "game": g} for g in "abcd"])["players"]["x"]
    assert (four["elo"], four["low"], four["high"]) == pytest.approx((one["elo"], one["low"], one["high"]))
    # with seat orders: one game's 8-0 in each order, as one row or as two rows of the same game
    seats = {**row("x", "random-bot", 16, 0, 0), "game": "g", "first_wins": 8, "first_draws": 0, "first_losses": 0}
    half = {**row("x", "random-bot", 8, 0, 0), "game": "g", "first_wins": 4, "first_draws": 0, "first_losses": 0}
    whole, split = elo_ratings([seats])["players"]["x"], elo_ratings([half, half])["players"]["x"]
    assert (split["elo"], split["low"], split["high"]) == pytest.approx((whole["elo"], whole["low"], whole["high"]))


def test_a_league_in_parts_that_never_met_rates_each_part_alone_and_says_so():
    """p beat q 6-2 and r beat s 6-2, but neither pair met the other: the two winners' records are identical,
    so are their ratings, each within its own part; a warning names the parts (once 1053 vs 1159 and 175
    numpy overflow warnings)."""
    rows = [row("p", "q", 6, 0, 2), row("r", "s", 6, 0, 2), row("p", "q", 0, 0, 0)]
    with pytest.warns(UserWarning, match=r"2 parts that never played each other: part 0: p, q; part 1: r, s") as seen:
        ratings = elo_ratings(rows)["players"]
    assert all(w.category is UserWarning for w in seen)  # no numpy overflow
    assert ratings["p"]["elo"] == pytest.approx(ratings["r"]["elo"])
    assert ratings["p"]["elo"] == pytest.approx(1000 + 200 * math.log10(6.5 / 2.5))  # mean 1000 in each part
    assert (ratings["p"]["part"], ratings["q"]["part"], ratings["r"]["part"]) == (0, 0, 1)
    table = league_table({"episodes": 4, "seed": 0, "games": {}, "overall": ratings, "skipped": {}})
    assert "| p (part 0) |" in table and "| r (part 1) |" in table


def test_a_sweep_gets_an_interval_of_positive_width():
    """5-0 had the bootstrap interval [1416.6, 1416.6]: nothing to resample. The profile likelihood's is wide."""
    x = elo_ratings([row("x", "random-bot", 5, 0, 0)])["players"]["x"]
    assert x["elo"] == pytest.approx(1000 + 400 * math.log10(5.5 / 0.5))
    assert x["low"] < 1100 and x["high"] > 2000  # 5 games say little
    lost = elo_ratings([row("x", "random-bot", 0, 0, 5)])["players"]["x"]
    assert lost["low"] < lost["elo"] < lost["high"] and lost["elo"] == pytest.approx(2000 - x["elo"])


def seated_row(a, b, first, second, game="g"):
    """A's (wins, draws, losses) in seat 0, then in seat 1."""
    total = [f + s for f, s in zip(first, second)]
    return {**row(a, b, *total), "game": game, "first_wins": first[0], "first_draws": first[1],
            "first_losses": first[2]}


def test_the_first_move_edge_is_fitted_with_the_ratings():
    """Seat 0 wins 9 of 10 whoever sits there: the edge is the seat's, the players are even."""
    fit = elo_ratings([seated_row("p", "random-bot", (9, 0, 1), (1, 0, 9))])
    assert fit["players"]["p"]["elo"] == pytest.approx(1000.0, abs=1e-6)
    edge = fit["first_move"]["g"]
    # per seat order 9 + 0.25 of 10.5 (half the virtual draw): 10^(h / 400) = 9.25 / 1.25
    assert edge["elo"] == pytest.approx(400 * math.log10(9.25 / 1.25), abs=1e-6)
    assert 0 < edge["low"] < edge["elo"] < edge["high"]
    # at the fit, expected scores equal scores: per player and per seat (the likelihood's stationarity)
    rows = [seated_row("a", "b", (6, 1, 1), (3, 2, 3)), seated_row("a", "random-bot", (8, 0, 0), (5, 1, 2)),
            seated_row("b", "random-bot", (5, 2, 1), (2, 2, 4))]
    fit = elo_ratings(rows)
    R, h = {p: v["elo"] for p, v in fit["players"].items()}, fit["first_move"]["g"]["elo"]
    score, expected = {p: 0.0 for p in R}, {p: 0.0 for p in R}
    seat_score = seat_expected = 0.0
    for r in rows:
        for (w, d, l), sign in (((r["first_wins"], r["first_draws"], r["first_losses"]), 1),
                                ((r["wins"] - r["first_wins"], r["draws"] - r["first_draws"],
                                  r["losses"] - r["first_losses"]), -1)):
            n, s = w + d + l + 0.5, w + d / 2 + 0.25
            e = n / (1 + 10 ** ((R[r["b"]] - R[r["a"]] - sign * h) / 400))
            score[r["a"]], expected[r["a"]] = score[r["a"]] + s, expected[r["a"]] + e
            score[r["b"]], expected[r["b"]] = score[r["b"]] + n - s, expected[r["b"]] + n - e
            seat_score += s if sign > 0 else n - s
            seat_expected += e if sign > 0 else n - e
    assert expected == pytest.approx(score, abs=1e-6) and seat_expected == pytest.approx(seat_score, abs=1e-6)


def test_a_match_plays_both_seat_orders_and_a_forfeit_loses():
    env = make("openspiel/tic_tac_toe-v0")
    result = play_match(env, empty_policy, fixed_team([OpenSpielBot("random", seed=0)]), episodes=5)
    assert (result["wins"], result["draws"], result["losses"], result["games"]) == (0, 0, 10, 10)
    assert (result["first_wins"], result["first_draws"], result["first_losses"]) == (0, 0, 5)  # A in seat 0
    assert result["invalid_a"] == 1.0 and result["invalid_b"] == 0.0
    bargaining = make("openspiel/bargaining-v0")  # general sum: a forfeit pays both 0, and is still a loss
    result = play_match(bargaining, fixed_team([OpenSpielBot("random", seed=0)]), empty_policy, episodes=5)
    assert result["win_rate"] == 1.0 and result["loss_rate"] == 0.0
    with pytest.raises(ValueError, match="needs a two-player game"):
        play_match(make("openspiel/pig-v0", players=3), empty_policy, empty_policy, episodes=1)


def test_the_stronger_bot_rates_higher():
    league = run_league(["openspiel/tic_tac_toe-v0"], {}, episodes=20)
    (match,) = league["games"]["openspiel/tic_tac_toe-v0"]["rows"]
    assert {match["a"], match["b"]} == {"random-bot", "mcts-bot"}
    assert match["win_rate"] + match["draw_rate"] + match["loss_rate"] == pytest.approx(1.0)
    mcts = league["overall"]["mcts-bot"]
    assert mcts["low"] > 1000, league["overall"]  # MCTS (50 simulations) beats random play, CIs apart
    with pytest.raises(ValueError, match="a league needs two players or more"):
        run_league(["openspiel/kuhn_poker-v0"], {}, episodes=1, bots=False)


def test_comlrl_bench_league_on_the_games_suite(tiny_dir, tmp_path, capsys):
    """CI setting: a tiny model against the bots, 2 episodes per seat order, on every game of the suite."""
    from learners.cli import main

    out = tmp_path / "league"
    assert main(["--suite", "games", "--league", "--agents", f"tiny={tiny_dir}", "--episodes", "2",
                 "--max-new-tokens", "6", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    league = json.loads((out / "league.json").read_text())
    assert (out / "league.md").read_text() in printed
    assert set(league["skipped"]) == {"openspiel/tiny_hanabi-v0", "openspiel/hanabi-v0",
                                      "openspiel/coop_box_pushing-v0"}
    assert len(league["games"]) == 7
    ttt = league["games"]["openspiel/tic_tac_toe-v0"]
    assert {(r["a"], r["b"]) for r in ttt["rows"]} == {("tiny", "random-bot"), ("tiny", "mcts-bot"),
                                                       ("random-bot", "mcts-bot")}
    for game in league["games"].values():
        for r in game["rows"]:
            assert r["games"] == 4 and r["wins"] + r["draws"] + r["losses"] == 4
        assert all(v["low"] <= v["elo"] <= v["high"] for v in game["ratings"].values())
    assert set(league["overall"]) == {"tiny", "random-bot", "mcts-bot"}
    assert np.isfinite(league["overall"]["tiny"]["elo"])
    assert "| tiny | random-bot |" in printed and "## All games" in printed
    assert "profile-likelihood" in printed and "First-move edge (seat 0 over seat 1)" in printed
    assert all(g["first_move"]["low"] < g["first_move"]["high"] for g in league["games"].values())
    assert league["agents"]["tiny"][0]["sha256"]
