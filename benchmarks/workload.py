"""The shared workload of the side-by-side MAGRPO benchmark.

Standard library only, so that both sides (the reference library's venv and
ours) import the very same definition with plain ``python``:

    import sys; sys.path.insert(0, "benchmarks")   # or run from benchmarks/
    from workload import PROMPTS, reward_func, WORKLOAD, peak_rss_gb, emit_result

Workload: 16 fixed short prompts, 2 homogeneous agents, 4 samples per agent per
prompt, 32 new tokens, one epoch, sampling with temperature 1.0, top_p 1.0 and
no top_k. The reward is shared by both agents and deterministic.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any, Dict, List, Sequence


def offline_and_quiet() -> None:
    """Set (unless already set) the environment a benchmark process runs in: offline hub and datasets,
    W&B disabled, no tokenizer threads, transformers' errors only. Call it before importing transformers."""
    for name, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"),
                        ("WANDB_MODE", "disabled"), ("TOKENIZERS_PARALLELISM", "false"),
                        ("TRANSFORMERS_VERBOSITY", "error")):
        os.environ.setdefault(name, value)

__all__ = [
    "TOPICS",
    "PROMPTS",
    "WORKLOAD",
    "NUM_AGENTS",
    "NUM_GENERATIONS",
    "MAX_NEW_TOKENS",
    "NUM_TRAIN_EPOCHS",
    "TEMPERATURE",
    "TOP_P",
    "TOP_K",
    "ROLLOUT_BUFFER_SIZE",
    "SEED",
    "NUM_THREADS",
    "reward_func",
    "expected_counts",
    "peak_rss_gb",
    "cpu_snapshot",
    "foreign_cpu_seconds",
    "wait_for_quiet_cpu",
    "timed",
    "collapse",
    "result_record",
    "emit_result",
]

TOPICS: List[str] = [
    "a lighthouse keeper",
    "a lost umbrella",
    "the first snow of winter",
    "a robot learning to cook",
    "an old library",
    "a cat on a train",
    "a garden at midnight",
    "a broken clock",
    "the sound of rain",
    "a paper boat",
    "a mountain village",
    "a forgotten letter",
    "a street musician",
    "the last day of summer",
    "a map with no roads",
    "a kite in a storm",
]

# Deterministic prompt text: two alternating templates over 16 topics.
_TEMPLATES = (
    "Write a short story about {topic}.",
    "Write a short phrase about {topic}.",
)
PROMPTS: List[str] = [_TEMPLATES[i % 2].format(topic=t) for i, t in enumerate(TOPICS)]

NUM_AGENTS = 2
NUM_GENERATIONS = 4
MAX_NEW_TOKENS = 32
NUM_TRAIN_EPOCHS = 1
TEMPERATURE = 1.0
TOP_P = 1.0
TOP_K = None
# Tree nodes (= prompts, single turn) per optimizer step and agent, as in the
# reference's MAGRPO (rollout_buffer_size=2, train_batch_size=None -> 2):
# 16 prompts / 2 = 8 optimizer steps per agent per epoch.
ROLLOUT_BUFFER_SIZE = 2
SEED = 0
NUM_THREADS = 2

WORKLOAD: Dict[str, Any] = {
    "num_prompts": len(PROMPTS),
    "num_agents": NUM_AGENTS,
    "num_generations": NUM_GENERATIONS,
    "max_new_tokens": MAX_NEW_TOKENS,
    "num_train_epochs": NUM_TRAIN_EPOCHS,
    "temperature": TEMPERATURE,
    "top_p": TOP_P,
    "top_k": TOP_K,
    "rollout_buffer_size": ROLLOUT_BUFFER_SIZE,
    "seed": SEED,
    "num_threads": NUM_THREADS,
}


def _score(a: str, b: str) -> float:
    """Length-ratio score in [0, 1]: 1.0 when both texts have the same number
    of characters (after stripping), 0.0 when exactly one is empty."""
    la, lb = len(a.strip()), len(b.strip())
    if la == 0 and lb == 0:
        return 0.0
    return min(la, lb) / max(la, lb)


def reward_func(
    completions_agent0: Sequence[str], completions_agent1: Sequence[str]
) -> List[float]:
    """Shared, deterministic reward: one float per joint sample (pairwise).

    Takes exactly two positional parameters so that the reference library calls
    it as ``f(agent0_list, agent1_list)`` (its convention for N=2).
    """
    if len(completions_agent0) != len(completions_agent1):
        raise ValueError(
            f"reward_func: {len(completions_agent0)} vs {len(completions_agent1)} completions"
        )
    return [_score(a, b) for a, b in zip(completions_agent0, completions_agent1)]


