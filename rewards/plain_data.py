"""Plain data across the sandbox boundary: the programs a verdict runs there and the literals they exchange.

Plain data is None, bool, int, float, str, and list, tuple and dict of them. Recorded inputs go into a run
as Python literals (`literal`); the two programs run in the sandbox (`RECORDER` on trusted dataset code,
`HARNESS` after model code) write values as literals; the parent reads them back with `parse_plain`
(`ast.literal_eval`, never pickle or eval) and shows them in feedback with `shown`. `rewards.verdicts`
says how a verdict uses them.

Text from a run is model text: `parse_plain` and `shown` never raise on it except with `ValueError`
(`parse_plain`: "not plain data"), and an int that Python could not write back in decimal (over
`MAX_INT_BITS` bits, about 3900 digits; `int`/`repr` stop at 4300) is not plain data.
"""

from __future__ import annotations

import ast
import math
from typing import Any

__all__ = ["HARNESS", "MAX_DEPTH", "MAX_INT_BITS", "MAX_VALUE_CHARS", "RECORDER", "literal", "parse_plain", "short_repr",
           "shown"]

MAX_VALUE_CHARS = 100_000
"""Longest result literal accepted from a run; longer is a failure for that input."""
MAX_DEPTH = 32
"""Deepest nesting of containers accepted in a result."""
MAX_INT_BITS = 13_000
"""Largest int accepted in a result, in bits (about 3900 decimal digits: below Python's 4300-digit str limit)."""

# Runs in the sandbox with the problems as JSON on stdin. Nothing model-written ever runs here. Each problem:
# [source, test, entry point, seed, example calls]; the canonical solution's output on each example call (the
# prompt's own examples, as `literal((args, kwargs))` text) is recorded too, or None when it raised or hung.
RECORDER = r'''
import ast, json, random, signal, sys
def _hung(signum, frame):
    raise TimeoutError("example took over 2 s")
signal.signal(signal.SIGALRM, _hung)
problems = json.loads(sys.stdin.read())
for index, (source, test, entry, seed, examples) in enumerate(problems):
    try:
        namespace = {"__name__": "__humaneval__"}
        exec(compile(source, "solution.py", "exec"), namespace)
        exec(compile(test, "test.py", "exec"), namespace)
        canonical = namespace[entry]
        calls = []
        def candidate(*args, **kwargs):
            text = repr((args, kwargs))  # before the call: a solution may mutate its arguments
            out = canonical(*args, **kwargs)
            calls.append([text, repr(out)])
            return out
        random.seed(seed)
        namespace["check"](candidate)
        outputs = []
        for example in examples:
            try:
                args, kwargs = ast.literal_eval(example)
                signal.alarm(2)
                outputs.append(repr(canonical(*args, **kwargs)))
            except Exception:
                outputs.append(None)
            finally:
                signal.alarm(0)
        line = {"index": index, "calls": calls, "examples": outputs}
    except BaseException as exc:
        line = {"index": index, "error": "%s: %s" % (type(exc).__name__, exc)}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
'''

