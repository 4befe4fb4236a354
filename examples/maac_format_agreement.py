# Run: .venv/bin/python examples/maac_format_agreement.py [--model DIR_OR_ID] [--critic-type v|q] [--epochs N]
"""MAAC on smoke/FormatAgreement-v1: two actors and one centralized LLM critic, on a CPU in a few minutes.

The critic reads the environment's joint state (both agents' observations,
`env.state()`), plus the sampled joint action when `--critic-type q`, and is
updated once per minibatch. Without `--model`, tiny random Qwen2 models are
built offline. Saves `agent_0/`, `agent_1/` and `critic/` (with `value_head.pt`).
"""

from __future__ import annotations

import argparse
import json
import os

from comlrl_env.testing import tiny_model
from learners import MAAC, MAACConfig

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=None)
parser.add_argument("--critic-type", default="v", choices=["v", "q"])
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--out", default="outputs/maac")
args = parser.parse_args()

model = args.model or str(tiny_model(os.path.join(args.out, "tiny-model"), seed=0))
config = MAACConfig(
    num_train_epochs=args.epochs,
    num_generations=8,
    rollout_buffer_size=8,
    critic_type=args.critic_type,
    max_new_tokens=16,
    temperature=1.0,
    top_p=1.0,
    agent_learning_rate=1e-2 if args.model is None else 1e-5,
    critic_learning_rate=1e-2 if args.model is None else 1e-5,
    max_grad_norm=None,
    eval_interval=0,
    output_dir=args.out,
)
learner = MAAC(env="smoke/FormatAgreement-v1", agent_model=model, num_agents=2, critic_model=model, args=config)
before = learner.evaluate(num_eval_samples=16)["eval/reward_mean"]
learner.learn()
after = learner.evaluate(num_eval_samples=16)["eval/reward_mean"]
learner.save_model(os.path.join(args.out, "agents"))
print(json.dumps({"reward_before": round(before, 3), "reward_after": round(after, 3)}))
