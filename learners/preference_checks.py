"""What MARLHF resolves and checks at construction, before its policy learner loads any model.

`MARLHF.__init__` calls these in order: the reward model's source (`reward_source`), the env built once and
refused unless it plays one turn (`single_turn_env`), `reward_max_length` against the shortest joint text that
keeps every agent's answer (`check_reward_max_length`, from the reward model's tokenizer alone), and the
critics' default source for an IAC or MAAC policy learner (`default_critic`). Each error names the value and
the fix.
"""

from __future__ import annotations

from typing import Any, Sequence

from transformers import AutoTokenizer

from comlrl_env import TextParallelEnv
from learners.actor_critic import IAC, MAAC
from learners.loop.config import LearnerConfig
from learners.loop.data import build_env
from learners.loop.learner import Learner
from learners.models.agents import agent_count, hub_progress_hidden, model_name
from learners.models.fixed import split_seats
from learners.preference_config import MARLHFConfig
from rewards.models import MIN_ANSWER_TOKENS, min_joint_length

__all__ = ["check_reward_max_length", "default_critic", "reward_source", "single_turn_env"]


def reward_source(cfg: MARLHFConfig, agents: Sequence[Any] | None, agent_model: Any) -> str:
    """The reward model's id or dir: `reward_model_name`, else the first agent's id (of `agents`, else of
    `agent_model`); a ValueError when the agents are model objects without one."""
    source = cfg.reward_model_name
    if source is None:
        names = agents or [agent_model]
        source = model_name(names[0]) if names and names[0] is not None else None
        if source is None:
            raise ValueError("reward_model_name is required when the agents are model objects without an id: "
                             "set MARLHFConfig(reward_model_name='id or dir').")
    return source


def single_turn_env(env: Any, cfg: MARLHFConfig, learner: str) -> TextParallelEnv:
    """The env that `env` names, is or builds (`learners.loop.data.build_env`), refused unless it plays one turn.

    Built here, once, the env is what the policy learner gets, so its turn count is checked before any model
    loads; `learner` (the class's name) opens the message.
    """
    # The dataset arguments are unused for an env: a dataset task plays the config's num_turns, held at 1.
    built = build_env(env, None, what="env", reward_func=None, num_agents=0, formatters=None, transition=None,
                      reward_processor=None, cfg=cfg)
    if built.num_turns != 1:
        raise ValueError(
            f"{learner} trains against a reward model that scores single-turn joint answers, but this env plays "
            f"up to {built.num_turns} turns (env.num_turns={built.num_turns}). Use an env with one turn "
            "(comlrl_env.make(id, num_turns=1), where the task allows it), or a learner without a reward model "
            "(MAGRPO, IAC or MAAC) for several turns."
        )
    return built


def check_reward_max_length(cfg: MARLHFConfig, source: str, num_agents: int | None,
                            agents: Sequence[Any] | None) -> None:
    """Refuse a `reward_max_length` below `rewards.models.min_joint_length` for the reward model's tokenizer
    (loaded from `source`, no weights) and the trained agents among `num_agents` seats or `agents`.

    Joint texts that short would fail at their first scoring, after the agents and a preference stage's
    candidates were paid for.
    """
    limit = cfg.reward_max_length
    if limit is None:
        return
    trained = agent_count(num_agents, agents, cfg.num_agents) - len(split_seats(agents, None)[1])
    with hub_progress_hidden():
        tokenizer = AutoTokenizer.from_pretrained(source)
    # Joint texts name the trained agents' answers agent_0 .. agent_{n-1} (rewards.models.joint_text).
    need = min_joint_length(tokenizer, [f"agent_{i}" for i in range(trained)])
    if limit < need:
        raise ValueError(
            f"reward_max_length={limit} is too short for joint texts of {trained} agents: with the tokenizer of "
            f"{source!r}, every answer's header and its first {MIN_ANSWER_TOKENS} tokens need {need} tokens, so "
            f"answers would vanish and different answers would score alike. Set reward_max_length >= {need}, or "
            "None to keep joint texts whole."
        )


def default_critic(cfg: MARLHFConfig, policy_cls: type[Learner], policy_cfg: LearnerConfig,
                   agents: Sequence[Any] | None, agent_model: Any) -> Any:
    """The critics' source for an IAC or MAAC policy learner with separate critics when the caller gives none:
    `critic_model_name`, else the first agent's id, as in CoMLRL 1.4.3; None for the others."""
    separate_critic = policy_cls is MAAC or (policy_cls is IAC and getattr(policy_cfg, "use_separate_critic", False))
    if not separate_critic:
        return None
    return cfg.critic_model_name or model_name((agents or [agent_model])[0])
