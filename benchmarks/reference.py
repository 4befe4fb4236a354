"""Reference side of the speed/memory benchmark: comlrl 1.4.3's MAGRPO, IAC, MAAC and MARLHF trainers.

Run in the reference venv (see setup_ref_venv.sh):

    benchmarks/.venv-ref/bin/python benchmarks/reference.py --model benchmarks/_work/tiny --learner iac
    benchmarks/.venv-ref/bin/python benchmarks/reference.py --model DIR --model DIR2 --learner maac

One JSON line per run (``workload.emit_result``, with a ``learner`` field).
One ``--model``: two homogeneous agents
(``agent_model=DIR``, loaded twice by the reference). Several ``--model``
flags: one fresh subprocess per model (so peak RSS is per model), one JSON
line each.

Every learner is configured to do the work of ``benchmarks/ours.py --learner
...`` on the shared workload (``workload.py``: 16 prompts, 2 agents, 4 samples
per agent and prompt, 32 new tokens, one epoch, 8 optimizer steps per agent),
on CPU, with W&B, evaluation and early termination off and ``num_turns=1``:

* ``magrpo``: ``MAGRPOTrainer`` with ``rollout_buffer_size=2`` prompts per
  optimizer step -> 8 steps per agent.
* ``iac``: ``IACTrainer`` with one separate critic per agent
  (``critic_model=DIR``, ``use_separate_critic=True``), ``num_generations=4``.
  Its rollout buffer counts *samples* (completions) per agent and is drained
  once it holds ``rollout_buffer_size`` of them, then split into minibatches
  of ``train_batch_size`` samples: 8 and 8 -> one actor step (and one critic
  step) every 2 prompts, 8 actor steps per agent over 64 completions.
* ``maac``: ``MAACTrainer`` with one shared critic (``critic_model=DIR``), the
  same buffer/minibatch counts. The reference steps the shared critic inside
  every agent's update (2 critic steps per joint minibatch); that is its
  behaviour and is left as is (reported as ``critic_optimizer_steps``).
* ``marlhf``: ``MARLHFTrainer`` with ``rl_algorithm="magrpo"``: 4 candidates
  per prompt and agent labelled by the task reward (at most 16 pairs per
  prompt, ``reward_gap``), one reward-model epoch (batch 8 pairs,
  ``reward_model_name=DIR`` on CPU), then the MAGRPO phase scored by the frozen
  reward model (``num_generations=4``, ``rollout_buffer_size=2`` -> 8 policy
  steps per agent). Completions count both phases (64 + 64 per agent).

Times ``trainer.train()`` wall-clock only (model loading and trainer
construction excluded), counts optimizer steps per agent (by wrapping each
agent's -- for AC: each actor's -- ``optimizer.step``) and completions per
agent (by wrapping the reference's per-agent generation call: MAGRPO/MARLHF
``_generate_completions_with_external_prompts``, IAC ``_generate_rollout``,
MAAC ``_generate``), and prints one JSON line per model (see
``workload.emit_result``).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import workload  # noqa: E402

workload.offline_and_quiet()

LEARNERS = ("magrpo", "iac", "maac", "marlhf")

# AC learners: completions (samples) per agent per optimizer step, as on our
# side (rollout_buffer_size prompts x num_generations = 2 x 4 = 8).
AC_SAMPLES_PER_STEP = workload.ROLLOUT_BUFFER_SIZE * workload.NUM_GENERATIONS


def _common_sampling() -> dict:
    return dict(
        num_agents=workload.NUM_AGENTS,
        num_turns=1,
        num_train_epochs=workload.NUM_TRAIN_EPOCHS,
        max_new_tokens=workload.MAX_NEW_TOKENS,
        temperature=workload.TEMPERATURE,
        top_p=workload.TOP_P,
        top_k=workload.TOP_K,
        early_termination_threshold=None,
        eval_interval=0,
        # With parallel_training="none" every model goes on this one device.
        agent_devices="cpu",
        parallel_training="none",
    )


def _build_trainer(learner: str, model_dir: str, train_dataset, reward):
    """The reference trainer for ``learner``, configured for the shared workload."""
    if learner == "magrpo":
        from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

        args = MAGRPOConfig(
            **_common_sampling(),
            num_generations=workload.NUM_GENERATIONS,
            rollout_buffer_size=workload.ROLLOUT_BUFFER_SIZE,
        )
        return MAGRPOTrainer(
            agent_model=model_dir,
            num_agents=workload.NUM_AGENTS,
            train_dataset=train_dataset,
            reward_func=reward,
            args=args,
            wandb_config=None,  # no W&B
        )

    if learner in ("iac", "maac"):
        from comlrl.trainers.actor_critic import IACConfig, IACTrainer, MAACConfig, MAACTrainer

        ac = dict(
            **_common_sampling(),
            num_generations=workload.NUM_GENERATIONS,
            # The buffer counts samples per agent (4 per prompt); it is drained
            # at >= 8 samples = every 2 prompts, in minibatches of 8 samples.
            rollout_buffer_size=AC_SAMPLES_PER_STEP,
            train_batch_size=AC_SAMPLES_PER_STEP,
            critic_devices="cpu",
        )
        if learner == "iac":
            cls, args = IACTrainer, IACConfig(**ac, use_separate_critic=True)
        else:
            cls, args = MAACTrainer, MAACConfig(**ac)
        # agent_model is a string, so no tokenizer is needed (only with `agents`).
        return cls(
            agent_model=model_dir,
            critic_model=model_dir,
            train_dataset=train_dataset,
            reward_func=reward,
            args=args,
            wandb_config=None,
        )

    if learner == "marlhf":
        from comlrl.trainers.preference import MARLHFConfig, MARLHFTrainer

        args = MARLHFConfig(
            **_common_sampling(),
            rl_algorithm="magrpo",
            num_generations=workload.NUM_GENERATIONS,
            rollout_buffer_size=workload.ROLLOUT_BUFFER_SIZE,
            preference_num_candidates=workload.NUM_GENERATIONS,
            preference_pairs_per_sample=16,
            reward_model_name=model_dir,
            reward_model_device="cpu",
            reward_num_train_epochs=1,
            reward_train_batch_size=8,
        )
        return MARLHFTrainer(
            agent_model=model_dir,
            num_agents=workload.NUM_AGENTS,
            train_dataset=train_dataset,
            reward_func=reward,
            args=args,
            wandb_config=None,
        )

    raise ValueError(f"unknown learner {learner!r}; choose from {', '.join(LEARNERS)}")


def _count_steps(optimizer, counter: list, idx: int) -> None:
    orig_step = optimizer.step

    def counted_step(*a, _orig=orig_step, **kw):
        counter[idx] += 1
        return _orig(*a, **kw)

    optimizer.step = counted_step


def run_one(model_dir: str, learner: str = "magrpo", verbose: bool = False, wait_quiet: float = 0.0) -> dict:
    import torch

    random.seed(workload.SEED)
    torch.manual_seed(workload.SEED)
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", workload.NUM_THREADS)))

    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()

    train_dataset = datasets.Dataset.from_dict({"prompt": list(workload.PROMPTS)})

    # Count reward calls and rewarded joint samples (task reward only; the
    # MARLHF policy phase is scored by the reward model instead). The wrapper
    # keeps the workload reward's two positional parameters, so the reference
    # still calls it as f(agent0_list, agent1_list).
    reward_stats = {"calls": 0, "samples": 0}

    def reward(completions_agent0, completions_agent1):
        reward_stats["calls"] += 1
        out = workload.reward_func(completions_agent0, completions_agent1)
        reward_stats["samples"] += len(out)
        return out

    trainer = _build_trainer(learner, model_dir, train_dataset, reward)
    # Logging off: wandb_config=None leaves verbose=True (tqdm bars); switch it off.
    trainer.verbose = verbose

    models = list(trainer.agents) + list(getattr(trainer, "critics", []) or [])
    for idx, m in enumerate(models):
        dev = next(m.parameters()).device
        if dev.type != "cpu":
            raise RuntimeError(f"model {idx} is on {dev}, expected cpu")

    num_agents = len(trainer.agents)
    extra: dict = {}

    # Count optimizer steps per agent (actors only for AC; critic steps apart).
    is_ac = learner in ("iac", "maac")
    agent_opts = trainer.agent_optimizers if is_ac else trainer.optimizers
    steps = [0] * len(agent_opts)
    for idx, opt in enumerate(agent_opts):
        _count_steps(opt, steps, idx)
    if learner == "iac":
        critic_steps = [0] * len(trainer.critic_optimizers)
        for idx, opt in enumerate(trainer.critic_optimizers):
            _count_steps(opt, critic_steps, idx)
    elif learner == "maac":
        critic_steps = [0]
        _count_steps(trainer.critic_optimizer, critic_steps, 0)

    # Count completions per agent (training rollouts; eval is off).
    completions = [0] * num_agents
    phase = {"name": "policy"}
    phase_completions = {"preference": [0] * num_agents, "policy": [0] * num_agents}

    def add(agent_idx: int, n: int) -> None:
        completions[agent_idx] += n
        phase_completions[phase["name"]][agent_idx] += n

    if learner in ("magrpo", "marlhf"):
        orig_gen = trainer._generate_completions_with_external_prompts

        def counted_gen(*a, **kw):
            out = orig_gen(*a, **kw)
            agent_idx = kw.get("agent_idx", a[2] if len(a) > 2 else 0)
            for group in out.get("completions", []):
                add(agent_idx, len(group))
            return out

        trainer._generate_completions_with_external_prompts = counted_gen
    else:
        # IAC: _generate_rollout(agent_model, prompt, agent_idx, num_ret);
        # MAAC: _generate(agent_model, prompt, agent_idx). Both return
        # {"completions": [text, ...]} for one prompt.
        name = "_generate_rollout" if learner == "iac" else "_generate"
        orig_gen = getattr(trainer, name)

        def counted_gen(*a, **kw):
            out = orig_gen(*a, **kw)
            agent_idx = kw.get("agent_idx", a[2] if len(a) > 2 else 0)
            add(agent_idx, len(out.get("completions", [])))
            return out

        setattr(trainer, name, counted_gen)

    if learner == "marlhf":
        # Split completions by phase, count preference pairs and reward-model steps.
        rm_stats = {"pairs": 0, "steps": [0], "score_calls": 0}
        orig_build = trainer._build_preference_dataset

        def counted_build(*a, **kw):
            phase["name"] = "preference"
            try:
                pairs = orig_build(*a, **kw)
            finally:
                phase["name"] = "policy"
            rm_stats["pairs"] += len(pairs)
            return pairs

        trainer._build_preference_dataset = counted_build
        orig_init_rm = trainer._init_reward_model

        def counted_init_rm(*a, **kw):
            out = orig_init_rm(*a, **kw)
            dev = next(trainer.reward_model.parameters()).device
            if dev.type != "cpu":
                raise RuntimeError(f"reward model is on {dev}, expected cpu")
            _count_steps(trainer.reward_optimizer, rm_stats["steps"], 0)
            return out

        trainer._init_reward_model = counted_init_rm
        orig_rm_rewards = trainer._compute_reward_model_rewards

        def counted_rm_rewards(*a, **kw):
            rm_stats["score_calls"] += 1
            return orig_rm_rewards(*a, **kw)

        trainer._compute_reward_model_rewards = counted_rm_rewards

    timing = workload.timed(trainer.train, wait_quiet,
                            log=lambda m: print(f"[reference {learner}] {m}", file=sys.stderr))
    collapse = workload.collapse

    if is_ac:
        extra["critic_optimizer_steps"] = collapse(critic_steps)
    if learner == "marlhf":
        extra["preference_completions_per_agent"] = collapse(phase_completions["preference"])
        extra["policy_completions_per_agent"] = collapse(phase_completions["policy"])
        extra["preference_pairs"] = rm_stats["pairs"]
        extra["reward_model_steps"] = rm_stats["steps"][0]
        extra["reward_model_score_calls"] = rm_stats["score_calls"]

    import comlrl

    return workload.emit_result(
        side="reference",
        learner=learner,
        model=os.path.basename(os.path.normpath(model_dir)),
        optimizer_steps_per_agent=collapse(steps),
        completions_per_agent=collapse(completions),
        model_dir=os.path.abspath(model_dir),
        reward_calls=reward_stats["calls"],
        rewarded_joint_samples=reward_stats["samples"],
        **extra,
        params=sum(p.numel() for p in trainer.agents[0].parameters()),
        library=f"comlrl {comlrl.__version__}",
        torch=torch.__version__,
        transformers=transformers.__version__,
        threads=torch.get_num_threads(),
        **timing,  # seconds, load average, other processes' CPU time: how clean the timing was
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", required=True,
                   help="local HF model dir (repeat to run several models, one process each)")
    p.add_argument("--learner", default="magrpo", choices=LEARNERS)
    p.add_argument("--verbose", action="store_true", help="keep the reference's tqdm bars")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                   help="before timing, wait up to SECONDS for other processes to leave "
                        "the CPUs idle (shared machines); 0 = don't wait")
    a = p.parse_args(argv)

    if len(a.model) == 1:
        run_one(a.model[0], a.learner, verbose=a.verbose, wait_quiet=a.wait_quiet)
        return 0

    rc = 0
    for m in a.model:
        cmd = [sys.executable, os.path.abspath(__file__), "--model", m, "--learner", a.learner,
               "--wait-quiet", str(a.wait_quiet)]
        if a.verbose:
            cmd.append("--verbose")
        rc = subprocess.call(cmd) or rc
    return rc


if __name__ == "__main__":
    sys.exit(main())
