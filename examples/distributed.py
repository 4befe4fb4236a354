# Run: .venv/bin/torchrun --standalone --nproc_per_node 2 examples/distributed.py [--out DIR] [--epochs N]
"""Data-parallel MAGRPO with torch.distributed: the same script as one process, launched by torchrun.

Each rank plays its shard of every batch of task instances, gradients are
averaged across ranks before each optimizer step (so every rank keeps the same
weights), and rank 0 alone logs, checkpoints and saves. On CPUs the backend is
gloo; on GPUs NCCL, each rank on its own GPU. Two agents built offline (a tiny
random Qwen2) learn smoke/FormatAgreement-v1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os

import torch.distributed as dist

from comlrl_env.testing import tiny_model
from learners import MAGRPO, MAGRPOConfig
from learners.parallel import Distributed

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", default="outputs/distributed")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--resume", default=None, help="a checkpoint-* directory to continue from")
parser.add_argument("--beams", action="store_true", help="deterministic beam-search rollouts (for tests)")
parser.add_argument("--train-batch-size", type=int, default=None, help="groups per optimizer step, over all ranks")
args = parser.parse_args()

group = Distributed.from_env()  # torchrun's process group, joined so that a restarted group never meets a dead one
rank = group.rank
model_dir = os.path.join(args.out, "tiny-model")
if rank == 0:
    tiny_model(model_dir, arch="qwen2", seed=0)  # rank 0 builds the model, the others wait for it
group.barrier()

config = MAGRPOConfig(
    num_train_epochs=args.epochs,
    episodes_per_epoch=8,
    num_generations=2 if args.beams else 4,
    rollout_buffer_size=4,  # global: 2 task instances per rank per rollout
    train_batch_size=args.train_batch_size,  # global too: the steps per rollout do not depend on the ranks
    max_new_tokens=8,
    temperature=1.0,
    top_p=1.0,
    top_k=None,
    agent_learning_rate=1e-2,
    eval_interval=0,
    output_dir=os.path.join(args.out, "run"),  # rank 0 writes metrics.jsonl
    generation_kwargs={"do_sample": False, "num_beams": 2} if args.beams else {},
    verbose=rank == 0,
)
learner = MAGRPO(env="smoke/FormatAgreement-v1", agent_model=model_dir, num_agents=2, args=config)
learner.learn(checkpoint_dir=os.path.join(args.out, "checkpoints"), resume_from_checkpoint=args.resume)
learner.save_model(os.path.join(args.out, "agents"))

digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for a in learner.agents for p in a.parameters()))
with open(os.path.join(args.out, f"weights-rank{rank}.json"), "w") as f:
    steps = int(next(iter(learner.optimizers[0].state.values()))["step"])  # AdamW's step count
    json.dump({"rank": rank, "sha256": digest.hexdigest(), "epoch": learner.epoch, "env_steps": learner.env_steps,
               "optimizer_steps": steps}, f)
if dist.is_initialized():
    dist.destroy_process_group()
