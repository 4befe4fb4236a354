"""Every field of every learner config says what it means: an attribute docstring on the field."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

from learners.actor_critic import IACConfig, MAACConfig
from learners.config import LearnerConfig
from learners.preference import MARLHFConfig, MARLHFIterConfig
from learners.reinforce import MAGRPOConfig


def documented_fields(cls: type) -> set[str]:
    """Names of the fields with a string right under their annotation, in `cls` or any dataclass it extends."""
    names = set()
    for klass in cls.__mro__:
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(inspect.getsource(klass)).body[0].body
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                names.add(node.target.id)
    return names


@pytest.mark.parametrize("config", [LearnerConfig, MAGRPOConfig, IACConfig, MAACConfig, MARLHFConfig, MARLHFIterConfig])
def test_every_config_field_has_a_docstring(config):
    missing = [f.name for f in dataclasses.fields(config) if f.name not in documented_fields(config)]
    assert not missing, f"{config.__name__} fields without a docstring: {missing}"
