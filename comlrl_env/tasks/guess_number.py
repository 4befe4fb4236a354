"""coop/GuessNumber-v1: agents jointly find a hidden number with higher/lower feedback.

Agents and roles: `num_agents` guessers (default 2), symmetric.

Observation: the range of the hidden integer; from turn 2 on, the previous
joint guess (the mean of the agents' numbers) and whether it was too high or
too low, plus the agent's own previous answer.

Action: text containing an integer; the first integer found is the guess.

Reward (cooperative, every agent gets it): each turn's guess has the quality
`q = 1 - |mean guess - target| / (high - low)` in [0, 1] (1 when the rounded
mean guess is the target: solved), and the turn's
reward is the improvement `q_t - q_{t-1}` (`q_{-1} = 0`; see
`TextParallelEnv.improvement`). The return is therefore a mean of the turns'
qualities weighted toward early turns (the last quality when the discount is
1): guessing the target at once returns 1.0, the most of any episode, and
staying one off for all 4 turns returns 0.99. An agent whose text has no
integer, or restates a prompt (`is_echo`), makes no guess: the team's guess
that turn has quality 0, the agent is flagged `invalid_action` and costs the
team 0.1. Doing nothing therefore returns at most 0.

Termination: when the rounded joint guess equals the target; truncation after
`num_turns` turns (default 4).

Versions: v1 pays the per-turn improvement, and an answer without a number
makes no guess. v0 (removed) paid `q_t` on every turn, so a solved episode,
which ends early, returned less than one that stayed one off until the turn
limit (1.00 vs 3.96); and it took a missing number for the middle of the
range, so empty answers earned about 0.5 a turn.
"""

from __future__ import annotations

import re

import numpy as np

from comlrl_env.base import AgentID, TextParallelEnv

_INT = re.compile(r"-?\d+")


class GuessNumber(TextParallelEnv):
    """Multi-turn cooperative guessing; the next observation carries feedback on the last joint guess."""

    metadata = {**TextParallelEnv.metadata, "name": "coop/GuessNumber-v1", "num_tasks": None}
    invalid_action_penalty = 0.1

    def __init__(self, num_agents: int = 2, num_turns: int = 4, low: int = 0, high: int = 99, **kwargs) -> None:
        super().__init__(num_agents=num_agents, num_turns=num_turns, **kwargs)
        if high <= low:
            raise ValueError(f"high must exceed low, got low={low}, high={high}.")
        self.low, self.high = low, high

    def load_task(self, task_index: int | None) -> dict:
        # Procedural: instance i is the draw of a generator seeded with i.
        rng = self.np_random if task_index is None else np.random.default_rng(task_index)
        target = int(rng.integers(self.low, self.high + 1))
        return {"target": target, "feedback": ""}

    def prompts(self) -> dict[AgentID, str]:
        head = f"Guess the hidden integer between {self.low} and {self.high}. Answer with one number.\n"
        if self.turn == 0:
            return {a: head for a in self.agents}
        return {
            a: f"{head}{self.task['feedback']}\nYour last answer: {self.response_history[a][-1][:200]}\n"
            for a in self.agents
        }

    def score(self, actions: dict[AgentID, str]) -> tuple[float, bool]:
        guesses = []
        for agent, text in actions.items():
            match = _INT.search(text[:1000])
            if match is None or self.is_echo(text):
                reason = "no integer in the answer" if match is None else "the answer restates the prompt"
                self.flag_invalid(agent, reason)
            else:
                guesses.append(min(max(int(match.group()[:12]), self.low), self.high))
        target = self.task["target"]
        if len(guesses) < len(actions):  # an agent made no guess: the team made none this turn
            self.task["feedback"] = "No joint guess: every agent must answer with a number."
            return self.improvement(0.0), False
        joint = sum(guesses) / len(guesses)
        solved = round(joint) == target
        if solved:
            self.task["feedback"] = f"The joint guess {joint:g} is correct."
        else:
            direction = "too high" if joint > target else "too low"
            self.task["feedback"] = f"The joint guess {joint:g} was {direction}."
        # A solved guess has the top quality: a sibling that stops here never returns less than one that
        # goes on to guess the target exactly.
        quality = 1.0 if solved else 1.0 - abs(joint - target) / (self.high - self.low)
        return self.improvement(quality), solved
