"""MARLHF's preference stage: candidates, pairs, splits and the Bradley-Terry reward model.

One stage, as `learners.preference.MARLHF.preference_stage` runs it:

1. `collect_pairs`: the current agents (and, for MARLHFIter, a comparator policy) sample joint answers for
   every task instance of the stage's data order; pairs (winner, loser) of two different texts are labelled
   by the task reward or a scorer and selected by `pair_selection` (`rewards.preferences`);
2. `rewards.preferences.heldout_split` sets held-out comparisons aside before replay draws
   (`replay_pairs`), so no training pair repeats a held-out one;
3. `fit_reward_model` trains a fresh `rewards.RewardModel` on the training pairs with the Bradley-Terry loss
   L = -mean log sigmoid(s_winner - s_loser) and measures its accuracy on the held-out pairs.

In the policy phase that follows, `relabelled` puts the frozen model's scores in place of the task reward.

MARLHFIter's pieces live here too: the frozen comparator policies (`agent_snapshot`, `comparator_engine`) and
the pair files of `preference_replay_dir` (`replay_dir`, `write_shard`). These functions take the policy
learner and the config as arguments and keep no state: the learner owns the pairs, the history and the
reward model.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import tempfile
from typing import Any, Sequence

import torch

from learners.loop.data import reset_roots
from learners.loop.learner import Learner
from learners.loop.optim import accumulate_gradients, adamw, gradient_step
from learners.models.agents import load_causal_lm
from learners.preference_config import MARLHFConfig, MARLHFIterConfig
from learners.rollout import Rollout, RolloutEngine
from rewards.models import RewardModel, bradley_terry_loss, joint_text
from rewards.preferences import candidate_pairs, matched_pairs, replay_draw, replay_weights

__all__ = ["agent_snapshot", "collect_pairs", "comparator_engine", "fit_reward_model", "heldout_accuracy",
           "joint_texts", "pair_rewards", "relabelled", "replay_dir", "replay_pairs", "write_shard"]

Pair = dict[str, Any]
"""One comparison: `winner` and `loser` texts and their rewards (`rewards.preferences.make_pair`)."""


# ----- candidates and pairs ------------------------------------------------------------------------


def joint_texts(rollout: Rollout) -> list[str]:
    """Each sample's joint text: the state it acted from and every agent's completion."""
    A = len(rollout.samples)
    return [joint_text(rollout.states[s], [rollout.samples[a].completions[s] for a in range(A)])
            for s in range(rollout.num_samples)]


def pair_rewards(rollouts: list[Rollout], texts: list[str], scorer: RewardModel | None) -> list[float]:
    """The reward that labels each sample of `rollouts` (whose joint texts are `texts`).

    With a `scorer`, its score of each text (each distinct text scored once, so equal texts tie exactly);
    without, the team's task reward of each sample (the mean over agents).
    """
    if scorer is not None:
        return scorer.score(texts).tolist()
    return [r for rollout in rollouts for r in rollout.rewards.mean(0).tolist()]


def collect_pairs(policy: Learner, cfg: MARLHFConfig, iteration: int, scorer: RewardModel | None = None,
                  comparator: RolloutEngine | None = None) -> tuple[list[Pair], list[str]]:
    """Sample candidates for every task instance; return the selected pairs and every candidate's joint text.

    The current agents sample `preference_num_candidates` joint answers per task instance, in the data order
    of epoch `-2 - iteration` (`Learner.epoch_order`), `rollout_buffer_size` instances per rollout. Without a
    `comparator`, pairs come from two of an instance's candidates (`rewards.preferences.candidate_pairs`);
    with one, from a current candidate and the comparator's sample of the same index
    (`rewards.preferences.matched_pairs`). Each pair holds two different texts, each comparison once.
    Rewards come from `pair_rewards`: the `scorer`, in one call per rollout batch, or the task reward.
    The policy learner's `env_steps` counts the current agents' joint actions.
    """
    P = cfg.preference_num_candidates
    gen = torch.Generator().manual_seed(cfg.seed * 31 + iteration)
    order = policy.epoch_order(policy.env, epoch=-2 - iteration)
    pairs: list[Pair] = []
    texts_all: list[str] = []
    for start in range(0, len(order), cfg.rollout_buffer_size):
        roots = reset_roots(policy.env, order[start:start + cfg.rollout_buffer_size])
        twins = [r.clone() for r in roots] if comparator is not None else None
        current = policy.engine.collect(roots, P, "tree", "aligned", 1.0)
        policy.env_steps += current.num_joint_actions
        texts = joint_texts(current)
        texts_all += texts
        other = None
        if comparator is not None:
            other = comparator.collect(twins, getattr(cfg, "comparator_num_candidates", None) or P, "tree",
                                       "aligned", 1.0)
        other_texts = joint_texts(other) if other is not None else []
        rewards = pair_rewards([current] + ([other] if other is not None else []), texts + other_texts, scorer)
        rewards, other_rewards = rewards[:len(texts)], rewards[len(texts):]
        for b in range(len(roots)):
            mine = (current.task == b).nonzero().squeeze(1).tolist()
            if other is None:
                pairs += candidate_pairs([texts[i] for i in mine], [rewards[i] for i in mine],
                                         cfg.preference_pairs_per_sample, cfg.pair_selection, gen)
                continue
            theirs = (other.task == b).nonzero().squeeze(1).tolist()
            pairs += matched_pairs([(texts[i], rewards[i]) for i in mine],
                                   [(other_texts[j], other_rewards[j]) for j in theirs],
                                   cfg.preference_pairs_per_sample, cfg.pair_selection, gen)
    return pairs, texts_all


# ----- the reward model ------------------------------------------------------------------------------


def fit_reward_model(model: RewardModel, pairs: list[Pair], heldout: Sequence[Pair], cfg: MARLHFConfig,
                     iteration: int) -> dict[str, float]:
    """Train `model` on `pairs` with the Bradley-Terry loss; return its `preference/reward_model_*` metrics.

    `reward_num_train_epochs` passes over the pairs in seeded random order, `reward_train_batch_size` pairs
    per AdamW step (`reward_learning_rate`), split into `gradient_accumulation_steps` micro-batches. The
    metrics are the mean loss, the train accuracy (as the last epoch scored its batches: no extra pass) and,
    with `heldout` pairs, the accuracy on them. The gradients are dropped after the last step, so the frozen
    model keeps no model-sized buffers. Without pairs nothing trains and the loss is NaN.
    """
    if not pairs:
        return {"preference/reward_model_loss": float("nan")}
    gen = torch.Generator().manual_seed(cfg.seed * 137 + iteration)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = adamw(params, cfg.reward_learning_rate)

    def loss_fn(idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Bradley-Terry loss of the training pairs `idx`, and the fraction the model already ranks right."""
        batch = [pairs[j] for j in idx.tolist()]
        scores = model([p["winner"] for p in batch] + [p["loser"] for p in batch])
        winner, loser = scores[: len(batch)], scores[len(batch):]
        return bradley_terry_loss(winner, loser), (winner > loser).float().mean()

    model.train()
    losses, accuracies = [], []
    for _ in range(cfg.reward_num_train_epochs):
        accuracies = []  # train accuracy: as the last epoch's batches were scored, no extra pass
        for idx in torch.randperm(len(pairs), generator=gen).split(cfg.reward_train_batch_size):
            optimizer.zero_grad(set_to_none=True)
            loss, accuracy = accumulate_gradients(idx, loss_fn, cfg.gradient_accumulation_steps)
            gradient_step(model, optimizer, len(idx), max_grad_norm=None)
            losses.append(loss)
            accuracies.append(accuracy * len(idx))
    optimizer.zero_grad(set_to_none=True)  # the frozen model keeps no model-sized gradient buffers
    model.eval()
    metrics = {"preference/reward_model_loss": sum(losses) / len(losses),
               "preference/reward_model_accuracy_train": sum(accuracies) / len(pairs)}
    if heldout:
        metrics["preference/reward_model_accuracy_heldout"] = heldout_accuracy(model, list(heldout))
    return metrics


