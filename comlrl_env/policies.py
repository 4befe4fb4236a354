"""Fixed policies: seats that act in an environment but are never trained.

A learner's `agents=[...]` takes, for each seat, either a trainable model or a fixed policy:

    from comlrl_env.policies import FixedPolicy
    learner = MAGRPO(env="openspiel/kuhn_poker-v0", agents=["path/to/model", lambda obs: "Pass"], ...)

- any `FixedPolicy` (scripted players, game bots such as `comlrl_env.games.openspiel.OpenSpielBot`);
- a plain callable from an observation to an action text, wrapped as `CallablePolicy`;
- `learners.Frozen(model)`, a frozen copy of a model (it samples like an agent, batched, and is never updated).

A fixed policy is asked only where its agent is to move (`TextParallelEnv.to_move()`), once per sample:
`act(envs, agent, num_samples)` returns `len(envs) * num_samples` texts, env-major (env n's sample k
at n * num_samples + k). What it returns is played as it is: text the env cannot parse is a game
outcome, as for a model.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from comlrl_env.base import AgentID, TextParallelEnv

__all__ = ["CallablePolicy", "FixedPolicy", "as_fixed_policy"]


class FixedPolicy:
    """A seat's fixed behaviour, never trained: pass one in a learner's `agents=[...]` for that seat.
    Subclasses implement `act`, and may override `describe`."""

    def act(self, envs: Sequence[TextParallelEnv], agent: AgentID, num_samples: int = 1) -> list[str]:
        """`num_samples` action texts for `agent` in each env of `envs` (env-major), where it is to move.

        Args:
            envs: The live environments where `agent` is to move (read them, e.g. `env.observe(agent)` or
                `env.legal_actions(agent)`; do not step them).
            agent: The seat to act for.
            num_samples: Texts per env.

        Returns:
            `len(envs) * num_samples` action texts: env n's sample k at `n * num_samples + k`.
        """
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What a run records about this seat (JSON-able): at least the policy's kind."""
        return {"policy": type(self).__name__}


class CallablePolicy(FixedPolicy):
    """A callable `fn(observation) -> text` as a fixed policy: one call per env and sample."""

    def __init__(self, fn: Callable[[str], str], name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"CallablePolicy needs a callable observation -> text, got {fn!r}.")
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", None) or type(fn).__name__

    def act(self, envs: Sequence[TextParallelEnv], agent: AgentID, num_samples: int = 1) -> list[str]:
        return [self.fn(env.observe(agent)) for env in envs for _ in range(num_samples)]

    def describe(self) -> dict[str, Any]:
        return {"policy": "callable", "name": self.name}


def as_fixed_policy(seat: Any) -> FixedPolicy | None:
    """The fixed policy a seat entry stands for, or None when it is a model source (an id, a directory,
    a loaded model). A `FixedPolicy` is itself; any other callable that is not a torch module is wrapped
    as a `CallablePolicy`."""
    if isinstance(seat, FixedPolicy):
        return seat
    if isinstance(seat, (str, bytes)) or hasattr(seat, "__fspath__"):
        return None
    try:
        import torch
        if isinstance(seat, torch.nn.Module):
            return None
    except ImportError:  # pragma: no cover (torch is a dependency)
        pass
    if callable(seat):
        return CallablePolicy(seat)
    return None
