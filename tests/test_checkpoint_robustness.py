"""Checkpoints under the conditions of a cluster: a requeued job relaunches the same command and resumes from
the newest complete checkpoint, two runs never share a folder, and a full or unwritable disk stops the run
with a message while the previous checkpoint stays resumable.

Tiny learners (0.2M-parameter Qwen2, 4 prompts, 2 rollouts per epoch, 2 epochs): each test takes seconds.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import warnings

import pytest
from datasets import Dataset

import learners.checkpointing.checkpoint as checkpoint_module
from learners import CheckpointError, read_checkpoint_metadata
from learners.checkpointing.run_lock import LOCK_FILE
from learners.reinforce import MAGRPO, MAGRPOConfig

FAST = dict(num_generations=2, max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None, eval_interval=0,
            verbose=False, rollout_buffer_size=2, agent_learning_rate=1e-2)


def space_reward(first, second):
    return [sum(ch.isspace() for ch in a + b) / max(len(a + b), 1) for a, b in zip(first, second)]


def make(model_dir, epochs=2, callbacks=None, **cfg):
    data = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(4)])
    return MAGRPO(agent_model=model_dir, num_agents=2, reward_func=space_reward, train_dataset=data,
                  callbacks=callbacks, args=MAGRPOConfig(num_train_epochs=epochs, **{**FAST, **cfg}))


def digest(learner):
    """SHA-256 of every trained weight, in order."""
    h = hashlib.sha256()
    for agent in learner.agents:
        for name, tensor in agent.state_dict().items():
            h.update(name.encode())
            h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def rollout_rows(output_dir):
    """(step, reward) of every training row of metrics.jsonl, in file order."""
    with open(os.path.join(output_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [(r["step"], r["train/reward_mean"]) for r in rows if "train/reward_mean" in r]


def visible(directory):
    return sorted(n for n in os.listdir(directory) if not n.startswith("."))


class Killed(Exception):
    """Stands for a SIGKILL: the run stops where it is, without saving."""


class KillAt:
    """Raises once, at the end of rollout `at` (after its metrics are logged, before its checkpoint turn)."""

    fired = False

    def __init__(self, at):
        self.at = at

    def on_step_end(self, learner, metrics):
        if learner.rollouts_done == self.at and not KillAt.fired:
            KillAt.fired = True
            raise Killed(f"killed after rollout {self.at}")


@pytest.fixture(scope="module")
def full(tiny_dir, tmp_path_factory):
    """The uninterrupted run: 2 epochs, a checkpoint every rollout (checkpoint-1 .. checkpoint-4)."""
    root = tmp_path_factory.mktemp("full")
    learner = make(tiny_dir, output_dir=str(root / "out"))
    learner.learn(checkpoint_dir=str(root / "ck"), checkpoint_steps=1)
    assert visible(root / "ck") == [f"checkpoint-{i}" for i in (1, 2, 3, 4)]
    return {"ck": root / "ck", "digest": digest(learner), "rows": rollout_rows(root / "out"),
            "run_id": learner.run_id}


# ----- resume that finds its own place ----------------------------------------------------------------------


def test_latest_resumes_from_the_newest_complete_checkpoint_and_skips_incomplete_ones(tiny_dir, full, tmp_path):
    d = tmp_path / "ck"
    d.mkdir()
    for i in (1, 2, 3):
        shutil.copytree(full["ck"] / f"checkpoint-{i}", d / f"checkpoint-{i}")
    os.remove(d / "checkpoint-3" / "state.json")  # a save whose state.json never came
    shutil.copytree(full["ck"] / "checkpoint-4", d / ".checkpoint-4.tmp-0123456789ab-x1y2")  # a killed save's staging
    shutil.copytree(full["ck"] / "checkpoint-4", d / "checkpoint-9")
    os.remove(d / "checkpoint-9" / "models" / "agent_0.safetensors")  # a deletion that was killed half-way
    learner = make(tiny_dir)
    with pytest.warns(UserWarning) as caught:
        learner.learn(checkpoint_dir=str(d), checkpoint_steps=1, resume_from_checkpoint="latest")
    messages = " ".join(str(w.message) for w in caught)
    for name in ("checkpoint-3", "checkpoint-9", ".checkpoint-4.tmp-"):
        assert name in messages, messages
    assert "state.json is missing" in messages and "agent_0.safetensors is missing" in messages
    # It resumed from checkpoint-2 as that checkpoint's run, and finished exactly like the uninterrupted run.
    assert learner.run_id == full["run_id"] and learner.rollouts_done == 4
    assert digest(learner) == full["digest"]
    # The incomplete checkpoint-3 was replaced by this run's own; the unrelated incomplete one is left alone.
    assert visible(d) == ["checkpoint-1", "checkpoint-2", "checkpoint-3", "checkpoint-4", "checkpoint-9"]
    assert read_checkpoint_metadata(d / "checkpoint-3")["progress"]["rollouts_done"] == 3


def test_true_starts_fresh_without_checkpoints_and_needs_a_checkpoint_dir(tiny_dir, full, tmp_path):
    empty, debris = tmp_path / "empty", tmp_path / "debris"
    empty.mkdir()
    shutil.copytree(full["ck"] / "checkpoint-4", debris / "checkpoint-7")
    os.remove(debris / "checkpoint-7" / "state.json")  # once, such a folder made every later run refuse
    for d in (empty, tmp_path / "missing", debris):
        learner = make(tiny_dir)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            learner.learn(checkpoint_dir=str(d), checkpoint_steps=1, resume_from_checkpoint=True)
        assert learner.run_id != full["run_id"] and digest(learner) == full["digest"]
        assert visible(d) == [f"checkpoint-{i}" for i in (1, 2, 3, 4)] + (["checkpoint-7"] if d == debris else [])
        assert any("ignoring the incomplete checkpoint" in str(w.message) for w in caught) == (d == debris)
    with pytest.raises(ValueError, match="checkpoint_dir, which is not set; pass checkpoint_dir="):
        make(tiny_dir).learn(resume_from_checkpoint=True)


def test_a_requeued_finished_run_loads_its_last_checkpoint_and_trains_no_more(tiny_dir, full, tmp_path):
    d = tmp_path / "ck"
    shutil.copytree(full["ck"], d)
    learner = make(tiny_dir)
    learner.learn(checkpoint_dir=str(d), resume_from_checkpoint=True)
    assert learner.rollouts_done == 4 and digest(learner) == full["digest"]
    assert visible(d) == [f"checkpoint-{i}" for i in (1, 2, 3, 4)]


def test_a_killed_run_relaunched_with_true_matches_the_uninterrupted_one_and_logs_each_rollout_once(
        tiny_dir, full, tmp_path):
    d, out = str(tmp_path / "ck"), str(tmp_path / "out")
    KillAt.fired = False
    command = dict(checkpoint_dir=d, checkpoint_steps=2, resume_from_checkpoint=True)  # saves at rollouts 2 and 4

    def launch():
        learner = make(tiny_dir, output_dir=out, callbacks=[KillAt(3)])
        learner.learn(**command)
        return learner

    with pytest.raises(Killed):
        launch()
    steps = [s for s, _ in rollout_rows(out)]
    assert len(steps) == 3  # rollout 3 was logged after the last checkpoint (rollout 2)
    learner = launch()  # the requeued job: the same command
    assert digest(learner) == full["digest"]
    assert rollout_rows(out) == full["rows"]  # each rollout once, in order, with the uninterrupted run's rewards
    assert len(full["rows"]) == 4
    assert not os.path.exists(os.path.join(d, LOCK_FILE)) and not os.path.exists(os.path.join(out, LOCK_FILE))


def test_retention_deletes_through_a_hidden_name_so_a_killed_deletion_leaves_no_broken_checkpoint(
        tiny_dir, full, tmp_path, monkeypatch):
    d = tmp_path / "ck"
    rmtree = shutil.rmtree

    def killed_while_deleting(path, *args, **kwargs):
        path = str(path)
        if "checkpoint-1" in os.path.basename(path) and os.path.isdir(path):
            os.remove(os.path.join(path, "state.json"))  # the deletion got this far
            raise Killed("killed while deleting")
        return rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", killed_while_deleting)
    with pytest.raises(Killed):
        make(tiny_dir).learn(checkpoint_dir=str(d), checkpoint_steps=1, checkpoint_total_limit=1)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    assert visible(d) == ["checkpoint-2"]  # checkpoint-1 went under a hidden name first
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        learner = make(tiny_dir)
        learner.learn(checkpoint_dir=str(d), checkpoint_steps=1, checkpoint_total_limit=1, resume_from_checkpoint=True)
    assert not [w for w in caught if "incomplete" in str(w.message)]
    assert digest(learner) == full["digest"] and os.listdir(d) == ["checkpoint-4"]  # the trash is gone too


# ----- one run per folder -----------------------------------------------------------------------------------


def lock_of(pid, run_id="other-run", host=None):
    return json.dumps({"run_id": run_id, "host": host or socket.gethostname(), "pid": pid,
                       "started": "2026-01-01T00:00:00+00:00", "token": "t"})


def test_a_second_run_in_a_folder_held_by_a_live_run_refuses_naming_it(tiny_dir, tmp_path):
    d, out = tmp_path / "ck", tmp_path / "out"
    same_checkpoints, same_output = make(tiny_dir), make(tiny_dir, output_dir=str(out))
    refusals = []

    class StartOthers:  # while the first run trains, two more start: one on its checkpoints, one on its output
        def on_step_end(self, learner, metrics):
            if learner.rollouts_done == 1:
                for other, kwargs in ((same_checkpoints, {"checkpoint_dir": str(d)}), (same_output, {})):
                    with pytest.raises(CheckpointError) as info:
                        other.learn(**kwargs)
                    refusals.append(str(info.value))

    first = make(tiny_dir, output_dir=str(out), callbacks=[StartOthers()])
    before = digest(same_checkpoints)
    first.learn(checkpoint_dir=str(d))
    assert len(refusals) == 2
    for message, folder in zip(refusals, (d, out)):
        assert f"{str(folder)!r} is in use by run {first.run_id!r}" in message and f"pid {os.getpid()}" in message
        assert socket.gethostname() in message and "still running: one run per folder" in message
    assert digest(same_checkpoints) == before and same_checkpoints.rollouts_done == 0
    assert visible(d) == ["checkpoint-1", "checkpoint-2"] and LOCK_FILE not in os.listdir(d) + os.listdir(out)


def test_a_lock_file_of_a_live_process_or_another_host_refuses(tiny_dir, tmp_path):
    d = tmp_path / "ck"
    d.mkdir()
    (d / LOCK_FILE).write_text(lock_of(os.getpid()))
    learner = make(tiny_dir)
    with pytest.raises(CheckpointError, match=f"in use by run 'other-run' .*pid {os.getpid()}"):
        learner.learn(checkpoint_dir=str(d))
    (d / LOCK_FILE).write_text(lock_of(12345, host="elsewhere.example"))
    with pytest.raises(CheckpointError, match="on another host.*if that run has ended, delete"):
        learner.learn(checkpoint_dir=str(d))
    assert (d / LOCK_FILE).exists() and learner.rollouts_done == 0 and visible(d) == []


def test_a_stale_lock_of_a_dead_process_is_taken_over(tiny_dir, tmp_path):
    d = tmp_path / "ck"
    d.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (d / LOCK_FILE).write_text(lock_of(dead.pid))
    learner = make(tiny_dir)
    with pytest.warns(UserWarning, match=f"taking over the lock .*pid {dead.pid}"):
        learner.learn(checkpoint_dir=str(d))
    assert visible(d) == ["checkpoint-1", "checkpoint-2"] and not (d / LOCK_FILE).exists()


def test_a_slow_save_never_replaces_another_runs_checkpoint(tiny_dir, full, tmp_path, monkeypatch):
    d = tmp_path / "ck"
    write = checkpoint_module._write

    def slow_write(state, out):  # while this run writes checkpoint-1, another run's checkpoint-1 lands
        shutil.copytree(full["ck"] / "checkpoint-1", d / "checkpoint-1")
        write(state, out)

    monkeypatch.setattr(checkpoint_module, "_write", slow_write)
    learner = make(tiny_dir)
    with pytest.raises(CheckpointError, match="checkpoint-1' appeared while this run was writing it"):
        learner.learn(checkpoint_dir=str(d), checkpoint_steps=1)
    assert read_checkpoint_metadata(d / "checkpoint-1")["run_id"] == full["run_id"]  # the other run's, intact
    for name in ("state.json", "models/agent_0.safetensors"):
        assert (d / "checkpoint-1" / name).read_bytes() == (full["ck"] / "checkpoint-1" / name).read_bytes()
    assert os.listdir(d) == ["checkpoint-1"]  # the staging folder is gone


# ----- full or unwritable disks ------------------------------------------------------------------------------


TORCH_WRITE_FAILED = RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing "
                                  "file data/0: file write failed")  # how torch.save reports a full disk


@pytest.mark.parametrize("code,expected", [(errno.ENOSPC, "the disk is full"), (errno.EDQUOT, "the disk is full"),
                                           (errno.EROFS, "the folder is not writable"),
                                           (None, "most likely because the disk is full")],
                         ids=["ENOSPC", "EDQUOT", "EROFS", "torch.save"])
def test_a_failed_write_stops_the_run_with_the_reason_and_the_previous_checkpoint_resumes(
        tiny_dir, full, tmp_path, monkeypatch, code, expected):
    d = tmp_path / "ck"
    write, calls = checkpoint_module._write, []

    def failing_write(state, out):
        calls.append(out)
        if len(calls) == 2:  # the second checkpoint: half-written, then the disk refuses
            os.makedirs(os.path.join(out, "models"))
            raise OSError(code, os.strerror(code)) if code else TORCH_WRITE_FAILED
        write(state, out)

    monkeypatch.setattr(checkpoint_module, "_write", failing_write)
    with pytest.raises(CheckpointError) as info:
        make(tiny_dir).learn(checkpoint_dir=str(d), checkpoint_steps=1)
    message = str(info.value)
    assert expected in message and str(d / "checkpoint-2") in message
    if code != errno.EROFS:
        assert re.search(r"\(\d+ bytes\) are free on that filesystem", message), message
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d / "checkpoint-1") for f in fs)
        assert re.search(rf"the previous checkpoint took [\d.]+ MiB \({size} bytes\)", message), message
    assert os.listdir(d) == ["checkpoint-1"]  # the partial save was removed, the lock released
    monkeypatch.setattr(checkpoint_module, "_write", write)
    learner = make(tiny_dir)
    learner.learn(checkpoint_dir=str(d), checkpoint_steps=1, resume_from_checkpoint=True)
    assert digest(learner) == full["digest"]


# ----- MARLHF takes the same values ---------------------------------------------------------------------------


def test_marlhf_iter_relaunched_with_true_resumes_from_the_newest_checkpoint(tiny_dir, tmp_path):
    from learners.preference import MARLHFIterConfig, MARLHFIterTrainer

    def build(callbacks=None):
        cfg = MARLHFIterConfig(num_iterations=2, num_train_epochs=1, max_new_tokens=4, temperature=1.0, top_p=1.0,
                               top_k=None, rollout_buffer_size=2, preference_num_candidates=4, eval_interval=0,
                               verbose=False)
        data = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(4)])
        return MARLHFIterTrainer(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=data,
                                 callbacks=callbacks, args=cfg)

    full = build()
    full.learn(checkpoint_dir=str(tmp_path / "full"), resume_from_checkpoint=True)  # nothing there: a fresh start
    d = str(tmp_path / "ck")
    KillAt.fired = False
    with pytest.raises(Killed):  # in the first iteration's policy phase, after the preference stage's checkpoint
        build([KillAt(1)]).learn(checkpoint_dir=d, resume_from_checkpoint="latest")
    assert visible(d) == ["checkpoint-1"]
    resumed = build([KillAt(1)])
    resumed.learn(checkpoint_dir=d, resume_from_checkpoint="latest")
    assert resumed.iteration == 2 and digest(resumed.policy) == digest(full.policy)


def test_marlhf_holds_its_folders_through_the_preference_stage(tiny_dir, tmp_path):
    from learners.preference import MARLHFConfig, MARLHFTrainer

    cfg = MARLHFConfig(num_train_epochs=1, max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None,
                       rollout_buffer_size=2, preference_num_candidates=4, eval_interval=0, verbose=False)
    data = Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(4)])
    trainer = MARLHFTrainer(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, train_dataset=data, args=cfg)
    d = tmp_path / "ck"
    seen = []
    stage = trainer.preference_stage

    def watched_stage():  # while the stage runs (before any policy phase), the folder is locked by this run
        seen.append(json.loads((d / LOCK_FILE).read_text())["run_id"])
        return stage()

    trainer.preference_stage = watched_stage
    trainer.learn(checkpoint_dir=str(d))
    assert seen == [trainer.policy.run_id] and not (d / LOCK_FILE).exists()
