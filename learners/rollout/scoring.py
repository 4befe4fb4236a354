"""Scoring sampled tokens: the one log-prob gather that the sampler and the trainer share.

    log pi(y_t | x, y_<t) = log softmax(z_t / temperature)[y_t]          (`token_logprobs`)

The sampling loop keeps it for every token it draws (the behaviour policy's log-probs); the learners
recompute it with gradients over a `SampleBatch` (`completion_logprobs`), so the ratio's two sides always
score the same tokens under the same softmax.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from learners.rollout.samples import SampleBatch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["completion_logprobs", "sampled_logprobs", "token_logprobs"]


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature) at `tokens`: `(..., V)` logits and `(...)` ids give `(...)` float32."""
    z = logits.float() if temperature == 1.0 else logits.float() / temperature
    return z.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - z.logsumexp(-1)


def completion_logprobs(model: "PreTrainedModel", batch: SampleBatch, temperature: float = 1.0) -> torch.Tensor:
    """Per-token log softmax(z / temperature)(completion token | prompt, previous tokens), 0 off the mask: `(S, T)`.

    One forward over the whole batch; positions follow the attention mask as in
    `generate`, and logits are computed only for the completion positions.
    """
    device = model.device
    prompt_ids, completion_ids = batch.prompt_ids.to(device), batch.completion_ids.to(device)
    mask = torch.cat([batch.prompt_mask, batch.completion_mask], 1).to(device)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    T = completion_ids.shape[1]
    logits = model(
        input_ids=torch.cat([prompt_ids, completion_ids], 1),
        attention_mask=mask,
        position_ids=positions,
        logits_to_keep=T + 1,
        use_cache=False,
    ).logits[:, :-1]
    return token_logprobs(logits, completion_ids, temperature) * batch.completion_mask.to(device)


def sampled_logprobs(model: "PreTrainedModel", batch: SampleBatch, rows: int = 16,
                     temperature: float = 1.0) -> torch.Tensor:
    """`completion_logprobs` without gradients, `rows` sequences per forward (bounds the logits' memory), on CPU."""
    out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32)
    with torch.no_grad():
        for start in range(0, len(batch), rows):
            idx = torch.arange(start, min(start + rows, len(batch)))
            part = completion_logprobs(model, batch.select(idx), temperature).cpu()
            out[idx, : part.shape[1]] = part
    return out
