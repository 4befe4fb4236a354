"""The rollout engine shared by every learner: batched, token-exact episodes in text environments.

One call to `RolloutEngine.collect(roots, ...)` plays a batch of B task
instances (environments already reset) to the end:

- per turn, per agent, ONE batched sampling call over every live observation
  (all nodes of the batch, each sampled `num_generations` times), left-padded,
  KV cache on: `learners.sampling.sample_completions` (one prefill per prompt,
  sampled-token log-probs kept for the learners) for plain sampling, or
  `model.generate` when the user passes generate arguments or stop strings;
- the sampled token ids are kept as they came out of `generate`: a
  completion is every token up to and including the first EOS (or up to the
  stop string), never padding and never prompt tokens, so the loss scores
  exactly what was sampled, even when a prompt contains the pad or EOS id;
- joint actions are `aligned` (sample k of every agent forms joint action k)
  or `cross` (the Cartesian product of the agents' samples, tree mode only);
- rollout modes: `tree` (each live node expands into one child per joint
  action; siblings form a group, as in the seed system) or `parallel` (K
  independent copies of each task instance; the live copies of one instance
  at one turn form a group).

Returns are discounted: for joint action j with reward r_j whose child node
has joint actions C(j) (empty when the episode ended),

    R_j = r_j + discount * mean_{c in C(j)} R_c,

which in parallel mode is the usual R_t = r_t + discount * R_{t+1}. In cross
mode, agent a's sample k receives the mean reward/return of the joint actions
that contain it.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StoppingCriteriaList

from comlrl_env.base import TextParallelEnv
from learners.config import GenerationSettings
from learners.sampling import StopRecorder, mask_completions, sample_completions, supports_lean_sampling

__all__ = [
    "GenerationSettings",
    "Rollout",
    "RolloutEngine",
    "SampleBatch",
    "distinct_accelerators",
    "per_agent",
]


@dataclasses.dataclass
class SampleBatch:
    """One agent's samples; row s of every field describes sample s."""

    prompt_ids: torch.Tensor  # (S, P) left-padded prompt ids
    prompt_mask: torch.Tensor  # (S, P) 1 on prompt tokens
    completion_ids: torch.Tensor  # (S, T) sampled ids, right-padded with the pad id
    completion_mask: torch.Tensor  # (S, T) 1 on sampled tokens up to and including EOS
    completions: list[str]  # (S,) decoded completions (special tokens skipped)
    logprobs: torch.Tensor | None = None  # (S, T) log pi of each sampled token when sampled (0 off the mask),
    #                                       under softmax(z / GenerationSettings.logprob_temperature)

    def __len__(self) -> int:
        return len(self.completions)

    def select(self, index: torch.Tensor) -> "SampleBatch":
        """Rows `index`, with columns that are padding in every selected row trimmed away."""
        prompt_mask = self.prompt_mask[index]
        completion_mask = self.completion_mask[index]
        p0 = int((prompt_mask.sum(0) > 0).int().argmax()) if prompt_mask.any() else prompt_mask.shape[1]
        t1 = int(completion_mask.sum(1).max()) if len(index) else 0
        return SampleBatch(
            self.prompt_ids[index][:, p0:],
            prompt_mask[:, p0:],
            self.completion_ids[index][:, :t1],
            completion_mask[:, :t1],
            [self.completions[i] for i in index.tolist()],
            None if self.logprobs is None else self.logprobs[index][:, :t1],
        )

    @staticmethod
    def cat(parts: Sequence["SampleBatch"], pad_id: int) -> "SampleBatch":
        """Concatenate rows, left-padding prompts and right-padding completions to common widths."""
        P = max(p.prompt_ids.shape[1] for p in parts)
        T = max(p.completion_ids.shape[1] for p in parts)

        def left(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
            return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)

        def right(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
            return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

        return SampleBatch(
            torch.cat([left(p.prompt_ids, P, pad_id) for p in parts]),
            torch.cat([left(p.prompt_mask, P, 0) for p in parts]),
            torch.cat([right(p.completion_ids, T, pad_id) for p in parts]),
            torch.cat([right(p.completion_mask, T, 0) for p in parts]),
            [c for p in parts for c in p.completions],
            None if any(p.logprobs is None for p in parts) else torch.cat([right(p.logprobs, T, 0) for p in parts]),
        )


@dataclasses.dataclass
class Rollout:
    """A batch of finished episodes, flattened into samples (rows shared by all agents)."""

    samples: list[SampleBatch]  # (A,) one per agent, each with S rows
    rewards: torch.Tensor  # (A, S) immediate reward of the sample's joint action(s)
    returns: torch.Tensor  # (A, S) discounted return from the sample's joint action(s)
    group: torch.Tensor  # (S,) group id: samples of one group start from the same state
    turn: torch.Tensor  # (S,) turn index of the sample
    task: torch.Tensor  # (S,) index of the task instance within the batch
    episode_returns: torch.Tensor  # (A, B) mean undiscounted return of each task instance's episodes
    next_index: torch.Tensor  # (S,) row of the same episode's next sample, -1 at its end (parallel mode)
    states: list[str]  # (S,) env.state() of the sample's node before acting (joint text)
    invalid_actions: torch.Tensor  # (A,) number of joint actions flagged invalid per agent
    num_joint_actions: int  # env steps taken (one per joint action)
    timings: dict[str, float]  # seconds spent generating and stepping environments
    task_episode_returns: torch.Tensor | None = None  # (A, B) the task's returns when a reward model relabelled

    @property
    def num_samples(self) -> int:
        return int(self.group.numel())


class RolloutEngine:
    """Plays batches of episodes with a team of HF causal-LM agents.

    Args:
        agents: One causal LM per agent (agent i acts as `env.possible_agents[i]`).
        tokenizers: One tokenizer per agent (left padding, pad token set).
        settings: Sampling settings: one value for every agent, or per agent (`GenerationSettings.for_agent`).
    """

    def __init__(
        self,
        agents: Sequence[PreTrainedModel],
        tokenizers: Sequence[PreTrainedTokenizerBase],
        settings: GenerationSettings,
    ) -> None:
        self.agents = list(agents)
        self.tokenizers = list(tokenizers)
        self.settings = settings
        settings.check_per_agent(len(self.agents))
        self.agent_settings = [settings.for_agent(i) for i in range(len(self.agents))]  # each agent's own values
        self.concurrent = distinct_accelerators([m.device for m in self.agents])
        self.shared_base = self._shared_base()  # the PEFT model of LoRA agents that sample together, or None

    # ----- one batched generate ------------------------------------------------

    def generate_turn(self, prompts: list[list[str]], num_samples: int, greedy: bool = False) -> list[SampleBatch]:
        """Every agent's samples for one turn, `num_samples` per prompt; `prompts[a]` are agent a's.

        LoRA agents on one shared base (`batch_adapters`) sample in ONE batched call over all agents'
        prompts, each row through its own adapter (PEFT's mixed-adapter batches): one decode loop instead
        of one per agent. Other agents make one call each, in threads when they sit on distinct accelerators.
        """
        if self.shared_base is None:
            return per_agent(lambda a: self.generate(a, prompts[a], num_samples, greedy), len(self.agents),
                             self.concurrent)
        cfg, tok = self.agent_settings[0], self.tokenizers[0]  # equal for every agent here (`_shared_base`)
        ids, mask = self._encode(0, [p for agent_prompts in prompts for p in agent_prompts])
        names = [agent.adapter_name for agent, agent_prompts in zip(self.agents, prompts) for _ in agent_prompts]
        eos_ids = self._eos_ids(0)
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
            batches.append(self._samples(0, ids[rows, first:], mask[rows, first:], completion[samples],
                                         logprobs[samples], num_samples))
            start = rows.stop
        return batches

    def generate(self, agent: int, prompts: list[str], num_samples: int, greedy: bool = False) -> SampleBatch:
        """Sample `num_samples` completions for each prompt in one call (rows prompt-major)."""
        cfg, tok = self.agent_settings[agent], self.tokenizers[agent]
        ids, mask = self._encode(agent, prompts)
        eos_ids = self._eos_ids(agent)
        if self._lean(agent):
            completion, logprobs = sample_completions(
                self.agents[agent], ids, mask, num_samples, cfg.max_new_tokens, eos_ids, tok.pad_token_id,
                temperature=None if greedy else cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                logprob_temperature=cfg.logprob_temperature)
            return self._samples(agent, ids, mask, completion, logprobs, num_samples)
        completion, sampled = self._hf_generate(agent, ids, mask, num_samples, greedy, eos_ids)
        if sampled is None:  # beam search: read the ids
            completion_mask = mask_completions(completion, eos_ids, tok.pad_token_id, bool(cfg.stop_strings))
        else:
            positions = torch.arange(completion.shape[1], device=completion.device)
            completion_mask = (positions < sampled[:, None].to(completion.device)).long()
        return self._samples(agent, ids, mask, completion, None, num_samples, completion_mask)

    def _encode(self, agent: int, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded token ids and attention mask of `prompts` under agent `agent`'s tokenizer, on its device."""
        tok, cfg = self.tokenizers[agent], self.agent_settings[agent]
        if cfg.use_chat_template:
            texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
                     for p in prompts]
        else:
            texts = prompts
        enc = tok(
            texts,
            return_tensors="pt",
            padding=True,
            padding_side="left",
            add_special_tokens=not cfg.use_chat_template,
            truncation=cfg.max_prompt_length is not None,
            max_length=cfg.max_prompt_length,
        )
        device = self.agents[agent].device
        return enc["input_ids"].to(device), enc["attention_mask"].to(device)

    def _samples(self, agent: int, ids: torch.Tensor, mask: torch.Tensor, completion: torch.Tensor,
                 logprobs: torch.Tensor | None, num_samples: int,
                 completion_mask: torch.Tensor | None = None) -> SampleBatch:
        """The `SampleBatch` of sampled `completion` ids (with their log-probs, when the sampling loop kept
        them): the mask covers each row's tokens through its first EOS (or `completion_mask`, when given),
        trailing columns no row reached are dropped, and the texts are decoded."""
        tok = self.tokenizers[agent]
        if completion_mask is None:
            completion_mask = mask_completions(completion, self._eos_ids(agent), tok.pad_token_id, stop_strings=False)
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
        )

    def _shared_base(self) -> Any:
        """The PEFT model all agents are adapters of, when they can sample in one batch: `batch_adapters`,
        two or more LoRA agents (`learners.lora.AdapterAgent`) on one base, one tokenizer, plain sampling, and
        the same settings for every agent (else each agent samples on its own)."""
        peft = {id(getattr(a, "peft", None)) for a in self.agents}
        if (not self.settings.batch_adapters or len(self.agents) < 2 or len(peft) != 1
                or not all(hasattr(a, "adapter_name") for a in self.agents)
                or any(s != self.agent_settings[0] for s in self.agent_settings)
                or len({id(t) for t in self.tokenizers}) != 1 or not self._lean(0)):
            return None
        return self.agents[0].peft

    def _lean(self, agent: int) -> bool:
        """Plain sampling goes through `sample_completions`; user generate arguments and stop strings
        go through `model.generate`."""
        settings = self.agent_settings[agent]
        return not settings.generation_kwargs and not settings.stop_strings and supports_lean_sampling(self.agents[agent])

    def _hf_generate(self, agent: int, ids: torch.Tensor, mask: torch.Tensor, num_samples: int, greedy: bool,
                     eos_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`model.generate`'s new tokens `(S, T)`, and each row's number of sampled tokens `(S,)`.

        generate pads a row once it stops, with the pad id, which may also be a token the model can sample
        (pad == EOS is common). So the lengths are recorded while generating: `StopRecorder` applies the
        EOS ids (the user's `eos_token_id` override included), the stop strings and the user's
        `stopping_criteria`, and notes the step at which each row stopped. Beam search reorders rows,
        so it falls back to reading the ids (`mask_completions`): lengths None.
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
            **sampling,
        )
        kwargs.update(cfg.generation_kwargs)  # the user's generate arguments win (e.g. beam search)
        recorder = None
        if kwargs.get("num_beams", model.generation_config.num_beams or 1) > 1:
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
        return completion, None if recorder is None else recorder.lengths(completion.shape[1])

    def _eos_ids(self, agent: int) -> list[int]:
        ids = self.agents[agent].generation_config.eos_token_id
        ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
        eos = self.tokenizers[agent].eos_token_id
        return sorted(set(ids) | ({eos} if eos is not None else set()))

    # ----- whole episodes --------------------------------------------------------

    def collect(
        self,
        roots: Sequence[TextParallelEnv],
        num_generations: int,
        rollout_mode: str = "tree",
        joint_mode: str = "aligned",
        discount: float = 1.0,
        greedy: bool = False,
    ) -> Rollout:
        """Play every root environment (already reset) to the end and return the flattened `Rollout`."""
        if joint_mode == "cross" and rollout_mode != "tree":
            raise ValueError("joint_mode='cross' needs rollout_mode='tree' (parallel copies sample one action each).")
        K, A = num_generations, len(self.agents)
        agent_ids = list(roots[0].possible_agents)
        if len(agent_ids) != A:
            raise ValueError(f"the environment has {len(agent_ids)} agents but {A} models were given.")
        timings = {"generate": 0.0, "env": 0.0}
        if rollout_mode == "tree":
            nodes, per_node, node_task = list(roots), K, list(range(len(roots)))
        else:
            nodes = [root if k == K - 1 else root.clone() for root in roots for k in range(K)]
            per_node, node_task = 1, [b for b in range(len(roots)) for _ in range(K)]
        observations = [env.observations for env in nodes]
        levels: list[dict[str, Any]] = []
        parts: list[list[SampleBatch]] = [[] for _ in range(A)]
        group_offset = 0
        invalid = torch.zeros(A)
        joint_count = 0
        turn = 0
        while nodes:
            states = [env.state() for env in nodes]  # joint text before acting (centralized critics)
            t0 = time.perf_counter()
            batches = self.generate_turn([[obs[agent_ids[a]] for obs in observations] for a in range(A)], per_node,
                                         greedy)
            timings["generate"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            if joint_mode == "cross" and A > 1:
                combos = list(itertools.product(range(per_node), repeat=A))
            else:
                combos = [(k,) * A for k in range(per_node)]
            joint_node, joint_pick, joint_reward, child_of_joint = [], [], [], []
            next_nodes, next_obs, next_task = [], [], []
            for n, env in enumerate(nodes):
                for c, combo in enumerate(combos):
                    child = env if c == len(combos) - 1 else env.clone()
                    actions = {agent_ids[a]: batches[a].completions[n * per_node + combo[a]] for a in range(A)}
                    obs, rew, term, trunc, infos = child.step(actions)
                    joint_node.append(n)
                    joint_pick.append(combo)
                    joint_reward.append([rew[agent_ids[a]] for a in range(A)])
                    for a in range(A):
                        invalid[a] += "invalid_action" in infos.get(agent_ids[a], {})
                    if any(term.values()) or any(trunc.values()) or not child.agents:
                        child_of_joint.append(-1)
                    else:
                        child_of_joint.append(len(next_nodes))
                        next_nodes.append(child)
                        next_obs.append(obs)
                        next_task.append(node_task[n])
            timings["env"] += time.perf_counter() - t0
            joint_count += len(joint_node)
            num_groups = len(nodes) if rollout_mode == "tree" else len(roots)
            group_of_node = torch.arange(len(nodes)) if rollout_mode == "tree" else torch.tensor(node_task)
            levels.append(dict(
                state=[env_state for env_state in states],
                node=torch.tensor(joint_node),
                pick=torch.tensor(joint_pick),  # (J, A) sample index within the node, per agent
                reward=torch.tensor(joint_reward, dtype=torch.float32),  # (J, A)
                child=torch.tensor(child_of_joint),
                num_nodes=len(nodes),
                task=torch.tensor(node_task),
                group=group_of_node + group_offset,
            ))
            group_offset += num_groups
            for a in range(A):
                parts[a].append(batches[a])
            nodes, observations, node_task = next_nodes, next_obs, next_task
            turn += 1
        return self._assemble(levels, parts, per_node, discount, len(roots), invalid, joint_count, timings)

    def _assemble(
        self,
        levels: list[dict[str, Any]],
        parts: list[list[SampleBatch]],
        per_node: int,
        discount: float,
        num_tasks: int,
        invalid: torch.Tensor,
        joint_count: int,
        timings: dict[str, float],
    ) -> Rollout:
        A = len(parts)
        joint_returns = _backup(levels, discount)
        # Per-agent sample values: mean over the joint actions that contain the sample.
        rewards, returns, groups, turns, tasks, next_index, states = [], [], [], [], [], [], []
        offset = 0
        for t, lv in enumerate(levels):
            S = lv["num_nodes"] * per_node
            # In parallel mode (one sample per node) a joint action's child node is the episode's next row.
            nxt = torch.full((S,), -1)
            if per_node == 1:
                has_child = lv["child"] >= 0
                nxt[lv["node"][has_child]] = offset + S + lv["child"][has_child]
            next_index.append(nxt)
            offset += S
            states += [text for text in lv["state"] for _ in range(per_node)]
            rew, ret = torch.zeros(A, S), torch.zeros(A, S)
            for a in range(A):
                slot = lv["node"] * per_node + lv["pick"][:, a]
                count = torch.zeros(S).index_add_(0, slot, torch.ones(len(slot)))
                rew[a] = torch.zeros(S).index_add_(0, slot, lv["reward"][:, a]) / count
                ret[a] = torch.zeros(S).index_add_(0, slot, joint_returns[t][:, a]) / count
            rewards.append(rew)
            returns.append(ret)
            groups.append(lv["group"].repeat_interleave(per_node))
            turns.append(torch.full((S,), t))
            tasks.append(lv["task"].repeat_interleave(per_node))
        # Episode return of task b: the mean undiscounted return over its root joint actions.
        undiscounted = _backup(levels, 1.0)[0]
        root_task = levels[0]["task"][levels[0]["node"]]
        ep = torch.zeros(num_tasks, A).index_add_(0, root_task, undiscounted)
        ep /= torch.zeros(num_tasks).index_add_(0, root_task, torch.ones(len(root_task)))[:, None]
        samples = [SampleBatch.cat(parts[a], self.tokenizers[a].pad_token_id) for a in range(A)]
        return Rollout(
            samples=samples,
            rewards=torch.cat(rewards, 1),
            returns=torch.cat(returns, 1),
            group=torch.cat(groups),
            turn=torch.cat(turns),
            task=torch.cat(tasks),
            episode_returns=ep.T.contiguous(),
            next_index=torch.cat(next_index),
            states=states,
            invalid_actions=invalid,
            num_joint_actions=joint_count,
            timings=timings,
        )


def _backup(levels: list[dict[str, Any]], discount: float) -> list[torch.Tensor]:
    """Joint returns per turn, `(J_t, A)`: R_j = r_j + discount * mean of R over the child node's joint actions."""
    out: list[torch.Tensor] = [torch.empty(0)] * len(levels)
    child_node_mean = None
    for t in reversed(range(len(levels))):
        lv = levels[t]
        R = lv["reward"].clone()
        if child_node_mean is not None:
            has_child = lv["child"] >= 0
            R[has_child] += discount * child_node_mean[lv["child"][has_child]]
        out[t] = R
        sums = torch.zeros(lv["num_nodes"], R.shape[1]).index_add_(0, lv["node"], R)
        counts = torch.zeros(lv["num_nodes"]).index_add_(0, lv["node"], torch.ones(len(R)))
        child_node_mean = sums / counts[:, None]
    return out


def distinct_accelerators(devices: Sequence[torch.device]) -> bool:
    """True when every model sits on its own accelerator, so per-agent work can overlap in threads.

    CPU models never run concurrently: they would share the CPU's random generator (sampling
    order would depend on thread timing) and its cores.
    """
    devices = [torch.device(d) for d in devices]
    return len(devices) > 1 and all(d.type != "cpu" for d in devices) and len(set(devices)) == len(devices)


def per_agent(fn: Any, num_agents: int, concurrent: bool) -> list[Any]:
    """`[fn(0), ..., fn(A - 1)]`, in threads (one per agent) when `concurrent`; results in agent order."""
    if not concurrent:
        return [fn(a) for a in range(num_agents)]
    with ThreadPoolExecutor(max_workers=num_agents) as pool:
        return list(pool.map(fn, range(num_agents)))
