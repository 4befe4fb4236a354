"""Rule-based text rewards: tag formats, word overlap, code extraction, pass rates.

Like `rewards.functions`, every function is pure and batched: it takes lists
of equal length B (one entry per joint action) and returns B values. Scores
are floats in [0, 1]; extractors return the extracted text.

    format_match(["[yes]", "yes]"], "[", "]")          # [1.0, 0.4]
    overlap_f1(["the cat sat"], ["the cat ran"])         # [0.666...]
    extract_code(["Here:\\n```python\\nx = 1\\n```"])    # ["x = 1\\n"]

Words are lower-cased `\\w+` runs (the tokenization of `rewards.functions`),
counted with multiplicity: "the the" matches "the" once.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

__all__ = [
    "char_similarity",
    "defines_function",
    "extract_code",
    "extract_tagged",
    "format_match",
    "overlap_f1",
    "overlap_precision",
    "overlap_recall",
    "pass_rate",
]

_WORD = re.compile(r"\w+", re.UNICODE)
# An opening fence: three or more backticks, an optional language tag, the end of the line.
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,})[ \t]*([\w+.#-]*)[^\n]*\n", re.MULTILINE)
_PYTHON_TAGS = ("python", "py", "python3", "py3")


def _broadcast(value: str | Sequence[str], size: int, name: str) -> list[str]:
    if isinstance(value, str):
        return [value] * size
    values = list(value)
    if len(values) != size:
        raise ValueError(f"{name} has {len(values)} entries for {size} completions; give one per completion or a str.")
    return values


# ----- tags and brackets ----------------------------------------------------------


def extract_tagged(
    completions: list[str], open_tags: str | Sequence[str], close_tags: str | Sequence[str]
) -> list[str | None]:
    """Text between the first `open_tag` and the next `close_tag` after it, stripped; None when absent.

    `open_tags` / `close_tags` are one str for every completion or one per
    completion (`"<answer>"`, `"["`, ...). Empty content gives `""`.
    """
    opens = _broadcast(open_tags, len(completions), "open_tags")
    closes = _broadcast(close_tags, len(completions), "close_tags")
    found: list[str | None] = []
    for text, open_tag, close_tag in zip(completions, opens, closes):
        if not open_tag or not close_tag:
            raise ValueError(f"tags must be non-empty strings, got {open_tag!r} and {close_tag!r}.")
        start = text.find(open_tag)
        end = text.find(close_tag, start + len(open_tag)) if start >= 0 else -1
        found.append(text[start + len(open_tag) : end].strip() if end >= 0 else None)
    return found


def format_match(
    completions: list[str], open_tags: str | Sequence[str], close_tags: str | Sequence[str]
) -> list[float]:
    """Partial credit for answering as `<open>content<close>`, in [0, 1]: five checks of 0.2 each.

    Per completion (surrounding whitespace ignored): the open tag appears; the
    close tag appears; an open tag is followed by a close tag with non-blank
    content between them; the text starts with the open tag; it ends with the
    close tag. So `"[x]"` scores 1, `"[]"` 0.8, `"so [x] ok"` 0.6, `"[x"` 0.4,
    `"x ]"` 0.4 and text without either tag 0.
    """
    opens = _broadcast(open_tags, len(completions), "open_tags")
    closes = _broadcast(close_tags, len(completions), "close_tags")
    contents = extract_tagged(completions, opens, closes)
    rewards = []
    for text, open_tag, close_tag, content in zip(completions, opens, closes, contents):
        text = text.strip()
        checks = (
            open_tag in text,
            close_tag in text,
            bool(content),
            text.startswith(open_tag),
            text.endswith(close_tag),
        )
        rewards.append(sum(checks) / 5)
    return rewards


def char_similarity(completions: list[str], references: str | Sequence[str]) -> list[float]:
    """Character-level similarity to a reference answer, in [0, 1]: `difflib.SequenceMatcher.ratio()`.

    `2 * M / (len(a) + len(b))`, with M the characters of matching blocks, on
    the stripped completion and reference (1 when equal, 0 when both are
    empty). Dense partial credit: any shared character counts, and text much
    longer than the reference is diluted.
    """
    wanted = _broadcast(references, len(completions), "references")
    rewards = []
    for text, reference in zip(completions, wanted):
        a, b = text.strip(), reference.strip()
        rewards.append(difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() if a or b else 0.0)
    return rewards


# ----- word overlap (ROUGE-1 style) ---------------------------------------------------


def _overlap_counts(candidates: list[str], references: list[str]) -> list[tuple[int, int, int]]:
    """Per pair: (clipped unigram matches, candidate words, reference words), case-insensitive."""
    counts = []
    for candidate, reference in zip(candidates, references, strict=True):
        cand, ref = Counter(_WORD.findall(candidate.lower())), Counter(_WORD.findall(reference.lower()))
        counts.append((sum((cand & ref).values()), sum(cand.values()), sum(ref.values())))
    return counts


def overlap_precision(candidates: list[str], references: list[str]) -> list[float]:
    """Share of the candidate's words found in the reference (clipped counts); 0 for an empty candidate."""
    return [hits / n_cand if n_cand else 0.0 for hits, n_cand, _ in _overlap_counts(candidates, references)]


