"""The sampler contract of the HF backend (issue 43; `tests/test_vllm.py` checks the vLLM backend against it):

- a completion ends at the first stop string in its OWN text (special tokens' text included), never at one
  that spans the prompt's end;
- greedy decoding gives every sample of a prompt the argmax completion, with stop strings too;
- prompts are cut from the left to fit the model's context (the cut is kept per sample and logged), and
  settings that cannot fit it are refused when the backend is built;
- the vLLM backend's temperature floor is refused in the config, before any model loads.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from learners.models.agents import prepare_tokenizer
from learners.reinforce import MAGRPO, MAGRPOConfig
from learners.rollout import GenerationSettings, RolloutEngine, SampleBatch
from learners.rollout.samples import Rollout

PROMPTS = ["def add(a, b):", "import os\n"]


def load(path: str):
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    prepare_tokenizer(tok)
    return model, tok


def until_stop(tok, ids: list[int], stops: list[str]) -> list[int]:
    """The documented rule: `ids` through the first token whose text (special tokens included) completes a
    stop string in the completion's own text."""
    for n in range(1, len(ids) + 1):
        if any(stop in tok.decode(ids[:n], skip_special_tokens=False) for stop in stops):
            return ids[:n]
    return ids


def rows(batch: SampleBatch) -> list[list[int]]:
    return [row[:n] for row, n in zip(batch.completion_ids.tolist(), batch.completion_mask.sum(1).tolist())]


def greedy(model, tok, prompts, num_samples=1, **settings) -> SampleBatch:
    engine = RolloutEngine([model], [tok], GenerationSettings(**{"max_new_tokens": 12, **settings}))
    return engine.generate(0, prompts, num_samples, greedy=True)


# ----- stop strings: on the completion's own text ----------------------------------------------------------


def test_a_stop_string_spanning_the_prompts_end_does_not_stop_the_completion(tiny_dir):
    """Each stop string is the prompt's last character + the greedy completion's first: transformers' criterion
    saw the prompt too and stopped every completion after one token."""
    model, tok = load(tiny_dir)
    plain = greedy(model, tok, PROMPTS)
    for p, (prompt, text) in enumerate(zip(PROMPTS, plain.completions)):
        stop = prompt[-1] + text[0]
        assert stop not in tok.decode(rows(plain)[p][:1])  # only the prompt's end makes the first token complete it
        batch = greedy(model, tok, [prompt], stop_strings=[stop])
        assert rows(batch)[0] == until_stop(tok, rows(plain)[p], [stop])
        assert len(rows(batch)[0]) > 1, (stop, batch.completions)


def test_a_stop_string_that_is_a_special_tokens_text_ends_the_completion_at_that_token(tiny_dir):
    """A base model run with a chat template's marker as its stop: the marker is one special token."""
    model, tok = load(tiny_dir)
    plain = greedy(model, tok, PROMPTS)
    marker = tok.convert_tokens_to_ids("<|im_start|>")
    assert marker not in (tok.eos_token_id, tok.pad_token_id)
    ids = rows(plain)[1]
    i = next(i for i in range(1, len(ids)) if ids[i] not in ids[:i])  # a token the completion has not had yet
    with torch.no_grad():  # the model now emits the marker where it greedily emitted that token
        model.get_input_embeddings().weight[marker] = model.get_input_embeddings().weight[ids[i]] * 1.001
    batch = greedy(model, tok, PROMPTS[1:], stop_strings=["<|im_start|>"])
    assert rows(batch)[0] == ids[:i] + [marker]


# ----- greedy with several samples ---------------------------------------------------------------------------


def test_greedy_with_several_samples_and_stop_strings_repeats_the_argmax_completion(tiny_dir):
    """transformers' generate refuses several greedy sequences per prompt: this raised a ValueError."""
    model, tok = load(tiny_dir)
    plain = greedy(model, tok, PROMPTS)  # the lean loop: no stop strings
    stop = plain.completions[1][3:5]
    batch = greedy(model, tok, PROMPTS, num_samples=3, stop_strings=[stop])
    expected = [until_stop(tok, ids, [stop]) for ids in rows(plain)]
    assert rows(batch) == [ids for ids in expected for _ in range(3)]
    assert len(expected[1]) < 12  # the stop string ended prompt 1's completion


# ----- prompts and the context ------------------------------------------------------------------------------


def short_context(model, context: int):
    model.config.max_position_embeddings = context  # the context the backends read (rotary needs no change)
    return model


def test_prompts_over_the_context_are_cut_from_the_left_and_the_cut_is_kept(tiny_dir):
    model, tok = load(tiny_dir)
    short_context(model, 64)
    prompts = ["x = 1\n" * 40, "def f():"]
    full = [tok(p)["input_ids"] for p in prompts]
    assert len(full[0]) > 64 - 16  # prompt 0 leaves no room for 16 new tokens
    engine = RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=16, temperature=1.0, top_k=None,
                                                              top_p=1.0))
    torch.manual_seed(0)
    batch = engine.generate(0, prompts, 2)
    assert batch.prompt_cut.tolist() == [len(full[0]) - 48] * 2 + [0, 0]
    kept = batch.prompt_ids[0][batch.prompt_mask[0].bool()].tolist()
    assert kept == full[0][-48:]  # its end, where the question is
    assert batch.prompt_ids[2][batch.prompt_mask[2].bool()].tolist() == full[1]
    assert batch.completion_ids.shape[1] <= 16
    idle = engine.prompt_rows(0, prompts, 2)  # a waiting agent's rows are cut the same way
    assert torch.equal(idle.prompt_ids, batch.prompt_ids) and torch.equal(idle.prompt_cut, batch.prompt_cut)


