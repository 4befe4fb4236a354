"""learners: MAGRPO (and, as they land, IAC, MAAC, MARLHF) for teams of Hugging Face causal-LM agents."""

from learners.base import Learner, LearnerConfig
from learners.checkpoint import CheckpointError, load_checkpoint, read_checkpoint_metadata, save_checkpoint
from learners.reinforce import MAGRPO, MAGRPOConfig, MAGRPOTrainer
from learners.rollout import GenerationSettings, Rollout, RolloutEngine, SampleBatch

__all__ = [
    "CheckpointError",
    "GenerationSettings",
    "Learner",
    "LearnerConfig",
    "MAGRPO",
    "MAGRPOConfig",
    "MAGRPOTrainer",
    "Rollout",
    "RolloutEngine",
    "SampleBatch",
    "load_checkpoint",
    "read_checkpoint_metadata",
    "save_checkpoint",
]
