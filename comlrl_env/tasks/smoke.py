"""smoke/FormatAgreement-v1 and smoke/Arithmetic-v1: tiny cooperative tasks for checking that a learner learns.

Both are cheap (a few string checks per agent), single-turn, and give partial credit, so
even a tiny random-weight model gets rewards that vary between samples and
improves within a CPU minute. Rewards are in [0, 1]; there is no penalty
beyond the lost credit. An answer that restates a prompt (`is_echo`) earns
nothing, so copying the prompt (which shows the ideal answer) is no shortcut.

## smoke/FormatAgreement-v1

Agents and roles: two symmetric `answerer`s (`num_agents=` any other number, 1 for one agent alone).

Observation: a word and a delimiter pair, e.g.
`Answer with the word "apple" wrapped in [ and ], like this: [apple]`.
Task instance `i` is pair `i // len(words)` and word `i % len(words)`. By
default there are 48 words and the one pair `[ ]` (48 instances):
`delimiters=ALL_DELIMITERS` adds `( )`, `{ }`, `< >`, `<answer> </answer>`
and `** **` (288 instances), a variant that needs a model that reads the
prompt; `words=` replaces the word list.

Action: free text; the ideal answer is exactly `<open>word<close>` (1.0).

Reward (cooperative, every agent gets it): the mean over agents of
`0.75 * format_match + 0.25 * char_similarity`. `format_match`
(`rewards.text.format_match`) gives 0.2 for each of: the open delimiter
appears, the close delimiter appears, non-blank text is wrapped between them,
the answer starts with the open delimiter, it ends with the close one.
`char_similarity` (`rewards.text.char_similarity`) is the character-level
`difflib` ratio between the stripped answer and the ideal
`<open>word<close>`; it keeps the reward dense (shorter answers made of the
right characters score higher) and rewards the right word. An answer with
`format_match` 0 (no delimiter at all) earns 0, not its similarity, and is
flagged `invalid_action` ("no <open> or <close> in the answer"); so do empty
answers and restated prompts.

Termination: after the single turn.

## smoke/Arithmetic-v1

Agents and roles: `agent_0` (`doubler`) states twice the first number,
`agent_1` (`adder`) states the sum.

Observation: `a + b` with a, b in 0..9 (100 task instances;
`task_index = 10 * a + b`) and the agent's own question. `max_operand=m`
draws a, b from 0..m instead ((m + 1)^2 instances, `task_index = (m + 1) * a + b`).

Action: text containing an integer; the first integer found is the answer.

Reward (cooperative, every agent gets it): the mean over agents of
`max(0, 1 - |answer - target| / 10)`, so an answer off by 3 earns 0.7. An
answer without an integer, or one that restates a prompt, earns 0 and is
flagged `invalid_action`.

One agent alone (`num_agents=1`, role `solver`): the one agent is asked both
questions and answers with both numbers; the first two integers of its
answer are taken as 2a and a + b, in that order, and the reward is the mean
of their two credits, the team's scale. An answer with fewer than two
integers is flagged `invalid_action` (a missing number earns 0).

Termination: after the single turn.

Versions: v1 (both tasks) pays nothing for restated prompts, and
FormatAgreement-v1 nothing for answers without a delimiter. v0 (removed) paid
copying the prompt 0.5-1.0 (Arithmetic read the prompt's first number, which
is twice right when a = 0) and random words about 0.02 of similarity.
"""

from __future__ import annotations

import re

from comlrl_env.base import AgentID, TextParallelEnv
from rewards.text import char_similarity, format_match

__all__ = ["ALL_DELIMITERS", "Arithmetic", "FormatAgreement"]

ALL_DELIMITERS = (("[", "]"), ("(", ")"), ("{", "}"), ("<", ">"), ("<answer>", "</answer>"), ("**", "**"))
# One pair by default: a tiny random model must first learn an unconditional habit; with all six
# pairs it has to read the prompt, which takes far longer than a CPU minute.
DELIMITERS = (("[", "]"),)
WORDS = (
    "apple", "river", "seven", "blue", "cat", "north", "paper", "stone",
    "green", "house", "light", "music", "ocean", "tiger", "water", "wind",
    "bread", "cloud", "dream", "earth", "field", "glass", "honey", "iron",
    "kite", "lemon", "moon", "nest", "olive", "piano", "queen", "rose",
    "sand", "tree", "voice", "wheel", "yard", "zebra", "chair", "door",
    "eagle", "frog", "grape", "hill", "island", "jacket", "key", "leaf",
)  # fmt: skip
_INT = re.compile(r"-?\d+")


