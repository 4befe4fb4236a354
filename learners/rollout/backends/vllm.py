"""The vLLM generation backend: one engine per base model, in this process, with every agent's LoRA in it.

Agents that are LoRA adapters of one base (`learners.models.lora.AdapterAgent`s sharing a PEFT model) share
one engine; each turn's prompts of all of them go to it in ONE `generate` call with a `LoRARequest` per
prompt. A fully fine-tuned agent gets an engine of its own; a heterogeneous team mixes both, one call per
engine per turn. Fixed seats (frozen models, bots) are not the backend's: they keep sampling their own way.

Weights follow training: after an optimizer step of agent a (or an optimizer state load, on resume) the
backend marks it changed, and before the next generation pushes it into its engine: a changed adapter's LoRA
tensors are written to its folder in memory (`/dev/shm`), reloaded under its id and deleted; full weights go
in place through `reload_weights`. The seconds this takes are returned by `finish_rollout()` (logged as
`perf/seconds_weight_sync`).

Sampling keeps the HF backend's contract, per agent: temperature, top_p, top_k (None, off, is vLLM's -1),
max_new_tokens, the EOS ids and the chat template map exactly (prompts are tokenized here as the HF backend
does, cut alike to fit the context, and sent as token ids); a completion ends at the first stop string in its
own text, special tokens' text included (kept in the completion); greedy decoding samples the argmax once
per prompt and repeats it. Each prompt's request gets its own seed, drawn from torch's global RNG, so a
seeded run repeats and a resumed one continues exactly. `tests/test_vllm.py` checks greedy parity with HF.
What still differs from the HF backend (the same list is in docs/scaling.md):

1. Sampled completions come from the same distribution but another random stream: a seed repeats a run on
   one backend, not across the two.
2. Temperatures below vLLM's floor of 0.01 (`MIN_TEMPERATURE`) are refused (greedy decoding is `eval_greedy`);
   HF samples at any temperature above 0.
3. `generation_kwargs` and logits-processor fields of a model's generation config (e.g. repetition_penalty)
   are refused; DoRA, `modules_to_save` and LoRA ranks above 512 too.
4. A `max_model_len` in `vllm_engine_args` below the model's context is the engine's context: prompts are cut
   to it (minus `max_new_tokens`), where HF cuts them to the model's context.
5. Log-probs and greedy argmaxes agree up to float rounding (about 1e-6 in float32, more in bf16): two
   logits closer than that may break a greedy tie differently (`rollout_correction` weighs the log-probs).

The kept log-probs are the engine's own: `processed_logprobs` (after temperature, top-k and top-p,
normalised over the kept tokens) when agents are scored at their sampling temperature, else
`raw_logprobs` (softmax(z), the full vocabulary). `support(a)` says which, so the trainer scores the same.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Sequence

import torch
import torch.distributed
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from learners.rollout.backends.adapter_folders import adapter_root, remove_adapter_root
from learners.rollout.backends.hf import check_context, context_length, encode_prompts, eos_token_ids
from learners.rollout.backends.sampling import logits_processor_fields
from learners.rollout.backends.vllm_engines import (
    EngineSpec,
    acquire_engine,
    base_weights,
    check_temperature,
    check_vllm_arguments,
    kept_process_state,
    push_adapter,
    push_weights,
    release_engine,
    require_vllm,
    whole,
)
from learners.rollout.samples import SampleBatch
from learners.rollout.scoring import Support
from learners.rollout.settings import GenerationSettings

__all__ = ["VLLMBackend"]


class VLLMBackend:
    """Generation on in-process vLLM engines, one per base model.

    Args:
        agents: One causal LM per trained agent (LoRA agents of one base share an engine).
        tokenizers: One tokenizer per agent (LoRA agents of one base: the same one).
        agent_settings: Each agent's sampling settings (`GenerationSettings.for_agent` of its seat); no
            `generation_kwargs` (they are `model.generate` arguments).
        memory_share: On GPU, the share of the device's memory all engines take together (weights and KV
            cache), split evenly between them; the trainer keeps the rest.
        sleep_mode: On GPU, engines sleep between rollouts (`finish_rollout`): weights move to CPU memory and
            the KV cache is freed for training; they wake before the next generation.
        engine_args: More `vllm.LLM` arguments (e.g. `max_model_len`, `kv_cache_memory_bytes`).
        tensor_parallel: Under torchrun, the ranks one engine spans (consecutive groups of this many ranks).
    """

    name = "vllm"
    samples_on_models = False

    def __init__(self, agents: Sequence[PreTrainedModel], tokenizers: Sequence[PreTrainedTokenizerBase],
                 agent_settings: Sequence[GenerationSettings], memory_share: float = 0.4, sleep_mode: bool = False,
                 engine_args: dict[str, Any] | None = None, tensor_parallel: int = 1) -> None:
        require_vllm()
        self.agents, self.tokenizers = list(agents), list(tokenizers)
        self.agent_settings = list(agent_settings)
        self.logprobs_mode = _logprobs_mode(self.agent_settings)
        longest = (engine_args or {}).get("max_model_len")
        for a, (model, settings) in enumerate(zip(self.agents, self.agent_settings, strict=True)):
            _check_agent(a, model, settings)
            check_context(a, settings, *_context(context_length(model), longest))
        if sleep_mode and not torch.cuda.is_available():
            raise ValueError("vllm_sleep_mode frees GPU memory between rollouts and needs a CUDA device; vLLM's "
                             "CPU backend has no sleep mode. Set vllm_sleep_mode=False.")
        self.sleep_mode, self.tensor_parallel = sleep_mode, tensor_parallel
        self.group = tensor_parallel_group(tensor_parallel) if tensor_parallel > 1 else None  # ranks of one engine
        groups: dict[int, list[int]] = {}  # one engine per PEFT base, or per fully fine-tuned agent
        for a, model in enumerate(self.agents):
            groups.setdefault(id(model.peft) if _is_adapter(model) else id(model), []).append(a)
        self.engine_agents = list(groups.values())  # engine e serves these agents
        self.engine_of = {a: e for e, members in enumerate(self.engine_agents) for a in members}
        self.lock = threading.Lock()  # one call at a time per backend: engines are not thread-safe
        self.adapter_root = adapter_root()
        # The adapter folders go with the backend, and at exit too: in /dev/shm they would outlive the process.
        self.remove_adapters = weakref.finalize(self, remove_adapter_root, self.adapter_root)
        self.adapters: dict[int, Any] = {}  # agent -> its current LoRARequest
        specs = [self._spec(members, memory_share / len(groups), engine_args or {}) for members in groups.values()]
        self.engines = [acquire_engine(spec) for spec in specs]
        self.release = weakref.finalize(self, _release, [s.key for s in specs], self.engines)
        self.release.atexit = False  # at exit the engines go down with the process
        for engine, members in zip(self.engines, self.engine_agents):
            if _is_adapter(self.agents[members[0]]):
                base = base_weights(self.agents[members[0]].peft)  # FSDP: each tensor gathered as it goes in
                push_weights(engine, ((k, whole(v)) for k, v in base.items()))
        self.contexts = [engine.llm_engine.model_config.max_model_len for engine in self.engines]  # per engine
        self.shared_base = tuple(self.engines)  # every turn goes through `generate_all`: one call per engine
        self.changed = set(range(len(self.agents)))  # agents whose weights the engines do not hold yet
        self.asleep = False
        self.sync_seconds = 0.0  # spent pushing weights since the last `finish_rollout`
        self.engine_calls = 0  # `generate` calls made on the engines (one per engine per turn)
        self.sync()  # load every agent now: a LoRA config vLLM cannot serve fails here, before training

    # ----- the protocol -----------------------------------------------------------

    def support(self, agent: int) -> Support:
        """The engine's processed log-probs are over the kept tokens at the sampling temperature; raw ones are
        the full vocabulary at temperature 1."""
        s = self.agent_settings[agent]
        if self.logprobs_mode == "raw_logprobs":
            return Support(1.0)
        return Support(s.temperature, s.top_k, s.top_p)

    def follow(self, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """Mark agent a changed whenever `optimizers[a]` steps or loads a state (a resume)."""
        for a, optimizer in enumerate(optimizers):
            mark = _Marker(self.changed, a)
            optimizer.register_step_post_hook(mark)
            optimizer.register_load_state_dict_post_hook(mark)

    def finish_rollout(self) -> dict[str, float]:
        """Put the engines to sleep (sleep mode) and return the seconds spent on weight sync since last time."""
        if self.sleep_mode and not self.asleep:
            with self.lock, kept_process_state():
                for engine in self.engines:
                    engine.sleep(level=1)
            self.asleep = True
        seconds, self.sync_seconds = self.sync_seconds, 0.0
        return {"weight_sync": seconds}

    def generate(self, agent: int, prompts: list[str], num_samples: int, greedy: bool = False) -> SampleBatch:
        """Agent `agent`'s `num_samples` completions of each prompt, in one engine call."""
        return self._generate({agent: prompts}, num_samples, greedy)[agent]

    def generate_all(self, prompts: list[list[str]], num_samples: int, greedy: bool = False) -> list[SampleBatch]:
        """Every agent's completions (`prompts[a]` are agent a's): one `generate` call per engine."""
        out = self._generate(dict(enumerate(prompts)), num_samples, greedy)
        return [out[a] for a in range(len(prompts))]

    def prompt_rows(self, agent: int, prompts: list[str], num_samples: int) -> SampleBatch:
        """`num_samples` rows per prompt with the prompt and no sampled token (the turns the agent waits)."""
        ids, mask, cut = self.encode(agent, prompts)
        S = len(prompts) * num_samples
        empty = torch.zeros(S, 0, dtype=torch.long)
        return SampleBatch(ids.repeat_interleave(num_samples, 0), mask.repeat_interleave(num_samples, 0),
                           empty, empty.clone(), [""] * S, torch.zeros(S, 0), cut.repeat_interleave(num_samples, 0))

    def encode(self, agent: int, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Agent `agent`'s prompts as the HF backend encodes them (`encode_prompts`), cut to fit its engine's
        context (`max_model_len`: the model's, unless `engine_args` lowers it)."""
        return encode_prompts(self.tokenizers[agent], self.agent_settings[agent], prompts,
                              self.contexts[self.engine_of[agent]])

    def score(self, agent: int, batch: SampleBatch) -> torch.Tensor:
        """The engine's log-probs `(S, T)` of the completion tokens of `batch` after its prompts, 0 off the
        mask, under softmax(z) of its raw logits (vLLM scores given tokens without temperature or truncation):
        what the engine holds of agent `agent` now (compare `completion_logprobs(model, batch)`)."""
        from vllm import SamplingParams

        prompts = [batch.prompt_ids[s][batch.prompt_mask[s].bool()].tolist() for s in range(len(batch))]
        completions = [batch.completion_ids[s][batch.completion_mask[s].bool()].tolist() for s in range(len(batch))]
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
        with self.lock:
            self.sync()
            results = self._call(self.engine_of[agent], [(agent, p + c, params) for p, c in zip(prompts, completions)],
                                 count=False)
        out = torch.zeros(batch.completion_ids.shape)
        for s, (p, c, result) in enumerate(zip(prompts, completions, results)):
            steps = result.prompt_logprobs[len(p):]  # entry i scores token i given the tokens before it
            out[s, :len(c)] = torch.tensor([step[token].logprob for step, token in zip(steps, c)])
        return out

    # ----- weights ----------------------------------------------------------------

    def sync(self) -> None:
        """Push every changed agent into its engine (waking sleeping engines first): adapters reloaded under
        their id, full weights in place; one engine call per agent (vLLM loads one adapter per call)."""
        if self.asleep:
            with kept_process_state():
                for engine in self.engines:
                    engine.wake_up()
            self.asleep = False
        if not self.changed:
            return
        start = time.perf_counter()
        for a in sorted(self.changed):
            model, engine = self.agents[a], self.engines[self.engine_of[a]]
            with torch.no_grad():
                if _is_adapter(model):
                    self.adapters[a] = push_adapter(engine, model.peft, model.adapter_name, self.adapter_root,
                                                    self.adapters.get(a))
                else:
                    push_weights(engine, ((k, whole(v)) for k, v in model.state_dict().items()
                                          if not k.startswith("value_head.")))
        self.changed.clear()
        self.sync_seconds += time.perf_counter() - start

    # ----- sampling ---------------------------------------------------------------

    def _generate(self, prompts: dict[int, list[str]], num_samples: int, greedy: bool) -> dict[int, SampleBatch]:
        """Samples of the agents in `prompts` (agent -> its prompts): their requests go to their engines, one
        call per engine, each prompt with its own seed from torch's RNG (under torchrun: this rank's)."""
        encoded = {a: self.encode(a, p) for a, p in prompts.items()}
        seeds = torch.randint(0, 2**31 - 1, (sum(len(p) for p in prompts.values()),)).tolist()
        requests: dict[int, list[tuple[int, int]]] = {}  # engine -> (agent, prompt index) in call order
        for a, p in prompts.items():
            requests.setdefault(self.engine_of[a], []).extend((a, i) for i in range(len(p)))
        seed_of = dict(zip([(a, i) for a, p in prompts.items() for i in range(len(p))], seeds))
        outputs: dict[tuple[int, int], Any] = {}
        with self.lock:
            self.sync()
            for e in range(len(self.engines)) if self.group is not None else list(requests):
                keys = requests.get(e, [])  # a tensor-parallel group calls every engine, even with nothing to ask
                results = self._call(e, [(a, encoded[a][0][i][encoded[a][1][i].bool()].tolist(),
                                          self._params(a, num_samples, greedy, seed_of[(a, i)])) for a, i in keys])
                outputs.update(zip(keys, results))
        return {a: self._samples(a, *encoded[a], [outputs[(a, i)] for i in range(len(p))], num_samples, greedy)
                for a, p in prompts.items()}

    def _call(self, e: int, requests: list[tuple[int, list[int], Any]], count: bool = True) -> list[Any]:
        """Engine `e`'s outputs for `requests` (agent, prompt token ids, `SamplingParams`), in order, in one
        `generate` call. The ranks of a tensor-parallel group send the union of their requests, in rank order
        (the engine spans them and must see the same batch on each), and each keeps its own outputs."""
        from vllm.inputs import TokensPrompt

        mine = slice(0, len(requests))
        if self.group is not None:
            parts: list[Any] = [None] * self.tensor_parallel
            torch.distributed.all_gather_object(parts, requests, group=self.group)
            start = sum(len(part) for part in parts[:torch.distributed.get_rank(self.group)])
            mine, requests = slice(start, start + len(requests)), [r for part in parts for r in part]
        if not requests:
            return []
        lora = [self.adapters[a] for a, _, _ in requests] if requests[0][0] in self.adapters else None
        with kept_process_state():
            results = self.engines[e].generate([TokensPrompt(prompt_token_ids=ids) for _, ids, _ in requests],
                                               [params for _, _, params in requests], lora_request=lora,
                                               use_tqdm=False)
        self.engine_calls += count
        return results[mine]

    def _params(self, agent: int, num_samples: int, greedy: bool, seed: int) -> Any:
        """Agent `agent`'s settings as `SamplingParams` (greedy: one argmax sample, repeated after)."""
        from vllm import SamplingParams

        s = self.agent_settings[agent]
        vocab = self.agents[agent].config.vocab_size
        top_k = -1 if s.top_k is None or s.top_k >= vocab else s.top_k
        return SamplingParams(
            n=1 if greedy else num_samples, temperature=0.0 if greedy else s.temperature,
            top_p=1.0 if greedy else s.top_p, top_k=-1 if greedy else top_k, max_tokens=s.max_new_tokens,
            seed=seed, logprobs=0, stop_token_ids=eos_token_ids(self.agents[agent], self.tokenizers[agent]),
            stop=s.stop_strings or None, include_stop_str_in_output=True, detokenize=bool(s.stop_strings),
            # Stop strings are matched on text with the special tokens in it, as transformers does.
            skip_special_tokens=False, spaces_between_special_tokens=False)

    def _samples(self, agent: int, ids: torch.Tensor, mask: torch.Tensor, cut: torch.Tensor, results: list[Any],
                 num_samples: int, greedy: bool) -> SampleBatch:
        """The `SampleBatch` of one agent's request outputs: the engine's token ids (through the EOS or stop
        string), their mask and log-probs, right-padded; texts decoded as the HF backend does."""
        tok = self.tokenizers[agent]
        rows = []
        for result in results:
            done = sorted(result.outputs, key=lambda c: c.index)
            rows += done * num_samples if greedy else done
        tokens = [list(c.token_ids) for c in rows]
        width = max((len(t) for t in tokens), default=0)
        completion = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
        completion_mask = torch.zeros(len(rows), width, dtype=torch.long)
        logprobs = torch.zeros(len(rows), width)
        for r, (c, t) in enumerate(zip(rows, tokens)):
            completion[r, :len(t)] = torch.tensor(t, dtype=torch.long)
            completion_mask[r, :len(t)] = 1
            logprobs[r, :len(t)] = torch.tensor([step[token].logprob for step, token in zip(c.logprobs, t)])
        return SampleBatch(ids.repeat_interleave(num_samples, 0), mask.repeat_interleave(num_samples, 0),
                           completion, completion_mask, tok.batch_decode(tokens, skip_special_tokens=True), logprobs,
                           cut.repeat_interleave(num_samples, 0))

    def _spec(self, members: list[int], memory_share: float, engine_args: dict[str, Any]) -> EngineSpec:
        """The engine spec of the agents `members` (one base, or one full agent)."""
        model = self.agents[members[0]]
        adapter = _is_adapter(model)
        base = model.peft.get_base_model() if adapter else model
        rank = max(_lora_rank(self.agents[a]) for a in members) if adapter else 0
        return EngineSpec(base.config, self.tokenizers[members[0]], next(base.parameters()).dtype,
                          len(members) if adapter else 0, rank, self.logprobs_mode, memory_share,
                          self.sleep_mode, engine_args, self.tensor_parallel)

    def close(self) -> None:
        """Return the engines to the pool now (else when the backend is garbage-collected); the backend
        cannot generate afterwards; delete the adapter folders."""
        self.release()
        self.remove_adapters()


class _Marker:
    """An optimizer hook that marks one agent changed (a plain callable: hooks must not hold the backend)."""

    def __init__(self, changed: set[int], agent: int) -> None:
        self.changed, self.agent = changed, agent

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.changed.add(self.agent)


def _release(keys: list[str], engines: list[Any]) -> None:
    """Give the engines back to the pool."""
    for key, engine in zip(keys, engines):
        release_engine(key, engine)


def tensor_parallel_group(k: int) -> Any:
    """This rank's group of `k` consecutive torchrun ranks (the ranks vLLM's external launcher puts in one
    tensor-parallel engine); every rank builds every group (collective)."""
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    groups = [torch.distributed.new_group(list(range(first, first + k))) for first in range(0, world, k)]
    return groups[rank // k]


def _is_adapter(model: Any) -> bool:
    """A LoRA agent (`AdapterAgent`): a named adapter on a PEFT model."""
    return hasattr(model, "adapter_name") and hasattr(model, "peft")


def _lora_rank(agent: Any) -> int:
    """The largest rank of an adapter agent's LoRA config: `r`, or a module's own rank in `rank_pattern`."""
    config = agent.peft.peft_config[agent.adapter_name]
    return max([int(config.r), *(int(r) for r in (getattr(config, "rank_pattern", None) or {}).values())])


def _context(model_context: int | None, max_model_len: int | None) -> tuple[int | None, str]:
    """An engine's context (the model's, or `max_model_len` when `vllm_engine_args` lowers it) and its source."""
    if max_model_len is not None and (model_context is None or max_model_len < model_context):
        return max_model_len, "vllm_engine_args' max_model_len"
    return model_context, "the model's config"


def _logprobs_mode(settings: Sequence[GenerationSettings]) -> str:
    """processed_logprobs when every agent is scored at its sampling temperature (`tempered_logprobs`),
    raw_logprobs when every agent is scored at temperature 1."""
    if all(s.logprob_temperature == s.temperature for s in settings):
        return "processed_logprobs"
    if all(s.logprob_temperature == 1.0 for s in settings):
        return "raw_logprobs"
    raise ValueError("the vLLM backend keeps log-probs either at each agent's sampling temperature or at 1 for "
                     f"all agents; got scoring temperatures {[s.logprob_temperature for s in settings]} for "
                     f"sampling temperatures {[s.temperature for s in settings]}.")


def _check_agent(agent: int, model: Any, settings: GenerationSettings) -> None:
    """Refuse what vLLM would sample differently from the HF backend: `generate` arguments, logits
    processors in the model's generation config and temperatures below vLLM's floor."""
    check_vllm_arguments({}, settings.generation_kwargs)
    check_temperature(f"agent {agent}'s temperature", settings.temperature)
    fields = logits_processor_fields(model)
    if fields:
        raise ValueError(f"agent {agent}'s generation config sets {fields}, which the vLLM backend does not "
                         'apply; reset them (model.generation_config) or use generation_backend="hf".')
    if _is_adapter(model):
        config = model.peft.peft_config[model.adapter_name]
        if getattr(config, "use_dora", False) or getattr(config, "modules_to_save", None):
            raise ValueError(f"agent {agent}'s LoRA config uses DoRA or modules_to_save, which vLLM cannot serve; "
                             "use a plain LoRA config or generation_backend=\"hf\".")
