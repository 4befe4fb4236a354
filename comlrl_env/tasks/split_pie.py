"""general/SplitPie-v1: the Nash demand game in text; agents get different rewards.

Agents and roles: `num_agents` claimants (default 2), symmetric.

Observation: the size of the pie and the rule; on later turns, the previous
claims of everyone.

Action: text containing an integer claim, as a percentage of the pie.

Reward (general-sum, per agent): when the claims sum to at most 100, each
agent receives its own claim / 100; otherwise everyone receives 0. An answer
with no integer, or one that restates a prompt (`is_echo`), claims 0 and is
flagged `invalid_action`.

Termination: after `num_turns` rounds (default 1), truncation; no early end.

Versions: v1 ignores numbers in a restated prompt. v0 (removed) read the
first number of any text, so copying the prompt ("2 players split a pie...")
claimed 2% and earned 0.02.
"""

from __future__ import annotations

import re

from comlrl_env.base import AgentID, TextParallelEnv

_INT = re.compile(r"\d+")


class SplitPie(TextParallelEnv):
    """Each agent claims a share; compatible claims are paid out, greedy ones pay nobody."""

    metadata = {**TextParallelEnv.metadata, "name": "general/SplitPie-v1", "reward_structure": "general", "num_tasks": 1}

    def load_task(self, task_index: int | None) -> dict:
        return {"claims": []}

    def prompts(self) -> dict[AgentID, str]:
        text = (
            f"{len(self.agents)} players split a pie. Each names a percentage. If the total is at most 100, "
            "everyone gets what they named; otherwise nobody gets anything. Your claim:\n"
        )
        if self.task["claims"]:
            text = f"Last round's claims: {self.task['claims'][-1]}.\n" + text
        return {a: text for a in self.agents}

    def score(self, actions: dict[AgentID, str]) -> tuple[dict[AgentID, float], bool]:
        claims = {}
        for agent, text in actions.items():
            echo = self.is_echo(text)
            match = None if echo else _INT.search(text[:1000])
            if match is None:
                self.flag_invalid(agent, "the answer restates the prompt" if echo else "no integer claim")
            claims[agent] = min(int(match.group()[:4]), 100) if match else 0
        self.task["claims"].append(claims)
        paid = sum(claims.values()) <= 100
        return {a: claims[a] / 100 if paid else 0.0 for a in claims}, False
