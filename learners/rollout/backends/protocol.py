"""What the rollout engine asks of a generation backend: prompts and settings in; token ids, stop masks
and the sampler's log-probs out, as one `SampleBatch` per agent.

A backend is built for one team (one model per trained agent, each with its seat's `GenerationSettings`)
and never sees an environment. Every backend returns the same `SampleBatch` layout, so losses, critics and
checkpoints do not depend on which one sampled.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch

from learners.rollout.samples import SampleBatch
from learners.rollout.scoring import Support

__all__ = ["GenerationBackend"]


class GenerationBackend(Protocol):
    """Samples completions for a team of agents; rows are prompt-major (prompt p's sample k at p * K + k)."""

    name: str
    """The `generation_backend` value that selects it (`"hf"`, `"vllm"`)."""
    shared_base: Any
    """What every agent samples through in one call (`generate_all`), or None when each agent samples alone."""
    samples_on_models: bool
    """Whether it samples on the agents' own models (HF), which FSDP must then gather whole for a rollout;
    an engine with weights of its own (vLLM) does not need them."""

    def generate(self, agent: int, prompts: list[str], num_samples: int, greedy: bool = False) -> SampleBatch:
        """Agent `agent`'s `num_samples` completions of each prompt (greedy: the argmax, once per sample)."""

    def generate_all(self, prompts: list[list[str]], num_samples: int, greedy: bool = False) -> list[SampleBatch]:
        """Every agent's completions in one call (`prompts[a]` are agent a's); asked only when `shared_base`
        is set (else the engine calls `generate` once per agent)."""

    def prompt_rows(self, agent: int, prompts: list[str], num_samples: int) -> SampleBatch:
        """Rows with agent `agent`'s prompts and no sampled token, shaped like its samples (for the turns
        it waits)."""

    def support(self, agent: int) -> Support:
        """The distribution the kept log-probs of agent `agent` are under; the trainer scores its tokens on
        the same one, so the two sides of a ratio agree."""

    def follow(self, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """Keep generating with the trained weights: after `optimizers[a]` steps (or loads a state, on resume),
        agent a's new weights reach the backend before its next sample."""

    def sync(self) -> None:
        """Bring the generation weights up to the trained ones now. Under torchrun every rank calls it at the
        same point (before each rollout and each evaluation): with FSDP it gathers sharded tensors."""

    def finish_rollout(self) -> dict[str, float]:
        """A rollout is over: release what generation holds until the next call (vLLM's sleep mode) and
        return this rollout's extra timings in seconds (`weight_sync`), to log."""
