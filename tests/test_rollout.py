"""The rollout engine: token-exact completions and masks, log-probs, tree/parallel/cross shapes and returns."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from comlrl_env import TextParallelEnv
from learners.models.agents import prepare_tokenizer
from learners.rollout import GenerationSettings, RolloutEngine, SampleBatch
from learners.rollout.backends.sampling import mask_completions
from learners.rollout.scoring import completion_logprobs


def load(path: str):
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    prepare_tokenizer(tok)
    return model, tok


# ----- masks ------------------------------------------------------------------------------


def test_mask_scores_tokens_up_to_and_including_the_first_eos():
    eos, pad = 2, 0
    completion = torch.tensor([
        [5, 6, eos, pad, pad],  # EOS at 2: tokens 0..2 scored, padding not
        [5, eos, 7, eos, pad],  # the first EOS ends it, later tokens are not scored
        [5, 6, 7, 8, 9],  # no EOS: ran to max_new_tokens, all scored
        [eos, pad, pad, pad, pad],  # immediate EOS: one scored token
    ])
    mask = mask_completions(completion, [eos], pad, stop_strings=False)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


def test_mask_when_pad_equals_eos():
    eos = pad = 2
    completion = torch.tensor([[5, eos, eos, eos], [5, 6, 7, 8]])
    assert mask_completions(completion, [eos], pad, False).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]


def test_mask_with_stop_strings_ends_at_the_last_sampled_token():
    eos, pad = 2, 0
    completion = torch.tensor([[5, 6, pad, pad], [5, 6, 7, eos], [5, 6, 7, 8]])
    assert mask_completions(completion, [eos], pad, True).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]


# ----- real generation: exact ids and log-probs ----------------------------------------------


@pytest.mark.parametrize("fixture", ["tiny_dir", "tiny_llama_dir", "tiny_gpt2_dir"])
def test_logprobs_recomputed_in_the_update_equal_those_of_the_sampled_tokens(fixture, request):
    model, tok = load(request.getfixturevalue(fixture))
    engine = RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=12, temperature=0.8, top_p=0.9, top_k=40))
    prompts = ["def f(x):", "A much longer prompt that pads the short ones on the left", "x"]
    torch.manual_seed(0)
    batch = engine.generate(0, prompts, num_samples=2)
    assert batch.logprobs is not None and batch.logprobs.shape == batch.completion_ids.shape
    with torch.no_grad():
        got = completion_logprobs(model, batch)
    # The sampling loop's log-probs (one prefill per prompt, KV cache) are those of a full forward.
    assert torch.allclose(got, batch.logprobs, atol=2e-4), (got - batch.logprobs).abs().max()
    assert (batch.logprobs[batch.completion_mask == 0] == 0).all()
    assert (batch.logprobs[batch.completion_mask == 1] < 0).all()


@pytest.mark.parametrize("fixture", ["tiny_dir", "tiny_llama_dir", "tiny_gpt2_dir"])
def test_the_generate_fallback_keeps_generates_exact_ids_and_logits(fixture, request):
    model, tok = load(request.getfixturevalue(fixture))
    # Any generate argument routes sampling through model.generate.
    engine = RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=12, temperature=1.0, top_p=1.0, top_k=None,
                                                              generation_kwargs={"num_beams": 1}))
    prompts = ["def f(x):", "A much longer prompt that pads the short ones on the left", "x"]
    torch.manual_seed(0)
    batch = engine.generate(0, prompts, num_samples=2)
    assert batch.logprobs is None
    # Re-sample with the same seed, asking generate for its raw logits.
    torch.manual_seed(0)
    enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left")
    out = model.generate(**enc, do_sample=True, max_new_tokens=12, num_return_sequences=2, temperature=1.0,
                         top_p=1.0, top_k=0, pad_token_id=tok.pad_token_id, eos_token_id=engine.backend.eos_ids(0),
                         output_logits=True, return_dict_in_generate=True)
    T = batch.completion_ids.shape[1]
    assert torch.equal(out.sequences[:, enc["input_ids"].shape[1]:][:, :T].masked_fill(batch.completion_mask == 0, tok.pad_token_id),
                       batch.completion_ids)
    logits = torch.stack(out.logits, 1)[:, :T].float()
    expected = logits.log_softmax(-1).gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1) * batch.completion_mask
    with torch.no_grad():
        got = completion_logprobs(model, batch)
    assert torch.allclose(got, expected, atol=2e-4), (got - expected).abs().max()


def test_prompts_containing_pad_and_eos_ids_do_not_leak_into_completions(tiny_dir):
    model, tok = load(tiny_dir)
    engine = RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=None))
    prompts = [f"a {tok.pad_token} b {tok.eos_token} c", f"{tok.eos_token}{tok.pad_token}", "plain"]
    batch = engine.generate(0, prompts, num_samples=3)
    enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left")
    assert (enc["input_ids"] == tok.pad_token_id).any()  # the pad id is really inside a prompt
    # Prompt rows are the tokenized prompts, each repeated per sample; completions start after them.
    assert torch.equal(batch.prompt_ids, enc["input_ids"].repeat_interleave(3, 0))
    assert torch.equal(batch.prompt_mask, enc["attention_mask"].repeat_interleave(3, 0))
    for row in range(len(batch)):
        n = int(batch.completion_mask[row].sum())
        assert n >= 1
        ids = batch.completion_ids[row, :n].tolist()
        assert tok.decode(ids, skip_special_tokens=True) == batch.completions[row]
        assert (batch.completion_ids[row, n:] == tok.pad_token_id).all()


def test_select_trims_all_padding_columns(tiny_dir):
    model, tok = load(tiny_dir)
    engine = RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=None))
    batch = engine.generate(0, ["short", "a considerably longer prompt than the first one"], num_samples=2)
    first = batch.select(torch.tensor([0, 1]))  # rows of the short prompt only
    assert first.prompt_mask[:, 0].any() and first.prompt_ids.shape[1] < batch.prompt_ids.shape[1]
    with torch.no_grad():
        assert torch.allclose(completion_logprobs(model, first),
                              completion_logprobs(model, batch)[:2, : first.completion_ids.shape[1]], atol=1e-5)


# ----- episodes with a scripted policy -------------------------------------------------------


class Sums(TextParallelEnv):
    """Two agents answer numbers; the joint reward is their sum; two turns."""

    metadata = {**TextParallelEnv.metadata, "name": "test/Sums-v0", "num_tasks": 4}

    def __init__(self, num_turns: int = 2, per_agent: bool = False):
        super().__init__(num_agents=2, num_turns=num_turns)
        self.per_agent = per_agent

    def load_task(self, task_index):
        return {"index": task_index}

    def prompts(self):
        return {a: f"task {self.task['index']} turn {self.turn}" for a in self.agents}

    def score(self, actions):
        values = {a: float(text) for a, text in actions.items()}
        if self.per_agent:
            return values, False
        return sum(values.values()), False


class Scripted(RolloutEngine):
    """Agent 0's sample k answers k + 1, agent 1's answers 10 (k + 1)."""

    def __init__(self):
        self.agents, self.tokenizers, self.settings = [None, None], [_PadOnly(), _PadOnly()], GenerationSettings()
        self.concurrent, self.shared_base, self.fixed = False, None, {}
        self.prompts_seen: list[list[str]] = []

    def generate(self, agent, prompts, num_samples, greedy=False):
        self.prompts_seen.append(list(prompts))
        texts = [str((k + 1) * (10 if agent else 1)) for _ in prompts for k in range(num_samples)]
        S = len(texts)
        ones = torch.ones(S, 1, dtype=torch.long)
        return SampleBatch(ones, ones, ones, ones, texts)


class _PadOnly:
    pad_token_id = 0


def roots(n, **kwargs):
    out = []
    for i in range(n):
        env = Sums(**kwargs)
        env.reset(seed=0, options={"task_index": i})
        out.append(env)
    return out


def test_tree_rollout_shapes_groups_and_discounted_returns():
    engine = Scripted()
    r = engine.collect(roots(2), num_generations=2, rollout_mode="tree", discount=0.5)
    # Turn 0: 2 roots x 2 samples; turn 1: each of the 4 children samples 2 -> 8.
    assert r.num_samples == 12 and r.num_joint_actions == 12
    assert r.turn.tolist() == [0] * 4 + [1] * 8
    assert r.group.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]  # siblings share a group
    assert r.task.tolist() == [0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]
    # Joint rewards: sample k -> (k+1) + 10(k+1) = 11, 22. Every child node's mean is 16.5, so
    # turn-0 returns are r + 0.5 * 16.5 = 19.25, 30.25; turn-1 returns are the rewards.
    assert r.rewards[0].tolist() == [11, 22] * 6
    assert r.returns[0].tolist() == [19.25, 30.25] * 2 + [11, 22] * 4
    assert torch.equal(r.returns[0], r.returns[1])  # cooperative: both agents get the joint return
    # Undiscounted episode return of each task: mean over root actions of r + 16.5.
    assert r.episode_returns.tolist() == [[33.0, 33.0], [33.0, 33.0]]
    # One generate per agent per turn, over every live node.
    assert [len(p) for p in engine.prompts_seen] == [2, 2, 4, 4]


def test_parallel_rollout_groups_the_copies_of_each_task_per_turn():
    engine = Scripted()
    r = engine.collect(roots(3), num_generations=2, rollout_mode="parallel", discount=1.0)
    # K=2 copies of 3 tasks, one sample each per turn, two turns.
    assert r.num_samples == 12
    assert r.group.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert r.task.tolist() == [0, 0, 1, 1, 2, 2] * 2
    # Each copy answers 1 and 10 (sample index 0): reward 11 per turn, return 22 then 11.
    assert r.rewards[0].tolist() == [11] * 12
    assert r.returns[0].tolist() == [22] * 6 + [11] * 6
    assert [len(p) for p in engine.prompts_seen] == [6, 6, 6, 6]


class Chain(Sums):
    """Joint reward: the answers' sum + 100 x the previous turn's sum + 10000 x the task index, so every
    node's children, and every episode's next turn, have rewards of their own."""

    def score(self, actions):
        total = sum(float(text) for text in actions.values())
        reward = total + 100 * self.task.get("previous", 0.0) + 10000 * self.task["index"]
        self.task["previous"] = total
        return reward, False


class RowScripted(Scripted):
    """Sample k of the i-th prompt of a call: agent 0 answers i * K + k + 1, agent 1 ten times that."""

    def generate(self, agent, prompts, num_samples, greedy=False):
        self.prompts_seen.append(list(prompts))
        texts = [str((i * num_samples + k + 1) * (10 if agent else 1)) for i in range(len(prompts))
                 for k in range(num_samples)]
        ones = torch.ones(len(texts), 1, dtype=torch.long)
        return SampleBatch(ones, ones, ones, ones, texts)


def chain_roots(n):
    out = []
    for i in range(n):
        env = Chain()
        env.reset(seed=0, options={"task_index": i})
        out.append(env)
    return out


def test_tree_returns_back_up_each_nodes_own_children():
    """Children differ by parent and task, so a wrong child-to-parent mapping changes the numbers."""
    r = RowScripted().collect(chain_roots(2), num_generations=2, rollout_mode="tree", discount=0.5)
    # Turn 0: root 0 samples sums 11, 22; root 1 (task 1) 33, 44 -> rewards 11, 22, 10033, 10044.
    # Turn 1: the 4 nodes in parent order sample sums (11, 22), (33, 44), (55, 66), (77, 88); each adds
    # 100 x its parent's sum (and 10000 for task 1): (1111, 1122), (2233, 2244), (13355, 13366), (14477, 14488).
    children = [[1111, 1122], [2233, 2244], [13355, 13366], [14477, 14488]]
    assert r.rewards[0].tolist() == [11, 22, 10033, 10044] + sum(children, [])
    # Each turn-0 return: its reward + 0.5 x the mean of its own node's children.
    parents = [11 + 0.5 * 1116.5, 22 + 0.5 * 2238.5, 10033 + 0.5 * 13360.5, 10044 + 0.5 * 14482.5]
    assert r.returns[0].tolist() == parents + sum(children, [])
    assert r.group.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert r.task.tolist() == [0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]
    # Undiscounted episode return per task: mean over its root actions of r + mean(children).
    assert r.episode_returns[0].tolist() == [((11 + 1116.5) + (22 + 2238.5)) / 2,
                                             ((10033 + 13360.5) + (10044 + 14482.5)) / 2]


def test_parallel_returns_follow_each_episodes_own_next_turn():
    """The copies of a task act differently, so a wrong next-turn mapping changes the numbers."""
    r = RowScripted().collect(chain_roots(2), num_generations=2, rollout_mode="parallel", discount=0.5)
    # Rows: task 0 copy 0, copy 1, task 1 copy 0, copy 1 at turn 0, then the same at turn 1; row i sums 11 (i + 1).
    first = [11, 22, 10033, 10044]
    second = [11 + 1100, 22 + 2200, 33 + 3300 + 10000, 44 + 4400 + 10000]
    assert r.rewards[0].tolist() == first + second
    assert r.next_index.tolist() == [4, 5, 6, 7, -1, -1, -1, -1]
    assert r.returns[0].tolist() == [f + 0.5 * s for f, s in zip(first, second)] + second
    assert r.group.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]  # the copies of a task at a turn form a group


def test_cross_joint_mode_averages_over_the_combinations_containing_each_sample():
    engine = Scripted()
    r = engine.collect(roots(1, num_turns=1), num_generations=2, rollout_mode="tree", joint_mode="cross")
    # Joint actions (a0, a1): (1,10)=11, (1,20)=21, (2,10)=12, (2,20)=22.
    assert r.num_joint_actions == 4
    assert r.rewards[0].tolist() == [16.0, 17.0]  # agent 0: mean(11, 21), mean(12, 22)
    assert r.rewards[1].tolist() == [11.5, 21.5]  # agent 1: mean(11, 12), mean(21, 22)


def test_per_agent_rewards_stay_per_agent():
    r = Scripted().collect(roots(1, num_turns=1, per_agent=True), num_generations=2)
    assert r.rewards.tolist() == [[1.0, 2.0], [10.0, 20.0]]


def test_cross_needs_tree_mode():
    with pytest.raises(ValueError, match="cross"):
        Scripted().collect(roots(1), num_generations=2, rollout_mode="parallel", joint_mode="cross")


def test_chat_template_renders_prompts(tiny_dir):
    model, tok = load(tiny_dir)
    engine = RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=3, use_chat_template=True))
    batch = engine.generate(0, ["hello"], num_samples=1)
    rendered = tok.decode(batch.prompt_ids[0][batch.prompt_mask[0].bool()])
    assert rendered == tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False,
                                               add_generation_prompt=True)


@pytest.mark.parametrize("pad_is_eos", [False, True], ids=["pad!=eos", "pad==eos"])
def test_stop_strings_end_completions_and_generation_kwargs_pass_through(tiny_dir, pad_is_eos):
    """With pad == EOS (the fallback of many tokenizers) the pad after a stop string was scored as an EOS."""
    model, tok = load(tiny_dir)
    if pad_is_eos:
        tok.pad_token = tok.eos_token
    assert (tok.pad_token_id == tok.eos_token_id) == pad_is_eos
    settings = GenerationSettings(max_new_tokens=24, temperature=1.0, top_p=1.0, top_k=None, stop_strings=["e"],
                                  generation_kwargs={"repetition_penalty": 1.0})
    engine = RolloutEngine([model], [tok], settings)
    torch.manual_seed(0)
    batch = engine.generate(0, ["def main():", "import os"], num_samples=4)
    lengths = batch.completion_mask.sum(1)
    stopped = [i for i, text in enumerate(batch.completions) if "e" in text]
    assert stopped, batch.completions  # some samples hit the stop string
    for i in stopped:
        n = int(lengths[i])
        # The completion ends with the token that completed the stop string: nothing after it is scored.
        assert "e" in tok.decode(batch.completion_ids[i, n - 1:n])
        assert "e" not in tok.decode(batch.completion_ids[i, : n - 1])
        assert int(batch.completion_ids[i, n - 1]) != tok.eos_token_id  # no phantom EOS


class StopAfter:
    """A user stopping criterion: row r stops after `counts[r]` new tokens; records when it fired."""

    def __init__(self, prompt_width, counts):
        self.prompt_width, self.counts = prompt_width, torch.tensor(counts)

    def __call__(self, input_ids, scores, **kwargs):
        return (input_ids.shape[1] - self.prompt_width) >= self.counts


def _first(ids: torch.Tensor, token_ids: list[int]) -> int | None:
    hits = torch.isin(ids, torch.tensor(token_ids)).nonzero()
    return int(hits[0]) if len(hits) else None


def test_rows_stopped_by_a_user_stopping_criterion_score_exactly_their_sampled_tokens(tiny_dir):
    """The mask looked only for the model's EOS: 56 never-sampled pad tokens of 8 rows were scored."""
    from transformers import StoppingCriteriaList

    model, tok = load(tiny_dir)
    prompts = ["def main():", "import os"]
    width = tok(prompts, return_tensors="pt", padding=True)["input_ids"].shape[1]
    counts = [2, 3, 4, 5, 6, 7, 8, 9]  # rows are prompt-major: 4 samples of each prompt
    settings = GenerationSettings(max_new_tokens=12, temperature=1.0, top_p=1.0, top_k=None, generation_kwargs={
        "stopping_criteria": StoppingCriteriaList([StopAfter(width, counts)])})
    torch.manual_seed(0)
    batch = RolloutEngine([model], [tok], settings).generate(0, prompts, num_samples=4)
    eos = RolloutEngine([model], [tok], settings).backend.eos_ids(0)
    for r, count in enumerate(counts):
        first_eos = _first(batch.completion_ids[r], eos)
        expected = count if first_eos is None else min(count, first_eos + 1)
        assert int(batch.completion_mask[r].sum()) == expected, r
    assert batch.completion_mask.sum() < 8 * batch.completion_ids.shape[1]


