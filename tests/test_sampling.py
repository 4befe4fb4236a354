"""The lean sampling loop: the same distribution as transformers' warpers, exact greedy ids, correct stops."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from learners.models.agents import prepare_tokenizer
from learners.rollout import GenerationSettings, RolloutEngine
from learners.rollout.backends.sampling import (
    distinct_prompts,
    draw_tokens,
    filtered_probs,
    sample_completions,
    sample_tokens,
    supports_lean_sampling,
)


def load(path: str):
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tok = AutoTokenizer.from_pretrained(path)
    prepare_tokenizer(tok)
    return model, tok


PROMPTS = ["def f(x):", "A much longer prompt that pads the short ones on the left", "x"]


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, None, 1.0), (0.6, 50, 0.6), (1.3, 5, 1.0), (0.7, None, 0.9), (1.0, 3, 0.5), (2.0, 0, 0.99),
])
def test_filtered_probs_match_the_warpers_of_generate(temperature, top_k, top_p):
    logits = torch.randn(6, 300, generator=torch.Generator().manual_seed(1)) * 3
    logits[0, :2] = 10.0  # a tie at the top
    expected = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k:
        expected = TopKLogitsWarper(top_k)(None, expected)
    if top_p < 1.0:
        expected = TopPLogitsWarper(top_p)(None, expected)
    got = filtered_probs(logits, temperature, top_k, top_p)
    assert torch.equal(got > 0, expected.softmax(-1) > 0)
    assert torch.allclose(got, expected.softmax(-1), atol=1e-6)


def test_top_k_none_keeps_the_whole_vocabulary():
    probs = filtered_probs(torch.zeros(1, 500), 1.0, None, 1.0)
    assert (probs > 0).all() and torch.allclose(probs, torch.full_like(probs, 1 / 500))


def test_inverse_cdf_draws_follow_the_probabilities():
    p = torch.tensor([0.5, 0.0, 0.2, 0.25, 0.05])
    draws = sample_tokens(p.expand(200_000, -1), torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    assert freq[1] == 0  # a zero-probability token is never drawn
    assert torch.allclose(freq, p, atol=0.005), freq


def _filtered_by_hand(logits: list[float], temperature: float, top_k: int | None, top_p: float) -> list[float]:
    """The sampling distribution, written out: the top-k logits, softmax at the temperature, then the most
    likely tokens in order until their mass reaches top_p, renormalized."""
    import math

    order = sorted(range(len(logits)), key=lambda i: -logits[i])[: top_k or len(logits)]
    weights = {i: math.exp(logits[i] / temperature) for i in order}
    total = sum(weights.values())
    kept, mass = [], 0.0
    for i in order:
        if mass >= top_p:
            break
        kept.append(i)
        mass += weights[i] / total
    norm = sum(weights[i] for i in kept)
    return [weights[i] / norm if i in kept else 0.0 for i in range(len(logits))]


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.8, 5, 0.9), (1.3, None, 0.75), (0.5, 3, 1.0), (1.0, 6, 0.7)])
def test_the_loops_draws_follow_the_filtered_distribution(temperature, top_k, top_p):
    """A chi-square test of 40,000 draws (fixed seed) against the distribution computed by hand."""
    logits = [2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, 3.0]
    expected = torch.tensor(_filtered_by_hand(logits, temperature, top_k, top_p))
    n = 40_000
    draws = draw_tokens(torch.tensor([logits]).expand(n, -1), temperature, top_k, top_p,
                        torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=len(logits)).double()
    kept = expected > 0
    assert (counts[~kept] == 0).all()  # nothing outside the top-k / nucleus is ever drawn
    chi2 = float(((counts[kept] - n * expected[kept]) ** 2 / (n * expected[kept])).sum())
    # 99.9% quantiles of chi-square with 1..7 degrees of freedom: a correct sampler fails 1 time in 1000.
    critical = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32}
    df = int(kept.sum()) - 1
    assert df >= 1 and chi2 < critical[df], (chi2, df, counts.tolist(), expected.tolist())


@pytest.mark.parametrize("fixture", ["tiny_dir", "tiny_llama_dir", "tiny_gpt2_dir"])
def test_greedy_ids_equal_those_of_generate(fixture, request):
    model, tok = load(request.getfixturevalue(fixture))
    enc = tok(PROMPTS, return_tensors="pt", padding=True, padding_side="left")
    ids, logprobs = sample_completions(model, enc["input_ids"], enc["attention_mask"], 1, 16, [tok.eos_token_id],
                                       tok.pad_token_id, temperature=None)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=16, pad_token_id=tok.pad_token_id,
                             eos_token_id=[tok.eos_token_id])
    expected = out[:, enc["input_ids"].shape[1]:]
    assert torch.equal(ids, expected[:, : ids.shape[1]])
    assert logprobs.shape == ids.shape and (logprobs <= 0).all()


def test_a_row_stops_at_its_first_eos_and_is_padded_after(tiny_dir):
    model, tok = load(tiny_dir)
    enc = tok(PROMPTS, return_tensors="pt", padding=True, padding_side="left")
    torch.manual_seed(0)
    ids, _ = sample_completions(model, enc["input_ids"], enc["attention_mask"], 8, 20, [], tok.pad_token_id)
    eos = int(ids[0, 3])  # treat a token sampled at step 3 of row 0 as EOS
    torch.manual_seed(0)
    ids, logprobs = sample_completions(model, enc["input_ids"], enc["attention_mask"], 8, 20, [eos], tok.pad_token_id)
    for row, lp in zip(ids.tolist(), logprobs):
        if eos in row:
            end = row.index(eos)
            assert all(t == tok.pad_token_id for t in row[end + 1:])
            assert (lp[end + 1:] == 0).all() and lp[end] < 0
    assert eos in ids[0].tolist()[:4]


def test_prompt_is_prefilled_once_and_samples_of_a_prompt_differ(tiny_dir):
    model, tok = load(tiny_dir)
    enc = tok(PROMPTS, return_tensors="pt", padding=True, padding_side="left")
    calls = []
    hook = model.register_forward_pre_hook(lambda m, args, kw: calls.append(kw["input_ids"].shape), with_kwargs=True)
    ids, _ = sample_completions(model, enc["input_ids"], enc["attention_mask"], 4, 6, [], tok.pad_token_id)
    hook.remove()
    assert calls[0] == enc["input_ids"].shape  # one prefill over the 3 prompts, not 12 rows
    assert all(shape == (12, 1) for shape in calls[1:]) and len(calls) == 6
    assert len({tuple(r) for r in ids[:4].tolist()}) > 1


def test_repeated_prompts_are_prefilled_once_and_sample_as_k_samples_of_one_prompt_do(tiny_dir):
    # the K episodes of a group repeat their first prompt: rows [a, b, a, a] prefill a and b once, and each row
    # then draws as sample k of its prompt would (the same random stream: the decode batch is the same)
    model, tok = load(tiny_dir)
    enc = tok([PROMPTS[0], PROMPTS[1], PROMPTS[0], PROMPTS[0]], return_tensors="pt", padding=True, padding_side="left")
    calls = []
    hook = model.register_forward_pre_hook(lambda m, args, kw: calls.append(kw["input_ids"].shape), with_kwargs=True)
    torch.manual_seed(3)
    ids, logprobs = sample_completions(model, enc["input_ids"], enc["attention_mask"], 2, 6, [], tok.pad_token_id)
    hook.remove()
    assert calls[0] == (2, enc["input_ids"].shape[1]) and all(shape == (8, 1) for shape in calls[1:])
    with torch.no_grad():  # each row's log-probs are those of its own prompt and tokens, scored whole
        whole = torch.cat([enc["input_ids"].repeat_interleave(2, 0), ids], 1)
        mask = torch.cat([enc["attention_mask"].repeat_interleave(2, 0), torch.ones_like(ids)], 1)
        logits = model(input_ids=whole, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
    width = enc["input_ids"].shape[1]
    expected = torch.log_softmax(logits[:, width - 1:-1].float(), -1).gather(-1, ids[..., None])[..., 0]
    torch.testing.assert_close(logprobs, expected, atol=1e-4, rtol=0)
    assert len({tuple(r) for r in ids[[0, 1, 4, 5, 6, 7]].tolist()}) > 1  # a's six samples are not one copy


@pytest.mark.parametrize("names", [None, ["x", "y", "x", "y"]])
def test_distinct_prompts_maps_every_row_to_the_first_row_of_its_prompt(names):
    ids = torch.tensor([[0, 7, 8], [5, 6, 9], [0, 7, 8], [0, 7, 8]])
    first, source = distinct_prompts(ids, (ids > 0).long(), names)
    assert torch.equal(ids[first][source], ids)
    if names is None:
        assert first.tolist() == [0, 1] and source.tolist() == [0, 1, 0, 0]
    else:  # the same ids through another adapter are another prompt
        assert first.tolist() == [0, 1, 3] and source.tolist() == [0, 1, 0, 2]


def test_logits_processors_in_the_generation_config_use_generate(tiny_dir):
    model, tok = load(tiny_dir)
    assert supports_lean_sampling(model)
    model.generation_config.repetition_penalty = 1.3
    assert not supports_lean_sampling(model)
    engine = RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None))
    assert engine.generate(0, PROMPTS, 2).logprobs is None  # sampled by generate, which applies the penalty


@pytest.mark.parametrize("top_k,top_p", [(1, 1.0), (None, 1e-6), (5, 1e-6)])
def test_the_loop_applies_top_k_and_top_p_to_its_draws(tiny_dir, top_k, top_p):
    model, tok = load(tiny_dir)
    enc = tok(PROMPTS, return_tensors="pt", padding=True, padding_side="left")
    greedy, _ = sample_completions(model, enc["input_ids"], enc["attention_mask"], 1, 10, [], tok.pad_token_id,
                                   temperature=None)
    torch.manual_seed(0)
    ids, _ = sample_completions(model, enc["input_ids"], enc["attention_mask"], 3, 10, [], tok.pad_token_id,
                                temperature=1.5, top_k=top_k, top_p=top_p)
    assert torch.equal(ids, greedy.repeat_interleave(3, 0))  # one candidate left: the argmax