@pytest.mark.parametrize("prompts", [[""], ["def f():", ""]])
def test_an_empty_prompt_is_one_clear_error_alone_or_beside_others(tiny_dir, prompts):
    """HF raised a bare RuntimeError for an empty prompt alone and generated from padding beside others; vLLM
    refused. Both backends encode prompts in `encode_prompts`, which now refuses it with the fix."""
    model, tok = load(tiny_dir)
    engine = RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=4))
    with pytest.raises(ValueError, match=r"prompts encode to no tokens .*: a causal LM cannot continue an empty"):
        engine.generate(0, prompts, 2)


def test_max_prompt_length_cuts_from_the_left_and_counts_the_cut(tiny_dir):
    model, tok = load(tiny_dir)
    engine = RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=4, max_prompt_length=3))
    batch = engine.generate(0, ["abc def ghi jkl", "x"], 1, greedy=True)
    full = tok("abc def ghi jkl")["input_ids"]
    assert batch.prompt_ids[0].tolist() == full[-3:] and batch.prompt_cut.tolist() == [len(full) - 3, 0]


@pytest.mark.parametrize("settings, match", [
    (dict(max_new_tokens=2048), r"max_new_tokens=2048 leaves no room for a prompt in agent 0's context of 2048"),
    (dict(max_new_tokens=100, max_prompt_length=2000),
     r"max_prompt_length=2000 \+ max_new_tokens=100 = 2100 tokens exceed agent 0's context of 2048 tokens .*"
     r"max_prompt_length=None to cut prompts from the left to 1948 tokens"),
])
def test_settings_that_cannot_fit_the_context_are_refused_when_the_backend_is_built(tiny_dir, settings, match):
    model, tok = load(tiny_dir)
    with pytest.raises(ValueError, match=match):
        RolloutEngine([model], [tok], GenerationSettings(**settings))
    RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=48, max_prompt_length=2000))  # 2048: fits


def test_the_learner_logs_the_share_of_samples_whose_prompt_was_cut(tiny_dir):
    def reward(first, second):
        return [0.0] * len(first)

    data = Dataset.from_list([{"prompt": "Question one:"}, {"prompt": "Q"}])
    cfg = dict(num_generations=2, max_new_tokens=3, eval_interval=0, verbose=False, rollout_buffer_size=2,
               num_train_epochs=1)
    for longest, rate in ((None, 0.0), (2, 0.5)):
        learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=reward, train_dataset=data,
                         args=MAGRPOConfig(**cfg, max_prompt_length=longest))
        metrics = learner.learn()
        assert metrics["train/prompt_cut_rate"] == rate
        cut = learner.last_rollout.samples[0].prompt_cut
        assert ((cut > 0).float().mean()) == rate


def test_prompt_cut_rate_counts_only_the_rows_where_an_agent_moved():
    from learners.loop.metrics import prompt_cut_rate  # here: the module's other tests run without it

    def batch(cut):
        ones = torch.ones(len(cut), 1, dtype=torch.long)
        return SampleBatch(ones, ones, ones, ones, [""] * len(cut), prompt_cut=torch.tensor(cut))

    rollout = Rollout(samples=[batch([0, 3]), batch([5, 0])], rewards=torch.zeros(2, 2), returns=torch.zeros(2, 2),
                      group=torch.zeros(2), turn=torch.zeros(2), task=torch.zeros(2),
                      episode_returns=torch.zeros(2, 1), next_index=torch.zeros(2), states=["", ""],
                      invalid_actions=torch.zeros(2), num_joint_actions=2, timings={})
    assert prompt_cut_rate(rollout) == 0.5  # 2 of 4 samples
    rollout = dataclasses.replace(rollout, acted=torch.tensor([[True, True], [False, True]]))
    assert prompt_cut_rate(rollout) == 1 / 3  # agent 1's cut row 0 waited: not a sample
    assert prompt_cut_rate(dataclasses.replace(rollout, samples=[dataclasses.replace(
        s, prompt_cut=None) for s in rollout.samples])) is None


# ----- the vLLM backend's temperature floor, before any model loads -----------------------------------------


@pytest.mark.parametrize("temperature, name", [(1e-6, "temperature"), ([1.0, 0.005], r"temperature\[1\]")])
def test_a_temperature_below_vllms_floor_is_refused_in_the_config(temperature, name):
    with pytest.raises(ValueError, match=rf"{name}=.* is below vLLM's floor of 0.01.*eval_greedy=True"):
        MAGRPOConfig(generation_backend="vllm", temperature=temperature)
