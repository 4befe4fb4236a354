"""Recording a HumanEval problem's tests from trusted dataset code, and comparing a returned value with them.

    tests = record_tests([problem])[0]        # inputs and canonical outputs, recorded once, cached
    outputs_match(tests.calls[0], value, tests.mode)

**Record** (a sandbox run of trusted dataset code only, once per problem, kept in this process's memory):
the problem's `check(candidate)` runs against a wrapper of the canonical solution that records each call's
arguments and return value: the hidden tests, `RecordedTests.calls`. Unseeded `random` in a check
(HumanEval/38, 50, 53) is seeded with `RECORD_SEED` first, so every process records the same inputs. The
same run calls the canonical solution on each example the prompt states (`rewards.docstring_examples`);
an example is kept, in `RecordedTests.examples`, when the canonical output matches the value the prompt
states for it (so it shows nothing the prompt does not), and the kept examples never cover every hidden
input (HumanEval/34's one test is its docstring example: there it is held back), so a lookup table of
the examples fails a hidden test.

**Compare** (`outputs_match`, mode "equal"): Python's `==` on plain data (so 1 == 1.0 == True and [1] !=
(1,)), except that an expected float accepts any number within `REL_TOL`/`ABS_TOL` (math.isclose). The
checks that are not `assert candidate(...) == expected` (the survey of all 164 is in `SPECIAL_CASES`'
comment) get their own mode:

- "close" tests (HumanEval/2, 4: `abs(candidate(x) - y) < 1e-6`) are mode "equal": the float tolerance
  covers them.
- "root" (HumanEval/32 find_zero, `|poly(xs, candidate(xs))| < 1e-4`): any real number x with
  `|sum_i xs[i] * x**i| < 1e-4` is right.
- "sequence" (33, 37: `tuple(candidate(x)) == tuple(y)`): a list or a tuple whose items equal the
  expected ones.
- "truth" (52, 56, 61: `assert candidate(x)` / `assert not candidate(x)`): plain data with the canonical
  output's truth value.
- "bool" (72: `candidate(x) is True`): exactly the bool the canonical returns.

HumanEval/33 also asserts `tuple(candidate(x)) == tuple(sort_third(x))`, which compares the model's
function with itself; here it is compared with the canonical output, so it is stricter than the original.
"""

from __future__ import annotations

import ast
import json
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rewards.docstring_examples import docstring_examples
from rewards.plain_data import RECORDER, literal, parse_plain
from rewards.sandbox import ExecutionResult, execute

__all__ = [
    "ABS_TOL",
    "RECORD_SEED",
    "REL_TOL",
    "ROOT_TOL",
    "SPECIAL_CASES",
    "RecordedCall",
    "RecordedTests",
    "check_patterns",
    "outputs_match",
    "record_tests",
]

REL_TOL = 1e-6
"""Relative tolerance for an expected float."""
ABS_TOL = 1e-6
"""Absolute tolerance for an expected float (HumanEval/2 and 4 test `abs(got - expected) < 1e-6`)."""
ROOT_TOL = 1e-4
"""HumanEval/32: `|poly(xs, x)| < ROOT_TOL` makes x a root, as in its check."""
RECORD_SEED = 0
"""Seed of `random` before each check is recorded (HumanEval/38, 50 and 53 draw unseeded inputs)."""

# Survey of the 164 `check` bodies (`check_patterns` classifies each call of `candidate` inside an assert):
# 155 problems only assert `candidate(...) == expected` (plain equality; 38, 44, 50, 53 and 151 compute
# the inputs or the expected value in a loop, which changes nothing here). The others:
#   HumanEval/2, 4    abs(candidate(x) - y) < 1e-6          -> "equal" with the float tolerance
#   HumanEval/32      |poly(xs, candidate(xs))| < 1e-4       -> "root"
#   HumanEval/33, 37  tuple(candidate(x)) == tuple(y)        -> "sequence"
#   HumanEval/52, 56, 61  assert (not) candidate(x)          -> "truth"
#   HumanEval/72      candidate(x) is True / is False        -> "bool"
SPECIAL_CASES: dict[str, str] = {
    "HumanEval/32": "root",
    "HumanEval/33": "sequence",
    "HumanEval/37": "sequence",
    "HumanEval/52": "truth",
    "HumanEval/56": "truth",
    "HumanEval/61": "truth",
    "HumanEval/72": "bool",
}
"""Verdict mode of each HumanEval problem whose check is not plain equality; every other one is "equal"."""

