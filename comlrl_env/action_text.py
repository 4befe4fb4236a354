"""Which one legal action a game answer names, if any: the answer rule every OpenSpiel prompt states.

An answer plays an action only when it names exactly one legal action, in one of two ways:

1. **The whole answer is the action.** After both are normalised (`normalize_action`: ASCII letters in
   lower case; every run of spaces, brackets, punctuation and symbols becomes one space), the answer
   equals a legal action's text or one of its short forms:
   - the text without the leading words that every legal action shares: `1,1` for `x(1,1)` when every
     legal action starts with `x`; `13` or `bid 13` for `[P0]Bid: 13`;
   - one word of letters that begins the first word of exactly one legal action: `b` for `Bet`, `lia`
     for `Liar` (never a number: `1` is not `13`).
   With `numbered=True` (the prompt numbers the legal actions 1, 2, ...), an answer that is one whole
   number names the action at that position (`2` for the second listed; a one-token answer a small model
   can find), and never an action whose short form is that number. A copied list line, the number then
   the action (`3. x(0,2)`, `3) x(0,2)`, `3 - x(0,2)`), or the action then its number (`x(0,2) (3)`),
   names that action when both name the same one; a number with another action's text names none.
2. **One answer line.** A line `Action: <text>` (or `Answer:`, `Move:`; case and markdown emphasis
   ignored) whose text names one legal action by rule 1. Several answer lines must all name the same one.

Anything else names no action and is invalid, with a reason (`read_action(...).reason`): empty text;
text that names no legal action; text that names two or more (a list of actions, a restated
observation); an action mentioned inside other text; a lookalike (`х(0,0)` with a Cyrillic `х`:
characters outside ASCII are kept as they are, so they never match an ASCII action text); an occupied
or malformed cell (`x(0, 0)` after x(0,0) was played is no legal action, and nothing is read as a
nearby one). Numbers match whole numbers only.

    >>> parse_action("bet", ["Pass", "Bet"]), parse_action("I bet", ["Pass", "Bet"])
    (1, None)
    >>> read_action("Pass\\nBet", ["Pass", "Bet"]).reason
    'ambiguous: it names 2 legal actions (Pass, Bet); answer with exactly one'
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Sequence

__all__ = ["ActionMatch", "answer_rule", "normalize_action", "parse_action", "read_action"]

# After ASCII letters are lowered: every run of ASCII characters other than letters and digits separates
# words. Characters outside ASCII are word characters, so a lookalike letter never matches an ASCII one.
_SEPARATORS = re.compile(r"[^0-9a-z\u0080-\U0010ffff]+")
_ASCII_UPPER = re.compile(r"[A-Z]+")
_SPACES = re.compile(r"\s")  # Unicode spaces too
# An answer line's lead-in never crosses a line break (`[^\S\n]`: spacing other than a newline, not `\s`): the
# same lines are found, but a flood of n newlines is read in O(n), not O(n^2) (16,384 took 5 CPU seconds).
_ANSWER_LINE = re.compile(r"^(?:[^\S\n]|[>*_`#-])*(?:action|answer|move)[\s*_`]*[:=](.*)$",
                          re.IGNORECASE | re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class ActionMatch:
    """The legal action an answer names (`index` into the legal list), or None with the `reason`."""

    index: int | None
    reason: str = ""


def normalize_action(text: str) -> str:
    """`text` with ASCII letters lowered and every run of other ASCII non-alphanumerics (and of Unicode
    spaces) turned into one space, stripped: `"[P0]Bid: 13"` -> `"p0 bid 13"`, `"X(1, 1)"` -> `"x 1 1"`."""
    lowered = _ASCII_UPPER.sub(lambda m: m.group().lower(), _SPACES.sub(" ", text))
    return " ".join(_SEPARATORS.sub(" ", lowered).split())


def _shared_words(texts: list[list[str]]) -> int:
    """How many leading words every text shares."""
    n = 0
    while all(len(t) > n for t in texts) and len({t[n] for t in texts}) == 1:
        n += 1
    return n


class _Forms:
    """The normalised forms of a legal list: full texts, their short forms and first words."""

    def __init__(self, legal: Sequence[str]) -> None:
        self.full = [normalize_action(s) for s in legal]
        words = [f.split() for f in self.full]
        shared = _shared_words(words)
        self.short_by_index: list[str | None] = []
        self.index: dict[str, set[int]] = {}
        for i, w in enumerate(words):
            forms = {" ".join(w[k:]) for k in range(min(shared, len(w) - 1) + 1)} if w else set()
            for form in forms:
                self.index.setdefault(form, set()).add(i)
            self.short_by_index.append(" ".join(w[shared:]) if 0 < shared < len(w) else None)
        self.first_words = [w[0] if w else "" for w in words]

    def whole(self, text: str, numbered: bool = False) -> ActionMatch:
        """Rule 1 on `text` as a whole (with `numbered`, a whole number is a position in the list)."""
        answer = normalize_action(text)
        if not answer:
            return ActionMatch(None, "empty answer")
        if numbered and answer.isascii() and answer.isdigit():
            n = int(answer)
            if 1 <= n <= len(self.full):
                return ActionMatch(n - 1)
            return ActionMatch(None, f"no legal action is numbered {n} (they are numbered 1 to {len(self.full)})")
        hits = self.index.get(answer, set())
        if len(hits) == 1:
            return ActionMatch(next(iter(hits)))
        if len(hits) > 1:
            return ActionMatch(None, f"ambiguous: {answer!r} is a short form of {len(hits)} legal actions")
        if numbered:
            listed = self.listed_line(answer)
            if listed is not None:
                return listed
        if answer.isascii() and answer.isalpha():
            starts = [i for i, w in enumerate(self.first_words) if w.startswith(answer)]
            if len(starts) == 1:
                return ActionMatch(starts[0])
            if starts:
                return ActionMatch(None, f"ambiguous: {len(starts)} legal actions begin with {answer!r}")
        return ActionMatch(None, "")

    def listed_line(self, answer: str) -> ActionMatch | None:
        """A copied line of a numbered list (`answer` normalised: `3 x 0 2` from `3. x(0,2)`), or the action
        with its number after it (`x 0 2 3` from `x(0,2) (3)`): the action numbered so when the text beside the
        number names that same action (rule 1), invalid when it names another one; None when `answer` is no
        number beside an action."""
        number, _, rest = answer.partition(" ")
        named = self.whole(rest).index if number.isascii() and number.isdigit() and rest else None
        if named is None:  # the number after the action
            rest, _, number = answer.rpartition(" ")
            named = self.whole(rest).index if number.isascii() and number.isdigit() and rest else None
        if named is None:
            return None
        n = int(number)
        if n == named + 1:
            return ActionMatch(named)
        return ActionMatch(None, f"ambiguous: the number {n} and the text {rest!r} name different legal actions "
                                 f"(the text names number {named + 1})")

    def mentioned(self, text: str) -> list[int]:
        """Legal actions whose full normalised text occurs in `text` as whole words (for reasons only)."""
        padded = f" {normalize_action(text)} "
        return [i for i, f in enumerate(self.full) if f and f" {f} " in padded]


@functools.lru_cache(maxsize=256)  # a prompt and the step after it read the same legal list
def _forms(legal: tuple[str, ...]) -> _Forms:
    return _Forms(legal)


def read_action(text: str, legal: Sequence[str], numbered: bool = False) -> ActionMatch:
    """The legal action `text` names under the module's rule, or None and why not.

    Args:
        text: The answer. A non-`str` names nothing.
        legal: The legal action texts (OpenSpiel's `action_to_string`), in the order the prompt lists them.
        numbered: The prompt numbers the legal actions 1, 2, ...: an answer that is one whole number names
            the action at that position (and never an action whose short form is that number).
    """
    if not isinstance(text, str):
        return ActionMatch(None, f"the answer is a {type(text).__name__}, not text")
    stripped = text.strip()
    exact = [] if numbered else [i for i, s in enumerate(legal) if s.strip() == stripped]
    if len(exact) == 1:
        return ActionMatch(exact[0])
    forms = _forms(tuple(legal))
    found = forms.whole(text, numbered)
    if found.index is not None or found.reason == "empty answer":
        return found
    lines = [m.group(1) for m in _ANSWER_LINE.finditer(text)]
    if lines:
        named = [forms.whole(line, numbered) for line in lines]
        picked = {m.index for m in named}
        if None not in picked and len(picked) == 1:
            return named[0]
        if None in picked:
            return ActionMatch(None, "an answer line names no single legal action: write it as listed")
        return ActionMatch(None, f"ambiguous: its answer lines name {len(picked)} different legal actions")
    if found.reason:
        return found
    mentioned = forms.mentioned(text)
    if len(mentioned) > 1:
        shown = ", ".join(legal[i] for i in mentioned[:6]) + (", ..." if len(mentioned) > 6 else "")
        return ActionMatch(None, f"ambiguous: it names {len(mentioned)} legal actions ({shown}); answer with "
                                 "exactly one")
    if mentioned:
        return ActionMatch(None, f"it mentions {legal[mentioned[0]]} inside other text; answer with the action "
                                 f"alone or with a line 'Action: {legal[mentioned[0]]}'")
    return ActionMatch(None, "it names no legal action")


def parse_action(text: str, legal: Sequence[str], numbered: bool = False) -> int | None:
    """Index in `legal` of the one action `text` names, or None (`read_action` says why)."""
    return read_action(text, legal, numbered).index


def answer_rule(legal: Sequence[str], numbered: bool = False) -> str:
    """The answer rule as the prompt states it, with a short form of `legal` as an example when there is one."""
    if numbered:
        return ("How to answer: reply with the number of exactly one legal action (e.g. `1`), or with the action "
                "written as listed, or end with one line `Action: <number or action>`. An answer that names two or "
                "more actions, restates this text or names none is invalid.")
    forms = _forms(tuple(legal))
    example = next(((legal[i], s) for i, s in enumerate(forms.short_by_index) if s), None)
    short = f"; `{example[1]}` is short for `{example[0]}`" if example else ""
    return ("How to answer: reply with exactly one legal action, written as listed (case, spacing, brackets and "
            f"punctuation do not matter{short}), or end with one line `Action: <a legal action>`. An answer "
            "that names two or more actions, restates this text or names none is invalid.")