def test_an_eos_token_id_override_ends_completions_at_that_token(tiny_dir):
    model, tok = load(tiny_dir)
    plain = GenerationSettings(max_new_tokens=16, temperature=1.0, top_p=1.0, top_k=None,
                               generation_kwargs={"num_beams": 1})  # through generate, as the override below
    torch.manual_seed(0)
    first = RolloutEngine([model], [tok], plain).generate(0, ["def main():", "import os"], num_samples=4)
    sampled = first.completion_ids[first.completion_mask.bool()]
    stop = int(sampled.bincount().argmax())  # the most frequent sampled token becomes an EOS
    assert stop != tok.pad_token_id
    settings = dataclasses.replace(plain, generation_kwargs={"num_beams": 1, "eos_token_id": [stop]})
    torch.manual_seed(0)
    batch = RolloutEngine([model], [tok], settings).generate(0, ["def main():", "import os"], num_samples=4)
    ended = 0
    for r in range(len(batch)):
        n, at = int(batch.completion_mask[r].sum()), _first(batch.completion_ids[r], [stop])
        if at is None:
            assert n == 16  # never stopped: every token was sampled
        else:
            assert n == at + 1  # through the overriding EOS, and not one pad more
            ended += 1
    assert ended


def test_greedy_generation_is_deterministic(tiny_dir):
    model, tok = load(tiny_dir)
    engine = RolloutEngine([model], [tok], GenerationSettings(max_new_tokens=6))
    a = engine.generate(0, ["x = 1", "y"], num_samples=1, greedy=True)
    b = engine.generate(0, ["x = 1", "y"], num_samples=1, greedy=True)
    assert a.completions == b.completions and torch.equal(a.completion_ids, b.completion_ids)


def test_parallel_rollout_links_each_sample_to_its_episodes_next_turn_and_records_states():
    r = Scripted().collect(roots(2), num_generations=2, rollout_mode="parallel")
    # Rows 0-3 are turn 0 (task 0 copy 0, copy 1, task 1 copy 0, copy 1), rows 4-7 turn 1 in the same order.
    assert r.next_index.tolist() == [4, 5, 6, 7, -1, -1, -1, -1]
    assert r.states[0].startswith("[agent_0]\ntask 0 turn 0") and "task 1 turn 1" in r.states[6]
