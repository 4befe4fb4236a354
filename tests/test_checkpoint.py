"""Training checkpoints: exact resume in a fresh process, atomic saves under SIGKILL, safe and validated
loading, retention, ownership, wandb identity and stateful callbacks.

The learners here are tiny (0.2M-parameter Qwen2, 2-4 prompts, 4 new tokens, 2 generations), so the
whole file runs in well under a minute on a CPU; most of the time is the two child processes' imports.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import warnings

import pytest
import torch
import transformers
from datasets import Dataset
from procs import child_env
from safetensors.torch import load_file
from transformers import AutoTokenizer

import learners
import learners.checkpointing.atomic as atomic_mod
import learners.checkpointing.rng as rng_mod
from learners import CheckpointError, InexactResumeWarning, read_checkpoint_metadata
from learners.checkpointing.manager import CheckpointManager
from learners.checkpointing.run_lock import LOCK_FILE
from learners.reinforce import MAGRPO, MAGRPOConfig

HERE = os.path.dirname(os.path.abspath(__file__))
FAST = dict(num_generations=2, max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None, eval_interval=0,
            verbose=False, rollout_buffer_size=2, agent_learning_rate=1e-2)


# ----- shared by this process and the child processes (which import this module) -------------------


def space_reward(first, second):
    return [sum(ch.isspace() for ch in a + b) / max(len(a + b), 1) for a, b in zip(first, second)]


class Counter:
    """A stateful callback: counts rollouts and sums the rewards it saw."""

    def __init__(self):
        self.steps, self.reward = 0, 0.0

    def on_step_end(self, learner, metrics):
        self.steps += 1
        self.reward += metrics["train/reward_mean"]

    def state_dict(self):
        return {"steps": self.steps, "reward": self.reward}

    def load_state_dict(self, state):
        self.steps, self.reward = state["steps"], state["reward"]


class OtherMAGRPO(MAGRPO):
    """Same algorithm, another learner class: its checkpoints must not load into MAGRPO."""


def make(model_dir, epochs=2, n=4, cls=MAGRPO, callbacks=None, num_agents=2, wandb_config=None, tokenizer=None,
         **cfg):
    data = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(n)])
    return cls(agent_model=model_dir, num_agents=num_agents, reward_func=space_reward, train_dataset=data,
               callbacks=callbacks, wandb_config=wandb_config, tokenizer=tokenizer,
               args=MAGRPOConfig(num_train_epochs=epochs, **{**FAST, **cfg}))


def run_child(script: str, *args: str, cwd: str) -> subprocess.Popen:
    """`python -c script args` in a fresh interpreter that can import this module, with this process's
    thread count (float reductions depend on it); stderr goes to cwd/stderr.txt."""
    env = child_env(PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(os.path.join(cwd, "stderr.txt"), "w") as err:
        return subprocess.Popen([sys.executable, "-c", script, *args], env=env, cwd=cwd, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True)


# ----- helpers ------------------------------------------------------------------------------------


def weights(learner):
    return {f"{i}.{k}": v.detach().clone() for i, m in enumerate(learner.agents) for k, v in m.state_dict().items()}


def assert_weights_equal(a, b):
    assert a.keys() == b.keys()
    bad = [k for k in a if not torch.equal(a[k], b[k])]
    assert not bad, f"{len(bad)} tensors differ, e.g. {bad[:3]}"


def saved_state(path):
    """Everything a checkpoint holds, loaded the safe way, minus what legitimately differs between runs."""
    models = {n: load_file(os.path.join(path, "models", n)) for n in sorted(os.listdir(os.path.join(path, "models")))}
    pt = {n: torch.load(os.path.join(path, n), weights_only=True) for n in ("optim.pt", "rng.pt", "callbacks.pt")}
    meta = json.load(open(os.path.join(path, "state.json")))
    return {"models": models, **pt, "progress": meta["progress"]}


def assert_same(a, b, where="state"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, sorted(a)[:5], sorted(b)[:5])
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


# ----- atomic saves (a save killed with SIGKILL: at the end of the file) --------------------------------


def test_a_failed_save_over_an_existing_checkpoint_keeps_it(tiny_dir, tmp_path, monkeypatch):
    learner = make(tiny_dir, epochs=1, n=2)
    learner.learn()
    path = learner.save_checkpoint(str(tmp_path / "ck"))
    before = saved_state(path)
    learner.epoch = 7

    def boom():
        raise RuntimeError("disk full")

    monkeypatch.setattr(rng_mod, "capture_rng", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        learner.save_checkpoint(path)
    assert os.listdir(tmp_path) == ["ck"]  # the staging dir is removed
    assert_same(saved_state(path), before)
    monkeypatch.undo()
    learner.save_checkpoint(path)  # replaced atomically (renameat2 RENAME_EXCHANGE on Linux)
    assert read_checkpoint_metadata(path)["progress"]["epoch"] == 7 and os.listdir(tmp_path) == ["ck"]
    monkeypatch.setattr(atomic_mod, "exchange", lambda a, b: False)  # the fallback: old one aside, then rename
    learner.epoch = 8
    learner.save_checkpoint(path)
    assert read_checkpoint_metadata(path)["progress"]["epoch"] == 8 and os.listdir(tmp_path) == ["ck"]


# ----- save_checkpoint / load_checkpoint methods -------------------------------------------------------


def test_save_and_load_checkpoint_methods(tiny_dir, tmp_path):
    learner = make(tiny_dir, epochs=1, n=2)
    learner.learn()
    path = learner.save_checkpoint(str(tmp_path / "snap"))
    assert path == str(tmp_path / "snap")
    saved = weights(learner)
    rng = torch.get_rng_state()
    learner.args.num_train_epochs = 2
    learner.learn()  # moves on
    assert learner.epoch == 2 and any(not torch.equal(saved[k], v) for k, v in weights(learner).items())
    progress = learner.load_checkpoint(path)
    assert progress == {"epoch": 1, "batch_in_epoch": 0, "rollouts_done": 1, "env_steps": 4}
    assert (learner.epoch, learner.rollouts_done) == (1, 1)
    assert_weights_equal(weights(learner), saved)
    assert torch.equal(torch.get_rng_state(), rng)
    # The exported model still works after a load; a non-checkpoint directory is never overwritten.
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a checkpoint"):
        learner.save_checkpoint(str(tmp_path / "notes"))
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="not a directory"):
        learner.save_checkpoint(str(tmp_path / "file"))


def test_reference_models_are_saved_too(tiny_dir, tmp_path):
    learner = make(tiny_dir, epochs=1, n=2, reference_kl_enabled=True)
    learner.learn()
    path = learner.save_checkpoint(str(tmp_path / "ck"))
    assert sorted(os.listdir(os.path.join(path, "models"))) == [
        "agent_0.safetensors", "agent_1.safetensors", "reference_0.safetensors", "reference_1.safetensors"]
    fresh = make(tiny_dir, epochs=1, n=2, reference_kl_enabled=True)
    with torch.no_grad():
        next(fresh.reference_models[0].parameters()).add_(1.0)
    fresh.load_checkpoint(path)
    for a, b in zip(learner.reference_models[0].parameters(), fresh.reference_models[0].parameters()):
        assert torch.equal(a, b)


# ----- corrupt and foreign checkpoints fail cleanly, before any mutation -----------------------------------


@pytest.fixture(scope="module")
def trained_ckpt(tiny_dir, tmp_path_factory):
    learner = make(tiny_dir, epochs=1, n=2, callbacks=[Counter()])
    learner.learn()
    return learner.save_checkpoint(str(tmp_path_factory.mktemp("trained") / "checkpoint-1"))


def _edit_state(**changes):
    def edit(path):
        state = json.load(open(os.path.join(path, "state.json")))
        state.update(changes)
        json.dump(state, open(os.path.join(path, "state.json"), "w"))
    return edit


# Corrupt, swapped and malformed checkpoints (files, digests, states): tests/test_checkpoint_integrity.py.


def _foreign(tiny_dir, tiny_llama_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    tok.chat_template = "{{ messages[0]['content'] }}"
    return {
        "other learner class": (lambda: make(tiny_dir, epochs=1, n=2, cls=OtherMAGRPO, callbacks=[Counter()]),
                                "written by learners.reinforce.MAGRPO, not test_checkpoint.OtherMAGRPO"),
        "other agent count": (lambda: make(tiny_dir, epochs=1, n=2, num_agents=3, callbacks=[Counter()]),
                              "has 2 agents, this learner 3"),
        "other tokenizer": (lambda: make(tiny_dir, epochs=1, n=2, tokenizer=tok, callbacks=[Counter()]),
                            "different tokenizers"),
        "other model": (lambda: MAGRPO(agents=[tiny_dir, tiny_llama_dir], reward_func=space_reward,
                                       train_dataset=[{"prompt": f"Question {i}:"} for i in range(2)],
                                       callbacks=[Counter()], args=MAGRPOConfig(num_train_epochs=1, **FAST)),
                        "different tokenizers"),
        "changed seed": (lambda: make(tiny_dir, epochs=1, n=2, seed=1, callbacks=[Counter()]),
                         r"different config \(seed: saved 0, now 1\)"),
        "changed group size": (lambda: make(tiny_dir, epochs=1, n=2, num_generations=4, callbacks=[Counter()]),
                               "num_generations"),
        "other dataset": (lambda: make(tiny_dir, epochs=1, n=3, callbacks=[Counter()]), "different data"),
        "no callback": (lambda: make(tiny_dir, epochs=1, n=2), r"callbacks\[0\] \(Counter\)"),
    }


@pytest.mark.parametrize("case", ["other learner class", "other agent count", "other tokenizer", "other model",
                                  "changed seed", "changed group size", "other dataset", "no callback"])
def test_foreign_checkpoints_raise_before_mutation(tiny_dir, tiny_llama_dir, trained_ckpt, case):
    build, match = _foreign(tiny_dir, tiny_llama_dir)[case]
    learner = build()
    before = (weights(learner), learner.epoch, learner.run_id, torch.get_rng_state())
    with pytest.raises(CheckpointError, match=match):
        learner.load_checkpoint(trained_ckpt)
    assert_weights_equal(weights(learner), before[0])
    assert (learner.epoch, learner.run_id) == before[1:3] and torch.equal(torch.get_rng_state(), before[3])


def test_portable_fields_may_change(tiny_dir, trained_ckpt, tmp_path):
    learner = make(tiny_dir, epochs=5, n=2, callbacks=[Counter()], verbose=True, logging_steps=3,
                   output_dir=str(tmp_path / "out"), eval_num_samples=1)
    assert learner.load_checkpoint(trained_ckpt)["epoch"] == 1
    assert learner.callbacks[0].steps == 1


def _edit_config(path, drop=(), **add):
    state = json.load(open(os.path.join(path, "state.json")))
    config = {k: v for k, v in state["config"].items() if k not in drop}
    _edit_state(config={**config, **add})(path)


def test_a_config_field_added_after_the_save_counts_as_unchanged_at_its_default(tiny_dir, trained_ckpt, tmp_path):
    path = str(tmp_path / "ck")
    shutil.copytree(trained_ckpt, path)
    _edit_config(path, drop=("reference_kl_coef", "clip_range"))  # as if written before these fields existed
    assert make(tiny_dir, epochs=1, n=2, callbacks=[Counter()]).load_checkpoint(path)["epoch"] == 1
    learner = make(tiny_dir, epochs=1, n=2, callbacks=[Counter()], clip_range=0.3)  # not the default: a change
    with pytest.raises(CheckpointError, match=r"different config \(clip_range: not saved, now 0.3\)"):
        learner.load_checkpoint(path)


def test_a_saved_config_field_that_no_longer_exists_is_ignored(tiny_dir, trained_ckpt, tmp_path):
    path = str(tmp_path / "ck")
    shutil.copytree(trained_ckpt, path)
    _edit_config(path, retired_option=3, old_mode="fast")  # fields a later version of the config dropped
    learner = make(tiny_dir, epochs=1, n=2, callbacks=[Counter()])
    assert learner.load_checkpoint(path)["epoch"] == 1 and learner.callbacks[0].steps == 1


def test_checkpoints_record_their_numerics_and_a_resume_under_others_warns_and_continues(tiny_dir, trained_ckpt,
                                                                                       tmp_path, monkeypatch):
    numerics = read_checkpoint_metadata(trained_ckpt)["numerics"]
    assert numerics == {
        "torch_num_threads": torch.get_num_threads(), "device_types": ["cpu"], "dtypes": ["torch.float32"],
        "mixed_precision": None, "deterministic_algorithms": False, "torch_version": torch.__version__,
        "transformers_version": transformers.__version__, "peft_version": importlib.metadata.version("peft"),
    }
    with warnings.catch_warnings():  # the same settings: no warning
        warnings.simplefilter("error", InexactResumeWarning)
        make(tiny_dir, epochs=2, n=2, callbacks=[Counter()]).learn(resume_from_checkpoint=trained_ckpt)

    path = str(tmp_path / "ck")
    shutil.copytree(trained_ckpt, path)
    _edit_state(numerics={**numerics, "torch_num_threads": numerics["torch_num_threads"] + 1,
                          "transformers_version": "0.0.1"})(path)
    learner = make(tiny_dir, epochs=2, n=2, callbacks=[Counter()], mixed_precision="bf16")  # autocast differs too
    with pytest.warns(InexactResumeWarning) as caught:
        learner.learn(resume_from_checkpoint=path)
    assert len(caught) == 1
    message = str(caught[0].message)
    for name in ("torch_num_threads", "transformers_version", "mixed_precision"):
        assert name in message
    assert "dtypes" not in message and "peft_version" not in message
    assert "bit-identical to the uninterrupted run only under the recorded settings" in message
    assert learner.epoch == 2  # it continued to the end

    del numerics  # a checkpoint written before numerics were recorded resumes without a warning
    _edit_state(numerics=None)(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        make(tiny_dir, epochs=2, n=2, callbacks=[Counter()]).learn(resume_from_checkpoint=path)


# ----- ownership, retention, intervals, arguments ---------------------------------------------------------


def test_refuses_a_directory_with_another_runs_checkpoints(tiny_dir, tmp_path):
    d = str(tmp_path / "ck")
    first = make(tiny_dir, epochs=1, n=2)
    first.learn(checkpoint_dir=d)
    second = make(tiny_dir, epochs=1, n=2)
    before = weights(second)
    with pytest.raises(CheckpointError, match="holds checkpoints of another run"):
        second.learn(checkpoint_dir=d)
    assert_weights_equal(weights(second), before)
    # Resuming the run that owns them is fine, and continues its numbering.
    third = make(tiny_dir, epochs=2, n=2)
    third.learn(resume_from_checkpoint=os.path.join(d, "checkpoint-1"), checkpoint_dir=d)
    assert sorted(os.listdir(d)) == ["checkpoint-1", "checkpoint-2"] and third.run_id == first.run_id
    # Resuming run 1 into a directory of yet another run is refused before anything is loaded.
    other = str(tmp_path / "other")
    make(tiny_dir, epochs=1, n=2).learn(checkpoint_dir=other)
    fourth = make(tiny_dir, epochs=2, n=2)
    before = weights(fourth)
    with pytest.raises(CheckpointError, match="another run"):
        fourth.learn(resume_from_checkpoint=os.path.join(d, "checkpoint-1"), checkpoint_dir=other)
    assert_weights_equal(weights(fourth), before) and fourth.epoch == 0


def test_retention_deletes_only_this_runs_oldest_checkpoints(tiny_dir, tmp_path):
    d = tmp_path / "ck"
    foreign = make(tiny_dir, epochs=1, n=2)
    foreign.learn()
    foreign_path = foreign.save_checkpoint(str(tmp_path / "foreign"))

    class Intruder:  # another process writes into the directory while this run trains
        def on_epoch_end(self, learner):
            if learner.epoch == 1:
                shutil.copytree(foreign_path, d / "checkpoint-100")

    learner = make(tiny_dir, epochs=4, n=2, callbacks=[Intruder()])
    learner.learn(checkpoint_dir=str(d), checkpoint_total_limit=2)
    assert sorted(os.listdir(d)) == ["checkpoint-100", "checkpoint-3", "checkpoint-4"]
    # Resuming from an earlier snapshot of a run: its abandoned later snapshots go first.
    d2 = tmp_path / "ck2"
    make(tiny_dir, epochs=3, n=2).learn(checkpoint_dir=str(d2))
    resumed = make(tiny_dir, epochs=2, n=2)
    resumed.learn(resume_from_checkpoint=str(d2 / "checkpoint-1"), checkpoint_dir=str(d2), checkpoint_total_limit=1)
    assert os.listdir(d2) == ["checkpoint-2"]
    assert read_checkpoint_metadata(d2 / "checkpoint-2")["progress"]["epoch"] == 2


def test_interval_final_checkpoint_and_off_by_default(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    learner = make(tiny_dir, epochs=3, n=2)
    learner.learn()
    assert os.listdir(tmp_path) == []  # no checkpoint I/O without checkpoint_dir
    d = tmp_path / "ck"
    make(tiny_dir, epochs=3, n=2).learn(checkpoint_dir=str(d), checkpoint_interval=2)
    epochs = {n: read_checkpoint_metadata(d / n)["progress"]["epoch"] for n in os.listdir(d)}
    assert epochs == {"checkpoint-1": 2, "checkpoint-2": 3}  # every 2nd epoch, and the final one


def test_argument_errors(tiny_dir, tmp_path, trained_ckpt):
    learner = make(tiny_dir, epochs=1, n=2, callbacks=[Counter()])
    for kwargs, match in [
        (dict(checkpoint_dir=str(tmp_path), checkpoint_interval=0), "checkpoint_interval must be a positive int"),
        (dict(checkpoint_dir=str(tmp_path), checkpoint_interval=True), "checkpoint_interval"),
        (dict(checkpoint_dir=str(tmp_path), checkpoint_total_limit=0), "checkpoint_total_limit"),
        (dict(checkpoint_dir=str(tmp_path), checkpoint_steps=1.5), "checkpoint_steps"),
        (dict(checkpoint_steps=2), "checkpoint_steps=2 has no effect without checkpoint_dir"),
        (dict(checkpoint_total_limit=2), "without checkpoint_dir"),
    ]:
        with pytest.raises(ValueError, match=match):
            learner.learn(**kwargs)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        learner.learn(checkpoint_dir=str(tmp_path / "file"))
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        learner.learn(resume_from_checkpoint=str(tmp_path / "nowhere"))
    shorter = make(tiny_dir, epochs=1, n=2, callbacks=[Counter()])
    shorter.args.num_train_epochs = 1
    two = str(tmp_path / "two")
    shutil.copytree(trained_ckpt, two)
    state = json.load(open(os.path.join(two, "state.json")))
    state["progress"]["epoch"] = 2
    json.dump(state, open(os.path.join(two, "state.json"), "w"))
    with pytest.raises(CheckpointError, match="completed 2 epochs but num_train_epochs=1"):
        shorter.learn(resume_from_checkpoint=two)
    before = {k: v.clone() for k, v in shorter.agents[0].state_dict().items()}
    with pytest.raises(CheckpointError, match="completed 1 epochs and num_train_epochs=1: the run is finished.*"
                                              "pass more than 1"):
        shorter.learn(resume_from_checkpoint=trained_ckpt)  # a finished run says so, and loads nothing
    assert all(torch.equal(v, before[k]) for k, v in shorter.agents[0].state_dict().items())
    assert isinstance(CheckpointManager(learner, None), CheckpointManager)


def test_unsafe_callback_state_fails_at_save_time(tiny_dir, tmp_path):
    class Bad(Counter):
        def state_dict(self):
            return {"obj": Counter()}

    learner = make(tiny_dir, epochs=1, n=2, callbacks=[Bad()])
    with pytest.raises(TypeError, match=r"callbacks\[0\] \(Bad\).state_dict\(\) must hold only tensors"):
        learner.save_checkpoint(str(tmp_path / "ck"))
    assert os.listdir(tmp_path) == []


# ----- wandb identity (offline) ------------------------------------------------------------------------------


def test_wandb_identity_round_trips_and_the_seed_recipe_merges_it(tiny_dir, tmp_path):
    wandb_config = {"mode": "offline", "dir": str(tmp_path / "wandb"), "project": "t"}
    d = tmp_path / "ck"
    first = make(tiny_dir, epochs=1, n=2, wandb_config=dict(wandb_config))
    first.learn(checkpoint_dir=str(d))
    identity = read_checkpoint_metadata(d / "checkpoint-1")["wandb"]
    assert isinstance(identity["id"], str) and identity["project"] == "t"
    assert set(identity) <= {"id", "project", "entity", "name"}
    # Kept for a manual save after the run has closed.
    assert read_checkpoint_metadata(first.save_checkpoint(str(tmp_path / "manual")))["wandb"] == identity

    # The seed's recipe, as written, with our names.
    checkpoint = str(d / "checkpoint-1")
    identity = read_checkpoint_metadata(checkpoint)["wandb"]
    if identity and "id" not in wandb_config and "resume" not in wandb_config:
        wandb_config = {**wandb_config, **identity, "resume": "allow"}
    assert wandb_config["id"] == identity["id"] and wandb_config["resume"] == "allow"
    resumed = make(tiny_dir, epochs=2, n=2, wandb_config=wandb_config)
    resumed.learn(resume_from_checkpoint=checkpoint, checkpoint_dir=str(d))
    assert read_checkpoint_metadata(d / "checkpoint-2")["wandb"]["id"] == identity["id"]

    # Without the recipe, learn(resume_from_checkpoint=) continues the saved run id by itself.
    plain = make(tiny_dir, epochs=2, n=2, wandb_config={"mode": "offline", "dir": str(tmp_path / "wandb"),
                                                       "project": "t"})
    plain.learn(resume_from_checkpoint=checkpoint, checkpoint_dir=str(tmp_path / "ck2"))
    assert read_checkpoint_metadata(tmp_path / "ck2" / "checkpoint-2")["wandb"]["id"] == identity["id"]

    # An explicit id wins over the saved identity.
    explicit = make(tiny_dir, epochs=2, n=2, wandb_config={"mode": "offline", "dir": str(tmp_path / "wandb"),
                                                          "project": "t", "id": "explicit01"})
    explicit.learn(resume_from_checkpoint=checkpoint, checkpoint_dir=str(tmp_path / "ck3"))
    assert read_checkpoint_metadata(tmp_path / "ck3" / "checkpoint-2")["wandb"]["id"] == "explicit01"


# ----- one child process: exact resumes, then a save killed with SIGKILL (last: its imports overlap the rest) ---

CHILD_SCRIPT = """
import json, sys, time
import learners.checkpointing.rng as ck
from test_checkpoint import Counter, make
jobs, kill = json.loads(sys.stdin.readline())  # sent once the parent has written the checkpoints
for job in jobs:  # resume each checkpoint in this fresh process, then save the final state
    learner = make(job["model"], epochs=job["epochs"], callbacks=[Counter()])
    learner.learn(resume_from_checkpoint=job["resume"], checkpoint_dir=job.get("dir"))
    learner.save_checkpoint(job["out"])
    print("done", job["name"], flush=True)
