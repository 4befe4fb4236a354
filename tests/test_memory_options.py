"""Options for large models, on a CPU: gradient checkpointing (same gradients, layers recomputed) and bf16 autocast."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from learners import IAC, MAGRPO, IACConfig, MAGRPOConfig
from learners.models.agents import enable_gradient_checkpointing, prepare_tokenizer
from learners.rollout import GenerationSettings, RolloutEngine
from learners.rollout.scoring import completion_logprobs

data = Dataset.from_list([{"prompt": "Question 1:"}, {"prompt": "Question 2:"}])
FAST = dict(num_train_epochs=1, num_generations=2, max_new_tokens=4, temperature=1.0, top_p=1.0,
            rollout_buffer_size=2, agent_learning_rate=1e-3, eval_interval=0, verbose=False)


def spaces(a, b):
    return [sum(ch.isspace() for ch in x + y) / max(len(x + y), 1) for x, y in zip(a, b)]


def grads(model, batch):
    model.zero_grad()
    (-completion_logprobs(model, batch).sum()).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_gradient_checkpointing_recomputes_layers_and_keeps_gradients(tiny_dir, monkeypatch):
    from transformers.models.qwen2 import modeling_qwen2

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    prepare_tokenizer(tok)
    batch = RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=6)).generate(0, ["a b", "def f():"], 2)
    plain = grads(model, batch)
    calls = []
    original = modeling_qwen2.Qwen2MLP.forward
    monkeypatch.setattr(modeling_qwen2.Qwen2MLP, "forward", lambda self, x: (calls.append(1), original(self, x))[1])
    enable_gradient_checkpointing(model)
    assert not model.model.layers[0].mlp.training  # dropout-bearing submodules stay in eval mode
    checkpointed = grads(model, batch)
    assert len(calls) == 4  # two layers: forward, then their recomputation in backward
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(plain, checkpointed))
    calls.clear()
    with torch.no_grad():
        completion_logprobs(model, batch)
    assert len(calls) == 2  # no recomputation without gradients (generation, old log-probs)


@pytest.mark.parametrize("learner", ["magrpo", "iac"])
def test_learners_train_the_same_with_gradient_checkpointing(tiny_dir, learner):
    def run(checkpointing):
        if learner == "magrpo":
            trainer = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data,
                             args=MAGRPOConfig(gradient_checkpointing=checkpointing, **FAST))
        else:
            trainer = IAC(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, reward_func=spaces,
                          train_dataset=data, args=IACConfig(gradient_checkpointing=checkpointing, **FAST))
        trainer.learn()
        return [p.detach().clone() for m in trainer.checkpoint_modules().values() for p in m.parameters()]

    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(run(False), run(True)))


def test_bf16_autocast_trains(tiny_dir):
    trainer = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=spaces, train_dataset=data,
                     args=MAGRPOConfig(mixed_precision="bf16", **FAST))
    before = [p.detach().clone() for p in trainer.agents[0].parameters()]
    metrics = trainer.learn()
    assert next(trainer.agents[0].parameters()).dtype == torch.float32  # weights stay fp32; compute is bf16
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.agents[0].parameters()))
    assert all(v == v for v in metrics.values())  # no NaN
    with pytest.raises(ValueError, match="mixed_precision must be None or 'bf16'"):
        MAGRPOConfig(mixed_precision="fp16")
