"""learners: MAGRPO, IAC, MAAC, MARLHF and MARLHFIter for teams of Hugging Face causal-LM agents."""

from learners.actor_critic import IAC, MAAC, IACConfig, IACTrainer, MAACConfig, MAACTrainer
from learners.base import Learner, LearnerConfig
from learners.checkpoint import (
    CheckpointError,
    InexactResumeWarning,
    load_checkpoint,
    read_checkpoint_metadata,
    save_checkpoint,
)
from learners.fixed import Frozen
from learners.preference import MARLHF, MARLHFConfig, MARLHFIter, MARLHFIterConfig, MARLHFIterTrainer, MARLHFTrainer
from learners.reinforce import MAGRPO, MAGRPOConfig, MAGRPOTrainer
from learners.rollout import GenerationSettings, Rollout, RolloutEngine, SampleBatch

__all__ = [
    "CheckpointError",
    "Frozen",
    "GenerationSettings",
    "IAC",
    "IACConfig",
    "IACTrainer",
    "InexactResumeWarning",
    "Learner",
    "LearnerConfig",
    "MAAC",
    "MAACConfig",
    "MAACTrainer",
    "MAGRPO",
    "MAGRPOConfig",
    "MAGRPOTrainer",
    "MARLHF",
    "MARLHFConfig",
    "MARLHFIter",
    "MARLHFIterConfig",
    "MARLHFIterTrainer",
    "MARLHFTrainer",
    "Rollout",
    "RolloutEngine",
    "SampleBatch",
    "load_checkpoint",
    "read_checkpoint_metadata",
    "save_checkpoint",
]
