"""MARLHF and MARLHFIter: policy learning against a joint reward model learned from preferences.

One preference stage, then a policy phase:

1. the current agents sample `preference_num_candidates` joint answers per task
   instance (one batched generate per agent, as the rollout engine does);
2. pairs (winner, loser) of two different texts are labelled by the task reward
   (ties dropped) and selected by `pair_selection` (`rewards.preferences`);
3. a `rewards.RewardModel` (backbone from `reward_model_name`, float32 unless
   `reward_model_config` says otherwise, scalar head on the last non-padding
   token) is trained with the Bradley-Terry loss -mean log sigmoid(s_w - s_l);
   its accuracy is logged on held-out comparisons, set aside before replay
   draws and never trained on;
4. the model is frozen and its score of the joint answer replaces the task
   reward in the chosen RL learner (`rl_algorithm`: MAGRPO and its advantage
   variants, IAC or MAAC; their code is reused, not copied). Evaluation always
   uses the task reward.

`MARLHFIter` repeats stages 1-4 `num_iterations` times, re-loading the reward
model from its source every iteration (as CoMLRL 1.4.3, the library whose
`MARLHFTrainer` API these learners mirror, does), with comparator policies
(`current`, `current_copy`, `history`, `model`) and replay of earlier
iterations' pairs (`current`, `nearest_k`, `all_history`, `lambda_decay`).

The learners here own the pairs, the reward model and the policy learner.
Stages 1-3, and step 4's relabelling, are the functions of
`learners.preference_stage`; what the constructor checks before any model
loads is in `learners.preference_checks`.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Sequence

import torch

from learners import preference_checks as checks
from learners import preference_stage as stage
from learners.checkpointing.manager import CheckpointManager, ResumeFrom
from learners.checkpointing.run_lock import RunLock, locked_folders
from learners.loop.construction import checked_config
from learners.loop.learner import Learner
from learners.models.agents import hub_progress_hidden
from learners.parallel.placement import check_device
from learners.preference_config import MARLHFConfig, MARLHFIterConfig
from learners.rollout import Rollout, RolloutEngine
from rewards.models import RewardModel
from rewards.preferences import heldout_split, replay_weights, select_pairs

__all__ = ["MARLHF", "MARLHFConfig", "MARLHFIter", "MARLHFIterConfig", "MARLHFIterTrainer", "MARLHFTrainer",
           "replay_weights", "select_pairs"]  # the pair functions live in rewards.preferences


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
            ValueError: no `reward_model_name` while the agents are objects without an id; an `env` that plays
                more than one turn; a `reward_max_length` too short to keep every agent's answer; a run under
                torchrun (MARLHF runs as one process); a value the policy learner refuses.
        """
        # Everything cheap is checked before any model loads (learners.preference_checks): the config, the
        # model paths, the reward model's source and device, the env's turns, the reward model's text length.
        self.args = cfg = checked_config(args, self.config_class)
        cfg.check_model_sources()
        agents, agent_model = kwargs.get("agents"), kwargs.get("agent_model")
        self.reward_model_source = checks.reward_source(cfg, agents, agent_model)
        reward_device = cfg.reward_model_device and check_device(cfg.reward_model_device, "reward_model_device")
        if kwargs.get("env") is not None and kwargs.get("train_dataset") is None:  # both: the policy learner refuses
            kwargs["env"] = checks.single_turn_env(kwargs["env"], cfg, type(self).__name__)
        checks.check_reward_max_length(cfg, self.reward_model_source, kwargs.get("num_agents"), agents)
        # The policy learner loads the agents (and critics) and does the RL on the rewards `relabel` gives.
        policy_cls, policy_cfg = cfg.policy_config()
        if critic_model is None and critics is None:
            critic_model = checks.default_critic(cfg, policy_cls, policy_cfg, agents, agent_model)
        self.policy: Learner = policy_cls(args=policy_cfg, critic_model=critic_model, critics=critics, **kwargs)
        self.policy.wrapper = self  # our state_dict() and reward model ride in the policy learner's checkpoints
        self.policy.relabel = self.relabel  # the reward model's scores replace the task reward in training
        # Every LR schedule (agents', critics') spans all iterations' policy epochs, not the first one's.
        self.policy.schedule_epochs = cfg.num_train_epochs * getattr(cfg, "num_iterations", 1)
        if self.policy.dist.enabled:
            raise ValueError("MARLHF under torchrun is not supported yet (each rank would learn its own reward "
                             "model); run it as a single process.")
        # The preference state.
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
        """The policy learner's trained agents."""
        return self.policy.agents

    @property
    def critics(self) -> list[Any]:
        """The policy learner's critics (IAC, MAAC); empty for MAGRPO."""
        return getattr(self.policy, "critics", [])

    @property
    def tokenizers(self) -> list[Any]:
        """The policy learner's tokenizers, one per trained agent."""
        return self.policy.tokenizers

    @property
    def env(self) -> Any:
        """The policy learner's training env."""
        return self.policy.env

    def learn(self, checkpoint_dir: str | None = None, *, resume_from_checkpoint: ResumeFrom = None,
              **schedule: Any) -> dict[str, float]:
        """Run the preference stage(s) and the policy phase(s); return the last metrics of both.

        A checkpoint follows every preference stage, and the policy learner checkpoints at its own
        boundaries; `resume_from_checkpoint` continues from any of them bit for bit. The policy learner's
        logger stays open for the whole run, so the `preference/*` metrics reach `metrics.jsonl`, wandb and
        TensorBoard with the policy phases' metrics, in one run.

        Args:
            checkpoint_dir: Write training checkpoints here (off when None).
            resume_from_checkpoint: A `checkpoint-*` directory to continue from exactly; True or "latest":
                the newest complete checkpoint in `checkpoint_dir` (a fresh start without one), as in
                `Learner.learn`.
            **schedule: `checkpoint_interval`, `checkpoint_total_limit` and `checkpoint_steps`, as in
                `Learner.learn`.
        """
        logger = self.policy.logger
        folders = [CheckpointManager(self.policy, checkpoint_dir).dir, logger.output_dir]
        with locked_folders(self.policy.dist, self.policy.run_id, folders) as lock:  # the policy phases share it
            return self._learn(checkpoint_dir, resume_from_checkpoint, lock, schedule)

    def _learn(self, checkpoint_dir: str | None, resume_from_checkpoint: ResumeFrom, lock: RunLock | None,
               schedule: dict[str, Any]) -> dict[str, float]:
        cfg = self.args
        iterations = getattr(cfg, "num_iterations", 1)
        resume = CheckpointManager(self.policy, checkpoint_dir).resolve_resume(resume_from_checkpoint)
        logger = self.policy.logger
        if resume is not None:
            self._restore(resume)
            logger.resume_wandb(self.policy.wandb_identity)  # continue the checkpoint's wandb run
            if lock is not None:
                lock.set_run_id(self.policy.run_id)  # now the checkpoint's run
        metrics: dict[str, float] = {}
        with logger.kept_open():
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

    # ----- what the policy learner calls: rewards and checkpoints ------------------------------------

    def relabel(self, rollout: Rollout) -> Rollout:
        """With a reward model, its score of each joint answer replaces the task reward (the policy phase).

        Single-turn only: the (optionally standardized) score of a joint answer is every agent's reward and
        return (`learners.preference_stage.relabelled`). Without one, `rollout` as it is.
        """
        if self.reward_model is None:
            return rollout
        return stage.relabelled(rollout, self.reward_model, self.reward_normalization)

    def state_dict(self) -> dict[str, Any]:
        """Preference data and history for checkpoints (strings, numbers and CPU tensors only)."""
        return {"iteration": self.iteration, "policy_phases": self.policy_phases, "shards": self.shards,
                "history": self.history, "normalization": list(self.reward_normalization or [])}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict()` returned (older checkpoints have no `policy_phases`: one per iteration)."""
        self.iteration = int(state["iteration"])
        self.policy_phases = int(state.get("policy_phases", self.iteration))
        self.shards = [list(s) for s in state["shards"]]
        self.history = [list(h) for h in state["history"]]
        self.reward_normalization = tuple(state["normalization"]) or None

    def checkpoint_modules(self) -> dict[str, torch.nn.Module]:
        """The frozen reward model, saved in the policy learner's checkpoints."""
        return {"reward_model": self.reward_model} if self.reward_model is not None else {}

    def _restore(self, path: str) -> None:
        """Rebuild the frozen reward model a checkpoint holds, then load everything (weights, pairs, counters)."""
        if os.path.isfile(os.path.join(os.path.expanduser(path), "models", "reward_model.safetensors")):
            self.reward_model = self.load_reward_model().eval().requires_grad_(False)
        self.policy.load_checkpoint(path)
        phase_end = self.args.num_train_epochs * (self.policy_phases + 1)
        self.policy.args.num_train_epochs = max(self.policy.epoch, phase_end)

    # ----- one preference stage (its steps: learners.preference_stage) -------------------------------

    def preference_stage(self) -> dict[str, float]:
        """Collect candidates, label and select pairs, train and freeze a fresh reward model.

        A stage without training pairs (every candidate tied) trains nothing: the previous reward model
        stays in use, or, before any exists, `learn()` skips this iteration's policy phase. Either way it
        warns and logs `preference/stage_without_pairs = 1` (CoMLRL 1.4.3 stops instead). The metrics go to
        the policy learner's logger, which writes them while `learn()` holds it open, and are returned.
        """
        cfg = self.args
        pairs, texts = self.collect_pairs(self._pair_scorer())
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
                candidate_scores = self.reward_model.score(texts)
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
        """Sample candidates for every task instance; return the selected pairs and all candidate texts.

        Pairs hold two different texts, each comparison once (`rewards.preferences`). With a `scorer`, every
        distinct text of a rollout batch (current and comparator candidates) is scored once, in one call, so
        equal texts tie exactly (`learners.preference_stage.collect_pairs`).
        """
        return stage.collect_pairs(self.policy, self.args, self.iteration, scorer, self._comparator_engine())

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

    def load_reward_model(self) -> RewardModel:
        """A fresh reward model from `reward_model_name` (backbone + a new scalar head) on its device.

        Loaded as `reward_model_config` says: float32 weights by default, under bf16 autocast with
        `mixed_precision="bf16"`; joint texts cut to `reward_max_length` tokens.
        """
        with hub_progress_hidden():
            return RewardModel.from_pretrained(self.reward_model_source, device=self.reward_device,
                                               freeze_backbone=self.args.reward_freeze_backbone,
                                               max_length=self.args.reward_max_length,
                                               **self.args.reward_model_loading())

    def train_reward_model(self, pairs: list[dict[str, Any]],
                           heldout: Sequence[dict[str, Any]] = ()) -> dict[str, float]:
        """Bradley-Terry training of the reward model on `pairs`; returns its `preference/reward_model_*` metrics.

        The loss, the train accuracy (as the last epoch scored its batches) and the accuracy on `heldout`
        (`learners.preference_stage.fit_reward_model`). The gradients are dropped after the last step.
        """
        return stage.fit_reward_model(self.reward_model, pairs, heldout, self.args, self.iteration)

    # ----- what MARLHFIter changes ------------------------------------------------------------------

    def _pair_scorer(self) -> RewardModel | None:
        """What labels the pairs besides the task reward: nothing (the task reward labels them)."""
        return None

    def _comparator_engine(self) -> RolloutEngine | None:
        """The comparator policy's engine: none (pairs come from the current agents' own candidates)."""
        return None

    def _replay_weights(self) -> list[float]:
        """Which shards this stage trains on: the newest only."""
        return replay_weights([len(s) for s in self.shards], "current")

    def _replay(self, shards: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The training pairs drawn from `shards` (the held-out comparisons removed): the newest shard."""
        return shards[-1]

    def _write_shard(self, pairs: list[dict[str, Any]]) -> None:
        """Keep a stage's pairs on disk: not in MARLHF."""


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
        """The frozen comparator policy's engine; none for `comparator_policy="current"`.

        Snapshots of the agents stay in memory (CPU), only those still needed; the engine comes from
        `learners.preference_stage.comparator_engine`.
        """
        cfg: MARLHFIterConfig = self.args
        if cfg.comparator_policy == "current":
            return None
        if cfg.comparator_policy in ("current_copy", "history"):
            self.history.append(stage.agent_snapshot(self.agents))
            self.history = self.history[-((cfg.comparator_history_k or 0) + 1):]
        return stage.comparator_engine(cfg, self.policy, self.history)

    def _replay_weights(self) -> list[float]:
        """Each shard's weight in the replay draw, as `preference_replay_mode` says (`replay_weights`)."""
        cfg: MARLHFIterConfig = self.args
        return replay_weights([len(s) for s in self.shards], cfg.preference_replay_mode, cfg.preference_replay_k,
                              cfg.preference_replay_lambda)

    def _replay(self, shards: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The replay's draw from `shards` (`learners.preference_stage.replay_pairs`)."""
        return stage.replay_pairs(shards, self.args, self.iteration)

    def _write_shard(self, pairs: list[dict[str, Any]]) -> None:
        """Write the stage's pairs under `preference_replay_dir`, one JSON file per iteration.

        A directory that is not empty at the first write gets a fresh `resume-*` subdirectory instead.
        """
        directory = self.args.preference_replay_dir
        if directory is None:
            return
        if not hasattr(self, "_replay_dir"):
            self._replay_dir = stage.replay_dir(directory)
        stage.write_shard(self._replay_dir, self.iteration, pairs)


MARLHFTrainer = MARLHF
MARLHFIterTrainer = MARLHFIter
