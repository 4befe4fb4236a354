"""The rollout engine shared by every learner: batched, token-exact episodes in text environments.

One call to `RolloutEngine.collect(roots, ...)` plays a batch of B task
instances (environments already reset) to the end:

- per turn, per agent, ONE batched sampling call over every live observation
  (all nodes of the batch, each sampled `num_generations` times), made by a
  generation backend (`learners.rollout.backends`; `HFBackend` by default:
  our lean sampling loop with sampled-token log-probs, or `model.generate`
  when the user passes generate arguments or stop strings);
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
  action; siblings form a group, as in CoMLRL 1.4.3) or `parallel` (K
  independent copies of each task instance; the live copies of one instance
  at one turn form a group).

Returns are discounted: for joint action j with reward r_j whose child node
has joint actions C(j) (empty when the episode ended),

    R_j = r_j + discount * mean_{c in C(j)} R_c,

which in parallel mode is the usual R_t = r_t + discount * R_{t+1}. In cross
mode, agent a's sample k receives the mean reward/return of the joint actions
that contain it. The `Rollout` also keeps the joint table itself (`joint_rows`,
`joint_returns`, `joint_fixed`) for MAGRPO's counterfactual advantages, and, for tasks that report
`infos[agent]["used_partner_info"]`, one info-flow row per such step (`Rollout.episodes`, built by
`comlrl_env.info_flow.episode_record`: what each agent sent, answered, and whether it used its partner's part).
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from comlrl_env.base import TextParallelEnv
from comlrl_env.info_flow import episode_record
from comlrl_env.policies import FixedPolicy
from learners.parallel.placement import distinct_accelerators, per_agent
from learners.rollout.backends.hf import HFBackend
from learners.rollout.backends.protocol import GenerationBackend
from learners.rollout.fixed_seats import check_fixed_actions, fixed_act
from learners.rollout.samples import Rollout, SampleBatch
from learners.rollout.settings import GenerationSettings

__all__ = ["RolloutEngine", "check_rollout_size", "joint_combinations", "rollout_samples"]


class RolloutEngine:
    """Plays batches of episodes with a team of HF causal-LM agents.

    Args:
        agents: One causal LM per trained agent; agent i acts in the i-th seat of `env.possible_agents` that
            `fixed` does not hold.
        tokenizers: One tokenizer per agent (left padding, pad token set).
        settings: Sampling settings: one value for every seat, or one per seat (`GenerationSettings.for_agent`).
        fixed: Seats (indices into `env.possible_agents`) played by fixed policies
            (`comlrl_env.policies.FixedPolicy`): asked to act where their seat is to move, never trained.
        backend: Where the agents' samples come from (`learners.rollout.backends`); default `HFBackend`.
    """

    def __init__(
        self,
        agents: Sequence[PreTrainedModel],
        tokenizers: Sequence[PreTrainedTokenizerBase],
        settings: GenerationSettings,
        fixed: dict[int, FixedPolicy] | None = None,
        backend: GenerationBackend | None = None,
    ) -> None:
        self.agents = list(agents)
        self.tokenizers = list(tokenizers)
        self.settings = settings
        self.fixed = dict(fixed or {})
        seats = [s for s in range(len(self.agents) + len(self.fixed)) if s not in self.fixed]
        settings.check_per_agent(len(seats) + len(self.fixed))
        self.agent_settings = [settings.for_agent(s) for s in seats]  # each trained agent's seat's values
        self.concurrent = distinct_accelerators([m.device for m in self.agents])
        self.backend = backend if backend is not None else HFBackend(self.agents, self.tokenizers,
                                                                     self.agent_settings, settings.batch_adapters)
        self.shared_base = self.backend.shared_base  # what the whole team samples through in one call, or None

    # ----- one turn's samples, through the backend -------------------------------

    def generate_turn(self, prompts: list[list[str]], num_samples: int, greedy: bool = False) -> list[SampleBatch]:
        """Every agent's samples for one turn, `num_samples` per prompt; `prompts[a]` are agent a's.

        One backend call for the whole team when the backend can (LoRA agents of one base); else one call
        per agent, in threads when the agents sit on distinct accelerators.
        """
        if self.shared_base is not None:
            return self.backend.generate_all(prompts, num_samples, greedy)
        return per_agent(lambda a: self.generate(a, prompts[a], num_samples, greedy), len(self.agents),
                         self.concurrent)

    def generate(self, agent: int, prompts: list[str], num_samples: int, greedy: bool = False) -> SampleBatch:
        """Sample `num_samples` completions for each prompt in one call (rows prompt-major)."""
        return self.backend.generate(agent, prompts, num_samples, greedy)

    def prompt_rows(self, agent: int, prompts: list[str], num_samples: int) -> SampleBatch:
        """`num_samples` rows per prompt with agent `agent`'s prompt and no sampled token (turns it waits)."""
        return self.backend.prompt_rows(agent, prompts, num_samples)

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
        paid = [dict.fromkeys(agent_ids, 0.0) for _ in nodes]  # undiscounted reward on the path to each node
        episodes: list[dict[str, Any]] = []  # info-flow rows (tasks that report used_partner_info)
        while nodes:
            states = [env.state() for env in nodes]  # joint text before acting (centralized critics)
            movers = [[agent in moving for agent in agent_ids] for moving in (set(env.to_move()) for env in nodes)]
            t0 = time.perf_counter()
            batches, texts = self.act_turn(nodes, observations, movers, per_node, greedy)
            timings["generate"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            joint_node, joint_pick, joint_reward, child_of_joint, joint_fixed = [], [], [], [], []
            next_nodes, next_obs, next_task, next_paid = [], [], [], []
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
                    path = {agent: paid[n][agent] + rew.get(agent, 0.0) for agent in agent_ids}
                    record = episode_record(infos, actions, path)
                    if record is not None:
                        episodes.append({"task": node_task[n], "turn": len(levels), **record})
                    if any(term.values()) or any(trunc.values()) or not child.agents:
                        child_of_joint.append(-1)
                    else:
                        child_of_joint.append(len(next_nodes))
                        next_nodes.append(child)
                        next_obs.append(obs)
                        next_task.append(node_task[n])
                        next_paid.append(path)
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
            nodes, observations, node_task, paid = next_nodes, next_obs, next_task, next_paid
        rollout = self._assemble(levels, parts, per_node, discount, len(roots), invalid, joint_count, timings)
        rollout.joint_actions = joint_actions
        rollout.episodes = episodes or None
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
                acted = fixed_act(self.fixed[s], [nodes[n] for n in moving[s]], agent, per_node) if moving[s] else []
                check_fixed_actions(self.fixed[s], agent, acted, len(moving[s]), per_node)
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
        rest = self.prompt_rows(agent, [prompts[n] for n in idle], per_node)
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


def rollout_samples(num_tasks: int, num_generations: int, movers: int, num_turns: int, rollout_mode: str = "tree",
                    joint_mode: str = "aligned") -> int:
    """The most completions one rollout samples: B = `num_tasks` instances, K = `num_generations`, m = `movers`
    seats moving per turn, up to T = `num_turns` turns.

        parallel: B K m T                      (K copies of each instance, m samples per turn each)
        tree:     B m K (1 + b + ... + b^(T-1)),  b = K (aligned) or K^m (cross): every node samples K per
                  mover and has b children.
    Example: B = 2, K = 2, m = 1, T = 9 (tic_tac_toe): parallel 36, tree 2044.
    """
    per_node = movers * num_generations
    if rollout_mode == "parallel":
        return num_tasks * per_node * num_turns
    branching = num_generations ** (movers if joint_mode == "cross" else 1)
    return num_tasks * per_node * sum(branching ** t for t in range(num_turns))


def check_rollout_size(env: TextParallelEnv, seed: int, num_tasks: int, num_generations: int, rollout_mode: str,
                       joint_mode: str, limit: int | None) -> int:
    """`rollout_samples` for `env` (the seats that move at its first turn, after a reset with `seed`, for up to
    its `num_turns` turns); a ValueError naming the settings that lower it when it is over `limit`."""
    env.reset(seed=seed)
    movers = len(env.to_move())
    cost = rollout_samples(num_tasks, num_generations, movers, env.num_turns, rollout_mode, joint_mode)
    if limit is not None and cost > limit:
        raise ValueError(
            f"one rollout would sample up to {cost} completions (rollout_buffer_size={num_tasks} x {movers} moving "
            f"seat(s) x num_generations={num_generations} over up to {env.num_turns} turns, rollout_mode="
            f"{rollout_mode!r}, joint_mode={joint_mode!r}), over max_rollout_samples={limit}. Lower it with "
            "rollout_mode='parallel' (linear in the turns), a smaller num_generations, fewer turns (num_turns on "
            "the env) or a smaller rollout_buffer_size; or raise max_rollout_samples.")
    return cost
