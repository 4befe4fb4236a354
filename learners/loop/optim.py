"""The one gradient path of every learner and of the reward model.

An update of a model on a minibatch reads, in the learner's own file:

    optimizer.zero_grad(set_to_none=True)
    sync = pass_sync(model, dist, len(idx))  # a model sharded with FSDP: keep ranks' passes in step, else None
    loss, *stats = accumulate_gradients(idx, loss_fn, cfg.gradient_accumulation_steps, sync)  # forward + backward
    grad_norm = gradient_step(model, optimizer, len(idx), cfg.max_grad_norm, dist)      # average, clip, step

`accumulate_gradients` splits the minibatch into micro-batches whose weighted gradients add up to the
gradient of the minibatch mean; `gradient_step` averages gradients over torchrun ranks into the global
minibatch mean (a model sharded with FSDP has them reduced in its backward already), clips and steps.
`adamw` builds every optimizer.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import torch

from learners.loop.losses import POLICY_STATS, policy_terms
from learners.parallel.fsdp import PassSync, fsdp_root, pass_sync
from learners.rollout.scoring import RolloutCorrection, completion_logprobs

__all__ = ["PolicyBatch", "accumulate_gradients", "adamw", "clip_grad", "gradient_step", "lr_schedule", "policy_step"]

LossTerms = torch.Tensor | tuple[torch.Tensor, ...]
"""What a micro-batch loss function returns: the loss to backward, or a tuple of it and terms only logged."""


def adamw(params: Any, lr: float, weight_decay: float = 0.01) -> torch.optim.AdamW:
    """AdamW over the trainable `params`; fused (one kernel per step) when they are all float tensors on
    CPU or CUDA: about 5x faster than the default per-parameter loop (16 vs 84 ms per step at 32M on CPU)."""
    trainable = [p for p in params if p.requires_grad]
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in trainable)
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay, fused=fused or None)
    optimizer.register_load_state_dict_pre_hook(_keep_own_kernel)
    return optimizer


def lr_schedule(optimizer: torch.optim.Optimizer, kind: str, warmup_steps: int,
                total_steps: Callable[[], int]) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over `warmup_steps` steps, then `kind`: constant, linear or cosine decay to 0 at
    `total_steps()` (read at every step, so a run whose length grows keeps one schedule):

        f(t) = (t + 1) / (w + 1) for t < w;  else with p = min((t - w) / max(T - w, 1), 1):
        constant 1, linear 1 - p, cosine (1 + cos(pi p)) / 2.
    """
    def factor(step: int) -> float:
        total = max(total_steps(), 1)
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        progress = min((step - warmup_steps) / max(total - warmup_steps, 1), 1.0)
        if kind == "linear":
            return 1.0 - progress
        if kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _keep_own_kernel(optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
    """Load-state-dict pre-hook: a checkpoint from a fused (or unfused) AdamW resumes on this optimizer's own
    kernel; the saved hyperparameters would otherwise overwrite its `fused` and `foreach` flags."""
    saved_groups = state_dict["param_groups"]
    if len(saved_groups) != len(optimizer.param_groups):
        return state_dict  # torch's own error names the mismatch
    groups = [{**saved, "fused": own.get("fused"), "foreach": own.get("foreach")}
              for saved, own in zip(saved_groups, optimizer.param_groups)]
    return {**state_dict, "param_groups": groups}


def accumulate_gradients(idx: torch.Tensor, loss_fn: Callable[[torch.Tensor], LossTerms],
                         micro_batches: int, sync: PassSync | None = None) -> tuple[float, ...]:
    """Backward the mean loss over the samples `idx` in up to `micro_batches` parts; return the mean of each term.

    `loss_fn(micro_idx)` returns the mean loss over `micro_idx` (consecutive samples of `idx`), or a tuple
    whose first entry is that loss and whose other entries are only logged. Each micro loss is backwarded
    with weight len(micro_idx) / len(idx), so the gradients add up to those of the mean over `idx`:
    sum_m |m| / |idx| * grad mean_{s in m} l_s = grad mean_{s in idx} l_s. Parts are as even as possible,
    e.g. 5 samples in 2 parts: 3 + 2; never empty. An empty `idx` backwards nothing and returns ().

    `sync` (a model sharded with FSDP, `learners.parallel.fsdp.pass_sync`): each loss is also scaled by
    `sync.scale`, and this rank adds zero-weight passes on sample 0 until it has run as many as every other rank.
    """
    means: list[float] = []
    parts = torch.tensor_split(idx, min(micro_batches, len(idx))) if len(idx) else []
    scale, padding = (1.0, 0) if sync is None else (sync.scale, sync.padding(len(parts)))  # collective before passes
    for micro in parts:
        weight = len(micro) / len(idx)
        out = loss_fn(micro)
        terms = out if isinstance(out, tuple) else (out,)
        (terms[0] * (weight * scale)).backward()  # frees this micro-batch's activations before the next forward
        values = [float(t.detach()) * weight for t in terms]
        means = [m + v for m, v in zip(means, values)] if means else values
    for _ in range(padding):  # FSDP's forward and backward are collectives: every rank runs as many
        out = loss_fn(torch.zeros(1, dtype=torch.long))
        ((out[0] if isinstance(out, tuple) else out) * 0.0).backward()
    return tuple(means)


def gradient_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, local_count: int,
                  max_grad_norm: float | None, dist: Any = None) -> float:
    """Average the gradients (a mean over this rank's `local_count` samples) across torchrun ranks into the
    global-minibatch mean, clip their norm to `max_grad_norm`, step. Returns the norm before clipping.

    A rank with no samples (`local_count` 0, no backward) joins the others' step with zero gradients.
    A NaN or infinite gradient norm (a non-finite reward, return, loss or weight upstream) raises
    `FloatingPointError` before the step, so the weights and the last checkpoint stay intact.
    """
    if dist is not None and dist.enabled and fsdp_root(model) is None:  # FSDP reduced them in the backward
        total = dist.sum(local_count)
        dist.average_gradients(model, local_count / total if total else 0.0)
    norm = clip_grad(model, max_grad_norm)
    if not math.isfinite(norm):
        optimizer.zero_grad(set_to_none=True)
        raise FloatingPointError(
            f"the gradient norm of {type(model).__name__} is {norm}: a reward, return or loss became NaN or "
            "infinite, so training stops before this step (weights unchanged). Check the reward function for "
            "NaN/inf, or lower the learning rate / keep max_grad_norm set if the losses grew without bound.")
    optimizer.step()
    return norm