# The check patterns (from `check_patterns`) each mode may meet; a problem outside them has no rule.
_ALLOWED_PATTERNS = {
    "equal": {"equal", "close"},
    "root": {"assigned"},
    "sequence": {"sequence"},
    "truth": {"truth"},
    "bool": {"is"},
}
_MODES = frozenset(_ALLOWED_PATTERNS)


@dataclass(frozen=True)
class RecordedCall:
    """One call `check` made: the arguments and the canonical solution's return value, all plain data."""

    args: tuple
    kwargs: dict[str, Any]
    expected: Any


@dataclass(frozen=True)
class RecordedTests:
    """A problem's recorded calls and the rule that compares a returned value with the expected one."""

    task_id: str
    entry_point: str
    mode: str
    """How a value is compared: one of "equal", "root", "sequence", "truth", "bool" (module docstring)."""
    calls: tuple[RecordedCall, ...]
    """The hidden tests: the calls `check` made. They decide the verdict and are never shown."""
    examples: tuple[RecordedCall, ...] = ()
    """The prompt's own examples whose stated value the canonical output matches; feedback shows these."""

    @property
    def run_calls(self) -> tuple[RecordedCall, ...]:
        """The calls one run makes, as `judge` numbers them: the examples, then the hidden tests (the harness runs
        them in a fresh random order, `rewards.verdicts.run_order`)."""
        return self.examples + self.calls


# ----- recording (trusted code only) ------------------------------------------------------------

_cache: dict[tuple[str, ...], RecordedTests] = {}
_cache_lock = threading.Lock()


