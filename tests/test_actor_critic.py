"""IAC and MAAC: GAE and value loss by hand, constructor rules, heads, the seed's restore code, learning."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from learners.actor_critic import (
    IACConfig,
    IACTrainer,
    MAACConfig,
    MAACTrainer,
    ValueHead,
    gae_advantages,
    normalize_per_turn,
    value_loss,
)

FAST = dict(num_train_epochs=1, num_turns=1, max_new_tokens=4, temperature=1.0, top_p=1.0, eval_interval=0,
            verbose=False, rollout_buffer_size=2)


def reward_func(*agent_completions):
    return [sum(ch.isspace() for c in joint for ch in c) / max(sum(len(c) for c in joint), 1)
            for joint in zip(*agent_completions)]


train_dataset = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(2)])


# ----- GAE and losses by hand ---------------------------------------------------------------


def test_gae_on_a_two_turn_episode():
    # One episode: row 0 (turn 0) -> row 1 (turn 1) -> end. r = [1, 2], V = [0.5, 1.0], discount 0.9.
    rewards, values = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, 1.0]])
    nxt, turn = torch.tensor([1, -1]), torch.tensor([0, 1])
    adv, targets = gae_advantages(rewards, values, nxt, turn, discount=0.9, lam=0.5)
    # delta = [1 + 0.9 * 1.0 - 0.5, 2 - 1.0] = [1.4, 1.0]; A = [1.4 + 0.9 * 0.5 * 1.0, 1.0] = [1.85, 1.0]
    assert torch.allclose(adv, torch.tensor([[1.85, 1.0]]))
    assert torch.allclose(targets, torch.tensor([[2.35, 2.0]]))  # A + V
    # lambda = 0 is TD(0): targets r + discount * V(next) = [1.9, 2.0], as in the reference.
    adv0, targets0 = gae_advantages(rewards, values, nxt, turn, discount=0.9, lam=0.0)
    assert torch.allclose(targets0, torch.tensor([[1.9, 2.0]])) and torch.allclose(adv0, torch.tensor([[1.4, 1.0]]))
    # lambda = 1, discount 1: Monte-Carlo returns minus values: [3 - 0.5, 2 - 1].
    adv1, _ = gae_advantages(rewards, values, nxt, turn, discount=1.0, lam=1.0)
    assert torch.allclose(adv1, torch.tensor([[2.5, 1.0]]))


def test_gae_keeps_interleaved_episodes_apart():
    # Two episodes (rows 0->2 and 1->3) for two agents.
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    values = torch.zeros(2, 4)
    adv, _ = gae_advantages(rewards, values, torch.tensor([2, 3, -1, -1]), torch.tensor([0, 0, 1, 1]), 1.0, 1.0)
    assert adv.tolist() == [[2.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 1.0]]


def test_normalization_is_per_turn():
    adv = torch.tensor([[1.0, 3.0, 10.0, 10.0]])
    out = normalize_per_turn(adv, torch.tensor([0, 0, 1, 1]))
    assert out.tolist() == [[-1.0, 1.0, 0.0, 0.0]]


def test_value_loss_clipping():
    values, old, targets = torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([3.0])
    assert value_loss(values, old, targets, None).item() == pytest.approx(1.0)  # (3 - 2)^2
    # V_clip = 0 + clip(2, +-0.5) = 0.5 -> (3 - 0.5)^2 = 6.25 > 1: the pessimistic term wins.
    assert value_loss(values, old, targets, 0.5).item() == pytest.approx(6.25)


def test_value_head_shapes():
    assert len(ValueHead(8).net) == 1
    head = ValueHead(8, hidden_dim=4)
    assert [type(m).__name__ for m in head.net] == ["Linear", "Tanh", "Linear"]
    assert head(torch.zeros(3, 8)).shape == (3,)


# ----- constructor rules ------------------------------------------------------------------------


NO_MODEL = "/nonexistent/model"


@pytest.mark.parametrize("make, match", [
    (lambda: IACTrainer(agent_model=NO_MODEL, num_agents=2, reward_func=reward_func, train_dataset=train_dataset,
                        args=IACConfig(**FAST)), "Either critic_model or critics must be provided when use_separate_critic=True"),
    (lambda: IACTrainer(agent_model=NO_MODEL, num_agents=2, critic_model=NO_MODEL, reward_func=reward_func,
                        train_dataset=train_dataset, args=IACConfig(**FAST, use_separate_critic=False)),
     "critics can only be provided when use_separate_critic=True"),
    (lambda: IACTrainer(agent_model=NO_MODEL, num_agents=2, critics=[NO_MODEL], reward_func=reward_func,
                        train_dataset=train_dataset, args=IACConfig(**FAST)), "critics has 1 entries but num_critics=2"),
    (lambda: IACTrainer(agent_model=NO_MODEL, num_agents=2, critic_model="a", critics=["b", "b"], reward_func=reward_func,
                        train_dataset=train_dataset, args=IACConfig(**FAST)), "critic_model='a' conflicts with critics"),
    (lambda: MAACTrainer(agent_model=NO_MODEL, num_agents=2, reward_func=reward_func, train_dataset=train_dataset,
                         args=MAACConfig(**FAST)), "Either critic_model or critics must be provided for MAAC"),
    (lambda: MAACTrainer(agent_model=NO_MODEL, num_agents=2, critics=[NO_MODEL, NO_MODEL], reward_func=reward_func,
                         train_dataset=train_dataset, args=MAACConfig(**FAST)), r"critics length \(2\) must match 1 critic"),
    (lambda: IACConfig(critic_type="a"), "critic_type must be one of v, q, got 'a'"),
    (lambda: IACConfig(gae_lambda=2.0), "gae_lambda"),
    (lambda: MAACConfig(value_loss_coef=0), "value_loss_coef must be > 0"),
])
def test_constructor_errors_before_loading(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_reference_field_names_are_accepted():
    IACConfig(agent_learning_rate=5e-6, critic_learning_rate=None, rollout_buffer_size=8, train_batch_size=None,
              value_clip_range=0.2, value_loss_coef=0.6, advantage_normalization=True, max_new_tokens=8,
              temperature=0.6, top_p=0.6, top_k=None, num_train_epochs=40, use_separate_critic=True, critic_type="v",
              critic_value_head_hidden_dim=None, value_head_hidden_dim=None, num_agents=2, num_turns=2,
              parallel_training="none", agent_devices=None, critic_devices=None, external_prompt_passthrough=False,
              discount=1.0, num_generations=1, eval_interval=16, eval_num_samples=4, eval_batch_size=1,
              early_termination_threshold=-0.2, logging_steps=1, reference_kl_coef=0.1, reference_devices=None)
    MAACConfig(critic_learning_rate=5e-6, critic_type="q", value_loss_coef=0.6, num_generations=1)


# ----- the seed's examples, heads, save and restore ----------------------------------------------


@pytest.fixture
def hub(tiny_dir, tiny_dir_b, tmp_path):
    names = {}
    for name, src in [("Qwen2.5-Coder-3B", tiny_dir), ("Qwen2.5-Coder-1.5B", tiny_dir_b), ("Qwen2.5-Coder-7B", tiny_dir)]:
        names[name] = str(shutil.copytree(src, tmp_path / "hub" / name))
    return names


def test_seed_maac_example_and_value_head_restore(hub, tmp_path):
    trainer = MAACTrainer(
        agent_model=None,
        agents=[hub["Qwen2.5-Coder-3B"], hub["Qwen2.5-Coder-1.5B"]],
        tokenizer=[
            AutoTokenizer.from_pretrained(hub["Qwen2.5-Coder-3B"]),
            AutoTokenizer.from_pretrained(hub["Qwen2.5-Coder-1.5B"]),
        ],
        critic_model=hub["Qwen2.5-Coder-7B"],
        critics=None,
        reward_func=reward_func,
        train_dataset=train_dataset,
        args=MAACConfig(num_agents=2, num_turns=1, temperature=0.7, top_p=0.9, top_k=None, **_small()),
    )
    trainer.train()
    saved_dir = tmp_path / "saved-models" / "maac-run-1"
    trainer.save_model(str(saved_dir))
    assert (saved_dir / "critic" / "value_head.pt").exists() and (saved_dir / "agent_1" / "config.json").exists()
    AutoModelForCausalLM.from_pretrained(saved_dir / "critic")  # the critic backbone loads as a plain causal LM

    # The seed's restore code, verbatim apart from the dataset and reward.
    actor_dirs = [str(saved_dir / f"agent_{i}") for i in range(2)]
    continued_maac = MAACTrainer(
        agents=actor_dirs,
        tokenizer=[AutoTokenizer.from_pretrained(path) for path in actor_dirs],
        critic_model=str(saved_dir / "critic"),
        reward_func=reward_func,
        train_dataset=train_dataset,
        args=MAACConfig(num_agents=2, num_turns=1, num_train_epochs=3, **_small(epochs=False)),
    )
    continued_maac.critics[0].value_head.load_state_dict(
        torch.load(
            saved_dir / "critic" / "value_head.pt",
            map_location="cpu",
            weights_only=True,
        )
    )
    for p, q in zip(continued_maac.critics[0].value_head.parameters(), trainer.critics[0].value_head.parameters()):
        assert torch.equal(p, q)
    continued_maac.train()
    continued_maac.save_model(str(tmp_path / "saved-models" / "maac-run-2"))


@pytest.mark.parametrize("separate", [True, False])
def test_seed_iac_examples_save_and_restore_heads(hub, tmp_path, separate):
    trainer = IACTrainer(
        agent_model=None,
        agents=[hub["Qwen2.5-Coder-3B"], hub["Qwen2.5-Coder-7B"]],
        tokenizer=[
            AutoTokenizer.from_pretrained(hub["Qwen2.5-Coder-3B"]),
            AutoTokenizer.from_pretrained(hub["Qwen2.5-Coder-7B"]),
        ],
        critic_model=None,
        critics=[hub["Qwen2.5-Coder-3B"], hub["Qwen2.5-Coder-7B"]] if separate else None,
        reward_func=reward_func,
        train_dataset=train_dataset,
        args=IACConfig(
            num_agents=2,
            num_turns=1,
            use_separate_critic=separate,
            temperature=0.7,
            top_p=0.9,
            top_k=None,
            value_head_hidden_dim=None if separate else 16,
            critic_value_head_hidden_dim=8 if separate else None,
            **_small(),
        ),
    )
    assert (len(trainer.critics) == 2) == separate
    trainer.train()
    out = tmp_path / "iac"
    trainer.save_model(str(out))
    for i in range(2):
        if separate:
            head_file = out / f"agent_{i}" / "critic" / "value_head.pt"
            trained_head = trainer.critics[i].value_head
        else:
            head_file = out / f"agent_{i}" / "value_head.pt"
            trained_head = trainer.agents[i].value_head
        assert head_file.exists()
        # The backbone dir loads cleanly with the Auto classes (no value-head keys in it).
        model_dir = head_file.parent
        state = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
        assert not any(k.startswith("value_head") for k in state)
        restored = ValueHead(trained_head.net[0].in_features, 8 if separate else 16)
        restored.load_state_dict(torch.load(head_file, map_location="cpu", weights_only=True))
        assert all(torch.equal(p, q) for p, q in zip(restored.parameters(), trained_head.parameters()))
    # Continue from the saved dirs and restore the heads as the seed shows.
    actor_dirs = [str(out / f"agent_{i}") for i in range(2)]
    continued_iac = IACTrainer(
        agents=actor_dirs, tokenizer=[AutoTokenizer.from_pretrained(p) for p in actor_dirs],
        critics=[str(Path(p) / "critic") for p in actor_dirs] if separate else None,
        reward_func=reward_func, train_dataset=train_dataset,
        args=IACConfig(num_agents=2, num_turns=1, use_separate_critic=separate,
                       value_head_hidden_dim=None if separate else 16,
                       critic_value_head_hidden_dim=8 if separate else None, **_small()),
    )
    for i in range(2):
        target = continued_iac.critics[i].value_head if separate else continued_iac.agents[i].value_head
        file = Path(actor_dirs[i]) / ("critic" if separate else "") / "value_head.pt"
        target.load_state_dict(torch.load(file, map_location="cpu", weights_only=True))
    continued_iac.train()
    # trainer.agents[i] still generates like an HF model.
    tok = continued_iac.tokenizers[0]
    out_ids = continued_iac.agents[0].generate(**tok(["hi"], return_tensors="pt"), max_new_tokens=2,
                                               pad_token_id=tok.pad_token_id)
    assert out_ids.shape[1] >= 2


def _small(epochs: bool = True) -> dict:
    cfg = dict(max_new_tokens=4, eval_interval=0, verbose=False, rollout_buffer_size=2)
    if epochs:
        cfg["num_train_epochs"] = 1
    return cfg


def test_separate_critic_vocabulary_must_cover_the_actor(tiny_dir, tiny_llama_dir):
    with pytest.raises(ValueError, match="reads agent 0's token ids"):
        IACTrainer(agent_model=tiny_dir, num_agents=1, critic_model=tiny_llama_dir, reward_func=lambda c: [0.0] * len(c),
                   train_dataset=train_dataset, args=IACConfig(**FAST))


def test_one_critic_object_is_copied_per_agent(tiny_dir):
    critic = AutoModelForCausalLM.from_pretrained(tiny_dir)
    trainer = IACTrainer(agent_model=tiny_dir, num_agents=2, critic_model=critic, reward_func=reward_func,
                         train_dataset=train_dataset, args=IACConfig(**FAST))
    assert trainer.critics[0] is not trainer.critics[1]


# ----- learning and multi-turn ----------------------------------------------------------------


@pytest.mark.parametrize("learner", ["iac-shared", "iac-separate", "maac-v", "maac-q"])
def test_actor_critic_learners_raise_a_simple_reward(tiny_dir, learner):
    cfg = dict(num_train_epochs=20, num_generations=8, max_new_tokens=8, temperature=1.0, top_p=1.0,
               rollout_buffer_size=8, agent_learning_rate=1e-2, critic_learning_rate=1e-2, max_grad_norm=None,
               eval_interval=0, verbose=False)
    data = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(8)])
    if learner.startswith("iac"):
        separate = learner == "iac-separate"
        trainer = IACTrainer(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir if separate else None,
                             reward_func=reward_func, train_dataset=data, args=IACConfig(use_separate_critic=separate, **cfg))
    else:
        trainer = MAACTrainer(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, reward_func=reward_func,
                              train_dataset=data, args=MAACConfig(critic_type=learner[-1], **cfg))
    rewards, gaps = [], []

    class Record:
        def on_step_end(self, learner, metrics):
            rewards.append(metrics["train/reward_mean"])
            gaps.append(abs(metrics["train/critic_0/value_mean"] - metrics["train/critic_0/target_mean"]))

    trainer.callbacks.append(Record())
    trainer.train()
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.1, rewards
    # The critic follows the rising return: its error on the mean target shrinks from its untrained start.
    assert sum(gaps[-3:]) / 3 < sum(gaps[:3]) / 3, gaps


def test_multi_turn_actor_critic_uses_next_turn_values(tiny_dir, monkeypatch):
    """Each turn's target bootstraps from the critic's value of the same episode's next turn (GAE), and
    the last turn's target is its reward."""
    import learners.actor_critic as ac

    calls = []

    def recording_gae(rewards, values, next_index, turn, discount, lam):
        out = gae_advantages(rewards, values, next_index, turn, discount, lam)
        calls.append((rewards, values, next_index, turn, discount, lam, out))
        return out

    monkeypatch.setattr(ac, "gae_advantages", recording_gae)
    cfg = MAACConfig(num_train_epochs=1, num_turns=1, max_new_tokens=4, episodes_per_epoch=2, rollout_buffer_size=2,
                     num_generations=2, eval_interval=0, verbose=False, discount=0.9, gae_lambda=0.5, ppo_epochs=2,
                     train_batch_size=4)
    trainer = MAACTrainer(env="coop/GuessNumber-v1", agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, args=cfg)
    seen = []
    original = trainer.critic_values
    trainer.critic_values = lambda rollout: seen.append((rollout, original(rollout))) or seen[-1][1]
    trainer.learn()
    (rewards, values, nxt, turn, discount, lam, (adv, targets)), = calls
    (rollout, critic_values), = seen
    assert (discount, lam) == (0.9, 0.5) and values.shape == rewards.shape == (1, rollout.num_samples)
    assert values is critic_values  # the critic's values of every row's state, before the update
    linked = (nxt >= 0).nonzero().squeeze(1)
    assert len(linked) > 0  # GuessNumber episodes last several turns
    # next_index links a row to the same episode's following turn.
    assert torch.equal(turn[nxt[linked]], turn[linked] + 1) and torch.equal(rollout.task[nxt[linked]], rollout.task[linked])
    # Targets by hand, from the last turn back: y_t = r_t + 0.9 V_{t+1} + 0.9 * 0.5 * A_{t+1} (A = y - V).
    expected = rewards[0].clone()
    for t in sorted(turn.unique().tolist(), reverse=True):
        for row in (turn == t).nonzero().squeeze(1).tolist():
            n = int(nxt[row])
            if n >= 0:
                next_adv = expected[n] - values[0, n]
                expected[row] = rewards[0, row] + 0.9 * values[0, n] + 0.45 * next_adv
    assert torch.allclose(targets[0], expected, atol=1e-6)
    last = nxt < 0
    assert torch.allclose(targets[0, last], rewards[0, last], atol=1e-6)  # no bootstrap after an episode's end
    assert not torch.allclose(targets[0, linked], rewards[0, linked])  # the others do bootstrap


