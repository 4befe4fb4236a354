"""Per-agent generation settings: `temperature`, `top_p`, `top_k`, `max_new_tokens`, `stop_strings` and
`use_chat_template` take one value for every agent or a list with one per agent, through sampling, scoring,
evaluation, saved models, the bench and checkpoints."""

from __future__ import annotations

import json
import os

import pytest
import torch
from datasets import Dataset

from learners import IAC, CheckpointError, IACConfig
from learners.cli import main as bench
from learners.loop.data import reset_roots
from learners.models.policy import AgentPolicy
from learners.reinforce import MAGRPO, MAGRPOConfig
from learners.rollout.scoring import completion_logprobs
from learners.rollout.settings import GenerationSettings, per_agent_values

NO_MODEL = "/nonexistent/model-dir"  # loading it would fail: the errors below must come first
FAST = dict(num_generations=2, top_p=1.0, top_k=None, eval_interval=0, verbose=False, rollout_buffer_size=2)


def space_reward(first, second):
    return [sum(ch.isspace() for ch in a + b) / max(len(a + b), 1) for a, b in zip(first, second)]


def dataset(n=2):
    return Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(n)])


def magrpo(tiny_dir, **cfg):
    return MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset(),
                  args=MAGRPOConfig(**{**FAST, "max_new_tokens": 4, **cfg}))


def rollout(learner):
    torch.manual_seed(0)
    return learner.engine.collect(reset_roots(learner.env, learner.epoch_order(learner.env, 0)), 4)


# ----- the two forms, and validation before any model loads -------------------------------------------


@pytest.mark.parametrize("value, per_agent", [
    (None, None),                         # no stop strings
    (["###"], None),                      # one list of strings: every agent stops at "###"
    ([], None),                           # an empty list: no stop strings for anyone
    ([["###"], None], [["###"], None]),   # lists or None: one per agent
    ([None, None], [None, None]),         # per agent, neither stops
])
def test_a_flat_list_of_stop_strings_is_for_every_agent_a_list_of_lists_is_per_agent(value, per_agent):
    assert per_agent_values("stop_strings", value) == per_agent


def test_for_agent_picks_each_agents_values_and_keeps_shared_ones():
    settings = GenerationSettings(temperature=(0.5, 2.0), max_new_tokens=[3, 9], top_k=None, stop_strings=["#"],
                                  use_chat_template=[False, True], logprob_temperature=[0.5, 2.0])
    assert settings.temperature == [0.5, 2.0]  # tuples become lists, as JSON gives them back
    one = settings.for_agent(1)
    assert (one.temperature, one.max_new_tokens, one.top_k, one.stop_strings, one.use_chat_template,
            one.logprob_temperature) == (2.0, 9, None, ["#"], True, 2.0)
    assert settings.for_agent(0).max_new_tokens == 3


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(temperature=[1.0, 0.0]), ValueError, r"temperature\[1\] must be > 0, got 0.0 .*eval_greedy"),
    (dict(top_p=[1.0, 1.5]), ValueError, r"top_p\[1\] must be in \(0, 1\], got 1.5"),
    (dict(top_k=[0, None]), ValueError, r"top_k\[0\] must be >= 1 or None, got 0"),
    (dict(max_new_tokens=[4, -1]), ValueError, r"max_new_tokens\[1\] must be >= 1, got -1"),
    (dict(use_chat_template=[True, "yes"]), TypeError, r"use_chat_template\[1\] must be True or False"),
    (dict(stop_strings=["#", ["!"]]), TypeError, "stop_strings mixes strings and lists"),
    (dict(stop_strings=[["#", 3], None]), TypeError, r"stop_strings\[0\] must be a list of strings or None"),
    (dict(temperature=[1.0, 1.0, 1.0], num_agents=2), ValueError,
     "temperature has 3 values for 2 agents; give one value or one per agent"),
])
def test_config_checks_every_agents_value(kwargs, error, match):
    with pytest.raises(error, match=match):
        MAGRPOConfig(**kwargs)


@pytest.mark.parametrize("field, values", [("temperature", [0.5, 1.0, 2.0]), ("max_new_tokens", [4]),
                                           ("stop_strings", [["#"], None, None])])