def expected_counts(num_prompts: int = len(PROMPTS)) -> Dict[str, int]:
    """Per-agent counts one epoch of the workload should produce."""
    return {
        "optimizer_steps_per_agent": -(-num_prompts // ROLLOUT_BUFFER_SIZE) * NUM_TRAIN_EPOCHS,
        "completions_per_agent": num_prompts * NUM_GENERATIONS * NUM_TRAIN_EPOCHS,
    }


def peak_rss_gb() -> float:
    """Peak resident set size of this process so far, in GB (10**9 bytes).

    ``ru_maxrss`` is in KiB on Linux and in bytes on macOS.
    """
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024
    return rss * scale / 1e9


def _system_busy_seconds() -> float | None:
    """CPU seconds all processes have been busy since boot (Linux /proc/stat)."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    vals = [int(v) for v in fields[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice]:
    # guest time is already counted in user/nice.
    busy = sum(vals[:3]) + sum(vals[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    self_ = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return self_.ru_utime + self_.ru_stime + kids.ru_utime + kids.ru_stime


def cpu_snapshot() -> tuple:
    """(system busy CPU s, this process's CPU s, wall s); pass two to foreign_cpu_seconds."""
    return (_system_busy_seconds(), _own_cpu_seconds(), time.perf_counter())


def foreign_cpu_seconds(before: tuple, after: tuple) -> float | None:
    """CPU seconds other processes used between two snapshots (None off Linux).

    Timings on a shared 2-core machine are only comparable when this is near 0:
    report it next to the result.
    """
    if before[0] is None or after[0] is None:
        return None
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1]))


def wait_for_quiet_cpu(
    max_foreign_cores: float = 0.2,
    window_s: float = 1.0,
    quiet_windows: int = 3,
    timeout_s: float = 600.0,
    log=None,
) -> bool:
    """Block until other processes use under ``max_foreign_cores`` CPU cores for
    ``quiet_windows`` consecutive ``window_s`` windows; False on timeout (or
    when /proc/stat is unavailable, which returns at once)."""
    if _system_busy_seconds() is None:
        return False
    deadline = time.monotonic() + timeout_s
    streak = 0
    last_report = 0.0
    while time.monotonic() < deadline:
        a = cpu_snapshot()
        time.sleep(window_s)
        b = cpu_snapshot()
        cores = foreign_cpu_seconds(a, b) / max(b[2] - a[2], 1e-9)
        streak = streak + 1 if cores < max_foreign_cores else 0
        if streak >= quiet_windows:
            return True
        if log is not None and time.monotonic() - last_report > 30:
            log(f"waiting for a quiet CPU (others use {cores:.2f} cores)")
            last_report = time.monotonic()
    return False


def timed(train, wait_quiet: float = 0.0, log=None) -> Dict[str, Any]:
    """Run `train()` (after waiting up to `wait_quiet` s for an idle CPU) and describe how clean the timing was.

    Returns the `emit_result` fields: seconds; the 1-min load average before/after; the CPU seconds other
    processes used meanwhile (near 0 = clean timing); this process's CPU seconds; whether the start was quiet.
    """
    quiet = wait_for_quiet_cpu(timeout_s=wait_quiet, log=log) if wait_quiet > 0 else None
    load_before = os.getloadavg()[0]
    snap0 = cpu_snapshot()
    t0 = time.perf_counter()
    train()
    seconds = time.perf_counter() - t0
    snap1 = cpu_snapshot()
    foreign = foreign_cpu_seconds(snap0, snap1)
    return {
        "seconds": seconds,
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "foreign_cpu_s": None if foreign is None else round(foreign, 2),
        "own_cpu_s": round(snap1[1] - snap0[1], 2),
        "quiet_start": quiet,
    }


def collapse(xs: Sequence[Any]) -> Any:
    """One value when every agent's count is the same, else the list."""
    return xs[0] if len(set(xs)) == 1 else list(xs)


def result_record(
    side: str,
    model: str,
    seconds: float,
    optimizer_steps_per_agent: Any,
    completions_per_agent: Any,
    peak_rss: float | None = None,
    **extra: Any,
) -> Dict[str, Any]:
    """The benchmark's result as a dict (keys in a fixed order)."""
    rec: Dict[str, Any] = {
        "side": side,
        "model": model,
        "seconds": round(float(seconds), 3),
        "peak_rss_gb": round(peak_rss_gb() if peak_rss is None else float(peak_rss), 3),
        "optimizer_steps_per_agent": optimizer_steps_per_agent,
        "completions_per_agent": completions_per_agent,
    }
    rec.update(extra)
    return rec


def emit_result(
    side: str,
    model: str,
    seconds: float,
    optimizer_steps_per_agent: Any,
    completions_per_agent: Any,
    peak_rss: float | None = None,
    stream=None,
    **extra: Any,
) -> Dict[str, Any]:
    """Print the result as one JSON line (to stdout by default) and return it."""
    rec = result_record(
        side, model, seconds, optimizer_steps_per_agent, completions_per_agent,
        peak_rss=peak_rss, **extra,
    )
    out = sys.stdout if stream is None else stream
    out.write(json.dumps(rec) + "\n")
    out.flush()
    return rec


if __name__ == "__main__":
    print(json.dumps(WORKLOAD, indent=2))
    for p in PROMPTS:
        print(p)
    print(expected_counts())
