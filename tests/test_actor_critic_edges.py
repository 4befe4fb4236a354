"""IAC and MAAC edge cases (issue 48): advantages normalized over the rows where an agent moved, a lone row,
MAAC's critic vocabulary, and settings that do less than their names."""

from __future__ import annotations

import pathlib
import types
import warnings

import pytest
import torch
from datasets import Dataset

import learners.actor_critic as ac
from learners.actor_critic import IACConfig, IACTrainer, MAACConfig, MAACTrainer, normalize_per_turn
from learners.reinforce import acting_advantages, group_relative_advantages

FAST = dict(num_train_epochs=1, num_turns=1, max_new_tokens=4, temperature=1.0, top_p=1.0, eval_interval=0,
            verbose=False)
train_dataset = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(2)])


def zero_reward(first, second):
    return [0.0] * len(first)


# ----- 1. normalization over the acting rows ----------------------------------------------------


def test_normalization_counts_only_the_rows_where_the_agent_moved():
    # Turn 1 has 8 rows; agent 0 moved at rows 1 and 5 only, agent 1 at the other six.
    adv = torch.tensor([[0.0, 2.0, 9.0, 9.0, 9.0, 4.0, 9.0, 9.0],
                        [0.0, 5.0, 1.0, 2.0, 3.0, 5.0, 4.0, 5.0]])
    turn = torch.ones(8, dtype=torch.long)
    acted = torch.zeros(2, 8, dtype=torch.bool)
    acted[0, [1, 5]] = True
    acted[1] = ~acted[0]
    out = normalize_per_turn(adv, turn, acted)
    # Agent 0 over its two rows: [2, 4] -> [-1, 1] (over all eight rows both were below the mean: both < 0).
    assert out[0, [1, 5]].tolist() == pytest.approx([-1.0, 1.0])
    # Agent 1 over its six rows [0, 1, 2, 3, 4, 5]: mean 2.5, population std sqrt(35/12).
    six = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    assert torch.allclose(out[1, acted[1]], (six - 2.5) / (35 / 12) ** 0.5, atol=1e-6)
    assert out[~acted].tolist() == [0.0] * 8  # waiting rows are not trained on: 0
    # The one rule MAGRPO uses, with the turn as the group and the advantage as the return.
    grouped = types.SimpleNamespace(group=turn, acted=acted)
    assert torch.equal(out, acting_advantages(adv, grouped, mode="raw"))


def test_the_learner_normalizes_over_the_rows_each_agent_moved(tiny_dir, monkeypatch):
    seen = {}
    real = ac.normalize_per_turn

    def spy(adv, turn, acted=None):
        seen["acted"] = acted
        seen["out"] = real(adv, turn, acted)
        return seen["out"]

    monkeypatch.setattr(ac, "normalize_per_turn", spy)
    pytest.importorskip("pyspiel")
    from comlrl_env import make

    game = make("openspiel/kuhn_poker-v0", invalid_action="random")  # episodes of 2 or 3 moves
    cfg = {k: v for k, v in FAST.items() if k != "num_turns"}
    learner = IACTrainer(env=game, agent_model=tiny_dir, num_agents=2,
                         args=IACConfig(**cfg, rollout_buffer_size=4, use_separate_critic=False))
    original = learner.collect
    rollouts = []
    learner.collect = lambda *a, **k: rollouts.append(original(*a, **k)) or rollouts[-1]
    learner.learn()
    rollout = rollouts[-1]
    assert rollout.acted is not None and seen["acted"] is rollout.acted  # kuhn_poker takes turns
    assert (seen["out"][~rollout.acted] == 0).all()


# ----- 2. a turn with one row ---------------------------------------------------------------------


def test_a_lone_row_normalizes_to_zero_as_the_formula_says():
    out = normalize_per_turn(torch.tensor([[1.0, 3.0, 7.5]]), torch.tensor([0, 0, 1]))
    assert out.tolist() == [[-1.0, 1.0, 0.0]]  # (7.5 - 7.5) / max(0, 1e-6)
    # MAGRPO's rule is the same: with normalization every mode gives a lone sample 0, "raw" too.
    for mode in ("mean", "raw", "max", "rloo"):
        adv = group_relative_advantages(torch.tensor([[2.0, 4.0, 5.0]]), torch.tensor([0, 0, 1]), mode=mode)
        assert adv.tolist() == [[-1.0, 1.0, 0.0]], mode


