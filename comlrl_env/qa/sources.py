"""Verifiable question-answer sources: items, a question per item, and a scorer of answers.

A `VerifiedQA` is what the team protocols (`comlrl_env.qa.protocols`) play: any dataset whose answers a
function can score. It fixes three things every protocol relies on:

- **The answer format.** Prompts end with `answer_format` (reasoning first, then the final answer in
  `<answer>...</answer>`), and `extract` takes the answer out of a completion (the last tag's text). The
  plain style (`PLAIN_FORMAT`, `plain_answer`: the whole reply is the answer) is for models too small to
  write tags.
- **Rewards in [0, 1] that mean what they say.** A completion without an answer scores 0 and is flagged; a
  scorer that raises scores 0 and is flagged, never a crash. Some scorers pay a floor to any answer (0.01
  for text that is not even an attempt); the floor of an item is the most its scorer pays any of `GARBAGE`,
  any answer its question shows in `<answer>` tags (a format example) or the answer `extract` reads from
  the question or the prompt copied back, and rewards are rescaled from it:
  `max(0, (s - floor) / (1 - floor))`. Doing nothing earns 0, and a better answer still earns more.
- **Items stay as the source made them**: `source[i]` is the item itself (no copy, no JSON round trip), so a
  scripted policy can read its answer.

    from comlrl_env.qa import VerifiedQA
    rows = [{"question": "2 + 3?", "answer": "5"}, {"question": "7 - 4?", "answer": "3"}]
    source = VerifiedQA(rows, score=lambda answer, item: float(answer.strip() == item["answer"]))
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

__all__ = ["ANSWER_FORMAT", "GARBAGE", "PLAIN_FORMAT", "VerifiedQA", "arithmetic_questions", "plain_answer",
           "tag_answer"]

ANSWER_FORMAT = ("Think it through step by step, then write only the final answer inside <answer></answer> "
                 "tags, as the last thing you write.")
"""The instruction every protocol's prompt ends with (no sample answer: an echo of the prompt answers "")."""

PLAIN_FORMAT = "Reply with only the final answer, nothing else."
"""The instruction of the plain answer style (`plain_answer`): for models too small to write answer tags."""

GARBAGE = ("", "zzz", "answer here", "the answer is", "lorem ipsum dolor sit amet")
"""Answers that attempt nothing; the most an item's scorer pays any of them is its floor."""

_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def tag_answer(completion: str) -> str | None:
    """The text of the last `<answer>...</answer>` in `completion`, stripped; None when it has none."""
    found = _TAG.findall(completion)
    return found[-1].strip() if found else None


def plain_answer(completion: str) -> str | None:
    """The whole completion as the answer (the plain style), stripped of spaces and a closing full stop
    ("True." answers "True"); None when nothing is left."""
    return completion.strip().removesuffix(".").strip() or None


class VerifiedQA:
    """Items with a question each and a scorer of answers (see the module docstring).

    Args:
        items: Any sequence (a list of dicts, a `datasets.Dataset`, a generator object with `len` and
            indexing); item i is `items[i]`, used as it is.
        score: `score(answer, item) -> float` in [0, 1], `answer` the extracted text.
        question: The item's key holding its question, or a function `item -> str`.
        answer: The item's key holding its reference answer, a function `item -> str`, or None (the items
            carry none; reasoning-gym datasets that score from metadata). A None value for an item means the
            same.
        answer_format: The instruction that ends every prompt.
        extract: `extract(completion) -> answer or None` (default: the last `<answer>` tag).
        name: A short name for the source (the env's name).
    """

    def __init__(self, items: Sequence[Any], score: Callable[[str, Any], float],
                 question: str | Callable[[Any], str] = "question",
                 answer: str | Callable[[Any], Any] | None = "answer", answer_format: str = ANSWER_FORMAT,
                 extract: Callable[[str], str | None] = tag_answer, name: str = "qa") -> None:
        if not callable(score):
            raise TypeError(f"score must be a function score(answer, item) -> float, got {score!r}.")
        if not (isinstance(question, str) or callable(question)):
            raise TypeError(f"question must be an item key or a function item -> str, got {question!r}.")
        if len(items) == 0:
            raise ValueError("items is empty: a source needs at least one question.")
        self.items, self.score, self.question, self.answer = items, score, question, answer
        self.answer_format, self.extract, self.name = answer_format, extract, name
        self._floors: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        return self.items[index]

    def question_of(self, index: int) -> str:
        """Item `index`'s question."""
        item = self.items[index]
        return str(self.question(item) if callable(self.question) else item[self.question])

    def reference(self, index: int) -> str | None:
        """Item `index`'s reference answer as text, or None when it has none."""
        if self.answer is None:
            return None
        item = self.items[index]
        value = self.answer(item) if callable(self.answer) else item[self.answer]
        return None if value is None else str(value)

    def reward(self, completion: str, index: int) -> tuple[float, str | None]:
        """`(reward, why it is invalid or None)` of a completion answering item `index`."""
        answer = self.extract(completion)
        if answer is None:
            why = "no <answer>...</answer> in the completion" if self.extract is tag_answer else "no answer"
            return 0.0, why
        raw, error = self._score(answer, index)
        if error is not None:
            return 0.0, f"the scorer raised {error} on this answer"
        floor = self.floor(index)
        return (max(0.0, (raw - floor) / (1.0 - floor)) if floor < 1.0 else 0.0), None

    def floor(self, index: int) -> float:
        """The most item `index`'s scorer pays any of `GARBAGE`, an answer its question shows, or the answer
        read from the question or the prompt copied back (cached)."""
        if index not in self._floors:
            question = self.question_of(index)
            copied = (self.extract(text) for text in (question, f"{question}\n\n{self.answer_format}"))
            shown = [*_TAG.findall(question), *(a for a in copied if a is not None)]
            self._floors[index] = max(self._score(g.strip(), index)[0] for g in (*GARBAGE, *shown))
        return self._floors[index]

    def _score(self, answer: str, index: int) -> tuple[float, str | None]:
        try:
            value = float(self.score(answer, self.items[index]))
        except Exception as e:  # a scorer's bug on odd text is the answer's loss, not the run's
            return 0.0, f"{type(e).__name__}: {str(e)[:200]}"
        if not 0.0 <= value <= 1.0:  # NaN fails too
            return 0.0, f"a score outside [0, 1] ({value!r})"
        return value, None


def arithmetic_questions(max_operand: int = 9) -> VerifiedQA:
    """Our arithmetic as a source: item `a * (max_operand + 1) + b` asks for `a + b`; an answer earns
    `max(0, 1 - |answer - (a + b)| / 10)` (partial credit by distance, as `smoke/Arithmetic-v1`)."""
    if isinstance(max_operand, bool) or not isinstance(max_operand, int) or not 1 <= max_operand <= 999:
        raise ValueError(f"max_operand must be an int in 1..999, got {max_operand!r}.")
    items = [{"question": f"What is {a} + {b}?", "answer": str(a + b)}
             for a in range(max_operand + 1) for b in range(max_operand + 1)]
    return VerifiedQA(items, score=_distance_credit, name="qa/Arithmetic")


def _distance_credit(answer: str, item: dict[str, str]) -> float:
    found = re.fullmatch(r"\s*(-?\d{1,12})\s*", answer)
    return max(0.0, 1.0 - abs(int(found.group(1)) - int(item["answer"])) / 10) if found else 0.0