@pytest.mark.parametrize("variant", ["iac-separate", "iac-shared", "maac"])
def test_resume_is_bit_identical(tiny_dir, tmp_path, variant):
    """Two epochs straight == one epoch, a checkpoint, and a resumed learner (critics and heads included)."""

    def build(epochs):
        cfg = dict(num_train_epochs=epochs, num_generations=2, max_new_tokens=4, temperature=1.0, top_p=1.0,
                   rollout_buffer_size=2, train_batch_size=2, agent_learning_rate=1e-3, critic_learning_rate=1e-3,
                   eval_interval=0, verbose=False)
        if variant == "maac":
            return MAACTrainer(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, reward_func=reward_func,
                               train_dataset=train_dataset, args=MAACConfig(**cfg))
        separate = variant == "iac-separate"
        return IACTrainer(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir if separate else None,
                          reward_func=reward_func, train_dataset=train_dataset,
                          args=IACConfig(use_separate_critic=separate, **cfg))

    full = build(2)
    full.learn()
    first = build(1)
    first.learn(checkpoint_dir=str(tmp_path / "ckpt"))
    resumed = build(2)
    resumed.learn(checkpoint_dir=str(tmp_path / "ckpt"), resume_from_checkpoint=str(tmp_path / "ckpt" / "checkpoint-1"))
    for name, module in full.checkpoint_modules().items():
        other = resumed.checkpoint_modules()[name].state_dict()
        for key, value in module.state_dict().items():
            assert torch.equal(value, other[key]), (name, key)


