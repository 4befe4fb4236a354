"""MARLHF and MARLHFIter: pair selection and replay by hand, the reward model, errors, the seed's example."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM

import comlrl_env

from learners.actor_critic import IACConfig, MAACConfig
from learners.checkpoint import read_checkpoint_metadata
from learners.preference import (
    MARLHF,
    MARLHFConfig,
    MARLHFIterConfig,
    MARLHFIterTrainer,
    MARLHFTrainer,
    replay_weights,
    select_pairs,
)
from learners.reinforce import MAGRPOConfig
from rewards.models import RewardModel, bradley_terry_loss, joint_text


def longer(first, second):
    """Task reward: longer joint answers are better (the planted preference)."""
    return [(len(a) + len(b)) / 100 for a, b in zip(first, second)]


train_dataset = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(4)])
SMALL = dict(num_train_epochs=1, max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None, rollout_buffer_size=4,
             preference_num_candidates=4, eval_interval=0, verbose=False)


# ----- pure functions --------------------------------------------------------------------------


@pytest.mark.parametrize("rewards, k, selection, expected", [
    ([1.0, 0.0, 1.0], None, "all", [(0, 1), (2, 1)]),  # ties (0 vs 2) dropped, index order
    ([0.0, 3.0, 1.0], None, "reward_gap", [(1, 0), (1, 2), (2, 0)]),  # gaps 3, 2, 1
    ([0.0, 3.0, 1.0], 2, "reward_gap", [(1, 0), (1, 2)]),  # truncated after sorting
    ([2.0, 2.0], None, "all", []),  # all tied: no pair
])
def test_select_pairs(rewards, k, selection, expected):
    assert select_pairs(rewards, k, selection) == expected


def test_random_selection_is_a_seeded_permutation_of_all_pairs():
    rewards = [0.0, 1.0, 2.0, 3.0]
    a = select_pairs(rewards, None, "random", torch.Generator().manual_seed(0))
    b = select_pairs(rewards, None, "random", torch.Generator().manual_seed(0))
    assert a == b and sorted(a) == sorted(select_pairs(rewards, None, "all"))


@pytest.mark.parametrize("sizes, mode, kwargs, expected", [
    ([2, 2, 2], "current", {}, [0.0, 0.0, 1.0]),  # only the newest shard
    ([2, 2, 2], "nearest_k", {"k": 2}, [0.0, 0.5, 0.5]),  # the newest two, equally
    ([2, 2, 2], "all_history", {}, [1 / 3, 1 / 3, 1 / 3]),
    ([2, 2, 2], "lambda_decay", {"lam": 0.5}, [0.25 / 1.75, 0.5 / 1.75, 1 / 1.75]),  # (1-l) l^age, ages 2, 1, 0
    ([2, 2, 2], "lambda_decay", {"lam": 1.0}, [1 / 3, 1 / 3, 1 / 3]),  # lambda 1: uniform
    # Empty shards weigh nothing; nearest_k takes the newest k non-empty ones (as the reference does).
    ([5, 3, 0], "nearest_k", {"k": 1}, [0.0, 1.0, 0.0]),  # counting the empty newest shard gave no pairs
    ([5, 0, 3, 0], "nearest_k", {"k": 2}, [0.5, 0.0, 0.5, 0.0]),
    ([5, 0, 3], "all_history", {}, [0.5, 0.0, 0.5]),
    ([4, 4, 0], "lambda_decay", {"lam": 0.5}, [0.25 / 0.75, 0.5 / 0.75, 0.0]),  # the empty shard keeps its age
    ([2, 0], "current", {}, [0.0, 0.0]),  # nothing to replay
])
def test_replay_weights(sizes, mode, kwargs, expected):
    assert replay_weights(sizes, mode, **kwargs) == pytest.approx(expected)


def test_bradley_terry_loss_by_hand():
    loss = bradley_terry_loss(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]))
    expected = -(torch.log(torch.sigmoid(torch.tensor(1.0))) + torch.log(torch.tensor(0.5))) / 2
    assert loss.item() == pytest.approx(expected.item())


# ----- the reward model -------------------------------------------------------------------------


def test_reward_model_learns_a_planted_preference_and_reloads(tiny_dir, tmp_path):
    """Longer joint answers are preferred: held-out accuracy must be high after a short training."""
    rm = RewardModel.from_pretrained(tiny_dir)
    gen = torch.Generator().manual_seed(0)
    words = ["alpha", "beta", "gamma", "delta", "omega"]

    def text(n):
        return " ".join(words[int(i)] for i in torch.randint(0, 5, (n,), generator=gen))

    pairs = [(text(int(torch.randint(6, 12, (1,), generator=gen))), text(int(torch.randint(1, 4, (1,), generator=gen))))
             for _ in range(80)]
    train, held = pairs[:60], pairs[60:]
    opt = torch.optim.AdamW(rm.parameters(), lr=3e-3)
    for _ in range(4):
        for i in range(0, len(train), 10):
            batch = train[i:i + 10]
            s = rm([w for w, _ in batch] + [l for _, l in batch])
            loss = bradley_terry_loss(s[:10], s[10:])
            opt.zero_grad()
            loss.backward()
            opt.step()
    accuracy = (rm.score([w for w, _ in held]) > rm.score([l for _, l in held])).float().mean().item()
    assert accuracy >= 0.9
    rm.save_pretrained(str(tmp_path / "rm"))
    again = RewardModel.from_pretrained(tmp_path / "rm")
    assert torch.allclose(again.score(["alpha beta"]), rm.score(["alpha beta"]), atol=1e-6)
    AutoModelForCausalLM.from_pretrained(tmp_path / "rm")  # the backbone dir is a plain causal LM


def test_reward_model_truncation_keeps_the_answers(tiny_dir):
    """With `reward_max_length` it cut from the right: a good and an empty answer kept the same text and score.
    (How each block keeps its share, and the shortest length allowed: tests/test_preference_measured.py.)"""
    rm = RewardModel.from_pretrained(tiny_dir, max_length=24)
    assert rm.tokenizer.truncation_side == "right"  # the tokenizer's setting does not decide
    state = "[agent_0]\n" + "a long observation " * 40
    good, empty = joint_text(state, ["The answer is 42.", "Yes"]), joint_text(state, ["", ""])
    ids, mask = rm.encode([good, empty, "short"])
    assert ids.shape[1] == 24 and mask[:2].all()
    assert ids[0].tolist() != ids[1].tolist() and "42" in rm.tokenizer.decode(ids[0])
    short = rm.tokenizer("short")["input_ids"]
    assert ids[2, -len(short):].tolist() == short and mask[2].sum() == len(short)  # left padding
    scores = rm.score([good, empty])
    assert scores[0] != scores[1]


def test_frozen_backbone_trains_only_the_head(tiny_dir):
    rm = RewardModel.from_pretrained(tiny_dir, freeze_backbone=True)
    before = [p.detach().clone() for p in rm.backbone.parameters()]
    head = rm.reward_head.weight.detach().clone()
    opt = torch.optim.AdamW([p for p in rm.parameters() if p.requires_grad], lr=1e-2)
    loss = bradley_terry_loss(*rm(["a long answer here", "no"]).split(1))
    loss.backward()
    opt.step()
    assert all(torch.equal(a, b) for a, b in zip(before, rm.backbone.parameters()))
    assert not torch.equal(head, rm.reward_head.weight)


# ----- configs and construction -----------------------------------------------------------------


@pytest.mark.parametrize("kwargs, match", [
    (dict(rl_algorithm="ppo"), "rl_algorithm must be one of"),
    (dict(num_turns=2), "num_turns must be 1"),
    (dict(pair_selection="best"), "pair_selection must be one of"),
    (dict(pair_selection="all"), "preference_pairs_per_sample=None"),
    (dict(preference_num_candidates=1), "preference_num_candidates must be >= 2"),
    (dict(reward_learning_rate=0), "reward_learning_rate must be > 0"),
    (dict(num_generations=1), "num_generations must be >= 2"),
    (dict(collaboration_mode="centralized"), "collaboration_mode"),
])
def test_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MARLHFConfig(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(preference_replay_mode="nearest_k"), "preference_replay_k >= 1"),
    (dict(preference_replay_mode="lambda_decay"), "preference_replay_lambda"),
    (dict(comparator_policy="model"), "comparator_model_name or comparator_agents"),
    (dict(comparator_model_name="x"), "only apply to comparator_policy='model'"),
    (dict(preference_scoring_reward="oracle2"), "preference_scoring_reward"),
    (dict(num_iterations=0), "num_iterations must be >= 1"),
])
def test_iter_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MARLHFIterConfig(**kwargs)


def test_ac_backends_allow_one_generation_and_aliases_resolve():
    assert MARLHFConfig(rl_algorithm="iac", num_generations=1).policy_config()[1].num_generations == 1
    assert MARLHFConfig(rl_algorithm="marloo").policy_config()[1].advantage_mode == "rloo"
    cfg = MARLHFIterConfig(preference_replay_mode="td-lambda", preference_replay_lambda=0.5, comparator_policy="copy")
    assert (cfg.preference_replay_mode, cfg.comparator_policy) == ("lambda_decay", "current_copy")


def test_reward_model_name_is_required_for_model_objects(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    model.name_or_path = ""
    model.config._name_or_path = ""
    with pytest.raises(ValueError, match="reward_model_name is required"):
        MARLHFTrainer(agents=[model, model], tokenizer=None, reward_func=longer, train_dataset=train_dataset,
                      args=MARLHFConfig(**SMALL))


def guess_number(turns):
    """A factory of the GuessNumber env with `turns` turns."""
    return lambda: comlrl_env.make("coop/GuessNumber-v1", num_turns=turns)


@pytest.mark.parametrize("env, turns", [
    (comlrl_env.make("coop/GuessNumber-v1", num_turns=2), 2),  # an instance
    ("coop/GuessNumber-v1", 4),  # an id whose env plays 4 turns by default
    (guess_number(3), 3),  # a factory
], ids=["instance", "id", "factory"])
def test_an_env_of_several_turns_is_refused_before_any_model_loads(tiny_dir, env, turns, no_model_loads):
    """The config's num_turns=1 let it through: the run failed after its first preference stage, telling the
    user to set num_turns=1, which they had."""
    with pytest.raises(ValueError, match=rf"MARLHFIter trains against a reward model that scores single-turn .* "
                                         rf"plays up to {turns} turns \(env.num_turns={turns}\)\. Use an env with "
                                         r"one turn \(comlrl_env.make\(id, num_turns=1\).*MAGRPO, IAC or MAAC"):
        MARLHFIterTrainer(env=env, agent_model=tiny_dir, num_agents=2, args=MARLHFIterConfig(**SMALL))


def test_a_one_turn_env_is_built_once_and_handed_to_the_policy_learner(tiny_dir):
    calls = []

    def factory():
        calls.append(1)
        return guess_number(1)()

    learner = MARLHF(env=factory, agent_model=tiny_dir, num_agents=2, args=MARLHFConfig(**SMALL))
    assert calls == [1] and learner.env.num_turns == 1 and learner.policy.eval_env is learner.env


def test_device_fallback_is_the_learners_device(tiny_dir):
    learner = MARLHFTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                            args=MARLHFConfig(**SMALL))
    assert learner.reward_device == learner.policy.devices[0] == torch.device("cpu")


# ----- whole runs --------------------------------------------------------------------------------


@pytest.fixture
def hub(tiny_dir, tiny_dir_b, tmp_path):
    return {"Qwen2.5-Coder-3B": str(shutil.copytree(tiny_dir, tmp_path / "Qwen2.5-Coder-3B")),
            "Qwen2.5-Coder-7B": str(shutil.copytree(tiny_dir_b, tmp_path / "Qwen2.5-Coder-7B"))}


def test_seed_marlhf_example_trains_and_exports_the_reward_model(hub, tmp_path):
    trainer = MARLHFTrainer(
        agent_model=hub["Qwen2.5-Coder-3B"],
        num_agents=2,
        reward_func=longer,
        train_dataset=train_dataset,
        args=MARLHFConfig(
            num_agents=2,
            num_turns=1,
            reward_model_name=hub["Qwen2.5-Coder-7B"],
            reward_model_device="cpu",
            reward_learning_rate=1e-3,
            reward_num_train_epochs=2,
            **SMALL,
        ),
    )
    before = [p.detach().clone() for p in trainer.agents[0].parameters()]
    metrics = trainer.train()
    assert metrics["preference/current_pairs"] > 0
    assert "train/task_reward_mean" in metrics  # the task reward is still reported while training on the RM
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.agents[0].parameters()))
    assert not any(p.requires_grad for p in trainer.reward_model.parameters())  # frozen for the policy phase
    trainer.save_model(str(tmp_path / "out"))
    assert (tmp_path / "out" / "reward_model" / "reward_head.pt").exists()
    reloaded = RewardModel.from_pretrained(tmp_path / "out" / "reward_model")
    assert torch.allclose(reloaded.score(["x y"]), trainer.reward_model.score(["x y"]), atol=1e-6)
    evaluation = trainer.evaluate(num_eval_samples=2)
    assert "eval/reward_mean" in evaluation


def test_preference_metrics_reach_metrics_jsonl(tiny_dir, tmp_path):
    """The stage logged while the policy learner's logger was closed: its metrics were only in the returned dict."""
    out = tmp_path / "run"
    learner = MARLHF(train_dataset=train_dataset, reward_func=longer, agent_model=tiny_dir, num_agents=2,
                     args=MARLHFConfig(**SMALL, output_dir=str(out)))
    returned = learner.learn()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    stage = [r for r in rows if any(k.startswith("preference/") for k in r)]
    assert len(stage) == 1 and stage[0]["preference/current_pairs"] == returned["preference/current_pairs"] > 0
    assert stage[0]["preference/iteration"] == 0.0 and "preference/reward_model_loss" in stage[0]
    assert rows.index(stage[0]) == 0 and any("train/reward_mean" in r for r in rows[1:])  # then the policy phase
    assert {r["run_id"] for r in rows} == {learner.policy.run_id}
    assert learner.policy.logger.run is None and learner.policy.logger.writer is None  # closed after learn()


