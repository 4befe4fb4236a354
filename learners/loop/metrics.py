"""What a learner logs: the metrics of one rollout, and means over the minibatches of an update.

Metric names: `train/*` (rewards, returns, advantages, losses, policy diagnostics per agent and turn),
`perf/*` (seconds and tokens per second) and, from evaluation, `eval/*`. For tasks that report
`infos[agent]["used_partner_info"]` (`comlrl_env.info_flow`), also `train/used_partner_info_rate`.
"""

from __future__ import annotations

import warnings
from typing import Mapping

import torch

from comlrl_env.info_flow import used_partner_info_rate
from learners.rollout import Rollout
from learners.rollout.scoring import RolloutCorrection

__all__ = ["MeanMetrics", "completion_rows", "prompt_cut_rate", "rollout_metrics", "update_metrics",
           "zero_std_fraction"]


class MeanMetrics:
    """Means of metrics over the optimizer steps of one update: `add()` each step's values, read `means()`.

    Every learner logs a loss, a gradient norm or a policy statistic as its mean over the update's
    minibatches (a minibatch's own value is already its mean over its micro-batches).
    """

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self.sums[name] = self.sums.get(name, 0.0) + float(value)
            self.counts[name] = self.counts.get(name, 0) + 1

    def means(self) -> dict[str, float]:
        return {name: total / self.counts[name] for name, total in self.sums.items()}


def rollout_metrics(rollout: Rollout, advantages: torch.Tensor, kl: torch.Tensor | None = None) -> dict[str, float]:
    """Reward, return, advantage, length, KL and throughput metrics of one rollout."""
    m: dict[str, float] = {"train/reward_mean": float(rollout.episode_returns.mean())}
    flat = zero_std_fraction(rollout.returns, rollout.group)
    if flat is not None:
        m["train/frac_reward_zero_std"] = flat
    if rollout.task_episode_returns is not None:
        m["train/task_reward_mean"] = float(rollout.task_episode_returns.mean())
    A = rollout.rewards.shape[0]
    for a in range(A):
        lengths = rollout.samples[a].completion_mask.sum(1).float()
        m[f"train/agent_{a}/reward_mean"] = float(rollout.rewards[a].mean())
        m[f"train/agent_{a}/reward_std"] = float(rollout.rewards[a].std(unbiased=False))
        m[f"train/agent_{a}/return_mean"] = float(rollout.returns[a].mean())
        m[f"train/agent_{a}/advantage_mean"] = float(advantages[a].mean())
        m[f"train/agent_{a}/advantage_std"] = float(advantages[a].std(unbiased=False))
        m[f"train/agent_{a}/completion_length"] = float(lengths.mean())
        if kl is not None:
            m[f"train/agent_{a}/kl"] = float(kl[a].mean())
    for t in rollout.turn.unique().tolist():
        at = rollout.turn == t
        m[f"train/turn_{t + 1}/reward_mean"] = float(rollout.rewards[:, at].mean())
        m[f"train/turn_{t + 1}/return_mean"] = float(rollout.returns[:, at].mean())
    tokens = sum(int(s.completion_mask.sum()) for s in rollout.samples)
    cut = prompt_cut_rate(rollout)
    if cut is not None:  # share of the agents' samples whose prompt was cut from the left to fit
        m["train/prompt_cut_rate"] = cut
    m["train/invalid_action_rate"] = float(rollout.invalid_actions.sum()) / max(rollout.num_joint_actions * A, 1)
    m["perf/seconds_generate"] = rollout.timings["generate"]
    m["perf/seconds_env"] = rollout.timings["env"]
    m["perf/tokens_per_second"] = tokens / max(rollout.timings["generate"], 1e-9)
    if "weight_sync" in rollout.timings:  # a generation engine's copy of the trained weights, before generating
        m["perf/seconds_weight_sync"] = rollout.timings["weight_sync"]
    flow = used_partner_info_rate(rollout.episodes or [])
    if flow is not None:  # share of the rollout's agent-answers that used the partner's private part
        m["train/used_partner_info_rate"] = flow[0]
    return m


def update_metrics(seconds: float, correction: RolloutCorrection | None) -> dict[str, float]:
    """What the update after a rollout (`seconds` from the rollout's end to the last optimizer step) logs:
    `perf/seconds_update`, less the engine correction's no-grad pass, which is `perf/seconds_correction`, and
    the correction's ratio metrics (`RolloutCorrection.metrics`). Without a correction: the seconds alone."""
    if correction is None:
        return {"perf/seconds_update": seconds}
    return {"perf/seconds_update": seconds - correction.seconds, "perf/seconds_correction": correction.seconds,
            **correction.metrics()}


