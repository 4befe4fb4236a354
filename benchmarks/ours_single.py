"""Our side of the single-agent comparison with TRL: comlrl-env's MAGRPO with one agent.

Run with a python that has this repo installed (e.g. the project venv):

    python benchmarks/ours_single.py --model benchmarks/_work/tiny [--wait-quiet 60]

The single-agent form of the shared workload (`workload.py`), the same work as
`trl_grpo.py`: 1 agent, the 16 workload prompts x 4 samples x 32 new tokens,
one epoch, temperature 1.0, top_p 1.0, no top_k. We roll out all 16 prompts in
one batched generate (`rollout_buffer_size=16`) and take one optimizer step
per 2 prompt groups (`train_batch_size=2`, 8 completions per step -> 8
optimizer steps). The one-agent reward takes one positional list:
completion length / 100. Times `learn()` only (loading excluded), counts
optimizer steps and completions, and prints one JSON line
(`workload.emit_result(side="ours", ...)`).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import workload  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

NUM_AGENTS = 1
GROUPS_PER_STEP = 2  # 2 prompts x 4 samples = 8 completions per optimizer step


def length_reward(completions):
    """One-agent reward: one positional list of completions -> len / 100 each."""
    return [len(c) / 100 for c in completions]


def run_one(model_dir: str, wait_quiet: float = 0.0) -> dict:
    import datasets
    import torch
    import transformers

    from learners import MAGRPO, MAGRPOConfig

    torch.manual_seed(workload.SEED)
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", workload.NUM_THREADS)))
    transformers.utils.logging.disable_progress_bar()

    cfg = MAGRPOConfig(
        num_agents=NUM_AGENTS,
        num_turns=1,
        num_train_epochs=workload.NUM_TRAIN_EPOCHS,
        num_generations=workload.NUM_GENERATIONS,
        max_new_tokens=workload.MAX_NEW_TOKENS,
        temperature=workload.TEMPERATURE,
        top_p=workload.TOP_P,
        top_k=workload.TOP_K,
        rollout_buffer_size=len(workload.PROMPTS),  # one batched rollout
        train_batch_size=GROUPS_PER_STEP,
        shuffle=False,
        eval_interval=0,
        agent_devices="cpu",
        verbose=False,
        seed=workload.SEED,
    )
    learner = MAGRPO(
        agent_model=model_dir,
        train_dataset=datasets.Dataset.from_dict({"prompt": list(workload.PROMPTS)}),
        reward_func=length_reward,
        args=cfg,
    )
    policy = getattr(learner, "policy", learner)
    steps = [0] * len(policy.optimizers)
    for idx, opt in enumerate(policy.optimizers):
        original = opt.step

        # functools.wraps keeps the LR scheduler's marker on step() (no warning).
        @functools.wraps(original)
        def counted(*a, _orig=original, _idx=idx, **kw):
            steps[_idx] += 1
            return _orig(*a, **kw)

        opt.step = counted
    completions = [0] * policy.num_agents
    generate_calls = [0]
    original_generate = policy.engine.generate

    def counted_generate(agent, prompts, num_samples, greedy=False):
        out = original_generate(agent, prompts, num_samples, greedy)
        completions[agent] += len(out)
        generate_calls[0] += 1
        return out

    policy.engine.generate = counted_generate

    quiet = workload.wait_for_quiet_cpu(timeout_s=wait_quiet) if wait_quiet > 0 else None
    load_before = os.getloadavg()[0]
    snap0 = workload.cpu_snapshot()
    t0 = time.perf_counter()
    learner.learn()
    seconds = time.perf_counter() - t0
    snap1 = workload.cpu_snapshot()
    foreign = workload.foreign_cpu_seconds(snap0, snap1)

    def collapse(xs):
        return xs[0] if len(set(xs)) == 1 else list(xs)

    return workload.emit_result(
        side="ours",
        learner="magrpo",
        model=os.path.basename(os.path.normpath(model_dir)),
        seconds=seconds,
        optimizer_steps_per_agent=collapse(steps),
        completions_per_agent=collapse(completions),
        num_agents=NUM_AGENTS,
        generate_calls=generate_calls[0],
        model_dir=os.path.abspath(model_dir),
        params=sum(p.numel() for p in policy.agents[0].parameters()),
        library="comlrl-env",
        torch=torch.__version__,
        transformers=transformers.__version__,
        threads=torch.get_num_threads(),
        loadavg_1m=[round(load_before, 2), round(os.getloadavg()[0], 2)],
        foreign_cpu_s=None if foreign is None else round(foreign, 2),
        own_cpu_s=round(snap1[1] - snap0[1], 2),
        quiet_start=quiet,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="local HF model dir")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS")
    a = p.parse_args(argv)
    run_one(a.model, wait_quiet=a.wait_quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
