"""Rule-based rewards in `rewards.text`: table tests, hand-computed, one comment per row."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rewards.text import (
    char_similarity,
    defines_function,
    extract_code,
    extract_tagged,
    format_match,
    overlap_f1,
    overlap_precision,
    overlap_recall,
    pass_rate,
)

# format_match: 0.2 each for open tag present, close tag present, non-blank wrapped content,
# starts with the open tag, ends with the close tag.
FORMAT_MATCH = [
    # the ideal answer: all five
    ("[apple]", "[", "]", 1.0),
    # surrounding whitespace is ignored
    ("  [apple]\n", "[", "]", 1.0),
    # wrapped in the middle of a sentence: present, present, content
    ("I say [apple] now", "[", "]", 0.6),
    # starts with the open tag but never closes: present, starts
    ("[apple", "[", "]", 0.4),
    # ends with the close tag, no open tag: present, ends
    ("apple]", "[", "]", 0.4),
    # empty brackets: everything but content
    ("[]", "[", "]", 0.8),
    # blank content counts as none
    ("[   ]", "[", "]", 0.8),
    # the wrong bracket scores nothing
    ("(apple)", "[", "]", 0.0),
    # reversed brackets: both present, nothing wrapped, wrong first and last characters
    ("]apple[", "[", "]", 0.4),
    # multi-character tags
    ("<answer>7</answer>", "<answer>", "</answer>", 1.0),
    # identical open and close tags: the close is searched after the open
    ("**bold**", "**", "**", 1.0),
    # a lone identical tag is present twice, starts and ends, but wraps nothing
    ("**", "**", "**", 0.8),
    # a lone bracket somewhere in the text: present only
    ("x [ y", "[", "]", 0.2),
    # empty text
    ("", "[", "]", 0.0),
]


@pytest.mark.parametrize("text, open_tag, close_tag, expected", FORMAT_MATCH)
def test_format_match(text: str, open_tag: str, close_tag: str, expected: float) -> None:
    assert format_match([text], open_tag, close_tag) == [expected]


def test_format_match_takes_one_tag_pair_per_completion() -> None:
    # per-row tags: the first row wants brackets, the second parentheses
    assert format_match(["[a]", "[a]"], ["[", "("], ["]", ")"]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="open_tags has 1 entries for 2 completions"):
        format_match(["[a]", "[b]"], ["["], "]")
    with pytest.raises(ValueError, match="tags must be non-empty"):
        format_match(["[a]"], "", "]")


# char_similarity: difflib ratio 2 * matched / (len(a) + len(b)) on stripped texts.
CHAR_SIMILARITY = [
    # identical
    ("[apple]", "[apple]", 1.0),
    # surrounding whitespace is ignored
    (" [apple]\n", "[apple]", 1.0),
    # the reference without brackets: 5 matched of 5 + 7 characters
    ("apple", "[apple]", 10 / 12),
    # case matters: "[" and "pple]" match, 6 of 7 + 7
    ("[Apple]", "[apple]", 12 / 14),
    # the whole reference inside a longer text: 7 of 16 + 7
    ("it is [apple] ok", "[apple]", 14 / 23),
    # nothing shared
    ("xyz", "[apple]", 0.0),
    # an empty answer
    ("", "[apple]", 0.0),
    # both empty: 0, not difflib's 1
    ("", "", 0.0),
]


@pytest.mark.parametrize("text, reference, expected", CHAR_SIMILARITY)
def test_char_similarity(text: str, reference: str, expected: float) -> None:
    assert char_similarity([text], reference) == [pytest.approx(expected)]


EXTRACT_TAGGED = [
    # the first wrapped text, stripped
    ("x [ a b ] y [c]", "[", "]", "a b"),
    # no close tag after the open tag
    ("[abc", "[", "]", None),
    # no open tag
    ("abc]", "[", "]", None),
    # empty content is "", not None
    ("<t></t>", "<t>", "</t>", ""),
]


@pytest.mark.parametrize("text, open_tag, close_tag, expected", EXTRACT_TAGGED)
def test_extract_tagged(text: str, open_tag: str, close_tag: str, expected: str | None) -> None:
    assert extract_tagged([text], open_tag, close_tag) == [expected]


# (candidate, reference, precision, recall, f1); words are lower-cased \w+ runs, counts clipped.
OVERLAP = [
    # 2 of 3 words shared both ways: P = R = F1 = 2/3
    ("the cat sat", "the cat ran", 2 / 3, 2 / 3, 2 / 3),
    # identical up to case and punctuation
    ("The CAT!", "the cat", 1.0, 1.0, 1.0),
    # a short candidate inside a long reference: P = 1, R = 2/6, F1 = 2*2/(2+6) = 1/2
    ("cat sat", "the cat sat on the mat", 1.0, 1 / 3, 0.5),
    # repeated words are clipped: "the the the" matches "the" once: P = 1/3, R = 1/2, F1 = 2/(3+2) = 2/5
    ("the the the", "the cat", 1 / 3, 1 / 2, 2 / 5),
    # nothing shared
    ("dog", "cat", 0.0, 0.0, 0.0),
    # empty candidate: P = 0 (not a division by zero), R = 0
    ("", "cat", 0.0, 0.0, 0.0),
    # empty reference: R = 0
    ("cat", "", 0.0, 0.0, 0.0),
    # both empty
    ("", "", 0.0, 0.0, 0.0),
    # punctuation only counts as empty
    ("?!", "...", 0.0, 0.0, 0.0),
]


@pytest.mark.parametrize("candidate, reference, precision, recall, f1", OVERLAP)
def test_overlap(candidate: str, reference: str, precision: float, recall: float, f1: float) -> None:
    assert overlap_precision([candidate], [reference]) == [pytest.approx(precision)]
    assert overlap_recall([candidate], [reference]) == [pytest.approx(recall)]
    assert overlap_f1([candidate], [reference]) == [pytest.approx(f1)]


def test_overlap_is_batched_and_strict() -> None:
    assert overlap_f1(["a", "b"], ["a", "c"]) == [1.0, 0.0]
    with pytest.raises(ValueError):
        overlap_f1(["a", "b"], ["a"])


EXTRACT_CODE = [
    # no fence: the whole text
    ("x = 1\n", "x = 1\n"),
    # a python-tagged block, prose around it dropped
    ("Here:\n```python\nx = 1\n```\nDone.", "x = 1\n"),
    # the py tag counts as python
    ("```py\nx = 1\n```", "x = 1\n"),
    # a python block wins over an earlier untagged one
    ("```\nout\n```\n```python\nx = 1\n```", "x = 1\n"),
    # the first python block of several
    ("```python\na = 1\n```\n```python\nb = 2\n```", "a = 1\n"),
    # an untagged block wins over another language
    ("```bash\nls\n```\n```\nx = 1\n```", "x = 1\n"),
    # only another language: that block
    ("```js\nlet x\n```", "let x\n"),
    # an unclosed fence: the text after it
    ("```python\nx = 1\ny = 2", "x = 1\ny = 2"),
    # closed block, then an unclosed one: the closed python block (check_env's gibberish)
    ("```python\nprint('hi')\n```\n```\nunclosed", "print('hi')\n"),
    # a python block cut off at the end beats an earlier closed untagged one
    ("```\nexample\n```\n```python\ndef f(", "def f("),
    # a longer closing fence closes a shorter opening one
    ("````python\nx = 1\n`````", "x = 1\n"),
    # indented fences (inside a list item) are found
    ("1. code:\n   ```python\n   x = 1\n   ```", "   x = 1\n"),
    # empty text
    ("", ""),
]


@pytest.mark.parametrize("text, expected", EXTRACT_CODE)
def test_extract_code(text: str, expected: str) -> None:
    assert extract_code([text]) == [expected]


DEFINES_FUNCTION = [
    # a top-level def of the name
    ("def aux(x):\n    return x\n", "aux", 1.0),
    # async def counts
    ("async def aux():\n    pass\n", "aux", 1.0),
    # a different name
    ("def helper(x):\n    return x\n", "aux", 0.0),
    # nested inside another function: not top level
    ("def f():\n    def aux():\n        pass\n", "aux", 0.0),
    # a lambda assigned to the name is not a def
    ("aux = lambda x: x\n", "aux", 0.0),
    # a syntax error
    ("def aux(:\n", "aux", 0.0),
    # null bytes make ast.parse raise ValueError: scored 0, not raised
    ("def aux():\x00 pass", "aux", 0.0),
    # empty code
    ("", "aux", 0.0),
]


@pytest.mark.parametrize("code, name, expected", DEFINES_FUNCTION)
def test_defines_function(code: str, name: str, expected: float) -> None:
    assert defines_function([code], name) == [expected]


PASS_RATE = [
    # every run passed
    ([SimpleNamespace(ok=True), SimpleNamespace(ok=True)], 1.0),
    # one of four
    ([SimpleNamespace(ok=True)] + [SimpleNamespace(ok=False)] * 3, 0.25),
    # plain bools are accepted
    ([True, False], 0.5),
    # no runs: 0, not a division by zero
    ([], 0.0),
    # an object without `.ok` counts as a failure
    ([object()], 0.0),
]


@pytest.mark.parametrize("runs, expected", PASS_RATE)
def test_pass_rate(runs: list, expected: float) -> None:
    assert pass_rate([runs]) == [expected]
