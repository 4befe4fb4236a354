"""Write `docs/config.md`, the configuration reference, from the learner configs' field docstrings.

    .venv/bin/python docs/config_md.py

`tests/test_configs.py` fails when the file is stale, so the reference always says what the code does.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import sys

# Run as a script, this folder comes first on sys.path, and its page folder docs/learners/ would shadow the
# package as an empty namespace package: the repository's root goes first.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from learners import IACConfig, LearnerConfig, MAACConfig, MAGRPOConfig, MARLHFConfig, MARLHFIterConfig  # noqa: E402
from learners.actor_critic_config import ActorCriticConfig  # noqa: E402

# ActorCriticConfig is not a learner's, but IACConfig and MAACConfig list only what differs from it: without
# it here, the fields both share (ppo_epochs, critic_type, ...) would be documented nowhere.
CONFIGS = (LearnerConfig, MAGRPOConfig, ActorCriticConfig, IACConfig, MAACConfig, MARLHFConfig, MARLHFIterConfig)
TARGET = pathlib.Path(__file__).with_name("config.md")


def field_docs(cls: type) -> dict[str, str]:
    """Each field's attribute docstring, from `cls` and the dataclasses it extends (the nearest wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(inspect.getsource(klass)).body[0].body
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def default(field: dataclasses.Field) -> str:
    value = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
    return f"`{value!r}`"


def render() -> str:
    lines = ["# Configuration reference", "",
             "Generated from the field docstrings by `docs/config_md.py`; every learner config extends",
             "`LearnerConfig`. A subclass lists its own fields and the shared ones whose default it changes.", "",
             "\"The reference\" and \"the reference library\" below mean CoMLRL 1.4.3, the existing library whose",
             "`*Trainer` API the learners mirror (`MAGRPOTrainer`, `IACTrainer`, `MAACTrainer`, ... are aliases of",
             "`MAGRPO`, `IAC`, `MAAC`, ...): a field with its name keeps its meaning unless the text says",
             "otherwise.", ""]
    for cls in CONFIGS:
        docs = field_docs(cls)
        parent = next((b for b in cls.__mro__[1:] if dataclasses.is_dataclass(b)), None)
        inherited = {f.name: default(f) for f in dataclasses.fields(parent)} if parent else {}
        lines += [f"## {cls.__name__}", "", " ".join(inspect.getdoc(cls).split()), "",
                  "| field | default | meaning |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            if inherited.get(f.name) == default(f):
                continue
            meaning = docs.get(f.name, "").replace("|", "\\|")
            lines.append(f"| `{f.name}` | {default(f).replace('|', chr(92) + '|')} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    TARGET.write_text(render(), encoding="utf-8")
    print(f"wrote {TARGET}")
