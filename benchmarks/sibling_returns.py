# Run: .venv/bin/python benchmarks/sibling_returns.py [--trees 300]
"""Do siblings that end early get comparable returns? Tree rollouts of coop/GuessNumber with scripted guesses.

In tree mode a branch whose task is solved terminates alone; its siblings go on.
A solved branch must never get a lower return than a sibling that has not solved
it yet, or the group baseline pays for not solving. This script expands random
trees (K = 3 children per node, 4 turns, each agent guessing the target plus an
offset in [-3, 3]), backs up R_j = r_j + discount * mean(children of j), and
counts sibling pairs (solved j, unsolved k) with R_j < R_k, for the v1 reward
(per-turn improvement) and for the v0 reward (the guess quality every turn).
"""

from __future__ import annotations

import argparse

import numpy as np

import comlrl_env
from comlrl_env.tasks.guess_number import GuessNumber

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--trees", type=int, default=300)
parser.add_argument("--discount", type=float, default=1.0)
args = parser.parse_args()


class GuessNumberV0(GuessNumber):
    """The removed v0 reward: the quality q_t on every turn."""

    def improvement(self, quality: float) -> float:
        return quality


def expand(env, rng, counts) -> list[tuple[float, bool]]:
    """(return, solved) of each of K = 3 children of the node `env`; counts inverted sibling pairs."""
    children = []
    target = env.task["target"]
    for _ in range(3):
        child = env.clone()
        guesses = {a: str(target + int(rng.integers(-3, 4))) for a in child.agents}
        _, rewards, terminations, truncations, _ = child.step(guesses)
        reward, solved = rewards["agent_0"], all(terminations.values())
        future = 0.0
        if not (solved or all(truncations.values())):
            future = float(np.mean([r for r, _ in expand(child, rng, counts)]))
        children.append((reward + args.discount * future, solved))
    for r_solved, s in children:
        for r_other, o in children:
            if s and not o:
                counts["pairs"] += 1
                counts["inverted"] += r_solved < r_other - 1e-12
    return children


for name, cls in (("v1 (improvement)", GuessNumber), ("v0 (quality every turn)", GuessNumberV0)):
    rng, counts = np.random.default_rng(0), {"pairs": 0, "inverted": 0}
    for i in range(args.trees):
        env = cls()
        env.reset(seed=i)
        expand(env, rng, counts)
    share = counts["inverted"] / max(counts["pairs"], 1)
    print(f"{name}: {counts['inverted']} of {counts['pairs']} (solved, unsolved) sibling pairs give the solved "
          f"branch the lower return ({share:.1%}); discount {args.discount}")
assert comlrl_env.spec("coop/GuessNumber-v1")  # the measured task is the registered one
