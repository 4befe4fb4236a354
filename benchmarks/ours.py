"""Our side of the speed/memory benchmark: comlrl-env's learners on the shared workload.

Run in the project venv:

    .venv/bin/python benchmarks/ours.py --model benchmarks/_work/tiny [--learner magrpo|iac|maac|marlhf]
    .venv/bin/python benchmarks/ours.py --model benchmarks/_work/tiny --num-agents 1   # vs trl_grpo.py

Same work as the reference side: 2 homogeneous agents, the 16 workload
prompts x 4 samples x 32 new tokens, one epoch, and 8 optimizer steps per
agent (8 completions per step). We roll out all 16 prompts in one batched
generate per agent (`rollout_buffer_size=16`) and take one optimizer step per
8 completions (MAGRPO: `train_batch_size=2` groups; IAC/MAAC: 8 samples),
with the clipped importance ratio correcting the later steps. MARLHF first
collects 4 candidates per prompt, trains the reward model one epoch, then runs
the MAGRPO phase. Times `learn()` only (loading excluded), counts optimizer
steps and completions per agent, and prints one JSON line (`workload.emit_result`).
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import workload  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def length_reward(completions):
    """The single-agent workload's reward (TRL's side computes the same): completion length / 100."""
    return [len(c) / 100 for c in completions]


def run_one(model_dir: str, learner_name: str = "magrpo", wait_quiet: float = 0.0, num_agents: int = 2,
            structure: str = "batched") -> dict:
    """One epoch of the workload. `structure`: "batched" rolls out all 16 prompts at once and takes 8 clipped
    steps per agent; "reference" is the reference library's own structure, a rollout of 2 prompts and one
    optimizer step per rollout (the same 8 steps and 64 completions per agent)."""
    import datasets
    import torch
    import transformers

    from learners import IAC, MAAC, MAGRPO, MARLHF, IACConfig, MAACConfig, MAGRPOConfig, MARLHFConfig

    torch.manual_seed(workload.SEED)
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", workload.NUM_THREADS)))
    transformers.utils.logging.disable_progress_bar()

    if num_agents == 1 and learner_name != "magrpo":
        raise SystemExit("--num-agents 1 (the single-agent comparison with TRL) runs MAGRPO only.")
    common = dict(
        num_agents=num_agents,
        num_turns=1,
        num_train_epochs=workload.NUM_TRAIN_EPOCHS,
        num_generations=workload.NUM_GENERATIONS,
        max_new_tokens=workload.MAX_NEW_TOKENS,
        temperature=workload.TEMPERATURE,
        top_p=workload.TOP_P,
        top_k=workload.TOP_K,
        rollout_buffer_size=len(workload.PROMPTS),  # one batched rollout per agent
        shuffle=False,
        eval_interval=0,
        agent_devices="cpu",
        verbose=False,
        seed=workload.SEED,
    )
    per_step = workload.ROLLOUT_BUFFER_SIZE * workload.NUM_GENERATIONS  # 8 completions per optimizer step
    groups = workload.ROLLOUT_BUFFER_SIZE
    if structure == "reference":  # one rollout of 2 prompts per optimizer step, as the reference library steps
        common["rollout_buffer_size"] = workload.ROLLOUT_BUFFER_SIZE
        per_step = groups = None
    if learner_name == "magrpo":
        cls, cfg, extra = MAGRPO, MAGRPOConfig(**common, train_batch_size=groups), {}
    elif learner_name == "iac":
        cls, cfg, extra = IAC, IACConfig(**common, train_batch_size=per_step), {"critic_model": model_dir}
    elif learner_name == "maac":
        cls, cfg, extra = MAAC, MAACConfig(**common, train_batch_size=per_step), {"critic_model": model_dir}
    else:
        cls, extra = MARLHF, {}
        cfg = MARLHFConfig(**common, train_batch_size=groups,
                           preference_num_candidates=workload.NUM_GENERATIONS, reward_model_device="cpu",
                           reward_heldout_fraction=0.0, preference_pairs_per_sample=16, reward_train_batch_size=8)
    learner = cls(
        agent_model=model_dir,
        train_dataset=datasets.Dataset.from_dict({"prompt": list(workload.PROMPTS)}),
        reward_func=workload.reward_func if num_agents == 2 else length_reward,
        args=cfg,
        **extra,
    )
    policy = getattr(learner, "policy", learner)
    steps = [0] * len(policy.optimizers)
    for idx, opt in enumerate(policy.optimizers):
        original = opt.step

        def counted(*a, _orig=original, _idx=idx, **kw):
            steps[_idx] += 1
            return _orig(*a, **kw)

        opt.step = counted
    completions = [0] * policy.num_agents
    original_generate = policy.engine.generate

    def counted_generate(agent, prompts, num_samples, greedy=False):
        out = original_generate(agent, prompts, num_samples, greedy)
        completions[agent] += len(out)
        return out

    policy.engine.generate = counted_generate

    timing = workload.timed(learner.learn, wait_quiet)

    return workload.emit_result(
        side="ours",
        learner=learner_name,
        model=os.path.basename(os.path.normpath(model_dir)),
        optimizer_steps_per_agent=workload.collapse(steps),
        completions_per_agent=workload.collapse(completions),
        model_dir=os.path.abspath(model_dir),
        params=sum(p.numel() for p in policy.agents[0].parameters()),
        library="comlrl-env",
        structure=structure,
        torch=torch.__version__,
        transformers=transformers.__version__,
        threads=torch.get_num_threads(),
        **timing,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="local HF model dir")
    p.add_argument("--learner", default="magrpo", choices=["magrpo", "iac", "maac", "marlhf"])
    p.add_argument("--num-agents", type=int, default=2, choices=[1, 2],
                   help="1: the single-agent workload of the TRL comparison (trl_grpo.py)")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS")
    p.add_argument("--structure", default="batched", choices=["batched", "reference"],
                   help="batched: all 16 prompts in one rollout, 8 clipped steps; reference: a rollout of 2 prompts "
                        "per optimizer step, as the reference library runs")
    a = p.parse_args(argv)
    run_one(a.model, a.learner, wait_quiet=a.wait_quiet, num_agents=a.num_agents, structure=a.structure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
