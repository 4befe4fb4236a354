"""Which reasoning-gym datasets an untrained SmolLM2-135M team scores between 0.1 and 0.6 on: the probe that
picks the two families of the reasoning results.

    .venv/bin/python benchmarks/reasoning_probe.py --model-dir /tmp/smollm2 --datasets basic_arithmetic gcd ...

Each dataset's held-out items (`split="held_out"`), the `independent` protocol (2 agents, the same base
model), sampled at T = 0.8 with the chat template; writes one JSON per dataset under `--out` (the reward, its
95% interval over items, the invalid rate, the seconds) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="SmolLM2-135M-Instruct, converted (see results_coop.py)")
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "reasoning_probe"))
    args = parser.parse_args()

    from comlrl_env import make
    from comlrl_env.benchmark import evaluate_policy
    from learners.models.policy import AgentPolicy

    policy = AgentPolicy([args.model_dir] * 2, seed=0, max_new_tokens=args.max_new_tokens, temperature=0.8,
                         top_p=1.0, top_k=None, use_chat_template=True)
    os.makedirs(args.out, exist_ok=True)
    print("| dataset | reward (95%) | invalid | seconds |\n|---|---|---|---|")
    for name in args.datasets:
        env = make(f"reasoning_gym/{name}-v0", split="held_out", size=200)
        start = time.perf_counter()
        metrics = evaluate_policy(env, policy, episodes=args.episodes, seed=0)
        seconds = time.perf_counter() - start
        row = {"dataset": name, "episodes": args.episodes, "max_new_tokens": args.max_new_tokens,
               "temperature": 0.8, "seconds": seconds, **{k: v for k, v in metrics.items() if isinstance(v, float)}}
        with open(os.path.join(args.out, f"{name}.json"), "w") as f:
            json.dump(row, f, indent=1)
        low, high = metrics["reward_low"], metrics["reward_high"]
        print(f"| {name} | {metrics['reward_mean']:.3f} ({low:.3f}, {high:.3f}) | "
              f"{metrics['invalid_action_rate']:.2f} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