calls, capture = [], ck.capture_rng
def slow_capture():  # called between writing optim.pt and rng.pt
    calls.append(1)
    if len(calls) == 2:  # the second checkpoint: models and optim.pt are in its staging dir
        print("saving", flush=True)
        time.sleep(300)
    return capture()
ck.capture_rng = slow_capture
make(kill["model"], epochs=2).learn(checkpoint_dir=kill["dir"])
print("not killed", flush=True)
"""

# name -> (run, checkpoint, progress at the checkpoint)
RESUMES = {
    "epoch-boundary": ("A", "checkpoint-2", {"epoch": 1, "batch_in_epoch": 0, "rollouts_done": 2}),
    "mid-epoch-1": ("A", "checkpoint-1", {"epoch": 0, "batch_in_epoch": 1, "rollouts_done": 1}),
    "mid-epoch-2": ("A", "checkpoint-3", {"epoch": 1, "batch_in_epoch": 1, "rollouts_done": 3}),
    "raised-epochs": ("B", "checkpoint-1", {"epoch": 1, "batch_in_epoch": 0, "rollouts_done": 2}),
}


@pytest.fixture(scope="module", autouse=True)
def child(tmp_path_factory):
    """The fresh process, started with the module so that its imports overlap the tests above; `runs`
    gives it work. Killed at the end if it is still there (e.g. when `runs` was deselected)."""
    cwd = tmp_path_factory.mktemp("child")
    proc = run_child(CHILD_SCRIPT, cwd=str(cwd))
    proc.cwd = cwd
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if not pipe.closed:
            pipe.close()


@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory, child):
    """A: 2 epochs, checkpoints every epoch and every rollout; B: 1 epoch (resumed to 2 in the child);
    C: 2 epochs without checkpoints. One child process (one import of torch and transformers) resumes
    each of RESUMES to the end of epoch 2, then trains a 2-epoch run and is SIGKILLed in the middle
    of writing its second checkpoint."""
    root = tmp_path_factory.mktemp("runs")
    lines = []
    try:
        a = make(tiny_dir, epochs=2, callbacks=[Counter()])
        a.learn(checkpoint_dir=str(root / "A"), checkpoint_steps=1)
        b = make(tiny_dir, epochs=1, callbacks=[Counter()])
        b.learn(checkpoint_dir=str(root / "B"))
        c = make(tiny_dir, epochs=2)
        c.learn()
        jobs = [{"name": name, "model": tiny_dir, "epochs": 2, "resume": str(root / run / ck),
                 "out": str(root / name), **({"dir": str(root / "B")} if run == "B" else {})}
                for name, (run, ck, _) in RESUMES.items()]
        kill = {"model": tiny_dir, "dir": str(root / "killed")}
        child.stdin.write(json.dumps([jobs, kill]) + "\n")
        child.stdin.close()
        for line in child.stdout:
            lines.append(line.strip())
            if line.strip() == "saving":
                os.kill(child.pid, signal.SIGKILL)
                break
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    child.stdout.close()
    stderr = (child.cwd / "stderr.txt").read_text()[-3000:]
    assert lines[-1:] == ["saving"] and child.returncode == -signal.SIGKILL, (lines, stderr)
    assert lines[:-1] == [f"done {name}" for name in RESUMES]
    return {"root": root, "A": a, "B": b, "C": c}


def test_checkpoints_at_epochs_steps_and_end(runs):
    root = runs["root"]
    # Every rollout (checkpoint_steps=1) and every epoch; the step save at an epoch's last rollout is
    # skipped because the epoch save follows at once.
    assert sorted(os.listdir(root / "A")) == [f"checkpoint-{i}" for i in (1, 2, 3, 4)]
    progress = [read_checkpoint_metadata(root / "A" / f"checkpoint-{i}")["progress"] for i in (1, 2, 3, 4)]
    assert [(p["epoch"], p["batch_in_epoch"], p["rollouts_done"]) for p in progress] == [
        (0, 1, 1), (1, 0, 2), (1, 1, 3), (2, 0, 4)]
    meta = read_checkpoint_metadata(root / "A" / "checkpoint-4")
    assert meta["sequence"] == 4 and meta["run_id"] == runs["A"].run_id and meta["learner"] == "MAGRPO"
    assert meta["learner_class"] == "learners.reinforce.MAGRPO" and meta["num_agents"] == 2
    assert meta["wandb"] is None and meta["progress"]["env_steps"] == runs["A"].env_steps
    assert learners.checkpoint.read_checkpoint_metadata is read_checkpoint_metadata
    assert read_checkpoint_metadata(root / "A" / "checkpoint-4" / "state.json") == meta
    assert sorted(os.listdir(root / "A" / "checkpoint-4")) == ["callbacks.pt", "models", "optim.pt", "rng.pt",
                                                               "state.json"]
    assert sorted(os.listdir(root / "A" / "checkpoint-4" / "models")) == ["agent_0.safetensors", "agent_1.safetensors"]
    assert not [n for n in os.listdir(root / "A") if n.startswith(".")]  # no staging left behind


def test_checkpointing_does_not_change_training(runs):
    assert_weights_equal(weights(runs["A"]), weights(runs["C"]))
    # B stopped after 1 epoch: its weights are A's after epoch 1 (A's checkpoint-2 was written between
    # mid-epoch saves, which must not have disturbed anything either).
    a1 = saved_state(runs["root"] / "A" / "checkpoint-2")
    b1 = saved_state(runs["root"] / "B" / "checkpoint-1")
    assert_same(a1, b1)


@pytest.mark.parametrize("name", list(RESUMES))
def test_resume_in_a_fresh_process_is_bit_identical(runs, name):
    """Weights, Adam moments, scheduler, RNG states, callback state and counters all match the run that
    was never interrupted (A, 2 epochs): at an epoch boundary, mid-epoch, and after raising
    num_train_epochs from 1 to 2 (B)."""
    root = runs["root"]
    run, ck, at = RESUMES[name]
    assert {k: read_checkpoint_metadata(root / run / ck)["progress"][k] for k in at} == at
    # Its precondition: the child ran under the numerics settings of this process (same thread count).
    assert read_checkpoint_metadata(root / name)["numerics"] == read_checkpoint_metadata(root / run / ck)["numerics"]
    assert read_checkpoint_metadata(root / name)["numerics"]["torch_num_threads"] == torch.get_num_threads()
    resumed, reference = saved_state(root / name), saved_state(root / "A" / "checkpoint-4")
    assert_same(resumed, reference)
    assert torch.load(root / name / "callbacks.pt", weights_only=True)["states"] == [
        {"steps": 4, "reward": runs["A"].callbacks[0].reward}]
    meta = read_checkpoint_metadata(root / name)
    assert meta["run_id"] == read_checkpoint_metadata(root / run / ck)["run_id"]  # the same run continues
    if name == "raised-epochs":  # resumed with checkpoint_dir=B: numbering continues in the same dir
        assert sorted(os.listdir(root / "B")) == ["checkpoint-1", "checkpoint-2"]
        assert read_checkpoint_metadata(root / "B" / "checkpoint-2")["sequence"] == 2


def test_sigkill_during_a_save_leaves_the_previous_checkpoint_loadable(tiny_dir, runs):
    d = runs["root"] / "killed"
    visible = [n for n in os.listdir(d) if not n.startswith(".")]
    staging = [n for n in os.listdir(d) if n.startswith(".") and n != LOCK_FILE]  # the dead run's lock stays
    assert visible == ["checkpoint-1"] and len(staging) == 1
    assert sorted(os.listdir(d / staging[0])) == ["models", "optim.pt"]  # killed half-way through
    assert read_checkpoint_metadata(d / "checkpoint-1")["progress"]["epoch"] == 1
    # Resuming into the same directory loads it, removes the dead staging dir and finishes the run
    # exactly like the uninterrupted run C.
    learner = make(tiny_dir, epochs=2)
    learner.learn(resume_from_checkpoint=str(d / "checkpoint-1"), checkpoint_dir=str(d))
    assert sorted(os.listdir(d)) == ["checkpoint-1", "checkpoint-2"]
    assert_weights_equal(weights(learner), weights(runs["C"]))


# ----- torchrun (opt-in: pytest -m slow) -------------------------------------------------------------------

DDP_SCRIPT = """
import hashlib, json, sys, torch
from test_checkpoint import Counter, make
model, root = sys.argv[1], sys.argv[2]
def report(name, learner):
    weights = b"".join(p.detach().numpy().tobytes() for a in learner.agents for p in a.parameters())
    with open(f"{root}/{name}-rank{learner.dist.rank}.json", "w") as f:
        json.dump({"name": name, "rank": learner.dist.rank, "run_id": learner.run_id,
                   "steps": learner.callbacks[0].steps, "weights": hashlib.sha256(weights).hexdigest(),
                   "rng": torch.get_rng_state().tolist()}, f)
