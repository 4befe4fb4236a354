"""MAGRPO: advantages and loss by hand, constructor rules and errors, learning, export and continuation."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from learners.loop.data import reset_roots
from learners.reinforce import (
    MAGRPO,
    MAGRPOConfig,
    MAGRPOTrainer,
    group_relative_advantages,
    policy_loss,
    policy_stats,
)

FAST = dict(num_train_epochs=1, num_generations=2, max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None,
            eval_interval=0, verbose=False)


def space_reward(first, second):
    """Fraction of whitespace characters in the joint answer: easy for a tiny model to raise."""
    return [sum(ch.isspace() for ch in a + b) / max(len(a + b), 1) for a, b in zip(first, second)]


def dataset(n=4):
    return Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(n)])


# ----- advantages, by hand --------------------------------------------------------------------


R = torch.tensor([[1.0, 0.0, 0.0, 1.0, 3.0, 1.0]])  # one agent; groups [0,0,0,0] and [1,1]
G = torch.tensor([0, 0, 0, 0, 1, 1])


@pytest.mark.parametrize("mode, expected", [
    ("mean", [0.5, -0.5, -0.5, 0.5, 1.0, -1.0]),  # R - group mean (0.5 and 2)
    ("raw", [1.0, 0.0, 0.0, 1.0, 3.0, 1.0]),  # R itself
    ("max", [0.0, -1.0, -1.0, 0.0, 0.0, -2.0]),  # R - group max (1 and 3)
    ("rloo", [2 / 3, -2 / 3, -2 / 3, 2 / 3, 2.0, -2.0]),  # R - mean of the others: 1 - 1/3, 0 - 2/3, 3 - 1
])
def test_advantage_modes_without_normalization(mode, expected):
    adv = group_relative_advantages(R, G, mode=mode, normalize=False)
    assert torch.allclose(adv, torch.tensor([expected]), atol=1e-6)


def test_normalization_divides_by_the_group_population_std():
    adv = group_relative_advantages(R, G, mode="mean", normalize=True)
    # Group 0: centred [.5,-.5,-.5,.5], std .5 -> [1,-1,-1,1]; group 1: [1,-1], std 1.
    assert torch.allclose(adv, torch.tensor([[1.0, -1.0, -1.0, 1.0, 1.0, -1.0]]), atol=1e-6)
    # With normalization all modes agree (they differ by a shift and scale within a group)...
    for mode in ("raw", "max", "rloo"):
        assert torch.allclose(group_relative_advantages(R, G, mode=mode), adv, atol=1e-5)
    # ...which is why they must differ without it.
    raw = [group_relative_advantages(R, G, mode=m, normalize=False) for m in ("mean", "raw", "max", "rloo")]
    assert all(not torch.allclose(raw[i], raw[j]) for i in range(4) for j in range(i + 1, 4))


def test_identical_rewards_give_zero_advantage_and_singleton_groups_are_left_alone():
    adv = group_relative_advantages(torch.tensor([[2.0, 2.0, 5.0]]), torch.tensor([0, 0, 1]))
    assert adv.tolist() == [[0.0, 0.0, 0.0]]  # std floored at 1e-6, no NaN; singleton: R - mean = 0


def test_advantages_are_per_agent():
    returns = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    adv = group_relative_advantages(returns, torch.tensor([0, 0]), normalize=False)
    assert adv.tolist() == [[0.5, -0.5], [-0.5, 0.5]]


# ----- the loss ----------------------------------------------------------------------------------


def test_on_policy_loss_is_minus_advantage_times_sequence_logprob():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # third token is padding: excluded
    adv = torch.tensor([1.0, -2.0])
    loss = policy_loss(logp, logp.detach(), adv, mask)
    # With rho = 1 the value is -mean(A * number of scored tokens) = -((1 * 2) + (-2 * 2)) / 2 = 1,
    # and the gradient is that of -mean(A * sum log p): -A / |B| on every scored token.
    assert torch.isclose(loss, torch.tensor(1.0))
    loss.backward()
    assert logp.grad.tolist() == [[-0.5, -0.5, 0.0], [1.0, 1.0, 0.0]]  # -A/|B| on scored tokens only


def test_ratio_is_clipped_when_the_policy_moved():
    old = torch.zeros(1, 2)
    new = torch.log(torch.tensor([[2.0, 1.0]]))  # ratios 2 and 1
    loss = policy_loss(new, old, torch.tensor([1.0]), torch.ones(1, 2), clip_range=0.2)
    assert torch.isclose(loss, torch.tensor(-(1.2 + 1.0)))
    norm = policy_loss(new, old, torch.tensor([1.0]), torch.ones(1, 2), 0.2, length_normalization=True)
    assert torch.isclose(norm, torch.tensor(-(1.2 + 1.0) / 2))


def test_policy_stats_by_hand():
    # Two sequences: ratios [1.5, 1.0] (A = 1) and [0.5, padding] (A = -2); eps = 0.2.
    old = torch.log(torch.tensor([[0.2, 0.5], [0.4, 0.9]]))
    new = old + torch.log(torch.tensor([[1.5, 1.0], [0.5, 7.0]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    surrogate, clipped, kl, entropy = policy_stats(new, old, torch.tensor([1.0, -2.0]), mask, 0.2).tolist()
    # min(rho A, clip(rho) A): 1.2 (clipped), 1.0, and for A = -2 at rho 0.5: min(-1.0, -1.6) = -1.6.
    assert surrogate == pytest.approx((1.2 + 1.0 - 1.6) / 3)
    assert clipped == pytest.approx(2 / 3)  # |rho - 1| > 0.2 for 1.5 and 0.5; the padded 7.0 does not count
    assert kl == pytest.approx(((0.5 - math.log(1.5)) + 0.0 + (-0.5 - math.log(0.5))) / 3, rel=1e-5)
    assert entropy == pytest.approx(-(math.log(0.2) + math.log(0.5) + math.log(0.4)) / 3, rel=1e-6)
    # At ratio 1 nothing is clipped and the KL estimate is 0.
    _, clipped, kl, _ = policy_stats(old, old, torch.tensor([1.0, -2.0]), mask, 0.2).tolist()
    assert clipped == 0 and kl == 0


# ----- configuration and construction errors (before any model loads) -----------------------


NO_MODEL = "/nonexistent/model-dir"  # loading it would fail: errors below must come first


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_generations=1), "num_generations must be >= 2 for a group baseline, got 1"),
    (dict(advantage_mode="median"), "advantage_mode must be one of mean, raw, max, rloo, counterfactual"),
    (dict(advantage_mode="counterfactual"), "advantage_mode='counterfactual' needs .*got joint_mode='aligned'"),
    (dict(joint_mode="crossed"), "joint_mode must be one of aligned, cross, got 'crossed'"),
    (dict(rollout_mode="beam"), "rollout_mode must be one of auto, tree, parallel, got 'beam'"),
    (dict(joint_mode="cross", rollout_mode="parallel"), "cross.*tree"),
    (dict(num_train_epochs=0), "num_train_epochs must be >= 1, got 0"),
    (dict(discount=1.5), r"discount must be in \[0, 1\]"),
    (dict(lr_scheduler_type="step"), "lr_scheduler_type"),
    (dict(advantage_grouping="batch"), "advantage_grouping must be one of node, global"),
    (dict(advantage_grouping="global", advantage_mode="counterfactual", joint_mode="cross"), "needs advantage_grouping='node'"),
    (dict(parallel_training="ddp"), "parallel_training"),
])
def test_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MAGRPOConfig(**kwargs)


def test_reference_field_names_are_accepted():
    cfg = MAGRPOConfig(num_train_epochs=3, agent_learning_rate=5e-6, logging_steps=50, num_agents=2,
                       parallel_training="none", agent_devices=None, num_generations=4, max_new_tokens=8,
                       temperature=0.7, top_p=0.9, top_k=None, num_turns=1, discount=0.9, joint_mode="align",
                       early_termination_threshold=None, external_prompt_passthrough=False, eval_interval=16,
                       eval_num_samples=4, eval_batch_size=1, rollout_buffer_size=2, train_batch_size=None,
                       advantage_normalization=True, advantage_mode="rloo", reference_kl_enabled=False,
                       reference_kl_coef=0.1, reference_devices=None)
    assert cfg.joint_mode == "aligned"
    assert MAGRPOConfig().num_turns == 1 and MAGRPOConfig().early_termination_threshold is None


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(reward_func="not callable", train_dataset=dataset()), TypeError, "reward_func must be a callable"),
    (dict(reward_func=space_reward, train_dataset=dataset(), args=MAGRPOConfig(num_turns=2)), ValueError,
     "num_turns=2 needs an external_transition"),
    (dict(reward_func=space_reward, train_dataset=Dataset.from_list([{"question": "q"}])), ValueError,
     "needs dataset field 'prompt'"),
    (dict(env="coop/LenghtRatio-v1"), KeyError, "Did you mean: coop/LengthRatio-v1"),
    (dict(env="coop/LengthRatio-v1", num_agents=3), ValueError, "environment has 2 agents but 3"),
    (dict(reward_func=space_reward, train_dataset=dataset(), num_agents=3, args=MAGRPOConfig(num_agents=2)),
     ValueError, "args.num_agents=2 but the constructor gives 3"),
    (dict(env="coop/LengthRatio-v1", train_dataset=dataset(), reward_func=space_reward), ValueError, "not both"),
    (dict(reward_func=space_reward, train_dataset=dataset(), eval_logger=lambda **k: []), ValueError,
     "eval_logger and eval_aggregator"),
])
def test_constructor_errors_come_before_model_loading(kwargs, error, match):
    kwargs = {"agent_model": NO_MODEL, "num_agents": 2, **kwargs}
    with pytest.raises(error, match=match):
        MAGRPO(**kwargs)


def test_agent_rules(tiny_dir, tiny_dir_b):
    base = dict(reward_func=space_reward, train_dataset=dataset(), args=MAGRPOConfig(**FAST))
    with pytest.raises(ValueError, match="Either agent_model or agents must be provided"):
        MAGRPO(**base)
    with pytest.raises(ValueError, match="conflicts with agents"):
        MAGRPO(agent_model=tiny_dir, agents=[tiny_dir, tiny_dir_b], **base)
    with pytest.raises(ValueError, match="agents has 2 entries but num_agents=3"):
        MAGRPO(agents=[tiny_dir, tiny_dir], num_agents=3, **base)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    with pytest.raises(ValueError, match="pass tokenizer="):
        MAGRPO(agents=[model, tiny_dir], **base)
    with pytest.raises(ValueError, match="loaded model object but num_agents=2"):
        MAGRPO(agent_model=model, num_agents=2, **base)
    with pytest.raises(ValueError, match="got 3 tokenizers for 2 models"):
        tok = AutoTokenizer.from_pretrained(tiny_dir)
        MAGRPO(agents=[model, model], tokenizer=[tok] * 3, **base)


def test_homogeneous_agents_get_independent_copies(tiny_dir):
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset(),
                     args=MAGRPOConfig(**FAST))
    p0, p1 = (next(a.parameters()) for a in learner.agents)
    assert p0 is not p1 and torch.equal(p0, p1)
    assert learner.tokenizers[0].padding_side == "left"


def test_heterogeneous_agents_with_different_vocabularies(tiny_dir, tiny_llama_dir):
    learner = MAGRPO(agents=[tiny_dir, tiny_llama_dir], reward_func=space_reward, train_dataset=dataset(2),
                     args=MAGRPOConfig(**FAST, rollout_buffer_size=2))
    assert [len(t) for t in learner.tokenizers] == [2048, 1024]
    before = [p.detach().clone() for p in learner.agents[1].parameters()]
    learner.learn()
    assert any(not torch.equal(b, p) for b, p in zip(before, learner.agents[1].parameters()))


def test_loaded_objects_with_tokenizers_and_shared_parameters(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    learner = MAGRPO(agents=[model, model], tokenizer=tok, reward_func=space_reward, train_dataset=dataset(2),
                     args=MAGRPOConfig(**FAST, rollout_buffer_size=2))
    assert learner.agents[0] is learner.agents[1]  # parameter sharing, as in CoMLRL 1.4.3
    assert len(learner.optimizers) == 1  # self-play: one model, one optimizer (CoMLRL 1.4.3 steps twice)
    learner.learn()


def test_special_tokens_resize_embeddings(tiny_dir):
    learner = MAGRPO(agent_model=tiny_dir, num_agents=1, reward_func=lambda c: [0.0] * len(c),
                     train_dataset=dataset(2), model_config={"special_tokens": {"additional_special_tokens": ["<tool>"]}},
                     args=MAGRPOConfig(**FAST))
    assert learner.agents[0].get_input_embeddings().weight.shape[0] == len(learner.tokenizers[0]) == 2049


# ----- learning, export, continuation ------------------------------------------------------


def test_magrpo_raises_a_simple_reward(tiny_dir):
    """Two agents learn to put more whitespace in their joint answer: the reward must rise clearly."""
    cfg = MAGRPOConfig(num_train_epochs=24, num_generations=8, max_new_tokens=8, temperature=1.0, top_p=1.0,
                       top_k=None, rollout_buffer_size=8, agent_learning_rate=1e-2, max_grad_norm=None,
                       eval_interval=0, verbose=False, seed=0)
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset(8), args=cfg)
    rewards = []
    learner.callbacks = [type("Record", (), {"on_step_end": lambda self, l, m: rewards.append(m["train/reward_mean"])})()]
    learner.learn()
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.2, rewards
    assert learner.evaluate(num_eval_samples=8, greedy=True)["eval/reward_mean"] > first + 0.2


def test_several_optimizer_steps_per_rollout_with_ratio_and_metrics(tiny_dir, tmp_path):
    cfg = MAGRPOConfig(**{**FAST, "num_generations": 2}, rollout_buffer_size=4, train_batch_size=1,
                       output_dir=str(tmp_path / "out"), logging_steps=1)
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset(4), args=cfg)
    steps = []
    original = learner.optimizers[0].step
    learner.optimizers[0].step = lambda *a, **k: (steps.append(1), original(*a, **k))[1]
    learner.learn()
    assert len(steps) == 4  # 4 task instances = 4 groups, one optimizer step per group
    lines = [json.loads(x) for x in open(tmp_path / "out" / "metrics.jsonl")]
    keys = set(lines[0])
    for key in ("train/reward_mean", "train/agent_0/loss", "train/agent_1/grad_norm", "train/agent_0/completion_length",
                "train/turn_1/reward_mean", "perf/tokens_per_second", "perf/seconds_generate", "perf/seconds_update",
                "train/agent_0/advantage_std", "train/invalid_action_rate", "train/agent_0/surrogate",
                "train/agent_0/clip_fraction", "train/agent_0/approx_kl", "train/agent_0/entropy"):
        assert key in keys, key
    # Steps 2-4 score the rollout after the policy moved: the ratio to the sampling policy is no longer 1
    # (a loss that kept it at 1 would show approx_kl == 0), and the sampled tokens' entropy is positive.
    for a in (0, 1):
        assert lines[0][f"train/agent_{a}/approx_kl"] > 0 and lines[0][f"train/agent_{a}/entropy"] > 0


def test_save_reload_and_continue(tiny_dir, tmp_path):
    learner = MAGRPOTrainer(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset(2),
                            args=MAGRPOConfig(**FAST, rollout_buffer_size=2, agent_learning_rate=1e-2))
    learner.train()
    out = tmp_path / "run-1"
    learner.save_model(str(out))
    manifest = json.loads((out / "comlrl_env.json").read_text())
    assert manifest["learner"] == "MAGRPO" and manifest["num_agents"] == 2
    for i in range(2):
        reloaded = AutoModelForCausalLM.from_pretrained(out / f"agent_{i}")
        AutoTokenizer.from_pretrained(out / f"agent_{i}")
        for (name, p), q in zip(learner.agents[i].named_parameters(), reloaded.parameters()):
            assert torch.equal(p, q), name
    continued = MAGRPOTrainer(agents=[str(out / "agent_0"), str(out / "agent_1")], num_agents=2,
                              reward_func=space_reward, train_dataset=dataset(2),
                              args=MAGRPOConfig(**{**FAST, "num_train_epochs": 1}, agent_learning_rate=1e-2))
    before = next(continued.agents[0].parameters()).detach().clone()
    continued.train()
    assert not torch.equal(before, next(continued.agents[0].parameters()))
    continued.save_model(str(tmp_path / "run-2"))
    assert os.path.isdir(tmp_path / "run-2" / "agent_1")


def test_multi_turn_tree_and_parallel_with_env_id(tiny_dir):
    for mode in ("tree", "parallel"):
        cfg = MAGRPOConfig(**FAST, rollout_mode=mode, episodes_per_epoch=2, rollout_buffer_size=2, discount=0.9)
        learner = MAGRPO(env="coop/GuessNumber-v1", agent_model=tiny_dir, num_agents=2, args=cfg)
        rollouts = []
        collect = learner.engine.collect
        learner.engine.collect = lambda *a, **k: rollouts.append(collect(*a, **k)) or rollouts[-1]
        metrics = learner.learn()
        (r,) = rollouts
        assert int(r.turn.max()) >= 1 and learner.env_steps == r.num_joint_actions
        assert metrics["train/turn_2/reward_mean"] == pytest.approx(float(r.rewards[:, r.turn == 1].mean()))
        assert torch.equal(r.returns[0], r.returns[1])  # cooperative: one joint return
        last = r.turn == int(r.turn.max())
        assert torch.allclose(r.returns[:, last], r.rewards[:, last])  # nothing after the turn limit
        if mode == "parallel":  # R_t = r_t + 0.9 R_{t+1} along each episode
            linked = (r.next_index >= 0).nonzero().squeeze(1)
            expected = r.rewards[:, linked] + 0.9 * r.returns[:, r.next_index[linked]]
            assert len(linked) and torch.allclose(r.returns[:, linked], expected)
        else:  # 2 roots x 2 samples, then each live node expands 2 children: groups of 2 siblings
            assert (torch.bincount(r.group) == 2).all() and int((r.turn == 0).sum()) == 4
            # Turn t has 2 rows per live node of turn t - 1 (a branch that solved the task expands nothing).
            for t in range(1, int(r.turn.max()) + 1):
                assert int((r.turn == t).sum()) <= 2 * int((r.turn == t - 1).sum())


def test_evaluate_with_hooks_and_greedy_determinism(tiny_dir):
    seen = {}

    def eval_logger(agent_completions_turns, batch_items, prompts):
        seen["shape"] = (len(agent_completions_turns), len(agent_completions_turns[0]), len(agent_completions_turns[0][0]))
        seen["items"] = batch_items
        return [{"chars": len(c[0])} for c in agent_completions_turns[0]]

    def eval_aggregator(metrics, num_turns):
        return {"chars_mean": sum(m["chars"] for m in metrics) / len(metrics)}

    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset(3),
                     eval_logger=eval_logger, eval_aggregator=eval_aggregator, args=MAGRPOConfig(**FAST))
    a = learner.evaluate(num_eval_samples=3, greedy=True)
    b = learner.evaluate(num_eval_samples=3, greedy=True)
    assert a == b and "eval/chars_mean" in a and "eval/turn_1/reward_mean" in a
    assert seen["shape"] == (2, 3, 1)  # the 3 instances, in the evaluation's seeded shuffle
    assert sorted(item["prompt"] for item in seen["items"]) == ["Question 0:", "Question 1:", "Question 2:"]
    assert learner.evaluate(num_eval_samples=0) == {}


def test_wandb_starts_in_learn_not_in_the_constructor(tiny_dir, tmp_path):
    import wandb

    cfg = MAGRPOConfig(**FAST, rollout_buffer_size=2)
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset(2), args=cfg,
                     wandb_config={"mode": "offline", "dir": str(tmp_path), "project": "test", "name": "run"})
    assert wandb.run is None
    learner.learn()
    assert wandb.run is None  # finished at the end of learn()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1


def test_reference_kl_is_zero_for_an_unchanged_policy_and_reported(tiny_dir):
    cfg = MAGRPOConfig(**FAST, rollout_buffer_size=2, reference_kl_enabled=True, reference_kl_coef=0.5)
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset(2), args=cfg)
    roots = reset_roots(learner.env, learner.epoch_order(learner.env, 0))
    metrics = learner.step(roots)
    assert metrics["train/agent_0/kl"] == pytest.approx(0.0, abs=1e-5)  # reference == policy before the update
    roots = reset_roots(learner.env, learner.epoch_order(learner.env, 1))
    assert learner.step(roots)["train/agent_0/kl"] > 0  # the policy moved, its copy did not


def test_linear_schedule_decays_to_zero(tiny_dir):
    cfg = MAGRPOConfig(**{**FAST, "num_train_epochs": 2}, rollout_buffer_size=2, lr_scheduler_type="linear",
                       agent_learning_rate=1e-3)
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset(2), args=cfg)
    lrs = []
    learner.callbacks = [type("R", (), {"on_step_end": lambda self, l, m: lrs.append(m["train/agent_0/learning_rate"])})()]
    learner.learn()
    assert lrs == [pytest.approx(1e-3), pytest.approx(5e-4)]
    assert learner.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0)


# ----- a NaN stops training, weights intact ---------------------------------------------------


def test_gradient_step_refuses_a_non_finite_gradient():
    from learners.loop.optim import adamw, gradient_step

    model = torch.nn.Linear(3, 1)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = adamw(model.parameters(), lr=0.1)
    (model(torch.tensor([[1.0, float("nan"), 0.0]])).sum()).backward()
    with pytest.raises(FloatingPointError, match="gradient norm of Linear is nan.*weights unchanged"):
        gradient_step(model, optimizer, 1, max_grad_norm=1.0)
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters()))


def test_a_nan_reward_stops_learning_with_a_clear_error(tiny_dir):
    """NaN rewards are stopped at the source (the reward call names the task instance); NaN gradients from
    anywhere else stop in `gradient_step` (above)."""
    from rewards.calling import RewardFunctionError

    calls = []

    def reward(first, second):
        calls.append(len(first))
        return [float("nan") if len(calls) > 2 else 0.5 * (i % 2) for i in range(len(first))]

    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=reward, train_dataset=dataset(),
                     args=MAGRPOConfig(**{**FAST, "num_train_epochs": 2}, rollout_buffer_size=1))
    with pytest.raises(RewardFunctionError, match="returned nan on dataset index .* rewards must be finite"):
        learner.learn()
    assert all(torch.isfinite(p).all() for agent in learner.agents for p in agent.parameters())


def test_global_grouping_compares_every_sample_of_the_rollout(tiny_dir, monkeypatch):
    """advantage_grouping="global": one group per agent over all task instances and turns; "node": per node."""
    import learners.reinforce as reinforce

    seen = {}
    real = reinforce.acting_advantages

    def spy(returns, rollout, mode, normalize):
        seen["group"], seen["returns"] = rollout.group.clone(), returns.clone()
        seen["advantages"] = real(returns, rollout, mode, normalize)
        return seen["advantages"]

    monkeypatch.setattr(reinforce, "acting_advantages", spy)
    for grouping in ("node", "global"):
        learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset(2),
                         args=MAGRPOConfig(**FAST, advantage_grouping=grouping, advantage_normalization=False))
        learner.step(reset_roots(learner.env, learner.epoch_order(learner.env, 0)))
        R = seen["returns"]
        if grouping == "node":  # two task instances, K = 2 each: groups [0, 0, 1, 1]
            assert seen["group"].tolist() == [0, 0, 1, 1]
            expected = R - R.reshape(2, 2, 2).mean(-1, keepdim=True).repeat_interleave(2, -1).reshape(2, 4)
        else:
            assert seen["group"].tolist() == [0, 0, 0, 0]
            expected = R - R.mean(1, keepdim=True)
        assert torch.allclose(seen["advantages"], expected)


def test_evaluation_draws_a_seeded_shuffle_of_instances_the_same_at_every_evaluation(tiny_dir, monkeypatch):
    import learners.loop.evaluation as evaluation

    played: list[list[int]] = []

    def recording(env, batch):
        played[-1] += [index for _, index in batch]
        return reset_roots(env, batch)

    monkeypatch.setattr(evaluation, "reset_roots", recording)

    def eval_instances(seed: int) -> list[int]:
        learner = MAGRPO(env="coop/SecretPair-v1", agent_model=tiny_dir, num_agents=2, args=MAGRPOConfig(
            num_train_epochs=1, max_new_tokens=2, eval_num_samples=8, eval_batch_size=4, eval_interval=0,
            verbose=False, seed=seed))
        played.append([])
        metrics = learner.evaluate()
        assert metrics["eval/used_partner_info_chance"] == pytest.approx(1 / 12)  # beside the rate it qualifies
        return played[-1]

    first = eval_instances(seed=0)
    # SecretPair's instances 0..11 all hold "red": evaluating on the first 8 would favour a team that says red
    assert first != list(range(8)) and len(set(first)) == 8
    assert eval_instances(seed=0) == first  # reproducible for a seed: every evaluation of a run plays the same
    assert eval_instances(seed=1) != first
