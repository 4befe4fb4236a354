"""`Learner`, the one shallow base class of every learner. It owns what every algorithm needs, nothing
algorithmic; each job has its module in this folder:

- construction (`Learner.__init__`, its steps in `construction.py`): the task (an env id, instance or factory,
  or `train_dataset` + `reward_func` as a `DatasetEnv`), seats, devices, agents (`learners.models`), one
  AdamW and LR schedule per model, the rollout engine and the logger;
- the `learn()` loop (`training.py`), which calls the learner's `step(roots)` once per batch of the seeded
  data order (`data.py`): collect a rollout, compute advantages, `update`, return metrics;
- evaluation (`evaluation.py`), `save_model()` and the training state of checkpoints (`saving.py`).

A learner driving another one (MARLHF drives its policy learner) sets `relabel`, a `Rollout -> Rollout`
function applied to every training rollout, and `wrapper`, whose `state_dict()` and
`checkpoint_modules()` join the checkpoints.
"""

from __future__ import annotations

import abc
import functools
import math
import uuid
from typing import Any, Callable, Sequence

import torch

from comlrl_env import TextParallelEnv
from learners.checkpointing.checkpoint import resume_checkpoint, save_checkpoint
from learners.checkpointing.manager import CheckpointManager, ResumeFrom
from learners.checkpointing.run_lock import locked_folders
from learners.checkpointing.state import TrainingState
from learners.loop import data, saving, training
from learners.loop.config import LearnerConfig
from learners.loop.curriculum import Curriculum, check_levels
from learners.loop.construction import (
    agent_optimizers,
    attach_lora,
    build_envs,
    check_eval_hooks,
    checked_config,
    open_logger,
    place_models,
    prepare_fixed_seats,
    reference_models,
    seat_devices,
    start_engine,
)
from learners.loop.evaluation import evaluate
from learners.loop.optim import lr_schedule
from learners.models.agents import agent_count, agents_by_model, load_agents, model_groups, model_name
from learners.models.fixed import Frozen, split_seats
from learners.parallel.distributed import Distributed
from learners.parallel.fsdp import Sharding
from learners.parallel.placement import check_shared_devices
from learners.rollout import Rollout, check_rollout_size
from learners.rollout.backends import generation_weights
from learners.rollout.fixed_seats import check_fixed_seats
from learners.rollout.scoring import Support, sampled_logprobs

__all__ = ["Learner", "LearnerConfig"]


