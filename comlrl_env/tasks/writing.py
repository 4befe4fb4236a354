"""writing/DocSummary-v1 and writing/DocSummaryGeneralSum-v1: summarize and expand Python module docs.

Corpus (offline, no download): the module docstrings of the running
interpreter's standard library. Module names are taken in sorted order from
`sys.stdlib_module_names` (packages include their public submodules; names
with a leading `_`, and `test*` modules, are skipped); each docstring is read
with `ast.get_docstring` from the source under
`sysconfig.get_paths()["stdlib"]`, without importing anything. Docstrings of
200-2000 characters are kept, at most `max_docs` (default 200), spread evenly
over the sorted list when there are more. Task instance i is document i; the
set depends on the Python version (about 175 documents on CPython 3.11), so
compare results on one interpreter. `writing.stdlib_docs()` returns the list.

Agents and roles: `agent_0` (`summarizer`) writes a summary of the document
in about `words / summary_ratio` words; `agent_1` (`expander`) writes an
explanation `expand_ratio` times as long as that summary covering the same
points. Both act at once and both see the document.

Observation: the module name, the document and the agent's instruction with
its target length in words.

Action: free text.

Reward: four scores in [0, 1], with S the summary, E the expansion and D the
document (word counts and overlaps from `rewards.functions` /
`rewards.text`; lower-cased `\\w+` words):

- `L_S = length_ratio(S, D, summary_ratio)`: D is `summary_ratio` (default 4) times longer than S;
- `P_S = overlap_precision(S, D)`: the summary's words come from the document;
- `L_E = length_ratio(S, E, expand_ratio)`: E is `expand_ratio` (default 3) times longer than S;
- `R_E = overlap_recall(E, S)`: the expansion contains the summary's words.

A score counts only what is above chance: the summary's score is
`S = L_S * gate(P_S)` and the expansion's `E = L_E * gate(R_E)`, with
`gate(x) = max(0, 2x - 1)` (0 up to half overlap, 1 at full overlap), and `E`
is 0 unless `S > 0` (an expansion of no summary is no expansion). An empty
answer, or one that restates a prompt (`is_echo`; the prompt holds the whole
document), scores 0 and is flagged `invalid_action`.

DocSummary-v1 (cooperative): both agents get `(S + E) / 2`.
DocSummaryGeneralSum-v1 (general-sum): `agent_0` gets `S` and `agent_1` gets
`E`; the expander's reward still depends on the summary, the summarizer's
does not depend on the expansion. These rule rewards can still be gamed
(copying the document's first sentences as the summary scores well); they are
meant for training signal and method comparison, not as a measure of writing
quality.

Termination: after the single turn.

Versions: v1 (both tasks) gates each score on overlap above chance and
scores restated prompts 0. v0 (removed) averaged the four scores, so empty
answers earned about 0.09 (the expander 0.17) and random words up to 0.18.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import re
import sys
import sysconfig
import tokenize

from comlrl_env.base import AgentID, TextParallelEnv
from rewards.functions import length_ratio
from rewards.text import overlap_precision, overlap_recall

__all__ = ["DocSummary", "DocSummaryGeneralSum", "stdlib_docs"]

MIN_CHARS, MAX_CHARS = 200, 2000
_WORD = re.compile(r"\w+", re.UNICODE)  # the words `length_ratio` counts


def _module_docstring(path: str) -> str | None:
    """The module docstring of a source file, parsing only the lines up to its end."""
    try:
        with open(path, "rb") as f:
            source = f.read()
        end = None
        for token in tokenize.tokenize(io.BytesIO(source).readline):
            if token.type in (tokenize.ENCODING, tokenize.COMMENT, tokenize.NL):
                continue
            if token.type == tokenize.STRING:
                end = token.end  # implicit concatenation: keep going to the statement's end
                continue
            break
        if end is None:
            return None
        head = b"".join(source.splitlines(keepends=True)[: end[0]])
        return ast.get_docstring(ast.parse(head))
    except (OSError, SyntaxError, ValueError, tokenize.TokenError):  # ValueError: null bytes, bad encoding
        return None


def _stdlib_sources() -> list[tuple[str, str]]:
    """(dotted module name, source path) of the public pure-Python stdlib modules, sorted by name."""
    root = sysconfig.get_paths()["stdlib"]
    found = []
    for name in sorted(sys.stdlib_module_names):
        if name.startswith(("_", "test")):
            continue
        path, package = os.path.join(root, name + ".py"), os.path.join(root, name)
        if os.path.isfile(path):
            found.append((name, path))
        elif os.path.isfile(os.path.join(package, "__init__.py")):
            for folder, subfolders, files in os.walk(package):
                subfolders[:] = sorted(d for d in subfolders if not d.startswith(("_", "test", "idle_test")))
                for file in sorted(files):
                    stem = file[:-3]
                    private = stem.startswith("_") and stem != "__init__"
                    if not file.endswith(".py") or stem.startswith("test") or private:
                        continue
                    parts = os.path.relpath(os.path.join(folder, stem), root).split(os.sep)
                    found.append((".".join(parts[:-1] if stem == "__init__" else parts), os.path.join(folder, file)))
    return sorted(found)


@functools.lru_cache(maxsize=None)
def stdlib_docs(max_docs: int = 200) -> tuple[tuple[str, str], ...]:
    """(module name, docstring) pairs of the corpus, deterministic for one interpreter."""
    docs = []
    for name, path in _stdlib_sources():
        doc = _module_docstring(path)
        if doc is not None and MIN_CHARS <= len(doc) <= MAX_CHARS:
            docs.append((name, doc))
    if len(docs) > max_docs:
        docs = [docs[i * len(docs) // max_docs] for i in range(max_docs)]
    return tuple(docs)


def _words(text: str) -> int:
    return len(_WORD.findall(text))


class DocSummary(TextParallelEnv):
    """A summarizer and an expander write about one stdlib module doc; one joint reward."""

    # num_tasks is set per instance from the corpus found on this interpreter.
    metadata = {**TextParallelEnv.metadata, "name": "writing/DocSummary-v1", "num_tasks": None}

    def __init__(self, summary_ratio: float = 4.0, expand_ratio: float = 3.0, max_docs: int = 200, **kwargs) -> None:
        super().__init__(num_agents=2, num_turns=1, roles=["summarizer", "expander"], **kwargs)
        for name, value in (("summary_ratio", summary_ratio), ("expand_ratio", expand_ratio)):
            if not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a finite number > 0, got {value}.")
        if isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs < 1:
            raise ValueError(f"max_docs must be a positive int, got {max_docs!r}.")
        self.summary_ratio, self.expand_ratio = float(summary_ratio), float(expand_ratio)
        self.max_docs = max_docs
        if not self.docs:
            raise RuntimeError(
                f"no module docstrings of {MIN_CHARS}-{MAX_CHARS} characters were found under "
                f"{sysconfig.get_paths()['stdlib']!r}; this task needs the Python standard library's source files."
            )
        self.metadata = {**type(self).metadata, "num_tasks": len(self.docs)}

    @property
    def docs(self) -> tuple[tuple[str, str], ...]:
        """The corpus: `stdlib_docs(max_docs)`, cached per process (so neither copied nor pickled)."""
        return stdlib_docs(self.max_docs)

    def load_task(self, task_index: int | None) -> dict:
        if task_index is None:
            task_index = int(self.np_random.integers(self.num_tasks))
        module, doc = self.docs[task_index]
        summary_words = max(round(_words(doc) / self.summary_ratio), 1)
        return {"module": module, "doc": doc, "summary_words": summary_words}

    def prompts(self) -> dict[AgentID, str]:
        module, doc, n = self.task["module"], self.task["doc"], self.task["summary_words"]
        head = f"Documentation of the Python module `{module}`:\n\n{doc}\n\n"
        return {
            "agent_0": head + f"Summarize this documentation in about {n} words.\n",
            "agent_1": head
            + (
                f"Another writer summarizes it in about {n} words. Write an explanation that covers the same "
                f"points in about {round(n * self.expand_ratio)} words.\n"
            ),
        }

    def agent_scores(self, summary: str, expansion: str) -> dict[AgentID, tuple[float, float]]:
        """Each agent's two scores: `(L_S, P_S)` for the summarizer, `(L_E, R_E)` for the expander."""
        doc = self.task["doc"]
        return {
            "agent_0": (
                length_ratio([summary], [doc], self.summary_ratio)[0],
                overlap_precision([summary], [doc])[0],
            ),
            "agent_1": (
                length_ratio([summary], [expansion], self.expand_ratio)[0],
                overlap_recall([expansion], [summary])[0],
            ),
        }

    def _scores(self, actions: dict[AgentID, str]) -> dict[AgentID, float]:
        """`S` for the summarizer and `E` for the expander (see the module doc)."""
        valid = {}
        for agent, text in actions.items():
            reason = ("empty answer" if not text.strip()
                      else "the answer restates a prompt" if self.is_echo(text) else None)
            if reason:
                self.flag_invalid(agent, reason)
            valid[agent] = reason is None
        scores = self.agent_scores(actions["agent_0"], actions["agent_1"])
        (l_s, p_s), (l_e, r_e) = scores["agent_0"], scores["agent_1"]
        summary = l_s * _above_chance(p_s) if valid["agent_0"] else 0.0
        expansion = l_e * _above_chance(r_e) if valid["agent_1"] and summary > 0 else 0.0
        return {"agent_0": summary, "agent_1": expansion}

    def score(self, actions: dict[AgentID, str]) -> tuple[float, bool]:
        scores = self._scores(actions)
        return (scores["agent_0"] + scores["agent_1"]) / 2, True


class DocSummaryGeneralSum(DocSummary):
    """DocSummary with per-agent rewards: each agent is paid its own two scores."""

    metadata = {
        **DocSummary.metadata,
        "name": "writing/DocSummaryGeneralSum-v1",
        "reward_structure": "general",
    }

    def score(self, actions: dict[AgentID, str]) -> tuple[dict[AgentID, float], bool]:
        return self._scores(actions), True


def _above_chance(overlap: float) -> float:
    """0 up to half overlap, rising linearly to 1 at full overlap."""
    return max(0.0, 2.0 * overlap - 1.0)
