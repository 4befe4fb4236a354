"""Every field of every learner config says what it means (an attribute docstring on the field), and every
numeric setting of every config rejects NaN, infinities, wrong types and out-of-range values at construction,
with a message naming the field, the value and the fix (a test generated from the configs' fields)."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import pathlib
import typing

import numpy as np
import pytest

from learners.actor_critic import IACConfig, MAACConfig
from learners.loop.config import LearnerConfig
from learners.preference import MARLHFConfig, MARLHFIterConfig
from learners.reinforce import MAGRPOConfig
from learners.rollout.settings import SETTINGS_PER_AGENT, GenerationSettings, number_rules


def _config_md():
    """docs/config_md.py, which reads the field docstrings and renders docs/config.md."""
    path = pathlib.Path(__file__).parent.parent / "docs" / "config_md.py"
    spec = importlib.util.spec_from_file_location("config_md", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CONFIG_MD = _config_md()


def documented_fields(cls: type) -> set[str]:
    """Names of the fields with a string right under their annotation, in `cls` or any dataclass it extends."""
    return set(CONFIG_MD.field_docs(cls))


@pytest.mark.parametrize("config", [LearnerConfig, MAGRPOConfig, IACConfig, MAACConfig, MARLHFConfig, MARLHFIterConfig])
def test_every_config_field_has_a_docstring(config):
    missing = [f.name for f in dataclasses.fields(config) if f.name not in documented_fields(config)]
    assert not missing, f"{config.__name__} fields without a docstring: {missing}"


@pytest.mark.parametrize("config, field, hint", [
    (MAGRPOConfig, "learning_rate", "did you mean 'agent_learning_rate'? ('learning_rate' is TRL's"),
    (MAGRPOConfig, "per_device_train_batch_size", "did you mean 'train_batch_size'?"),
    (MAGRPOConfig, "max_completion_length", "did you mean 'max_new_tokens'?"),
    (MAGRPOConfig, "beta", "did you mean 'reference_kl_coef'?"),
    (IACConfig, "vf_coef", "did you mean 'value_loss_coef'?"),
    (MAGRPOConfig, "num_generation", "did you mean 'num_generations'"),
    (MARLHFConfig, "reward_lr", "did you mean 'reward_learning_rate'"),
    (MAGRPOConfig, "eval_steps", "did you mean 'eval_interval'?"),
])
def test_an_unknown_field_names_itself_and_the_fix(config, field, hint):
    """A TRL user's `learning_rate=` used to fail with a bare "unexpected keyword argument"."""
    with pytest.raises(TypeError, match=f"{config.__name__} has no field '{field}': ") as info:
        config(**{field: 1})
    assert hint in str(info.value)


def test_the_configuration_reference_is_current():
    """docs/config.md is generated from the field docstrings; regenerate it with `python docs/config_md.py`."""
    assert CONFIG_MD.TARGET.read_text(encoding="utf-8") == CONFIG_MD.render(), "run: python docs/config_md.py"


# ----- numeric settings: checked at construction, by a test generated from the fields ----------------------

SETTINGS = (LearnerConfig, MAGRPOConfig, IACConfig, MAACConfig, MARLHFConfig, MARLHFIterConfig, GenerationSettings)


def number_types(cls: type, name: str) -> set[type]:
    """The number types (int, float) the annotation of field `name` of `cls` names, anywhere in it."""
    found, todo = set(), [typing.get_type_hints(cls)[name]]
    while todo:
        hint = todo.pop()
        if hint in (int, float):
            found.add(hint)
        todo += typing.get_args(hint)
    return found


def numeric_fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if number_types(cls, f.name)]


def bad_values(cls: type, name: str) -> list:
    """Values field `name` must refuse: the same for every numeric field (NaN, infinities, a string, a bool,
    None unless None means "off"), a fraction where the annotation says int, and one step past each bound."""
    rule = number_rules(cls)[name]
    values = [math.nan, math.inf, -math.inf, "3", True]
    if not rule.optional:
        values.append(None)
    if float not in number_types(cls, name):
        values.append(2.5)
    step = 1 if rule.integer else 1e-3
    if rule.low is not None:
        values.append(rule.low if rule.low_open else rule.low - step)
    if rule.high is not None:
        values.append(rule.high if rule.high_open else rule.high + step)
    return values


