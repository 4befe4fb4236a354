"""Generation backends: where a turn's samples come from. `protocol.py` says what the engine asks of one;
`hf.py` (with its sampling loop, `sampling.py`) samples on the agents' own transformers models.

A backend imports `learners.rollout.samples`, `settings` and `scoring`, never the engine.
"""

from learners.rollout.backends.hf import HFBackend
from learners.rollout.backends.protocol import GenerationBackend

__all__ = ["GenerationBackend", "HFBackend"]
