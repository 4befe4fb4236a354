"""The examples a HumanEval prompt states: calls of its function with literal arguments and the values shown.

The code tasks give feedback on these calls only (`rewards.verdicts`): their inputs and results are in
the prompt already, so showing them teaches the model nothing a lookup table could turn into a pass of the
hidden tests. Four ways of writing an example are read:

    >>> f(1, 'a')            # a doctest: the next lines hold the value
    3
    f([1, 2]) == 3           # a call, a separator (==, ==>, =>, ->, ➞, →, "should return", ...), a value
    Input: x = 1, y = 2      # an Input: line (positional or `name = value` arguments), then an Output: line
    Output: 3
    For lst = [1, 2] the output should be 3

Arguments and values must be Python literals (`ast.literal_eval`); lowercase true/false read as bools. Text
that is none of these is skipped, so a misread example is dropped, never an error. The caller still
checks each example against the canonical solution (`rewards.verdicts.record_tests` keeps an example only
when the canonical output equals the value the prompt states).
"""

from __future__ import annotations

import ast
import doctest
import re
from typing import Any

__all__ = ["docstring_examples", "stated_calls"]

_SEPARATOR = re.compile(
    r"\s*(?:#\s*)?(?:==>|==|=>|->|➞|→|=|:\s*expected|:|should\s+return|should\s+be|returns?|gives|is)\s*",
    re.IGNORECASE,
)
_INPUT = re.compile(r"^\s*(?:input|for)\s*:?\s*(.+?)\s*(?:,?\s*the\s+output\s+should\s+be\s+(.+))?$", re.IGNORECASE)
_OUTPUT = re.compile(r"^\s*output\s*:\s*(.+)$", re.IGNORECASE)
_QUOTES = ('"""', "'''")


def docstring_examples(prompt: str, entry_point: str) -> list[tuple[tuple, dict[str, Any], Any]]:
    """The examples `prompt` states for `entry_point`: `(args, kwargs, stated value)` triples, in order, distinct.

    Keyword arguments of the prompt's own signature are made positional (as HumanEval's tests call);
    `kwargs` is left for names the signature does not list positionally (e.g. keyword-only ones).
    """
    try:
        params = _positional_parameters(prompt, entry_point)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    found: list[tuple[tuple, dict[str, Any], Any]] = []
    seen: set[str] = set()

    def add(call_text: str, value_text: str | None) -> None:
        call = _call(call_text, entry_point, params)
        if call is None or value_text is None:
            return
        ok, value = _value(value_text)
        key = repr(call)
        if ok and key not in seen:
            seen.add(key)
            found.append((call[0], call[1], value))

    for source, want in _doctests(prompt):
        add(source, want)
    lines = prompt.splitlines()
    for number, line in enumerate(lines):
        if line.lstrip().startswith(">>>"):
            continue
        for call_text, value_text in _calls_in_line(line, entry_point):
            add(call_text, value_text)
        match = _INPUT.match(line)
        if match and ("=" in match.group(1) or line.strip().lower().startswith("input")):
            if match.group(2) is not None:  # "For x = 1 the output should be 2"
                add(f"{entry_point}({match.group(1).rstrip(',')})", match.group(2))
                continue
            following = next((s for s in lines[number + 1: number + 3] if s.strip()), "")
            output = _OUTPUT.match(following)
            add(f"{entry_point}({match.group(1)})", output.group(1) if output else None)
    return found


def stated_calls(text: str, entry_point: str) -> list[tuple[tuple, dict[str, Any], Any]]:
    """Every `entry_point(<literals>) <separator> <literal>` in `text`, line by line: `(args, kwargs, value)`.

    The separators of the module docstring, and ": expected" (`rewards.verdicts` feedback writes
    "Failed on the prompt's example f(1): expected 2, got 3."). Keyword arguments stay keywords.
    """
    found = []
    for line in text.splitlines():
        for call_text, value_text in _calls_in_line(line, entry_point):
            call = _call(call_text, entry_point, [])
            ok, value = _value(value_text) if call is not None else (False, None)
            if ok:
                found.append((call[0], call[1], value))
    return found


def _calls_in_line(line: str, entry_point: str) -> list[tuple[str, str]]:
    """`(call text, text after its separator)` for each call of `entry_point` in `line` followed by a separator."""
    pairs = []
    for start in (m.start() for m in re.finditer(rf"(?<![\w.]){re.escape(entry_point)}\(", line)):
        end = _closing_paren(line, start + len(entry_point))
        separator = _SEPARATOR.match(line, end + 1) if end is not None else None
        if separator is not None:
            pairs.append((line[start: end + 1], line[separator.end():]))
    return pairs


def _positional_parameters(prompt: str, entry_point: str) -> list[str]:
    for node in ast.parse(prompt).body:
        if isinstance(node, ast.FunctionDef) and node.name == entry_point:
            return [a.arg for a in node.args.posonlyargs + node.args.args]
    raise ValueError(f"no function {entry_point} in the prompt")


def _doctests(prompt: str) -> list[tuple[str, str]]:
    try:
        examples = doctest.DocTestParser().get_examples(prompt)
    except ValueError:  # inconsistent indentation
        return []
    out = []
    for example in examples:
        want = [line for line in example.want.splitlines() if line.strip() not in _QUOTES]
        out.append((example.source, "\n".join(want)))
    return out


def _closing_paren(text: str, start: int) -> int | None:
    """Index of the `)` that closes the `(` at `start`, skipping brackets inside string literals."""
    depth, quote, escaped = 0, "", False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _call(text: str, entry_point: str, params: list[str]) -> tuple[tuple, dict[str, Any]] | None:
    """`(args, kwargs)` of `entry_point(...)` in `text` when every argument is a literal, else None."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point):
            return None
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return None
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None
    # name = value for a positional parameter, in signature order after the positional ones
    for name in params[len(args):]:
        if name not in kwargs:
            break
        args.append(kwargs.pop(name))
    if set(kwargs) & set(params):
        return None  # a keyword that fills a parameter out of order
    return tuple(args), kwargs


def _value(text: str) -> tuple[bool, Any]:
    """The literal at the start of `text` (the longest prefix that is one, up to a word boundary)."""
    text = text.strip()
    cuts = [len(text)] + [m.start() for m in re.finditer(r"[\s.,;#(]", text)][::-1]
    for cut in cuts[:400]:
        candidate = text[:cut].strip().rstrip(".,;")  # prose punctuation, not a 1-tuple
        if candidate.lower() in ("true", "false"):
            return True, candidate.lower() == "true"
        try:
            return True, ast.literal_eval(candidate)
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            continue
    return False, None
