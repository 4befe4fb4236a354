"""Mixed teams: seats played by fixed policies next to the trained agents.

A learner's `agents=[...]` holds one entry per seat (`env.possible_agents` order). An id, a directory or a
loaded model is a trainable agent; anything else is a fixed policy (`comlrl_env.policies.as_fixed_policy`):

    from comlrl_env.games.openspiel import OpenSpielBot
    from learners import MAGRPO, Frozen

    MAGRPO(env="openspiel/kuhn_poker-v0", agents=[model_dir, OpenSpielBot("random")])      # vs a bot
    MAGRPO(env="openspiel/kuhn_poker-v0", agents=[model, Frozen(model)], tokenizer=tok)   # vs a frozen self
    MAGRPO(env="openspiel/kuhn_poker-v0", agents=[model, model], tokenizer=tok)           # self-play

(`model_dir`: an id or local dir; `model`, `tok`: a loaded causal LM and its tokenizer.)

Fixed seats act where they are to move and are never optimized, checkpointed or exported; the run
records them (`fixed_seats` in the logged config and in `save_model`'s `comlrl_env.json`). The same
model object in several seats is self-play: one set of parameters (one LoRA adapter), one optimizer, and
one update per rollout from all its seats' samples. Saved agents are named by seat: `agent_1/` is the
policy that played `agent_1`, whatever plays the seats before it.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any, Sequence

import torch

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.policies import FixedPolicy, as_fixed_policy
from learners.models.agents import check_model_source, check_tokenizer_argument, load_agents, model_name, weights_match
from learners.rollout.engine import RolloutEngine
from learners.rollout.settings import GenerationSettings

__all__ = ["Frozen", "seat_record", "split_seats"]


class Frozen(FixedPolicy):
    """A frozen copy of a model in one seat: it samples like an agent (one batched call over the envs where
    its seat moves, with the learner's generation settings unless `settings` override them) and is never
    updated. A loaded model is deep-copied when the learner builds, so training the original elsewhere
    (self-play against a frozen self) leaves this copy as it was.

    Args:
        model: A hub id, a local dir or a loaded causal LM.
        tokenizer: Its tokenizer; default: the learner's `tokenizer` for this seat, else loaded from the id or dir.
        **settings: `GenerationSettings` fields for this seat (e.g. `temperature=0.7`).

    It sits on its seat's `agent_devices` entry. `describe()` records whether its weights still equal the
    files of the path it names (`weights_match_source`: False when the loaded model was changed in memory
    before the learner copied it, None when there is no local dir to compare with).
    """

    def __init__(self, model: Any, tokenizer: Any = None, **settings: Any) -> None:
        unknown = set(settings) - {f.name for f in dataclasses.fields(GenerationSettings)}
        if unknown:
            raise TypeError(f"Frozen got unknown generation settings {sorted(unknown)}; "
                            f"valid: {[f.name for f in dataclasses.fields(GenerationSettings)]}.")
        check_model_source(model, "Frozen(model)")
        check_tokenizer_argument(tokenizer)
        self.source, self.tokenizer, self.overrides = model, tokenizer, settings
        self.engine: Any = None
        self.weights_match_source: bool | None = None

    def prepare(self, settings: GenerationSettings, device: torch.device, model_config: dict[str, Any],
                tokenizer: Any = None) -> None:
        """Load (or copy) the model onto `device`, frozen, with `settings` plus this seat's overrides;
        `tokenizer` (the learner's for this seat) serves when this seat was given none."""
        tokenizer = self.tokenizer if self.tokenizer is not None else tokenizer
        models, tokenizers = load_agents(agents=[self.source], tokenizer=tokenizer, model_config=model_config)
        loaded_from_path = isinstance(self.source, (str, os.PathLike))
        model = models[0] if loaded_from_path else copy.deepcopy(models[0])
        self.weights_match_source = True if loaded_from_path else weights_match(model, model_name(self.source))
        model.to(device).eval().requires_grad_(False)
        self.engine = RolloutEngine([model], tokenizers, dataclasses.replace(settings, **self.overrides))

    def act(self, envs: Sequence[TextParallelEnv], agent: AgentID, num_samples: int = 1) -> list[str]:
        if self.engine is None:
            raise RuntimeError("Frozen.act() before prepare(): pass the Frozen seat to a learner's agents=.")
        return self.engine.generate(0, [env.observe(agent) for env in envs], num_samples).completions

    def describe(self) -> dict[str, Any]:
        return {"policy": "frozen", "model": model_name(self.source),
                "weights_match_source": self.weights_match_source, **self.overrides}


def split_seats(agents: Sequence[Any] | None, tokenizer: Any) -> tuple[list[Any] | None, dict[int, FixedPolicy], Any]:
    """Split a per-seat `agents` list into the trainable sources, the fixed seats `{seat: policy}`, and the
    tokenizer argument for the trainable ones (a per-seat tokenizer list loses its fixed seats' entries)."""
    if agents is None or isinstance(agents, (str, os.PathLike)) or not isinstance(agents, Sequence):
        return agents, {}, tokenizer
    seats = list(agents)
    fixed = {i: policy for i, seat in enumerate(seats) if (policy := as_fixed_policy(seat)) is not None}
    for i, seat in enumerate(seats):
        if i not in fixed and seat is not None:  # None: resolve_sources says entries must not be None
            check_model_source(seat, f"agents[{i}]", fixed_policies=True)
    if not fixed:
        return seats, {}, tokenizer
    if len(fixed) == len(seats):
        raise ValueError("every seat in agents is a fixed policy: give at least one trainable model "
                         "(an id, a local dir or a loaded model).")
    trained = [seat for i, seat in enumerate(seats) if i not in fixed]
    if isinstance(tokenizer, (list, tuple)) and len(tokenizer) == len(seats):
        tokenizer = [tok for i, tok in enumerate(tokenizer) if i not in fixed]
    return trained, fixed, tokenizer


def seat_record(seats: Sequence[str], fixed: dict[int, FixedPolicy]) -> dict[str, Any]:
    """What a run records of a mixed team: the env seats (`seats`, `possible_agents` order) the trained agents
    play, and what plays each `fixed` seat (empty without fixed seats)."""
    if not fixed:
        return {}
    return {"trained_seats": [seats[s] for s in range(len(seats)) if s not in fixed],
            "fixed_seats": {seats[s]: policy.describe() for s, policy in sorted(fixed.items())}}