# ----- the centralized critic's input ---------------------------------------------------------------


def test_maac_critic_reads_every_agents_observation_whatever_max_prompt_length(tiny_dir):
    """`max_prompt_length` (one agent's prompt limit) used to cut the joint text from the left: with prompts
    of 22 tokens and a limit of 32, two states that differed only in agent 0's observation got one value."""
    trainer = MAACTrainer(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, reward_func=reward_func,
                          train_dataset=train_dataset, args=MAACConfig(max_prompt_length=32, **FAST))
    tok = trainer.tokenizers[0]
    obs = "How many words does this short question have in it, counting every one?"
    states = [f"[agent_0]\n{first} {obs}\n\n[agent_1]\n{obs}" for first in ("Alpha", "Omega")]
    assert len(tok(obs)["input_ids"]) <= 32 < len(tok(states[0])["input_ids"])  # each prompt fits, the joint text not
    def value(state):  # one row at a time: a batch's rows may differ in the last bits
        with torch.no_grad():
            return float(trainer.joint_values([state])[0])

    assert abs(value(states[0]) - value(states[1])) > 1e-3  # seen: -0.0617 vs -0.0579
    # critic_max_length is the critic's own limit, applied explicitly: each block keeps its header and its end.
    trainer.args.critic_max_length = 12
    assert value(states[0]) == value(states[1])  # the difference lies before the last 12 tokens
    with pytest.raises(ValueError, match="critic_max_length must be >= 1 or None, got 0"):
        MAACConfig(critic_max_length=0)