def test_a_wrong_number_of_values_fails_in_the_constructor_before_models_load(field, values):
    with pytest.raises(ValueError, match=f"{field} has {len(values)} values? for 2 agents"):
        MAGRPO(agent_model=NO_MODEL, num_agents=2, reward_func=space_reward, train_dataset=dataset(),
               args=MAGRPOConfig(**{field: values}))
    with pytest.raises(ValueError, match=f"{field} has {len(values)} values? for 2 agents"):
        AgentPolicy([NO_MODEL, NO_MODEL], **{field: values})


# ----- sampling and scoring ---------------------------------------------------------------------------


def test_per_agent_max_new_tokens_bounds_each_agents_completions(tiny_dir):
    learner = magrpo(tiny_dir, max_new_tokens=[2, 7], temperature=1.0)
    lengths = [samples.completion_mask.sum(1) for samples in rollout(learner).samples]
    assert int(lengths[0].max()) <= 2 and int(lengths[1].max()) <= 7
    assert int(lengths[1].max()) > 2  # agent 1 is not held to agent 0's bound


def test_each_agent_samples_and_is_scored_at_its_own_temperature(tiny_dir):
    """Two identical agents at temperatures 0.5 and 2.0: agent 1's kept log-probs are those of softmax(z / 2),
    not softmax(z / 0.5); agent 1 samples through `generate` (its stop strings), so the learner recomputes
    its old log-probs, at its own temperature too."""
    learner = magrpo(tiny_dir, temperature=[0.5, 2.0], max_new_tokens=6, stop_strings=[None, ["zzzz"]])
    assert learner.engine.shared_base is None
    out = rollout(learner)
    kept, recomputed = out.samples[0].logprobs, out.samples[1].logprobs
    assert kept is not None and recomputed is None  # lean sampling for agent 0, generate for agent 1
    with torch.no_grad():
        at = {(a, t): completion_logprobs(learner.agents[a], out.samples[a], t) for a in (0, 1) for t in (0.5, 2.0)}
    assert torch.allclose(kept, at[0, 0.5], atol=2e-4) and not torch.allclose(kept, at[0, 2.0], atol=1e-2)
    old = learner.old_logprobs(1, out)
    assert torch.allclose(old, at[1, 2.0], atol=2e-4) and not torch.allclose(old, at[1, 0.5], atol=1e-2)


def test_the_update_scores_each_agent_at_its_own_temperature(tiny_dir):
    """With a learning rate too small to move a float32 weight, the policy stays pi_old: every optimizer step's
    ratio is 1 (approx_kl 0) and the reference KL is 0, for each agent, only if each agent's tokens are scored
    at the temperature they were sampled at, in the sampling loop, the losses and the reference model."""
    learner = magrpo(tiny_dir, temperature=[0.5, 2.0], train_batch_size=1, agent_learning_rate=1e-30,
                     reference_kl_enabled=True, num_train_epochs=1)
    metrics = learner.learn()
    for a in (0, 1):
        assert metrics[f"train/agent_{a}/approx_kl"] == pytest.approx(0.0, abs=1e-5)
        assert metrics[f"train/agent_{a}/kl"] == pytest.approx(0.0, abs=1e-4)
    critic = IAC(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=dataset(),
                 args=IACConfig(**FAST, max_new_tokens=4, temperature=[0.5, 2.0], use_separate_critic=False,
                                ppo_epochs=2, agent_learning_rate=1e-30, num_train_epochs=1))
    metrics = critic.learn()
    for a in (0, 1):
        assert metrics[f"train/agent_{a}/approx_kl"] == pytest.approx(0.0, abs=1e-5)


def test_lora_agents_sample_in_one_batch_only_when_their_settings_are_equal(tiny_dir):
    pytest.importorskip("peft")
    lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0}
    same = magrpo(tiny_dir, peft_config=lora, temperature=[1.0, 1.0])
    assert same.engine.shared_base is same.agents[0].peft
    different = magrpo(tiny_dir, peft_config=lora, temperature=[0.5, 2.0], max_new_tokens=[2, 6])
    assert different.engine.shared_base is None  # each agent samples on its own, under its own settings
    lengths = [samples.completion_mask.sum(1) for samples in rollout(different).samples]
    assert int(lengths[0].max()) <= 2 < int(lengths[1].max()) <= 6