def relabelled(rollout: Rollout, model: RewardModel, normalization: tuple[float, float] | None) -> Rollout:
    """`rollout` with `model`'s score of each joint answer as every agent's reward and return.

    With `normalization` (mean, std), the scores are standardized first. Single-turn rollouts only. The
    task's returns stay available as `task_episode_returns` for metrics; the joint table (`joint_rows`,
    `joint_returns`, `joint_fixed`) holds the task's returns, not the model's, so it is dropped.
    """
    if int(rollout.turn.max()) > 0:
        raise ValueError("a learned reward model scores single-turn episodes only; use an env with one turn "
                         "(comlrl_env.make(id, num_turns=1)).")
    scores = model.score(joint_texts(rollout))
    if normalization is not None:
        mean, std = normalization
        scores = (scores - mean) / std
    A, B = len(rollout.samples), rollout.episode_returns.shape[1]
    rewards = scores.expand(A, rollout.num_samples).clone()
    per_task = torch.zeros(B).index_add_(0, rollout.task, scores) / torch.bincount(rollout.task, minlength=B)
    return dataclasses.replace(rollout, rewards=rewards, returns=rewards.clone(),
                               episode_returns=per_task.expand(A, B).clone(),
                               task_episode_returns=rollout.episode_returns,
                               joint_rows=None, joint_returns=None, joint_fixed=None)  # the task's, not scored


