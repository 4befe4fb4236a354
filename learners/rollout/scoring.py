"""Scoring sampled tokens: the one log-prob gather that the samplers and the trainer share.

    log pi(y_t | x, y_<t) = z_t,y / T - logsumexp_{v in K_t} z_t,v / T          (`token_logprobs`)

over a `Support` (T, top_k, top_p): K_t is the whole vocabulary for a plain temperature, or the tokens that
top-k and top-p truncation keep at step t (plus y_t itself). The HF sampler keeps full-vocabulary log-probs
(its support is `Support(T)`); vLLM's `processed_logprobs` are normalised over the kept tokens, so the
trainer scores a vLLM rollout on `Support(T, top_k, top_p)`: the two sides then agree and a ratio of 1 means
the same policy. The learners recompute it with gradients over a `SampleBatch` (`completion_logprobs`).

`RolloutCorrection` weighs each sample by its sequence-level trainer/engine ratio when an engine (vLLM)
sampled the rollout:

    r_s = exp( 1/|y_s| sum_t (log pi_trainer(y_st) - log pi_engine(y_st)) ),   w_s = r_s if r_s <= cap else 0,

with pi_trainer at the sampling weights. Those log-probs cost a forward of the trainer over every sample,
unless the update's own forward gives them: its first minibatch runs at the sampling weights, so its rows are
scored there, detached (`RolloutCorrection.apply`), and only the rows trained after a step get a no-grad pass
first (`RolloutCorrection.prescore`). With one optimizer step per rollout (the default) there is no extra
pass. `engine_correction` scores every row up front (the same numbers, one pass more).
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Sequence

import torch

from learners.rollout.samples import SampleBatch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["RolloutCorrection", "Support", "completion_logprobs", "engine_correction", "kept_tokens",
           "length_groups", "outside_nucleus", "sampled_logprobs", "sequence_ratio", "token_logprobs"]


@dataclasses.dataclass(frozen=True)
class Support:
    """The distribution a token is scored under: softmax(z / temperature) renormalised over the kept tokens:
    the `top_k` largest logits (None: all; ties with the k-th kept), then, among those, the smallest set of
    most likely tokens whose mass reaches `top_p` (1.0: all), plus the scored token itself (so a token the
    rule would drop still scores finite). `Support(T)` is the full vocabulary at temperature T."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0

    def truncates(self, vocab_size: int) -> bool:
        """Whether any token can fall outside it (else scoring is a plain log-softmax)."""
        return (self.top_k is not None and 0 < self.top_k < vocab_size) or self.top_p < 1.0


def as_support(temperature: float | Support) -> Support:
    """A temperature alone is the full vocabulary at that temperature."""
    return temperature if isinstance(temperature, Support) else Support(float(temperature))


def outside_nucleus(ascending: torch.Tensor, top_p: float) -> torch.Tensor:
    """For logits sorted ascending along the last axis: True where the token lies outside the nucleus, the
    smallest set of most likely tokens whose probability mass reaches `top_p` (the most likely token stays).
    Example: probabilities [.1, .3, .6] and top_p .8 -> [True, False, False]."""
    drop = ascending.softmax(-1).cumsum(-1) <= 1 - top_p
    drop[..., -1] = False
    return drop


def kept_tokens(z: torch.Tensor, top_k: int | None, top_p: float) -> torch.Tensor:
    """Boolean `(..., V)`: the tokens top-k then top-p keep at each position of the (tempered) logits `z`."""
    with torch.no_grad():
        shape, V = z.shape, z.shape[-1]
        flat = z.reshape(-1, V)
        keep = torch.ones_like(flat, dtype=torch.bool)
        if top_k is not None and 0 < top_k < V:
            keep = flat >= flat.topk(top_k, dim=-1).values[:, -1:]
        if top_p < 1.0:
            ascending, order = flat.masked_fill(~keep, float("-inf")).sort(dim=-1)
            drop = outside_nucleus(ascending, top_p)
            keep = keep & ~drop.scatter(-1, order, drop)  # back to vocabulary order
        return keep.reshape(shape)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float | Support = 1.0) -> torch.Tensor:
    """log pi(tokens) under `temperature` (a float: the full vocabulary) or a `Support`: `(..., V)` logits and
    `(...)` ids give `(...)` float32 (see the module docstring)."""
    support = as_support(temperature)
    z = logits.float() if support.temperature == 1.0 else logits.float() / support.temperature
    picked = z.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    if not support.truncates(z.shape[-1]):
        return picked - z.logsumexp(-1)
    keep = kept_tokens(z.detach(), support.top_k, support.top_p).scatter_(-1, tokens.unsqueeze(-1), True)
    return picked - z.masked_fill(~keep, float("-inf")).logsumexp(-1)