def test_every_ppo_epoch_reshuffles_the_minibatches_with_a_seed(tiny_dir):
    """They reused one order for every pass over a rollout."""
    def minibatches():
        trainer = IACTrainer(agent_model=tiny_dir, num_agents=2, reward_func=reward_func,
                             train_dataset=train_dataset,
                             args=IACConfig(**{**FAST, "num_generations": 4}, use_separate_critic=False,
                                            train_batch_size=2, ppo_epochs=3))
        seen = []
        step = trainer.minibatch_step
        trainer.minibatch_step = lambda rollout, idx, *rest: seen.append(idx.tolist()) or step(rollout, idx, *rest)
        trainer.learn()  # one rollout: 2 task instances x 4 copies = 8 samples, 4 minibatches per pass
        return seen

    seen = minibatches()
    passes = [sum(seen[i:i + 4], []) for i in (0, 4, 8)]
    assert len(seen) == 12 and all(sorted(p) == list(range(8)) for p in passes)  # each pass covers every sample
    assert len({tuple(p) for p in passes}) == 3  # a fresh order every pass
    assert minibatches() == seen  # seeded: a rerun (or a resumed run) repeats it


@pytest.mark.parametrize("learner", ["iac", "maac"])
def test_reference_kl_penalizes_drift_from_a_frozen_copy(tiny_dir, learner):
    """The reference's IAC and MAAC accept reference_kl_*; ours used to refuse them."""
    cls, config = {"iac": (IACTrainer, IACConfig), "maac": (MAACTrainer, MAACConfig)}[learner]
    args = config(**{**FAST, "num_generations": 2, "num_train_epochs": 2}, reference_kl_enabled=True,
                  reference_kl_coef=0.5, agent_learning_rate=1e-2)
    trainer = cls(agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir, reward_func=reward_func,
                  train_dataset=train_dataset, args=args)
    reference = {k: v.clone() for k, v in trainer.reference_models[0].state_dict().items()}
    seen = []
    trainer.callbacks.append(type("Kl", (), {"on_step_end": lambda self, t, m: seen.append(m["train/agent_0/kl"])})())
    trainer.learn()
    assert len(seen) == 2 and seen[0] == pytest.approx(0.0, abs=1e-5) and seen[1] > 0  # identical, then drifted
    assert all(torch.equal(v, trainer.reference_models[0].state_dict()[k]) for k, v in reference.items())
    assert {"reference_0", "reference_1"} <= set(trainer.checkpoint_modules())
