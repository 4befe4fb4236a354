"""Reference side of the MAGRPO speed/memory benchmark: comlrl 1.4.3's MAGRPOTrainer.

Run in the reference venv (see setup_ref_venv.sh):

    benchmarks/.venv-ref/bin/python benchmarks/reference_magrpo.py --model benchmarks/_work/tiny
    benchmarks/.venv-ref/bin/python benchmarks/reference_magrpo.py --model DIR --model DIR2

One ``--model``: two homogeneous agents (``agent_model=DIR``, loaded twice by
the reference). Several ``--model`` flags: the reference is run once per model,
each in a fresh subprocess (so peak RSS is per model), one JSON line each.

Times ``trainer.train()`` wall-clock only (model loading and trainer
construction excluded), counts optimizer steps per agent (by wrapping each
agent's ``optimizer.step``) and completions per agent (by wrapping the
reference's per-agent generation call), and prints one JSON line per model
(see ``workload.emit_result``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import workload  # noqa: E402

# Offline, quiet, and no W&B.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def run_one(model_dir: str, verbose: bool = False, wait_quiet: float = 0.0) -> dict:
    import torch

    torch.manual_seed(workload.SEED)
    torch.set_num_threads(workload.NUM_THREADS)

    import datasets
    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()

    train_dataset = datasets.Dataset.from_dict({"prompt": list(workload.PROMPTS)})

    args = MAGRPOConfig(
        num_agents=workload.NUM_AGENTS,
        num_turns=1,
        num_train_epochs=workload.NUM_TRAIN_EPOCHS,
        num_generations=workload.NUM_GENERATIONS,
        max_new_tokens=workload.MAX_NEW_TOKENS,
        temperature=workload.TEMPERATURE,
        top_p=workload.TOP_P,
        top_k=workload.TOP_K,
        rollout_buffer_size=workload.ROLLOUT_BUFFER_SIZE,
        early_termination_threshold=None,
        eval_interval=0,
        # With parallel_training="none" every model goes on this one device.
        agent_devices="cpu",
        parallel_training="none",
    )

    # Count reward calls and rewarded joint samples. The wrapper keeps the
    # workload reward's two positional parameters, so the reference still
    # calls it as f(agent0_list, agent1_list).
    reward_stats = {"calls": 0, "samples": 0}

    def reward(completions_agent0, completions_agent1):
        reward_stats["calls"] += 1
        out = workload.reward_func(completions_agent0, completions_agent1)
        reward_stats["samples"] += len(out)
        return out

    trainer = MAGRPOTrainer(
        agent_model=model_dir,
        num_agents=workload.NUM_AGENTS,
        train_dataset=train_dataset,
        reward_func=reward,
        args=args,
        wandb_config=None,  # no W&B
    )
    # Logging off: wandb_config=None leaves verbose=True (a tqdm bar); switch it off.
    trainer.verbose = verbose

    for idx, agent in enumerate(trainer.agents):
        dev = next(agent.parameters()).device
        if dev.type != "cpu":
            raise RuntimeError(f"agent {idx} is on {dev}, expected cpu")

    # Count optimizer steps per agent.
    steps = [0] * len(trainer.optimizers)
    for idx, opt in enumerate(trainer.optimizers):
        orig_step = opt.step

        def counted_step(*a, _orig=orig_step, _idx=idx, **kw):
            steps[_idx] += 1
            return _orig(*a, **kw)

        opt.step = counted_step

    # Count completions per agent (training rollouts; eval is off).
    completions = [0] * trainer.num_agents
    orig_gen = trainer._generate_completions_with_external_prompts

    def counted_gen(*a, **kw):
        out = orig_gen(*a, **kw)
        agent_idx = kw.get("agent_idx", 0)
        for group in out.get("completions", []):
            completions[agent_idx] += len(group)
        return out

    trainer._generate_completions_with_external_prompts = counted_gen

    quiet = None
    if wait_quiet > 0:
        quiet = workload.wait_for_quiet_cpu(
            timeout_s=wait_quiet, log=lambda m: print(f"[reference_magrpo] {m}", file=sys.stderr)
        )
    load_before = os.getloadavg()[0]
    snap0 = workload.cpu_snapshot()
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    snap1 = workload.cpu_snapshot()
    load_after = os.getloadavg()[0]
    foreign = workload.foreign_cpu_seconds(snap0, snap1)

    def collapse(xs):
        return xs[0] if len(set(xs)) == 1 else list(xs)

    import comlrl

    return workload.emit_result(
        side="reference",
        model=os.path.basename(os.path.normpath(model_dir)),
        seconds=seconds,
        optimizer_steps_per_agent=collapse(steps),
        completions_per_agent=collapse(completions),
        model_dir=os.path.abspath(model_dir),
        reward_calls=reward_stats["calls"],
        rewarded_joint_samples=reward_stats["samples"],
        params=sum(p.numel() for p in trainer.agents[0].parameters()),
        library=f"comlrl {comlrl.__version__}",
        torch=torch.__version__,
        transformers=transformers.__version__,
        threads=torch.get_num_threads(),
        # Other processes on the machine distort timings: keep the 1-min load
        # average (before/after train) alongside the result.
        loadavg_1m=[round(load_before, 2), round(load_after, 2)],
        # CPU seconds other processes used during train(); near 0 = clean timing.
        foreign_cpu_s=None if foreign is None else round(foreign, 2),
        own_cpu_s=round(snap1[1] - snap0[1], 2),
        quiet_start=quiet,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", required=True,
                   help="local HF model dir (repeat to run several models, one process each)")
    p.add_argument("--verbose", action="store_true", help="keep the reference's tqdm bar")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                   help="before timing, wait up to SECONDS for other processes to leave "
                        "the CPUs idle (shared machines); 0 = don't wait")
    a = p.parse_args(argv)

    if len(a.model) == 1:
        run_one(a.model[0], verbose=a.verbose, wait_quiet=a.wait_quiet)
        return 0

    rc = 0
    for m in a.model:
        cmd = [sys.executable, os.path.abspath(__file__), "--model", m,
               "--wait-quiet", str(a.wait_quiet)]
        if a.verbose:
            cmd.append("--verbose")
        rc = subprocess.call(cmd) or rc
    return rc


if __name__ == "__main__":
    sys.exit(main())
