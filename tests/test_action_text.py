"""The answer rule of the games: an answer plays an action only when it names exactly one legal action."""

from __future__ import annotations

import numpy as np
import pytest

from comlrl_env.action_text import answer_rule, normalize_action, parse_action, read_action

KUHN = ["Pass", "Bet"]
TTT = ["x(0,0)", "x(0,1)", "x(0,2)", "x(1,0)", "x(1,1)", "x(1,2)", "x(2,0)", "x(2,1)", "x(2,2)"]
GOOF13 = [f"[P0]Bid: {n}" for n in range(1, 14)]
HANABI = ["(Play 0)", "(Play 1)", "(Discard 0)", "(Discard 1)", "(Reveal player +1 color R)",
          "(Reveal player +1 rank 1)"]
LIARS = ["1-1", "1-2", "2-1", "Liar"]


@pytest.mark.parametrize(
    "text, legal, expected",
    [
        ("Bet", KUHN, "Bet"),  # the text itself
        ("  Pass\n", KUHN, "Pass"),  # surrounding whitespace
        ("bet", KUHN, "Bet"),  # case
        ("Bet.", KUHN, "Bet"),  # punctuation
        ("`Bet`", KUHN, "Bet"),  # markdown code
        ("b", KUHN, "Bet"),  # a word of letters that begins exactly one action
        ("lia", LIARS, "Liar"),
        ("1-2", LIARS, "1-2"),
        ("1 2", LIARS, "1-2"),  # punctuation between numbers is spacing
        ("Play 0", HANABI, "(Play 0)"),  # brackets dropped on both sides
        ("Discard 1", HANABI, "(Discard 1)"),
        ("reveal player +1 color r", HANABI, "(Reveal player +1 color R)"),
        ("1,1", TTT, "x(1,1)"),  # the words every legal action shares (x) may be left out
        ("X(1, 1)", TTT, "x(1,1)"),
        ("(1, 1)", TTT, "x(1,1)"),
        ("1", GOOF13, "[P0]Bid: 1"),  # a number is a whole number: 1 is not 11
        ("3", GOOF13, "[P0]Bid: 3"),  # nor 13
        ("13", GOOF13, "[P0]Bid: 13"),
        ("bid 13", GOOF13, "[P0]Bid: 13"),
        ("Bid: 13", GOOF13, "[P0]Bid: 13"),
        ("[p0]bid:13", GOOF13, "[P0]Bid: 13"),
        ("I think so.\nAction: Bet", KUHN, "Bet"),  # one answer line
        ("\n\n \t> Action: Bet\n\n", KUHN, "Bet"),  # blank lines and a lead-in before it
        ("\n" * 16_000 + "Action: Bet", KUHN, "Bet"),  # after a flood of newlines (read in linear time)
        ("**Action:** x(1,1)", TTT, "x(1,1)"),  # markdown around the answer line
        ("answer: pass", KUHN, "Pass"),
        ("Action: Bet\nAction: bet", KUHN, "Bet"),  # answer lines that agree
        ("I will bet now", KUHN, None),  # an action inside other text is not an answer
        ("Pass\nBet", KUHN, None),  # two actions: ambiguous
        ("\n".join(TTT), TTT, None),  # the pasted legal list
        ("Action: Bet\nAction: Pass", KUHN, None),  # answer lines that disagree
        ("Action: maybe bet", KUHN, None),  # an answer line that names no single action
        ("Betting", KUHN, None),  # a longer word is no prefix of an action
        ("p", HANABI, None),  # begins two actions (Play 0, Play 1)
        ("x", TTT, None),  # begins every action
        ("х(0,0)", TTT, None),  # Cyrillic х: a lookalike is no action
        ("Ｂet", KUHN, None),  # fullwidth B: a lookalike too
        ("Bet\u200b", KUHN, None),  # a zero-width character is not spacing
        ("11", TTT, None),  # not 1,1
        ("5", ["[P0]Bid: 1", "[P0]Bid: 3"], None),  # no such bid
        ("", KUHN, None),
        ("   ", KUHN, None),
        ("🙂 \x00", KUHN, None),
    ],
)
def test_parse_action(text, legal, expected):
    index = parse_action(text, legal)
    assert (legal[index] if index is not None else None) == expected


