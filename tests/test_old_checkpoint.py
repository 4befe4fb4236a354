"""A checkpoint written before the learner-core redesign (`tests/fixtures/magrpo-v1/`) still resumes."""

from __future__ import annotations

import os
import warnings

import torch
from old_checkpoint import FIXTURE, MODEL, Counter, build
from safetensors.torch import load_file

from comlrl_env.testing import tiny_model
from learners import InexactResumeWarning, read_checkpoint_metadata


def test_a_checkpoint_from_before_the_redesign_resumes_and_training_continues(tmp_path):
    model_dir = str(tiny_model(tmp_path / "model", **MODEL))
    meta = read_checkpoint_metadata(FIXTURE)
    assert meta["progress"] == {"epoch": 1, "batch_in_epoch": 0, "rollouts_done": 2, "env_steps": 8}
    saved = [load_file(os.path.join(FIXTURE, "models", f"agent_{i}.safetensors")) for i in range(2)]

    counter = Counter()
    learner = build(model_dir, num_train_epochs=2, callback=counter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InexactResumeWarning)  # another machine's thread count is fine here
        learner.load_checkpoint(FIXTURE)
    # Everything the checkpoint holds is back: weights, optimizer moments, schedule, callbacks, counters.
    for agent, weights in zip(learner.agents, saved):
        own = agent.state_dict()
        assert all(torch.equal(own[k], v) for k, v in weights.items())
    assert [float(o.state_dict()["state"][0]["step"]) for o in learner.optimizers] == [4.0, 4.0]  # 2 per rollout
    assert [s.last_epoch for s in learner.schedulers] == [2, 2]
    assert counter.steps == 2 and (learner.epoch, learner.rollouts_done) == (1, 2)
    assert learner.run_id == meta["run_id"]

    # And it trains on from there: epoch 2 runs, the weights move, the new checkpoint continues the run.
    learner = build(model_dir, num_train_epochs=2, callback=counter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InexactResumeWarning)
        learner.learn(checkpoint_dir=str(tmp_path / "ckpt"), resume_from_checkpoint=FIXTURE)
    assert (learner.epoch, learner.rollouts_done, counter.steps) == (2, 4, 4)
    assert not torch.equal(learner.agents[0].state_dict()["model.embed_tokens.weight"], saved[0]["model.embed_tokens.weight"])
    after = read_checkpoint_metadata(tmp_path / "ckpt" / "checkpoint-2")
    assert after["run_id"] == meta["run_id"] and after["progress"]["rollouts_done"] == 4
