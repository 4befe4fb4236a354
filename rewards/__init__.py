"""rewards: reward functions, the reward-function calling convention, and (later) reward models."""

from rewards.calling import RewardFunctionError, call_reward_function
from rewards.code import ExecutionResult, execute, execute_many
from rewards.functions import exact_match, length_ratio, word_overlap
from rewards.models import RewardModel, bradley_terry_loss, joint_text

__all__ = [
    "ExecutionResult",
    "RewardFunctionError",
    "RewardModel",
    "bradley_terry_loss",
    "call_reward_function",
    "exact_match",
    "execute",
    "execute_many",
    "joint_text",
    "length_ratio",
    "word_overlap",
]
