# Run: .venv-vllm/bin/torchrun --standalone --nproc_per_node 2 examples/vllm_torchrun.py [--sharding fsdp] [--check]
"""vLLM rollouts under torchrun: every rank samples its share of each batch on engines of its own, trains with data
parallelism (`--sharding none`) or FSDP2 (`--sharding fsdp`), and pushes the new weights into its engines after
each optimizer step (FSDP: gathered tensor by tensor; LoRA: the adapters only).

Two agents built offline (a tiny random Qwen2 with 64-wide heads, as vLLM's CPU attention needs) learn to write
whitespace with MAGRPO (or IAC, MAAC). Without torchrun the same script runs as one process
(`python examples/vllm_torchrun.py`). Each rank writes `rank{r}.json` under `--out/{learner}`: the rewards and
losses of every rollout, its completions, the weight-sync seconds and, with `--check`, the largest gap between
the engine's and the trainer's log-probs of a fixed completion after every optimizer step. See docs/scaling.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

import torch
import torch.distributed as dist

from comlrl_env.testing import tiny_model
from learners import IAC, MAAC, MAGRPO, IACConfig, MAACConfig, MAGRPOConfig
from learners.parallel import Distributed
from learners.rollout.backends.hf import encode_prompts
from learners.rollout.samples import SampleBatch
from learners.rollout.scoring import completion_logprobs

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", default="outputs/vllm-torchrun")
parser.add_argument("--learners", nargs="+", choices=("magrpo", "iac", "maac", "lora", "learn", "greedy"),
                    default=["magrpo"],
                    help="run each in turn; lora: MAGRPO with a LoRA adapter per agent on one shared base; learn: "
                         "MAGRPO for 12 epochs of 8 instances (the learning check); greedy: greedy samples of "
                         "fixed prompts")
parser.add_argument("--sharding", choices=("fsdp", "none"), default="none")
parser.add_argument("--epochs", type=int, default=2, help="(magrpo, lora: one rollout of 4 instances per epoch)")
parser.add_argument("--check", action="store_true", help="engine vs trainer log-probs after every optimizer step")
parser.add_argument("--resume", default=None, help="(magrpo) a checkpoint-* directory to continue from")
parser.add_argument("--fail-at", type=int, default=None,
                    help="(tests; magrpo) the last rank raises after this rollout is trained, before its checkpoint")
parser.add_argument("--tensor-parallel", type=int, default=1, help="ranks per engine (vllm_tensor_parallel_size)")
args = parser.parse_args()
LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}

group = Distributed.from_env()  # torchrun's process group (none in one plain process)
launched = group.enabled
rank, world = group.rank, group.world_size
model_dir = os.path.join(args.out, "tiny-qwen2-hd64")
if rank == 0 and not os.path.isdir(model_dir):  # rank 0 builds the model, the others wait for it
    tiny_model(model_dir, hidden_size=128, num_heads=2, num_kv_heads=1)
if launched:
    dist.barrier()


def space_reward(*agents: list[str]) -> list[float]:
    """Fraction of whitespace characters in the joint answer: easy for a tiny model to raise."""
    return [sum(ch.isspace() for ch in "".join(joint)) / max(len("".join(joint)), 1) for joint in zip(*agents)]


class Record:
    """Every rollout's metrics and completions on this rank; with `--check`, the engine/trainer log-prob gap of
    a fixed completion after every optimizer step."""

    def __init__(self, out: str, fail_at: int | None = None) -> None:
        self.out, self.fail_at = out, fail_at
        self.rewards: list[float] = []
        self.losses: list[dict[str, float]] = []
        self.completions: list[list[list[str]]] = []
        self.sync: list[float] = []
        self.checks: list[float] = []

    def on_step_end(self, learner, metrics: dict[str, float]) -> None:
        if learner.rollouts_done == self.fail_at and rank == world - 1:  # after its checkpoint, before the next
            with open(os.path.join(args.out, "failed_at"), "w") as f:
                f.write(str(time.time()))
            raise RuntimeError(f"rank {rank} fails on purpose after rollout {self.fail_at}")
        self.rewards.append(metrics["train/reward_mean"])
        self.losses.append({k: v for k, v in metrics.items() if k.endswith("/loss")})
        self.completions.append([s.completions for s in learner.last_rollout.samples])
        self.sync.append(metrics.get("perf/seconds_weight_sync", -1.0))
        self.save(learner)

    def save(self, learner) -> None:
        """This rank's record so far (a run that fails keeps what it did)."""
        os.makedirs(self.out, exist_ok=True)
        with open(os.path.join(self.out, f"rank{rank}.json"), "w") as f:
            json.dump({"rewards": self.rewards, "losses": self.losses, "completions": self.completions,
                       "sync": self.sync, "checks": self.checks, "rollouts": learner.rollouts_done, "world": world}, f)

    def watch(self, learner) -> None:
        """After each optimizer step (on every rank: FSDP gathers), the engine's log-probs of a fixed completion
        against the trainer's, for the agent that stepped."""
        tok, backend = learner.tokenizers[0], learner.engine.backend
        ids, mask, _ = encode_prompts(tok, backend.agent_settings[0], ["def add(a, b):"])
        fixed = torch.tensor([tok(" return a + b", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]])
        batch = SampleBatch(ids, mask, fixed, torch.ones_like(fixed), [""])

        def check(optimizer, *_args, **_kwargs) -> None:
            a = next(i for i, o in enumerate(learner.optimizers) if o is optimizer)
            engine = backend.score(a, batch)
            with torch.no_grad(), learner.sharding.gathered([learner.agents[a]]):
                trainer = completion_logprobs(learner.agents[a], batch)
            self.checks.append(float((engine - trainer).abs().max()))

        for optimizer in learner.optimizers:
            optimizer.register_step_post_hook(check)