def test_every_iteration_logs_to_one_wandb_run(tiny_dir, tmp_path):
    """Each policy phase opened and finished its own wandb run, and the stages logged to none."""
    pytest.importorskip("wandb")
    trainer = MARLHFIterTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                                wandb_config={"mode": "offline", "dir": str(tmp_path / "wandb"), "project": "t"},
                                args=MARLHFIterConfig(num_iterations=2, **SMALL))
    trainer.learn(checkpoint_dir=str(tmp_path / "ck"))
    saved = sorted((tmp_path / "ck").iterdir())
    assert len(saved) == 4  # after each stage and each policy phase
    assert len({read_checkpoint_metadata(p)["wandb"]["id"] for p in saved}) == 1


@pytest.mark.parametrize("backend", ["iac", "maac"])
def test_actor_critic_backends(tiny_dir, backend):
    trainer = MARLHFTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                            args=MARLHFConfig(rl_algorithm=backend, num_generations=2, **SMALL))
    trainer.train()
    assert len(trainer.critics) == (2 if backend == "iac" else 1)


def test_two_iterations_with_a_comparator_replay_and_pair_files(tiny_dir, tmp_path):
    replay_dir = tmp_path / "replay"
    replay_dir.mkdir()
    (replay_dir / "old.json").write_text("{}")  # an earlier run's file: must survive
    cfg = MARLHFIterConfig(num_iterations=2, comparator_policy="current_copy", preference_replay_mode="all_history",
                           preference_scoring_reward="reward_model", preference_replay_dir=str(replay_dir),
                           reward_learning_rate=1e-3, **{**SMALL, "num_train_epochs": 1})
    trainer = MARLHFIterTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                                args=cfg)
    starts, ends = [], []  # the reward model's weights when each iteration's training starts and ends
    original = trainer.train_reward_model

    def train_reward_model(pairs, heldout):
        starts.append({k: v.detach().clone() for k, v in trainer.reward_model.state_dict().items()})
        metrics = original(pairs, heldout)
        ends.append({k: v.detach().clone() for k, v in trainer.reward_model.state_dict().items()})
        return metrics

    trainer.train_reward_model = train_reward_model
    metrics = trainer.train()
    assert trainer.iteration == 2 and trainer.policy.epoch == 2  # one policy epoch per iteration
    # Every iteration re-loads the reward model from its source: its backbone starts at the source's
    # weights, not at the previous iteration's trained ones (no warm start).
    source = {f"backbone.{k}": v for k, v in AutoModelForCausalLM.from_pretrained(tiny_dir).state_dict().items()}
    for start in starts:
        assert set(source) <= set(start) and all(torch.equal(start[k], v) for k, v in source.items())
    assert len(starts) == 2 and any(not torch.equal(starts[1][k], ends[0][k]) for k in source)
    assert metrics["preference/total_pairs"] >= metrics["preference/current_pairs"]
    files = sorted(p.name for p in next(replay_dir.glob("resume-*")).iterdir())
    assert files == ["iteration_0000.json", "iteration_0001.json"] and (replay_dir / "old.json").exists()
    record = json.loads(next(replay_dir.glob("resume-*/iteration_0000.json")).read_text())
    assert record["num_pairs"] == len(record["pairs"]) and set(record["pairs"][0]) >= {"winner", "loser"}