def clip_grad(model: torch.nn.Module, max_norm: float | None) -> float:
    """Clip the gradient norm of `model` to `max_norm` (None: only measure it); return the norm before clipping."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return 0.0
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm is not None else float("inf"))
    return float(norm)


@dataclasses.dataclass
class PolicyBatch:
    """One seat's share of a policy step: the rows `idx` of its `samples` (a `SampleBatch`) with their
    `advantages` `(S,)`, the sampling policy's `old_logprobs` `(S, T)` (None: ratio 1, the first step on
    a rollout) and the `temperature` its tokens are scored at (the seat's `logprob_temperature_of`).

    An engine-sampled rollout also carries its `correction` (`learners.rollout.scoring.RolloutCorrection`)
    and the seat's `agent` index in it: the advantages are weighed by w_s and pi_old is the correction's
    (`old_logprobs` is then unused), the rows not scored yet being scored by this step's forward."""

    samples: Any
    idx: torch.Tensor
    advantages: torch.Tensor
    old_logprobs: torch.Tensor | None
    temperature: float
    correction: RolloutCorrection | None = None
    agent: int = 0

    def terms(self, micro: torch.Tensor, logprobs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The advantages `(len(micro),)` and pi_old (None: ratio 1) of the rows `micro`, whose log-probs under
        the model being trained are `logprobs`."""
        advantages = self.advantages[micro]
        if self.correction is not None:
            return self.correction.apply(self.agent, micro, logprobs, advantages)
        return advantages, None if self.old_logprobs is None else self.old_logprobs[micro]


def policy_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, parts: Sequence[PolicyBatch], cfg: Any,
                dist: Any = None) -> dict[str, float]:
    """One optimizer step of a policy on the rows of every seat it plays (`parts`; one part for a model in one
    seat, one per seat under self-play): the clipped policy loss of `learners.loop.losses.policy_terms`,

        L = sum_p |idx_p| / N * L_p,   N = sum_p |idx_p|,

    the mean over all N rows, so a model in two seats steps like one seat on the pooled rows (the same
    effective learning rate). Each part's ratio is against the log-probs of the weights that sampled it.
    `cfg` gives the loss and step settings. Returns the loss, the `POLICY_STATS` (row-weighted over the
    parts), the gradient norm and the learning rate (MAGRPO, IAC and MAAC actors all step here)."""
    total = sum(len(part.idx) for part in parts)
    sync = pass_sync(model, dist, total)
    optimizer.zero_grad(set_to_none=True)
    terms: tuple[float, ...] = ()
    for part in parts:
        if not len(part.idx) and sync is None:
            continue
        share = len(part.idx) / max(total, 1)

        def loss_fn(micro: torch.Tensor, part: PolicyBatch = part, share: float = share) -> tuple[torch.Tensor, ...]:
            batch = part.samples.select(micro)
            logprobs = completion_logprobs(model, batch, part.temperature, cfg.group_by_length)
            advantages, old = part.terms(micro, logprobs)
            return tuple(share * t for t in policy_terms(logprobs, old, advantages, batch.completion_mask,
                                                         cfg.clip_range, cfg.length_normalization))

        got = accumulate_gradients(part.idx, loss_fn, cfg.gradient_accumulation_steps, sync)  # forward + backward
        terms = tuple(a + b for a, b in zip(terms, got)) if terms and got else terms or got
    grad_norm = gradient_step(model, optimizer, total, cfg.max_grad_norm, dist)
    return {"grad_norm": grad_norm, "learning_rate": optimizer.param_groups[0]["lr"],
            **dict(zip(("loss", *POLICY_STATS), terms))}
