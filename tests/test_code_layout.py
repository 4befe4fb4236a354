"""The learner core stays readable: no module under learners/ reaches into another object's private
members, and no file there grows past 500 lines."""

from __future__ import annotations

import ast
import pathlib

import pytest

LEARNERS = sorted((pathlib.Path(__file__).parent.parent / "learners").glob("*.py"))


def private_uses(source: str) -> list[str]:
    """`x._name` on anything but self, cls or super(), and `from m import _name`, as source text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                continue
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.ImportFrom):
            found += [f"line {node.lineno}: from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_")]
    return found


def test_the_scan_finds_what_it_looks_for():
    assert sorted(private_uses("learner._epoch_order(env)\nself._ok()\nsuper()._validate()\nfrom a import _b\n")) == [
        "line 1: learner._epoch_order", "line 4: from a import _b"]


@pytest.mark.parametrize("path", LEARNERS, ids=lambda p: p.name)
def test_no_learner_module_uses_another_objects_private_members(path):
    assert private_uses(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", LEARNERS, ids=lambda p: p.name)
def test_no_learner_module_is_over_500_lines(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 500
