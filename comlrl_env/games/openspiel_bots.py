"""Scripted players for game seats: `OpenSpielBot("random")` and `OpenSpielBot("mcts")`.

    from comlrl_env.games.openspiel import OpenSpielBot
    learner = MAGRPO(env="openspiel/kuhn_poker-v0", agents=[model_dir, OpenSpielBot("random", seed=0)], ...)

`OpenSpielBot("random", seed=0)` plays a uniformly random legal action of any env that lists its legal
action texts (`env.legal_actions(agent)`); `OpenSpielBot("mcts", seed=0, simulations=100, rollouts=1)` runs
OpenSpiel's MCTS with random rollouts on an `OpenSpielEnv`'s live state (sequential, perfect-information
games with terminal rewards). Both return action texts, and their randomness comes from their own seeded
generator.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.policies import FixedPolicy

try:  # optional dependency: the `games` extra
    import pyspiel
except ImportError:  # pragma: no cover
    pyspiel = None

__all__ = ["OpenSpielBot", "mcts_applies"]


def mcts_applies(game_type: Any) -> bool:
    """True for the games OpenSpiel's MCTS bot plays: sequential, perfect information, terminal rewards."""
    return (game_type.dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL
            and game_type.information == pyspiel.GameType.Information.PERFECT_INFORMATION
            and game_type.reward_model == pyspiel.GameType.RewardModel.TERMINAL)


class OpenSpielBot(FixedPolicy):
    """A scripted player for game seats: "random" (a uniform legal action of any env with `legal_actions`) or
    "mcts" (an `OpenSpielEnv`'s).

    Args:
        kind: "random" or "mcts".
        seed: Seeds the bot's own numpy Generator (and, through it, MCTS's).
        simulations: MCTS simulations per move.
        rollouts: Random rollouts per MCTS leaf evaluation.
        uct_c: MCTS exploration constant.
    """

    KINDS = ("random", "mcts")

    def __init__(
        self, kind: str = "random", seed: int | None = 0, simulations: int = 100, rollouts: int = 1, uct_c: float = 2.0
    ) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"OpenSpielBot kind must be one of {self.KINDS}, got {kind!r}.")
        for name, value in (("simulations", simulations), ("rollouts", rollouts)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}.")
        self.kind, self.seed = kind, seed
        self.simulations, self.rollouts, self.uct_c = simulations, rollouts, float(uct_c)
        self.rng = np.random.default_rng(seed)

    def act(self, envs: Sequence[TextParallelEnv], agent: AgentID, num_samples: int = 1) -> list[str]:
        return [self._act_once(env, agent) for env in envs for _ in range(num_samples)]

    def _act_once(self, env: TextParallelEnv, agent: AgentID) -> str:
        if not callable(getattr(env, "legal_actions", None)):
            raise TypeError(f"OpenSpielBot plays seats of games that list their legal actions "
                            f"(env.legal_actions(agent), as OpenSpielEnv does), got a {type(env).__name__}.")
        legal = env.legal_actions(agent)
        if not legal:
            return ""  # not to move: the env ignores this text
        if self.kind == "random":
            return legal[int(self.rng.integers(len(legal)))]
        return self._mcts(env, agent)

    def _mcts(self, env: Any, agent: AgentID) -> str:
        from open_spiel.python.algorithms import mcts

        if getattr(env, "game_state", None) is None or not hasattr(env, "game"):
            raise TypeError(f"OpenSpielBot('mcts') searches an OpenSpielEnv's live state, got a {type(env).__name__}.")
        game_type = env.game.get_type()
        if not mcts_applies(game_type):
            raise ValueError(
                f"OpenSpielBot('mcts') needs a sequential, perfect-information game with terminal rewards; "
                f"{game_type.short_name!r} is {game_type.dynamics.name.lower()}, "
                f"{game_type.information.name.lower()}, {game_type.reward_model.name.lower()} rewards. "
                "Use OpenSpielBot('random') there."
            )
        state = env.game_state
        seed = int(self.rng.integers(2**31 - 1))
        bot = mcts.MCTSBot(
            env.game,
            self.uct_c,
            self.simulations,
            mcts.RandomRolloutEvaluator(self.rollouts, np.random.RandomState(seed)),
            random_state=np.random.RandomState(seed + 1),
        )
        action = bot.step(state)
        return state.action_to_string(env.player(agent), action)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"policy": "openspiel_bot", "kind": self.kind, "seed": self.seed}
        if self.kind == "mcts":
            info.update(simulations=self.simulations, rollouts=self.rollouts, uct_c=self.uct_c)
        return info