def overlap_recall(candidates: list[str], references: list[str]) -> list[float]:
    """Share of the reference's words found in the candidate (clipped counts); 0 for an empty reference."""
    return [hits / n_ref if n_ref else 0.0 for hits, _, n_ref in _overlap_counts(candidates, references)]


def overlap_f1(candidates: list[str], references: list[str]) -> list[float]:
    """ROUGE-1 F1: harmonic mean of `overlap_precision` and `overlap_recall`, in [0, 1]."""
    return [
        2 * hits / (n_cand + n_ref) if hits else 0.0  # = 2PR / (P + R)
        for hits, n_cand, n_ref in _overlap_counts(candidates, references)
    ]


# ----- code -------------------------------------------------------------------------------


def extract_code(completions: list[str]) -> list[str]:
    """The Python code of each completion, taken from markdown fences.

    Per completion: the first fenced block tagged python/py/python3/py3, else
    the first untagged one, else the first with any other tag, else (no fence
    at all) the whole text. A block ends at a line of at least as many
    backticks; an unclosed fence (a generation cut off mid-block) runs to the
    end of the text.
    """
    codes = []
    for text in completions:
        blocks: list[tuple[int, str]] = []  # (rank: 0 python, 1 untagged, 2 other; body), in text order
        position = 0
        while (opening := _FENCE_OPEN.search(text, position)) is not None:
            ticks, tag = opening.group(1), opening.group(2).lower()
            rank = 0 if tag in _PYTHON_TAGS else 1 if not tag else 2
            close = re.compile(rf"^[ \t]*{ticks}`*[ \t]*$", re.MULTILINE).search(text, opening.end())
            if close is None:
                blocks.append((rank, text[opening.end() :]))
                break
            blocks.append((rank, text[opening.end() : close.start()]))
            position = close.end()
        codes.append(min(blocks, key=lambda block: block[0])[1] if blocks else text)  # min keeps the first
    return codes


def defines_function(codes: list[str], names: str | Sequence[str]) -> list[float]:
    """1.0 where the code parses and defines a top-level function `name` (def or async def), else 0.0."""
    wanted = _broadcast(names, len(codes), "names")
    rewards = []
    for code, name in zip(codes, wanted):
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, MemoryError, RecursionError):  # ValueError: null bytes
            rewards.append(0.0)
            continue
        defined = any(
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in tree.body
        )
        rewards.append(float(defined))
    return rewards


def pass_rate(results: list[Sequence[Any]]) -> list[float]:
    """Fraction of passing runs per item: each item is a list of `ExecutionResult`s (or bools); 0 when empty.

    A run passes when its `.ok` is true (`rewards.code.ExecutionResult`), or
    when it is the bool True.
    """
    rates = []
    for runs in results:
        runs = list(runs)
        passed = sum(bool(r) if isinstance(r, bool) else bool(getattr(r, "ok", False)) for r in runs)
        rates.append(passed / len(runs) if runs else 0.0)
    return rates
