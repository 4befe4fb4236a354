"""`AgentPolicy`: saved Hugging Face agents as a batched policy for `comlrl_env.benchmark`."""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch

from comlrl_env.base import AgentID, TextParallelEnv
from learners.agents import load_agents
from learners.rollout import GenerationSettings, RolloutEngine

__all__ = ["AgentPolicy", "agent_dirs"]


def agent_dirs(paths: Sequence[str]) -> list[str]:
    """Expand a `save_model` output dir (holding `agent_0/`, `agent_1/`, ...) into its agent dirs."""
    out: list[str] = []
    for path in paths:
        inner = sorted((d for d in os.listdir(path) if d.startswith("agent_") and d[6:].isdigit()),
                       key=lambda d: int(d[6:])) if os.path.isdir(path) else []
        out += [os.path.join(path, d) for d in inner] if inner else [path]
    return out


class AgentPolicy:
    """One causal LM per agent; each call makes one batched `generate` per agent over the batch.

    Args:
        agents: Model ids or dirs, one per agent (or one for every agent).
        greedy: Greedy decoding instead of sampling.
        seed: Seeds sampling once at construction (runs are reproducible).
        **settings: `GenerationSettings` fields (max_new_tokens, temperature, use_chat_template, ...).
    """

    def __init__(self, agents: Sequence[Any], greedy: bool = False, seed: int = 0, **settings: Any) -> None:
        self.models, self.tokenizers = load_agents(agents=list(agents))
        settings.setdefault("max_new_tokens", 64)
        self.engine = RolloutEngine(self.models, self.tokenizers, GenerationSettings(**settings))
        self.greedy = greedy
        self.tokens_generated = 0
        torch.manual_seed(seed)

    def __call__(self, observations: list[dict[AgentID, str]], envs: list[TextParallelEnv]) -> list[dict[AgentID, str]]:
        agent_ids = list(envs[0].possible_agents)
        if len(self.models) not in (1, len(agent_ids)):
            raise ValueError(f"{len(self.models)} agents given for an env with {len(agent_ids)} agents; "
                             f"give 1 (shared) or {len(agent_ids)}.")
        actions: list[dict[AgentID, str]] = [{} for _ in observations]
        for i, agent in enumerate(agent_ids):
            model = i if len(self.models) > 1 else 0
            rows = [k for k, obs in enumerate(observations) if agent in obs]
            if not rows:
                continue
            batch = self.engine.generate(model, [observations[k][agent] for k in rows], 1, greedy=self.greedy)
            self.tokens_generated += int(batch.completion_mask.sum())
            for k, text in zip(rows, batch.completions):
                actions[k][agent] = text
        return actions
