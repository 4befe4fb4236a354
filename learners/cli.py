"""`comlrl-bench`: evaluate saved agents on a suite of environments.

    comlrl-bench --suite smoke --agents outputs/run/agents --episodes 4 --out results/ [--greedy] [--seed 0]

`--agents` takes one dir per agent, or a `save_model` output dir holding
`agent_0/`, `agent_1/`, ... Writes `results.json`, `results.md` and `results.png`.
"""

from __future__ import annotations

import argparse
import sys

from comlrl_env.benchmark import markdown_table, run_suite
from comlrl_env.suites import suites
from learners.policy import AgentPolicy, agent_dirs

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="comlrl-bench", description="Evaluate saved agents on a suite of envs.")
    parser.add_argument("--suite", required=True, choices=sorted(suites))
    parser.add_argument("--agents", nargs="+", required=True, help="agent dirs, or a save_model output dir")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--out", required=True)
    parser.add_argument("--greedy", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--chat-template", action="store_true", help="render prompts with the chat template")
    args = parser.parse_args(argv)
    policy = AgentPolicy(agent_dirs(args.agents), greedy=args.greedy, seed=args.seed,
                         max_new_tokens=args.max_new_tokens, use_chat_template=args.chat_template)
    results = run_suite(args.suite, {"agents": policy}, args.episodes, args.out, args.seed)
    print(markdown_table(results["rows"]), end="")
    print(f"wrote {args.out}/results.json, results.md, results.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
