"""IAC's and MAAC's settings (`learners.actor_critic` holds the learners): the fields both share
(`ActorCriticConfig`), then each one's own. Every field of the `IACConfig` and `MAACConfig` of the reference
library, CoMLRL 1.4.3 (whose `IACTrainer` and `MAACTrainer` API the learners mirror; "the reference" below),
is accepted with its meaning.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import ClassVar

from learners.loop.config import LearnerConfig, canonicalize
from learners.rollout.settings import Number

__all__ = ["ActorCriticConfig", "IACConfig", "MAACConfig"]


class DefaultRate(float):
    """A learning rate left at its default: equal to the float it holds, and told apart from the same number
    given by the user, so a setting that cannot apply warns whenever it was set (`IACConfig`)."""

    def __repr__(self) -> str:
        return float.__repr__(self)

    def __deepcopy__(self, memo: dict) -> "DefaultRate":
        return self


@dataclasses.dataclass
class ActorCriticConfig(LearnerConfig):
    """Fields shared by IAC and MAAC (the reference's names and meanings)."""

    num_train_epochs: int = 40
    """Passes over the task instances (the reference's actor-critic default)."""
    num_generations: int = 1
    """Independent episodes per task instance (parallel copies); 1 as in the reference."""
    rollout_buffer_size: int = 8
    """Task instances rolled out together (the reference's actor-critic default)."""
    top_k: int | None = None
    """Top-k sampling; None disables it (the reference's actor-critic default)."""
    critic_learning_rate: float | None = DefaultRate(5e-6)
    """AdamW learning rate of the critics; None uses `agent_learning_rate`. Unused by IAC with
    `use_separate_critic=False`: the actor's optimizer trains its value head (IACConfig warns when it is set)."""
    critic_type: str = "v"
    """"v": V(s) at the last prompt token; "q": Q(s, a) at the last completion token."""
    value_loss_coef: float = 0.6
    """Weight of the value loss: added to the policy loss for a shared head; scales a critic's own loss."""
    value_clip_range: float | None = 0.2
    """Clip the new value to V_old +- this in the critic loss (every critic type); None disables."""
    advantage_normalization: bool = True
    """Normalize advantages per agent and turn over the rows at which the agent moved (population std,
    floored at 1e-6; `normalize_per_turn`). A lone row normalizes to 0: keep num_generations *
    rollout_buffer_size >= 2."""
    gae_lambda: float = 0.95
    """GAE(lambda) for multi-turn episodes; 0 reproduces the reference's TD(0) targets."""
    ppo_epochs: int = 1
    """Passes over each rollout; more than one (or several minibatches) uses the clipped ratio."""
    clip_range: float = 0.2
    """PPO clipping of the ratio pi / pi_old when a rollout feeds several optimizer steps."""
    length_normalization: bool = False
    """Average token terms per completion instead of summing them (the reference sums)."""
    critic_devices: str | list[str] | None = None
    """Device of the critic(s); None: the agents' devices."""

    NUMBERS: ClassVar[dict[str, Number]] = {
        "num_generations": Number(low=1, integer=True),
        "critic_learning_rate": Number(low=0, low_open=True, optional=True, fix="None uses agent_learning_rate."),
        "value_loss_coef": Number(low=0, low_open=True),
        "value_clip_range": Number(low=0, low_open=True, optional=True, fix="None disables value clipping."),
        "gae_lambda": Number(low=0, high=1),
        "ppo_epochs": Number(low=1, integer=True),
        "clip_range": Number(low=0, low_open=True),
    }
    """The rule of each numeric field of the actor-critic learners' own (`Number`), checked at construction."""

    def __post_init__(self) -> None:
        super().__post_init__()
        canonicalize(self, "critic_type", ("v", "q"))
        if self.advantage_normalization and self.num_generations * self.rollout_buffer_size < 2:
            raise ValueError(
                f"num_generations={self.num_generations} and rollout_buffer_size={self.rollout_buffer_size} give "
                "each agent one row per turn, which advantage_normalization turns into an advantage of exactly 0: "
                "the actors would never learn. Make num_generations * rollout_buffer_size >= 2, or set "
                "advantage_normalization=False.")


@dataclasses.dataclass
class IACConfig(ActorCriticConfig):
    """IAC settings; every field of the reference `IACConfig` is accepted with its meaning."""

    use_separate_critic: bool = True
    """True: one critic LLM per agent; False: a value head on each actor's backbone."""
    value_head_hidden_dim: int | None = None
    """Hidden size of the shared (actor-backbone) value head; None: a linear head."""
    critic_value_head_hidden_dim: int | None = None
    """Hidden size of the separate critics' value heads; None: a linear head."""

    NUMBERS: ClassVar[dict[str, Number]] = {
        "value_head_hidden_dim": Number(low=1, integer=True, optional=True, fix="None gives a linear head."),
        "critic_value_head_hidden_dim": Number(low=1, integer=True, optional=True, fix="None gives a linear head."),
    }
    """The rule of each numeric field of IAC's own (`Number`), checked at construction."""

    def __post_init__(self) -> None:
        super().__post_init__()
        given = self.critic_learning_rate is not None and not isinstance(self.critic_learning_rate, DefaultRate)
        if not self.use_separate_critic and given:
            warnings.warn(f"critic_learning_rate={self.critic_learning_rate!r} is unused with "
                          "use_separate_critic=False: each value head sits on its actor's backbone and the actor's "
                          "optimizer trains it at agent_learning_rate, its loss weighted by value_loss_coef. Leave "
                          "critic_learning_rate unset, or set use_separate_critic=True.", UserWarning, stacklevel=3)


@dataclasses.dataclass
class MAACConfig(ActorCriticConfig):
    """MAAC settings; the critic head size comes from `model_config["critic_value_head_hidden_dim"]`."""

    critic_max_length: int | None = None
    """Tokens of the joint text the centralized critic reads, cut block by block as the reward model's (each
    observation and answer keeps its header and a fair share of its end); None: all of it. Separate from
    `max_prompt_length` (one agent's prompt): the joint text holds every agent's."""

    NUMBERS: ClassVar[dict[str, Number]] = {
        "critic_max_length": Number(low=1, integer=True, optional=True, fix="None lets the critic read all of it."),
    }
    """The rule of each numeric field of MAAC's own (`Number`), checked at construction."""
