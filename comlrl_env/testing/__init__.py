"""Checks users run on their own environments and tasks, and tiny offline models for tests."""

from comlrl_env.testing.checks import EnvCheckError, check_env
from comlrl_env.testing.task_checks import TaskCheckError, check_task
from comlrl_env.testing.tiny_models import tiny_model

__all__ = ["EnvCheckError", "TaskCheckError", "check_env", "check_task", "tiny_model"]
