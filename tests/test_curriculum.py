"""Curricula (`learners.loop.curriculum`): the rolling-window rule on hand-computed rewards, a learner that
moves a toy env up its levels as its reward rises (logged as `train/curriculum_level`), a resume that continues
at the same level with the same window, a clear error for an env without levels, and reasoning-gym's
curricula as levels."""

from __future__ import annotations

import json
import os

import pytest

from comlrl_env import TextParallelEnv, make
from learners import MAGRPO, MAGRPOConfig, read_checkpoint_metadata
from learners.loop.curriculum import Curriculum

PAY = {0: 1.0, 1: 0.5, 2: 0.0}  # a level's reward, whatever the answer: the rule alone decides the levels


class Levels(TextParallelEnv):
    """A toy with three levels; every answer earns `PAY[level]`."""

    metadata = {**TextParallelEnv.metadata, "name": "toy/Levels-v0", "num_tasks": 4}
    curriculum_levels = 3

    def __init__(self, **kwargs):
        super().__init__(num_agents=2, **kwargs)
        self.curriculum_level = None

    def set_curriculum_level(self, level):
        self.curriculum_level = level

    def load_task(self, task_index):
        return {"level": self.curriculum_level or 0}

    def prompts(self):
        return {a: "Say anything." for a in self.agents}

    def score(self, actions):
        return PAY[self.task["level"]], True


def test_the_window_moves_up_a_level_once_its_mean_reaches_the_threshold_and_then_empties():
    env = Levels()
    rule = Curriculum(env, threshold=0.5, window=3)
    assert env.curriculum_level == 0  # started at level 0
    levels = [rule.after_rollout(r) for r in [0.1, 0.2, 0.6, 0.8, 0.9, 0.4, 0.5, 0.7]]
    # windows: [.1 .2 .6] mean .3; [.2 .6 .8] .53 -> up, empty; [.9 .4 .5] .6 -> up (level 2 is the last)
    assert levels == [0, 0, 0, 1, 1, 1, 2, 2]
    assert rule.state_dict() == {"level": 2, "recent": [0.7]}


def run(tiny_dir, out, **learn):
    learner = MAGRPO(env=Levels(), agent_model=tiny_dir, num_agents=2,
                     args=MAGRPOConfig(num_train_epochs=3, num_generations=2, rollout_buffer_size=2, max_new_tokens=3,
                                       eval_interval=0, verbose=False, output_dir=str(out), curriculum_threshold=0.4,
                                       curriculum_window=2))
    learner.learn(**learn)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return learner, [(r["train/reward_mean"], r["train/curriculum_level"]) for r in rows if "train/reward_mean" in r]


def test_a_learner_moves_up_as_the_reward_rises_and_a_resume_keeps_the_level_and_window(tiny_dir, tmp_path):
    learner, rows = run(tiny_dir, tmp_path / "full")
    # 2 rollouts an epoch: 1.0, 1.0 (mean 1 >= 0.4: level 1), 0.5, 0.5 (level 2), then 0
    assert rows == [(1.0, 0.0), (1.0, 1.0), (0.5, 1.0), (0.5, 2.0), (0.0, 2.0), (0.0, 2.0)]
    assert learner.env.curriculum_level == 2

    ckpt = tmp_path / "ckpt"
    run(tiny_dir, tmp_path / "saved", checkpoint_dir=str(ckpt), checkpoint_steps=3)
    after_3 = [p for p in ckpt.iterdir() if read_checkpoint_metadata(p)["progress"]["rollouts_done"] == 3]
    resumed, rows_after = run(tiny_dir, tmp_path / "resumed", resume_from_checkpoint=str(after_3[0]))
    # after rollout 3: level 1 and the window [0.5], which rollout 4 completes (level 2)
    assert rows_after == rows[3:]
    assert resumed.env.curriculum_level == 2


def test_a_curriculum_threshold_without_levels_fails_before_the_models_load(tmp_path):
    with pytest.raises(ValueError, match=r"has no curriculum levels .* set curriculum_threshold=None"):
        MAGRPO(env="smoke/Arithmetic-v1", agent_model=str(tmp_path / "never-loaded"), num_agents=2,
               args=MAGRPOConfig(curriculum_threshold=0.5))


def test_reasoning_gym_curricula_are_levels_that_remake_the_items():
    env = make("reasoning_gym/basic_arithmetic-v0", size=20, seed=0)
    assert env.curriculum_levels == 5 and env.curriculum_level is None
    env.set_curriculum_level(0)
    easy = [env.source[i]["metadata"]["num_terms"] for i in range(20)]
    env.set_curriculum_level(4)
    hard = [env.source[i]["metadata"]["num_terms"] for i in range(20)]
    assert set(easy) == {2} and max(hard) > 2 and env.curriculum_level == 4
    assert make("reasoning_gym/gsm_symbolic-v0", size=2).curriculum_levels is None
    with pytest.raises(ValueError, match=r"curriculum_level must be an int in 0..4"):
        env.set_curriculum_level(5)