# Appended after model code. It holds inputs only. Whatever model code did to builtins, modules or
# frames can only change the lines written here; judge() decides in the parent from those lines.
HARNESS = r'''

# --- harness: calls the entry point on each input and writes each return value (no tests here) ---
def _comlrl_harness(function, calls, tag):
    import os

    def literal(value, depth):
        kind = type(value)
        if value is None or kind is bool or kind is int or kind is str:
            return repr(value)
        if kind is float:
            if value != value:
                raise ValueError("nan is not a comparable value")
            return repr(value) if abs(value) != float("inf") else ("1e999" if value > 0 else "-1e999")
        if depth >= %(depth)d:
            raise ValueError("nested too deeply")
        if kind is list:
            return "[" + ", ".join(literal(v, depth + 1) for v in value) + "]"
        if kind is tuple:
            return "(" + "".join(literal(v, depth + 1) + ", " for v in value) + ")"
        if kind is dict:
            if any(type(k) is not str for k in value):
                raise TypeError("dict keys must be str")
            return "{" + ", ".join(repr(k) + ": " + literal(v, depth + 1) for k, v in value.items()) + "}"
        raise TypeError("a %%s is not plain data" %% kind.__name__)

    def emit(text):
        data = ("\n" + tag + " " + text + "\n").encode("utf-8", "backslashreplace")
        while data:
            data = data[os.write(1, data):]

    emit("start")
    for index, (args, kwargs) in enumerate(calls):
        try:
            value = function(*args, **kwargs)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: they fail this input only
            try:
                text = "!" + type(exc).__name__ + ": " + str(exc)[:300]
            except BaseException:
                text = "!" + "exception"
        else:
            try:
                text = "=" + literal(value, 0)
                if len(text) > %(chars)d:
                    text = "?the value is over %(chars)d characters long"
            except BaseException as exc:
                text = "?" + str(exc)[:200]
        emit(str(index) + " " + text.replace("\n", " ").replace("\r", " "))
    emit("end")
'''


def literal(value: Any) -> str:
    """Python source that rebuilds plain data (repr, except infinities, which repr writes as inf)."""
    if type(value) is float and math.isinf(value):
        return "1e999" if value > 0 else "-1e999"
    if type(value) is list:
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if type(value) is tuple:
        return "(" + "".join(literal(v) + ", " for v in value) + ")"
    if type(value) is dict:
        return "{" + ", ".join(f"{k!r}: {literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def short_repr(value: Any, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters (the cut ones replaced by "..."), for error messages; never
    raises: a value whose repr fails (absurd nesting, an int over Python's 4300-digit limit) is named by type."""
    try:
        text = repr(value)
    except Exception:  # RecursionError, ValueError for a huge int, or a user's broken __repr__
        return f"<a {type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(value: Any, limit: int = 120) -> str:
    """`literal(value)` cut to `limit` characters for feedback; never raises (a value it cannot write is named)."""
    try:
        text = literal(value)
    except (ValueError, RecursionError, MemoryError):  # an int over the str-conversion limit, absurd nesting
        return f"<a {type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _NotPlain(ValueError):
    pass


def parse_plain(text: str, *, str_keys: bool = True) -> Any:
    """`ast.literal_eval(text)` restricted to plain data (None, bool, int, float, str, list, tuple, dict[str, .]).

    With `str_keys=False` dict keys may be any hashable plain data (recorded inputs such as
    HumanEval/95's `{1: "a"}`); returned values always need str keys.

    Raises:
        ValueError: the text is too long, is no literal, or holds another type (set, bytes, complex...).
    """
    if len(text) > MAX_VALUE_CHARS:
        raise _NotPlain(f"over {MAX_VALUE_CHARS} characters")
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError, OverflowError) as exc:  # ValueError:
        # also a decimal int over 4300 digits and a NUL or lone surrogate in the text
        raise _NotPlain(f"not a Python literal ({type(exc).__name__})") from None
    _check_plain(value, 0, str_keys)
    return value


def _check_plain(value: Any, depth: int, str_keys: bool = True) -> None:
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        if kind is float and value != value:
            raise _NotPlain("nan")
        if kind is int and value.bit_length() > MAX_INT_BITS:
            raise _NotPlain(f"an int over {MAX_INT_BITS} bits")
        return
    if depth >= MAX_DEPTH:
        raise _NotPlain("nested too deeply")
    if kind in (list, tuple):
        for item in value:
            _check_plain(item, depth + 1, str_keys)
        return
    if kind is dict:
        for key, item in value.items():
            if str_keys and type(key) is not str:
                raise _NotPlain("a dict key is not a str")
            _check_plain(key, depth + 1, str_keys)
            _check_plain(item, depth + 1, str_keys)
        return
    raise _NotPlain(f"a {kind.__name__} is not plain data")