def _cache_key(problem: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(problem[k] for k in ("task_id", "prompt", "canonical_solution", "test", "entry_point"))


def check_patterns(test: str) -> set[str]:
    """How a HumanEval `test` uses `candidate`: a set of "equal", "close", "sequence", "truth", "is", "assigned".

    Each call of `candidate` is classified by the assert that holds it: `assert candidate(x) == y`
    ("equal"), `assert abs(candidate(x) - y) < t` ("close"), `assert tuple(candidate(x)) == y`
    ("sequence"), `assert candidate(x)` or `assert not candidate(x)` ("truth"), `assert candidate(x)
    is y` ("is"); a call whose result is assigned is "assigned". Calls in an assert's message (run
    only on failure) do not count. Any other use is "other", which no verdict mode covers.
    """
    tree = ast.parse(test)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    patterns = set()
    for node in ast.walk(tree):
        if not _is_call_of(node, "candidate"):
            continue
        statement = node
        while statement in parents and not isinstance(statement, ast.stmt):
            statement = parents[statement]
        if isinstance(statement, ast.Assert) and statement.msg is not None and _within(node, statement.msg):
            continue
        if isinstance(statement, ast.Assign) and statement.value is node:
            patterns.add("assigned")
        elif isinstance(statement, ast.Assert):
            patterns.add(_assert_pattern(node, statement.test))
        else:
            patterns.add("other")
    return patterns


def _is_call_of(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _assert_pattern(call: ast.Call, test: ast.expr) -> str:
    """The pattern of `call` inside the condition `test` of an assert (see `check_patterns`)."""
    if test is call or (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and test.operand is call):
        return "truth"
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return "other"
    op, left = test.ops[0], test.left
    if left is call:
        return {ast.Eq: "equal", ast.Is: "is"}.get(type(op), "other")
    if isinstance(op, ast.Eq) and _is_call_of(left, "tuple") and left.args == [call]:
        return "sequence"
    if (
        isinstance(op, ast.Lt)
        and _is_call_of(left, "abs")
        and len(left.args) == 1
        and isinstance(left.args[0], ast.BinOp)
        and isinstance(left.args[0].op, ast.Sub)
        and left.args[0].left is call
    ):
        return "close"
    return "other"


def _within(node: ast.AST, tree: ast.AST) -> bool:
    return any(n is node for n in ast.walk(tree))


def record_tests(
    problems: Sequence[Mapping[str, str]], *, timeout: float = 60.0, memory_mb: int = 1024
) -> list[RecordedTests]:
    """The recorded calls of each problem (fields task_id, prompt, canonical_solution, test, entry_point).

    Problems not yet in this process's cache are recorded together in one sandbox run of trusted code
    (the prompt, the canonical solution and the test; nothing written by a model) and cached in memory.
    The prompt's examples are recorded in the same run (the module docstring says which are kept).

    Raises:
        ValueError: a problem's check uses `candidate` in a way no verdict mode covers.
        RuntimeError: the recording failed (the canonical solution failed its own test, an output is
            not plain data, or the sandbox could not run).
    """
    with _cache_lock:
        missing = {_cache_key(p): p for p in problems if _cache_key(p) not in _cache}
    for problem in missing.values():  # before anything runs: a check without a rule is a setup error
        mode = SPECIAL_CASES.get(problem["task_id"], "equal")
        unknown = check_patterns(problem["test"]) - _ALLOWED_PATTERNS[mode]
        if unknown:
            raise ValueError(
                f"{problem['task_id']}'s check uses candidate as {sorted(unknown)}, which its verdict mode "
                f"{mode!r} does not cover. Add it to rewards.verdicts.SPECIAL_CASES with a rule."
            )
    if missing:
        recorded = _record(list(missing.values()), timeout=timeout, memory_mb=memory_mb)
        with _cache_lock:
            for key, tests in zip(missing, recorded):
                if isinstance(tests, RecordedTests):
                    _cache[key] = tests
        errors = [tests for tests in recorded if isinstance(tests, str)]
        if errors:
            more = f" ({len(errors) - 1} more problems failed too)" if len(errors) > 1 else ""
            raise RuntimeError(errors[0] + more)
    with _cache_lock:
        return [_cache[_cache_key(p)] for p in problems]


def _record(problems: list[Mapping[str, str]], *, timeout: float, memory_mb: int) -> list[RecordedTests | str]:
    """One sandbox run of the recorder over `problems`: each one's RecordedTests, or an error message."""
    stated = [_plain_examples(p) for p in problems]
    payload = json.dumps([
        [p["prompt"] + p["canonical_solution"], p["test"], p["entry_point"], RECORD_SEED, [t for t, _ in examples]]
        for p, examples in zip(problems, stated)
    ])
    lines: dict[int, dict] = {}
    result: ExecutionResult | None = None
    for attempt in range(3):  # a transient sandbox failure (e.g. no free process slot) is retried
        if attempt:
            time.sleep(0.5 * attempt)
        result = execute(RECORDER, stdin=payload, timeout=timeout, memory_mb=memory_mb, max_output_bytes=64 * 2**20)
        lines = {}
        for line in result.stdout.splitlines():
            try:
                item = json.loads(line)
                lines[int(item["index"])] = item
            except (ValueError, KeyError, TypeError):
                continue
        if result.ok and len(lines) == len(problems):
            break
    recorded: list[RecordedTests | str] = []
    for index, problem in enumerate(problems):
        item, task_id = lines.get(index), problem["task_id"]
        try:
            if item is None:
                stderr = result.stderr.strip()[-500:] if result else ""
                raise ValueError(f"no output from the recording run (stderr: {stderr})")
            if "error" in item:
                raise ValueError(f"the canonical solution failed its check: {item['error']}")
            calls = []
            for args_text, out_text in item["calls"]:
                args, kwargs = parse_plain(args_text, str_keys=False)
                if type(args) is not tuple or type(kwargs) is not dict:
                    raise ValueError(f"bad call record {args_text[:200]!r}")
                calls.append(RecordedCall(args=args, kwargs=kwargs, expected=parse_plain(out_text)))
            if not calls:
                raise ValueError("check never called the solution")
        except ValueError as exc:  # parse_plain's errors too: an input or output that is not plain data
            recorded.append(f"Recording the tests of {task_id} failed: {exc}")
            continue
        mode = SPECIAL_CASES.get(task_id, "equal")
        examples = _agreeing_examples(stated[index], item.get("examples") or [], mode, calls)
        recorded.append(RecordedTests(task_id, problem["entry_point"], mode, tuple(calls), examples))
    return recorded


def _plain_examples(problem: Mapping[str, str]) -> list[tuple[str, Any]]:
    """The prompt's examples whose inputs are plain data: `(literal((args, kwargs)), stated value)` pairs."""
    found = []
    for args, kwargs, value in docstring_examples(problem["prompt"], problem["entry_point"]):
        text = literal((args, kwargs))
        try:
            parse_plain(text, str_keys=False)
        except ValueError:  # a set or bytes argument: the harness passes plain data only
            continue
        found.append((text, value))
    return found


def _agreeing_examples(
    stated: list[tuple[str, Any]], outputs: list[str | None], mode: str, calls: list[RecordedCall]
) -> tuple[RecordedCall, ...]:
    """The examples whose stated value is a right answer by the canonical output, never covering every hidden call."""
    kept = []
    for (text, value), out_text in zip(stated, outputs):
        if out_text is None:
            continue
        try:
            args, kwargs = parse_plain(text, str_keys=False)
            call = RecordedCall(args=args, kwargs=kwargs, expected=parse_plain(out_text))
        except ValueError:
            continue
        if outputs_match(call, value, mode):
            kept.append(call)
    hidden = {literal((c.args, c.kwargs)) for c in calls}
    if hidden <= {literal((c.args, c.kwargs)) for c in kept}:  # a table of the examples would pass: hold back
        kept = [c for c in kept if literal((c.args, c.kwargs)) not in hidden]
    return tuple(kept)


# ----- the comparison -----------------------------------------------------------------------

def _same(expected: Any, got: Any) -> bool:
    numbers = (bool, int, float)
    if type(expected) in numbers and type(got) in numbers:
        if type(expected) is float:
            return math.isclose(got, expected, rel_tol=REL_TOL, abs_tol=ABS_TOL)
        return expected == got
    if type(expected) is not type(got):
        return False  # [1] != (1,), "1" != 1: as Python's == says
    if type(expected) in (list, tuple):
        return len(expected) == len(got) and all(_same(e, g) for e, g in zip(expected, got))
    if type(expected) is dict:
        return expected.keys() == got.keys() and all(_same(v, got[k]) for k, v in expected.items())
    return expected == got  # str, None


def _poly(xs: Sequence[float], x: float) -> float:
    """sum_i xs[i] * x**i, evaluated as HumanEval/32's `poly` does (math.pow per term)."""
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def outputs_match(call: RecordedCall, got: Any, mode: str = "equal") -> bool:
    """Whether `got` (plain data) is a right answer to `call` under `mode` (see the module docstring).

    "equal": Python's == on plain data, an expected float within math.isclose(rel 1e-6, abs 1e-6);
    "root": a number x with |poly(call.args[0], x)| < 1e-4; "sequence": a list or tuple whose items
    are "equal"; "truth": bool(got) == bool(expected); "bool": the same bool.
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {sorted(_MODES)}, got {mode!r}.")
    try:
        if mode == "root":
            if type(got) not in (int, float) or not math.isfinite(got):
                return False
            return abs(_poly(call.args[0], got)) < ROOT_TOL
        if mode == "sequence":
            return type(got) in (list, tuple) and _same(tuple(call.expected), tuple(got))
        if mode == "truth":
            return bool(got) == bool(call.expected)
        if mode == "bool":
            return type(got) is bool and got == call.expected
        return _same(call.expected, got)
    except (OverflowError, ValueError, TypeError, IndexError):  # e.g. a huge int against a float
        return False
