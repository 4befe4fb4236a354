"""Losses: pure functions of tensors (plus frozen reference models for the KL term).

    L_policy       = -1/|B| sum_s sum_t min(rho_st A_s, clip(rho_st, 1 +- eps) A_s) m_st   (`policy_loss`)
    L_value        = 1/|B| sum_s max((y_s - V_s)^2, (y_s - V_clip,s)^2)                   (`value_loss`)

with rho = pi / pi_old and m_st masking exactly the sampled completion tokens (EOS in; prompt and padding
out). Token log-probs come from `learners.rollout.scoring`, which the sampler shares, so the ratio's two
sides always agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch

from learners.rollout.samples import SampleBatch
from learners.rollout.scoring import sampled_logprobs

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["POLICY_STATS", "policy_loss", "policy_stats", "policy_terms", "reference_kl", "value_loss"]

POLICY_STATS = ("surrogate", "clip_fraction", "approx_kl", "entropy")







def reference_kl(references: "list[PreTrainedModel]", samples: list[SampleBatch],
                 old_logprobs: list[torch.Tensor], temperatures: Sequence[float] | float = 1.0) -> torch.Tensor:
    """k3 estimate of KL(pi_old || pi_ref) per agent and sample `(A, S)`: the sum over completion tokens of
    exp(ref - old) - (ref - old) - 1, with `old_logprobs[a]` agent a's sampled-token log-probs `(S, T)` and
    `references[a]` its frozen reference copy (scored without gradients), at `temperatures[a]` (one per
    agent, or one for all)."""
    if not isinstance(temperatures, Sequence):
        temperatures = [temperatures] * len(references)
    kls = []
    for reference, batch, old, temperature in zip(references, samples, old_logprobs, temperatures, strict=True):
        ref = sampled_logprobs(reference, batch, temperature=temperature)
        diff = ref - old[:, : ref.shape[1]]
        kls.append(((diff.exp() - diff - 1) * batch.completion_mask).sum(-1))
    return torch.stack(kls)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float = 0.2,
    length_normalization: bool = False,
) -> torch.Tensor:
    """Clipped policy-gradient loss over completion tokens: `(S, T)` log-probs, `(S,)` advantages.

    -mean_s sum_t min(rho A_s, clip(rho, 1 +- eps) A_s) m_st with rho = exp(logprobs - old_logprobs);
    with `length_normalization` each completion's sum is divided by its length.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_range, 1 + clip_range) * adv) * mask
    per_sequence = surrogate.sum(-1)
    if length_normalization:
        per_sequence = per_sequence / mask.sum(-1).clamp(min=1)
    return -per_sequence.mean()


def policy_stats(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
    clip_range: float = 0.2,
) -> torch.Tensor:
    """Diagnostics of a policy step `(4,)`, in `POLICY_STATS` order: token means over the mask, no gradients.

    surrogate: min(rho A, clip(rho, 1 +- eps) A), the clipped objective per token; clip_fraction: the
    share of tokens with |rho - 1| > eps; approx_kl: (rho - 1) - log rho, an estimate of KL(pi_old || pi)
    that is >= 0 token by token; entropy: -log pi_old of the sampled tokens, a Monte-Carlo estimate of the
    sampling policy's per-token entropy. At rho = 1 (a rollout's first step) clip_fraction = approx_kl = 0.
    Example: log rho = [log 1.5, 0], A = 1, eps 0.2 -> surrogate (1.2 + 1) / 2, clip_fraction 0.5.
    """
    with torch.no_grad():
        log_ratio = logprobs - old_logprobs
        ratio = log_ratio.exp()
        adv = advantages[:, None]
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_range, 1 + clip_range) * adv)
        terms = torch.stack([surrogate, ((ratio - 1).abs() > clip_range).float(), ratio - 1 - log_ratio,
                             -old_logprobs])
        return (terms * mask).sum((1, 2)) / mask.sum().clamp(min=1)


def policy_terms(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float = 0.2,
    length_normalization: bool = False,
) -> tuple[torch.Tensor, ...]:
    """`policy_loss`, then the four `policy_stats`, of a minibatch: `logprobs` `(S, T)` with gradients,
    `old_logprobs` `(S, >= T)` from the rollout (None: the ratio is 1, the first step on a rollout),
    `advantages` `(S,)` and the completion `mask` `(S, T)`, moved to the log-probs' device."""
    old = logprobs.detach() if old_logprobs is None else old_logprobs[:, : logprobs.shape[1]].to(logprobs.device)
    advantages, mask = advantages.to(logprobs.device), mask.to(logprobs.device)
    loss = policy_loss(logprobs, old, advantages, mask, clip_range, length_normalization)
    return loss, *policy_stats(logprobs, old, advantages, mask, clip_range)


def value_loss(values: torch.Tensor, old_values: torch.Tensor, targets: torch.Tensor, clip: float | None) -> torch.Tensor:
    """mean max((y - V)^2, (y - V_clip)^2), V_clip = V_old + clip(V - V_old, +-clip); plain MSE when clip is None."""
    loss = (targets - values) ** 2
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        loss = torch.maximum(loss, (targets - clipped) ** 2)
    return loss.mean()
