"""Rule-based rewards in `rewards.functions`: table tests, hand-computed, one comment per row."""

from __future__ import annotations

import math

import pytest

from rewards import call_reward_function
from rewards.functions import exact_match, length_ratio, word_overlap

# length_ratio scores min(r / target, target / r), r = words(long) / words(short), each count at least 1.
LENGTH_RATIO = [
    # 4 words / 2 words = 2 = target -> 1
    ("one two", "a b c d", 2.0, 1.0),
    # 2 / 2 = 1, half the target -> 1/2
    ("one two", "a b", 2.0, 0.5),
    # 8 / 1 = 8, four times the target -> 1/4
    ("a", "a b c d e f g h", 2.0, 0.25),
    # 3 / 1 = 3 -> 2/3
    ("a", "b c d", 2.0, 2 / 3),
    # longer "long" than "short" is not required: 1 / 4 = 0.25 -> 0.25 / 2 = 1/8
    ("a b c d", "e", 2.0, 0.125),
    # both empty: counts floor at 1, r = 1 -> 1/2
    ("", "", 2.0, 0.5),
    # empty short counts as one word: 2 / 1 = 2 -> 1
    ("", "a b", 2.0, 1.0),
    # empty long counts as one word: 1 / 4 -> 1/8
    ("a b c d", "", 2.0, 0.125),
    # whitespace and punctuation only are empty: 1 / 1 -> 1/2
    ("  \n\t", "?!...", 2.0, 0.5),
    # punctuation does not count: "Hi" = 1 word, "Hello", "world", "again" = 3 -> 2/3
    ("Hi!", "Hello, world... again?", 2.0, 2 / 3),
    # an apostrophe splits a word: "don't" = "don" + "t" = 2 words; 4 / 2 -> 1
    ("don't", "a b c d", 2.0, 1.0),
    # accented and Cyrillic letters are word characters: 4 / 2 -> 1
    ("héllo wörld", "один два три четыре", 2.0, 1.0),
    # an unbroken CJK run is one word: 2 / 1 -> 1
    ("你好", "你好 世界", 2.0, 1.0),
    # emoji are not word characters: 2 / 1 -> 1 (the emoji adds nothing)
    ("a 🙂", "b c 🚀", 2.0, 1.0),
    # target 1: equal lengths -> 1
    ("a b", "c d", 1.0, 1.0),
    # target 3: 6 / 1 = 6, twice the target -> 1/2
    ("a", "b c d e f g", 3.0, 0.5),
    # target 0.5: 1 / 2 = 0.5 -> 1
    ("a b", "c", 0.5, 1.0),
]


@pytest.mark.parametrize("short, long, target, expected", LENGTH_RATIO)
def test_length_ratio(short, long, target, expected):
    assert length_ratio([short], [long], target=target) == [pytest.approx(expected)]


def test_length_ratio_batch_and_default_target():
    # rows 1, 2 and 6 of the table at once, with the default target of 2
    assert length_ratio(["one two", "one two", ""], ["a b c d", "a b", ""]) == pytest.approx([1.0, 0.5, 0.5])
    # an empty batch scores nothing
    assert length_ratio([], []) == []


@pytest.mark.parametrize("target", [0.0, -1.0, math.nan, math.inf])
def test_length_ratio_rejects_bad_target(target):
    with pytest.raises(ValueError, match="target"):
        length_ratio(["a"], ["b"], target=target)


def test_length_ratio_rejects_unequal_lists():
    with pytest.raises(ValueError):
        length_ratio(["a", "b"], ["c"])


