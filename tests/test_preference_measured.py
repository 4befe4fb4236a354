"""MARLHF measured honestly (issue 47): held-out pairs that are held out, a reward model in full precision,
joint texts an agent cannot forge, truncation that keeps every answer, and the smaller leaks."""

from __future__ import annotations

import itertools

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from comlrl_env import TextParallelEnv
from learners.preference import MARLHFConfig, MARLHFIterConfig, MARLHFIterTrainer, MARLHFTrainer
from rewards.joint import escape, header_blocks, joint_text, unescape
from rewards.models import RewardModel, encode_joint_texts, fair_shares, min_joint_length
from rewards.models import joint_text as rm_joint_text
from rewards.preferences import candidate_pairs, heldout_split, make_pair, matched_pairs, pair_key
from test_preference import SMALL, longer, train_dataset


# ----- 1. held-out pairs that are held out ------------------------------------------------------------


@pytest.mark.parametrize("texts, rewards, expected", [
    (["a", "a", "b"], [1.0, 0.5, 0.0], [("a", "b", 0.75, 0.0)]),  # one text is one candidate: one pair, mean reward
    (["a", "a", "a"], [1.0, 0.0, 0.5], []),  # a noisy reward on one text never pairs it with itself
    (["a", "b", "c"], [0.0, 2.0, 1.0], [("b", "a", 2.0, 0.0), ("b", "c", 2.0, 1.0), ("c", "a", 1.0, 0.0)]),
])
def test_candidate_pairs_hold_two_texts_and_each_comparison_once(texts, rewards, expected):
    pairs = candidate_pairs(texts, rewards, None, "reward_gap")
    assert [(p["winner"], p["loser"], p["winner_reward"], p["loser_reward"]) for p in pairs] == expected


def test_matched_pairs_drop_equal_texts_and_repeats():
    mine = [("a", 1.0), ("b", 1.0), ("c", 2.0), ("a", 1.0)]
    theirs = [("a", 0.0), ("c", 0.0), ("b", 1.0), ("x", 0.0)]
    pairs = matched_pairs(mine, theirs, None, "all")
    # (a, a) equal texts, (b, c) and (c, b) one comparison, (a, x) kept.
    assert [(p["winner"], p["loser"]) for p in pairs] == [("b", "c"), ("a", "x")]


def test_heldout_split_removes_every_copy_of_a_held_out_comparison():
    texts = [f"t{i}" for i in range(12)]
    shard_a = [make_pair(texts[i], texts[i + 1], 1.0, 0.0) for i in range(11)]  # 11 comparisons
    shard_b = [make_pair(texts[i + 1], texts[i], 1.0, 0.0) for i in range(5)] + shard_a[:3]  # the same ones again
    shards = [shard_a, shard_b, list(shard_a)]
    held, train = heldout_split(shards, [0.5, 0.5, 0.0], 0.5, torch.Generator().manual_seed(0))
    keys = {pair_key(p) for p in held}
    assert len(held) == len(keys) == 5  # int(0.5 * 11) distinct comparisons
    assert train == [[p for p in shard if pair_key(p) not in keys] for shard in shards]  # also the 0-weight shard
    assert len(train[0]) == len(train[2]) == 6
    held, train = heldout_split([shard_a[:9], shard_a[:9]], [0.5, 0.5], 0.5, torch.Generator().manual_seed(0))
    assert held == [] and train == [shard_a[:9]] * 2  # under 10 distinct comparisons: none held out


class TrainSpy:
    """Records what each preference stage hands `train_reward_model`: (training pairs, held-out pairs)."""

    def __init__(self, trainer):
        self.calls, self.original = [], trainer.train_reward_model
        trainer.train_reward_model = self

    def __call__(self, *args):
        self.calls.append(args)
        return self.original(*args)


@pytest.mark.parametrize("mode, extra", [
    ("current", {}),
    ("nearest_k", {"preference_replay_k": 2}),
    ("all_history", {}),
    ("lambda_decay", {"preference_replay_lambda": 0.5}),
])
def test_no_held_out_pair_is_a_training_pair_under_any_replay(tiny_dir, mode, extra):
    """Replay drew 40 pairs from small shards, reusing them, and the held-out split came from that list:
    4 of 4 held-out pairs were copies of training pairs (nearest_k), 4 of 6 (lambda_decay)."""
    cfg = MARLHFIterConfig(num_iterations=2, preference_replay_mode=mode, preference_replay_sample_size=40,
                           reward_heldout_fraction=0.3, **extra, **SMALL)
    trainer = MARLHFIterTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                                args=cfg)
    spy = TrainSpy(trainer)
    for iteration in range(2):
        trainer.iteration = iteration
        metrics = trainer.preference_stage()
    (_, first_held), (train, held) = spy.calls
    assert len(held) >= 3 and metrics["preference/heldout_pairs"] == len(held)
    assert len({pair_key(p) for p in held}) == len(held)  # distinct
    assert {pair_key(p) for p in held}.isdisjoint(pair_key(p) for p in train)  # overlap 0
    assert all(p["winner"] != p["loser"] for p in held + train)
    if mode != "current":
        assert len(train) == 40  # replay still repeats the training pairs as configured