def test_an_occupied_or_malformed_cell_is_never_read_as_another():
    legal = [t for t in TTT if t != "x(0,0)"]  # x(0,0) was played
    for text in ("x(0, 0)", "x(0,0)", "0,0", "x(0,0,2)", "x(0 0 2)", "x(3,3)"):
        found = read_action(text, legal)
        assert found.index is None and found.reason == "it names no legal action", (text, found)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty answer"),
        (42, "the answer is a int, not text"),
        ("Pass\nBet", "ambiguous: it names 2 legal actions (Pass, Bet); answer with exactly one"),
        ("Action: Bet\nAction: Pass", "ambiguous: its answer lines name 2 different legal actions"),
        ("I bet", "it mentions Bet inside other text; answer with the action alone or with a line 'Action: Bet'"),
        ("fold", "it names no legal action"),
    ],
)
def test_invalid_answers_say_why(text, reason):
    found = read_action(text, KUHN)
    assert found.index is None and found.reason == reason


def test_every_bare_bid_plays_that_bid():
    """All 13 cards of goofspiel, each in the forms a model writes (the old shared-prefix rule cut inside
    the number: "1" played Bid 11 and "13" was flagged)."""
    for n in range(1, 14):
        for text in (str(n), f"bid {n}", f"Bid: {n}", f"[P0]Bid: {n}", f"Action: {n}"):
            assert parse_action(text, GOOF13) == n - 1, text


@pytest.mark.parametrize("text", ["3. x(0,2)", "3) x(0,2)", "3 - x(0,2)", "Action: 3. x(0,2)", "3. 0,2",
                                  "**Action:** 3. X(0, 2)",
                                  # the move first, its list number after: the same action, so it plays
                                  "x(0,2) (3)", "x(0,2) - 3", "Action: x(0,2) (3)"])
def test_a_copied_list_line_plays_its_action(text):
    assert read_action(text, TTT, numbered=True).index == 2


@pytest.mark.parametrize("text, reason", [
    ("3. x(1,1)", "the number 3 and the text 'x 1 1' name different legal actions (the text names number 5)"),
    ("x(1,1) (3)", "the number 3 and the text 'x 1 1' name different legal actions (the text names number 5)"),
    ("Action: 5. x(0,2)", "an answer line names no single legal action"),
    ("1. Pass\n2. Bet", "ambiguous: it names 2 legal actions"),
])
def test_a_number_with_another_actions_text_stays_invalid(text, reason):
    legal = KUHN if "Pass" in text else TTT
    found = read_action(text, legal, numbered=True)
    assert found.index is None and reason in found.reason


def test_normalize_action():
    assert normalize_action("[P0]Bid: 13") == "p0 bid 13"
    assert normalize_action("  X(1,\t1) ") == "x 1 1"
    assert normalize_action("(Reveal player +1 color R)") == "reveal player 1 color r"
    assert normalize_action("х(0,0)") == "х 0 0"  # the Cyrillic letter stays itself
    assert normalize_action("a\u00a0b") == "a b"  # a Unicode space is spacing


def test_answer_rule_names_a_short_form_when_there_is_one():
    assert "`0 0` is short for `x(0,0)`" in answer_rule(TTT)
    assert "`1` is short for `[P0]Bid: 1`" in answer_rule(GOOF13)
    assert "short for" not in answer_rule(KUHN)
    assert answer_rule(KUHN).startswith("How to answer: reply with exactly one legal action")
    assert "`Action: <a legal action>`" in answer_rule(KUHN)


def test_in_real_games_every_legal_text_and_its_forms_name_only_itself():
    """Over random-legal episodes of every suite game and three others, each legal action's own text, its
    normalised text in upper case, and an answer line with it play that action, and the list as a whole plays
    nothing."""
    pytest.importorskip("pyspiel")
    from comlrl_env import make
    from comlrl_env.suites import suites

    rng = np.random.default_rng(0)
    checked = 0
    for env_id in [*suites["games"], "openspiel/connect_four-v0", "openspiel/phantom_ttt-v0",
                   "openspiel/first_sealed_auction-v0"]:
        env = make(env_id)
        for seed in range(3):
            env.reset(seed=seed)
            while env.agents:
                actions = {}
                for agent in env.to_move():
                    legal = env.legal_actions(agent)
                    for i, text in enumerate(legal):
                        for form in (text, normalize_action(text).upper(), f"Reasons.\nAction: {text}"):
                            assert parse_action(form, legal) == i, (env_id, form, legal)
                        for form in (f"{i + 1}. {text}", f"Action: {i + 1}) {text}"):  # a copied numbered line
                            assert parse_action(form, legal, numbered=True) == i, (env_id, form, legal)
                        checked += 1
                    if len(legal) > 1:
                        assert parse_action("\n".join(legal), legal) is None
                    actions[agent] = legal[int(rng.integers(len(legal)))]
                env.step(actions)
    assert checked > 1000