class Learner(abc.ABC):
    """Base of MAGRPO, IAC and MAAC (and the policy learner inside MARLHF): builds the env and agents,
    runs `learn()`.

    Subclasses set `config_class` and implement `step(roots) -> dict[str, float]`: collect a rollout
    from the freshly reset environments `roots`, update on it, return metrics.
    """

    config_class: type[LearnerConfig] = LearnerConfig

    def __init__(
        self,
        *,
        env: str | TextParallelEnv | Callable[[], TextParallelEnv] | None = None,
        train_dataset: Sequence[dict[str, Any]] | None = None,
        reward_func: Callable[..., Any] | None = None,
        agent_model: Any = None,
        agents: Sequence[Any] | None = None,
        num_agents: int | None = None,
        tokenizer: Any = None,
        critic_model: Any = None,
        critics: Sequence[Any] | None = None,
        model_config: dict[str, Any] | None = None,
        formatters: Any = None,
        external_transition: Callable[..., Sequence[str]] | None = None,
        reward_processor: Callable[[float], float] | None = None,
        eval_env: str | TextParallelEnv | Callable[[], TextParallelEnv] | None = None,
        eval_dataset: Sequence[dict[str, Any]] | None = None,
        wandb_config: dict[str, Any] | None = None,
        callbacks: Sequence[Any] | None = None,
        eval_logger: Callable[..., list[dict[str, float]]] | None = None,
        eval_aggregator: Callable[..., dict[str, float]] | None = None,
        args: LearnerConfig | None = None,
    ) -> None:
        """Build the task, load the agents and everything that trains them; nothing trains until `learn()`.

        The task is `env`, or `train_dataset` scored by `reward_func`. The trained models are `agent_model`
        copied into `num_agents` seats, or `agents`, one entry per seat. The config, the arguments, the env,
        the seats, the devices and the size of one rollout are all checked before any model loads.

        Args:
            env: The task: a registered env id (built by `comlrl_env.make(id)` with the env's defaults; for other
                options pass the instance, e.g. `comlrl_env.make(id, num_turns=3)`), a `TextParallelEnv`, or a
                zero-argument factory returning one. Give `env` or `train_dataset`, not both.
            train_dataset: A dataset as the task: a `datasets.Dataset` or a list of dict rows, wrapped with
                `reward_func` in a `comlrl_env.DatasetEnv` whose task instance i is row i. The config's
                `num_turns`, `external_prompt_passthrough` and `early_termination_threshold` shape its episodes.
            reward_func: With a dataset (required then): the joint reward, called on each joint action with one
                list of completions per agent (and `prompts=`, `batch_items=` when it declares them; see
                `rewards.calling`); it returns the reward every agent gets, or one per agent. Unused with `env`,
                whose own rewards count.
            agent_model: The model every trained seat starts from: a Hugging Face id or a local model folder,
                loaded once per seat (with `peft_config`, once, shared by every seat's LoRA adapter). A loaded
                model object fills one seat only, unless `peft_config` is set; to share one model between seats
                (self-play), pass `agents=[model, model]`.
            agents: One entry per seat (`env.possible_agents` order), instead of `agent_model`. An id, a folder
                or a loaded model trains in its seat, and the same model object in several seats is self-play
                (one model, one optimizer). A fixed policy plays its seat but never trains:
                `learners.Frozen(model)`, a `FixedPolicy` such as `OpenSpielBot("random")`, or a callable.
                Given together with `agent_model`, every name must equal it.
            num_agents: Seats, fixed ones included; None: `len(agents)`, else `args.num_agents`, else 2. The env
                must have exactly this many.
            tokenizer: An id, a folder or a loaded tokenizer for every trained model, or a list with one per
                seat (None entries: the model's own). None: each model's own, loaded from its id or folder; loaded
                model objects need one. A `Frozen` seat without its own takes this one (or its list entry).
                A missing pad token falls back to EOS.
            critic_model: IAC and MAAC only (other learners raise): the model a critic starts from, an id, a
                folder or a loaded causal LM, which gets a fresh value head; IAC uses it for every agent's
                critic (a loaded model is copied for every agent after the first).
            critics: IAC and MAAC only, instead of `critic_model`: IAC's critics, one per trained agent; MAAC's
                one centralized critic, as a one-entry list.
            model_config: How models load: `dtype` (or `torch_dtype`), `attn_implementation`, `model_kwargs`
                (more `from_pretrained` arguments), `critic_model_kwargs` (the same for critics loaded from an id
                or folder), `special_tokens` (added to every tokenizer, the embeddings grown to fit) and, for MAAC,
                `critic_value_head_hidden_dim`. Other keys raise.
            formatters: With a dataset: how a row becomes a prompt, one callable `row -> str` for every agent or a
                list with one per agent; None: `row["prompt"]`. Unused with `env`.
            external_transition: With a dataset of `num_turns > 1` (required then): returns the next turn's
                prompts, one per agent, called as `external_transition(prompt=..., agent_completions=[...],
                num_agents=N, prompt_history_per_agent=..., response_history_per_agent=...)` (and
                `batch_item=row` when it declares it). Unused with `env`.
            reward_processor: With a dataset: applied to every reward `reward_func` returns (e.g. scaling); it
                must return a finite number. Unused with `env`.
            eval_env: The held-out task `evaluate()` plays, given as `env` is (an id, an env or a factory).
                None, and no `eval_dataset`: the training env.
            eval_dataset: A held-out dataset, wrapped as `train_dataset` is (the same `reward_func`, `formatters`,
                `external_transition` and `reward_processor`); give it or `eval_env`, not both.
            wandb_config: Log to Weights & Biases (rank 0 only; the run opens when `learn()` starts): `project`,
                `entity`, `name`, `tags`, `mode`, `id`, `resume`, ... (`learners.loop.logger`). None: no wandb.
            callbacks: Objects with any of `on_learn_begin(learner)`, `on_step_end(learner, metrics)` (after every
                rollout, with its metrics), `on_epoch_end(learner)` and `on_learn_end(learner)`. One with
                `state_dict()` and `load_state_dict()` is saved in checkpoints and restored on resume.
            eval_logger: Extra evaluation metrics, with `eval_aggregator`: at every evaluation it is called as
                `eval_logger(agent_completions_turns=..., batch_items=..., prompts=...)`, where
                `agent_completions_turns[a][i]` holds agent a's completions in episode i, turn by turn,
                `batch_items[i]` is episode i's task (its dataset row) and `prompts[i]` the first agent's first
                prompt; it returns a list of dicts of numbers (e.g. one per episode).
            eval_aggregator: Reduces `eval_logger`'s list: called as `eval_aggregator(rows, num_turns=...)`, it
                returns `{name: number}`, logged and returned as `eval/<name>`. Give both or neither.
            args: The learner's config: a `MAGRPOConfig`, `IACConfig` or `MAACConfig` (the class's `config_class`);
                None: its defaults.

        Raises:
            TypeError: `args` is not the learner's config class; `env` is not an id, an env or a factory; a model,
                tokenizer or `reward_func` of the wrong kind.
            ValueError: both or neither of `env` and `train_dataset`; only one of `eval_logger` and
                `eval_aggregator`; seat counts that disagree (`num_agents`, `agents`, `args.num_agents`, the env);
                critics for a learner without them; unknown `model_config` keys; a rollout that would sample more
                than `max_rollout_samples` completions.
            comlrl_env.EnvNotFound: `env` or `eval_env` is an id nobody registered (the message lists the ids).

        Example:
            ```python
            from learners import MAGRPO, MAGRPOConfig

            learner = MAGRPO(env="coop/LengthRatio-v1", agent_model="Qwen/Qwen2.5-0.5B", num_agents=2,
                             args=MAGRPOConfig(num_generations=4, num_train_epochs=2))
            learner.learn()
            learner.save_model("out")
            ```
        """
        # The config and the arguments: everything cheap is checked before any model loads.
        self.args = cfg = checked_config(args, self.config_class)
        check_eval_hooks(eval_logger, eval_aggregator)
        count = agent_count(num_agents, agents, cfg.num_agents)  # seats, fixed ones included
        cfg.check_per_agent(count)  # per-agent sampling values: one per seat
        sources, self.fixed, agent_tokenizer = split_seats(agents, tokenizer)  # trained sources, {seat: policy}
        self.dist = Distributed.from_env()
        # The envs, the seats and their devices.
        self.env, self.eval_env = build_envs(env, train_dataset, eval_env, eval_dataset, num_seats=count, cfg=cfg,
                                             reward_func=reward_func, formatters=formatters,
                                             external_transition=external_transition,
                                             reward_processor=reward_processor)
        if cfg.curriculum_threshold is not None:
            check_levels(self.env)  # before the models load
        self.num_seats, self.num_agents = count, count - len(self.fixed)  # seats; the trained agents
        self.seats = [s for s in range(count) if s not in self.fixed]  # the seat each trained agent plays
        self.model_index = model_groups(sources, self.num_agents)  # agent -> its model (self-play: shared)
        self.reward_func, self.callbacks = reward_func, list(callbacks or [])
        self.eval_logger, self.eval_aggregator = eval_logger, eval_aggregator
        by_seat = seat_devices(cfg, self.dist, self.num_seats)  # fixed seats too
        self.devices = [by_seat[s] for s in self.seats]
        self.sharding = Sharding(cfg, self.dist, self.devices)  # FSDP: under torchrun, one device per process
        self.model_config = dict(model_config or {})
        self.critic_model, self.critic_sources = critic_model, critics
        # The last checks before loading: shared devices, the learner's own, the size of one rollout, the fixed
        # seats' act() (a Frozen seat's model loads below).
        check_shared_devices(self.devices, self.model_agents(), [self.env.possible_agents[s] for s in self.seats])
        self._validate()  # MAGRPO resolves rollout_mode="auto" here
        check_rollout_size(self.env, cfg.seed, cfg.rollout_buffer_size, *self.rollout_plan(), cfg.max_rollout_samples)
        check_fixed_seats(self.env, {s: p for s, p in self.fixed.items() if not isinstance(p, Frozen)}, cfg.seed)
        # The models: agents, LoRA adapters, placement, reference copies, critics and heads, fixed seats.
        self.agents, self.tokenizers = self._load_agents(agent_model, sources, agent_tokenizer)
        self.agents = attach_lora(self.agents, cfg, self.model_index)
        named = sources if sources is not None else [agent_model] * self.num_agents
        self.agent_names = [model_name(a) for a in named]  # ids or dirs, recorded with exports
        place_models(self.agents, self.model_agents(), self.devices, self.sharding, cfg.gradient_checkpointing)
        self.reference_models = reference_models(self.agents, self.model_agents(), self.model_index, cfg,
                                                 self.sharding, self.num_seats, self.devices, self.seats)
        self.schedule_epochs: int | None = None  # LR schedule length; None: num_train_epochs (MARLHFIter: the run's)
        self._setup_models()
        prepare_fixed_seats(self.fixed, cfg, by_seat, self.model_config, tokenizer)
        # What trains them, the engine that samples from them, the run's counters and logger.
        self.optimizers = agent_optimizers(self.agents, self.model_agents(), cfg)
        self.schedulers = [self._scheduler(o) for o in self.optimizers]
        self.relabel: Callable[[Rollout], Rollout] | None = None  # MARLHF: its reward model's scores as rewards
        self.wrapper: Any = None  # a learner driving this one (MARLHF): its state joins checkpoints
        self.sharding.shard(self.checkpoint_modules(), self.checkpoint_optimizers()[0],
                            frozen=self.reference_models)  # FSDP: every trained module and its optimizer state
        self.engine = start_engine(cfg, self.agents, self.tokenizers, self.fixed, self.seats, self.optimizers,
                                   self.model_index)
        self._start_progress()
        self.logger = open_logger(cfg, self.dist, wandb_config, saving.run_config(self), self.run_id)
        self._seed_sampling()

    # ----- construction steps of the learner's own ------------------------------------------------

    def _load_agents(self, agent_model: Any, sources: list[Any] | None, tokenizer: Any) -> tuple[list[Any], list[Any]]:
        """The trained agents and one tokenizer per agent. With LoRA, homogeneous agents load one base model
        that all their adapters share."""
        cfg, count = self.args, self.num_agents
        shared_base = cfg.peft_config is not None and sources is None
        if shared_base and isinstance(tokenizer, (list, tuple)):
            tokenizer = tokenizer[0]
        agents, tokenizers = load_agents(agent_model, sources, (1 if shared_base else count) if sources is None
                                         else None, tokenizer, self.model_config,
                                         None if cfg.peft_config else self.sharding)
        return (agents * count, tokenizers * count) if shared_base else (agents, tokenizers)

    def _start_progress(self) -> None:
        """The run's id (rank 0's, on every rank) and its counters, all at zero."""
        self.run_id = self.dist.gather(uuid.uuid4().hex)[0]
        self.checkpoint_sequence = 0
        self.wandb_identity: dict[str, Any] | None = None  # the last wandb run's, kept for later checkpoints
        self.env_steps = 0  # joint actions played (the x-axis of every metric)
        self.epoch = 0
        self.batch_in_epoch = 0
        self.rollouts_done = 0
        self.optimizer_steps = 0  # per agent: one per minibatch of every update
        self.completions_sampled = 0  # per agent, in training rollouts
        self.last_rollout: Rollout | None = None
        self.flat_rollouts = 0  # rollouts in a row in which no group's returns differed
        cfg = self.args
        self.curriculum = (None if cfg.curriculum_threshold is None else  # the env at level 0 unless made higher
                           Curriculum(self.env, cfg.curriculum_threshold, cfg.curriculum_window))

    # ----- what a learner writes -------------------------------------------------

    def _validate(self) -> None:
        """Learner-specific checks that must run before models load (critics are rejected by default)."""
        if self.critic_model is not None or self.critic_sources is not None:
            raise ValueError(f"{type(self).__name__} has no critic: leave critic_model and critics unset "
                             "(IAC and MAAC take them).")

    def _setup_models(self) -> None:
        """Attach heads, load critics and their optimizers (runs after the agents load)."""

    def _seed_sampling(self) -> None:
        """Runs last in construction: seed what sampling draws from. The base leaves the RNGs as construction
        left them; MAGRPO seeds each rank here (IAC and MAAC do it at the end of `_setup_models`)."""

    def rollout_plan(self) -> tuple[int, str, str]:
        """`(num_generations, rollout_mode, joint_mode)` of this learner's training rollouts."""
        return self.args.num_generations, "parallel", "aligned"

    def model_agents(self) -> list[list[int]]:  # model m's optimizer is optimizers[m]
        return agents_by_model(self.model_index)

    @abc.abstractmethod
    def step(self, roots: list[TextParallelEnv]) -> dict[str, float]:
        """Roll out the reset environments `roots`, update the agents, return metrics."""

    # ----- the training loop -----------------------------------------------------

    def learn(
        self,
        checkpoint_dir: str | None = None,
        checkpoint_interval: int = 1,
        resume_from_checkpoint: ResumeFrom = None,
        checkpoint_total_limit: int | None = None,
        checkpoint_steps: int | None = None,
    ) -> dict[str, float]:
        """Train until `num_train_epochs` epochs are done; return the last training metrics merged with the
        last evaluation's (`train/*`, `perf/*` and `eval/*` keys). The loop is `learners.loop.training`.

        While it runs, the run holds a lock file (`.comlrl-run.lock`) in `checkpoint_dir` and `output_dir`: a
        second run started on either folder refuses at once, naming the first.

        Args:
            checkpoint_dir: Write training checkpoints here (off when None): at completed epochs
                (every `checkpoint_interval`), every `checkpoint_steps` rollouts, and at the end.
            checkpoint_interval: Epochs between checkpoints.
            resume_from_checkpoint: A `checkpoint-*` directory to continue from exactly; or True (or
                "latest"): the newest complete checkpoint in `checkpoint_dir`, and a fresh start when there is
                none, so a requeued job relaunches the same command (a run that had finished loads its final
                checkpoint and trains no more). Resuming continues the checkpoint's run (its run id), and drops
                that run's rows logged after the checkpoint from `output_dir`'s JSONL files.
            checkpoint_total_limit: Keep only this run's newest N checkpoints.
            checkpoint_steps: Also checkpoint every N rollouts, mid-epoch.

        Raises:
            CheckpointError: another live run holds a folder's lock; the checkpoint cannot be resumed; a save
                failed (another run's checkpoint at its path, a full or unwritable disk).
            ValueError: resume_from_checkpoint=True without checkpoint_dir; a bad schedule value.
        """
        ckpt = CheckpointManager(self, checkpoint_dir, checkpoint_interval, checkpoint_total_limit, checkpoint_steps)
        with locked_folders(self.dist, self.run_id, [ckpt.dir, self.logger.output_dir]) as lock:
            resume = ckpt.resolve_resume(resume_from_checkpoint)
            if resume is not None:
                auto = resume_from_checkpoint is True or resume_from_checkpoint == "latest"
                progress = ckpt.resume(resume, finished_ok=auto)
                self.logger.resume_wandb(self.wandb_identity)
                self.logger.drop_rows_after(self.run_id, progress["env_steps"])  # they are logged again
                if lock is not None:
                    lock.set_run_id(self.run_id)  # now the checkpoint's run
            ckpt.start()
            return training.run_epochs(self, ckpt)

    def train(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Alias of `learn()`: the name CoMLRL 1.4.3's trainers use."""
        return self.learn(*args, **kwargs)

    def collect(self, roots: list[TextParallelEnv], num_generations: int, rollout_mode: str = "parallel",
                joint_mode: str = "aligned") -> Rollout:
        """Play the reset `roots` to the end (training sampling), apply `relabel`, count into `env_steps`."""
        with generation_weights(self.engine.backend, self.sharding, self.agents):
            rollout = self.engine.collect(roots, num_generations, rollout_mode, joint_mode, self.args.discount)
        rollout.timings.update(self.engine.backend.finish_rollout())  # e.g. the seconds of weight sync
        if self.relabel is not None:
            rollout = self.relabel(rollout)
        self.env_steps += int(self.dist.sum(rollout.num_joint_actions))
        sampled = rollout.num_samples if rollout.acted is None else int(rollout.acted.sum()) // max(self.num_agents, 1)
        self.completions_sampled += int(self.dist.sum(sampled))  # per agent; a waiting agent's rows sample nothing
        self.last_rollout = rollout
        return rollout

    def evaluate(self, num_eval_samples: int | None = None, greedy: bool | None = None) -> dict[str, float]:
        """Play `num_eval_samples` episodes of `eval_env` with one sample per agent per turn, always under the
        task reward; log and return the `eval/*` metrics (see `learners.loop.evaluation.evaluate`)."""
        with generation_weights(self.engine.backend, self.sharding, self.agents):  # every rank; rank 0 evaluates
            return evaluate(self, num_eval_samples, greedy)

    # ----- export and the training state (checkpoints) ----------------------------------------

    def save_model(self, output_dir: str) -> None:
        """Write `output_dir/agent_{seat}/` for every trained seat (model + tokenizer, loadable by the Auto classes; a
        self-play model under each of its seats) and `comlrl_env.json`; rank 0 writes (FSDP: gathered from all)."""
        if not self.dist.is_main and not self.sharding.enabled:  # weights are identical on every rank
            return self.dist.barrier()
        saving.save_agents(self, output_dir)
        self._save_extra_models(output_dir)
        saving.write_manifest(self, output_dir)
        self.dist.barrier()

    def _save_extra_models(self, output_dir: str) -> None:
        """Critics, value heads, reward models: written by the learners that have them."""

    def training_state(self, epoch: int | None = None) -> TrainingState:
        """Everything a checkpoint holds, as plain data; the data order fingerprinted at `epoch` (default: now)."""
        return saving.training_state(self, epoch)

    def save_checkpoint(self, path: str) -> str:
        """Write the full training state to `path` (see `learners.checkpoint`); returns the path."""
        if self.logger.run is not None:  # else the identity of the last run, which may have closed
            self.wandb_identity = self.logger.wandb_identity()
        return save_checkpoint(path, self.training_state())

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        """Restore the full training state from `path`; returns the progress counters."""
        restored = resume_checkpoint(path, functools.partial(saving.state_to_resume, self))
        progress = restored["progress"]
        self.epoch, self.batch_in_epoch = progress["epoch"], progress["batch_in_epoch"]
        self.rollouts_done, self.env_steps = progress["rollouts_done"], progress["env_steps"]
        self.run_id, self.checkpoint_sequence = restored["run_id"], restored["sequence"]
        self.logger.run_id = self.run_id
        self.wandb_identity = restored["wandb"]
        return progress

    def seat_name(self, a: int) -> str:
        """`agent_{seat}`: the name trained agent `a` is saved under (export dirs, checkpoint modules), by the
        seat it plays, so `agent_1/` is always the policy that played seat 1."""
        return f"agent_{self.seats[a]}"

    def checkpoint_modules(self) -> dict[str, torch.nn.Module]:
        """Every trained module by a stable name: each model under its first seat (`agent_{seat}`), its
        frozen reference copy (`reference_{seat}`); learners with critics or heads add theirs."""
        firsts = [agents[0] for agents in self.model_agents()]
        modules = {self.seat_name(a): self.agents[a] for a in firsts}
        if self.reference_models:
            modules.update({f"reference_{self.seats[a]}": self.reference_models[a] for a in firsts})
        if self.wrapper is not None:
            modules.update(self.wrapper.checkpoint_modules())
        return modules

    def checkpoint_optimizers(self) -> tuple[list[torch.optim.Optimizer], list[Any]]:
        """Optimizers and schedulers, in a stable order."""
        return list(self.optimizers), list(self.schedulers)

    def extra_state(self) -> dict[str, Any]:
        """Learner-specific state for checkpoints: the step and completion counters, and the wrapper's state."""
        state: dict[str, Any] = {"counters": [self.optimizer_steps, self.completions_sampled]}
        if self.curriculum is not None:
            state["curriculum"] = self.curriculum.state_dict()
        return {**state, "wrapper": self.wrapper.state_dict()} if self.wrapper is not None else state

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state()` returned (older checkpoints have no counters: they restart at 0)."""
        self.optimizer_steps, self.completions_sampled = state.get("counters", [0, 0])
        if self.curriculum is not None and "curriculum" in state:
            self.curriculum.load_state_dict(state["curriculum"])
        if self.wrapper is not None and "wrapper" in state:
            self.wrapper.load_state_dict(state["wrapper"])

    # ----- data order and helpers for subclasses ------------------------------------

    def epoch_size(self, env: TextParallelEnv) -> int:
        """Episodes per epoch of `env` under this config (`learners.loop.data.epoch_size`)."""
        return data.epoch_size(env, self.args.episodes_per_epoch)

    @property
    def batches_per_epoch(self) -> int:
        """Rollouts per training epoch."""
        return math.ceil(self.epoch_size(self.env) / self.args.rollout_buffer_size)

    def epoch_order(self, env: TextParallelEnv, epoch: int, limit: int | None = None,
                    shuffle: bool | None = None) -> list[tuple[int, int | None]]:
        """`(reset seed, task index or None)` of each episode of `epoch` (-1: evaluation) under this config."""
        size = limit if limit is not None else self.epoch_size(env)
        return data.epoch_order(env, self.args.seed, epoch, size, self.args.shuffle if shuffle is None else shuffle)

    def minibatches(self, n: int, pass_index: int = 0) -> list[torch.Tensor]:
        """This rank's minibatches of its `n` local items (groups or samples) for one pass over a rollout.

        Each holds this rank's share of `train_batch_size` (which counts the global minibatch), in the
        seeded order of `learners.loop.data.minibatch_order`, padded with empty ones so all ranks step together.
        """
        size = self.args.train_batch_size // self.dist.world_size if self.args.train_batch_size else max(n, 1)
        chunks = data.minibatch_order(n, size, self.args.seed, self.rollouts_done, pass_index)
        steps = self.dist.max(len(chunks))
        self.optimizer_steps += steps  # each minibatch is one optimizer step of every model
        return chunks + [torch.zeros(0, dtype=torch.long)] * (steps - len(chunks))

    def old_logprobs(self, a: int, rollout: Rollout) -> torch.Tensor:
        """log pi_old of agent `a`'s sampled tokens `(S, T)`: as sampled, or else one batched no-grad forward."""
        samples = rollout.samples[a]
        if samples.logprobs is not None:
            return samples.logprobs
        with self.sharding.gathered([self.agents[a]]):  # FSDP: ranks may score different numbers of rows
            return sampled_logprobs(self.agents[a], samples, temperature=self.engine.backend.support(a))

    def scoring_supports(self) -> list[Support]:
        """The distribution each trained agent's tokens are scored under: its generation backend's
        (`GenerationBackend.support`: the seat's `logprob_temperature_of`, and with vLLM its top-k/top-p)."""
        return [self.engine.backend.support(a) for a in range(self.num_agents)]

    def _scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        """`lr_schedule` over `schedule_epochs` (else `num_train_epochs`) epochs, a length read at every step:
        a resume that raises `num_train_epochs`, and MARLHFIter, keep one schedule over the whole run."""
        per_epoch, cfg = self.batches_per_epoch, self.args
        return lr_schedule(optimizer, cfg.lr_scheduler_type, cfg.warmup_steps,
                           lambda: (self.schedule_epochs or cfg.num_train_epochs) * per_epoch)
