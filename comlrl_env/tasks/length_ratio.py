"""coop/LengthRatio-v1: a summarizer and an expander agree on lengths.

Agents and roles: `agent_0` (summarizer) writes a one-line summary of a topic,
`agent_1` (expander) writes a longer description of the same topic.

Observation: the topic (one of 64 procedurally combined adjective/noun pairs)
and the agent's role instruction.

Action: free text that names the topic's noun (e.g. "harbor").

Reward (cooperative, both agents get it): when both answers are valid,
`rewards.length_ratio(summary, expansion, target)`, i.e.
`exp(-|log(words(expansion) / words(summary) / target)|)`, in (0, 1]; 1 when
the expansion is exactly `target` times longer. Otherwise 0. An answer is
valid when it names the topic's noun and does not restate a prompt
(`is_echo`); an invalid one is flagged `invalid_action`. So empty answers,
random words and copied prompts earn 0.

Termination: after the single turn.

Versions: v1 requires each answer to name the topic. v0 (removed) scored
lengths alone, so two empty answers earned 0.5 and random text up to 1.
"""

from __future__ import annotations

import re

from comlrl_env.base import AgentID, TextParallelEnv
from rewards.functions import length_ratio

ADJECTIVES = ("quiet", "red", "ancient", "tiny", "busy", "frozen", "golden", "hidden")
_WORD = re.compile(r"\w+")
NOUNS = ("harbor", "forest", "library", "engine", "garden", "market", "river", "castle")


class LengthRatio(TextParallelEnv):
    """Two agents write a summary and an expansion whose word counts should have ratio `target`."""

    metadata = {**TextParallelEnv.metadata, "name": "coop/LengthRatio-v1", "num_tasks": len(ADJECTIVES) * len(NOUNS)}

    def __init__(self, target: float = 2.0, **kwargs) -> None:
        super().__init__(num_agents=2, num_turns=1, roles=["summarizer", "expander"], **kwargs)
        if target <= 0:
            raise ValueError(f"target must be > 0, got {target}.")
        self.target = target

    def load_task(self, task_index: int | None) -> dict:
        if task_index is None:
            task_index = int(self.np_random.integers(self.num_tasks))
        adjective, noun = ADJECTIVES[task_index // len(NOUNS)], NOUNS[task_index % len(NOUNS)]
        return {"topic": f"the {adjective} {noun}"}

    def prompts(self) -> dict[AgentID, str]:
        topic = self.task["topic"]
        return {
            "agent_0": f"Summarize {topic} in a few words.\n",
            "agent_1": f"Describe {topic} in detail, about {self.target:g} times longer than a summary.\n",
        }

    def score(self, actions: dict[AgentID, str]) -> tuple[float, bool]:
        noun = self.task["topic"].rsplit(" ", 1)[-1]
        valid = True
        for agent, text in actions.items():
            reason = ("empty answer" if not text.strip() else "the answer restates a prompt" if self.is_echo(text)
                      else None if noun in _WORD.findall(text.lower()) else f"the answer does not name the {noun}")
            if reason:
                self.flag_invalid(agent, reason)
                valid = False
        if not valid:
            return 0.0, True
        return length_ratio([actions["agent_0"]], [actions["agent_1"]], self.target)[0], True
