"""learners: MAGRPO, IAC, MAAC, MARLHF and MARLHFIter for teams of Hugging Face causal-LM agents.

The algorithms sit at the top, in the seed system's modules (`reinforce.py`, `actor_critic.py`,
`preference.py`); the machinery they share lives in rooms below: `loop/` (the Learner base and the learn
loop), `rollout/` (the engine and its generation backends), `models/`, `checkpointing/` and `parallel/`.
"""

from learners.actor_critic import IAC, MAAC, IACConfig, IACTrainer, MAACConfig, MAACTrainer
from learners.checkpoint import (
    CheckpointError,
    InexactResumeWarning,
    load_checkpoint,
    read_checkpoint_metadata,
    save_checkpoint,
)
from learners.loop import Learner, LearnerConfig
from learners.models import Frozen
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
