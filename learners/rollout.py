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
- turn-taking: only the agents an env names in `to_move()` generate at a node;
  the others' rows hold their prompt and no sampled token (`Rollout.acted` is
  False there) and learners never train on them;
- fixed seats (`comlrl_env.policies.FixedPolicy`: bots, scripted players,
  `learners.Frozen` models) act where they are to move and are never trained:
  the `Rollout`'s per-agent fields cover the trained agents only;
- rollout modes: `tree` (each live node expands into one child per joint
  action; siblings form a group, as in the seed system) or `parallel` (K
  independent copies of each task instance; the live copies of one instance
  at one turn form a group).

Returns are discounted: for joint action j with reward r_j whose child node
has joint actions C(j) (empty when the episode ended),

    R_j = r_j + discount * mean_{c in C(j)} R_c,

which in parallel mode is the usual R_t = r_t + discount * R_{t+1}. In cross
mode, agent a's sample k receives the mean reward/return of the joint actions
that contain it. The `Rollout` also keeps the joint table itself (`joint_rows`,
`joint_returns`, `joint_fixed`) for MAGRPO's counterfactual advantages.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StoppingCriteriaList

from comlrl_env.base import TextParallelEnv
from comlrl_env.policies import FixedPolicy
from learners.agents import distinct_accelerators, per_agent
from learners.config import GenerationSettings
from learners.samples import Rollout, SampleBatch
from learners.sampling import StopRecorder, mask_completions, sample_completions, supports_lean_sampling

__all__ = [
    "GenerationSettings",
    "Rollout",
    "RolloutEngine",
    "SampleBatch",
    "distinct_accelerators",
    "joint_combinations",
    "per_agent",
]


