"""The checkpoint functions at their documented path (`learners.checkpoint`); they live in
`learners.checkpointing`."""

from learners.checkpointing.checkpoint import (
                                               CheckpointError,
                                               InexactResumeWarning,
                                               load_checkpoint,
                                               read_checkpoint_metadata,
                                               save_checkpoint,
)

__all__ = ["CheckpointError", "InexactResumeWarning", "load_checkpoint", "read_checkpoint_metadata", "save_checkpoint"]