# word_overlap is the Jaccard index |A & B| / |A | B| of the lower-cased word sets.
WORD_OVERLAP = [
    # identical texts -> 1
    ("the cat", "the cat", 1.0),
    # case is ignored -> 1
    ("The Cat", "the cat", 1.0),
    # word order is ignored -> 1
    ("cat the", "the cat", 1.0),
    # {a, b} & {b, c} = {b}; union {a, b, c} -> 1/3
    ("a b", "b c", 1 / 3),
    # no word in common -> 0
    ("red green", "blue", 0.0),
    # repeats count once: {a, b} & {a} = {a}; union {a, b} -> 1/2
    ("a a a b", "a", 0.5),
    # punctuation is not a word: {cat, dog} & {dog, bird} -> 1/3
    ("cat, dog!", "dog; bird", 1 / 3),
    # both empty -> 0 (nothing to agree on)
    ("", "", 0.0),
    # one empty: 0 / 1 -> 0
    ("", "x", 0.0),
    # punctuation only on both sides: both sets empty -> 0
    ("!!!", "???", 0.0),
    # accented letters, case folded by lower(): {über, café} on both sides -> 1
    ("Über café", "über CAFÉ", 1.0),
    # Greek capitals lower-case to the same word -> 1
    ("ΣΟΦΙΑ", "σοφια", 1.0),
    # CJK run is one word; {你好} & {你好, 世界} -> 1/2
    ("你好", "你好 世界", 0.5),
    # digits are words: {42} & {42, apples} -> 1/2
    ("42", "42 apples", 0.5),
]


@pytest.mark.parametrize("first, second, expected", WORD_OVERLAP)
def test_word_overlap(first, second, expected):
    assert word_overlap([first], [second]) == [pytest.approx(expected)]
    # symmetric
    assert word_overlap([second], [first]) == [pytest.approx(expected)]


def test_word_overlap_batch():
    assert word_overlap(["a b", "x", ""], ["b c", "x", ""]) == pytest.approx([1 / 3, 1.0, 0.0])
    with pytest.raises(ValueError):
        word_overlap(["a"], [])


# exact_match compares the stripped texts exactly (case and Unicode code points included).
EXACT_MATCH = [
    # identical -> 1
    ("42", "42", 1.0),
    # surrounding whitespace is stripped -> 1
    (" 42\n", "42", 1.0),
    # Unicode whitespace (no-break space, em space) is stripped too -> 1
    ("\u00a0answer\u2003", "answer", 1.0),
    # a numerically equal but different text -> 0
    ("42", "42.0", 0.0),
    # case matters -> 0
    ("Paris", "paris", 0.0),
    # inner whitespace matters -> 0
    ("New  York", "New York", 0.0),
    # both empty -> 1
    ("", "", 1.0),
    # empty vs whitespace: both strip to "" -> 1
    ("", "  \t", 1.0),
    # empty completion vs a real answer -> 0
    ("", "4", 0.0),
    # accented text, same code points -> 1
    ("naïve café", "naïve café", 1.0),
    # emoji -> 1
    ("🙂", " 🙂 ", 1.0),
]


@pytest.mark.parametrize("completion, answer, expected", EXACT_MATCH)
def test_exact_match(completion, answer, expected):
    result = exact_match([completion], [answer])
    assert result == [expected]
    assert type(result[0]) is float


def test_exact_match_batch():
    assert exact_match(["4", " 9 ", "x"], ["4", "9", "y"]) == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError):
        exact_match(["a", "b"], ["a"])


@pytest.mark.parametrize(
    "fn, first, second, expected",
    [
        # two agents' lists, a batch of two: one joint reward per joint action
        (length_ratio, ["one two", "a"], ["a b c d", "b c d"], [[1.0, 1.0], [2 / 3, 2 / 3]]),
        # word overlap of the two agents' answers
        (word_overlap, ["a b", "x"], ["b c", "x"], [[1 / 3, 1 / 3], [1.0, 1.0]]),
        # exact agreement of the two agents
        (exact_match, ["4", "5"], ["4", "6"], [[1.0, 1.0], [0.0, 0.0]]),
    ],
)
def test_usable_as_reward_func(fn, first, second, expected):
    # the functions follow the positional calling convention (extra keywords are not passed to them)
    out = call_reward_function(fn, [first, second], prompts=["p", "q"], batch_items=[{}, {}])
    assert out == [pytest.approx(row) for row in expected]
