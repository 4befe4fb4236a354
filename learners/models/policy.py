"""`AgentPolicy`: saved Hugging Face agents as a batched policy for `comlrl_env.benchmark`.

    team = AgentPolicy.from_saved("outputs/quickstart/agents")   # save_model's output: settings included
    team = AgentPolicy(["dir_a", "dir_b"], temperature=1.0, top_p=1.0, max_new_tokens=16)
    team = AgentPolicy(["dir_a", "dir_b"], temperature=[0.7, 1.0], max_new_tokens=[16, 64])  # one per agent
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Sequence

import torch

from comlrl_env.base import AgentID, TextParallelEnv
from learners.models.agents import load_agents
from learners.rollout import GenerationSettings, RolloutEngine

__all__ = ["SAMPLING_FIELDS", "AgentPolicy", "agent_dirs", "content_hash", "saved_settings"]

SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "max_new_tokens", "use_chat_template", "stop_strings")
"""The generation settings a `save_model` manifest (`comlrl_env.json`) carries and a bench reuses: each one value
for every agent or a list with one per agent, as `LearnerConfig` takes them."""


def agent_dirs(paths: Sequence[str]) -> list[str]:
    """Expand a `save_model` output dir (holding `agent_0/`, `agent_1/`, ...) into its agent dirs."""
    out: list[str] = []
    for path in paths:
        inner = sorted((d for d in os.listdir(path) if d.startswith("agent_") and d[6:].isdigit()),
                       key=lambda d: int(d[6:])) if os.path.isdir(path) else []
        out += [os.path.join(path, d) for d in inner] if inner else [path]
    return out


def saved_settings(paths: Sequence[str]) -> dict[str, Any]:
    """The sampling settings the agents were trained with: `SAMPLING_FIELDS` of the `comlrl_env.json` that
    `save_model` writes next to `agent_0/`, ... (in a given dir or its parent); {} when there is none."""
    for path in paths:
        for folder in (path, os.path.dirname(os.path.normpath(path))):
            manifest = os.path.join(folder, "comlrl_env.json")
            if os.path.isfile(manifest):
                with open(manifest, encoding="utf-8") as f:
                    config = json.load(f).get("config", {})
                return {k: config[k] for k in SAMPLING_FIELDS if k in config}
    return {}


def content_hash(path: str) -> str:
    """A short sha256 of every file under `path` (names and bytes, in sorted order): which weights were run."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(path, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            digest.update(os.path.relpath(os.path.join(root, name), path).encode())
            with open(os.path.join(root, name), "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()[:16]


class AgentPolicy:
    """Saved agents as a benchmark policy (`comlrl_env.benchmark.Policy`): one causal LM per agent, and each call
    makes one batched `generate` per agent over the batch. `run_suite`, `evaluate_policy` and `run_league` take it.

    Args:
        agents: Model ids or dirs, one per agent (or one for every agent).
        greedy: Greedy decoding instead of sampling.
        seed: Seeds sampling once at construction (runs are reproducible).
        device: Where the models run (e.g. "cuda"); None leaves them where they load (the CPU).
        **settings: `GenerationSettings` fields (max_new_tokens, temperature, use_chat_template, ...), each one
            value for every agent or a list with one per agent.
    """

    def __init__(self, agents: Sequence[Any], greedy: bool = False, seed: int = 0, device: str | None = None,
                 **settings: Any) -> None:
        settings.setdefault("max_new_tokens", 64)
        generation = GenerationSettings(**settings)
        generation.check_per_agent(len(agents))  # before any model loads
        self.models, self.tokenizers = load_agents(agents=list(agents))
        if device is not None:
            self.models = [m.to(device) for m in self.models]
        self.engine = RolloutEngine(self.models, self.tokenizers, generation)
        self.greedy = greedy
        self.tokens_generated = 0
        torch.manual_seed(seed)

    @classmethod
    def from_saved(cls, path: str | Sequence[str], greedy: bool = False, seed: int = 0, device: str | None = None,
                   **overrides: Any) -> "AgentPolicy":
        """The agents of a `save_model` output dir (or agent dirs), sampling as they were trained
        (`saved_settings`) unless `overrides` (e.g. `temperature=0.6`) say otherwise.

        Args:
            path: A `save_model` output dir (holding `agent_0/`, `agent_1/`, ...), or a list of agent dirs.
            greedy: Greedy decoding instead of sampling.
            seed: Seeds sampling once at construction.
            device: Where the models run; None leaves them where they load (the CPU).
            **overrides: `GenerationSettings` fields that replace the saved ones (a None value keeps the saved one).
        """
        dirs = agent_dirs([path] if isinstance(path, (str, os.PathLike)) else list(path))
        settings = {**saved_settings(dirs), **{k: v for k, v in overrides.items() if v is not None}}
        return cls(dirs, greedy=greedy, seed=seed, device=device, **settings)

    def __call__(self, observations: list[dict[AgentID, str]], envs: list[TextParallelEnv]) -> list[dict[AgentID, str]]:
        agent_ids = list(envs[0].possible_agents)
        if len(self.models) not in (1, len(agent_ids)):
            raise ValueError(f"{len(self.models)} agents given for an env with {len(agent_ids)} agents; "
                             f"give 1 (shared) or {len(agent_ids)}.")
        actions: list[dict[AgentID, str]] = [dict.fromkeys(obs, "") for obs in observations]
        for i, agent in enumerate(agent_ids):
            model = i if len(self.models) > 1 else 0
            # Only where the agent is to move (turn-taking tasks): a waiting agent's text is ignored.
            rows = [k for k, obs in enumerate(observations) if agent in obs and agent in envs[k].to_move()]
            if not rows:
                continue
            batch = self.engine.generate(model, [observations[k][agent] for k in rows], 1, greedy=self.greedy)
            self.tokens_generated += int(batch.completion_mask.sum())
            for k, text in zip(rows, batch.completions):
                actions[k][agent] = text
        return actions
