"""The lean sampling loop: K completions per prompt with one prompt prefill and sampled-token log-probs.

`sample_completions` does what `model.generate(do_sample=True,
num_return_sequences=K)` does for plain temperature / top-k / top-p sampling,
with three differences that matter for RL:

1. the prompt is run once per distinct prompt, not once per sample: its KV
   cache is copied to each of its rows before decoding (K samples of a prompt,
   and rows that repeat a prompt, as the K episodes of a group do on their
   first turn, share one prefill);
2. each step draws its token by inverse-CDF sampling, one uniform number per
   row, instead of `torch.multinomial`'s exponential race over the vocabulary
   (which needs V random numbers per row and took ~24% of decoding time on CPU);
3. it returns log pi(y_t | x, y_<t) of every sampled token, the "old" log-probs
   of a PPO-style ratio, so learners need no extra forward pass over the
   rollout; `logprob_temperature` says under which softmax (the learners pass
   the sampling temperature: see `LearnerConfig.tempered_logprobs`).

Sampling distribution at each step, with logits z over the vocabulary:

    p(v) = softmax(z / temperature)(v) restricted to the top-k logits and to the
           smallest set of most likely tokens whose mass reaches top_p, renormalized

(the same as transformers' Temperature/TopK/TopP warpers; top_k=None or 0
disables top-k). Greedy decoding takes argmax z. A row stops after its first
EOS id; later positions hold the pad id and log-prob 0.

The rollout engine uses this loop when generation is plain sampling (no user
`generation_kwargs`, no stop strings, no logits processors in the model's
generation config) and falls back to `model.generate` otherwise; `StopRecorder`
records where `generate` stopped each row, and `mask_completions` marks a
completion's tokens through its first EOS when only the ids are known.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase, StoppingCriteria
from transformers.generation.stopping_criteria import StopStringCriteria

from learners.rollout.scoring import outside_nucleus, token_logprobs

__all__ = ["StopRecorder", "draw_tokens", "filtered_probs", "logits_processor_fields", "mask_completions",
           "sample_completions", "sample_tokens", "supports_lean_sampling"]

# Generation-config fields that add a logits processor when they differ from the defaults.
_PROCESSOR_FIELDS = (
    "repetition_penalty", "encoder_repetition_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "bad_words_ids", "min_length", "min_new_tokens", "forced_bos_token_id", "forced_eos_token_id",
    "suppress_tokens", "begin_suppress_tokens", "sequence_bias", "exponential_decay_length_penalty",
    "typical_p", "epsilon_cutoff", "eta_cutoff", "min_p", "renormalize_logits", "guidance_scale",
    "watermarking_config", "top_h",
)


def filtered_probs(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float) -> torch.Tensor:
    """Sampling probabilities `(B, V)` of float `logits` after temperature, top-k and top-p (see module doc)."""
    probs, index = _candidates(logits, temperature, top_k, top_p)
    return probs if index is None else torch.zeros_like(logits).scatter_(-1, index, probs)


def _candidates(logits: torch.Tensor, temperature: float, top_k: int | None,
                top_p: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Probabilities over the candidate tokens and their vocabulary ids (None: all of them, in order).

    With top-k the nucleus is found among the k best logits only, so no step sorts the vocabulary.
    Exactly k tokens survive top-k even when several tie with the k-th logit.
    """
    z, index = logits / temperature, None
    if top_k is not None and 0 < top_k < z.shape[-1]:
        z, index = torch.topk(z, top_k, dim=-1)  # sorted, most likely first
    if top_p < 1.0:
        ascending, order = torch.sort(z, dim=-1)
        drop = outside_nucleus(ascending, top_p)
        z = z.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return z.softmax(-1), index