class Switchable:
    """`longer`, or a tie between every candidate once `tie` is set."""

    def __init__(self):
        self.tie = False

    def __call__(self, first, second):
        return [0.0] * len(first) if self.tie else longer(first, second)


def _agent_weights(trainer):
    return [{k: v.detach().clone() for k, v in a.state_dict().items()} for a in trainer.agents]


def test_a_stage_without_pairs_trains_no_reward_model_and_skips_the_policy_phase(tiny_dir):
    """It used to train the policy against a freshly initialized head (all 26 agent tensors changed)."""
    reward = Switchable()
    reward.tie = True
    trainer = MARLHFTrainer(agent_model=tiny_dir, num_agents=2, reward_func=reward, train_dataset=train_dataset,
                            args=MARLHFConfig(num_generations=2, agent_learning_rate=1e-2, **SMALL))
    before = _agent_weights(trainer)
    with pytest.warns(UserWarning, match="no preference pairs.*no reward model exists yet, so this iteration's "
                                         "policy phase is skipped"):
        metrics = trainer.train()
    assert metrics["preference/stage_without_pairs"] == 1.0 and metrics["preference/train_pairs"] == 0.0
    assert "preference/reward_model_loss" not in metrics  # nothing was trained (it used to log NaN)
    assert trainer.reward_model is None and trainer.policy.epoch == 0
    assert "reward_model" not in trainer.policy.checkpoint_modules()
    for old, new in zip(before, _agent_weights(trainer)):
        assert all(torch.equal(old[k], new[k]) for k in old)


