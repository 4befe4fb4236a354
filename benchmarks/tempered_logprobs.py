# Run: .venv/bin/python benchmarks/tempered_logprobs.py [--seeds 3] [--first-seed 0] [--epochs 3] [--model DIR]
"""Learning with tempered vs raw log-probs in the ratio and the gradient (MAGRPO, temperature 0.6).

Samples come from softmax(z / T). `tempered_logprobs=True` scores them under that
distribution (the policy that produced them, as TRL does); False scores them under
the raw softmax(z), as the reference library does. Several optimizer steps per
rollout (train_batch_size=1 group), so the ratio matters. Each setting runs with
the same seeds, alternating; the script prints the final evaluation reward (sampled at T)
per seed, the mean clip fraction of the later steps, and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

from comlrl_env.testing import tiny_model
from learners import MAGRPO, MAGRPOConfig

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=None, help="model dir (default: the tiny offline Qwen2)")
parser.add_argument("--seeds", type=int, default=3)
parser.add_argument("--first-seed", type=int, default=0)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--temperature", type=float, default=0.6)
parser.add_argument("--env", default="smoke/FormatAgreement-v1")
args = parser.parse_args()

model = args.model or str(tiny_model(os.path.join(tempfile.mkdtemp(), "tiny"), arch="qwen2", seed=0))


class Clips:
    """Collects every rollout's clip fraction and approximate KL (agent 0)."""

    def __init__(self):
        self.clip, self.kl, self.reward = [], [], []

    def on_step_end(self, learner, metrics):
        self.clip.append(metrics["train/agent_0/clip_fraction"])
        self.kl.append(metrics["train/agent_0/approx_kl"])
        self.reward.append(metrics["train/reward_mean"])


def run(tempered: bool, seed: int) -> dict[str, float]:
    clips = Clips()
    cfg = MAGRPOConfig(num_train_epochs=args.epochs, num_generations=8, rollout_buffer_size=4, train_batch_size=1,
                       max_new_tokens=12, temperature=args.temperature, top_p=1.0, top_k=None,
                       agent_learning_rate=3e-3, tempered_logprobs=tempered, seed=seed, eval_interval=0,
                       eval_num_samples=48, eval_batch_size=48, eval_greedy=False, verbose=False)
    learner = MAGRPO(env=args.env, agent_model=model, num_agents=2, args=cfg, callbacks=[clips])
    before = learner.evaluate()["eval/reward_mean"]
    learner.learn()
    after = learner.evaluate()["eval/reward_mean"]
    last = max(len(clips.reward) // 4, 1)
    return {"tempered": tempered, "seed": seed, "eval_before": before, "eval_after": after,
            "train_reward_last_quarter": statistics.mean(clips.reward[-last:]),
            "clip_fraction": statistics.mean(clips.clip), "approx_kl": statistics.mean(clips.kl)}


rows = []
for seed in range(args.first_seed, args.first_seed + args.seeds):
    for tempered in (True, False):  # alternating, same seeds
        row = run(tempered, seed)
        rows.append(row)
        print(json.dumps(row), flush=True)
for tempered in (True, False):
    mine = [r for r in rows if r["tempered"] == tempered]
    summary = {k: statistics.median(r[k] for r in mine)
               for k in ("eval_after", "train_reward_last_quarter", "clip_fraction", "approx_kl")}
    print(f"tempered={tempered}: medians over {len(mine)} seeds {json.dumps(summary)}", file=sys.stderr)
