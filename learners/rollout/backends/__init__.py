"""Generation backends: where a turn's samples come from. `protocol.py` says what the engine asks of one;
`hf.py` (with its sampling loop, `sampling.py`) samples on the agents' own transformers models; `vllm.py`
samples on in-process vLLM engines (`vllm_engines.py` starts them and copies weights in); `choice.py` builds
the one a config names.

A backend imports `learners.rollout.samples`, `settings` and `scoring`, never the engine.
"""

from learners.rollout.backends.choice import backend_for, generation_weights, rollout_correction
from learners.rollout.backends.hf import HFBackend
from learners.rollout.backends.protocol import GenerationBackend
from learners.rollout.backends.vllm import VLLMBackend

__all__ = ["GenerationBackend", "HFBackend", "VLLMBackend", "backend_for", "generation_weights",
           "rollout_correction"]
