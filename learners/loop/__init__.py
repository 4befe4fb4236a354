"""The learn loop every learner shares: the `Learner` base (`learner.py`), the steps that build it
(`construction.py`), the loop `learn()` runs (`training.py`), export and training state (`saving.py`), the
shared config (`config.py`), data order (`data.py`), losses, optimizer steps, metrics, evaluation and the run
logger. May import `learners.rollout`, `models`, `checkpointing` and `parallel`; never an algorithm module.
"""

from learners.loop.config import LearnerConfig
from learners.loop.learner import Learner
from learners.loop.logger import RunLogger

__all__ = ["Learner", "LearnerConfig", "RunLogger"]
