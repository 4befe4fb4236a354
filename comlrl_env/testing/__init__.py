"""Checks users run on their own environments, tasks and games, and tiny offline models for tests."""

from comlrl_env.testing.checks import EnvCheckError, check_env
from comlrl_env.testing.game_checks import GameCheckError, check_game
from comlrl_env.testing.task_checks import TaskCheckError, check_task
from comlrl_env.testing.tiny_models import tiny_model

__all__ = ["EnvCheckError", "GameCheckError", "TaskCheckError", "check_env", "check_game", "check_task", "tiny_model"]
