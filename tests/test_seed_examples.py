"""The seed document's MAGRPO examples, verbatim with our imports and local model dirs in place of hub ids."""

from __future__ import annotations

import shutil

import pytest
from datasets import Dataset

from learners.reinforce import MAGRPOConfig, MAGRPOTrainer


def reward_func(*agent_completions):
    """A reference-style joint reward: longer joint answers score higher (one value per joint action)."""
    return [sum(len(c) for c in joint) / 100 for joint in zip(*agent_completions)]


train_dataset = Dataset.from_list([{"prompt": f"Write a line about topic {i}."} for i in range(2)])


@pytest.fixture
def hub(tiny_dir, tiny_llama_dir, tmp_path):
    """Local stand-ins for the hub ids the seed uses."""
    names = {}
    for name, src in [("Qwen2.5-1.5B", tiny_dir), ("Qwen2.5-Coder-3B", tiny_dir), ("Qwen2.5-Coder-7B", tiny_llama_dir)]:
        names[name] = str(shutil.copytree(src, tmp_path / name))
    return names


def small(**kwargs):
    """The seed's configs, shrunk to a CPU-sized run (the named arguments are the seed's)."""
    return MAGRPOConfig(**kwargs, num_train_epochs=1, num_generations=2, max_new_tokens=4, eval_interval=0,
                        verbose=False)


def test_homogeneous_three_agents(hub):
    trainer = MAGRPOTrainer(
        agent_model=hub["Qwen2.5-1.5B"],
        agents=None,
        num_agents=3,
        reward_func=reward_func,
        train_dataset=train_dataset,
        args=small(num_agents=3, num_turns=1, temperature=0.7, top_p=0.9, top_k=None),
    )
    assert len(trainer.agents) == 3
    trainer.train()


def test_heterogeneous_agents(hub):
    trainer = MAGRPOTrainer(
        agent_model=None,
        agents=[hub["Qwen2.5-Coder-3B"], hub["Qwen2.5-Coder-7B"]],
        reward_func=reward_func,
        train_dataset=train_dataset,
        args=small(num_agents=2, num_turns=1, temperature=0.7, top_p=0.9, top_k=None),
    )
    trainer.train()


def test_save_and_continue_from_saved_agents(hub, tmp_path):
    trainer = MAGRPOTrainer(agent_model=hub["Qwen2.5-1.5B"], num_agents=2, reward_func=reward_func,
                            train_dataset=train_dataset, args=small(num_agents=2, num_turns=1))
    trainer.train()
    trainer.save_model(str(tmp_path / "saved-models/run-1"))

    continued_trainer = MAGRPOTrainer(
        agents=[
            str(tmp_path / "saved-models/run-1/agent_0"),
            str(tmp_path / "saved-models/run-1/agent_1"),
        ],
        num_agents=2,
        reward_func=reward_func,
        train_dataset=train_dataset,
        args=MAGRPOConfig(
            num_agents=2,
            num_turns=1,
            num_train_epochs=3,
            agent_learning_rate=5e-6,
            temperature=0.7,
            top_p=0.9,
            top_k=None,
            max_new_tokens=4,
            eval_interval=0,
            verbose=False,
        ),
    )
    continued_trainer.train()
    continued_trainer.save_model(str(tmp_path / "saved-models/run-2"))
    assert continued_trainer.epoch == 3
    assert (tmp_path / "saved-models/run-2/agent_1/model.safetensors").exists()
