"""`check_game`: invalid play never pays. An agent learns whatever earns more than playing.

A game env lists the action texts an agent may send now (`env.legal_actions(agent)`, as `OpenSpielEnv`
does). For every seat, `check_game` plays `episodes` seeded episodes with a degenerate answer in that seat
and the uniform random legal player in every other seat, and the same episodes with the random player in
that seat too. The invariant: **each degenerate answer's mean return is strictly below the random legal
player's, in every seat.** The degenerate answers (`DEGENERATE_ANSWERS`):

- `empty`: "";
- `babble`: random lowercase words (`check_task`'s babble);
- `echo`: the seat's own observation, restated;
- `all_legal`: every legal action, one per line (what a model that pastes the list writes).

    from comlrl_env.testing import check_game
    check_game("openspiel/tic_tac_toe-v0")                       # any id, or an env instance
    check_game("openspiel/kuhn_poker-v0", invalid_action="random")

Returns are undiscounted sums of the seat's rewards. Episode e is reset with seed `seed + e` for every
strategy (the same deals); the random players draw from generators seeded with `seed`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.registry import make
from comlrl_env.testing.task_checks import DEGENERATE_POLICIES

__all__ = ["DEGENERATE_ANSWERS", "GameCheckError", "check_game"]

Answer = Callable[[TextParallelEnv, AgentID, str], str]


class GameCheckError(AssertionError):
    """A game where a degenerate answer earns at least as much as random legal play; the message lists each."""


def _babble(seed: int) -> Answer:
    words = DEGENERATE_POLICIES["babble"](seed)
    return lambda env, agent, obs: words(env, {agent: obs})[agent]


DEGENERATE_ANSWERS: dict[str, Callable[[int], Answer]] = {
    "empty": lambda seed: lambda env, agent, obs: "",
    "babble": _babble,
    "echo": lambda seed: lambda env, agent, obs: obs,
    "all_legal": lambda seed: lambda env, agent, obs: "\n".join(env.legal_actions(agent)),
}
"""Name -> factory(seed) of each degenerate answer `check_game` plays: `answer(env, agent, observation)`."""


def check_game(env: TextParallelEnv | str, episodes: int = 200, seed: int = 0, **env_kwargs: Any
               ) -> dict[str, dict[AgentID, float]]:
    """Play each degenerate answer in each seat against random legal players; check it earns strictly less.

    Args:
        env: A game env (a `TextParallelEnv` with `legal_actions(agent)`) or a registered id, built with
            `env_kwargs` (e.g. `invalid_action="random"`).
        episodes: Seeded episodes per strategy and seat.
        seed: Seed of the resets (`seed + e`) and of the random players and the babble.

    Returns:
        `{"random": {agent: mean return}, "<answer>": {agent: mean return of that answer in that seat}}`.
    Raises:
        TypeError: The env does not list legal actions.
        GameCheckError: Listing every (answer, seat) whose mean return is not below the random player's.
    """
    env = make(env, **env_kwargs) if isinstance(env, str) else env
    if not callable(getattr(env, "legal_actions", None)):
        raise TypeError(f"check_game needs a game env with legal_actions(agent) (as OpenSpielEnv has), got a "
                        f"{type(env).__name__}; use check_task for tasks.")
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}.")
    name = env.metadata.get("name", type(env).__name__)
    rng = np.random.default_rng(seed)
    baseline = np.mean([_play(env, seed + e, rng) for e in range(episodes)], axis=0)
    means = {"random": dict(zip(env.possible_agents, baseline.tolist()))}
    violations = []
    for label, factory in DEGENERATE_ANSWERS.items():
        means[label] = {}
        for s, agent in enumerate(env.possible_agents):
            answer, rng = factory(seed), np.random.default_rng(seed)
            mean = float(np.mean([_play(env, seed + e, rng, agent, answer)[s] for e in range(episodes)]))
            means[label][agent] = mean
            if not mean < baseline[s]:
                violations.append(f"{label!r} in seat {agent} returned {mean:.3f} on average, random legal play "
                                  f"{baseline[s]:.3f} ({episodes} episodes, seeds {seed}..{seed + episodes - 1})")
    if violations:
        raise GameCheckError(f"{name}: invalid play pays in {len(violations)} case(s):\n- " + "\n- ".join(violations))
    return means


def _play(env: Any, seed: int, rng: np.random.Generator, seat: AgentID | None = None,
          answer: Answer | None = None) -> list[float]:
    """One episode, `answer` in `seat` and random legal players elsewhere; every seat's return."""
    obs, _ = env.reset(seed=seed)
    total = dict.fromkeys(env.possible_agents, 0.0)
    while env.agents:
        actions = {}
        for agent in env.to_move():
            if agent == seat:
                actions[agent] = answer(env, agent, obs[agent])
            else:
                legal = env.legal_actions(agent)
                actions[agent] = legal[int(rng.integers(len(legal)))] if legal else ""
        obs, rewards, _, _, _ = env.step(actions)
        for agent, reward in rewards.items():
            total[agent] += reward
    return [total[a] for a in env.possible_agents]
