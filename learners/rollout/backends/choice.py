"""Which generation backend a learner's config asks for (`generation_backend`), built for its trained agents,
and how a learner samples and scores through it under FSDP.

The learner calls `backend_for` once; the backend owns its engines from then on (the vLLM ones go back to
their pool when it is closed or collected, and down before torchrun's process group: `vllm_engines`). Each
rollout and evaluation samples inside `generation_weights`; an engine's samples are corrected towards the
trainer by `corrected_advantages`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from learners.parallel.fsdp import Sharding
from learners.rollout.backends.hf import HFBackend
from learners.rollout.backends.protocol import GenerationBackend
from learners.rollout.backends.vllm import VLLMBackend
from learners.rollout.samples import SampleBatch
from learners.rollout.scoring import engine_correction

__all__ = ["backend_for", "corrected_advantages", "generation_weights"]


def backend_for(cfg: Any, agents: Sequence[PreTrainedModel], tokenizers: Sequence[PreTrainedTokenizerBase],
                seats: Sequence[int]) -> GenerationBackend:
    """The backend `cfg.generation_backend` names ("hf" or "vllm", with the `vllm_*` fields), for the trained
    `agents` that play `seats` (each samples with its seat's settings)."""
    settings = cfg.generation_settings()
    per_agent = [settings.for_agent(s) for s in seats]
    if cfg.generation_backend == "vllm":
        return VLLMBackend(agents, tokenizers, per_agent, cfg.vllm_memory_share, cfg.vllm_sleep_mode,
                           cfg.vllm_engine_args, cfg.vllm_tensor_parallel_size)
    return HFBackend(agents, tokenizers, per_agent, settings.batch_adapters)


@contextlib.contextmanager
def generation_weights(backend: GenerationBackend, sharding: Sharding, agents: Sequence[nn.Module]) -> Iterator[None]:
    """Sampling weights for one rollout or evaluation; every rank enters. An engine with weights of its own
    is brought up to the trained ones (FSDP: gathered into it tensor by tensor); a backend that samples on the
    `agents` themselves gets them gathered whole for the block (FSDP: ranks sample to different lengths)."""
    backend.sync()
    with sharding.gathered(agents if backend.samples_on_models else []):
        yield


def corrected_advantages(learner: Any, samples: Sequence[SampleBatch], advantages: torch.Tensor,
                         old: list[torch.Tensor] | None
                         ) -> tuple[torch.Tensor, list[torch.Tensor] | None, dict[str, float]]:
    """`learners.rollout.scoring.engine_correction` of a learner's rollout `samples` (its `engine.backend`'s, on
    the supports they were sampled from) under its config's cap. FSDP scores each agent on its whole weights
    (`learner.sharding`, one agent at a time), as ranks score different numbers of rows."""
    backend, agents = learner.engine.backend, learner.agents
    supports = [backend.support(a) for a in range(len(agents))]
    return engine_correction(agents, samples, supports, advantages, old, learner.args.correction_cap,
                             whole=lambda model: learner.sharding.gathered([model]))
