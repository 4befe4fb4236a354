"""learners: MAGRPO, IAC, MAAC, MARLHF and MARLHFIter for teams of Hugging Face causal-LM agents.

The algorithms sit at the top, in modules named as CoMLRL 1.4.3's (`reinforce.py`, `actor_critic.py`,
`preference.py`, with MARLHF's stage and checks in `preference_stage.py` and `preference_checks.py`); the
machinery they share lives in rooms below: `loop/` (the Learner base and the learn
loop), `rollout/` (the engine and its generation backends), `models/`, `checkpointing/` and `parallel/`.
"""

from learners.install_checks import check_torchvision

check_torchvision()  # before transformers: a torchvision that does not import breaks every model import

from learners.actor_critic import IAC, MAAC, IACConfig, IACTrainer, MAACConfig, MAACTrainer  # noqa: E402
from learners.checkpoint import (  # noqa: E402
    CheckpointError,
    InexactResumeWarning,
    load_checkpoint,
    read_checkpoint_metadata,
    save_checkpoint,
)
from learners.loop import Learner, LearnerConfig  # noqa: E402
from learners.loop.preemption import Preempted  # noqa: E402
from learners.models import Frozen  # noqa: E402
from learners.preference import (  # noqa: E402
    MARLHF,
    MARLHFConfig,
    MARLHFIter,
    MARLHFIterConfig,
    MARLHFIterTrainer,
    MARLHFTrainer,
)
from learners.reinforce import MAGRPO, MAGRPOConfig, MAGRPOTrainer  # noqa: E402
from learners.rollout import GenerationSettings, Rollout, RolloutEngine, SampleBatch  # noqa: E402

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
    "Preempted",
    "Rollout",
    "RolloutEngine",
    "SampleBatch",
    "load_checkpoint",
    "read_checkpoint_metadata",
    "save_checkpoint",
]
