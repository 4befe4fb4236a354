"""Rollouts state their size before they start: `rollout_samples` by hand and against the engine, the refusal
over `max_rollout_samples` before any model loads, and `rollout_mode="auto"` for long turn-taking games."""

from __future__ import annotations

import pytest

import learners.loop.learner
from comlrl_env import TextParallelEnv
from learners import MAGRPO, MAGRPOConfig
from learners.rollout import rollout_samples

FAST = dict(num_train_epochs=1, max_new_tokens=2, temperature=1.0, top_p=1.0, top_k=None, eval_interval=0,
            verbose=False, rollout_buffer_size=2, num_generations=2)


@pytest.mark.parametrize("args, expected", [
    ((2, 2, 1, 9, "parallel"), 36),  # tic_tac_toe in parallel: B K m T
    ((2, 2, 1, 9, "tree"), 2044),  # ... as a tree: 2 * 1 * 2 * (1 + 2 + ... + 2^8)
    ((1, 2, 2, 2, "tree", "cross"), 20),  # two movers, 4 joint actions per node: 1 * 2 * 2 * (1 + 4)
    ((1, 4, 2, 1, "tree"), 8),  # one turn: every mode samples B m K
])
def test_rollout_samples_by_hand(args, expected):
    assert rollout_samples(*args) == expected


class Steps(TextParallelEnv):
    """Every seat moves every turn for `num_turns` turns; no early end."""

    metadata = {**TextParallelEnv.metadata, "name": "steps-v0", "num_tasks": 2}

    def load_task(self, task_index):
        return {}

    def prompts(self):
        return {a: f"turn {self.turn}" for a in self.agents}

    def score(self, actions):
        return 0.0, False


@pytest.mark.parametrize("mode, joint", [("tree", "aligned"), ("tree", "cross"), ("parallel", "aligned")])
def test_the_formula_counts_what_the_engine_samples(tiny_dir, mode, joint):
    learner = MAGRPO(env=Steps(num_agents=2, num_turns=3), agent_model=tiny_dir, num_agents=2,
                     args=MAGRPOConfig(**FAST, rollout_mode=mode, joint_mode=joint))
    learner.learn()
    sampled = learner.completions_sampled * learner.num_agents  # per agent, over the epoch's one rollout
    assert sampled == rollout_samples(2, 2, 2, 3, mode, joint)


def test_an_exploding_tree_is_refused_before_any_model_loads(tiny_dir, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(learners.loop.learner, "load_agents", no_loading)
    with pytest.raises(ValueError, match=r"up to 4092 completions .* over max_rollout_samples=2048\. Lower it with "
                                         r"rollout_mode='parallel'.*num_generations.*num_turns"):
        MAGRPO(env="openspiel/bargaining-v0", agent_model=tiny_dir, num_agents=2,
               args=MAGRPOConfig(**FAST, rollout_mode="tree"))


def test_the_limit_can_be_raised_or_lifted(tiny_dir):
    for limit in (5000, None):
        learner = MAGRPO(env="openspiel/bargaining-v0", agent_model=tiny_dir, num_agents=2,
                         args=MAGRPOConfig(**FAST, rollout_mode="tree", max_rollout_samples=limit))
        assert learner.args.rollout_mode == "tree"
    with pytest.raises(ValueError, match="max_rollout_samples must be >= 1 or None"):
        MAGRPOConfig(max_rollout_samples=0)


@pytest.mark.parametrize("env_id, expected", [
    ("openspiel/tic_tac_toe-v0", "parallel"),  # turn-taking, 9 turns
    ("openspiel/kuhn_poker-v0", "tree"),  # turn-taking, 3 turns
    ("smoke/FormatAgreement-v1", "tree"),  # both seats move
])
def test_auto_rolls_long_turn_taking_games_out_in_parallel(tiny_dir, env_id, expected):
    learner = MAGRPO(env=env_id, agent_model=tiny_dir, num_agents=2, args=MAGRPOConfig(**FAST))
    assert learner.args.rollout_mode == expected


def test_auto_keeps_the_tree_for_cross_mode(tiny_dir):
    learner = MAGRPO(env="openspiel/tic_tac_toe-v0", agent_model=tiny_dir, num_agents=2,
                     args=MAGRPOConfig(**FAST, joint_mode="cross"))
    assert learner.args.rollout_mode == "tree"