def train(name: str) -> None:
    out = os.path.join(args.out, name)
    learn = name == "learn"
    data = [{"prompt": f"Question {i}:"} for i in range(8 if learn else 4)]
    shared = dict(num_train_epochs=12 if learn else args.epochs if name in ("magrpo", "lora") else 1,
                  rollout_buffer_size=8 if learn else 4,
                  num_generations=8 if learn else 4, agent_learning_rate=1e-2 if learn else 5e-2, max_new_tokens=8,
                  temperature=1.0, top_p=1.0, top_k=None, max_grad_norm=None, eval_interval=0, eval_num_samples=0,
                  verbose=False, seed=0, sharding=args.sharding if launched else "none", generation_backend="vllm",
                  vllm_engine_args={"kv_cache_memory_bytes": 64 << 20},
                  vllm_tensor_parallel_size=args.tensor_parallel, output_dir=os.path.join(out, "run"),
                  peft_config=LORA if name == "lora" else None)
    record = Record(out, args.fail_at if name == "magrpo" else None)
    team = dict(train_dataset=data, reward_func=space_reward, agent_model=model_dir, num_agents=2, callbacks=[record])
    if name in ("magrpo", "lora", "learn", "greedy"):
        learner = MAGRPO(**team, args=MAGRPOConfig(**shared))
    else:  # IAC: a value head per agent; MAAC: one critic of the joint text
        cls, config_cls = (IAC, IACConfig) if name == "iac" else (MAAC, MAACConfig)
        extra = {"use_separate_critic": False} if name == "iac" else {}
        learner = cls(**team, args=config_cls(critic_learning_rate=1e-3, **extra, **shared),
                      **({"critic_model": model_dir} if name == "maac" else {}))
    if name == "greedy":  # each rank its own prompts; a tensor-parallel group gathers them for its one engine
        prompts = [f"Question {i}:" for i in range(rank, 8, world)]
        batches = learner.engine.backend.generate_all([prompts, prompts], 2, greedy=True)
        record.completions.append([b.completions for b in batches])
    else:
        if args.check:
            record.watch(learner)
        checkpoints = os.path.join(out, "checkpoints") if name == "magrpo" else None
        learner.learn(checkpoint_dir=checkpoints, checkpoint_steps=1 if checkpoints else None,
                      resume_from_checkpoint=args.resume if name == "magrpo" else None)
    record.save(learner)


for learner_name in args.learners:
    train(learner_name)
    gc.collect()  # the learner is gone: its backend returns the engines for the next job
if launched:  # the engines go down first (destroy_process_group shuts them down)
    dist.barrier()
    dist.destroy_process_group()
