"""Games, shown: a MAGRPO-trained tiny agent beats its untrained self against OpenSpiel's random bot at kuhn
poker, and the benchmark has reference rows for the bots."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspiel")

from comlrl_env.benchmark import run_suite  # noqa: E402
from comlrl_env.openspiel import OpenSpielBot  # noqa: E402
from learners import MAGRPO, MAGRPOConfig  # noqa: E402


def kuhn_return(tiny_dir: str, seed: int, epochs: int) -> tuple[float, float]:
    """Seat 0's mean return over 200 sampled episodes against the random bot, before and after training.

    One-token answers: the untrained agent almost never names a legal action ("Pass"/"Bet", or a unique
    prefix such as "p"), so a random action is played for it with the -1 penalty (mean return about -1.2).
    Learning means first answering legally, then playing better than chance.
    """
    cfg = MAGRPOConfig(num_train_epochs=epochs, episodes_per_epoch=32, rollout_buffer_size=32, num_generations=8,
                       rollout_mode="parallel", max_new_tokens=1, temperature=1.0, top_p=1.0, top_k=None,
                       agent_learning_rate=3e-2, eval_interval=0, verbose=False, seed=seed)
    learner = MAGRPO(env="openspiel/kuhn_poker-v0", agents=[tiny_dir, OpenSpielBot("random", seed=seed)], args=cfg)
    before = learner.evaluate(num_eval_samples=200, greedy=False)["eval/reward_mean"]
    learner.learn()
    after = learner.evaluate(num_eval_samples=200, greedy=False)["eval/reward_mean"]
    return before, after


def test_magrpo_learns_kuhn_poker_against_the_random_bot_over_three_seeds(tiny_dir):
    results = [kuhn_return(tiny_dir, seed, epochs=15) for seed in range(3)]
    for before, after in results:
        assert after > before + 0.5, results
    assert sum(after for _, after in results) / 3 > 0, results  # ahead of the random bot on average


def test_the_bench_has_reference_rows_for_the_bots():
    results = run_suite(["openspiel/kuhn_poker-v0", "openspiel/tic_tac_toe-v0"], {}, episodes=4)
    teams = {(row["env"], row["team"]) for row in results["rows"]}
    assert ("openspiel/kuhn_poker-v0", "random-bot") in teams
    assert ("openspiel/tic_tac_toe-v0", "mcts-bot") in teams
    assert ("openspiel/kuhn_poker-v0", "mcts-bot") not in teams  # imperfect information: MCTS does not apply
    for row in results["rows"]:
        assert "return_agent_0" in row and "return_agent_1" in row
        if row["team"].endswith("-bot"):
            assert row["invalid_action_rate"] == 0.0
