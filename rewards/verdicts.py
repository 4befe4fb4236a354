"""HumanEval verdicts decided outside the process that runs model code, with feedback that hides the tests.

    tests = record_tests([problem])[0]                 # hidden tests and the prompt's examples, recorded once
    tag = new_tag()
    program = prefix + harness(problem["entry_point"], tests.run_calls, tag)
    verdict = judge(tests, execute(program), tag)       # verdict.passed, verdict.feedback

Three steps, three places:

1. **Record** (`rewards.recording`, a sandbox run of trusted dataset code only): each hidden test's
   inputs and canonical output (`tests.calls`), and the prompt's own examples (`tests.examples`: calls
   the docstring states, with the canonical output, kept only when it matches the value the prompt shows).
2. **Run** (the sandbox, model code): the program is model code followed by `harness(...)`, which calls
   the entry point on each input, examples and hidden tests mixed in a fresh random order (`run_order`),
   and writes each return value as a Python literal of plain data on its own line, prefixed with a
   per-run tag and the call's position in that order. The program holds no test code, no expected output
   and nothing that tells a hidden test from an example.
3. **Judge** (this process, `judge`): each result line is parsed with `ast.literal_eval` (never pickle,
   never eval) into plain data and compared with the canonical output (`rewards.recording.outputs_match`).

**Verdict.** A run passes when it exits 0 in time and every hidden test has exactly one result, equal to
the canonical one. The examples do not count (HumanEval's own tests decide, as in HumanEval).

**Call order.** The order is drawn from the run's tag with a key this process holds and the sandbox
never sees (`run_order`), so it is new for every run and model code cannot recompute it, even though it
can read the tag. A call's number or position then says nothing about which test it is: code that
answers by call count (cycling the docstring's outputs) or that swaps the harness's inputs for the
docstring's from a trace hook no longer lines up with the hidden tests (HumanEval/95's hidden tests
start with inputs shaped like its docstring examples). `harness` and `judge` of one run must be called
in the same process.

**Feedback** (the next turn's observation in a multi-turn task) never reveals what the hidden tests check:

- about an example it says everything (the prompt shows it already): "Failed on the prompt's example
  f(x): expected X, got Y.", "... raised ValueError: message", "Timed out after T s on the prompt's
  example f(x).";
- about the hidden tests it says only what does not depend on their expected values: that they fail,
  and the first hidden input (in the tests' own order) on which the function raised, returned no plain
  data or printed two results, else where the run stopped or timed out (the call it stopped on, in run
  order; a hidden input is not named), or how the program exited after the last input; else "a returned
  value is wrong". Which hidden value is
  wrong, or right, is never said, so a lookup table of everything the feedback showed holds no hidden
  answer, and the hidden tests are never all among the examples (`rewards.recording`);
- before the first input: the exit status and the last lines of stderr (file paths replaced), or
  "Timed out ... before the tests started."

Every function here reads model text (the run's output) and never raises on it.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewards.plain_data import HARNESS, MAX_DEPTH, MAX_VALUE_CHARS, literal, parse_plain, shown
from rewards.recording import (
    ABS_TOL,
    RECORD_SEED,
    REL_TOL,
    ROOT_TOL,
    SPECIAL_CASES,
    RecordedCall,
    RecordedTests,
    check_patterns,
    outputs_match,
    record_tests,
)
from rewards.sandbox import ExecutionResult

__all__ = [
    "ABS_TOL",
    "REL_TOL",
    "RECORD_SEED",
    "SPECIAL_CASES",
    "RecordedCall",
    "RecordedTests",
    "Verdict",
    "check_patterns",
    "harness",
    "judge",
    "new_tag",
    "outputs_match",
    "parse_plain",
    "record_tests",
    "run_order",
    "scrub_paths",
]

FEEDBACK_VALUE_CHARS = 120
FEEDBACK_CHARS = 400
_MAX_INDEX_DIGITS = 6  # a result line's index: ASCII digits only (int() reads '²' and '١' too, or fails)


@dataclass(frozen=True)
class Verdict:
    """The outcome of one run: `passed` and a short `feedback` line that shows no hidden test."""

    passed: bool
    feedback: str
    failed_call: int | None = None
    """Index of the first prompt example that failed (None otherwise: passed, or every example passed)."""


# ----- the run (model code, then the harness) ---------------------------------------------------

def new_tag() -> str:
    """A fresh per-run tag that marks the harness's result lines (16 hex digits).

    It only keeps honest output from being read as a result; model code may read it, which gains it
    nothing, because a result counts only when it equals an output the sandbox never holds.
    """
    return secrets.token_hex(8)


_ORDER_KEY = secrets.token_bytes(32)
"""The key `run_order` mixes with a run's tag: drawn once per process, never written into a program."""


