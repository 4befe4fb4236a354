# Run: .venv/bin/torchrun --standalone --nproc_per_node 2 examples/fsdp.py [--learners magrpo iac] [--lora] [--out DIR]
"""Agents sharded over the torchrun processes with FSDP2 (`sharding="fsdp"`): each process holds half of every
agent's (and critic's) weights, gradients and AdamW states, from the moment the models load (each rank reads
only its own pieces of the weight files), checkpoints are written as each rank's shards, and `save_model`
gathers plain Hugging Face folders on rank 0. `--measure-build` reports the most bytes a rank held while the
learner was built.

Two agents built offline (a tiny random Qwen2) learn to write short answers with MAGRPO (or IAC, MAAC). On GPUs the
backend is NCCL and `mixed_precision="bf16"` shards in bf16 with fp32 gradient reduction; here, on CPUs, gloo.
With `--sharding none` the same script runs as one process (`python examples/fsdp.py --sharding none`), the run
the tests compare the sharded one with. See docs/scaling.md for the recipe on several machines.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import tempfile
import time
from typing import Iterator

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from comlrl_env.testing import tiny_model
from learners import IAC, MAAC, MAGRPO, IACConfig, MAACConfig, MAGRPOConfig
from learners.parallel import Distributed
from learners.parallel.fsdp import decoder_layers, shard_target

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", default="outputs/fsdp")
parser.add_argument("--learners", nargs="+", choices=("magrpo", "iac", "maac", "uneven", "lora"), default=["magrpo"],
                    help="run each in turn; uneven: MAGRPO on 2-turn episodes of which half end after one; lora: "
                         "MAGRPO with a LoRA adapter per agent on one shared base")
parser.add_argument("--sharding", choices=("fsdp", "none"), default="fsdp")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--lora", action="store_true", help="a LoRA adapter per agent on one shared (sharded) base")
parser.add_argument("--sample", action="store_true", help="sample (the lean loop) instead of beam search / greedy")
parser.add_argument("--resume", default=None, help="a checkpoint-* directory to continue from")
parser.add_argument("--stall-after", type=int, default=None, help="(tests) hang after this many rollouts")
parser.add_argument("--measure-build", action="store_true", help="report each rank's peak bytes while building")
parser.add_argument("--try-resume", nargs="+", default=None,
                    help="(tests) build MAGRPO and try to resume each of these (corrupt) checkpoints, no training")
args = parser.parse_args()

group = Distributed.from_env()  # torchrun's process group (none in one plain process)
launched = group.enabled
rank = group.rank
model_dirs = [os.path.join(args.out, f"tiny-model-{seed}") for seed in (0, 1)]
if rank == 0 and not os.path.isdir(model_dirs[1]):
    for seed, model_dir in enumerate(model_dirs):  # rank 0 builds the models, the others wait for them
        tiny_model(model_dir, arch="qwen2", seed=seed)
if launched:
    dist.barrier()


def length_reward(first: list[str], second: list[str], batch_items: list[dict]) -> list[float]:
    """Shorter joint answers score higher (a signal every sample differs on); +1 on instances marked "stop"."""
    return [1.0 / (1.0 + len(a) + len(b)) + item["stop"] for a, b, item in zip(first, second, batch_items)]


def again(prompt: str, agent_completions: list[str], num_agents: int, **history) -> list[str]:
    """The second turn's prompts (uneven runs)."""
    return [f"{prompt} Once more:"] * num_agents


class Record:
    """Keeps every rollout's logged losses (means over the ranks); hangs on request (the kill test)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []

    def on_step_end(self, learner, metrics: dict[str, float]) -> None:
        self.steps.append({k: v for k, v in metrics.items() if k.endswith("/loss")})
        if args.stall_after is not None and learner.rollouts_done == args.stall_after:
            print("stalled", flush=True)
            time.sleep(600)


def local(t: torch.Tensor) -> torch.Tensor:
    """What this rank holds of `t`: a sharded tensor's local shard."""
    return t.to_local() if hasattr(t, "to_local") else t


@contextlib.contextmanager
def peak_bytes(record: dict[str, int]) -> Iterator[None]:
    """`record["peak"]`: the most bytes torch held allocated inside the block on this rank's device, counting only
    what was allocated inside it. On CPUs from the profiler's memory events (each allocation by its address,
    until that address is freed), in the order they happened."""
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        yield
        record["peak"] = torch.cuda.max_memory_allocated() - start
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        yield
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(os.path.join(tmp, "trace.json"))
        with open(os.path.join(tmp, "trace.json")) as f:
            events = [e["args"] for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    live: dict[int, int] = {}
    held = peak = 0
    for event in events:  # in time order
        address, size = event["Addr"], event["Bytes"]
        if size > 0:
            held += size - live.get(address, 0)
            live[address] = size
            peak = max(peak, held)
        elif address in live:
            held -= live.pop(address)
    record["peak"] = peak


def whole_bytes(modules: list[torch.nn.Module]) -> int:
    """The bytes of the parameters of `modules` whole (a sharded parameter counts at its global size)."""
    params = {id(p): p for m in modules for p in m.parameters()}.values()
    return sum(p.numel() * p.element_size() for p in params)


def state_of(learner) -> dict[str, torch.Tensor]:
    """Copies of what this rank holds of the learner's weights and AdamW states."""
    out = {f"{k}.{n}": local(p).detach().clone() for k, m in learner.checkpoint_modules().items()
           for n, p in m.named_parameters()}
    for i, opt in enumerate(learner.checkpoint_optimizers()[0]):
        out.update({f"optimizer{i}.{j}.{key}": local(v).clone() for j, s in enumerate(opt.state.values())
                    for key, v in s.items() if isinstance(v, torch.Tensor)})
    return out


def try_resumes(learner, out: str, build: dict[str, int]) -> None:
    """Resume each `--try-resume` checkpoint in turn: record the error each raises, whether the learner stayed
    as it was, and what `build` measured."""
    before = state_of(learner)
    refused = {}
    for path in args.try_resume:
        try:
            learner.learn(resume_from_checkpoint=path)
            refused[path] = None
        except Exception as exc:  # noqa: BLE001 (the test reads which error, and its message)
            refused[path] = f"{type(exc).__name__}: {exc}"
    after = state_of(learner)
    same = before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"resume-rank{rank}.json"), "w") as f:
        json.dump({"refused": refused, "unchanged": same, "build": build}, f)


