"""Do the 95% intervals cover 95%? Seeded simulations of benchmarks and leagues with known true values.

Each case draws hundreds of benchmarks (or leagues) at once with numpy, computes every interval the way
`comlrl-bench` does, and counts how often it holds the truth. The cases are those where the old intervals
failed: k = 4 correlated samples per task (old coverage 0.78), 8 episodes of 0/1 rewards at mean 0.1 (0.52),
a +500 player over 16 games (0.56), +800 over 40 (0), a first-move edge (0.20 at 300 Elo).
"""

from __future__ import annotations

import numpy as np
import pytest

from comlrl_env.intervals import mean_interval, rate_interval, wilson
from comlrl_env.league import EloDesign, profile_intervals

LOW, HIGH = 0.90, 0.99  # a 95% interval's coverage, with room for the simulation's own noise
RUNS = 2000  # simulated benchmarks per case (cheap: one array)
LEAGUES = 300  # simulated leagues per case


def covered(low, high, truth) -> float:
    return float(np.mean((low <= truth) & (truth <= high)))


@pytest.mark.parametrize("tasks, k", [(8, 4), (32, 4), (16, 8)])
def test_a_reward_interval_over_correlated_samples_covers(tasks, k):
    rng = np.random.default_rng(tasks * k)
    # task i's difficulty shifts all its k samples: sd 1 between tasks, 0.5 within one
    rewards = 0.3 + rng.normal(0, 1, (RUNS, tasks, 1)) + rng.normal(0, 0.5, (RUNS, tasks, k))
    interval = mean_interval(rewards.sum(-1), k)
    assert LOW <= covered(interval.low, interval.high, 0.3) <= HIGH


@pytest.mark.parametrize("tasks, k, mean", [(8, 1, 0.1), (16, 4, 0.3), (32, 4, 0.05)])
def test_a_0_1_reward_interval_covers_near_0_and_over_correlated_samples(tasks, k, mean):
    rng = np.random.default_rng(tasks + k)
    # each task's own success probability, Beta with mean `mean` (k = 1: a plain coin of `mean`)
    p = rng.beta(2 * mean, 2 * (1 - mean), (RUNS, tasks, 1)) if k > 1 else np.full((RUNS, tasks, 1), mean)
    hits = (rng.random((RUNS, tasks, k)) < p).sum(-1)
    interval = rate_interval(hits, k)
    assert LOW <= covered(interval.low, interval.high, mean) <= HIGH
    assert (interval.high > interval.low).all()  # never 0.000 ± 0.000, even when every episode failed


def simulate_leagues(elo: dict[str, float], first_move: float, per_order: int, seed: int):
    """`LEAGUES` round robins, each pair playing `per_order` games in each seat order, drawn from the model
    (no draws): returns the estimates, lows, highs (LEAGUES, players + 1) and the true values, in Elo."""
    rng = np.random.default_rng(seed)
    players = sorted(elo)
    pairs = [(a, b) for i, a in enumerate(players) for b in players[i + 1:]]
    win = lambda d: 1 / (1 + 10 ** (-d / 400))  # noqa: E731
    first = rng.binomial(per_order, [win(elo[a] - elo[b] + first_move) for a, b in pairs], (LEAGUES, len(pairs)))
    second = rng.binomial(per_order, [win(elo[a] - elo[b] - first_move) for a, b in pairs], (LEAGUES, len(pairs)))
    designs = [EloDesign.from_rows([
        {"game": "g", "a": a, "b": b, "wins": int(f + s), "draws": 0, "losses": int(2 * per_order - f - s),
         "first_wins": int(f), "first_draws": 0, "first_losses": int(per_order - f)}
        for (a, b), f, s in zip(pairs, first[n], second[n])]) for n in range(LEAGUES)]
    design = designs[0]
    scores = np.stack([d.scores for d in designs])
    estimate, low, high = profile_intervals(design.X, scores, design.games, design.contrasts())
    truth = np.array([elo[p] - elo["random-bot"] for p in design.players] + [first_move])
    return estimate, low, high, truth


@pytest.mark.parametrize("elo, per_order", [({"random-bot": 1000, "x": 1500}, 8),   # +500 over 16 games
                                            ({"random-bot": 1000, "x": 1800}, 20)])  # +800 over 40
def test_a_lopsided_pair_is_covered(elo, per_order):
    estimate, low, high, truth = simulate_leagues(elo, 0.0, per_order, seed=per_order)
    assert LOW <= covered(low[:, 1], high[:, 1], truth[1]) <= HIGH  # x (the anchor is fixed)
    assert (high[:, 1] - low[:, 1] > 100).all()  # sweeps included: never a point


def test_a_first_move_edge_is_fitted_and_covered():
    elo = {"random-bot": 1000, "x": 1200, "y": 1400}
    estimate, low, high, truth = simulate_leagues(elo, 150.0, 20, seed=150)
    for c, name in enumerate(["random-bot", "x", "y", "first move"][1:], start=1):
        assert LOW <= covered(low[:, c], high[:, c], truth[c]) <= HIGH, name
    assert abs(np.median(estimate[:, 3]) - 150) < 30  # the seat term absorbs the edge


@pytest.mark.parametrize("tasks", [2, 3, 4, 8])
def test_a_0_1_rate_over_few_tasks_of_many_samples_covers_at_least_93_percent(tasks):
    rng = np.random.default_rng(100 + tasks)
    # k = 8 samples of each task, whose own success probability is uniform (Beta(1, 1)): the design effect
    # comes from the few tasks alone, so z at the effective n under-covered (0.80 at 2 tasks, 0.92 at 8)
    p = rng.beta(1.0, 1.0, (RUNS, tasks, 1))
    hits = (rng.random((RUNS, tasks, 8)) < p).sum(-1)
    interval = rate_interval(hits, 8)
    assert covered(interval.low, interval.high, 0.5) >= 0.93


def test_one_task_of_several_samples_says_nothing_and_one_sample_per_task_keeps_z():
    one = rate_interval(np.array([3]), np.array([8]))
    assert (float(one.low), float(one.high)) == (0.0, 1.0)  # a single task: its difficulty is unknown
    plain = rate_interval(np.array([1, 0, 0, 1, 1, 0, 0, 0]), 1)  # independent episodes: the plain Wilson
    assert (float(plain.low), float(plain.high)) == pytest.approx(wilson(3 / 8, 8))
