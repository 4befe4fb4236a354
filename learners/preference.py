"""MARLHF and MARLHFIter: policy learning against a joint reward model learned from preferences.

One preference stage, then a policy phase:

1. the current agents sample `preference_num_candidates` joint answers per task instance (one batched
   generate per agent, as the rollout engine does);
2. pairs (winner, loser) of two different texts are labelled by the task reward (ties dropped) and selected
   by `pair_selection` (`rewards.preferences`);
3. a `rewards.RewardModel` (backbone from `reward_model_name`, float32 unless `reward_model_config` says
   otherwise, scalar head on the last non-padding token) is trained with the Bradley-Terry loss
   -mean log sigmoid(s_w - s_l); its accuracy is logged on held-out comparisons, set aside before replay
   draws and never trained on;
4. the model is frozen and its score of the joint answer replaces the task reward in the chosen RL learner
   (`rl_algorithm`: MAGRPO and its advantage variants, IAC or MAAC; their code is reused, not copied).
   Evaluation always uses the task reward.

`MARLHFIter` repeats stages 1-4 `num_iterations` times, re-loading the reward model from its source every
iteration (as CoMLRL 1.4.3, the library whose `MARLHFTrainer` API these learners mirror, does), with
comparator policies (`current`, `current_copy`, `history`, `model`) and replay of earlier iterations' pairs
(`current`, `nearest_k`, `all_history`, `lambda_decay`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import tempfile
import warnings
from typing import Any, Sequence

import torch

from learners.actor_critic import IAC, MAAC
from learners.checkpointing.manager import CheckpointManager
from learners.loop.data import reset_roots
from learners.loop.learner import Learner
from learners.loop.optim import accumulate_gradients, adamw, gradient_step
from learners.models.agents import hub_progress_hidden, load_causal_lm, model_name
from learners.parallel.placement import check_device
from learners.preference_config import MARLHFConfig, MARLHFIterConfig
from learners.rollout import Rollout, RolloutEngine
from rewards.models import RewardModel, bradley_terry_loss, joint_text
from rewards.preferences import (
    candidate_pairs,
    heldout_split,
    matched_pairs,
    replay_draw,
    replay_weights,
    select_pairs,
)

__all__ = ["MARLHF", "MARLHFConfig", "MARLHFIter", "MARLHFIterConfig", "MARLHFIterTrainer", "MARLHFTrainer",
           "replay_weights", "select_pairs"]  # the pair functions live in rewards.preferences

# ----- the learners ------------------------------------------------------------------------------


class MARLHF:
    """Multi-agent RLHF: a reward model learned from preference pairs, then a policy learner trained against it.

    Follows RLHF from preferences (Christiano et al. 2017, arXiv 1706.03741) for a team: a preference stage
    labels pairs of different joint answers of the current agents by the task reward and trains a fresh
    `rewards.RewardModel` on them with the Bradley-Terry loss L = -mean log sigmoid(s_winner - s_loser); the
    policy phase runs the `rl_algorithm` learner (MAGRPO or a variant, IAC or MAAC: `learner.policy`) with the
    frozen model's score of each joint answer as every agent's reward, optimizing that learner's objective
    under the learned reward. Evaluation always uses the task reward. `agents`, `critics`, `tokenizers`, `env`,
    `evaluate()` and checkpoints are the policy learner's. Settings: `MARLHFConfig`.
    """

    config_class: type[MARLHFConfig] = MARLHFConfig

    def __init__(self, *, args: MARLHFConfig | None = None, critic_model: Any = None, critics: Any = None,
                 **kwargs: Any) -> None:
        """Build the policy learner and check the preference settings; the first reward model comes in `learn()`.

        Args:
            args: The config: a `MARLHFConfig` (`MARLHFIterConfig` for MARLHFIter), which names the policy
                learner (`rl_algorithm`) and holds its own settings (`policy_args`); None: the defaults.
            critic_model: For an IAC or MAAC policy learner: the model its critics start from; None (and no
                `critics`): the config's `critic_model_name`, else the first agent's id. MAGRPO takes none.
            critics: For an IAC or MAAC policy learner, instead of `critic_model`: IAC's critics, one per trained
                agent, or MAAC's one, as a list of one.
            **kwargs: The policy learner's constructor arguments, passed on as given (`Learner` says more).

        Keyword Args:
            env (str | TextParallelEnv | Callable | None): The task; single-turn, as the reward model scores one.
            train_dataset (Sequence[dict] | None): The task as a dataset, with `reward_func`.
            reward_func (Callable | None): A dataset task's reward; it labels the preference pairs.
            agent_model (Any): The model of every seat; also the default reward model and critic (its id).
            agents (Sequence | None): One entry per seat; the first one's id serves those defaults.
            num_agents (int | None): The number of seats.
            tokenizer (Any): The tokenizer, or one per seat.
            model_config (dict | None): How agents and critics load (the reward model: `reward_model_config`).
            formatters (Any): A dataset task's prompt formatters.
            external_transition (Callable | None): A dataset task's next-turn prompts (unused: one turn).
            reward_processor (Callable | None): A map of every dataset reward.
            eval_env (str | TextParallelEnv | Callable | None): The held-out evaluation task.
            eval_dataset (Sequence[dict] | None): The held-out evaluation dataset.
            wandb_config (dict | None): The wandb run, which also gets the `preference/*` metrics.
            callbacks (Sequence | None): Callbacks, called with the policy learner.
            eval_logger (Callable | None): Extra evaluation metrics, with `eval_aggregator`.
            eval_aggregator (Callable | None): Reduces `eval_logger`'s rows to `eval/*` metrics.

        Raises:
            TypeError: `args` is not the class's config, or the policy learner refuses an argument.
            ValueError: no `reward_model_name` while the agents are objects without an id; a run under torchrun
                (MARLHF runs as one process); a value the policy learner refuses.
        """
        cfg = args if args is not None else self.config_class()
        if not isinstance(cfg, self.config_class):
            raise TypeError(f"args must be a {self.config_class.__name__}, got {type(cfg).__name__}.")
        self.args = cfg
        cfg.check_model_sources()  # every model path a config names, before any model loads
        source = cfg.reward_model_name
        if source is None:
            names = kwargs.get("agents") or [kwargs.get("agent_model")]
            source = model_name(names[0]) if names and names[0] is not None else None
            if source is None:
                raise ValueError("reward_model_name is required when the agents are model objects without an id: "
                                 "set MARLHFConfig(reward_model_name='id or dir').")
        self.reward_model_source = source
        reward_device = check_device(cfg.reward_model_device, "reward_model_device") if cfg.reward_model_device else None
        policy_cls, policy_cfg = cfg.policy_config()
        separate_critic = policy_cls is MAAC or (policy_cls is IAC and policy_cfg.use_separate_critic)
        if separate_critic and critic_model is None and critics is None:
            # As in CoMLRL 1.4.3: critics default to critic_model_name, else the first actor's id.
            critic_model = cfg.critic_model_name or model_name((kwargs.get("agents") or [kwargs.get("agent_model")])[0])
        self.policy: Learner = policy_cls(args=policy_cfg, critic_model=critic_model, critics=critics, **kwargs)
        self.policy.wrapper = self  # our state_dict() and reward model ride in the policy learner's checkpoints
        self.policy.relabel = self.relabel  # the reward model's scores replace the task reward in training
        # Every LR schedule (agents', critics') spans all iterations' policy epochs, not the first one's.
        self.policy.schedule_epochs = cfg.num_train_epochs * getattr(cfg, "num_iterations", 1)
        if self.policy.dist.enabled:
            raise ValueError("MARLHF under torchrun is not supported yet (each rank would learn its own reward "
                             "model); run it as a single process.")
        self.reward_device = reward_device or self.policy.devices[0]
        self.reward_model: RewardModel | None = None  # frozen between stages; None: the task reward
        self.reward_normalization: tuple[float, float] | None = None  # (mean, std) applied to its scores
        self.shards: list[list[dict[str, Any]]] = []  # pairs of each iteration (texts and rewards)
        self.iteration = 0
        self.policy_phases = 0  # iterations whose policy phase ran (one is skipped while no reward model exists)
        self.history: list[list[dict[str, torch.Tensor]]] = []  # agent weights at each iteration's start (CPU)

    # ----- what users call ------------------------------------------------------------------------

    @property
    def agents(self) -> list[Any]:
        return self.policy.agents

    @property
    def critics(self) -> list[Any]:
        return getattr(self.policy, "critics", [])

    @property
    def tokenizers(self) -> list[Any]:
        return self.policy.tokenizers

    @property
    def env(self) -> Any:
        return self.policy.env

    def learn(self, checkpoint_dir: str | None = None, *, resume_from_checkpoint: str | None = None,
              **schedule: Any) -> dict[str, float]:
        """Run the preference stage(s) and policy phase(s), checkpointing after every preference stage
        and at the policy learner's boundaries; `resume_from_checkpoint` continues bit for bit.

        `schedule`: `checkpoint_interval`, `checkpoint_total_limit` and `checkpoint_steps`, as in `Learner.learn`.
        """
        cfg = self.args
        iterations = getattr(cfg, "num_iterations", 1)
        resume = resume_from_checkpoint
        if resume is not None:
            self._restore(resume)
        metrics: dict[str, float] = {}
        while self.iteration < iterations:
            if resume is None:
                metrics = self.preference_stage()
                manager = CheckpointManager(self.policy, checkpoint_dir,
                                            total_limit=schedule.get("checkpoint_total_limit"))
                manager.start()
                manager.save_now()
            if self.reward_model is not None:  # else no stage has found pairs yet: nothing to learn against
                self.policy.args.num_train_epochs = cfg.num_train_epochs * (self.policy_phases + 1)
                metrics.update(self.policy.learn(checkpoint_dir, resume_from_checkpoint=resume, **schedule))
                self.policy_phases += 1
            resume = None
            self.iteration += 1
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """Preference data and history for checkpoints (strings, numbers and CPU tensors only)."""
        return {"iteration": self.iteration, "policy_phases": self.policy_phases, "shards": self.shards,
                "history": self.history, "normalization": list(self.reward_normalization or [])}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state["iteration"])
        self.policy_phases = int(state.get("policy_phases", self.iteration))
        self.shards = [list(s) for s in state["shards"]]
        self.history = [list(h) for h in state["history"]]
        self.reward_normalization = tuple(state["normalization"]) or None

    def checkpoint_modules(self) -> dict[str, torch.nn.Module]:
        """The frozen reward model, saved in the policy learner's checkpoints."""
        return {"reward_model": self.reward_model} if self.reward_model is not None else {}

    def relabel(self, rollout: Rollout) -> Rollout:
        """With a reward model, its score of each joint answer replaces the task reward (the policy phase).

        Single-turn only: the (optionally standardized) score of a joint answer is every agent's reward and
        return. The task's returns stay available as `task_episode_returns` for metrics.
        """
        if self.reward_model is None:
            return rollout
        if int(rollout.turn.max()) > 0:
            raise ValueError("a learned reward model scores single-turn episodes only; set num_turns=1.")
        scores = self.reward_model.score(self._texts(rollout))
        if self.reward_normalization is not None:
            mean, std = self.reward_normalization
            scores = (scores - mean) / std
        A, B = len(rollout.samples), rollout.episode_returns.shape[1]
        rewards = scores.expand(A, rollout.num_samples).clone()
        per_task = torch.zeros(B).index_add_(0, rollout.task, scores) / torch.bincount(rollout.task, minlength=B)
        return dataclasses.replace(rollout, rewards=rewards, returns=rewards.clone(),
                                   episode_returns=per_task.expand(A, B).clone(),
                                   task_episode_returns=rollout.episode_returns,
                                   joint_rows=None, joint_returns=None, joint_fixed=None)  # the task's, not scored

    def _restore(self, path: str) -> None:
        """Rebuild the frozen reward model a checkpoint holds, then load everything (weights, pairs, counters)."""
        if os.path.isfile(os.path.join(os.path.expanduser(path), "models", "reward_model.safetensors")):
            self.reward_model = self.load_reward_model().eval().requires_grad_(False)
        self.policy.load_checkpoint(path)
        phase_end = self.args.num_train_epochs * (self.policy_phases + 1)
        self.policy.args.num_train_epochs = max(self.policy.epoch, phase_end)

    def load_reward_model(self) -> RewardModel:
        """A fresh reward model from `reward_model_name` (backbone + a new scalar head) on its device, loaded as
        `reward_model_config` says (float32 weights by default; bf16 autocast with `mixed_precision="bf16"`)."""
        with hub_progress_hidden():
            return RewardModel.from_pretrained(self.reward_model_source, device=self.reward_device,
                                               freeze_backbone=self.args.reward_freeze_backbone,
                                               max_length=self.args.reward_max_length,
                                               **self.args.reward_model_loading())

    def train(self, **kwargs: Any) -> dict[str, float]:
        """Alias of `learn()`."""
        return self.learn(**kwargs)

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """The policy learner's evaluation, always with the task reward."""
        return self.policy.evaluate(*args, **kwargs)

    def save_model(self, output_dir: str) -> None:
        """The policy learner's export plus `reward_model/` (backbone + `reward_head.pt`)."""
        self.policy.save_model(output_dir)
        if self.reward_model is not None:
            with hub_progress_hidden():
                self.reward_model.save_pretrained(os.path.join(output_dir, "reward_model"))

    # ----- one preference stage ---------------------------------------------------------------------

    def preference_stage(self) -> dict[str, float]:
        """Collect candidates, label and select pairs, train and freeze a fresh reward model.

        A stage without training pairs (every candidate tied) trains nothing: the previous reward model
        stays in use, or, before any exists, `learn()` skips this iteration's policy phase. Either way it
        warns and logs `preference/stage_without_pairs = 1` (CoMLRL 1.4.3 stops instead).
        """
        cfg = self.args
        pairs, scores = self.collect_pairs(self._pair_scorer())
        self.shards.append(pairs)
        self._write_shard(pairs)
        training_pairs, heldout = self.split_pairs()
        metrics = {"preference/iteration": float(self.iteration), "preference/current_pairs": float(len(pairs)),
                   "preference/train_pairs": float(len(training_pairs)),
                   "preference/heldout_pairs": float(len(heldout)),
                   "preference/total_pairs": float(sum(len(s) for s in self.shards)),
                   "preference/stage_without_pairs": float(not training_pairs)}
        if training_pairs:
            self.reward_model = self.load_reward_model()
            metrics.update(self.train_reward_model(training_pairs, heldout))
            self.reward_model.eval().requires_grad_(False)
            if cfg.reward_normalization:
                candidate_scores = self.reward_model.score(scores)
                self.reward_normalization = (float(candidate_scores.mean()),
                                             max(float(candidate_scores.std(unbiased=False)), 1e-6))
        else:
            outcome = ("the previous iteration's reward model stays in use." if self.reward_model is not None
                       else "no reward model exists yet, so this iteration's policy phase is skipped.")
            warnings.warn(f"preference stage {self.iteration}: no preference pairs (the candidates of every task "
                          f"instance tied, and replay had none), so no reward model was trained; {outcome}",
                          stacklevel=2)
        self.policy.logger.log(metrics, self.policy.env_steps)
        return metrics

    def collect_pairs(self, scorer: RewardModel | None = None) -> tuple[list[dict[str, Any]], list[str]]:
        """Sample candidates for every task instance and return the selected pairs and all candidate texts.

        Pairs hold two different texts, each comparison once (`rewards.preferences`). With a `scorer`, every
        distinct text of a rollout batch (current and comparator candidates) is scored once, in one call, so
        equal texts tie exactly.
        """
        cfg, policy = self.args, self.policy
        P = cfg.preference_num_candidates
        gen = torch.Generator().manual_seed(cfg.seed * 31 + self.iteration)
        order = policy.epoch_order(policy.env, epoch=-2 - self.iteration)
        comparator = self._comparator_engine()
        pairs: list[dict[str, Any]] = []
        texts_all: list[str] = []
        for start in range(0, len(order), cfg.rollout_buffer_size):
            roots = reset_roots(policy.env, order[start:start + cfg.rollout_buffer_size])
            twins = [r.clone() for r in roots] if comparator is not None else None
            current = policy.engine.collect(roots, P, "tree", "aligned", 1.0)
            policy.env_steps += current.num_joint_actions
            texts = self._texts(current)
            texts_all += texts
            other = comparator.collect(twins, cfg.comparator_num_candidates or P, "tree", "aligned", 1.0) \
                if comparator is not None else None
            other_texts = self._texts(other) if other is not None else []
            rewards = self._rewards([current] + ([other] if other is not None else []), texts + other_texts, scorer)
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

    def split_pairs(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """This stage's training pairs (replay's draw) and held-out pairs, held out before replay draws.

        Held-out pairs are `reward_heldout_fraction` of the distinct comparisons replay may draw from (none
        under 10; `rewards.preferences.heldout_split`), and no training pair repeats one of them.
        """
        cfg = self.args
        weights = self._replay_weights()
        gen = torch.Generator().manual_seed(cfg.seed * 131 + self.iteration)
        heldout, shards = heldout_split(self.shards, weights, cfg.reward_heldout_fraction, gen)
        return self._replay(shards), heldout

    def train_reward_model(self, pairs: list[dict[str, Any]],
                           heldout: Sequence[dict[str, Any]] = ()) -> dict[str, float]:
        """Bradley-Terry training on `pairs`; returns the loss and the train accuracy (as the last epoch scored
        its batches) and the accuracy on `heldout`. The gradients are dropped after the last step."""
        cfg, rm, train = self.args, self.reward_model, pairs
        if not pairs:
            return {"preference/reward_model_loss": float("nan")}
        gen = torch.Generator().manual_seed(cfg.seed * 137 + self.iteration)
        params = [p for p in rm.parameters() if p.requires_grad]
        optimizer = adamw(params, cfg.reward_learning_rate)

        def loss_fn(idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """Bradley-Terry loss of the training pairs `idx`, and the fraction the model already ranks right."""
            batch = [train[j] for j in idx.tolist()]
            scores = rm([p["winner"] for p in batch] + [p["loser"] for p in batch])
            winner, loser = scores[: len(batch)], scores[len(batch):]
            return bradley_terry_loss(winner, loser), (winner > loser).float().mean()

        rm.train()
        losses, accuracies = [], []
        for _ in range(cfg.reward_num_train_epochs):
            accuracies = []  # train accuracy: as the last epoch's batches were scored, no extra pass
            for idx in torch.randperm(len(train), generator=gen).split(cfg.reward_train_batch_size):
                optimizer.zero_grad(set_to_none=True)
                loss, accuracy = accumulate_gradients(idx, loss_fn, cfg.gradient_accumulation_steps)
                gradient_step(rm, optimizer, len(idx), max_grad_norm=None)
                losses.append(loss)
                accuracies.append(accuracy * len(idx))
        optimizer.zero_grad(set_to_none=True)  # the frozen model keeps no model-sized gradient buffers
        rm.eval()
        metrics = {"preference/reward_model_loss": sum(losses) / len(losses),
                   "preference/reward_model_accuracy_train": sum(accuracies) / len(train)}
        if heldout:
            metrics["preference/reward_model_accuracy_heldout"] = _accuracy(rm, list(heldout))
        return metrics

    # ----- helpers -----------------------------------------------------------------------------------

    @staticmethod
    def _texts(rollout: Rollout) -> list[str]:
        """Each sample's joint text: the state it acted from and every agent's completion."""
        A = len(rollout.samples)
        return [joint_text(rollout.states[s], [rollout.samples[a].completions[s] for a in range(A)])
                for s in range(rollout.num_samples)]

    @staticmethod
    def _rewards(rollouts: list[Rollout], texts: list[str], scorer: RewardModel | None) -> list[float]:
        """The `scorer`'s score of `texts` (each distinct text once), else the team's task reward of each sample."""
        if scorer is not None:
            return scorer.score(texts).tolist()
        return [r for rollout in rollouts for r in rollout.rewards.mean(0).tolist()]

    def _pair_scorer(self) -> RewardModel | None:
        return None

    def _comparator_engine(self) -> RolloutEngine | None:
        return None

    def _replay_weights(self) -> list[float]:
        """Which shards this stage trains on: the newest only."""
        return replay_weights([len(s) for s in self.shards], "current")

    def _replay(self, shards: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The training pairs drawn from `shards` (the held-out comparisons removed): the newest shard."""
        return shards[-1]

    def _write_shard(self, pairs: list[dict[str, Any]]) -> None:
        pass


class MARLHFIter(MARLHF):
    """Iterated multi-agent RLHF: MARLHF's preference stage and policy phase, repeated `num_iterations` times.

    Follows iterated (online) RLHF: each iteration samples fresh pairs from the improving agents, optionally
    against a comparator policy (`comparator_policy`) and labelled by the previous reward model
    (`preference_scoring_reward`), replays earlier pairs (`preference_replay_mode`), retrains the reward model
    from its source with MARLHF's loss and continues the policy learner's objective under it. Settings:
    `MARLHFIterConfig`; the constructor is `MARLHF`'s.
    """

    config_class = MARLHFIterConfig

    def _pair_scorer(self) -> RewardModel | None:
        """The previous iteration's reward model labels pairs when `preference_scoring_reward="reward_model"`."""
        return self.reward_model if self.args.preference_scoring_reward == "reward_model" else None

    def _comparator_engine(self) -> RolloutEngine | None:
        cfg: MARLHFIterConfig = self.args
        if cfg.comparator_policy == "current":
            return None
        if cfg.comparator_policy in ("current_copy", "history"):
            # Snapshots stay in memory (CPU), never re-read from disk per item; keep only those still needed.
            self.history.append([{k: v.detach().cpu().clone() for k, v in a.state_dict().items()} for a in self.agents])
            self.history = self.history[-((cfg.comparator_history_k or 0) + 1):]
        if cfg.comparator_policy == "model":
            sources = cfg.comparator_agents or [cfg.comparator_model_name] * self.policy.num_agents
            if len(sources) != self.policy.num_agents:
                raise ValueError(f"comparator_agents has {len(sources)} entries for {self.policy.num_agents} agents.")
            models = [load_causal_lm(s, {}).to(d).eval() for s, d in zip(sources, self.policy.devices)]
        else:
            back = 0 if cfg.comparator_policy == "current_copy" else cfg.comparator_history_k
            snapshot = self.history[max(len(self.history) - 1 - back, 0)]
            models = []
            for agent, state in zip(self.agents, snapshot):
                twin = copy.deepcopy(agent)
                twin.load_state_dict(state)
                models.append(twin.eval().requires_grad_(False))
        return RolloutEngine(models, self.tokenizers, self.policy.engine.settings, self.policy.engine.fixed)

    def _replay_weights(self) -> list[float]:
        cfg: MARLHFIterConfig = self.args
        return replay_weights([len(s) for s in self.shards], cfg.preference_replay_mode, cfg.preference_replay_k,
                              cfg.preference_replay_lambda)

    def _replay(self, shards: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """`preference_replay_sample_size` pairs (None: the newest shard's count) drawn from `shards` by the
        replay weights, without replacement within a shard until it is used up (`rewards.preferences.replay_draw`)."""
        cfg: MARLHFIterConfig = self.args
        if cfg.preference_replay_mode == "current":
            return shards[-1]
        weights = replay_weights([len(s) for s in shards], cfg.preference_replay_mode, cfg.preference_replay_k,
                                 cfg.preference_replay_lambda)
        usable = [i for i, w in enumerate(weights) if w > 0]
        if not usable:
            return []
        size = cfg.preference_replay_sample_size or len(shards[-1]) or len(shards[usable[-1]])
        return replay_draw(shards, weights, size, torch.Generator().manual_seed(cfg.seed * 977 + self.iteration))

    def _write_shard(self, pairs: list[dict[str, Any]]) -> None:
        directory = self.args.preference_replay_dir
        if directory is None:
            return
        if not hasattr(self, "_replay_dir"):
            os.makedirs(directory, exist_ok=True)
            # Never overwrite an earlier run's files: a non-empty dir gets a fresh resume-* subdirectory.
            self._replay_dir = tempfile.mkdtemp(prefix="resume-", dir=directory) if os.listdir(directory) else directory
        path = os.path.join(self._replay_dir, f"iteration_{self.iteration:04d}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"iteration": self.iteration, "num_pairs": len(pairs), "pairs": pairs}, f)


def _accuracy(rm: RewardModel, pairs: list[dict[str, Any]]) -> float:
    if not pairs:
        return math.nan
    w = rm.score([p["winner"] for p in pairs])
    l = rm.score([p["loser"] for p in pairs])
    return float((w > l).float().mean())


MARLHFTrainer = MARLHF
MARLHFIterTrainer = MARLHFIter
