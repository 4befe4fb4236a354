"""The rollout: playing batches of episodes with the agents and handing the learners token-exact samples.

Here live the engine (`RolloutEngine`), the data it returns (`SampleBatch`, `Rollout`), the sampling
settings (`GenerationSettings`), token scoring shared by sampler and trainer (`scoring`), the fixed seats'
contract (`fixed_seats`) and the generation backends (`backends/`). May import `comlrl_env` and `learners.parallel`; nothing else of ours.
"""

from learners.rollout.backends import GenerationBackend, HFBackend
from learners.rollout.engine import RolloutEngine, check_rollout_size, joint_combinations, rollout_samples
from learners.rollout.samples import Rollout, SampleBatch
from learners.rollout.settings import GenerationSettings

__all__ = ["GenerationBackend", "GenerationSettings", "HFBackend", "Rollout", "RolloutEngine", "SampleBatch",
           "check_rollout_size", "joint_combinations", "rollout_samples"]