# ----- 3. MAAC's critic vocabulary ----------------------------------------------------------------


def test_maac_refuses_a_critic_that_cannot_read_the_agents_token_ids(tiny_dir, tiny_llama_dir):
    with pytest.raises(ValueError, match=r"MAAC's critic has a vocabulary of 1024 but reads the joint text tokenized "
                                         r"with agent 0's tokenizer \(2048 tokens\); use a critic with agent 0's"):
        MAACTrainer(agent_model=tiny_dir, num_agents=2, critic_model=tiny_llama_dir, reward_func=zero_reward,
                    train_dataset=train_dataset, args=MAACConfig(**FAST, rollout_buffer_size=2))


@pytest.mark.parametrize("learner", ["iac", "maac"])
def test_a_critic_with_a_larger_vocabulary_but_another_tokenizer_is_refused_naming_both(tiny_dir, tiny_llama_dir,
                                                                                       learner):
    """A 2048-token critic under 1024-token agents passed the size check and read the agents' ids as its own."""
    common = dict(agent_model=tiny_llama_dir, num_agents=2, critic_model=tiny_dir, reward_func=zero_reward,
                  train_dataset=train_dataset)
    with pytest.raises(ValueError, match=r"critic.* \(.*tiny-qwen2.*\) has a tokenizer of its own that differs from "
                                         r"agent 0's \(.*tiny-llama.*\): it would read"):
        if learner == "maac":
            MAACTrainer(**common, args=MAACConfig(**FAST, rollout_buffer_size=2))
        else:
            IACTrainer(**common, args=IACConfig(**FAST, rollout_buffer_size=2, use_separate_critic=True))


def test_maac_refuses_a_critic_max_length_that_cannot_hold_every_answer(tiny_dir):
    with pytest.raises(ValueError, match=r"critic_max_length=16 cannot hold every agent's answer header .* at least"):
        MAACTrainer(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, reward_func=zero_reward,
                    train_dataset=train_dataset, args=MAACConfig(**FAST, rollout_buffer_size=2, critic_max_length=16))


# ----- 4. settings that do less than their names ----------------------------------------------------


@pytest.mark.parametrize("config", [IACConfig, MAACConfig])
def test_one_row_per_agent_and_turn_is_refused_where_normalization_would_zero_every_advantage(config):
    with pytest.raises(ValueError, match=r"num_generations=1 and rollout_buffer_size=1 give each agent one row per "
                                         r"turn, .* exactly 0"):
        config(num_generations=1, rollout_buffer_size=1)
    config(num_generations=1, rollout_buffer_size=1, advantage_normalization=False)  # raw advantages: fine
    config(num_generations=2, rollout_buffer_size=1)


def test_critic_learning_rate_with_a_shared_head_warns():
    with pytest.warns(UserWarning, match="critic_learning_rate=0.001 is unused with use_separate_critic=False"):
        IACConfig(use_separate_critic=False, critic_learning_rate=1e-3)
    with pytest.warns(UserWarning, match="critic_learning_rate=5e-06 is unused"):  # set, though to the default
        IACConfig(use_separate_critic=False, critic_learning_rate=5e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        IACConfig(use_separate_critic=False)  # the default and None say nothing
        IACConfig(use_separate_critic=False, critic_learning_rate=None)
        IACConfig(use_separate_critic=True, critic_learning_rate=1e-3)


def test_the_design_doc_says_actor_critic_supports_reference_kl():
    IACConfig(reference_kl_enabled=True)
    MAACConfig(reference_kl_enabled=True)  # accepted; test_actor_critic checks that the penalty works
    text = (pathlib.Path(__file__).parent.parent / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    flat = " ".join(text.split())
    assert "reject `reference_kl_enabled" not in flat and "for the MAGRPO family only" not in flat
