"""Speed regression guard: our MAGRPO epoch over the bare floor (batched generate + fwd/bwd) on the tiny model.

A ratio, never an absolute time: fails if it grows past twice the ratio recorded in
`benchmarks/recorded_floor.json` (re-record with `python benchmarks/floor.py --model DIR` after a real change).
Another process on the CPU can still skew a ratio measured over seconds, so the guard is marked `timing`:
`make bench` runs it on a quiet machine, `make test` does not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

from floor import measure  # noqa: E402

pytestmark = pytest.mark.timing


def test_magrpo_stays_within_twice_the_recorded_distance_to_the_floor(tiny_dir):
    recorded = json.loads((BENCH / "recorded_floor.json").read_text())["tiny"]["ratio"]
    now = measure(tiny_dir, repeats=2)
    assert now["ratio"] <= 2 * recorded, f"ours/floor = {now['ratio']} vs recorded {recorded}: {now}"
