# Run: make demo        (or: .venv/bin/python examples/quickstart.py [--model DIR_OR_ID] [--epochs N])
"""Two small agents learn a built-in cooperative task with MAGRPO, on a CPU, in about a minute.

The task, `smoke/FormatAgreement-v1`: both agents must answer with a given word
wrapped in brackets, e.g. `[apple]`; each answer earns partial credit for the
format and for its closeness to the ideal answer, and doing nothing (empty
answers, random words, a copied prompt) earns 0. Without `--model`, two copies
of a tiny random-weight Qwen2 are built offline, so the run needs no download;
`--model` takes any hub id or local dir.

It prints the reward before and after training, saves both agents to
`outputs/quickstart/agents/` and a reward curve to `outputs/quickstart/reward.png`.
"""

from __future__ import annotations

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt

import comlrl_env
from comlrl_env.testing import tiny_model
from learners import MAGRPO, MAGRPOConfig

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=None, help="hub id or local dir (default: a tiny offline model)")
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--out", default="outputs/quickstart")
args = parser.parse_args()

# 1. The environment: a PettingZoo parallel env whose actions are text.
env = comlrl_env.make("smoke/FormatAgreement-v1")
comlrl_env.testing.check_env(env)  # the same checks users run on their own tasks
comlrl_env.testing.check_task(env)  # and doing nothing earns nothing

# 2. The agents: a tiny random model built offline unless --model is given.
model = args.model or str(tiny_model(os.path.join(args.out, "tiny-model"), arch="qwen2", seed=0))

# 3. The learner.
config = MAGRPOConfig(
    num_train_epochs=args.epochs,  # one epoch = the env's 48 task instances
    num_generations=8,  # group size: 8 joint samples per task instance
    rollout_buffer_size=8,  # task instances per batched rollout and optimizer step
    max_new_tokens=16,
    temperature=1.0,
    top_p=1.0,
    top_k=None,
    agent_learning_rate=1e-2 if args.model is None else 1e-5,
    max_grad_norm=None,
    eval_interval=0,
    output_dir=args.out,  # metrics.jsonl lands here
    seed=0,
)
learner = MAGRPO(env=env, agent_model=model, num_agents=2, args=config)

before = learner.evaluate(num_eval_samples=16)["eval/reward_mean"]
curve: list[float] = []


class RecordReward:
    def on_step_end(self, learner: MAGRPO, metrics: dict[str, float]) -> None:
        curve.append(metrics["train/reward_mean"])


learner.callbacks.append(RecordReward())
learner.learn()
after = learner.evaluate(num_eval_samples=16)["eval/reward_mean"]

# 4. Save the agents (each loadable with AutoModelForCausalLM.from_pretrained) and the curve.
learner.save_model(os.path.join(args.out, "agents"))
plt.figure(figsize=(6, 3.5))
plt.plot(range(1, len(curve) + 1), curve, marker=".")
plt.xlabel("rollout (8 task instances x 8 joint samples)")
plt.ylabel("mean episode reward")
plt.title("MAGRPO on smoke/FormatAgreement-v1")
plt.tight_layout()
plt.savefig(os.path.join(args.out, "reward.png"), dpi=120)

summary = {"reward_before": round(before, 3), "reward_after": round(after, 3), "rollouts": len(curve),
           "first_rollouts_mean": round(sum(curve[:4]) / 4, 3), "last_rollouts_mean": round(sum(curve[-4:]) / 4, 3)}
print(json.dumps(summary))
print(f"agents saved to {os.path.join(args.out, 'agents')}, curve at {os.path.join(args.out, 'reward.png')}")