def test_a_stage_without_pairs_keeps_the_previous_reward_model(tiny_dir):
    reward = Switchable()
    trainer = MARLHFIterTrainer(agent_model=tiny_dir, num_agents=2, reward_func=reward, train_dataset=train_dataset,
                                args=MARLHFIterConfig(num_iterations=2, **SMALL))
    first = trainer.preference_stage()
    trained = trainer.reward_model
    assert first["preference/stage_without_pairs"] == 0.0 and trained is not None
    head = trained.reward_head.weight.detach().clone()
    trainer.iteration, reward.tie = 1, True
    with pytest.warns(UserWarning, match="the previous iteration's reward model stays in use"):
        second = trainer.preference_stage()
    assert second["preference/stage_without_pairs"] == 1.0 and second["preference/current_pairs"] == 0.0
    assert trainer.reward_model is trained and trainer.policy.checkpoint_modules()["reward_model"] is trained
    assert torch.equal(trained.reward_head.weight, head)


class LearningRates:
    """Records every optimizer's learning rate after each rollout's scheduler step."""

    def __init__(self):
        self.seen = []

    def on_step_end(self, learner, metrics):
        self.seen.append([o.param_groups[0]["lr"] for o in learner.checkpoint_optimizers()[0]])


def test_lr_schedules_span_every_iteration_also_after_a_resume(tiny_dir, tmp_path):
    """Each schedule was fixed to one iteration's length: 1e-3, 5e-4, 0, 0, 0, 0 per policy rollout."""
    def build(recorder):
        cfg = MARLHFIterConfig(num_iterations=3, rl_algorithm="iac", num_generations=2, lr_scheduler_type="linear",
                               agent_learning_rate=1e-3, critic_learning_rate=1e-3,
                               **{**SMALL, "rollout_buffer_size": 2})  # 2 policy rollouts per iteration
        return MARLHFIterTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                                 callbacks=[recorder], args=cfg)

    full = LearningRates()
    build(full).learn(checkpoint_dir=str(tmp_path / "full"))
    assert len(full.seen) == 6 and len(full.seen[0]) == 4  # 2 agent and 2 critic optimizers
    expected = [1e-3 * (1 - step / 6) for step in range(1, 7)]  # linear decay over all 6 rollouts
    for lrs, want in zip(full.seen, expected):
        assert lrs == pytest.approx([want] * 4, abs=1e-12)
    # Resumed after the second iteration's preference stage (checkpoint-3), the schedule continues.
    resumed = LearningRates()
    build(resumed).learn(checkpoint_dir=str(tmp_path / "full"),
                         resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"))
    assert sum(resumed.seen, []) == pytest.approx(sum(full.seen[2:], []), abs=1e-12)


def test_resume_from_a_preference_stage_or_a_policy_epoch_is_bit_identical(tiny_dir, tmp_path):
    def build():
        cfg = MARLHFIterConfig(num_iterations=2, comparator_policy="current_copy", preference_replay_mode="all_history",
                               reward_learning_rate=1e-3, reward_normalization=True, **SMALL)
        return MARLHFIterTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                                 args=cfg)

    full = build()
    full.learn(checkpoint_dir=str(tmp_path / "full"))
    # Per iteration: a checkpoint after the preference stage, then one at the end of its policy epoch.
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == [f"checkpoint-{i}" for i in (1, 2, 3, 4)]
    for resume_at in ("checkpoint-2", "checkpoint-3"):
        resumed = build()
        resumed.learn(checkpoint_dir=str(tmp_path / "full"), resume_from_checkpoint=str(tmp_path / "full" / resume_at))
        assert resumed.iteration == 2 and len(resumed.shards) == 2
        for name, module in full.policy.checkpoint_modules().items():
            other = resumed.policy.checkpoint_modules()[name].state_dict()
            for key, value in module.state_dict().items():
                assert torch.equal(value, other[key]), (resume_at, name, key)


