# Run: .venv/bin/python examples/marlhf_format_agreement.py [--model DIR_OR_ID] [--iterations N]
"""MARLHFIter on smoke/FormatAgreement-v1: learn a joint reward model from preferences, then train against it.

Each iteration samples 8 joint answers per task instance, labels pairs with
the task reward, trains a fresh reward model (Bradley-Terry) on them, freezes
it and runs MAGRPO with its score as the reward. The task reward is still
reported (`train/task_reward_mean`) and used for evaluation. Runs on a CPU in
a few minutes with tiny offline models; saves the agents and `reward_model/`.
"""

from __future__ import annotations

import argparse
import json
import os

from comlrl_env.testing import tiny_model
from learners import MARLHFIter, MARLHFIterConfig

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=None)
parser.add_argument("--iterations", type=int, default=2)
parser.add_argument("--out", default="outputs/marlhf")
args = parser.parse_args()

model = args.model or str(tiny_model(os.path.join(args.out, "tiny-model"), seed=0))
config = MARLHFIterConfig(
    num_iterations=args.iterations,
    num_train_epochs=1,  # policy epochs per iteration
    preference_num_candidates=8,
    preference_pairs_per_sample=8,
    preference_replay_mode="all_history",
    reward_num_train_epochs=2,
    reward_learning_rate=1e-3,
    reward_normalization=True,
    num_generations=8,
    rollout_buffer_size=8,
    max_new_tokens=16,
    temperature=1.0,
    top_p=1.0,
    top_k=None,
    agent_learning_rate=1e-2 if args.model is None else 1e-5,
    max_grad_norm=None,
    eval_interval=0,
    output_dir=args.out,
)
learner = MARLHFIter(env="smoke/FormatAgreement-v1", agent_model=model, num_agents=2, args=config)
before = learner.evaluate(num_eval_samples=16)["eval/reward_mean"]
metrics = learner.learn()
after = learner.evaluate(num_eval_samples=16)["eval/reward_mean"]
learner.save_model(os.path.join(args.out, "agents"))
print(json.dumps({"reward_before": round(before, 3), "reward_after": round(after, 3),
                  "reward_model_accuracy_heldout": metrics.get("preference/reward_model_accuracy_heldout")}))
