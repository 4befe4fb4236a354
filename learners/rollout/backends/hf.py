"""The HF generation backend: each agent samples on its own transformers model, in this process.

Plain sampling (temperature, top-k, top-p) runs our lean loop (`learners.rollout.backends.sampling`: one
prefill per prompt, the sampled tokens' log-probs kept for the learners). User `generation_kwargs`, stop
strings and logits processors in a model's generation config go through `model.generate`, whose stopping
points `StopRecorder` records. LoRA agents that are adapters of one base sample together in one batch.

Every path returns a `SampleBatch`: left-padded prompt ids, the sampled ids through the first EOS (or stop
string), their mask, the decoded texts and, from the lean loop, the log-probs.

The sampler contract every backend keeps (the vLLM backend lists what still differs):
- a completion ends at the first token whose text (special tokens' text included) completes a stop string
  in the completion's own text, never at one that spans the prompt's end; that token is kept;
- greedy decoding gives every sample of a prompt the argmax completion;
- prompts are cut from the left to `prompt_limit` tokens (`max_prompt_length`, and the model's context minus
  `max_new_tokens`, so every completion may use all its tokens), the cut kept per sample
  (`SampleBatch.prompt_cut`); settings that cannot fit the context are refused when the backend is built
  (`check_context`).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StoppingCriteriaList

from learners.rollout.backends.sampling import (
    StopRecorder,
    mask_completions,
    sample_completions,
    supports_lean_sampling,
)
from learners.rollout.samples import SampleBatch
from learners.rollout.scoring import Support
from learners.rollout.settings import GenerationSettings

__all__ = ["HFBackend", "check_context", "context_length", "encode_prompts", "eos_token_ids", "prompt_limit"]


class HFBackend:
    """Generation on the agents' own HF models (the default backend).

    Args:
        agents: One causal LM per trained agent.
        tokenizers: One tokenizer per agent (left padding, pad token set).
        agent_settings: Each agent's sampling settings (`GenerationSettings.for_agent` of its seat).
        batch_adapters: Let LoRA agents of one base sample in one batch (`GenerationSettings.batch_adapters`).
    """

    name = "hf"
    samples_on_models = True

    def __init__(self, agents: Sequence[PreTrainedModel], tokenizers: Sequence[PreTrainedTokenizerBase],
                 agent_settings: Sequence[GenerationSettings], batch_adapters: bool = True) -> None:
        self.agents = list(agents)
        self.tokenizers = list(tokenizers)
        self.agent_settings = list(agent_settings)
        self.batch_adapters = batch_adapters
        self.contexts = [context_length(model) for model in self.agents]  # each agent's context, or None
        for a, (settings, context) in enumerate(zip(self.agent_settings, self.contexts, strict=True)):
            check_context(a, settings, context, "the model's config")
        self.shared_base = self._shared_base()  # the PEFT model of LoRA agents that sample together, or None

    def generate_all(self, prompts: list[list[str]], num_samples: int, greedy: bool = False) -> list[SampleBatch]:
        """Every agent's samples in ONE batched call, for LoRA agents of one base (`shared_base` set): each row
        goes through its own adapter (PEFT's mixed-adapter batches), so one decode loop serves the team."""
        cfg, tok = self.agent_settings[0], self.tokenizers[0]  # equal for every agent here (`_shared_base`)
        ids, mask, cut = self.encode(0, [p for agent_prompts in prompts for p in agent_prompts])
        names = [agent.adapter_name for agent, agent_prompts in zip(self.agents, prompts) for _ in agent_prompts]
        eos_ids = self.eos_ids(0)
        completion, logprobs = sample_completions(
            self.shared_base, ids, mask, num_samples, cfg.max_new_tokens, eos_ids, tok.pad_token_id,
            temperature=None if greedy else cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
            logprob_temperature=cfg.logprob_temperature, adapter_names=names)
        batches, start = [], 0
        for agent_prompts in prompts:
            rows = slice(start, start + len(agent_prompts))
            samples = slice(rows.start * num_samples, rows.stop * num_samples)
            keep = mask[rows].any(0)  # drop the left padding only other agents' longer prompts needed
            first = int(keep.int().argmax()) if bool(keep.any()) else mask.shape[1]
            batches.append(self._samples(0, ids[rows, first:], mask[rows, first:], cut[rows], completion[samples],
                                         logprobs[samples], num_samples))
            start = rows.stop
        return batches

    def generate(self, agent: int, prompts: list[str], num_samples: int, greedy: bool = False) -> SampleBatch:
        """Sample `num_samples` completions for each prompt in one call (rows prompt-major)."""
        cfg, tok = self.agent_settings[agent], self.tokenizers[agent]
        ids, mask, cut = self.encode(agent, prompts)
        eos_ids = self.eos_ids(agent)
        if self.lean(agent):
            completion, logprobs = sample_completions(
                self.agents[agent], ids, mask, num_samples, cfg.max_new_tokens, eos_ids, tok.pad_token_id,
                temperature=None if greedy else cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                logprob_temperature=cfg.logprob_temperature)
            return self._samples(agent, ids, mask, cut, completion, logprobs, num_samples)
        completion, sampled = self._hf_generate(agent, ids, mask, num_samples, greedy, eos_ids)
        if sampled is None:  # beam search: read the ids
            completion_mask = mask_completions(completion, eos_ids, tok.pad_token_id, bool(cfg.stop_strings))
        else:
            positions = torch.arange(completion.shape[1], device=completion.device)
            completion_mask = (positions < sampled[:, None].to(completion.device)).long()
        return self._samples(agent, ids, mask, cut, completion, None, num_samples, completion_mask)

    def encode(self, agent: int, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-padded token ids and attention mask of `prompts` under agent `agent`'s tokenizer, on its device,
        cut to fit its context, and the tokens cut from each (`encode_prompts`, on CPU)."""
        ids, mask, cut = encode_prompts(self.tokenizers[agent], self.agent_settings[agent], prompts,
                                        self.contexts[agent])
        device = self.agents[agent].device
        return ids.to(device), mask.to(device), cut

    def _samples(self, agent: int, ids: torch.Tensor, mask: torch.Tensor, cut: torch.Tensor, completion: torch.Tensor,
                 logprobs: torch.Tensor | None, num_samples: int,
                 completion_mask: torch.Tensor | None = None) -> SampleBatch:
        """The `SampleBatch` of sampled `completion` ids (with their log-probs, when the sampling loop kept
        them): the mask covers each row's tokens through its first EOS (or `completion_mask`, when given),
        trailing columns no row reached are dropped, and the texts are decoded."""
        tok = self.tokenizers[agent]
        if completion_mask is None:
            completion_mask = mask_completions(completion, self.eos_ids(agent), tok.pad_token_id, stop_strings=False)
        width = int(completion_mask.sum(1).max()) if completion_mask.numel() else 0
        completion, completion_mask = completion[:, :width], completion_mask[:, :width]
        completion = completion.masked_fill(completion_mask == 0, tok.pad_token_id)
        lengths = completion_mask.sum(1).tolist()
        rows = completion.tolist()
        texts_out = tok.batch_decode([row[:n] for row, n in zip(rows, lengths)], skip_special_tokens=True)
        return SampleBatch(
            ids.repeat_interleave(num_samples, 0).cpu(),
            mask.repeat_interleave(num_samples, 0).cpu(),
            completion.cpu(),
            completion_mask.cpu(),
            texts_out,
            None if logprobs is None else (logprobs[:, :width] * completion_mask).cpu(),
            cut.repeat_interleave(num_samples, 0),
        )

    def _shared_base(self) -> Any:
        """The PEFT model all agents are adapters of, when they can sample in one batch: `batch_adapters`,
        two or more LoRA agents (`learners.models.lora.AdapterAgent`) on one base, one tokenizer, plain sampling, and
        the same settings for every agent (else each agent samples on its own)."""
        peft = {id(getattr(a, "peft", None)) for a in self.agents}
        if (not self.batch_adapters or len(self.agents) < 2 or len(peft) != 1
                or not all(hasattr(a, "adapter_name") for a in self.agents)
                or any(s != self.agent_settings[0] for s in self.agent_settings)
                or len({id(t) for t in self.tokenizers}) != 1 or not self.lean(0)):
            return None
        return self.agents[0].peft

    def lean(self, agent: int) -> bool:
        """Plain sampling goes through `sample_completions`; user generate arguments and stop strings
        go through `model.generate`; only
        the lean loop keeps the sampled tokens' log-probs."""
        settings = self.agent_settings[agent]
        return not settings.generation_kwargs and not settings.stop_strings and supports_lean_sampling(self.agents[agent])

    def _hf_generate(self, agent: int, ids: torch.Tensor, mask: torch.Tensor, num_samples: int, greedy: bool,
                     eos_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`model.generate`'s new tokens `(S, T)`, and each row's number of sampled tokens `(S,)`.

        generate pads a row once it stops, with the pad id, which may also be a token the model can sample
        (pad == EOS is common). So the lengths are recorded while generating: `StopRecorder` applies the
        EOS ids (the user's `eos_token_id` override included), the stop strings and the user's
        `stopping_criteria`, and notes the step at which each row stopped. Beam search reorders rows,
        so it falls back to reading the ids (`mask_completions`): lengths None. Greedy decoding (without
        beams) runs each prompt once and repeats its rows `num_samples` times, as the lean loop's argmax does.
        """
        model, tok, cfg = self.agents[agent], self.tokenizers[agent], self.agent_settings[agent]
        if greedy:
            sampling = dict(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:  # top_k=0, not None: generate() would fill None with its default of 50
            sampling = dict(do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k or 0)
        kwargs = dict(
            max_new_tokens=cfg.max_new_tokens,
            num_return_sequences=num_samples,
            pad_token_id=tok.pad_token_id,
            eos_token_id=eos_ids,
            synced_gpus=False,  # each process samples alone (FSDP: on gathered weights), never in lockstep
            **sampling,
        )
        kwargs.update(cfg.generation_kwargs)  # the user's generate arguments win (e.g. beam search)
        beams = kwargs.get("num_beams", model.generation_config.num_beams or 1) > 1
        # generate refuses several greedy sequences per prompt: decode each prompt once and repeat its rows.
        repeats = num_samples if not beams and not kwargs.get("do_sample", False) else 1
        kwargs["num_return_sequences"] = num_samples // repeats
        recorder = None
        if beams:
            if cfg.stop_strings:
                kwargs.update(stop_strings=cfg.stop_strings, tokenizer=tok)
        else:
            eos = kwargs["eos_token_id"]
            recorder = StopRecorder(ids.shape[1], [eos] if isinstance(eos, int) else list(eos or []),
                                     cfg.stop_strings, tok, kwargs.pop("stopping_criteria", None))
            kwargs["stopping_criteria"] = StoppingCriteriaList([recorder])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        completion = out[:, ids.shape[1]:]
        lengths = None if recorder is None else recorder.lengths(completion.shape[1])
        if repeats > 1:
            completion, lengths = completion.repeat_interleave(repeats, 0), lengths.repeat_interleave(repeats, 0)
        return completion, lengths

    def eos_ids(self, agent: int) -> list[int]:
        """The ids that end agent `agent`'s completions (`eos_token_ids`)."""
        return eos_token_ids(self.agents[agent], self.tokenizers[agent])

    def support(self, agent: int) -> Support:
        """The kept log-probs are over the full vocabulary at the agent's scoring temperature."""
        return Support(self.agent_settings[agent].logprob_temperature)

    def follow(self, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """Nothing to do: this backend samples on the live models, so new weights are used at once."""

    def sync(self) -> None:
        """Nothing to do: the live models are the generation weights."""

    def finish_rollout(self) -> dict[str, float]:
        """Nothing is held between rollouts and no weights are copied: no timings."""
        return {}

    def prompt_rows(self, agent: int, prompts: list[str], num_samples: int) -> SampleBatch:
        """`num_samples` rows per prompt holding the prompt and no sampled token (an agent not to move:
        critics still read its prompt), with log-probs exactly when this agent's samples have them."""
        ids, mask, cut = self.encode(agent, prompts)
        S = len(prompts) * num_samples
        empty = torch.zeros(S, 0, dtype=torch.long)
        return SampleBatch(ids.repeat_interleave(num_samples, 0).cpu(), mask.repeat_interleave(num_samples, 0).cpu(),
                           empty, empty.clone(), [""] * S, torch.zeros(S, 0) if self.lean(agent) else None,
                           cut.repeat_interleave(num_samples, 0))


def encode_prompts(tokenizer: PreTrainedTokenizerBase, settings: GenerationSettings, prompts: list[str],
                   context: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded token ids and attention mask `(B, P)` of `prompts`, on CPU, and the tokens cut from each
    `(B,)`. Each prompt is rendered with the chat template when `settings.use_chat_template` (then no other
    special tokens are added) and cut from the left (its end, where the question is, stays) to
    `prompt_limit(settings, context)` tokens. Every backend encodes prompts here, so they see the same ids.

    Args:
        tokenizer: The agent's tokenizer, with a pad token (as `load_agents` leaves it).
        settings: The agent's sampling settings (`use_chat_template`, `max_prompt_length`, `max_new_tokens`).
        prompts: The observations to encode, one per row.
        context: The model's context length in tokens (prompt and completion); None: no such limit.
    """
    if settings.use_chat_template:
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                               add_generation_prompt=True) for p in prompts]
    else:
        texts = prompts
    added = not settings.use_chat_template
    rows = tokenizer(texts, add_special_tokens=added)["input_ids"]
    empty = [i for i, row in enumerate(rows) if not row]
    if empty:  # HF would raise a bare RuntimeError alone and generate when padded beside others; vLLM refuses
        raise ValueError(f"{len(empty)} of {len(prompts)} prompts encode to no tokens (first: prompt {empty[0]}, "
                         f"{prompts[empty[0]]!r}): a causal LM cannot continue an empty text. Give the observation "
                         "some text, or set use_chat_template=True (or use a tokenizer that adds a BOS token).")
    limit = prompt_limit(settings, context)
    front = _leading_special_tokens(tokenizer) if added else 0  # a BOS the tokenizer adds stays, as in truncation
    cut = [0 if limit is None else min(max(len(row) - limit, 0), len(row) - front) for row in rows]
    rows = [torch.tensor(row[:front] + row[front + n:], dtype=torch.long) for row, n in zip(rows, cut)]
    if not rows:
        empty = torch.zeros(0, 0, dtype=torch.long)
        return empty, empty.clone(), torch.zeros(0, dtype=torch.long)
    ids = pad_sequence(rows, batch_first=True, padding_value=tokenizer.pad_token_id, padding_side="left")
    mask = pad_sequence([torch.ones_like(row) for row in rows], batch_first=True, padding_side="left")
    return ids, mask, torch.tensor(cut, dtype=torch.long)


def _leading_special_tokens(tokenizer: PreTrainedTokenizerBase) -> int:
    """How many special tokens (a BOS) the tokenizer puts before a text's own tokens."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    return next((i for i in range(len(full) - len(plain) + 1) if full[i:i + len(plain)] == plain), 0)


def prompt_limit(settings: GenerationSettings, context: int | None) -> int | None:
    """The most prompt tokens an agent keeps: `max_prompt_length`, and within a `context` of C tokens
    C - max_new_tokens, so that every completion may use all its `max_new_tokens`; None: no limit."""
    limits = [settings.max_prompt_length, None if context is None else context - settings.max_new_tokens]
    return min((n for n in limits if n is not None), default=None)


def context_length(model: PreTrainedModel) -> int | None:
    """The most tokens (prompt and completion) `model` attends to, from its config (`max_position_embeddings`,
    GPT-2's `n_positions`); None when the config does not say."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_context(agent: int, settings: GenerationSettings, context: int | None, source: str) -> None:
    """Refuse settings that cannot fit agent `agent`'s `context` of tokens (named by `source`): a
    `max_new_tokens` that leaves no room for a prompt, or a `max_prompt_length + max_new_tokens` over it."""
    if context is None:
        return
    new, longest = settings.max_new_tokens, settings.max_prompt_length
    if new >= context:
        raise ValueError(f"max_new_tokens={new} leaves no room for a prompt in agent {agent}'s context of {context} "
                         f"tokens ({source}); lower max_new_tokens below {context}.")
    if longest is not None and longest + new > context:
        raise ValueError(f"max_prompt_length={longest} + max_new_tokens={new} = {longest + new} tokens exceed "
                         f"agent {agent}'s context of {context} tokens ({source}); lower one of them, or set "
                         f"max_prompt_length=None to cut prompts from the left to {context - new} tokens.")


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The ids that end a completion: the model's generation-config EOS ids and the tokenizer's EOS id."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    eos = tokenizer.eos_token_id
    return sorted(set(ids) | ({eos} if eos is not None else set()))