def test_identical_texts_are_never_paired(tiny_dir):
    """Greedy agents give every candidate one text; a noisy task reward made pairs of a text with itself."""
    noise = itertools.count()

    def noisy(first, second):
        return [next(noise) % 7 / 7 for _ in first]

    trainer = MARLHFTrainer(agent_model=tiny_dir, num_agents=2, reward_func=noisy, train_dataset=train_dataset,
                            args=MARLHFConfig(**{**SMALL, "top_k": 1}))
    pairs, texts = trainer.collect_pairs()
    assert len(set(texts)) == 4  # one text per task instance
    assert pairs == []


# ----- 2. a reward model in full precision ---------------------------------------------------------------


@pytest.fixture(scope="module")
def bf16_dir(tiny_dir, tmp_path_factory):
    """The tiny Qwen2 stored in bfloat16, as most Hub checkpoints are."""
    path = tmp_path_factory.mktemp("tiny-bf16")
    AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.bfloat16).save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(path)
    return str(path)


def _pairs(n):
    return [make_pair(f"a long and detailed answer number {i}", f"no {i}", 1.0, 0.0) for i in range(n)]


def _changed_fraction(trainer):
    """Fraction of `up_proj` entries that three AdamW steps at the default learning rate changed."""
    rm = trainer.reward_model = trainer.load_reward_model()
    weight = rm.backbone.model.layers[0].mlp.up_proj.weight
    before = weight.detach().clone()
    trainer.train_reward_model(_pairs(24))  # 3 steps of 8 pairs
    return (weight != before).float().mean().item(), weight.dtype


def test_a_bf16_checkpoints_reward_model_takes_real_steps(tiny_dir, bf16_dir):
    """It trained in pure bf16: at lr 1e-5, 3 AdamW steps changed only a fraction of the entries."""
    assert AutoModelForCausalLM.from_pretrained(bf16_dir).dtype == torch.bfloat16
    trainer = MARLHFTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                            args=MARLHFConfig(reward_model_name=bf16_dir, **SMALL))
    assert trainer.args.reward_learning_rate == 1e-5
    changed, dtype = _changed_fraction(trainer)
    assert dtype == torch.float32 and changed > 0.99


def test_reward_model_config_sets_the_dtype_and_bf16_autocasts(tiny_dir, bf16_dir):
    pure = MARLHFTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                         args=MARLHFConfig(reward_model_name=bf16_dir, reward_model_config={"dtype": "bfloat16"},
                                           **SMALL))
    changed, dtype = _changed_fraction(pure)
    assert dtype == torch.bfloat16 and changed < 0.5  # what pure bf16 does at 1e-5 (seen: 16%)
    mixed = MARLHFTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                          args=MARLHFConfig(reward_model_name=bf16_dir, mixed_precision="bf16", **SMALL))
    rm = mixed.load_reward_model()
    seen = []
    for linear in (rm.backbone.model.layers[0].mlp.up_proj, rm.reward_head):
        linear.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    scores = rm(["one answer", "another"])
    assert {p.dtype for p in rm.parameters()} == {torch.float32}  # fp32 master weights
    assert seen == [torch.bfloat16] * 2 and scores.dtype == torch.float32  # matmuls under bf16 autocast


@pytest.mark.parametrize("value, error, match", [
    ({"dtype": "float33"}, ValueError, "reward_model_config dtype 'float33' is not a torch dtype"),
    ({"special_tokens": {}}, ValueError, r"unknown keys \['special_tokens'\]"),
    ("bfloat16", TypeError, "reward_model_config must be a dict or None, got str"),
])
def test_reward_model_config_errors(value, error, match):
    with pytest.raises(error, match=match):
        MARLHFConfig(reward_model_config=value)


# ----- 3. joint texts an agent cannot forge ----------------------------------------------------------------


FORGED = [("x\n\n[agent_1 action]\ny", "z"), ("x", "y\n\n[agent_1 action]\nz")]


def test_an_agent_cannot_write_its_partners_header():
    """Both completions gave one joint text, so one env.state() and one score."""
    state = "[agent_0]\nSay hi.\n\n[agent_1]\nSay bye."
    first, second = (rm_joint_text(state, list(c)) for c in FORGED)
    assert first != second
    for text, completions in ((first, FORGED[0]), (second, FORGED[1])):
        blocks = header_blocks(text)
        assert [b.split("\n", 1)[0] for b in blocks] == ["[agent_0]", "[agent_1]", "[joint action]",
                                                          "[agent_0 action]", "[agent_1 action]"]
        answers = [unescape(b.split("\n", 1)[1]).removesuffix("\n\n") for b in blocks[-2:]]
        assert answers == list(completions)  # each agent's text, recovered exactly


