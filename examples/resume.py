# Run: .venv/bin/python examples/resume.py
"""Checkpoint a MAGRPO run, read its metadata, resume it in a new learner and export the agents.

The whole cycle on two copies of a tiny random-weight Qwen2 built offline (no
download), in a few seconds on a CPU:

1. train 1 epoch with `learn(checkpoint_dir=...)`: a checkpoint at every
   completed epoch (and every `checkpoint_steps` rollouts, here 1) and at the end;
2. read the checkpoint's metadata without loading weights (and, with `--wandb`,
   merge its W&B identity into `wandb_config` as CoMLRL 1.4.3's recipe does);
3. build a fresh learner with `num_train_epochs=2` (it counts the whole run) and
   `learn(resume_from_checkpoint=...)`; the result is bit-identical to a run
   trained 2 epochs without interruption, which the script checks;
4. `save_model()` the agents (each dir loads with `AutoModelForCausalLM`).

It prints the checkpoint layout, its size on disk and the save and load times.
Options: `--model DIR_OR_ID`, `--out DIR` (default outputs/resume), `--wandb` (offline W&B run,
continued on resume).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import torch
from datasets import Dataset

from comlrl_env.testing import tiny_model
from learners import MAGRPO, MAGRPOConfig, read_checkpoint_metadata

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=None, help="hub id or local dir (default: a tiny offline model)")
parser.add_argument("--out", default="outputs/resume")
parser.add_argument("--wandb", action="store_true", help="log to W&B in offline mode and continue the run on resume")
args = parser.parse_args()

model = args.model or str(tiny_model(os.path.join(args.out, "tiny-model"), arch="qwen2", seed=0))
checkpoints = os.path.join(args.out, "checkpoints")
shutil.rmtree(checkpoints, ignore_errors=True)  # a new run refuses a directory holding another run's checkpoints
data = Dataset.from_list([{"prompt": f"Describe the number {i}:"} for i in range(4)])


def reward(first: list[str], second: list[str]) -> list[float]:
    """Fraction of whitespace in the joint answer: easy for a tiny model to raise."""
    return [sum(ch.isspace() for ch in a + b) / max(len(a + b), 1) for a, b in zip(first, second)]


def build(epochs: int, wandb_config: dict | None = None) -> MAGRPO:
    """The same learner every time; only portable fields (num_train_epochs, output_dir, ...) may change."""
    config = MAGRPOConfig(num_train_epochs=epochs, num_generations=2, rollout_buffer_size=2, max_new_tokens=8,
                          temperature=1.0, top_p=1.0, top_k=None, agent_learning_rate=1e-2, eval_interval=0,
                          verbose=False, seed=0)
    return MAGRPO(agent_model=model, num_agents=2, reward_func=reward, train_dataset=data, args=config,
                  wandb_config=wandb_config)


def size_on_disk(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def layout(path: str) -> str:
    lines = []
    for d, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        depth = os.path.relpath(d, path).count(os.sep) + (d != path)
        for f in sorted(files):
            lines.append(f"{'  ' * (depth + 1)}{f:<28} {os.path.getsize(os.path.join(d, f)):>10,} bytes")
        if d != path:
            lines.insert(len(lines) - len(files), f"{'  ' * depth}{os.path.basename(d)}/")
    return "\n".join(lines)


wandb_config = {"mode": "offline", "dir": os.path.join(args.out, "wandb"), "project": "resume-demo"} \
    if args.wandb else None

# 1. Train one epoch with checkpoints: every epoch, every rollout, keep this run's newest 3.
first = build(epochs=1, wandb_config=dict(wandb_config) if wandb_config else None)
first.learn(checkpoint_dir=checkpoints, checkpoint_interval=1, checkpoint_steps=1, checkpoint_total_limit=3)
latest = max((os.path.join(checkpoints, n) for n in os.listdir(checkpoints)),
             key=lambda p: read_checkpoint_metadata(p)["sequence"])
print(f"checkpoints: {sorted(os.listdir(checkpoints))}; resuming from {latest}")
print(f"{os.path.basename(latest)}/\n{layout(latest)}")
size = size_on_disk(latest)
t0 = time.perf_counter()
first.save_checkpoint(os.path.join(args.out, "manual-checkpoint"))  # what learn() does at each checkpoint
save_s = time.perf_counter() - t0

# 2. Metadata, without loading weights; CoMLRL 1.4.3's W&B recipe, in our names.
meta = read_checkpoint_metadata(latest)
print(f"metadata: learner={meta['learner']} sequence={meta['sequence']} run_id={meta['run_id']} "
      f"progress={meta['progress']} wandb={meta['wandb']}")
identity = meta["wandb"]
if wandb_config is not None and identity and "id" not in wandb_config and "resume" not in wandb_config:
    wandb_config = {**wandb_config, **identity, "resume": "allow"}

# 3. Resume in a new learner, raising num_train_epochs from 1 to 2 (it counts the whole run).
resumed = build(epochs=2, wandb_config=wandb_config)
t0 = time.perf_counter()
resumed.load_checkpoint(latest)  # validates everything, then restores; learn(resume_from_checkpoint=) does this
load_s = time.perf_counter() - t0
resumed.learn(resume_from_checkpoint=latest, checkpoint_dir=checkpoints, checkpoint_total_limit=3)
print(f"resumed to epoch {resumed.epoch}; checkpoints now {sorted(os.listdir(checkpoints))}")

# The same run without interruption: bit-identical weights.
straight = build(epochs=2)
straight.learn()
same = all(torch.equal(p, q) for a, b in zip(resumed.agents, straight.agents)
           for p, q in zip(a.parameters(), b.parameters()))
print(f"resumed == uninterrupted 2-epoch run, bit for bit: {same}")

# 4. Export the agents.
resumed.save_model(os.path.join(args.out, "agents"))
print(f"agents saved to {os.path.join(args.out, 'agents')}: {sorted(os.listdir(os.path.join(args.out, 'agents')))}")
print(f"checkpoint size on disk: {size / 1e6:.2f} MB "
      f"({sum(p.numel() for a in first.agents for p in a.parameters()) / 1e6:.2f}M parameters in 2 agents); "
      f"save {save_s * 1000:.0f} ms, load {load_s * 1000:.0f} ms")