def train(name: str) -> None:
    out = os.path.join(args.out, name)
    greedy = {"do_sample": False, "num_beams": 2} if name in ("magrpo", "uneven", "lora") else {"do_sample": False}
    shared = dict(num_train_epochs=args.epochs, rollout_buffer_size=4, max_new_tokens=6, temperature=1.0, top_p=1.0,
                  top_k=None, agent_learning_rate=5e-4, eval_num_samples=4, eval_interval=0, verbose=False,
                  sharding=args.sharding, output_dir=os.path.join(out, "run"),
                  generation_kwargs={} if args.sample else greedy,  # deterministic: one process agrees
                  peft_config={"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
                  if args.lora or name == "lora" else None)
    data = [{"prompt": f"Question {i}:", "stop": name == "uneven" and i % 2 == 0} for i in range(8)]
    team = dict(agent_model=model_dirs[0], num_agents=2) if args.lora or name == "lora" else dict(agents=model_dirs)
    record, build = Record(), {}
    if name == "uneven":  # in dataset order rank 0 plays instances 0, 2, ... (one turn), rank 1 1, 3, ... (two):
        # rank 1 has twice the groups, so rank 0 joins half of the steps with no samples, and the
        # micro-batches (gradient_accumulation_steps) differ too
        shared.update(num_turns=2, early_termination_threshold=0.5, shuffle=False, train_batch_size=2,
                      gradient_accumulation_steps=2, gradient_checkpointing=True)
    with peak_bytes(build) if args.measure_build else contextlib.nullcontext():
        if name in ("magrpo", "uneven", "lora"):  # raw returns as advantages: a loss that is not 0 at ratio 1
            config = MAGRPOConfig(num_generations=2, advantage_mode="raw", advantage_normalization=False,
                                  rollout_mode="parallel" if name == "uneven" else "tree", **shared)
            learner = MAGRPO(train_dataset=data, reward_func=length_reward, external_transition=again, **team,
                             callbacks=[record], args=config)
        else:  # IAC: a critic per agent; MAAC: one critic of the joint text
            cls, config_cls = (IAC, IACConfig) if name == "iac" else (MAAC, MAACConfig)
            config = config_cls(critic_learning_rate=5e-4, advantage_normalization=False, **shared)
            learner = cls(train_dataset=data, reward_func=length_reward, **team, critic_model=model_dirs[0],
                          callbacks=[record], args=config)
    if args.measure_build:  # the team whole, and one decoder layer of it
        trained = [m for k, m in learner.checkpoint_modules().items() if not k.startswith("reference_")]
        build.update(team=whole_bytes(trained), layer=whole_bytes([decoder_layers(shard_target(trained[0]))[0]]))
    if args.try_resume:
        try_resumes(learner, out, build)
        return
    learner.learn(checkpoint_dir=os.path.join(out, "checkpoints"), checkpoint_steps=1,
                  resume_from_checkpoint=args.resume)
    evaluation = learner.evaluate()  # rank 0 plays, every rank gathers the agents' weights
    learner.save_model(os.path.join(out, "agents"))

    # What this rank holds of the trained models: parameters, gradients (the last step's) and AdamW states.
    trained = {k: m for k, m in learner.checkpoint_modules().items() if not k.startswith("reference_")}
    params = list({id(p): p for m in trained.values() for p in m.parameters()}.values())
    states = [v for o in learner.checkpoint_optimizers()[0] for s in o.state.values() for v in s.values()]
    tensors = {"parameters": params, "gradients": [p.grad for p in params if p.grad is not None],
               "optimizer": [v for v in states if isinstance(v, torch.Tensor)]}
    held = {k: sum(local(t).numel() for t in ts) for k, ts in tensors.items()}
    whole_numel = {k: sum(t.numel() for t in ts) for k, ts in tensors.items()}  # a sharded tensor: its global size
    # The whole weights, gathered tensor by tensor (every rank takes part; rank 0 writes them).
    whole = {f"{k}.{n}": (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().clone()
             for k, m in trained.items() for n, v in m.state_dict().items()}
    if rank == 0:
        save_file(whole, os.path.join(out, "weights.safetensors"))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"steps": record.steps, "held": held, "whole": whole_numel, "epoch": learner.epoch,
                   "rollouts": learner.rollouts_done, "eval": evaluation, "build": build}, f)


for learner_name in args.learners:
    train(learner_name)
if launched:  # every rank done with its collectives and its FSDP objects freed before the group goes
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