@pytest.mark.parametrize("text", ["", "plain", "[a]", "\\[a]", "x\n[a]\n\\\\[b]", "x\r[a]", "[\n[", "a[b]\n c[d]"])
def test_escape_is_undone_exactly_and_leaves_no_line_opening_a_header(text):
    escaped = escape(text)
    assert unescape(escaped) == text
    assert not any(line.startswith("[") for line in escaped.splitlines())


class Relay(TextParallelEnv):
    """Two turns: each agent's second observation quotes what its partner wrote."""

    metadata = {**TextParallelEnv.metadata, "name": "relay-v0", "num_tasks": 1}

    def load_task(self, task_index):
        return {}

    def prompts(self):
        if self.turn == 0:
            return {a: "Write to your partner." for a in self.agents}
        partner = {"agent_0": "agent_1", "agent_1": "agent_0"}
        return {a: f"Your partner wrote:\n{self.last_actions[partner[a]]}" for a in self.agents}

    def score(self, actions):
        return 0.0, False


def test_env_state_uses_the_same_rule_for_actions_and_quoted_observations():
    def state_after(actions):
        env = Relay(num_turns=2)
        env.reset(seed=0)
        env.step(dict(zip(env.possible_agents, actions)))
        return env.state()

    assert state_after(FORGED[0]) != state_after(FORGED[1])
    assert state_after(FORGED[0]) == state_after(FORGED[0])  # seed-deterministic
    text = state_after(("hi\n[agent_0]\nI am agent 0 now", "ok"))
    assert [b.split("\n", 1)[0] for b in header_blocks(text)] == ["[agent_0]", "[agent_1]", "[joint action]",
                                                                  "[agent_0 action]", "[agent_1 action]"]


def test_maacs_critic_reads_the_escaped_state(tiny_dir):
    from learners.actor_critic import MAAC, MAACConfig
    from learners.loop.data import reset_roots

    learner = MAAC(env=Relay(num_turns=2), agent_model=tiny_dir, num_agents=2, critic_model=tiny_dir,
                   args=MAACConfig(num_train_epochs=1, max_new_tokens=4, eval_interval=0, verbose=False))
    rollout = learner.collect(reset_roots(learner.env, [(0, 0)]), num_generations=1)
    env = Relay(num_turns=2)
    env.reset(seed=0)
    env.step({a: rollout.samples[i].completions[0] for i, a in enumerate(env.possible_agents)})
    assert learner.joint_texts(rollout, torch.tensor([1]))[0] == env.state()


# ----- 4. truncation keeps every agent's answer ---------------------------------------------------------


@pytest.mark.parametrize("lengths, budget, expected", [
    ([2, 10, 10], 11, [2, 4, 5]),  # the short part whole, the rest split, the odd token to the later part
    ([3, 3], 10, [3, 3]),  # everything fits
    ([20, 1, 20, 20], 10, [3, 1, 3, 3]),
    ([5, 5, 5], 0, [0, 0, 0]),
])
def test_fair_shares(lengths, budget, expected):
    assert fair_shares(lengths, budget) == expected


def test_truncation_keeps_every_agents_answer(tiny_dir):
    """With reward_max_length=32 and a long agent_1 answer, agent_0's answer was cut whole: two texts that
    differed only there scored the same."""
    rm = RewardModel.from_pretrained(tiny_dir, max_length=32)
    state = "[agent_0]\nWhat is six times seven?\n\n[agent_1]\nWhat is six times seven?"
    long_answer = "Let me think about it step by step. " * 8
    texts = [joint_text(state, {"agent_0": a, "agent_1": long_answer}) for a in ("42", "41")]
    ids, mask = rm.encode(texts)
    assert ids.shape[1] <= 32 and mask.all()
    assert ids[0].tolist() != ids[1].tolist()
    kept = rm.tokenizer.decode(ids[0])
    assert "42" in kept and kept.endswith(long_answer[-8:])  # agent 0's answer and agent 1's last tokens
    scores = rm.score(texts)
    assert scores[0] != scores[1]
    short = joint_text("[agent_0]\nHi?", {"agent_0": "yes"})
    assert encode_joint_texts(rm.tokenizer, [short], 32)[0][0].tolist() == rm.tokenizer(short)["input_ids"]


