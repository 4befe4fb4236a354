"""Checks users run on their own environments, and tiny offline models for tests."""

from comlrl_env.testing.checks import EnvCheckError, check_env
from comlrl_env.testing.tiny_models import tiny_model

__all__ = ["EnvCheckError", "check_env", "tiny_model"]
