"""The vLLM backend's adapter folders (`learners.rollout.backends.adapter_folders`): a folder whose owner was
killed, by any signal, is deleted by the next backend to start, at once; a live owner's folder is never touched;
a backend's own folder goes when it closes. Plain Python: no vLLM needed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from learners.rollout.backends import adapter_folders
from learners.rollout.backends.adapter_folders import (
    ADAPTER_PREFIX,
    OWNER_FILE,
    adapter_root,
    remove_adapter_root,
)

OWNER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("adapter_folders", sys.argv[2])  # stdlib only: no torch to import
adapter_folders = importlib.util.module_from_spec(spec)
spec.loader.exec_module(adapter_folders)
adapter_folders.adapter_scratch = lambda: sys.argv[1]
print(adapter_folders.adapter_root(), flush=True)
sys.stdin.read()  # live until the test closes stdin or kills it
"""


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.setattr(adapter_folders, "adapter_scratch", lambda: str(tmp_path))
    return tmp_path


def owner(scratch):
    """A child process that made an adapter folder and lives on; returns (process, folder)."""
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(scratch), adapter_folders.__file__],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_owners_folder_goes_at_the_next_start_and_a_live_ones_stays(scratch, signum):
    killed, dead_folder = owner(scratch)
    live, live_folder = owner(scratch)
    assert os.path.isfile(os.path.join(dead_folder, OWNER_FILE)) and os.path.basename(dead_folder).startswith(
        f"{ADAPTER_PREFIX}{killed.pid}-")
    killed.send_signal(signum)
    killed.wait()
    try:
        mine = adapter_root()  # at once: no wait for the folder to age
        assert not os.path.exists(dead_folder)
        assert os.path.isdir(live_folder) and os.path.isdir(mine)
        assert sorted(os.listdir(scratch)) == sorted(map(os.path.basename, (live_folder, mine)))
    finally:
        live.stdin.close()
        live.wait()
    remove_adapter_root(mine)
    assert not os.path.exists(mine)
    remove_adapter_root(mine)  # twice: a no-op


def test_a_folder_is_kept_while_its_pid_is_reused_by_a_live_owner(scratch):
    """Only the lock counts: a folder named after a dead pid but locked by a live process stays."""
    live, folder = owner(scratch)
    try:
        renamed = os.path.join(scratch, f"{ADAPTER_PREFIX}999999999-x1")
        os.rename(folder, renamed)
        adapter_root()
        assert os.path.isdir(renamed)
    finally:
        live.stdin.close()
        live.wait()


def test_folders_without_an_owner_file_fall_back_to_pid_and_age(scratch):
    """Folders written before owner files (or one being made this moment) go only when their pid is gone and
    they were idle for ten minutes."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    old = time.time() - 3600

    def folder(name, idle):
        path = scratch / name
        path.mkdir()
        (path / "adapter_config.json").write_text("{}")
        if idle:
            os.utime(path, (old, old))
        return path

    stale = folder(f"{ADAPTER_PREFIX}{gone.pid}-a1", idle=True)
    recent = folder(f"{ADAPTER_PREFIX}{gone.pid}-b2", idle=False)
    running = folder(f"{ADAPTER_PREFIX}{os.getpid()}-c3", idle=True)
    other = folder("comlrl-vllm-model-d4", idle=True)  # not an adapter folder
    root = adapter_root()
    assert not stale.exists() and recent.exists() and running.exists() and other.exists()
    assert os.path.basename(root).startswith(f"{ADAPTER_PREFIX}{os.getpid()}-")
    remove_adapter_root(root)


def test_a_process_never_sweeps_its_own_live_folders(scratch):
    first = adapter_root()
    second = adapter_root()  # a second backend in the same process: flock would grant it the first one's lock
    assert os.path.isdir(first) and os.path.isdir(second)
    remove_adapter_root(first)
    remove_adapter_root(second)
