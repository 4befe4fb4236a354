"""Verifiable question answering for teams: sources of questions with a scorer (`VerifiedQA`, reasoning-gym's
datasets) and the protocols a team answers them under (`TeamQA`)."""

from comlrl_env.qa.protocols import PROTOCOLS, TeamQA
from comlrl_env.qa.sources import ANSWER_FORMAT, GARBAGE, VerifiedQA, arithmetic_questions, tag_answer

__all__ = ["ANSWER_FORMAT", "GARBAGE", "PROTOCOLS", "TeamQA", "VerifiedQA", "arithmetic_questions", "tag_answer"]
