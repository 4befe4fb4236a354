"""Which generation backend a learner's config asks for (`generation_backend`), built for its trained agents,
and how a learner samples and scores through it under FSDP.

The learner calls `backend_for` once; the backend owns its engines from then on (the vLLM ones go back to
their pool when it is closed or collected, and down before torchrun's process group: `vllm_engines`). Each
rollout and evaluation samples inside `generation_weights`; an engine's samples are corrected towards the
trainer by their `rollout_correction`.
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
from learners.rollout.scoring import RolloutCorrection

__all__ = ["backend_for", "generation_weights", "rollout_correction"]


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


def rollout_correction(learner: Any, rollout: Any, first: torch.Tensor) -> RolloutCorrection | None:
    """The `learners.rollout.scoring.RolloutCorrection` of a learner's `rollout` under its config's cap
    (None with no correction: the "hf" backend), on the supports its `engine.backend` sampled them from. The
    rows each agent trains in the update's first minibatch `first` (sample rows) are left to that update's
    forward; every other sampled row is scored now, in one no-grad pass per agent. FSDP scores each agent on
    its whole weights (`learner.sharding`, one agent at a time), as ranks score different numbers of rows."""
    cap = learner.args.correction_cap
    if cap is None:
        return None
    backend, agents = learner.engine.backend, learner.agents
    correction = RolloutCorrection(rollout.samples, cap)
    correction.prescore(agents, [backend.support(a) for a in range(len(agents))],
                        [rollout.acting(a, first) for a in range(len(agents))],
                        whole=lambda model: learner.sharding.gathered([model]))
    return correction