def prompt_cut_rate(rollout: Rollout) -> float | None:
    """The share of the rollout's samples (rows where an agent was to move, over all agents) whose prompt the
    backend cut from the left to fit `max_prompt_length` or the model's context; None when no backend
    recorded cuts. Example: cuts [[0, 3], [0, 0]], all acting -> 0.25."""
    if all(s.prompt_cut is None for s in rollout.samples):
        return None
    cut, acting = 0, 0
    for a, samples in enumerate(rollout.samples):
        rows = torch.ones(len(samples), dtype=torch.bool) if rollout.acted is None else rollout.acted[a]
        if samples.prompt_cut is not None:
            cut += int(((samples.prompt_cut > 0) & rows).sum())
        acting += int(rows.sum())
    return cut / max(acting, 1)


def zero_std_fraction(returns: torch.Tensor, group: torch.Tensor) -> float | None:
    """The share of (agent, group) pairs, among groups of two or more samples, whose returns are all equal:
    their group-relative advantages are 0, so they teach nothing. `returns` `(A, S)`, `group` `(S,)`.
    None when no group has two samples. Example: groups [0, 0, 1, 1], returns [[1, 1, 0, 1]] -> 0.5."""
    _, index = torch.unique(group, return_inverse=True)
    G = int(index.max()) + 1 if index.numel() else 0
    sizes = torch.bincount(index, minlength=G)
    if not bool((sizes > 1).any()):
        return None
    R = returns.float()
    spread = (torch.full((R.shape[0], G), float("-inf")).scatter_reduce(1, index.expand_as(R), R, "amax")
              - torch.full((R.shape[0], G), float("inf")).scatter_reduce(1, index.expand_as(R), R, "amin"))
    flat = (spread == 0)[:, sizes > 1]
    return float(flat.float().mean())


def completion_rows(rollout: Rollout, limit: int = 4) -> list[dict]:
    """The first `limit` joint answers of a rollout, for reading: the joint state each agent acted on, each
    agent's completion and reward."""
    return [{"state": rollout.states[s], "completions": [batch.completions[s] for batch in rollout.samples],
             "rewards": rollout.rewards[:, s].tolist()} for s in range(min(limit, rollout.num_samples))]


NO_SIGNAL_ROLLOUTS = 5
"""Rollouts in a row without any reward spread in a group before `learn()` warns that nothing is learned."""


INVALID_EXPLAINS = 0.5
"""From this `train/invalid_action_rate` on, the no-signal warning names invalid answers as the cause."""


def warn_if_no_signal(metrics: Mapping[str, float], flat_rollouts: int) -> int:
    """Count the rollouts in a row in which every group's samples scored the same (`train/frac_reward_zero_std`
    = 1: all group-relative advantages 0, nothing learned), warn once at `NO_SIGNAL_ROLLOUTS`; return the count.

    When at least `INVALID_EXPLAINS` of that rollout's actions were invalid, the warning says so: every such
    answer gets the task's invalid outcome (a game's forfeit), so the returns are equal because the answers
    are unreadable, not because the reward is sparse; it then names the settings that make answers valid
    (`numbered_actions=True`) and those that price an invalid one (`invalid_action`)."""
    flat_rollouts = flat_rollouts + 1 if metrics.get("train/frac_reward_zero_std") == 1.0 else 0
    if flat_rollouts != NO_SIGNAL_ROLLOUTS:
        return flat_rollouts
    same = (f"for {NO_SIGNAL_ROLLOUTS} rollouts in a row every group's samples got the same return, so the "
            "reward told no answer from another (group-relative advantages were all 0; metric "
            "train/frac_reward_zero_std = 1).")
    invalid = metrics.get("train/invalid_action_rate", 0.0)
    if invalid >= INVALID_EXPLAINS:
        warnings.warn(
            f"{same} train/invalid_action_rate = {invalid:.2f}: {invalid:.0%} of the answers were invalid actions, "
            "and every invalid answer gets the same outcome (a forfeit, for an OpenSpiel game's default "
            "invalid_action='forfeit'), which is why the returns do not differ. Make valid answers easier: "
            "comlrl_env.make(<game id>, numbered_actions=True) lets a legal action's number answer, and "
            "use_chat_template or a larger max_new_tokens may help the model follow the answer format. The env's "
            "invalid_action settings decide what an invalid answer costs: invalid_action='random' (with "
            "invalid_action_penalty) plays a random legal move for it and subtracts the penalty, so the episode "
            "goes on.", stacklevel=3)
    else:
        warnings.warn(
            f"{same} A sparse reward the agents never reach gives no signal: use a denser reward, more "
            "num_generations, or a higher temperature.", stacklevel=3)
    return flat_rollouts
