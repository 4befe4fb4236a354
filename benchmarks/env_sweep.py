"""Every registered env under MAGRPO's default rollout settings, 1 epoch, 8 new tokens, num_generations=2, on
a tiny model: it finishes (seconds) or is refused (seconds until the error, and the error). Issue 34's check
that no default rollout explodes.

    .venv/bin/python benchmarks/env_sweep.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import comlrl_env  # noqa: E402
from comlrl_env.testing import tiny_model  # noqa: E402
from learners import MAGRPO, MAGRPOConfig  # noqa: E402


def run(env_id: str, model_dir: str) -> dict:
    start = time.perf_counter()
    try:
        learner = MAGRPO(env=env_id, agent_model=model_dir, num_agents=len(comlrl_env.make(env_id).possible_agents),
                         args=MAGRPOConfig(num_train_epochs=1, max_new_tokens=8, num_generations=2, verbose=False,
                                           eval_interval=0))
        mode = learner.args.rollout_mode
        learner.learn()
        return {"env": env_id, "outcome": "finished", "rollout_mode": mode, "seconds": time.perf_counter() - start}
    except ValueError as exc:
        return {"env": env_id, "outcome": "refused", "seconds": time.perf_counter() - start, "error": str(exc)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    model_dir = str(tiny_model(tempfile.mkdtemp()))
    rows = []
    for env_id in args.only or sorted(comlrl_env.registry):
        row = run(env_id, model_dir)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
