# Run: .venv/bin/python examples/iac_format_agreement.py [--model DIR_OR_ID] [--shared-head] [--epochs N]
"""IAC on smoke/FormatAgreement-v1: each agent learns with its own LLM critic, on a CPU in a few minutes.

By default every agent has a separate critic (a copy of the model plus a value
head); `--shared-head` puts the value head on each actor's backbone instead.
Without `--model`, two tiny random Qwen2 agents are built offline. Saves the
agents with their value heads (`value_head.pt`) and critics to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os

from comlrl_env.testing import tiny_model
from learners import IAC, IACConfig

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=None)
parser.add_argument("--shared-head", action="store_true")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--out", default="outputs/iac")
args = parser.parse_args()

model = args.model or str(tiny_model(os.path.join(args.out, "tiny-model"), seed=0))
config = IACConfig(
    num_train_epochs=args.epochs,  # one epoch = the env's 64 task instances
    num_generations=8,  # 8 parallel episodes per task instance
    rollout_buffer_size=8,
    use_separate_critic=not args.shared_head,
    critic_type="v",
    max_new_tokens=16,
    temperature=1.0,
    top_p=1.0,
    agent_learning_rate=1e-2 if args.model is None else 1e-5,
    critic_learning_rate=1e-2 if args.model is None else 1e-5,
    max_grad_norm=None,
    eval_interval=0,
    output_dir=args.out,
)
learner = IAC(env="smoke/FormatAgreement-v1", agent_model=model, num_agents=2,
              critic_model=None if args.shared_head else model, args=config)
before = learner.evaluate(num_eval_samples=16)["eval/reward_mean"]
learner.learn()
after = learner.evaluate(num_eval_samples=16)["eval/reward_mean"]
learner.save_model(os.path.join(args.out, "agents"))
print(json.dumps({"reward_before": round(before, 3), "reward_after": round(after, 3)}))
