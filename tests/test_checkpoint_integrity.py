"""Corrupted, swapped and malformed checkpoints: each one raises CheckpointError naming the file and the problem,
with the learner exactly as it was (every parameter, optimizer and scheduler state, counter, RNG state and
callback state compared before and after), or restores the exact saved state. Never a crash.

The cases cover the three layers a load passes: `state.json` (limits, schema), the files against the SHA-256
recorded for each (flips, truncations, files from another run of the same shapes, symlinks), and the states
inside files whose digests were made to match (`rehash`: what a buggy writer or a hand edit produces):
shapes, dtypes, NaN, 0-d optimizer states, garbage scheduler, RNG and callback states.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import pickle
import random
import shutil

import numpy as np
import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file, save_file
from test_checkpoint import FAST, Counter, assert_same, space_reward

from learners import CheckpointError, read_checkpoint_metadata
from learners.reinforce import MAGRPO, MAGRPOConfig

FILES = ("models/agent_0.safetensors", "models/agent_1.safetensors", "optim.pt", "rng.pt", "callbacks.pt")


def make(model_dir, seed=0):
    data = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(2)])
    return MAGRPO(agent_model=model_dir, num_agents=2, reward_func=space_reward, train_dataset=data,
                  callbacks=[Counter(), Counter()], args=MAGRPOConfig(num_train_epochs=1, seed=seed, **FAST))


# ----- the learner's whole state, compared exactly ------------------------------------------------------------


def full_state(learner):
    """Everything a load may change: weights, optimizer and scheduler states, counters, RNGs, callbacks."""
    optimizers, schedulers = learner.checkpoint_optimizers()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "modules": {n: {k: v.detach().clone() for k, v in m.state_dict().items()}
                    for n, m in learner.checkpoint_modules().items()},
        "optimizers": [copy.deepcopy(o.state_dict()) for o in optimizers],
        "schedulers": [copy.deepcopy(s.state_dict()) for s in schedulers],
        "counters": [learner.epoch, learner.batch_in_epoch, learner.rollouts_done, learner.env_steps,
                     learner.run_id, learner.checkpoint_sequence, learner.optimizer_steps,
                     learner.completions_sampled, learner.wandb_identity],
        "rng": [random.getstate(), [name, torch.from_numpy(keys.copy()), pos, has_gauss, cached],
                torch.get_rng_state()],
        "callbacks": [c.state_dict() for c in learner.callbacks],
    }


# ----- checkpoints: this run's, another run's (same shapes), and a "home" state to load them over -------------


@pytest.fixture(scope="module")
def ckpts(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("integrity")
    learner = make(tiny_dir)
    learner.learn()
    good = learner.save_checkpoint(str(root / "good"))
    other_run = make(tiny_dir, seed=1)  # other weights, moments and RNG states; the same shapes
    other_run.learn()
    other = other_run.save_checkpoint(str(root / "other"))
    # "home": the state every case starts from; every part of it differs from the good checkpoint's.
    with torch.no_grad():
        for m in learner.checkpoint_modules().values():
            for p in m.parameters():
                p.add_(0.5)
    for opt in learner.optimizers:
        for st in opt.state.values():
            st["exp_avg"].add_(1.0)
            st["step"].add_(3.0)
    for sch in learner.schedulers:
        sch.step()
    learner.epoch, learner.rollouts_done, learner.env_steps, learner.optimizer_steps = 0, 0, 99, 7  # consistent
    for cb in learner.callbacks:
        cb.steps, cb.reward = 42, -1.5
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    home = learner.save_checkpoint(str(root / "home"))
    return {"good": good, "other": other, "home": home}


@pytest.fixture(scope="module")
def subject(tiny_dir, ckpts):
    """One learner the cases share; each case first puts it back into the home state."""
    return make(tiny_dir)


def at_home(learner, ckpts):
    learner.load_checkpoint(ckpts["home"])
    random.seed(7), np.random.seed(7), torch.manual_seed(7)  # differ from every saved RNG state
    return full_state(learner)


# ----- ways to break a checkpoint ----------------------------------------------------------------------------


def rehash(path):
    """Record the files' current sizes and SHA-256 in state.json, as a writer would for these contents."""
    state = json.load(open(os.path.join(path, "state.json")))
    for rel in FILES:
        blob = open(os.path.join(path, rel), "rb").read()
        state["files"][rel] = {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    json.dump(state, open(os.path.join(path, "state.json"), "w"))


def edit_json(fn):
    def corrupt(path, other):
        state = json.load(open(os.path.join(path, "state.json")))
        fn(state)
        json.dump(state, open(os.path.join(path, "state.json"), "w"))
    return corrupt


def write_json_text(text):
    return lambda path, other: open(os.path.join(path, "state.json"), "w").write(text)


def edit_pt(name, fn, replace=False):
    """Change what `name` holds (loaded the safe way) in place, or `replace` it by what `fn` returns; save it and
    rehash: only the content checks can catch it."""
    def corrupt(path, other):
        file = os.path.join(path, name)
        obj = torch.load(file, weights_only=True)
        new = fn(obj)
        torch.save(new if replace else obj, file)
        rehash(path)
    return corrupt


def edit_weights(fn):
    def corrupt(path, other):
        file = os.path.join(path, "models", "agent_0.safetensors")
        sd = load_file(file)
        fn(sd)
        save_file(sd, file)
        rehash(path)
    return corrupt


def opt_state(fn):
    """Edit optimizer 1's state of parameter 0 (the embedding)."""
    return edit_pt("optim.pt", lambda o: fn(o["optimizers"][1]["state"][0]))


def opt_group(fn):
    return edit_pt("optim.pt", lambda o: fn(o["optimizers"][0]["param_groups"][0]))


def scheduler(fn):
    return edit_pt("optim.pt", lambda o: fn(o["schedulers"]))


def rng(fn):
    return edit_pt("rng.pt", fn)


def flip(rel):
    def corrupt(path, other):
        with open(os.path.join(path, rel), "r+b") as f:
            f.seek(os.path.getsize(os.path.join(path, rel)) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x01]))
    return corrupt