class FormatAgreement(TextParallelEnv):
    """Both agents wrap a given word in the delimiters named in the prompt; partial credit per agent."""

    # num_tasks of the defaults; each instance sets its own: len(delimiters) * len(words).
    metadata = {
        **TextParallelEnv.metadata,
        "name": "smoke/FormatAgreement-v1",
        "num_tasks": len(DELIMITERS) * len(WORDS),
        "reward_range": (0.0, 1.0),
    }

    def __init__(
        self,
        delimiters: tuple[tuple[str, str], ...] = DELIMITERS,
        words: tuple[str, ...] = WORDS,
        num_agents: int = 2,
        **kwargs,
    ) -> None:
        roles = ["answerer"] * num_agents if isinstance(num_agents, int) else None  # the base names a bad value
        super().__init__(num_agents=num_agents, num_turns=1, roles=roles, **kwargs)
        delimiters = tuple((str(o), str(c)) for o, c in delimiters)
        if not delimiters or not all(o and c for o, c in delimiters):
            raise ValueError(f"delimiters must be non-empty (open, close) string pairs, got {delimiters!r}.")
        words = tuple(str(w) for w in words)
        if not words or not all(w.strip() for w in words):
            raise ValueError(f"words must be non-blank strings, got {words!r}.")
        self.delimiters, self.words = delimiters, words
        self.metadata = {**type(self).metadata, "num_tasks": len(delimiters) * len(words)}

    def load_task(self, task_index: int | None) -> dict:
        if task_index is None:
            task_index = int(self.np_random.integers(self.num_tasks))
        pair, word = divmod(task_index, len(self.words))
        (open_tag, close_tag), word = self.delimiters[pair], self.words[word]
        return {"open": open_tag, "close": close_tag, "word": word}

    def prompts(self) -> dict[AgentID, str]:
        t = self.task
        text = (
            f"Answer with the word \"{t['word']}\" wrapped in {t['open']} and {t['close']}, "
            f"like this: {t['open']}{t['word']}{t['close']}\n"
        )
        return {a: text for a in self.agents}

    def score(self, actions: dict[AgentID, str]) -> tuple[float, bool]:
        t = self.task
        texts = [actions[a] for a in self.agents]
        formats = format_match(texts, t["open"], t["close"])
        similarities = char_similarity(texts, t["open"] + t["word"] + t["close"])
        scores = []
        for agent, text, fmt, sim in zip(self.agents, texts, formats, similarities):
            if fmt == 0 or self.is_echo(text):
                self.flag_invalid(agent, "the answer restates the prompt" if fmt else
                                  f"no {t['open']} or {t['close']} in the answer")
                scores.append(0.0)
            else:
                scores.append(0.75 * fmt + 0.25 * sim)
        return sum(scores) / len(scores), True


class Arithmetic(TextParallelEnv):
    """`a + b`: agent_0 states 2a, agent_1 states a + b; each answer earns credit by its distance.

    `max_operand` widens the operands (0..max_operand each); `num_agents=1` is the same task for one agent alone.
    """

    metadata = {**TextParallelEnv.metadata, "name": "smoke/Arithmetic-v1", "num_tasks": 100,
                "reward_range": (0.0, 1.0)}

    def __init__(self, max_operand: int = 9, num_agents: int = 2, **kwargs) -> None:
        if isinstance(max_operand, bool) or not isinstance(max_operand, int) or not 1 <= max_operand <= 999:
            raise ValueError(f"max_operand must be an int in 1..999, got {max_operand!r}.")
        if num_agents not in (1, 2):
            raise ValueError(f"num_agents must be 2 (doubler and adder) or 1 (one agent answers both), "
                             f"got {num_agents!r}.")
        roles = ["doubler", "adder"] if num_agents == 2 else ["solver"]
        super().__init__(num_agents=num_agents, num_turns=1, roles=roles, **kwargs)
        self.max_operand = max_operand
        self.metadata = {**type(self).metadata, "num_tasks": (max_operand + 1) ** 2}

    def load_task(self, task_index: int | None) -> dict:
        if task_index is None:
            task_index = int(self.np_random.integers(self.num_tasks))
        a, b = divmod(task_index, self.max_operand + 1)
        return {"a": a, "b": b, "targets": {"agent_0": 2 * a, "agent_1": a + b}}  # alone: both, in this order

    def prompts(self) -> dict[AgentID, str]:
        a, b = self.task["a"], self.task["b"]
        if len(self.possible_agents) == 1:
            return {"agent_0": f"Problem: {a} + {b}. What is twice the first number, and what is the sum? "
                               "Answer with the two numbers, in that order.\n"}
        return {
            "agent_0": f"Problem: {a} + {b}. What is twice the first number? Answer with one number.\n",
            "agent_1": f"Problem: {a} + {b}. What is the sum? Answer with one number.\n",
        }

    def score(self, actions: dict[AgentID, str]) -> tuple[float, bool]:
        if len(self.possible_agents) == 1:  # one answer holds both numbers: the first two integers, in order
            text = actions["agent_0"]
            echo = self.is_echo(text)
            found = [] if echo else _INT.findall(text[:1000])[:2]
            if len(found) < 2:
                self.flag_invalid("agent_0", "the answer restates the prompt" if echo else
                                  f"{len(found)} integers in the answer, 2 needed")
            scores = [_credit(answer, target) for answer, target in zip(found, self.task["targets"].values())]
            return sum(scores) / 2, True
        scores = []
        for agent, target in self.task["targets"].items():
            echo = self.is_echo(actions[agent])
            match = None if echo else _INT.search(actions[agent][:1000])
            if match is None:
                self.flag_invalid(agent, "the answer restates the prompt" if echo else "no integer in the answer")
                scores.append(0.0)
                continue
            scores.append(_credit(match.group(), target))
        return sum(scores) / len(scores), True


def _credit(answer: str, target: int) -> float:
    """max(0, 1 - |answer - target| / 10); 12 digits at most, so a huge number scores 0 without a huge int."""
    return max(0.0, 1.0 - abs(int(answer[:12]) - target) / 10)
