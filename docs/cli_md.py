"""Write `docs/cli.md`, the `comlrl-bench` reference, from the command's argparse parser.

    .venv/bin/python docs/cli_md.py

`tests/test_learner_pages.py` fails when the file is stale, so the page always lists the options the command
takes, with their defaults and help. The usage examples are the `comlrl-bench` commands of
`docs/guide/benchmarking.md`.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import pathlib
import re
import textwrap

from learners import cli

TARGET = pathlib.Path(__file__).with_name("cli.md")
GUIDE = pathlib.Path(__file__).with_name("guide") / "benchmarking.md"
WIDTH = 85
"""Columns of the usage line: fixed, so the page does not depend on the terminal that wrote it."""

def parser() -> argparse.ArgumentParser:
    """`comlrl-bench`'s parser, as the command builds it."""
    return cli.build_parser()


def invocation(action: argparse.Action) -> str:
    """How an option is written, e.g. `--temperature X [X ...]` or `--suite {basic,code}`."""
    flag = ", ".join(action.option_strings)
    if action.nargs == 0:
        return flag
    if action.choices is not None:
        value = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        value = action.metavar or action.dest.upper()
    if action.nargs in ("+", "*"):
        value = f"{value} [{value} ...]"
    return f"{flag} {value}"


def default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.default is None or action.default is False or action.default == [] \
            or action.default is argparse.SUPPRESS:
        return "off" if action.nargs == 0 else "-"
    return f"`{action.default!r}`"


def help_text(action: argparse.Action) -> str:
    text = action.help or ""
    if isinstance(action, argparse._AppendAction) and "repeatable" not in text:  # noqa: SLF001 (no public name)
        text += " (repeatable)"
    return text.replace("|", "\\|")


def examples() -> list[str]:
    """The guide's `comlrl-bench` commands, each with its continuation lines, block by block."""
    blocks = re.findall(r"^```bash\n(.*?)^```", GUIDE.read_text(encoding="utf-8"), re.M | re.S)
    return [block for block in blocks if block.lstrip().startswith("comlrl-bench")]


def render() -> str:
    p = parser()
    p.formatter_class = functools.partial(argparse.HelpFormatter, width=WIDTH)
    description = inspect.getdoc(cli).split("\n\n")
    lead = p.description.split(": ", 1)[-1]  # "`comlrl-bench`: evaluate ..." without the name
    lines = ["# Command line: comlrl-bench", "",
             lead[:1].upper() + lead[1:], "",
             "Generated from the command's parser by `docs/cli_md.py`. The guide",
             "[Benchmarking and leagues](guide/benchmarking.md) explains the tables and intervals it prints.", "",
             "```text", p.format_usage().rstrip(), "```", "",
             "## Options", "",
             "| option | default | meaning |", "|---|---|---|"]
    for action in p._actions:  # noqa: SLF001 (the parser's options, in the order it lists them)
        lines.append(f"| `{invocation(action)}` | {default(action)} | {help_text(action)} |")
    lines += ["", "## Examples", "", "From [Benchmarking and leagues](guide/benchmarking.md):", ""]
    for block in examples():
        lines += ["```bash", block.rstrip(), "```", ""]
    lines += ["## What the options do", ""]
    parts = [part if part.lstrip().startswith("-") else textwrap.fill(" ".join(part.split()), 116)
             for part in description[2:]]  # the docstring's paragraphs after its title and its commands
    return "\n".join(lines) + "\n" + "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    TARGET.write_text(render(), encoding="utf-8")
    print(f"wrote {TARGET}")
