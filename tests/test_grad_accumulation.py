"""Gradient accumulation: a step in micro-batches equals the unsplit step; fused AdamW and its checkpoints."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset

from learners.actor_critic import IAC, MAAC, IACConfig, MAACConfig
from learners.loop.config import LearnerConfig
from learners.loop.optim import accumulate_gradients
from learners.preference import MARLHF, MARLHFConfig
from learners.reinforce import MAGRPO, MAGRPOConfig
from rewards.models import RewardModel
from rewards.preferences import make_pair

# One task instance and 5 samples per agent: 2 micro-batches are 3 + 2 samples, so weighting the
# micro losses equally (or summing them) would give another gradient than the minibatch mean.
FAST = dict(num_train_epochs=1, max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None, rollout_buffer_size=1,
            num_generations=5, eval_interval=0, verbose=False, seed=3)


def space_reward(first, second):
    return [sum(ch.isspace() for ch in a + b) / max(len(a + b), 1) for a, b in zip(first, second)]


dataset = Dataset.from_list([{"prompt": "Question 0:"}])
two_prompts = Dataset.from_list([{"prompt": "Question 0:"}, {"prompt": "Question 1:"}])


# ----- the config and the helper ----------------------------------------------------------------


@pytest.mark.parametrize("value, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_config_rejects_bad_values(value, error):
    with pytest.raises(error, match=f"gradient_accumulation_steps must be .*got {value!r}"):
        LearnerConfig(gradient_accumulation_steps=value)
    with pytest.raises(error, match="gradient_accumulation_steps"):
        MAGRPOConfig(gradient_accumulation_steps=value)


def test_accumulated_gradient_is_that_of_the_minibatch_mean():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x, y = torch.randn(5, 3), torch.randn(5)
    calls = []

    def loss_fn(idx):
        calls.append(idx.tolist())
        err = (model(x[idx]).squeeze(-1) - y[idx]) ** 2
        return err.mean(), err.max()

    full = loss_fn(torch.arange(5))[0]
    expected = torch.autograd.grad(full, list(model.parameters()))
    calls.clear()
    mean, _ = accumulate_gradients(torch.arange(5), loss_fn, micro_batches=2)
    assert calls == [[0, 1, 2], [3, 4]]  # in order, as even as possible
    assert mean == pytest.approx(full.item(), rel=1e-6)
    for p, g in zip(model.parameters(), expected):
        assert torch.allclose(p.grad, g, atol=1e-6)

    calls.clear()
    model.zero_grad()
    accumulate_gradients(torch.tensor([4, 1]), loss_fn, micro_batches=8)  # fewer samples than micro-batches
    assert calls == [[4], [1]]


# ----- every learner: one step in micro-batches == one unsplit step ------------------------------------


def _magrpo(data=dataset, **extra):
    def build(tiny_dir, steps):
        return MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=data,
                      args=MAGRPOConfig(**{**FAST, **extra}, gradient_accumulation_steps=steps))
    return build


def _iac(separate, **extra):
    def build(tiny_dir, steps):
        return IAC(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir if separate else None,
                   reward_func=space_reward, train_dataset=dataset,
                   args=IACConfig(**{**FAST, **extra}, use_separate_critic=separate, gradient_accumulation_steps=steps))
    return build


def _maac(tiny_dir, steps, **extra):
    return MAAC(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, reward_func=space_reward,
                train_dataset=dataset, args=MAACConfig(**{**FAST, **extra}, gradient_accumulation_steps=steps))


def _maac_several(tiny_dir, steps):
    return _maac(tiny_dir, steps, train_batch_size=2, ppo_epochs=2)


def _parameters(learner):
    """Every trained parameter (agents, critics, value heads) by name, copied."""
    return {f"{name}.{key}": p.detach().clone()
            for name, module in learner.checkpoint_modules().items() for key, p in module.named_parameters()}


@pytest.mark.parametrize("build, steps", [
    (_magrpo(), 2),
    (_magrpo(reference_kl_enabled=True), 2),  # the loss reads old log-probs: rows of each micro-batch
    (_iac(separate=True), 2),
    (_iac(separate=False), 3),
    (_maac, 2),
    # Several minibatches per rollout: after the first step the ratio to the sampling policy is not 1.
    (_magrpo(two_prompts, train_batch_size=1, num_generations=3, rollout_buffer_size=2, agent_learning_rate=1e-3), 2),
    (_iac(True, train_batch_size=2, ppo_epochs=2, agent_learning_rate=1e-3), 2),  # 3 minibatches x 2 passes
    (_iac(False, train_batch_size=3, agent_learning_rate=1e-3), 2),  # 3 + 2 samples
    (_maac_several, 3),
], ids=["magrpo", "magrpo-old-logprobs", "iac-separate", "iac-shared", "maac", "magrpo-2-minibatches",
        "iac-separate-6-steps", "iac-shared-2-minibatches", "maac-6-steps"])
def test_one_step_in_micro_batches_equals_the_unsplit_step(tiny_dir, build, steps):
    whole = build(tiny_dir, 1)
    initial = _parameters(whole)
    whole_metrics = whole.learn()  # one epoch: one rollout, one or several optimizer steps per model
    split = build(tiny_dir, steps)  # seeded alike: it samples the same rollout
    split_metrics = split.learn()

    assert split_metrics["train/reward_mean"] == whole_metrics["train/reward_mean"]
    assert_same_updates(initial, _parameters(whole), _parameters(split))
    # The accumulated gradient's norm (before clipping) is that of the minibatch mean. Losses are compared
    # only where they are not a cancellation: at ratio 1 a policy-gradient loss is a sum of zero-mean terms,
    # so its value (~1e-7) is rounding noise whatever the split.
    norms = [k for k in whole_metrics if k.endswith("/grad_norm")]
    losses = [k for k in whole_metrics if k.endswith("/loss") and abs(whole_metrics[k]) > 1e-3]
    assert norms
    for k in norms + losses:
        assert split_metrics[k] == pytest.approx(whole_metrics[k], rel=1e-4), k
    if whole.args.train_batch_size:  # the later steps ran with a ratio != 1
        assert whole_metrics["train/agent_0/approx_kl"] > 0


def assert_same_updates(initial, expected, got):
    """Each tensor's update matches, relative to the update's own size (not an absolute tolerance)."""
    moved = [k for k in initial if not torch.equal(initial[k], expected[k])]
    assert moved  # the step did change the weights
    for k in initial:
        want, have = expected[k] - initial[k], got[k] - initial[k]
        error, size = torch.linalg.vector_norm(have - want), torch.linalg.vector_norm(want)
        assert error <= 1e-3 * size + 1e-12, (k, float(error), float(size))  # seen: error/size ~5e-6


def test_reward_model_training_in_micro_batches_equals_the_unsplit_training(tiny_dir):
    learner = MARLHF(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset,
                     args=MARLHFConfig(**FAST, reward_train_batch_size=7, reward_learning_rate=1e-3))
    pairs = [make_pair("a " * (i + 2), "b" * (i + 1), 1.0, 0.0) for i in range(7)]  # one batch of 7 pairs

    def train(steps):
        learner.args.gradient_accumulation_steps = steps  # 3 micro-batches: 3 + 2 + 2 pairs
        torch.manual_seed(0)  # the same fresh head
        learner.reward_model = RewardModel.from_pretrained(tiny_dir)
        metrics = learner.train_reward_model(pairs)
        return metrics, {k: v.detach().clone() for k, v in learner.reward_model.named_parameters()}

    whole_metrics, whole = train(1)
    split_metrics, split = train(3)
    loss = "preference/reward_model_loss"
    assert split_metrics[loss] == pytest.approx(whole_metrics[loss], rel=1e-5)
    for k, value in split.items():
        # The loss depends on score differences only, so the head's bias gets a rounding-noise gradient,
        # which Adam's first step turns into +-lr either way.
        if k != "reward_head.bias":
            assert torch.allclose(value, whole[k], atol=1e-6), k


# ----- fused AdamW ------------------------------------------------------------------------------------


def test_optimizers_are_fused_and_keep_their_kernel_when_loading_any_checkpoint(tiny_dir, tmp_path):
    learner = _maac(tiny_dir, 2)
    optimizers, _ = learner.checkpoint_optimizers()
    assert all(g["fused"] is True for o in optimizers for g in o.param_groups)
    learner.learn(checkpoint_dir=str(tmp_path / "ckpt"))
    resumed = _maac(tiny_dir, 2)
    resumed.load_checkpoint(str(tmp_path / "ckpt" / "checkpoint-1"))
    for own, saved in zip(resumed.checkpoint_optimizers()[0], optimizers):
        assert own.param_groups[0]["fused"] is True
        assert torch.equal(own.state_dict()["state"][0]["exp_avg"], saved.state_dict()["state"][0]["exp_avg"])

    # A state saved by the unfused loop (an older run) resumes on our fused kernel, not on the saved flag.
    state = optimizers[0].state_dict()
    old_run = {**state, "param_groups": [{**g, "fused": None} for g in state["param_groups"]]}
    resumed.optimizers[0].load_state_dict(old_run)
    assert resumed.optimizers[0].param_groups[0]["fused"] is True