def completion_logprobs(model: "PreTrainedModel", batch: SampleBatch, temperature: float | Support = 1.0,
                        group_by_length: bool = False) -> torch.Tensor:
    """Per-token log pi(completion token | prompt, previous tokens) under `temperature` (or a `Support`),
    0 off the mask: `(S, T)`.

    One forward over the whole batch (`group_by_length`: one per `length_groups` group, rows back in order);
    positions follow the attention mask as in `generate`, and logits are computed only for the completion
    positions.

    Args:
        model: The causal LM that scores the tokens (gradients flow unless called under `torch.no_grad()`).
        batch: The prompts and completions to score, e.g. one agent's `Rollout.samples[a]`.
        temperature: The logits are divided by it before the softmax; a `Support` also applies its top-k/top-p.
        group_by_length: One forward per group of similar lengths instead of one padded forward.
    """
    groups = length_groups(batch) if group_by_length else []
    if len(groups) > 1:
        T = batch.completion_ids.shape[1]
        parts = [completion_logprobs(model, batch.select(rows), temperature) for rows in groups]
        padded = torch.cat([torch.nn.functional.pad(part, (0, T - part.shape[1])) for part in parts])
        return padded[torch.cat(groups).argsort().to(padded.device)]
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


def length_groups(batch: SampleBatch, saving: float = 0.1) -> list[torch.Tensor]:
    """The rows of `batch` in two groups of similar length, or in one when that saves less than `saving` of
    the tokens a forward computes.

    Rows sorted by prompt length are cut before row i where the padded area

        A(i) = i (p_(i-1) + max c_[0,i)) + (S - i) (p_(S-1) + max c_[i,S))

    is least (p sorted prompt lengths, c completion lengths: each group is as wide as its longest prompt plus
    its longest completion), against S (p_(S-1) + max c) for one forward. Example: 16 rows of a 53-token
    prompt and 16 of 86, completions of 16: A = 16 * 69 + 16 * 102 = 2,736 against 3,264, 16% less.
    """
    prompt, completion = batch.prompt_mask.sum(1), batch.completion_mask.sum(1)
    order = prompt.argsort(stable=True)
    p, c = prompt[order], completion[order]
    S = len(order)
    if S < 2:
        return [order]
    head = c.cummax(0).values  # longest completion in rows [0, i]
    tail = c.flip(0).cummax(0).values.flip(0)  # longest completion in rows [i, S)
    i = torch.arange(1, S)
    area = i * (p[i - 1] + head[i - 1]) + (S - i) * (p[-1] + tail[i])
    best = int(area.argmin())
    if area[best] > (1 - saving) * S * (p[-1] + head[-1]):
        return [torch.arange(S)]
    return [order[: best + 1], order[best + 1:]]


def sampled_logprobs(model: "PreTrainedModel", batch: SampleBatch, rows: int = 16,
                     temperature: float | Support = 1.0) -> torch.Tensor:
    """`completion_logprobs` without gradients, `rows` sequences per forward (bounds the logits' memory), on CPU."""
    out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32)
    with torch.no_grad():
        for start in range(0, len(batch), rows):
            idx = torch.arange(start, min(start + rows, len(batch)))
            part = completion_logprobs(model, batch.select(idx), temperature).cpu()
            out[idx, : part.shape[1]] = part
    return out


