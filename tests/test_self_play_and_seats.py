"""Mixed teams and self-play do what the docs say: the documented forms run as written, one model in several
seats is one policy (one adapter, one optimizer, one step per minibatch at the learning rate of one seat),
per-seat lists count seats, and saved agents are named by the seat they played."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

import learners.models.fixed
from comlrl_env import TextParallelEnv
from learners import MAGRPO, CheckpointError, Frozen, MAGRPOConfig
from learners.loop.optim import PolicyBatch, adamw, policy_step
from learners.rollout import SampleBatch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = dict(num_train_epochs=1, max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None, eval_interval=0,
            verbose=False, rollout_buffer_size=2, num_generations=2)


class Seats(TextParallelEnv):
    """`num_agents` seats that all move every turn; each scores the fraction of spaces in its own text."""

    metadata = {**TextParallelEnv.metadata, "name": "seats-v0", "num_tasks": 4}

    def load_task(self, task_index):
        return {"i": 0 if task_index is None else task_index}

    def prompts(self):
        return {a: f"Task {self.task['i']} for {a}:" for a in self.agents}

    def score(self, actions):
        return {a: sum(ch.isspace() for ch in t) / max(len(t), 1) for a, t in actions.items()}, False


def loaded(tiny_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir)


# ----- the documented forms, run as written ---------------------------------------------------------


def python_blocks(text: str, needle: str) -> list[str]:
    """The indented or fenced Python snippets of `text` that mention `needle`."""
    fenced = re.findall(r"```python\n(.*?)```", text, re.S)
    indented = ["\n".join(line[4:] for line in block.splitlines())
                for block in re.findall(r"((?:\n    [^\n]*)(?:\n(?:    [^\n]*)?)*)", text)]
    return [b for b in fenced + indented if needle in b]


def documented_mixed_teams() -> list[tuple[str, str]]:
    guide = open(os.path.join(ROOT, "docs", "guide", "games.md"), encoding="utf-8").read()
    section = guide[guide.index("## Turn-taking, games and mixed teams"):]
    section = section[:section.index("\n## ", 5)] if "\n## " in section[5:] else section
    found = [("docs/guide/games.md", b) for b in python_blocks(section, "MAGRPO(")]
    found += [("learners.models.fixed", b) for b in python_blocks(learners.models.fixed.__doc__, "MAGRPO(")]
    return found


def test_the_documented_mixed_team_forms_are_found():
    sources = [where for where, _ in documented_mixed_teams()]
    assert sources.count("docs/guide/games.md") == 1 and sources.count("learners.models.fixed") == 1


@pytest.mark.parametrize("where, block", documented_mixed_teams(), ids=lambda x: x if len(x) < 40 else "code")
def test_every_documented_mixed_team_form_runs_as_written(tiny_dir, where, block):
    model, tok = loaded(tiny_dir)
    built = []
    namespace = {"model_dir": tiny_dir, "model": model, "tok": tok}
    exec(compile(block, where, "exec"), namespace)  # each MAGRPO(...) line builds a learner
    calls = len(re.findall(r"^MAGRPO\(", block, re.M))
    assert calls >= 3
    # Build each again to look at it (the block discards them): the last one is self-play.
    lines = [line.split("#")[0] for line in block.splitlines() if line.startswith("MAGRPO(")]
    for line in lines:
        built.append(eval(line, namespace))
    assert built[-1].agents[0] is built[-1].agents[1] and len(built[-1].optimizers) == 1
    assert all(learner.num_seats == 2 for learner in built)


# ----- self-play: one policy ----------------------------------------------------------------------


def test_lora_self_play_trains_one_adapter_shared_by_both_seats(tiny_dir):
    model, tok = loaded(tiny_dir)
    learner = MAGRPO(env=Seats(num_agents=2), agents=[model, model], tokenizer=tok,
                     args=MAGRPOConfig(**FAST, peft_config={"r": 4, "target_modules": ["q_proj", "v_proj"]}))
    a, b = learner.agents
    assert a is b and list(a.peft.peft_config) == ["agent_0"]  # one adapter, named after its first seat
    assert [id(p) for p in a.parameters()] == [id(p) for p in b.parameters()] and len(list(a.parameters())) == 8
    assert len(learner.optimizers) == 1 and set(learner.checkpoint_modules()) == {"agent_0"}
    before = [p.detach().clone() for p in a.parameters()]
    learner.learn()
    assert any(not torch.equal(x, p) for x, p in zip(before, a.parameters()))


def test_homogeneous_lora_agents_still_get_their_own_adapters(tiny_dir):
    learner = MAGRPO(env=Seats(num_agents=2), agent_model=tiny_dir, num_agents=2,
                     args=MAGRPOConfig(**FAST, peft_config={"r": 4, "target_modules": ["q_proj", "v_proj"]}))
    assert learner.agents[0] is not learner.agents[1] and len(learner.optimizers) == 2


def count_steps(optimizer: torch.optim.Optimizer, steps: list[int]) -> None:
    original = optimizer.step
    optimizer.step = lambda *a, **k: (steps.append(1), original(*a, **k))[1]


@pytest.mark.parametrize("minibatches", [1, 2])
def test_full_fine_tuning_steps_each_distinct_model_once_per_minibatch(tiny_dir, minibatches):
    model, tok = loaded(tiny_dir)
    other, _ = loaded(tiny_dir)
    size = {"train_batch_size": None} if minibatches == 1 else {"train_batch_size": 1}
    self_play = MAGRPO(env=Seats(num_agents=3), agents=[model, other, model], tokenizer=tok,
                       args=MAGRPOConfig(**FAST, **size))
    assert self_play.model_index == [0, 1, 0] and self_play.model_agents() == [[0, 2], [1]]
    steps = [[], []]
    for optimizer, log in zip(self_play.optimizers, steps):
        count_steps(optimizer, log)
    self_play.learn()  # 1 epoch of 4 tasks in rollouts of 2: 2 rollouts
    assert [len(log) for log in steps] == [2 * minibatches, 2 * minibatches]
    assert self_play.optimizer_steps == 2 * minibatches


def rows(tok, texts: list[str]) -> SampleBatch:
    prompt = tok(["Say something:"] * len(texts), return_tensors="pt")
    completion = tok(texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    return SampleBatch(prompt["input_ids"], prompt["attention_mask"], completion["input_ids"],
                       completion["attention_mask"], texts)


def test_one_model_in_two_seats_steps_like_one_seat_on_the_same_samples(tiny_dir):
    """Both seats hand the same samples and advantages: the self-play step equals the one-seat step (the
    mean over the pooled rows), where two optimizer steps (the old behaviour, and the reference's) move the
    weights about twice as far."""
    _, tok = loaded(tiny_dir)
    samples = rows(tok, ["a b c", "abc", "a bc d", "xyz"])
    part = PolicyBatch(samples, torch.arange(4), torch.tensor([1.0, -1.0, 0.5, -0.5]), None, 1.0)
    cfg = MAGRPOConfig(**FAST)
    moved = []
    for parts, steps in (([part], 1), ([part, part], 1), ([part], 2)):
        model, _ = loaded(tiny_dir)
        start = [p.detach().clone() for p in model.parameters()]
        optimizer = adamw(model.parameters(), 1e-3)
        for _ in range(steps):
            policy_step(model, optimizer, parts, cfg)
        moved.append(torch.cat([(p.detach() - s).flatten() for p, s in zip(model.parameters(), start)]))
    one_seat, self_play, two_steps = moved
    assert torch.allclose(self_play, one_seat, atol=1e-7)
    ratio = float(two_steps.norm() / one_seat.norm())
    print(f"update norm, two steps / one step: {ratio:.3f}")
    assert ratio > 1.5


def test_self_play_seats_must_share_a_device(tiny_dir):
    model, tok = loaded(tiny_dir)
    learner = MAGRPO(env=Seats(num_agents=2), agents=[model, model], tokenizer=tok,
                     args=MAGRPOConfig(**FAST, agent_devices=["cpu", "cpu"]))
    assert learner.devices == [torch.device("cpu")] * 2


# ----- one counting rule: per seat -------------------------------------------------------------------


def test_device_lists_count_seats_fixed_ones_included(tiny_dir):
    learner = MAGRPO(env=Seats(num_agents=3), agents=[str.upper, tiny_dir, str.lower],
                     args=MAGRPOConfig(**{**FAST, "temperature": [1.0, 0.5, 1.0]}, agent_devices=["cpu"] * 3))
    assert learner.devices == [torch.device("cpu")] and learner.engine.agent_settings[0].temperature == 0.5


def test_a_wrong_device_list_names_the_seat_count_not_the_trained_count(tiny_dir):
    with pytest.raises(ValueError, match=r"agent_devices has 2 entries for 3 agents \(seats of the env, fixed ones "
                                         r"included\), got \['cpu', 'cpu'\]: give one device for every seat") as error:
        MAGRPO(env=Seats(num_agents=3), agents=[str.upper, tiny_dir, str.lower],
               args=MAGRPOConfig(**FAST, agent_devices=["cpu", "cpu"]))
    assert "give 1 or" not in str(error.value)


def test_the_cross_mode_guard_counts_every_seat_that_moves(tiny_dir):
    with pytest.raises(ValueError, match="3 seats that move"):
        MAGRPO(env=Seats(num_agents=3), agents=[str.upper, tiny_dir, str.lower],
               args=MAGRPOConfig(**{**FAST, "num_generations": 17}, joint_mode="cross", rollout_mode="tree"))


# ----- saved by seat ---------------------------------------------------------------------------------


def test_with_a_fixed_seat_first_agent_1_holds_the_trained_policy(tiny_dir, tmp_path):
    learner = MAGRPO(env=Seats(num_agents=2), agents=[str.upper, tiny_dir], args=MAGRPOConfig(**FAST))
    learner.learn(checkpoint_dir=str(tmp_path / "ckpt"))
    learner.save_model(str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path / "out")) == ["agent_1", "comlrl_env.json"]
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "agent_1")
    trained = learner.agents[0].state_dict()
    assert all(torch.equal(trained[k], v) for k, v in exported.state_dict().items())
    assert set(learner.checkpoint_modules()) == {"agent_1"}
    assert os.listdir(tmp_path / "ckpt" / "checkpoint-1" / "models") == ["agent_1.safetensors"]


def rename_agent_files(checkpoint: str, old: str, new: str) -> None:
    """Rewrite a checkpoint as a version that named modules by trained-agent index would have written it."""
    models = os.path.join(checkpoint, "models")
    os.rename(os.path.join(models, f"{old}.safetensors"), os.path.join(models, f"{new}.safetensors"))
    path = os.path.join(checkpoint, "state.json")
    state = json.load(open(path))

    def rename(value):
        if isinstance(value, dict):
            return {k.replace(old, new): rename(v) for k, v in value.items()}
        return value

    for key in ("shapes", "files", "digests", "sha256"):
        if key in state:
            state[key] = rename(state[key])
    json.dump(state, open(path, "w"))


def test_a_checkpoint_named_the_old_way_still_loads(tiny_dir, tmp_path):
    build = lambda: MAGRPO(env=Seats(num_agents=2), agents=[str.upper, tiny_dir], args=MAGRPOConfig(**FAST))  # noqa: E731
    learner = build()
    learner.learn(checkpoint_dir=str(tmp_path / "ckpt"))
    old = str(tmp_path / "old")
    shutil.copytree(tmp_path / "ckpt" / "checkpoint-1", old)
    rename_agent_files(old, "agent_1", "agent_0")  # trained agent 0 played seat 1
    fresh = build()
    fresh.load_checkpoint(old)
    saved = load_file(os.path.join(old, "models", "agent_0.safetensors"))
    own = fresh.agents[0].state_dict()
    assert all(torch.equal(own[k], v) for k, v in saved.items())
    assert fresh.rollouts_done == learner.rollouts_done
    rename_agent_files(old, "agent_0", "agent_5")  # neither naming: refused, as before
    with pytest.raises(CheckpointError, match="holds modules"):
        build().load_checkpoint(old)


def test_a_frozen_seat_records_whether_its_weights_still_match_its_path(tiny_dir):
    model, tok = loaded(tiny_dir)
    unchanged, changed = Frozen(model, tok), Frozen(copy.deepcopy(model), tok)
    with torch.no_grad():
        next(changed.source.parameters()).add_(1.0)  # changed in memory after loading
    for frozen in (unchanged, changed):
        MAGRPO(env=Seats(num_agents=2), agents=[tiny_dir, frozen], args=MAGRPOConfig(**FAST))
    assert unchanged.describe()["weights_match_source"] is True
    assert changed.describe()["weights_match_source"] is False
    assert Frozen(tiny_dir).describe()["weights_match_source"] is None  # not prepared yet: unknown
