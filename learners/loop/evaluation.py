"""Evaluation: a learner's agents play held-out episodes with one sample per agent per turn.

Always under the task reward (never a learner's `relabel`), on a fixed draw of task instances: the first
`eval_num_samples` of a shuffle seeded by the run's seed (`epoch_order(env, -1)`; every instance once when
`eval_num_samples` is the eval env's size), so every evaluation of a run plays the same instances, and never
just the first ones, whose order a task may have made uneven. `Learner.evaluate` calls this.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch
from tqdm.auto import tqdm

from comlrl_env import TextParallelEnv
from comlrl_env.info_flow import partner_info_chance, used_partner_info_rate
from learners.loop.data import reset_roots
from learners.loop.logger import RunLogger
from learners.parallel.distributed import Distributed
from learners.rollout.engine import RolloutEngine

__all__ = ["Evaluated", "evaluate"]


class Evaluated(Protocol):
    """What evaluation reads of a learner (`learners.Learner` is one)."""

    args: Any  # its config: `eval_*` fields, `discount`, `num_turns`, `verbose`
    dist: Distributed
    eval_env: TextParallelEnv
    engine: RolloutEngine
    num_agents: int
    env_steps: int
    logger: RunLogger
    eval_logger: Callable[..., list[dict[str, float]]] | None
    eval_aggregator: Callable[..., dict[str, float]] | None

    def epoch_order(self, env: TextParallelEnv, epoch: int, limit: int | None = None,
                    shuffle: bool | None = None) -> list[tuple[int, int | None]]:
        """`(reset seed, task index or None)` of each episode of `epoch` (-1: evaluation)."""


def evaluate(learner: Evaluated, num_eval_samples: int | None = None, greedy: bool | None = None
             ) -> dict[str, float]:
    """Play `num_eval_samples` episodes with one sample per agent per turn; return `eval/*` metrics.

    Metrics: `eval/reward_mean` (mean episode return over agents), `eval/agent_{i}/return_mean`,
    `eval/turn_{t}/reward_mean`, `eval/turn_{t}/expected_return`, `eval/invalid_action_rate`,
    `eval/used_partner_info_rate` (tasks that report `used_partner_info`, `comlrl_env.info_flow`) with its
    chance level `eval/used_partner_info_chance` where the task states one, and
    `eval/<key>` from `eval_logger` + `eval_aggregator`. Always the task reward (never `relabel`).
    """
    cfg = learner.args
    n = cfg.eval_num_samples if num_eval_samples is None else num_eval_samples
    greedy = cfg.eval_greedy if greedy is None else greedy
    if n <= 0 or not learner.dist.is_main:  # under torchrun rank 0 evaluates; the others go on
        return {}
    env = learner.eval_env
    order = learner.epoch_order(env, epoch=-1, limit=n, shuffle=True)
    episode_returns, turn_rewards, turn_returns, invalid, joints, flow = [], {}, {}, 0.0, 0, []
    completions: list[list[list[str]]] = [[[] for _ in range(n)] for _ in range(learner.num_agents)]
    items, first_prompts = [], []
    bar = tqdm(total=n, desc="eval", disable=not cfg.verbose, leave=False, dynamic_ncols=True)
    for start in range(0, n, cfg.eval_batch_size):
        roots = reset_roots(env, order[start:start + cfg.eval_batch_size])
        items += [r.task.get("item", r.task) if isinstance(r.task, dict) else r.task for r in roots]
        first_prompts += [r.observe(r.possible_agents[0]) for r in roots]
        rollout = learner.engine.collect(roots, 1, "parallel", "aligned", cfg.discount, greedy=greedy)
        episode_returns.append(rollout.episode_returns)
        invalid += float(rollout.invalid_actions.sum())
        joints += rollout.num_joint_actions
        flow += rollout.episodes or []
        for t in rollout.turn.unique().tolist():
            at = rollout.turn == t
            turn_rewards.setdefault(t, []).append(rollout.rewards[:, at])
            turn_returns.setdefault(t, []).append(rollout.returns[:, at])
        for a in range(learner.num_agents):
            for row in range(rollout.num_samples):
                completions[a][start + int(rollout.task[row])].append(rollout.samples[a].completions[row])
        bar.update(len(roots))
    bar.close()
    returns = torch.cat(episode_returns, 1)  # (A, n)
    metrics = {"eval/reward_mean": float(returns.mean())}
    for a in range(learner.num_agents):
        metrics[f"eval/agent_{a}/return_mean"] = float(returns[a].mean())
    for t in sorted(turn_rewards):
        metrics[f"eval/turn_{t + 1}/reward_mean"] = float(torch.cat(turn_rewards[t], 1).mean())
        metrics[f"eval/turn_{t + 1}/expected_return"] = float(torch.cat(turn_returns[t], 1).mean())
    metrics["eval/invalid_action_rate"] = invalid / max(joints * learner.num_agents, 1)
    if flow:
        metrics["eval/used_partner_info_rate"] = used_partner_info_rate(flow)[0]
        if partner_info_chance(env) is not None:  # what answers reach without the partner's message
            metrics["eval/used_partner_info_chance"] = partner_info_chance(env)
    if learner.eval_logger is not None:
        rows = learner.eval_logger(agent_completions_turns=completions, batch_items=items, prompts=first_prompts)
        extra = learner.eval_aggregator(rows, num_turns=cfg.num_turns)
        metrics.update({f"eval/{k}": float(v) for k, v in extra.items()})
    learner.logger.log(metrics, learner.env_steps)
    return metrics