if sys.argv[3] == "full":
    learner = make(model, epochs=2, callbacks=[Counter()])
    learner.learn(checkpoint_dir=root + "/full", checkpoint_steps=1)
    report("full", learner)
else:
    for ck in ("checkpoint-1", "checkpoint-2"):
        learner = make(model, epochs=2, callbacks=[Counter()])
        learner.learn(resume_from_checkpoint=root + "/full/" + ck, checkpoint_dir=root + "/" + ck)
        report(ck, learner)
"""


@pytest.mark.slow
def test_torchrun_two_ranks_resume_exactly(tiny_dir, tmp_path):
    """Under torchrun (2 CPU ranks, gloo) rank 0 writes each checkpoint with every rank's RNG states, all
    ranks share one run id, and resuming (mid-epoch or at an epoch) restores each rank's own streams."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = child_env(PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = {}
    for phase in ("full", "resume"):
        done = subprocess.run([torchrun, "--nproc_per_node", "2", "--no-python", sys.executable, "-c", DDP_SCRIPT,
                               tiny_dir, str(tmp_path), phase],
                              env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    for name in ("full", "checkpoint-1", "checkpoint-2"):
        for rank in (0, 1):
            out[name, rank] = json.loads((tmp_path / f"{name}-rank{rank}.json").read_text())
    assert sorted(os.listdir(tmp_path / "full")) == [f"checkpoint-{i}" for i in (1, 2, 3, 4)]
    rng = torch.load(tmp_path / "full" / "checkpoint-1" / "rng.pt", weights_only=True)
    assert len(rng["ranks"]) == 2 and not torch.equal(rng["ranks"][0]["torch"], rng["ranks"][1]["torch"])
    assert read_checkpoint_metadata(tmp_path / "full" / "checkpoint-1")["run_id"] == out["full", 0]["run_id"]
    assert out["full", 0]["run_id"] == out["full", 1]["run_id"]
    for ck in ("checkpoint-1", "checkpoint-2"):
        for rank in (0, 1):
            assert out[ck, rank] == {**out["full", rank], "name": ck}, (ck, rank)