def test_per_agent_chat_template_renders_only_that_agents_prompts(tiny_dir):
    learner = magrpo(tiny_dir, use_chat_template=[False, True], max_new_tokens=2)
    samples = rollout(learner).samples
    prompts = [tok.decode(s.prompt_ids[0][s.prompt_mask[0].bool()]) for tok, s in zip(learner.tokenizers, samples)]
    assert "<|im_start|>" not in prompts[0]
    assert prompts[1] == learner.tokenizers[1].apply_chat_template(
        [{"role": "user", "content": prompts[0]}], tokenize=False, add_generation_prompt=True)


def test_evaluation_uses_each_agents_settings(tiny_dir):
    learner = magrpo(tiny_dir, max_new_tokens=[1, 5], temperature=1.0, eval_num_samples=2)
    longest = [0, 0]
    generate = learner.engine.generate

    def spy(agent, prompts, num_samples, greedy=False):
        batch = generate(agent, prompts, num_samples, greedy)
        longest[agent] = max(longest[agent], int(batch.completion_mask.sum(1).max()))
        return batch

    learner.engine.generate = spy
    for greedy in (False, True):
        longest[:] = [0, 0]
        learner.evaluate(greedy=greedy)
        assert longest[0] == 1 and 1 < longest[1] <= 5


# ----- saved models, the bench and checkpoints ----------------------------------------------------------


PER_AGENT = dict(temperature=[0.7, 1.3], top_p=[1.0, 0.9], top_k=[None, 20], max_new_tokens=[3, 5],
                 use_chat_template=[False, True], stop_strings=[None, ["\n"]])


def test_per_agent_settings_round_trip_through_save_model_and_the_bench(tiny_dir, tmp_path):
    learner = magrpo(tiny_dir, **PER_AGENT)
    out = tmp_path / "agents"
    learner.save_model(str(out))
    assert json.loads((out / "comlrl_env.json").read_text())["config"]["top_k"] == [None, 20]
    team = AgentPolicy.from_saved(str(out))
    for a in (0, 1):
        got = team.engine.agent_settings[a]
        assert all(getattr(got, k) == v[a] for k, v in PER_AGENT.items()), (a, got)
    assert AgentPolicy.from_saved(str(out), temperature=[0.5, 0.6]).engine.agent_settings[1].temperature == 0.6
    assert bench(["--env", "smoke/FormatAgreement-v1", "--agents", f"team={out}", "--episodes", "2",
                  "--max-new-tokens", "2", "4", "--out", str(tmp_path / "bench")]) == 0
    settings = json.loads((tmp_path / "bench" / "results.json").read_text())["settings"]
    assert settings["max_new_tokens"] == [2, 4] and settings["top_k"] == [None, 20]


def test_a_checkpoint_with_per_agent_settings_resumes(tiny_dir, tmp_path):
    d = str(tmp_path / "ck")
    # Tuples as given; the checkpoint's JSON holds lists, and a resume given lists matches it.
    first = magrpo(tiny_dir, num_train_epochs=1, temperature=(0.5, 2.0), stop_strings=(("\n",), None))
    first.learn(checkpoint_dir=d)
    resumed = magrpo(tiny_dir, num_train_epochs=2, temperature=[0.5, 2.0], stop_strings=[["\n"], None])
    resumed.learn(resume_from_checkpoint=os.path.join(d, "checkpoint-1"), checkpoint_dir=d)
    assert resumed.epoch == 2 and resumed.run_id == first.run_id
    changed = magrpo(tiny_dir, num_train_epochs=3, temperature=[0.5, 1.0], stop_strings=[["\n"], None])
    with pytest.raises(CheckpointError, match="temperature: saved \\[0.5, 2.0\\], now \\[0.5, 1.0\\]"):
        changed.learn(resume_from_checkpoint=os.path.join(d, "checkpoint-2"))