def test_the_backend_gets_its_own_defaults_nested_or_flat():
    """With rl_algorithm="iac" the backend used to get num_generations=4 and critic_learning_rate=None
    (MARLHF's re-declared defaults) where IACConfig has 1 and 5e-6."""
    iac = MARLHFConfig(rl_algorithm="iac", max_new_tokens=8).policy_args
    assert isinstance(iac, IACConfig) and (iac.num_generations, iac.critic_learning_rate) == (1, 5e-6)
    assert iac.max_new_tokens == 8  # shared fields come from the MARLHF config
    nested = MARLHFConfig(rl_algorithm="maac", policy_args=MAACConfig(critic_max_length=32, num_generations=2))
    flat = MARLHFConfig(rl_algorithm="maac", critic_max_length=32, num_generations=2)  # the reference's spelling
    assert nested.policy_args == flat.policy_args and flat.policy_args.critic_max_length == 32
    with pytest.raises(ValueError, match=r"\['critic_max_length'\] do not apply to rl_algorithm='iac'"):
        MARLHFConfig(rl_algorithm="iac", critic_max_length=32)
    with pytest.raises(TypeError, match="takes policy_args=IACConfig"):
        MARLHFConfig(rl_algorithm="iac", policy_args=MAACConfig())
    with pytest.raises(ValueError, match=r"policy_args sets \['max_new_tokens'\].*set them on MARLHFConfig"):
        MARLHFConfig(policy_args=MAGRPOConfig(max_new_tokens=8))