FIELDS = [(cls, name) for cls in SETTINGS for name in numeric_fields(cls)]


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda c: c.__name__)
def test_every_numeric_field_has_a_rule_and_counts_in_ints(cls):
    rules = number_rules(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    assert not set(numeric_fields(cls)) - set(rules), f"{cls.__name__}: numeric fields without a Number in NUMBERS"
    assert not set(rules) - fields, f"{cls.__name__}: rules for fields it does not have"
    counts = [n for n in numeric_fields(cls) if number_types(cls, n) == {int} and not rules[n].integer]
    assert not counts, f"{cls.__name__}: fields annotated int whose rule takes fractions: {counts}"


@pytest.mark.parametrize("cls, name", FIELDS, ids=[f"{c.__name__}.{n}" for c, n in FIELDS])
def test_every_numeric_setting_rejects_bad_values_at_construction(cls, name):
    cls()  # the defaults pass
    rule = number_rules(cls)[name]
    for value in bad_values(cls, name):
        with pytest.raises((TypeError, ValueError)) as info:
            cls(**{name: value})
        message = str(info.value)
        assert message.startswith(f"{name} must be "), message
        assert f"got {value!r}" in message, message
        assert "The default is" in message or "Use a whole number" in message or rule.fix in message, message
        if name in SETTINGS_PER_AGENT:  # also as one agent's value in a per-agent list
            good = getattr(cls(), name)
            with pytest.raises((TypeError, ValueError), match=rf"^{name}\[1\] must be .*got {value!r}"):
                cls(**{name: [good, value]})


@pytest.mark.parametrize("cls, kwargs, error", [
    (MAGRPOConfig, dict(num_train_epochs=2.5), TypeError),
    (MAGRPOConfig, dict(max_new_tokens=2.5), TypeError),
    (MAGRPOConfig, dict(seed="abc"), TypeError),
    (MAGRPOConfig, dict(agent_learning_rate=math.inf), ValueError),
    (MAGRPOConfig, dict(max_grad_norm=math.nan), ValueError),
    (MAGRPOConfig, dict(num_train_epochs=math.inf), TypeError),
    (MAGRPOConfig, dict(clip_range=math.nan), ValueError),
    (MAGRPOConfig, dict(temperature=math.inf), ValueError),
    (IACConfig, dict(value_head_hidden_dim=0), ValueError),
    (IACConfig, dict(critic_learning_rate=-1e-5), ValueError),
    (MARLHFConfig, dict(reward_heldout_fraction=1.0), ValueError),
    (MARLHFIterConfig, dict(preference_replay_mode="lambda_decay", preference_replay_lambda=math.nan), ValueError),
    (MAGRPOConfig, dict(seed=-1), ValueError),
    (MAGRPOConfig, dict(seed=10**5000), ValueError),  # the message shows it without the 4300-digit repr limit
    (MAGRPOConfig, dict(discount=10**400), ValueError),  # no float holds it
])
def test_the_reported_settings_fail_at_construction(cls, kwargs, error):
    """Each was accepted and then misbehaved (NaN weights, a hang, an error deep in the sampler)."""
    name = list(kwargs)[-1]
    with pytest.raises(error, match=f"^{name} must be "):
        cls(**kwargs)


def test_numpy_numbers_are_accepted_as_plain_numbers():
    """Configs are saved as JSON in checkpoints: numpy scalars become int and float."""
    cfg = MAGRPOConfig(num_train_epochs=np.int64(3), discount=np.float32(0.5), temperature=[np.float64(0.7), 1])
    assert type(cfg.num_train_epochs) is int and type(cfg.discount) is float and cfg.temperature == [0.7, 1]
    with pytest.raises(TypeError, match=r"num_generations must be an int, got np.float64\(4.0\) .*e.g. 4"):
        MAGRPOConfig(num_generations=np.float64(4.0))
