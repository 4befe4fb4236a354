"""Reference side of the learning benchmark: comlrl 1.4.3's MAGRPO, IAC and MAAC on `learning_tasks`.

Run in the reference venv (`learning.py` does it for you):

    benchmarks/.venv-ref/bin/python benchmarks/reference_learning.py --model benchmarks/_work/tiny \
        --learner magrpo --task dense --seeds 0 1 2 --budget 512

Prints one JSON line per seed: the reward curve, the final reward, the settings and versions, or the error
that stopped the run. The reference keeps no reward log we can read, so the task's reward function is wrapped
(`learning_tasks.RewardRecorder`) to record every reward it computes, in call order. With joint_mode
"aligned" (MAGRPO) and IAC/MAAC every reward scores one joint sample, i.e. one completion per agent, so the
n-th recorded reward was computed when n completions per agent had been sampled; the recorder stops the
run (raising `BudgetReached` inside `train()`) at the first reward past the budget.

Learners: `magrpo` (MAGRPOTrainer, aligned, a tree of K children per joint action on multi-turn tasks),
`iac_separate` / `iac_shared` (IACTrainer with `use_separate_critic=True` / `False`) and `maac`
(MAACTrainer), all with early termination off, evaluation off and W&B off, on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import learning_tasks as lt  # noqa: E402
import workload  # noqa: E402

workload.offline_and_quiet()

LEARNERS = ("magrpo", "iac_separate", "iac_shared", "maac")
CHUNK = 8  # rewards per curve point


def build(learner: str, task: str, model: str, rows: list, reward, epochs: int):
    """The reference trainer for `learner` on `task`, with the shared settings."""
    s, spec = lt.SETTINGS, lt.TASKS[task]
    k = lt.group_size(learner, task)
    common = dict(num_agents=2, num_turns=spec.num_turns, num_train_epochs=epochs, max_new_tokens=s["max_new_tokens"],
                  temperature=s["temperature"], top_p=s["top_p"], top_k=s["top_k"], agent_learning_rate=s["learning_rate"],
                  num_generations=k, early_termination_threshold=None, eval_interval=0, agent_devices="cpu",
                  parallel_training="none")
    import datasets

    data = datasets.Dataset.from_list(rows)
    kw = dict(train_dataset=data, reward_func=reward, formatters=spec.formatters, wandb_config=None,
              external_transition=spec.transition)
    if learner == "magrpo":
        from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

        args = MAGRPOConfig(**common, rollout_buffer_size=s["rollout_prompts"])
        return MAGRPOTrainer(agent_model=model, num_agents=2, args=args, **kw)
    from comlrl.trainers.actor_critic import IACConfig, IACTrainer, MAACConfig, MAACTrainer

    ac = dict(**common, critic_learning_rate=s["learning_rate"], rollout_buffer_size=s["ac_samples_per_step"],
              train_batch_size=s["ac_samples_per_step"], critic_devices="cpu")
    if learner == "maac":
        return MAACTrainer(agent_model=model, critic_model=model, args=MAACConfig(**ac), **kw)
    separate = learner == "iac_separate"
    return IACTrainer(agent_model=model, critic_model=model if separate else None,
                      args=IACConfig(**ac, use_separate_critic=separate), **kw)


def run(learner: str, task: str, seed: int, model: str, budget: int) -> dict:
    import comlrl
    import torch
    import transformers

    random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    transformers.utils.logging.disable_progress_bar()
    recorder = lt.RewardRecorder(lt.TASKS[task].reward, stop_after=budget)
    epochs = lt.epochs_for(budget, lt.completions_per_episode(learner, task))
    record = {"side": "reference", "learner": learner, "task": task, "seed": seed, "budget": budget,
              "epochs": epochs, "library": f"comlrl {comlrl.__version__}", "torch": torch.__version__,
              "transformers": transformers.__version__, "error": None}
    t0 = time.perf_counter()
    try:
        trainer = build(learner, task, model, lt.dataset(task, seed), recorder, epochs)
        trainer.verbose = False
        trainer.train()
    except lt.BudgetReached:
        pass
    except Exception as exc:  # noqa: BLE001 - a failed run is a result (NaN included), not a crash of the sweep
        record.update(lt.run_error(exc))
    v = recorder.values
    record["seconds"] = round(time.perf_counter() - t0, 2)
    record["completions"] = len(v)
    record["curve"] = [[min(i + CHUNK, len(v)), sum(v[i:i + CHUNK]) / len(v[i:i + CHUNK]), len(v[i:i + CHUNK])]
                       for i in range(0, len(v), CHUNK)]
    record["final"] = lt.final_reward(record["curve"], budget)
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--learner", required=True, choices=LEARNERS)
    p.add_argument("--task", required=True, choices=sorted(lt.TASKS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=int, required=True, help="completions per agent per run")
    a = p.parse_args(argv)
    for seed in a.seeds:
        print(json.dumps(run(a.learner, a.task, seed, os.path.abspath(a.model), a.budget)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
