"""Every field of every learner config says what it means: an attribute docstring on the field."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib

import pytest

from learners.actor_critic import IACConfig, MAACConfig
from learners.loop.config import LearnerConfig
from learners.preference import MARLHFConfig, MARLHFIterConfig
from learners.reinforce import MAGRPOConfig


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
