"""MARLHF's settings: the policy learner's config nested in `policy_args`, plus the preference fields.

`MARLHFConfig` extends `LearnerConfig` (the fields every learner shares: epochs, sampling, optimization,
...) with the reward-model and preference fields. The policy learner's own fields (MAGRPO's
`num_generations`, `advantage_mode`, ...; IAC's and MAAC's critic fields) live in `policy_args`, a
`MAGRPOConfig`, `IACConfig` or `MAACConfig` as `rl_algorithm` says; left None, it is that class's
defaults, so an IAC backend gets IAC's defaults. The flat spelling of the reference library, CoMLRL 1.4.3
(whose `MARLHFTrainer` API the learners mirror; "the reference" below), still works:
`MARLHFConfig(rl_algorithm="iac", critic_learning_rate=1e-5, num_generations=2)` puts those fields into
`policy_args`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, ClassVar

import torch

from learners.actor_critic import IAC, MAAC, IACConfig, MAACConfig
from learners.loop.config import LearnerConfig, canonicalize
from learners.loop.learner import Learner
from learners.models.agents import check_model_source
from learners.reinforce import MAGRPO, MAGRPOConfig
from learners.rollout.settings import Number
from rewards.preferences import PAIR_SELECTIONS

__all__ = ["MARLHFConfig", "MARLHFIterConfig", "RL_ALGORITHMS"]

RL_ALGORITHMS: dict[str, tuple[type[Learner], str | None]] = {
    "magrpo": (MAGRPO, "mean"), "mareinforce": (MAGRPO, "raw"), "maremax": (MAGRPO, "max"), "marloo": (MAGRPO, "rloo"),
    "iac": (IAC, None), "maac": (MAAC, None),
}
"""Policy learners by name, with the advantage mode each fixes (MAGRPO's)."""
REWARD_MODEL_KEYS = frozenset({"dtype", "torch_dtype", "attn_implementation", "model_kwargs"})
"""The keys `MARLHFConfig.reward_model_config` accepts."""
SHARED_FIELDS = frozenset(f.name for f in dataclasses.fields(LearnerConfig))
BACKEND_FIELDS = frozenset(f.name for cls in (MAGRPOConfig, IACConfig, MAACConfig)
                           for f in dataclasses.fields(cls)) - SHARED_FIELDS
"""Fields of a policy learner's config that MARLHFConfig also accepts flat, and moves into `policy_args`."""


def _accepts_backend_fields(cls: type) -> type:
    """Let `cls(...)` take the policy learners' own fields flat (the reference library's spelling): they
    are set aside before the dataclass `__init__` and merged into `policy_args` by `__post_init__`
    (`flat_fields` tells the configs' unknown-field check to accept them)."""
    init = cls.__init__
    cls.flat_fields = BACKEND_FIELDS

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        self.flat_backend_fields = {k: kwargs.pop(k) for k in list(kwargs) if k in BACKEND_FIELDS}
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


@_accepts_backend_fields
@dataclasses.dataclass
class MARLHFConfig(LearnerConfig):
    """MARLHF settings: the shared learner fields, the policy learner's config, and the preference fields."""

    rl_algorithm: str = "magrpo"
    """Policy learner: magrpo, mareinforce (raw), maremax (max), marloo (rloo), iac or maac."""
    policy_args: MAGRPOConfig | IACConfig | MAACConfig | None = None
    """The policy learner's own settings, an instance of `rl_algorithm`'s config class; None: its defaults.
    Its shared (`LearnerConfig`) fields must stay at their defaults: set those on this config."""
    critic_model_name: str | None = None
    """IAC/MAAC backend: the critics' model id or dir when no `critic_model` is passed; None: the first agent's."""
    reward_model_name: str | None = None
    """Hub id or local causal-LM dir of the reward model's backbone; None: the first agent's id."""
    reward_model_device: str | None = None
    """Device of the reward model; None: the first agent's device (never a hard-coded GPU)."""
    reward_model_config: dict[str, Any] | None = None
    """How the reward model loads, as `model_config` for the agents: `dtype` (or `torch_dtype`),
    `attn_implementation`, `model_kwargs`. Its `dtype` defaults to "float32" (full-precision weights, whatever
    the checkpoint's dtype: in pure bf16 most updates at lr 1e-5 round away); "auto" keeps the checkpoint's.
    With `mixed_precision="bf16"` it runs under bf16 autocast over those weights."""
    reward_learning_rate: float = 1e-5
    """AdamW learning rate of the reward model."""
    reward_num_train_epochs: int = 1
    """Passes over the training pairs per preference stage."""
    reward_train_batch_size: int = 8
    """Pairs per reward-model optimizer step."""
    reward_max_length: int | None = None
    """Cut joint texts to this many tokens for the reward model: every header stays and each block (observation,
    agent answer) keeps its last tokens, up to a fair share (`rewards.encode_joint_texts`); None keeps them whole."""
    reward_freeze_backbone: bool = False
    """Train only the reward head."""
    reward_normalization: bool = False
    """Standardize reward-model scores with the mean/std of the preference candidates' scores."""
    reward_heldout_fraction: float = 0.1
    """Distinct comparisons held out to measure the reward model's accuracy each stage (none below 10), drawn
    before replay: no training pair repeats a held-out pair's two texts."""
    preference_num_candidates: int = 8
    """Joint answers sampled per task instance to form pairs (the reference defaulted to 80)."""
    preference_pairs_per_sample: int | None = 16
    """Pairs kept per task instance after `pair_selection`; None keeps every pair."""
    pair_selection: str = "reward_gap"
    """"reward_gap" (largest gaps first), "random" or "all" (in index order)."""
    collaboration_mode: str = "decentralized"
    """Only "decentralized" (each agent its own model, the reference's default) is supported."""
    dpo_beta: float = 0.1
    """Accepted for compatibility with the reference config; MARLHF does not use it."""
    use_environment_step: bool = True
    """Accepted for compatibility with the reference config (its MADPO step counter); unused."""
    environment_steps_per_pair: int = 2
    """Accepted for compatibility with the reference config (its MADPO step counter); unused."""

    NUMBERS: ClassVar[dict[str, Number]] = {
        "reward_learning_rate": Number(low=0, low_open=True),
        "reward_num_train_epochs": Number(low=1, integer=True),
        "reward_train_batch_size": Number(low=1, integer=True),
        "reward_max_length": Number(low=1, integer=True, optional=True, fix="None keeps joint texts whole."),
        "reward_heldout_fraction": Number(low=0, high=1, high_open=True),
        "preference_num_candidates": Number(low=2, integer=True, why=" to form a pair"),
        "preference_pairs_per_sample": Number(low=1, integer=True, optional=True, fix="None keeps every pair."),
        "dpo_beta": Number(low=0),
        "environment_steps_per_pair": Number(low=1, integer=True),
    }
    """The rule of each numeric field of MARLHF's own (`Number`), checked at construction."""

    def __post_init__(self) -> None:
        super().__post_init__()
        canonicalize(self, "rl_algorithm", RL_ALGORITHMS)
        self.policy_args = self._policy_args(getattr(self, "flat_backend_fields", {}))
        if self.num_turns != 1:
            raise ValueError(f"preference learning scores single-turn joint answers; num_turns must be 1, got {self.num_turns}.")
        if self.sharding == "fsdp":
            raise ValueError("sharding='fsdp' needs torchrun, and MARLHF runs as one process (each rank would learn "
                             "its own reward model); use sharding='none', or LoRA (peft_config) to fit larger agents.")
        if self.collaboration_mode != "decentralized":
            raise ValueError(f"collaboration_mode {self.collaboration_mode!r} is not supported; use 'decentralized'.")
        canonicalize(self, "pair_selection", PAIR_SELECTIONS)
        self._check_reward_model_config()
        if self.pair_selection == "all" and self.preference_pairs_per_sample is not None:
            raise ValueError("pair_selection='all' keeps every pair: set preference_pairs_per_sample=None.")

    def check_model_sources(self) -> None:
        """Refuse, before any model loads, a model id or dir field (`reward_model_name`, `critic_model_name`,
        MARLHFIter's `comparator_model_name` and `comparator_agents`) that is blank, not a string, or a path
        with no folder behind it; the error names the field and the fix."""
        agents = getattr(self, "comparator_agents", None)
        if agents is not None and (isinstance(agents, (str, bytes)) or not isinstance(agents, (list, tuple))):
            raise TypeError(f"comparator_agents must be a list of model ids or dirs, got {agents!r}; use "
                            "comparator_model_name= for one.")
        named = [(name, getattr(self, name, None)) for name in ("reward_model_name", "critic_model_name",
                                                                "comparator_model_name")]
        for label, source in named + [(f"comparator_agents[{i}]", s) for i, s in enumerate(agents or [])]:
            if source is None and not label.startswith("comparator_agents"):
                continue
            if source is not None and not isinstance(source, (str, os.PathLike)):
                raise TypeError(f"{label} must be a model id or dir (a str), got {type(source).__name__}.")
            check_model_source(source, label)

    def _check_reward_model_config(self) -> None:
        conf = self.reward_model_config
        if conf is None:
            return
        if not isinstance(conf, dict):
            raise TypeError(f"reward_model_config must be a dict or None, got {type(conf).__name__}.")
        unknown = sorted(set(conf) - REWARD_MODEL_KEYS)
        if unknown:
            raise ValueError(f"reward_model_config has unknown keys {unknown}; known keys: {sorted(REWARD_MODEL_KEYS)}.")
        dtype = conf.get("dtype", conf.get("torch_dtype"))
        if dtype is not None and dtype != "auto" and not isinstance(getattr(torch, str(dtype), dtype), torch.dtype):
            raise ValueError(f"reward_model_config dtype {dtype!r} is not a torch dtype; use e.g. 'float32', "
                             "'bfloat16' or 'auto' (the checkpoint's).")

    def reward_model_loading(self) -> dict[str, Any]:
        """`RewardModel.from_pretrained` arguments from `reward_model_config` and `mixed_precision`."""
        conf = self.reward_model_config or {}
        kwargs = dict(conf.get("model_kwargs") or {})
        if "attn_implementation" in conf:
            kwargs["attn_implementation"] = conf["attn_implementation"]
        return {"dtype": conf.get("dtype", conf.get("torch_dtype", "float32")), "model_kwargs": kwargs,
                "autocast_dtype": torch.bfloat16 if self.mixed_precision == "bf16" else None}

    def _policy_args(self, flat: dict[str, Any]) -> LearnerConfig:
        """The policy learner's config: `policy_args` (or its class's defaults), then the flat backend fields,
        then this config's shared fields and the advantage mode `rl_algorithm` fixes."""
        learner, mode = RL_ALGORITHMS[self.rl_algorithm]
        cls = learner.config_class
        nested = self.policy_args if self.policy_args is not None else cls()
        if type(nested) is not cls:
            raise TypeError(f"rl_algorithm={self.rl_algorithm!r} takes policy_args={cls.__name__}(...), "
                            f"got {type(nested).__name__}.")
        default = cls()
        moved = sorted(k for k in SHARED_FIELDS if getattr(nested, k) not in (getattr(default, k), getattr(self, k)))
        if moved:
            raise ValueError(f"policy_args sets {moved}, which every learner shares: set them on "
                             f"{type(self).__name__} itself (it passes them to the policy learner).")
        unknown = sorted(set(flat) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"{unknown} do not apply to rl_algorithm={self.rl_algorithm!r} ({cls.__name__}).")
        values = {f.name: getattr(nested, f.name) for f in dataclasses.fields(cls)}
        values.update(flat)
        values.update({k: getattr(self, k) for k in SHARED_FIELDS})
        if mode is not None:
            values["advantage_mode"] = mode
        return cls(**values)

    def policy_config(self) -> tuple[type[Learner], LearnerConfig]:
        """The policy learner's class and its config (`policy_args`)."""
        return RL_ALGORITHMS[self.rl_algorithm][0], self.policy_args


@_accepts_backend_fields
@dataclasses.dataclass
class MARLHFIterConfig(MARLHFConfig):
    """MARLHFIter settings: MARLHF's, plus iterations, replay and comparator policies."""

    num_iterations: int = 6
    """Preference-then-policy iterations; counts the whole run, also on resume."""
    num_train_epochs: int = 2
    """Policy epochs per iteration."""
    reward_num_train_epochs: int = 2
    preference_pairs_per_sample: int | None = 4
    preference_scoring_reward: str = "task"
    """Label pairs with the task reward ("task") or the previous iteration's reward model ("reward_model")."""
    preference_replay_mode: str = "current"
    """Which iterations' pairs train the reward model: current, nearest_k, all_history or lambda_decay
    (see `replay_weights`)."""
    preference_replay_k: int | None = None
    """nearest_k: the newest k non-empty iterations' pairs."""
    preference_replay_lambda: float | None = None
    """lambda_decay: weight (1 - lambda) lambda^age per iteration's pairs, in [0, 1]."""
    preference_replay_sample_size: int | None = None
    """Pairs drawn from the replay per iteration; None: this iteration's pair count."""
    preference_replay_dir: str | None = None
    """Write each iteration's pairs as JSON here (a fresh resume-* subdirectory when resuming into a non-empty one)."""
    comparator_policy: str = "current"
    """Who the current agents are compared with: their own samples ("current"), a frozen copy taken at the
    iteration's start ("current_copy"), the agents of `comparator_history_k` iterations ago ("history"),
    or fixed models (`comparator_model_name` / `comparator_agents`, "model")."""
    comparator_model_name: str | None = None
    """comparator_policy="model": one model id or dir for every agent's comparator."""
    comparator_agents: list[str] | None = None
    """comparator_policy="model": one comparator model id or dir per agent."""
    comparator_num_candidates: int | None = None
    """Comparator samples per task instance, each matched with the current candidate of its index, so at most
    `preference_num_candidates`; None: `preference_num_candidates`."""
    comparator_history_k: int | None = None
    """comparator_policy="history": compare with the agents of this many iterations ago (default 1)."""

    NUMBERS: ClassVar[dict[str, Number]] = {
        "num_iterations": Number(low=1, integer=True),
        "preference_replay_k": Number(low=1, integer=True, optional=True),
        "preference_replay_lambda": Number(low=0, high=1, optional=True),
        "preference_replay_sample_size": Number(low=1, integer=True, optional=True,
                                                fix="None draws this iteration's pair count."),
        "comparator_num_candidates": Number(low=1, integer=True, optional=True,
                                            fix="None uses preference_num_candidates."),
        "comparator_history_k": Number(low=1, integer=True, optional=True),
    }
    """The rule of each numeric field of MARLHFIter's own (`Number`), checked at construction."""

    def __post_init__(self) -> None:
        super().__post_init__()
        canonicalize(self, "preference_scoring_reward", ("task", "reward_model"))
        canonicalize(self, "preference_replay_mode", ("current", "nearest_k", "all_history", "lambda_decay"))
        mode = self.preference_replay_mode
        if mode == "nearest_k" and self.preference_replay_k is None:
            raise ValueError("preference_replay_mode='nearest_k' needs preference_replay_k >= 1.")
        if mode == "current" and self.preference_replay_k not in (None, 1):
            raise ValueError("preference_replay_k only applies to nearest_k (current accepts None or 1).")
        if mode == "lambda_decay" and self.preference_replay_lambda is None:
            raise ValueError("preference_replay_mode='lambda_decay' needs preference_replay_lambda in [0, 1].")
        canonicalize(self, "comparator_policy", ("current", "current_copy", "history", "model"))
        comparator = self.comparator_policy
        has_models = self.comparator_model_name is not None or self.comparator_agents is not None
        if comparator == "model" and not has_models:
            raise ValueError("comparator_policy='model' needs comparator_model_name or comparator_agents.")
        if comparator != "model" and has_models:
            raise ValueError(f"comparator_model_name / comparator_agents only apply to comparator_policy='model', "
                             f"not {comparator!r}.")
        if self.comparator_history_k is not None and comparator != "history":
            raise ValueError("comparator_history_k only applies to comparator_policy='history'.")
        if comparator == "history" and self.comparator_history_k is None:
            self.comparator_history_k = 1
        if (self.comparator_num_candidates or 0) > self.preference_num_candidates:
            raise ValueError(f"comparator_num_candidates={self.comparator_num_candidates} exceeds "
                             f"preference_num_candidates={self.preference_num_candidates}: each comparator sample "
                             "is matched with the current candidate of the same index, so the extra ones would be "
                             "generated and thrown away. Set it <= preference_num_candidates (None: equal).")