def run_order(tag: str, count: int) -> list[int]:
    """The order one run makes its `count` calls: position p runs call `run_order(tag, count)[p]`.

    A uniform shuffle seeded by HMAC-SHA256(`_ORDER_KEY`, tag): new for every tag, the same for one tag
    within this process (so `judge` finds what `harness` ran), and not computable from the tag alone.
    """
    seed = hmac.new(_ORDER_KEY, tag.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return order


def harness(entry_point: str, calls: Sequence[RecordedCall], tag: str) -> str:
    """Python source to append after the model code: it runs `entry_point` on each call's inputs, in the
    order `run_order(tag, len(calls))`.

    It writes `<tag> <p> =<literal>` (the return value as a Python literal of plain data),
    `<tag> <p> !<Error>: <message>` (an exception) or `<tag> <p> ?<why>` (not plain data) per call, `p` the
    call's position in the run order, between `<tag> start` and `<tag> end` lines. It contains no expected
    output. `judge` maps positions back to the calls of `RecordedTests.run_calls` (examples, then hidden tests).
    """
    if not entry_point.isidentifier():
        raise ValueError(f"entry_point must be a Python identifier, got {entry_point!r}.")
    ordered = [calls[i] for i in run_order(tag, len(calls))]
    inputs = ",\n    ".join(f"({literal(c.args)}, {literal(c.kwargs)})" for c in ordered)
    source = HARNESS % {"depth": MAX_DEPTH, "chars": MAX_VALUE_CHARS}
    return f"{source}\n_comlrl_harness({entry_point}, [\n    {inputs},\n], {tag!r})\n"


# ----- the verdict (this process) ---------------------------------------------------------------

def _short(text: str, limit: int = FEEDBACK_VALUE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _call_text(entry_point: str, call: RecordedCall) -> str:
    parts = [literal(a) for a in call.args] + [f"{k}={literal(v)}" for k, v in call.kwargs.items()]
    return _short(f"{entry_point}({', '.join(parts)})", 2 * FEEDBACK_VALUE_CHARS)


_ABS_PATH = re.compile(r"(?<![\w.])/(?:[^\s'\"/:,()<>]+/)*[^\s'\"/:,()<>]+")
_TRACE_FILE = re.compile(r'File "[^"\n]*"')


def scrub_paths(text: str, limit: int = 4 * FEEDBACK_CHARS) -> str:
    """`text`'s last `limit` characters, traceback file names replaced by program.py, other absolute paths by <path>.

    Cut first, so that model output of any length costs the same (a flood of `File "` without a closing
    quote would cost quadratic time).
    """
    return _ABS_PATH.sub("<path>", _TRACE_FILE.sub('File "program.py"', text[-limit:]))


@dataclass(frozen=True)
class _Outcome:
    """What one call's result lines say.

    `kind`: "ok", "wrong", "missing", "twice" (two results), "raised", "odd" (not plain data) or "unreadable".
    """

    kind: str
    detail: str = ""
    got: Any = None


def _read(stdout: str, tag: str, count: int) -> tuple[bool, bool, dict[int, list[str]]]:
    """(start line seen, end line seen, result texts by call index) of the harness lines marked `tag`."""
    results: dict[int, list[str]] = {}
    started = ended = False
    prefix = tag + " "
    for line in stdout.split("\n"):
        if not line.startswith(prefix):
            continue
        body = line[len(prefix):]
        if body == "start":
            started = True
        elif body == "end":
            ended = True
        else:
            index, _, text = body.partition(" ")
            if index.isascii() and index.isdigit() and len(index) <= _MAX_INDEX_DIGITS and int(index) < count:
                results.setdefault(int(index), []).append(text)
    return started, ended, results


def _outcome(call: RecordedCall, lines: list[str], mode: str) -> _Outcome:
    if not lines:
        return _Outcome("missing")
    if len(lines) > 1:
        return _Outcome("twice")
    text = lines[0]
    if text.startswith("!"):
        return _Outcome("raised", scrub_paths(text[1:]))
    if not text.startswith("="):
        return _Outcome("odd", scrub_paths(text[1:]))
    try:
        got = parse_plain(text[1:])
    except ValueError as exc:
        return _Outcome("unreadable", str(exc))
    return _Outcome("ok" if outputs_match(call, got, mode) else "wrong", got=got)


def judge(tests: RecordedTests, result: ExecutionResult, tag: str, *, timeout: float | None = None) -> Verdict:
    """The verdict on one run of `model code + harness(tests.entry_point, tests.run_calls, tag)`.

    Passed iff the run exited 0 within its limits, wrote the harness's end line, and for every hidden
    call i (`tests.calls`) stdout holds exactly one result line whose value `outputs_match` the
    canonical output. The feedback follows the module docstring: details about the prompt's examples,
    about the hidden tests nothing that depends on their expected values. Everything is decided here,
    from the run's text output; nothing in the run's process is trusted.
    """
    examples = len(tests.examples)
    calls = tests.run_calls
    order = run_order(tag, len(calls))
    started, ended, at = _read(result.stdout, tag, len(calls))  # result texts by position in the run order
    results = {order[p]: texts for p, texts in at.items()}
    outcomes = [_outcome(call, results.get(i, []), tests.mode) for i, call in enumerate(calls)]
    hidden = outcomes[examples:]
    if not result.output_truncated and started and ended and result.ok and all(o.kind == "ok" for o in hidden):
        return Verdict(True, "All tests passed.")
    limit = f"{timeout:g} s" if timeout is not None else "the time limit"
    if result.output_truncated:
        return Verdict(False, "Failed: the program printed more output than allowed.")
    if not started:
        return Verdict(False, _before_the_tests(result, limit))
    # The call the run stopped on: the first without a result, in run order.
    stop = next((i for i in order if outcomes[i].kind == "missing"), None)
    for index, (call, outcome) in enumerate(zip(tests.examples, outcomes)):
        if outcome.kind != "ok" and (outcome.kind != "missing" or index == stop):
            shown_call = _call_text(tests.entry_point, call)
            return Verdict(False, _short(_example_feedback(shown_call, call, outcome, tests.mode, result, limit),
                                         FEEDBACK_CHARS), index)
    head = "The prompt's examples pass, but the hidden tests fail" if examples else (
        "The hidden tests fail (the prompt states no example to check)")
    stopped = [] if stop is None else [outcomes[stop]]  # a hidden input: the examples were looked at above
    errors = [o for o in hidden if o.kind not in ("ok", "wrong", "missing")]
    reason = _hidden_reason(errors + stopped, result, ended, limit)
    if examples and stop is not None and any(o.kind == "missing" for o in outcomes[:examples]):
        head = "The hidden tests fail"  # the run stopped before some examples ran
    return Verdict(False, _short(f"{head}: {reason}.", FEEDBACK_CHARS))


def _before_the_tests(result: ExecutionResult, limit: str) -> str:
    if result.timed_out:
        return f"Timed out after {limit} before the tests started."
    if result.ok:
        return "Tests not run: the program exited with status 0 before the tests finished."
    tail = "\n".join(scrub_paths(result.stderr or "").strip().splitlines()[-8:])[-800:]
    if result.returncode is None:
        return f"Not run: the sandbox could not run the program:\n{tail}"
    return f"Tests failed (exit code {result.returncode}) before the first input. Last lines of the error:\n{tail}"


def _example_feedback(call_text: str, call: RecordedCall, outcome: _Outcome, mode: str,
                      result: ExecutionResult, limit: str) -> str:
    where = f"the prompt's example {call_text}"
    if outcome.kind == "missing":
        if result.timed_out:
            return f"Timed out after {limit} on {where}."
        if result.ok:
            return "Tests not run: the program exited with status 0 before the tests finished."
        return f"Failed on {where}: the program stopped (exit code {result.returncode})."
    if outcome.kind == "twice":
        return f"Failed on {where}: more than one result was printed for it."
    if outcome.kind == "raised":
        return f"Failed on {where}: raised {outcome.detail}"
    if outcome.kind == "odd":
        return f"Failed on {where}: the returned value is not plain data ({outcome.detail})."
    if outcome.kind == "unreadable":
        return f"Failed on {where}: the returned value could not be read ({outcome.detail})."
    if mode == "root":
        want = f"a root x with |poly(xs, x)| < {ROOT_TOL:g} (e.g. {shown(call.expected)})"
    elif mode == "truth":
        want = f"a {'truthy' if call.expected else 'falsy'} value"
    else:
        want = shown(call.expected, FEEDBACK_VALUE_CHARS)
    return f"Failed on {where}: expected {want}, got {shown(outcome.got, FEEDBACK_VALUE_CHARS)}."


def _hidden_reason(hidden: list[_Outcome], result: ExecutionResult, ended: bool, limit: str) -> str:
    """Why the hidden tests fail, from what does not depend on their expected values (never which value):
    `hidden` holds the hidden outcomes to report, in the order to report them."""
    for outcome in hidden:  # "ok" and "wrong" alike are skipped: their difference is the secret
        if outcome.kind == "missing":
            if result.timed_out:
                return f"timed out after {limit} on a hidden input"
            if result.ok:
                return "the program exited with status 0 before the hidden tests finished"
            return f"the program stopped (exit code {result.returncode}) on a hidden input"
        if outcome.kind == "twice":
            return "more than one result was printed for a hidden input"
        if outcome.kind == "raised":
            return f"on a hidden input the function raised {outcome.detail}"
        if outcome.kind in ("odd", "unreadable"):
            return f"on a hidden input the returned value is not plain data ({outcome.detail})"
    if not ended or not result.ok:
        if result.timed_out:
            return f"timed out after {limit} after the last input"
        return f"the program exited with status {result.returncode} after the last input"
    return "a returned value is wrong"
