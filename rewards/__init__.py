"""rewards: reward functions, the reward-function calling convention, and (later) reward models."""

from rewards.calling import RewardFunctionError, call_reward_function
from rewards.functions import exact_match, length_ratio, word_overlap
from rewards.models import RewardModel, bradley_terry_loss, encode_joint_texts, joint_text
from rewards.sandbox import ExecutionResult, execute, execute_many
from rewards.text import (
    char_similarity,
    defines_function,
    extract_code,
    extract_tagged,
    format_match,
    overlap_f1,
    overlap_precision,
    overlap_recall,
    pass_rate,
)

__all__ = [
    "ExecutionResult",
    "RewardFunctionError",
    "RewardModel",
    "bradley_terry_loss",
    "call_reward_function",
    "char_similarity",
    "defines_function",
    "encode_joint_texts",
    "exact_match",
    "execute",
    "execute_many",
    "extract_code",
    "extract_tagged",
    "format_match",
    "joint_text",
    "length_ratio",
    "overlap_f1",
    "overlap_precision",
    "overlap_recall",
    "pass_rate",
    "word_overlap",
]