def sequence_ratio(trainer: torch.Tensor, engine: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """r_s = exp(mean over the sampled tokens of log pi_trainer - log pi_engine) `(S,)` (1 for a row without
    tokens). The mean, not the sum, keeps a long completion's ratio from compounding per-token noise.
    Example: token log-ratios [0.2, 0.0] -> exp(0.1)."""
    mask = mask.float()
    diff = ((trainer.float() - engine.float()) * mask).sum(-1)
    return (diff / mask.sum(-1).clamp(min=1)).exp()


Whole = Callable[[Any], ContextManager[Any]]
"""How a model is scored whole: `whole(model)` is entered around its forward (FSDP: gathered; else nothing)."""


class RolloutCorrection:
    """The sequence-level correction of one engine-sampled rollout (see the module docstring), filled in row
    by row as the trainer scores the samples at the sampling weights.

    For agent a it holds `old[a]` `(S, T)`, the trainer's log-probs at the sampling weights (pi_old of the
    PPO ratio from then on), and `ratio[a]` `(S,)`, r_s (NaN until row s is scored; 1 for a row without
    sampled tokens). A row is scored once: by `prescore` (a no-grad pass, before the update) or by `apply`
    (the update's own forward, detached), which is only right while the weights are the sampling ones: the
    learner prescores every row with tokens that its first minibatch does not train. `seconds` is the time
    spent in `prescore`.
    """

    def __init__(self, samples: Sequence[SampleBatch], cap: float) -> None:
        for a, batch in enumerate(samples):
            if batch.logprobs is None:
                raise ValueError(f"agent {a}'s samples carry no engine log-probs to correct against.")
        self.samples, self.cap, self.seconds = list(samples), cap, 0.0
        self.old = [torch.zeros(b.completion_ids.shape) for b in self.samples]
        # A row without sampled tokens has r_s = 1 (`sequence_ratio`): nothing to score.
        self.ratio = [torch.where(b.completion_mask.sum(-1) > 0, float("nan"), 1.0) for b in self.samples]

    def prescore(self, models: Sequence["PreTrainedModel"], supports: Sequence[Support],
                 skip: Sequence[torch.Tensor] | None = None, whole: Whole = lambda model: nullcontext()) -> None:
        """Score, with one no-grad pass per agent, every unscored row with sampled tokens except `skip[a]`
        (the rows the update's first minibatch trains, scored by its forward; None: score all). Each model
        scores inside `whole(model)`."""
        start = time.perf_counter()
        for a, (model, batch, support) in enumerate(zip(models, self.samples, supports, strict=True)):
            todo = self.ratio[a].isnan()
            if skip is not None:
                todo[skip[a]] = False
            rows = todo.nonzero().squeeze(1)
            if len(rows):
                with whole(model):
                    self.record(a, rows, sampled_logprobs(model, batch.select(rows), temperature=support))
        self.seconds += time.perf_counter() - start

    def record(self, agent: int, rows: torch.Tensor, trainer: torch.Tensor) -> None:
        """Agent `agent`'s trainer log-probs `trainer` `(len(rows), <= T)` of its sample rows `rows`, at the
        sampling weights: they become pi_old of those rows, and give their r_s."""
        trainer = trainer.detach().float().cpu()
        width = trainer.shape[1]
        batch = self.samples[agent]
        self.old[agent][rows, :width] = trainer
        self.ratio[agent][rows] = sequence_ratio(trainer, batch.logprobs[rows, :width],
                                                 batch.completion_mask[rows, :width])

    def apply(self, agent: int, rows: torch.Tensor, logprobs: torch.Tensor, advantages: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """The advantages `(len(rows),)` of agent `agent`'s sample rows `rows` times their w_s, and their
        pi_old `(len(rows), T)`, for a forward whose log-probs are `logprobs` `(len(rows), T)`. Rows not scored
        yet are scored from `logprobs` (detached): this forward must run at the sampling weights."""
        if bool(self.ratio[agent][rows].isnan().any()):
            self.record(agent, rows, logprobs)
        width = logprobs.shape[1]
        return (advantages * self.weights(agent, rows).to(advantages.device),
                self.old[agent][rows, :width].to(logprobs.device))

    def weights(self, agent: int, rows: torch.Tensor) -> torch.Tensor:
        """w_s of agent `agent`'s (scored) sample rows `rows`: r_s, or 0 where r_s > cap."""
        ratio = self.ratio[agent][rows]
        return torch.where(ratio > self.cap, 0.0, ratio)

    def metrics(self) -> dict[str, float]:
        """Per agent, over its rows with sampled tokens (all rows when it never moved): `rollout_ratio_mean`
        and `rollout_ratio_masked` (the share above cap). Every such row must have been scored."""
        metrics = {}
        for a, (batch, ratio) in enumerate(zip(self.samples, self.ratio)):
            sampled = batch.completion_mask.sum(-1) > 0
            if not sampled.any():  # an agent that never moved in this rollout: its rows' r_s is 1
                sampled = torch.ones_like(sampled)
            if bool(ratio[sampled].isnan().any()):
                raise RuntimeError(f"agent {a}'s rollout correction left sampled rows unscored: "
                                   f"{sampled.logical_and(ratio.isnan()).nonzero().squeeze(1).tolist()}")
            metrics[f"train/agent_{a}/rollout_ratio_mean"] = float(ratio[sampled].mean())
            metrics[f"train/agent_{a}/rollout_ratio_masked"] = float((ratio[sampled] > self.cap).float().mean())
        return metrics


def engine_correction(models: Sequence["PreTrainedModel"], samples: Sequence[SampleBatch],
                      supports: Sequence[Support], advantages: torch.Tensor, old: list[torch.Tensor] | None,
                      cap: float | None, whole: Whole = lambda model: nullcontext()
                      ) -> tuple[torch.Tensor, list[torch.Tensor] | None, dict[str, float]]:
    """The `RolloutCorrection` of a rollout scored whole up front: advantages `(A, S)` times w_s, the
    trainer log-probs at the sampling weights (pi_old from here on) and the correction's metrics.

    With `cap` None (no correction) returns `advantages` and `old` as they are, and no metrics. Each model
    scores inside `whole(model)` (FSDP: gathered, one model at a time). The learners score the first
    minibatch's rows in the update's forward instead (`RolloutCorrection.apply`).
    """
    if cap is None:
        return advantages, old, {}
    correction = RolloutCorrection(samples, cap)
    correction.prescore(models, supports, whole=whole)
    rows = torch.arange(advantages.shape[1])
    weights = torch.stack([correction.weights(a, rows) for a in range(len(correction.samples))])
    return advantages * weights, correction.old, correction.metrics()