class RolloutEngine:
    """Plays batches of episodes with a team of HF causal-LM agents.

    Args:
        agents: One causal LM per trained agent; agent i acts in the i-th seat of `env.possible_agents` that
            `fixed` does not hold.
        tokenizers: One tokenizer per agent (left padding, pad token set).
        settings: Sampling settings: one value for every seat, or one per seat (`GenerationSettings.for_agent`).
        fixed: Seats (indices into `env.possible_agents`) played by fixed policies
            (`comlrl_env.policies.FixedPolicy`): asked to act where their seat is to move, never trained.
    """

    def __init__(
        self,
        agents: Sequence[PreTrainedModel],
        tokenizers: Sequence[PreTrainedTokenizerBase],
        settings: GenerationSettings,
        fixed: dict[int, FixedPolicy] | None = None,
    ) -> None:
        self.agents = list(agents)
        self.tokenizers = list(tokenizers)
        self.settings = settings
        self.fixed = dict(fixed or {})
        seats = [s for s in range(len(self.agents) + len(self.fixed)) if s not in self.fixed]
        settings.check_per_agent(len(seats) + len(self.fixed))
        self.agent_settings = [settings.for_agent(s) for s in seats]  # each trained agent's seat's values
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
        seats = self.trained_seats(len(agent_ids))
        timings = {"generate": 0.0, "env": 0.0}
        if rollout_mode == "tree":
            nodes, per_node, node_task = list(roots), K, list(range(len(roots)))
        else:
            nodes = [root if k == K - 1 else root.clone() for root in roots for k in range(K)]
            per_node, node_task = 1, [b for b in range(len(roots)) for _ in range(K)]
        observations = [env.observations for env in nodes]
        levels: list[dict[str, Any]] = []
        parts: list[list[SampleBatch]] = [[] for _ in range(A)]
        joint_actions: list[list[str]] = []
        group_offset = 0
        invalid = torch.zeros(A)
        joint_count = 0
        while nodes:
            states = [env.state() for env in nodes]  # joint text before acting (centralized critics)
            movers = [[agent in moving for agent in agent_ids] for moving in (set(env.to_move()) for env in nodes)]
            t0 = time.perf_counter()
            batches, texts = self.act_turn(nodes, observations, movers, per_node, greedy)
            timings["generate"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            joint_node, joint_pick, joint_reward, child_of_joint, joint_fixed = [], [], [], [], []
            next_nodes, next_obs, next_task = [], [], []
            for n, env in enumerate(nodes):
                combos = joint_combinations(per_node, movers[n], joint_mode)
                for c, combo in enumerate(combos):
                    child = env if c == len(combos) - 1 else env.clone()
                    actions = {agent: texts[s][n * per_node + combo[s]] for s, agent in enumerate(agent_ids)}
                    obs, rew, term, trunc, infos = child.step(actions)
                    joint_node.append(n)
                    joint_pick.append([combo[s] for s in seats])
                    joint_fixed.append(sum(combo[s] * per_node ** r for r, s in enumerate(self.fixed) if movers[n][s]))
                    joint_reward.append([rew[agent_ids[s]] for s in seats])
                    for a, s in enumerate(seats):
                        invalid[a] += "invalid_action" in infos.get(agent_ids[s], {})
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
                state=states,
                node=torch.tensor(joint_node),
                pick=torch.tensor(joint_pick, dtype=torch.long).reshape(len(joint_node), A),  # (J, A) sample per agent
                reward=torch.tensor(joint_reward, dtype=torch.float32).reshape(len(joint_node), A),  # (J, A)
                child=torch.tensor(child_of_joint),
                fixed=torch.tensor(joint_fixed, dtype=torch.long),  # (J,) the moving fixed seats' samples, one number
                num_nodes=len(nodes),
                task=torch.tensor(node_task),
                group=group_of_node + group_offset,
                acted=torch.tensor([[movers[n][s] for n in range(len(nodes))] for s in seats],
                                   dtype=torch.bool).reshape(A, len(nodes)).repeat_interleave(per_node, 1),
            ))
            joint_actions += [[texts[s][row] for s in range(len(agent_ids))] for row in range(len(nodes) * per_node)]
            group_offset += num_groups
            for a in range(A):
                parts[a].append(batches[a])
            nodes, observations, node_task = next_nodes, next_obs, next_task
        rollout = self._assemble(levels, parts, per_node, discount, len(roots), invalid, joint_count, timings)
        rollout.joint_actions = joint_actions
        return rollout

    def trained_seats(self, num_seats: int) -> list[int]:
        """The seats (indices into `env.possible_agents`) the trained agents play, in agent order."""
        seats = [s for s in range(num_seats) if s not in self.fixed]
        if len(seats) != len(self.agents) or any(s >= num_seats for s in self.fixed):
            raise ValueError(f"the environment has {num_seats} agents but {len(self.agents)} models and "
                             f"{len(self.fixed)} fixed policies were given.")
        return seats

    def act_turn(self, nodes: Sequence[TextParallelEnv], observations: list[dict[str, str]],
                 movers: list[list[bool]], per_node: int, greedy: bool) -> tuple[list[SampleBatch], list[list[str]]]:
        """Every seat's `per_node` actions at every node for one turn.

        Returns each trained agent's `SampleBatch` (rows node-major: node n's sample k at n * per_node + k)
        and every seat's action texts in the same row order. Only seats that are to move (`movers[n][s]`)
        act: trained agents sample in one batched call over the nodes where they move, fixed policies are
        asked there; elsewhere the text is "" and the agent's row holds its prompt and no sampled token.
        """
        agent_ids = list(nodes[0].possible_agents)
        seats = self.trained_seats(len(agent_ids))
        moving = [[n for n in range(len(nodes)) if movers[n][s]] for s in range(len(agent_ids))]
        prompts = [[observations[n][agent_ids[s]] for n in moving[s]] for s in seats]
        if all(prompts):
            generated = self.generate_turn(prompts, per_node, greedy)
        else:
            generated = [self.generate(a, p, per_node, greedy) if p else None for a, p in enumerate(prompts)]
        batches = [self._with_idle_rows(a, generated[a], moving[s], [observations[n][agent_ids[s]] for n in
                                        range(len(nodes))], per_node) for a, s in enumerate(seats)]
        texts: list[list[str]] = []
        for s, agent in enumerate(agent_ids):
            row_texts = [""] * (len(nodes) * per_node)
            if s in self.fixed:
                acted = self.fixed[s].act([nodes[n] for n in moving[s]], agent, per_node) if moving[s] else []
            else:
                acted = generated[seats.index(s)].completions if moving[s] else []
            for i, n in enumerate(moving[s]):
                row_texts[n * per_node:(n + 1) * per_node] = acted[i * per_node:(i + 1) * per_node]
            texts.append(row_texts)
        return batches, texts

    def _with_idle_rows(self, agent: int, batch: SampleBatch | None, moving: list[int], prompts: list[str],
                        per_node: int) -> SampleBatch:
        """Agent `agent`'s rows for every node: `batch` (its samples where it moved, nodes `moving`) with,
        at the other nodes, `per_node` rows of the node's prompt and no sampled token (critics still read
        the prompt), in node order."""
        acting = set(moving)
        idle = [n for n in range(len(prompts)) if n not in acting]
        if not idle:
            return batch
        ids, mask = self._encode(agent, [prompts[n] for n in idle])
        S = len(idle) * per_node
        empty = torch.zeros(S, 0, dtype=torch.long)
        lean = batch.logprobs is not None if batch is not None else self._lean(agent)
        rest = SampleBatch(ids.repeat_interleave(per_node, 0).cpu(), mask.repeat_interleave(per_node, 0).cpu(),
                           empty, empty.clone(), [""] * S, torch.zeros(S, 0) if lean else None)
        if batch is None:
            return rest
        merged = SampleBatch.cat([batch, rest], self.tokenizers[agent].pad_token_id)
        position = {n: i for i, n in enumerate(moving + idle)}  # node -> its block in `merged`
        order = torch.tensor([position[n] * per_node + k for n in range(len(prompts)) for k in range(per_node)])
        return merged.select(order)

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
        rewards, returns, groups, turns, tasks, next_index, states, joint_rows = [], [], [], [], [], [], [], []
        offset = 0
        for t, lv in enumerate(levels):
            S = lv["num_nodes"] * per_node
            # In parallel mode (one sample per node) a joint action's child node is the episode's next row.
            nxt = torch.full((S,), -1)
            if per_node == 1:
                has_child = lv["child"] >= 0
                nxt[lv["node"][has_child]] = offset + S + lv["child"][has_child]
            next_index.append(nxt)
            joint_rows.append(offset + lv["node"][:, None] * per_node + lv["pick"])
            offset += S
            states += [text for text in lv["state"] for _ in range(per_node)]
            rew, ret = torch.zeros(A, S), torch.zeros(A, S)
            node_of_row = torch.arange(S) // per_node
            node_count = torch.zeros(lv["num_nodes"]).index_add_(0, lv["node"], torch.ones(len(lv["node"])))
            for a in range(A):
                slot = lv["node"] * per_node + lv["pick"][:, a]
                count = torch.zeros(S).index_add_(0, slot, torch.ones(len(slot)))
                for out, value in ((rew, lv["reward"][:, a]), (ret, joint_returns[t][:, a])):
                    # A row no joint action picked (an agent not to move, in cross mode): the node's mean.
                    node_mean = torch.zeros(lv["num_nodes"]).index_add_(0, lv["node"], value) / node_count
                    row_sum = torch.zeros(S).index_add_(0, slot, value)
                    out[a] = torch.where(count > 0, row_sum / count.clamp(min=1), node_mean[node_of_row])
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
            acted=torch.cat([lv["acted"] for lv in levels], 1),
            next_index=torch.cat(next_index),
            states=states,
            invalid_actions=invalid,
            num_joint_actions=joint_count,
            timings=timings,
            joint_rows=torch.cat(joint_rows),
            joint_returns=torch.cat(joint_returns),
            joint_fixed=torch.cat([lv["fixed"] for lv in levels]),
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


def joint_combinations(per_node: int, movers: Sequence[bool], joint_mode: str) -> list[tuple[int, ...]]:
    """The joint actions played at one node, as one sample index per seat.

    aligned: sample k of every seat forms joint action k (K joint actions). cross: every combination of the
    samples of the seats that are to move (K^movers joint actions); a seat not to move contributes its
    sample 0 (its text is ignored). Example: K = 2, movers [True, False, True], cross ->
    (0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1).
    """
    if joint_mode != "cross" or sum(movers) < 2:
        return [(k,) * len(movers) for k in range(per_node)]
    choices = [range(per_node) if moves else (0,) for moves in movers]
    return list(itertools.product(*choices))
