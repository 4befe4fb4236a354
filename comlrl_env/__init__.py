"""comlrl_env: cooperative tasks for LLM agents as PettingZoo parallel environments with text actions."""

from comlrl_env.base import AgentID, TextParallelEnv, joint_text
from comlrl_env.dataset_env import DatasetEnv, TransitionError
from comlrl_env.registry import EnvNotFound, EnvSpec, make, register, registry, spec
from comlrl_env.spaces import CHARSET, TextSpace
from comlrl_env.suites import suites
from comlrl_env import tasks  # noqa: F401  (registers the built-in tasks)

__version__ = "0.1.0"

__all__ = [
    "AgentID",
    "CHARSET",
    "DatasetEnv",
    "EnvNotFound",
    "EnvSpec",
    "TextParallelEnv",
    "TextSpace",
    "TransitionError",
    "joint_text",
    "make",
    "register",
    "registry",
    "spec",
    "suites",
]