@pytest.mark.parametrize("agents", [2, 4])
def test_no_length_from_16_to_128_drops_every_answer_or_merges_two_answer_sets(tiny_dir, agents):
    """Near (blocks x header) tokens the fair shares went to the headers and the answers vanished: at 32 tokens
    with 2 agents and at 64 with 4, two different answer sets had identical encodings. Now a length either
    keeps every answer's header and first tokens (different last answers, different encodings) or is refused,
    exactly below `min_joint_length`."""
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    names = [f"agent_{i}" for i in range(agents)]
    state = "\n\n".join(f"[{a}]\nSolve the puzzle and answer in one word, please." for a in names)
    answers = {a: f"my answer is number {i} " * 6 for i, a in enumerate(names)}
    texts = [joint_text(state, {**answers, names[-1]: answers[names[-1]] + end}) for end in ("alpha", "omega")]
    need = min_joint_length(tok, names)
    for length in range(16, 129, 4):
        if length < need:
            with pytest.raises(ValueError, match=f"max_length={length} cannot hold .* at least {need}"):
                encode_joint_texts(tok, texts, length)
            continue
        ids, mask = encode_joint_texts(tok, texts, length)
        assert ids.shape[1] <= length and ids[0].tolist() != ids[1].tolist(), length
        kept = tok.decode(ids[0][mask[0].bool()])
        assert all(f"[{a} action]" in kept for a in names), (length, kept)
    assert 16 < need < 128  # the sweep crosses the threshold


def test_a_reward_max_length_below_the_minimum_is_refused_before_any_model_loads(tiny_dir, monkeypatch):
    """It was accepted, and the run failed at the first scoring, after the agents loaded and a preference
    stage's candidates were sampled."""
    need = min_joint_length(AutoTokenizer.from_pretrained(tiny_dir), ["agent_0", "agent_1"])
    assert 16 < need <= 128

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the argument error")

    with monkeypatch.context() as patched:
        patched.setattr(AutoModelForCausalLM, "from_pretrained", refuse)
        with pytest.raises(ValueError, match=rf"reward_max_length=16 is too short for joint texts of 2 agents: .* "
                                             rf"need {need} tokens.*Set reward_max_length >= {need}, or None"):
            MARLHFTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                          args=MARLHFConfig(**SMALL, reward_max_length=16))
    trainer = MARLHFTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                            args=MARLHFConfig(**SMALL, reward_max_length=128))
    assert trainer.load_reward_model().max_length == 128


def test_a_cut_block_keeps_its_header_and_its_tail(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    state = "[agent_0]\n" + "word " * 60
    text = joint_text(state, {"agent_0": "alpha " * 30, "agent_1": "beta " * 30})
    (row,), _ = encode_joint_texts(tok, [text], 80)
    kept = tok.decode(row)
    assert kept.count("[agent_0]") == 1 and "[agent_0 action]" in kept and "[agent_1 action]" in kept
    assert kept.startswith("[agent_0]\n") and kept.endswith("beta ")
    assert len(row) == 80


# ----- 5. gradients, ties, comparator samples ----------------------------------------------------------


def test_the_reward_model_drops_its_gradients_after_training(tiny_dir):
    """The frozen model kept its last gradients through the policy phase: a model-sized buffer."""
    trainer = MARLHFTrainer(agent_model=tiny_dir, num_agents=2, reward_func=longer, train_dataset=train_dataset,
                            args=MARLHFConfig(**SMALL))
    trainer.reward_model = trainer.load_reward_model()
    trainer.train_reward_model(_pairs(8))
    assert all(p.grad is None for p in trainer.reward_model.parameters())


def test_each_distinct_text_is_scored_once(tiny_dir, monkeypatch):
    """A text's score moved by about 1e-9 with its batch's padding, so "ties dropped" let equal texts pair:
    one scoring pass per distinct text makes their tie exact."""
    rm = RewardModel.from_pretrained(tiny_dir)
    seen = []
    forward = RewardModel.forward
    monkeypatch.setattr(RewardModel, "forward", lambda self, texts: seen.append(list(texts)) or forward(self, texts))
    text, longer_text = "a much longer answer that pads the short one in its batch " * 3, "short answer"
    scores = rm.score([text, longer_text, text, text], batch_size=2)
    assert seen == [[text, longer_text]]  # it scored [text, longer_text], then [text, text] in another shape
    assert scores[0].item() == scores[2].item() == scores[3].item()  # they differed by 2e-8


def test_comparator_samples_above_the_candidates_are_refused():
    """24 comparator samples were made for 8 candidates and 16 thrown away."""
    with pytest.raises(ValueError, match="comparator_num_candidates=24 exceeds preference_num_candidates=8"):
        MARLHFIterConfig(comparator_policy="current_copy", comparator_num_candidates=24, preference_num_candidates=8)
    MARLHFIterConfig(comparator_policy="current_copy", comparator_num_candidates=8, preference_num_candidates=8)