def heldout_accuracy(model: RewardModel, pairs: list[Pair]) -> float:
    """The fraction of `pairs` whose winner `model` scores above the loser (NaN without pairs)."""
    if not pairs:
        return math.nan
    winners = model.score([p["winner"] for p in pairs])
    losers = model.score([p["loser"] for p in pairs])
    return float((winners > losers).float().mean())


# ----- MARLHFIter: replay, comparators and pair files ---------------------------------------------


def replay_pairs(shards: list[list[Pair]], cfg: MARLHFIterConfig, iteration: int) -> list[Pair]:
    """The training pairs a stage draws from `shards` (each iteration's pairs, held-out ones removed).

    Replay mode `current` takes the newest shard as it is. The other modes draw
    `preference_replay_sample_size` pairs (None: the newest shard's count) by the replay weights
    (`rewards.preferences.replay_weights`), without replacement within a shard until it is used up
    (`rewards.preferences.replay_draw`).
    """
    if cfg.preference_replay_mode == "current":
        return shards[-1]
    weights = replay_weights([len(s) for s in shards], cfg.preference_replay_mode, cfg.preference_replay_k,
                             cfg.preference_replay_lambda)
    usable = [i for i, w in enumerate(weights) if w > 0]
    if not usable:
        return []
    size = cfg.preference_replay_sample_size or len(shards[-1]) or len(shards[usable[-1]])
    return replay_draw(shards, weights, size, torch.Generator().manual_seed(cfg.seed * 977 + iteration))


def agent_snapshot(agents: Sequence[torch.nn.Module]) -> list[dict[str, torch.Tensor]]:
    """A CPU copy of every agent's weights (a comparator's `current_copy` or `history` policy)."""
    return [{k: v.detach().cpu().clone() for k, v in a.state_dict().items()} for a in agents]


def comparator_engine(cfg: MARLHFIterConfig, policy: Learner,
                      history: list[list[dict[str, torch.Tensor]]]) -> RolloutEngine:
    """A rollout engine over frozen comparator models, sampling as the policy learner's engine does.

    `comparator_policy="model"`: `comparator_agents` (or `comparator_model_name` for every agent), loaded on
    the agents' devices. Otherwise copies of the agents holding a snapshot of `history` (one per iteration,
    newest last): the newest for `current_copy`, the one `comparator_history_k` iterations older for `history`.
    """
    if cfg.comparator_policy == "model":
        sources = cfg.comparator_agents or [cfg.comparator_model_name] * policy.num_agents
        if len(sources) != policy.num_agents:
            raise ValueError(f"comparator_agents has {len(sources)} entries for {policy.num_agents} agents.")
        models = [load_causal_lm(s, {}).to(d).eval() for s, d in zip(sources, policy.devices)]
    else:
        back = 0 if cfg.comparator_policy == "current_copy" else cfg.comparator_history_k
        snapshot = history[max(len(history) - 1 - back, 0)]
        models = []
        for agent, state in zip(policy.agents, snapshot):
            twin = copy.deepcopy(agent)
            twin.load_state_dict(state)
            models.append(twin.eval().requires_grad_(False))
    return RolloutEngine(models, policy.tokenizers, policy.engine.settings, policy.engine.fixed)


def replay_dir(directory: str) -> str:
    """Where a run writes its pair files under `preference_replay_dir`: `directory` itself when empty, else a
    fresh `resume-*` subdirectory, so an earlier run's files are never overwritten."""
    os.makedirs(directory, exist_ok=True)
    return tempfile.mkdtemp(prefix="resume-", dir=directory) if os.listdir(directory) else directory


def write_shard(directory: str, iteration: int, pairs: list[Pair]) -> None:
    """Write one iteration's pairs to `directory/iteration_NNNN.json` (with the iteration and the pair count)."""
    path = os.path.join(directory, f"iteration_{iteration:04d}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"iteration": iteration, "num_pairs": len(pairs), "pairs": pairs}, f)
