"""Verifiable question answering for teams: sources of questions with a scorer (`VerifiedQA`, reasoning-gym's
datasets) and the protocols a team answers them under (`TeamQA`)."""

from comlrl_env.qa.protocols import PROTOCOLS, TeamQA
from comlrl_env.qa.sources import (ANSWER_FORMAT, GARBAGE, PLAIN_FORMAT, VerifiedQA, arithmetic_questions,
                                   plain_answer, tag_answer)

__all__ = ["ANSWER_FORMAT", "GARBAGE", "PLAIN_FORMAT", "PROTOCOLS", "TeamQA", "VerifiedQA", "arithmetic_questions",
           "plain_answer", "tag_answer"]
