"""rewards: reward functions, the reward-function calling convention, and (later) reward models."""

from rewards.calling import RewardFunctionError, call_reward_function
from rewards.functions import exact_match, length_ratio, word_overlap

__all__ = [
    "RewardFunctionError",
    "call_reward_function",
    "exact_match",
    "length_ratio",
    "word_overlap",
]
