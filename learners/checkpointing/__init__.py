"""Training checkpoints: save, and resume in one pass (read, validate everything, then apply).

`checkpoint.py` writes and loads a `TrainingState` (`state.py`), with its RNG states (`rng.py`), weights
(`weights.py`), FSDP shards (`sharded.py`), fingerprints (`fingerprints.py`) and atomic writes (`atomic.py`); on load it reads
`state.json` within limits (`metadata.py`), checks the learner matches (`compatibility.py`), every file
against its SHA-256 (`digests.py`) and every state (`validation.py`) before anything changes; `manager.py`
decides when `learn()` saves, which snapshots it keeps and which one a resume picks; `run_lock.py` keeps one run
per folder. May import `learners.parallel`; nothing else of ours.
"""

from learners.checkpointing.checkpoint import (
                                               CheckpointError,
                                               InexactResumeWarning,
                                               load_checkpoint,
                                               read_checkpoint_metadata,
                                               save_checkpoint,
)
from learners.checkpointing.manager import CheckpointManager
from learners.checkpointing.state import Stateful, TrainingState

__all__ = ["CheckpointError", "CheckpointManager", "InexactResumeWarning", "Stateful", "TrainingState",
           "load_checkpoint", "read_checkpoint_metadata", "save_checkpoint"]
