"""LoRA agents: one shared frozen base for homogeneous agents, per-agent adapters, export, checkpoints."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM

from learners import MAGRPO, MAGRPOConfig

peft = pytest.importorskip("peft")

LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0}
data = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(2)])


def spaces(a, b, c):
    return [sum(ch.isspace() for ch in x + y + z) / max(len(x + y + z), 1) for x, y, z in zip(a, b, c)]


def build(tiny_dir, **kwargs):
    cfg = MAGRPOConfig(num_train_epochs=1, num_generations=2, max_new_tokens=4, temperature=1.0, top_p=1.0,
                       rollout_buffer_size=2, agent_learning_rate=1e-2, eval_interval=0, verbose=False,
                       peft_config=LORA, **kwargs)
    return MAGRPO(agent_model=tiny_dir, num_agents=3, reward_func=spaces, train_dataset=data, args=cfg)


def test_three_agents_share_one_frozen_base_and_train_their_own_adapters(tiny_dir):
    learner = build(tiny_dir)
    bases = {id(a.peft) for a in learner.agents}
    assert len(bases) == 1  # one base model in memory
    base_params = [p for n, p in learner.agents[0].peft.named_parameters() if "lora_" not in n]
    adapters = [[p.detach().clone() for p in a.parameters()] for a in learner.agents]
    frozen = [p.detach().clone() for p in base_params]
    # Each agent's optimizer holds exactly its own adapter.
    for agent, opt in zip(learner.agents, learner.optimizers):
        held = {id(p) for g in opt.param_groups for p in g["params"]}
        assert held == {id(p) for p in agent.parameters()} and len(held) == 8  # 2 layers x 2 modules x (A, B)
    total = sum(p.numel() for p in learner.agents[0].peft.parameters())
    one_adapter = sum(p.numel() for p in learner.agents[0].parameters())
    assert total == sum(p.numel() for p in base_params) + 3 * one_adapter  # base + N adapters
    learner.learn()
    assert all(torch.equal(a, b) for a, b in zip(frozen, base_params))  # the base never moves
    for agent, before in zip(learner.agents, adapters):
        assert any(not torch.equal(p, q) for p, q in zip(agent.parameters(), before))


def test_save_adapters_or_merged_models(tiny_dir, tmp_path):
    from peft import PeftModel

    learner = build(tiny_dir)
    learner.learn()
    learner.save_model(str(tmp_path / "adapters"))
    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    loaded = PeftModel.from_pretrained(base, tmp_path / "adapters" / "agent_1")
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        expected = learner.agents[1](input_ids=ids).logits
        assert torch.allclose(loaded(input_ids=ids).logits, expected, atol=1e-5)
    merged = build(tiny_dir, merge_adapters_on_save=True)
    for mine, theirs in zip(merged.agents, learner.agents):  # same adapters as the trained learner
        for p, q in zip(mine.parameters(), theirs.parameters()):
            p.data.copy_(q.data)
    merged.save_model(str(tmp_path / "merged"))
    full = AutoModelForCausalLM.from_pretrained(tmp_path / "merged" / "agent_1")
    with torch.no_grad():
        assert torch.allclose(full(input_ids=ids).logits, expected, atol=1e-4)


def test_checkpoint_holds_only_adapters_and_resumes_exactly(tiny_dir, tmp_path):
    full = build(tiny_dir, **{})
    full.args.num_train_epochs = 2
    full.learn()
    first = build(tiny_dir)
    first.learn(checkpoint_dir=str(tmp_path / "ckpt"))
    resumed = build(tiny_dir)
    resumed.args.num_train_epochs = 2
    resumed.learn(checkpoint_dir=str(tmp_path / "ckpt"), resume_from_checkpoint=str(tmp_path / "ckpt" / "checkpoint-1"))
    for a, b in zip(full.agents, resumed.agents):
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    size = sum(f.stat().st_size for f in (tmp_path / "ckpt" / "checkpoint-1" / "models").iterdir())
    assert size < 200_000  # adapters only, not three copies of the 0.8 MB base


def test_each_agent_samples_with_its_own_adapter(tiny_dir):
    from learners.rollout.scoring import completion_logprobs

    learner = build(tiny_dir)
    with torch.no_grad():  # LoRA B starts at zero: give each adapter its own weights
        for i, agent in enumerate(learner.agents):
            for p in agent.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.5)
    torch.manual_seed(0)
    batch = learner.engine.generate(1, ["Question 0:", "Question 1:"], 3)
    assert batch.logprobs is not None  # our sampling loop, not the generate fallback
    with torch.no_grad():
        own = completion_logprobs(learner.agents[1], batch)
        other = completion_logprobs(learner.agents[0], batch)
    assert torch.allclose(batch.logprobs, own, atol=1e-4)
    assert not torch.allclose(batch.logprobs, other, atol=1e-2)


def _distinct_adapters(learner):
    with torch.no_grad():  # LoRA B starts at zero: give each adapter its own weights
        for i, agent in enumerate(learner.agents):
            for p in agent.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.5)


@pytest.mark.parametrize("num_agents", [2, 4])
def test_agents_on_one_base_sample_in_one_batch_each_row_through_its_own_adapter(tiny_dir, num_agents):
    from learners.rollout.scoring import completion_logprobs

    cfg = MAGRPOConfig(num_train_epochs=1, num_generations=3, max_new_tokens=6, temperature=1.0, top_p=1.0,
                       eval_interval=0, verbose=False, peft_config=LORA)
    learner = MAGRPO(agent_model=tiny_dir, num_agents=num_agents, reward_func=lambda *c: [0.0] * len(c[0]),
                     train_dataset=data, args=cfg)
    _distinct_adapters(learner)
    engine = learner.engine
    assert engine.shared_base is learner.agents[0].peft
    rows = []  # batch rows of every forward of the shared base
    hook = engine.shared_base.register_forward_pre_hook(
        lambda module, args, kwargs: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    prompts = [["Question 0:", "Say a longer question here:"][: 1 + a % 2] for a in range(num_agents)]
    torch.manual_seed(0)
    batches = engine.generate_turn(prompts, 3)
    hook.remove()
    total = sum(len(p) for p in prompts)
    assert rows[0] == total and set(rows[1:]) <= {3 * total}  # one prefill and one decode loop for ALL agents
    for a, batch in enumerate(batches):
        assert len(batch) == 3 * len(prompts[a])
        with torch.no_grad():
            own = completion_logprobs(learner.agents[a], batch, temperature=1.0)
        assert torch.allclose(batch.logprobs, own, atol=1e-5)  # each row scored under its own adapter
        with torch.no_grad():
            other = completion_logprobs(learner.agents[(a + 1) % num_agents], batch, temperature=1.0)
        assert not torch.allclose(batch.logprobs, other, atol=1e-2)
    # Greedy: the batched rows are exactly what each agent decodes on its own.
    together = engine.generate_turn(prompts, 1, greedy=True)
    for a in range(num_agents):
        alone = engine.generate(a, prompts[a], 1, greedy=True)
        assert together[a].completions == alone.completions
        assert torch.equal(together[a].completion_ids, alone.completion_ids)
        assert torch.equal(together[a].prompt_ids, alone.prompt_ids)  # no padding left from other agents


def test_batched_rollouts_leave_each_agents_update_its_own(tiny_dir):
    """The update stays per agent: agent a's loss on a batched rollout moves only adapter a's gradients, and
    equals the loss its own forward gives."""
    from learners.rollout.scoring import completion_logprobs

    learner = build(tiny_dir)
    _distinct_adapters(learner)
    batches = learner.engine.generate_turn([["Question 0:", "Question 1:"]] * 3, 2)
    for a, agent in enumerate(learner.agents):
        for other in learner.agents:
            other.zero_grad(set_to_none=True)
        (-completion_logprobs(agent, batches[a]).sum()).backward()
        for b, other in enumerate(learner.agents):
            got = [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in other.parameters()]
            assert all(got) if b == a else not any(got)
    assert build(tiny_dir, batch_adapters=False).engine.shared_base is None  # one call per agent, as before
    # And agent a's gradient equals that of the same adapter alone on its own copy of the base.
    alone = MAGRPO(agent_model=tiny_dir, num_agents=1, reward_func=lambda a: [0.0] * len(a), train_dataset=data,
                   args=MAGRPOConfig(num_generations=2, eval_interval=0, verbose=False, peft_config=LORA))
    agent = learner.agents[2]
    with torch.no_grad():
        for mine, theirs in zip(agent.parameters(), alone.agents[0].parameters()):
            theirs.copy_(mine)
    for model in (agent, alone.agents[0]):
        model.zero_grad(set_to_none=True)
        (-completion_logprobs(model, batches[2]).sum()).backward()
    for mine, theirs in zip(agent.parameters(), alone.agents[0].parameters()):
        assert torch.allclose(mine.grad, theirs.grad, rtol=1e-5, atol=1e-7)