def truncate(rel):
    return lambda path, other: os.truncate(os.path.join(path, rel), os.path.getsize(os.path.join(path, rel)) // 2)


def swap_in(rel):
    return lambda path, other: shutil.copyfile(os.path.join(other, rel), os.path.join(path, rel))


def link_to_other(rel):
    def corrupt(path, other):
        os.remove(os.path.join(path, rel))
        os.symlink(os.path.join(other, rel), os.path.join(path, rel))
    return corrupt


def link_to_identical_copy(path, other):
    rel = os.path.join(path, "optim.pt")
    shutil.copyfile(rel, rel + ".copy")
    os.replace(rel + ".copy", os.path.join(os.path.dirname(path), "optim-copy.pt"))
    os.remove(rel)
    os.symlink(os.path.join(os.path.dirname(path), "optim-copy.pt"), rel)


def link_models_dir(path, other):
    shutil.rmtree(os.path.join(path, "models"))
    os.symlink(os.path.join(other, "models"), os.path.join(path, "models"))


def swap_agents(path, other):
    a, b = (os.path.join(path, "models", f"agent_{i}.safetensors") for i in (0, 1))
    os.replace(a, a + ".tmp"), os.replace(b, a), os.replace(a + ".tmp", b)


def pickle_bomb(path, other):
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch pwned",))
    open(os.path.join(path, "optim.pt"), "wb").write(pickle.dumps(Evil(), protocol=2))
    rehash(path)


def sparse_state_json(path, other):
    with open(os.path.join(path, "state.json"), "r+b") as f:
        f.truncate(65 << 20)  # a sparse file: no time or disk spent


def set_key(key, value):
    def fn(d):
        d[key] = value
    return fn


def drop_key(key):
    return lambda d: d.pop(key)


CORRUPTIONS = {
    # -- the files against their recorded size and SHA-256 (written as saved, then changed) --
    **{f"flipped byte in {rel}": (flip(rel), f"{rel} does not match the SHA-256 recorded") for rel in FILES},
    **{f"truncated {rel}": (truncate(rel), rf"{rel} has \d+ bytes, \d+ were written") for rel in FILES},
    **{f"{rel} from another run": (swap_in(rel), f"{rel} (does not match the SHA-256|has .* bytes)") for rel in FILES},
    **{f"{rel} a symlink to another run's": (link_to_other(rel), f"{rel} is a symlink") for rel in FILES},
    **{f"missing {rel}": (lambda p, o, rel=rel: os.remove(os.path.join(p, rel)), f"{rel} is missing") for rel in FILES},
    "agent_0 and agent_1 swapped": (swap_agents, "agent_0.safetensors does not match the SHA-256"),
    "optim.pt a symlink to an identical copy": (link_to_identical_copy, "optim.pt is a symlink"),
    "models a symlink to another run's": (link_models_dir, "models is a symlink"),
    "a directory in place of rng.pt": (lambda p, o: (os.remove(os.path.join(p, "rng.pt")),
                                                      os.mkdir(os.path.join(p, "rng.pt"))), "rng.pt is not a regular"),
    "bytes appended to callbacks.pt": (lambda p, o: open(os.path.join(p, "callbacks.pt"), "ab").write(b"\0"),
                                       "callbacks.pt has .* bytes"),
    # -- state.json itself --
    "garbage state.json": (write_json_text("\x00{not json"), "corrupt state.json"),
    "nested-JSON bomb": (write_json_text("[" * 200_000 + "]" * 200_000), "nested too deeply"),
    "65 MiB state.json": (sparse_state_json, "larger than 64 MiB"),
    "5000-digit number in state.json": (write_json_text('{"format_version": ' + "9" * 5000 + "}"), "corrupt state.json"),
    "NaN in state.json": (edit_json(lambda s: s["progress"].update(epoch=float("nan"))), "holds NaN"),
    "progress not ints": (edit_json(lambda s: s["progress"].update(epoch="one")), "corrupt state.json.*progress"),
    "progress over 2**63": (edit_json(lambda s: s["progress"].update(env_steps=2**70)), "progress"),
    # -- progress that cannot belong to this run (issue 40: rollouts_done 10**9 loaded and training went on) --
    "rollouts_done 10**9": (edit_json(lambda s: s["progress"].update(rollouts_done=10**9)),
                            r"counts rollouts_done=1000000000, but epoch 1 x \d+ batches per epoch \+ batch 0 makes"),
    "rollouts_done one short": (edit_json(lambda s: s["progress"].update(rollouts_done=s["progress"]["rollouts_done"]
                                                                         - 1)), "counts rollouts_done="),
    "a batch without its rollout": (edit_json(lambda s: s["progress"].update(batch_in_epoch=1)),
                                    r"epoch 1 x 1 batches per epoch \+ batch 1 makes 2"),
    "a negative counter": (edit_json(lambda s: s["progress"].update(rollouts_done=-1)), "non-negative ints"),
    "a batch index past the epoch": (edit_json(lambda s: s["progress"].update(batch_in_epoch=99)),
                                     r"is at batch 99 of an epoch of \d+ batches"),
    "unknown format": (edit_json(set_key("format_version", 99)), "unknown format"),
    "format_version true": (edit_json(set_key("format_version", True)), "unknown format"),
    "missing state.json": (lambda p, o: os.remove(os.path.join(p, "state.json")), "state.json is missing"),
    "state.json a symlink to another run's": (link_to_other("state.json"), "state.json is a symlink"),
    "no file records": (edit_json(set_key("files", {})), "'files' .* is missing"),
    "a digest that is not hex": (edit_json(lambda s: s["files"]["rng.pt"].update(sha256="z" * 64)),
                                 "SHA-256 of rng.pt is not 64 hex"),
    "a file without a record": (edit_json(lambda s: s["files"].pop("callbacks.pt")),
                                "records no SHA-256 for callbacks.pt"),
    "sizes only, in a format-2 state.json": (edit_json(lambda s: s.update(files={k: v["bytes"] for k, v in
                                                                                   s["files"].items()})),
                                             "record of .* is not"),
    "stateful not pairs": (edit_json(set_key("stateful", [["callbacks[0]"]])), "'stateful'"),
    "tokenizers not strings": (edit_json(set_key("tokenizers", [1, 2])), "'tokenizers'"),
    "a module the learner lacks": (edit_json(lambda s: s["shapes"].pop("agent_1")), "holds modules"),
    # -- the weights (digests made to match) --
    "unparsable safetensors": (lambda p, o: (open(os.path.join(p, "models", "agent_0.safetensors"), "r+b")
                                             .write(b"\xff" * 64), rehash(p)), "cannot read the agent_0 weights"),
    "NaN in a weight": (edit_weights(lambda sd: sd["model.norm.weight"].fill_(float("nan"))),
                        "agent_0.model.norm.weight holds NaN"),
    "float64 weight": (edit_weights(lambda sd: sd.update({"model.norm.weight": sd["model.norm.weight"].double()})),
                       "torch.float64, the model has"),
    "wrong weight shape": (edit_weights(lambda sd: sd.update({"model.norm.weight": torch.zeros(3)})),
                           r"is \(3,\) torch.float32, the model has"),
    "missing weight": (edit_weights(lambda sd: sd.pop("model.norm.weight")), "do not match this model"),
    # -- optimizer states (digests made to match) --
    "0-d exp_avg": (opt_state(set_key("exp_avg", torch.tensor(0.5))), r"exp_avg of parameter 0 is \(\)"),
    "exp_avg of another shape": (opt_state(set_key("exp_avg", torch.zeros(3))), r"exp_avg of parameter 0 is \(3,\)"),
    "float64 exp_avg": (opt_state(lambda s: s.update(exp_avg=s["exp_avg"].double())), "torch.float64, the parameter"),
    "int64 exp_avg_sq": (opt_state(lambda s: s.update(exp_avg_sq=s["exp_avg_sq"].long())), "torch.int64"),
    "NaN in exp_avg": (opt_state(lambda s: s["exp_avg"].view(-1).__setitem__(0, float("nan"))), "NaN or infinite"),
    "inf in exp_avg_sq": (opt_state(lambda s: s["exp_avg_sq"].view(-1).__setitem__(0, float("inf"))),
                          "NaN or infinite"),
    "negative exp_avg_sq": (opt_state(lambda s: s["exp_avg_sq"].view(-1).__setitem__(0, -1.0)), "negative"),
    "sparse exp_avg": (opt_state(lambda s: s.update(exp_avg=s["exp_avg"].to_sparse())), "dense"),
    "exp_avg with zero strides": (opt_state(lambda s: s.update(exp_avg=torch.zeros(1).expand(s["exp_avg"].shape))),
                                  "strides"),
    "step -1": (opt_state(set_key("step", torch.tensor(-1.0))), "step of parameter 0 .* whole number >= 0"),
    "step NaN": (opt_state(set_key("step", torch.tensor(float("nan")))), "whole number"),
    "step 1.5": (opt_state(set_key("step", 1.5)), "whole number"),
    "step a 1-d tensor": (opt_state(set_key("step", torch.tensor([1.0, 2.0]))), r"step of parameter 0 is a \(2,\)"),
    "step a string": (opt_state(set_key("step", "4")), "whole number"),
    "no exp_avg_sq": (opt_state(drop_key("exp_avg_sq")), "has keys"),
    "an extra state key": (opt_state(set_key("momentum_buffer", torch.zeros(1))), "has keys"),
    "parameter state not a dict": (edit_pt("optim.pt", lambda o: o["optimizers"][0]["state"].update({0: [1]})),
                                   "not a dict"),
    "state of a parameter no group lists": (edit_pt("optim.pt", lambda o: o["optimizers"][0]["state"].update(
        {10**6: {}})), "no parameter group lists"),
    "lr NaN": (opt_group(set_key("lr", float("nan"))), "lr is nan, not finite"),
    "lr a string": (opt_group(set_key("lr", "fast")), "lr is str"),
    "lr negative": (opt_group(set_key("lr", -1.0)), "lr is -1.0, below"),
    "betas garbage": (opt_group(set_key("betas", (0.9, 2.0))), "betas"),
    "eps inf": (opt_group(set_key("eps", float("inf"))), "eps is inf, not finite"),
    "a hyperparameter that is an object": (opt_group(set_key("amsgrad", {"a": 1})), "not a plain value"),
    "a group without params": (opt_group(drop_key("params")), "no list of parameters"),
    "a group with one parameter too few": (opt_group(lambda g: g["params"].pop()), "parameters, this learner's"),
    "a parameter listed twice": (opt_group(lambda g: g["params"].__setitem__(1, g["params"][0])), "two places"),
    "parameter ids not ints": (opt_group(lambda g: g["params"].__setitem__(0, "0")), "not ints"),
    "two parameter groups": (edit_pt("optim.pt", lambda o: o["optimizers"][0]["param_groups"].append(
        dict(o["optimizers"][0]["param_groups"][0]))), "2 parameter groups"),
    "one optimizer": (edit_pt("optim.pt", lambda o: o["optimizers"].pop()), "holds 1 optimizers"),
    "optim.pt a list": (edit_pt("optim.pt", lambda o: [1, 2], replace=True), "optim.pt has an unknown structure"),
    "an optimizer state that is a string": (edit_pt("optim.pt", lambda o: o["optimizers"].__setitem__(0, "x")),
                                            "optimizer 0: has an unknown structure"),
    "pickle bomb in optim.pt": (pickle_bomb, "cannot read optim.pt safely"),
    # -- scheduler states --
    "empty scheduler state": (edit_pt("optim.pt", lambda o: o["schedulers"].__setitem__(0, {})), "lacks"),
    "scheduler state a string": (edit_pt("optim.pt", lambda o: o["schedulers"].__setitem__(0, "x")), "not a dict"),
    "last_epoch a string": (scheduler(lambda s: s[0].update(last_epoch="x")), "last_epoch is str"),
    "last_epoch negative": (scheduler(lambda s: s[0].update(last_epoch=-5)), "last_epoch is -5, below 0"),
    "last_epoch 1.5": (scheduler(lambda s: s[0].update(last_epoch=1.5)), "expected an int"),
    "base_lrs of another length": (scheduler(lambda s: s[0].update(base_lrs=[0.1, 0.1])), "base_lrs has 2 entries"),
    "base_lrs NaN": (scheduler(lambda s: s[0].update(base_lrs=[float("nan")])), r"base_lrs\[0\] is nan"),
    "a key the scheduler lacks": (scheduler(lambda s: s[1].update(optimizer=1)), "keys this scheduler does not have"),
    "lr_lambdas with state": (scheduler(lambda s: s[0].update(lr_lambdas=[{"x": 1}])), r"lr_lambdas\[0\] is dict"),
    # -- RNG states --
    "python RNG garbage": (rng(lambda r: r.update(python=[3, [1, 2], None])), "invalid RNG states"),
    "numpy keys of another shape": (rng(lambda r: r["numpy"].update(keys=torch.zeros(3, dtype=torch.int64))),
                                    "624 int64"),
    "numpy keys out of range": (rng(lambda r: r["numpy"]["keys"].__setitem__(0, -1)), r"\[0, 2\*\*32\)"),
    "numpy cached gaussian NaN": (rng(lambda r: r["numpy"].update(cached=float("nan"))), "MT19937"),
    "torch RNG state too short": (rng(lambda r: r.update(torch=r["torch"][:100])), "torch CPU state"),
    "torch RNG state float": (rng(lambda r: r.update(torch=r["torch"].float())), "torch CPU state"),
    "CUDA states not tensors": (rng(lambda r: r.update(cuda=[1])), "CUDA states"),
    "ranks garbage": (rng(lambda r: r.update(ranks="x")), "ranks"),
    "rng.pt a list": (edit_pt("rng.pt", lambda r: [1], replace=True), "invalid RNG states"),
    # -- callback and learner states --
    "one callback state too few": (edit_pt("callbacks.pt", lambda c: c["states"].pop()),
                                   "does not hold the 2 saved states"),
    "a callback state that is a list": (edit_pt("callbacks.pt", lambda c: c["states"].__setitem__(0, [1])),
                                        r"callbacks\[0\] \(Counter\) does not fit it: it is list"),
    "a callback count as a string": (edit_pt("callbacks.pt", lambda c: c["states"][1].update(steps="3")),
                                     r"callbacks\[1\] .*state\['steps'\] is str"),
    "a callback state its load_state_dict refuses": (edit_pt("callbacks.pt", lambda c: c["states"][1].pop("reward")),
                                                     r"callbacks\[1\] \(Counter\) refused its saved state \(KeyError"),
    "learner counters a string": (edit_pt("callbacks.pt", lambda c: c["extra"].update(counters="ab")),
                                  r"extra_state .*counters'\] is str"),
    "learner state a list": (edit_pt("callbacks.pt", lambda c: c.update(extra=[1])), "does not hold the 2 saved"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_checkpoints_raise_before_mutation(subject, ckpts, tmp_path, case, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / "ck")
    shutil.copytree(ckpts["good"], path)
    corrupt, match = CORRUPTIONS[case]
    corrupt(path, ckpts["other"])
    before = at_home(subject, ckpts)
    with pytest.raises(CheckpointError, match=match) as info:
        subject.load_checkpoint(path)
    assert repr(path) in str(info.value)  # the message names the checkpoint (and, by `match`, the file)
    assert_same(full_state(subject), before)
    with pytest.raises(CheckpointError):
        subject.learn(resume_from_checkpoint=path)
    assert_same(full_state(subject), before)
    assert not os.path.exists(tmp_path / "pwned")


def as_format_1(with_sizes):
    def corrupt(path, other):
        state = json.load(open(os.path.join(path, "state.json")))
        state["format_version"] = 1
        state["files"] = {k: v["bytes"] for k, v in state["files"].items()} if with_sizes else {}
        json.dump(state, open(os.path.join(path, "state.json"), "w"))
    return corrupt


def hard_links(path, other):
    for rel in FILES:
        os.remove(os.path.join(path, rel))
        os.link(os.path.join(other, rel), os.path.join(path, rel))


EXACT = {
    "an untouched copy": lambda path, good: None,
    "an unknown key in state.json": lambda path, good: edit_json(set_key("written_by", "a newer version"))(path, good),
    "hard links to the same files": hard_links,
    "format 1 (sizes, no digests)": as_format_1(with_sizes=True),
    "format 1 without file records": as_format_1(with_sizes=False),
}


@pytest.mark.parametrize("case", list(EXACT))
def test_intact_checkpoints_restore_the_exact_state(subject, ckpts, tmp_path, case):
    path = str(tmp_path / "ck")
    shutil.copytree(ckpts["good"], path)
    EXACT[case](path, ckpts["good"])
    at_home(subject, ckpts)
    subject.load_checkpoint(ckpts["good"])
    expected = full_state(subject)
    at_home(subject, ckpts)
    subject.load_checkpoint(path)
    assert_same(full_state(subject), expected)
    saved = torch.load(os.path.join(ckpts["good"], "optim.pt"), weights_only=True)
    assert_same(expected["optimizers"], saved["optimizers"])  # and that state is the saved one


def test_format_1_checkpoints_are_still_checked_for_links_and_contents(subject, ckpts, tmp_path):
    path = str(tmp_path / "ck")
    shutil.copytree(ckpts["good"], path)
    as_format_1(with_sizes=True)(path, None)
    link_to_other("optim.pt")(path, ckpts["other"])
    before = at_home(subject, ckpts)
    with pytest.raises(CheckpointError, match="optim.pt is a symlink"):
        subject.load_checkpoint(path)
    os.remove(os.path.join(path, "optim.pt"))
    shutil.copyfile(os.path.join(ckpts["good"], "optim.pt"), os.path.join(path, "optim.pt"))
    opt_state(set_key("exp_avg", torch.tensor(0.5)))(path, None)  # rehash writes digests: back to sizes
    as_format_1(with_sizes=True)(path, None)
    with pytest.raises(CheckpointError, match=r"exp_avg of parameter 0 is \(\)"):
        subject.load_checkpoint(path)
    assert_same(full_state(subject), before)


def test_state_json_records_a_sha256_per_file(ckpts):
    state = json.load(open(os.path.join(ckpts["good"], "state.json")))
    assert read_checkpoint_metadata(ckpts["good"])["format_version"] == 2
    assert sorted(state["files"]) == sorted(FILES)
    for rel, record in state["files"].items():
        blob = open(os.path.join(ckpts["good"], rel), "rb").read()
        assert record == {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}


def test_a_whole_checkpoint_of_another_run_loads_as_that_run_and_is_refused_in_this_runs_directory(
        subject, ckpts, tmp_path):
    """Files and state.json swapped together are another run's checkpoint: it is what it says it is (its run
    id comes with it), and a checkpoint_dir of this run refuses it."""
    d = tmp_path / "run"
    d.mkdir()
    shutil.copytree(ckpts["good"], d / "checkpoint-1")
    shutil.copytree(ckpts["other"], d / "checkpoint-2")
    assert read_checkpoint_metadata(d / "checkpoint-2")["run_id"] != read_checkpoint_metadata(ckpts["good"])["run_id"]
    before = at_home(subject, ckpts)
    with pytest.raises(CheckpointError, match="holds checkpoints of another run"):
        subject.learn(resume_from_checkpoint=str(d / "checkpoint-1"), checkpoint_dir=str(d))
    assert_same(full_state(subject), before)


def test_a_file_replaced_after_its_digest_was_checked_is_refused(subject, ckpts, tmp_path, monkeypatch):
    """Weights are memory-mapped from their path after the digest check: a file put in place in between is caught."""
    import learners.checkpointing.checkpoint as checkpoint_module

    path = str(tmp_path / "ck")
    shutil.copytree(ckpts["good"], path)
    intruder = str(tmp_path / "intruder.safetensors")
    shutil.copyfile(os.path.join(ckpts["other"], "models", "agent_0.safetensors"), intruder)
    before = at_home(subject, ckpts)
    read = checkpoint_module.read_weights

    def replace_then_read(name, file, module):
        if name == "agent_0":
            os.replace(intruder, file)
        return read(name, file, module)

    monkeypatch.setattr(checkpoint_module, "read_weights", replace_then_read)
    with pytest.raises(CheckpointError, match="models/agent_0.safetensors was replaced or changed while loading"):
        subject.load_checkpoint(path)
    assert_same(full_state(subject), before)