def sample_tokens(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One draw per row of `probs` `(B, V)` by inverse CDF: the first v with cumsum(p)_v > u * sum(p)."""
    dtype = torch.float64 if probs.device.type in ("cpu", "cuda") else torch.float32  # MPS has no float64
    cdf = probs.to(dtype).cumsum(-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=dtype)
    index = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return index.clamp_(max=probs.shape[-1] - 1).squeeze(-1)


def draw_tokens(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """One token id per row of `logits` `(B, V)`, drawn from the filtered distribution of `filtered_probs`."""
    probs, index = _candidates(logits, temperature, top_k, top_p)
    token = sample_tokens(probs, generator)
    return token if index is None else index.gather(-1, token[:, None]).squeeze(-1)


def _base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under PEFT / adapter wrappers."""
    model = getattr(model, "peft", model)
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _cache_argument(model: torch.nn.Module) -> str | None:
    """Name of the forward's KV-cache argument (`cache` in transformers 5, `past_key_values` before)."""
    params = inspect.signature(_base_model(model).forward).parameters
    return next((name for name in ("cache", "past_key_values") if name in params), None)


def supports_lean_sampling(model: torch.nn.Module) -> bool:
    """True for decoder-only models whose forward takes a KV cache and `logits_to_keep`, with no extra
    logits processors in their generation config."""
    base = _base_model(model)
    if getattr(base.config, "is_encoder_decoder", False) or _cache_argument(model) is None:
        return False
    if "logits_to_keep" not in inspect.signature(base.forward).parameters:
        return False
    return not logits_processor_fields(model)


def logits_processor_fields(model: torch.nn.Module) -> list[str]:
    """The fields of the model's generation config that add a logits processor to `generate` (e.g.
    `repetition_penalty`), set to something other than their default."""
    config, default = getattr(_base_model(model), "generation_config", None), GenerationConfig()
    return [] if config is None else [
        f for f in _PROCESSOR_FIELDS if getattr(config, f, None) not in (None, getattr(default, f, None))]


@torch.no_grad()
def sample_completions(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    num_samples: int,
    max_new_tokens: int,
    eos_ids: list[int],
    pad_id: int,
    temperature: float | None = 1.0,
    top_k: int | None = None,
    top_p: float = 1.0,
    logprob_temperature: float = 1.0,
    adapter_names: list[str] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample `num_samples` completions of each left-padded prompt (rows prompt-major: p * K + k).

    `temperature=None` decodes greedily. Returns `(ids, logprobs)`, both `(B * K, T)` with
    T <= max_new_tokens: sampled ids (pad after a row's EOS) and the log-prob of each sampled token
    under softmax(logits / logprob_temperature) (0 after EOS).

    `adapter_names` (one per prompt) runs each prompt's rows through that LoRA adapter of a PEFT `model`
    (PEFT's mixed-adapter batches): agents sharing one base sample in one batch, each with its own adapter.
    """
    cache_arg = _cache_argument(model)
    positions = (attention_mask.cumsum(1) - 1).clamp(min=0)
    first, source = distinct_prompts(input_ids, attention_mask, adapter_names)
    routing = {} if adapter_names is None else {"adapter_names": [adapter_names[i] for i in first.tolist()]}
    out = model(input_ids=input_ids[first], attention_mask=attention_mask[first], position_ids=positions[first],
                use_cache=True, logits_to_keep=1, **routing)
    if adapter_names is not None:
        routing = {"adapter_names": [name for name in adapter_names for _ in range(num_samples)]}
    cache = getattr(out, cache_arg)
    rows = source.repeat_interleave(num_samples)  # each sample's prefilled prompt
    cache.reorder_cache(rows)  # that prompt's KV, once per sample
    logits = out.logits[:, -1][rows]
    mask = attention_mask.repeat_interleave(num_samples, 0)
    position = positions[:, -1:].repeat_interleave(num_samples, 0)
    eos = torch.tensor(eos_ids, dtype=torch.long, device=input_ids.device)
    done = torch.zeros(mask.shape[0], dtype=torch.bool, device=input_ids.device)
    tokens, logprobs = [], []
    for step in range(max_new_tokens):
        logits = logits.float()
        if temperature is None:
            token = logits.argmax(-1)
        else:
            token = draw_tokens(logits, temperature, top_k, top_p)
        token = token.masked_fill(done, pad_id)
        picked = token_logprobs(logits, token, logprob_temperature)
        tokens.append(token)
        logprobs.append(picked.masked_fill(done, 0.0))
        done = done | torch.isin(token, eos)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
        position = position + 1
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=position, use_cache=True,
                    **{cache_arg: cache}, **routing)
        logits = out.logits[:, -1]
    return torch.stack(tokens, 1), torch.stack(logprobs, 1)


def distinct_prompts(input_ids: torch.Tensor, attention_mask: torch.Tensor, adapter_names: list[str] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """`(first, source)`: the first row of each distinct prompt (ids, mask and adapter alike), in row order,
    and for each row the position in `first` of the prompt it repeats. `input_ids[first][source]` is
    `input_ids`. Example: rows [a, b, a] -> first [0, 1], source [0, 1, 0]."""
    key = torch.cat([input_ids, attention_mask], 1)
    if adapter_names is not None:
        codes = {name: i for i, name in enumerate(dict.fromkeys(adapter_names))}
        key = torch.cat([key, torch.tensor([[codes[n]] for n in adapter_names], device=key.device)], 1)
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    seen = torch.full((len(key),), len(key), dtype=torch.long, device=key.device)
    seen = seen.scatter_reduce(0, inverse, torch.arange(len(key), device=key.device), "amin")  # first row per class
    first = torch.unique(seen[inverse])  # ascending: row order
    position = torch.empty_like(seen).index_put_((inverse[first],), torch.arange(len(first), device=key.device))
    return first, position[inverse]


class StopRecorder(StoppingCriteria):
    """generate's stopping rule for a batch of rows, which also records when each row stopped.

    A row stops at the first step whose token is an EOS id, completes a stop string, or makes a user
    criterion fire; generate pads it from then on. `lengths(T)` gives the sampled tokens per row.
    Stop strings are matched on the completion's own tokens (the columns after `prompt_width`; prompts are
    left-padded, so every row's completion starts there): a stop string that would span the prompt's end
    does not stop a row, as vLLM matches its stop strings on the output text only.
    """

    def __init__(self, prompt_width: int, eos_ids: list[int], stop_strings: list[str] | None,
                 tokenizer: PreTrainedTokenizerBase, user_criteria: Sequence[Any] | None) -> None:
        self.prompt_width = prompt_width
        self.eos_ids = torch.tensor(eos_ids, dtype=torch.long)
        self.stop = StopStringCriteria(tokenizer, stop_strings) if stop_strings else None
        self.user = list(user_criteria or [])
        self.stopped_at: torch.Tensor | None = None  # (S,) step of the stopping token, -1 while running

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_width - 1
        done = torch.isin(input_ids[:, -1], self.eos_ids.to(input_ids.device))
        if self.stop is not None:
            done = done | self.stop(input_ids[:, self.prompt_width:], scores)
        for criterion in self.user:
            done = done | criterion(input_ids, scores, **kwargs)
        if self.stopped_at is None:
            self.stopped_at = torch.full_like(done, -1, dtype=torch.long)
        self.stopped_at = torch.where(done & (self.stopped_at < 0), step, self.stopped_at)
        return done

    def lengths(self, width: int) -> torch.Tensor:
        """Sampled tokens per row: through the stopping token, or all `width` for rows that never stopped."""
        if self.stopped_at is None:
            raise RuntimeError("generate did not call the stopping criteria.")
        return torch.where(self.stopped_at >= 0, self.stopped_at + 1, width).clamp(max=width)


def mask_completions(completion: torch.Tensor, eos_ids: list[int], pad_id: int, stop_strings: bool) -> torch.Tensor:
    """1 on tokens up to and including the first EOS; with stop strings, up to the last non-pad token."""
    T = completion.shape[1]
    positions = torch.arange(T, device=completion.device)
    is_eos = torch.isin(completion, torch.tensor(eos_ids, device=completion.device)) if eos_ids else torch.zeros_like(completion, dtype=torch.bool)
    has_eos = is_eos.any(1)
    end = torch.where(has_eos, is_eos.int().argmax(1), torch.full_like(has_eos, T - 1, dtype=torch.long))
    if stop_strings and pad_id not in eos_ids:
        # A sequence stopped by a stop string is padded afterwards without an EOS.
        non_pad = completion != pad_id
        last = T - 1 - non_pad.flip(1).int().argmax(1)
        end = torch.where(has_eos, end, torch.where(non_pad.any(1), last, torch.full_like(last, -1)))
    return (positions[None, :] <= end[:, None]).long()
