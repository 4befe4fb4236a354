"""OpenSpiel games as text environments: `make("openspiel/<game>-v0", **game_params)`.

Any OpenSpiel game that describes its states in text (an observation string,
or else an information-state string) plays as a `TextParallelEnv`:

    from comlrl_env import make
    env = make("openspiel/kuhn_poker-v0")              # any pyspiel short name, with its parameters
    env = make("openspiel/goofspiel-v0", num_cards=5)  # kwargs are the game's parameters
    obs, infos = env.reset(seed=0)
    obs, rewards, terminations, truncations, infos = env.step({"agent_0": "Bet", "agent_1": ""})

Needs `pip install 'comlrl-env[games]'` (the `open_spiel` package); `comlrl_env`
itself imports without it. The ids of the `games` suite
(`comlrl_env.suites.suites["games"]`) are registered with small default
parameters; every other name is resolved on first use. An unknown name raises
`EnvNotFound` with close matches; a game with neither string view is rejected.

This module reads and plays the pyspiel game and state. The game-independent
part (the prompt's answer block, reading answers, invalid actions, paying the
change of returns, infos) is `comlrl_env.games.base.TextGameEnv`, whose
docstring has it in full.

**Agents.** One per player, in player order: `agent_i` is player i.
`metadata["reward_structure"]` is "cooperative" for games whose players share
one utility (tiny_hanabi, hanabi, coop_box_pushing), "competitive" for
zero-sum and constant-sum games, "general" otherwise.

**Observation.** A header line (game and seat), the game's observation string
for that player (its information-state string when the game has no
observation string; `view=` picks one), then, when the player is to move, its
legal actions (`action_to_string`), the answer rule with what an invalid
answer costs, and `Your action:`.

**Turn-taking.** `env.to_move()` names the current player in a sequential
game, every player with a legal action at a simultaneous-move node (whose
actions are applied together, in one `step`). The text of an agent not to
move is ignored.

**Answers and invalid actions.** An answer plays an action only when it names
exactly one legal action (`comlrl_env.action_text`). `invalid_action="forfeit"`
(the default) ends the episode with the offender's return at
`game.min_utility()`; `"random"` plays a random legal action for it and
subtracts `invalid_action_penalty` (at least `max_utility() - min_utility()`).
A game without a finite utility range (the mean-field games) needs
`invalid_action="random"` and an explicit `invalid_action_penalty`.
`infos[agent]["turn"]` counts only the steps at which that agent was to move.

**Chance.** Chance outcomes are drawn from the env's `np_random` with the
probabilities of `chance_outcomes()` as soon as a chance node is reached, so
`reset(seed=s)` replays an episode; `env.chance_history` lists them in order.
Games that sample chance internally from an `rng_seed` parameter
(negotiation) are reloaded at each reset with an `rng_seed` drawn from
`np_random` (or the one you give, which then fixes the instance); their
`chance_history` is `[0]`, as the deal comes from the game's own generator.

**Replay.** `env.replay(history)` applies OpenSpiel's action ids (the players'
actions and the chance outcomes, as `env.game_state.history()` lists them) to
a new state of a freshly loaded copy of the episode's game
(`env.game.get_parameters()`, its `rng_seed` included). That fresh load is
what a replay needs: `env.game.new_initial_state()` would deal negotiation
another instance, since each state the game makes draws from its generator.

**Reward.** A step's reward is the change of OpenSpiel's `state.returns()`
over the step (the players' move and any chance moves after it): OpenSpiel's
own per-move rewards for games that pay as they go, the final returns on the
last step for games that pay at the end. So an episode played to the end
adds up to `state.returns()` (before penalties), and one that ends by forfeit to
the forfeit returns. Hanabi's `state.rewards()` repeats a
move's reward after the chance deal that follows it, which is why the change of
returns is used rather than a sum of `rewards()`.

**Termination.** The episode terminates when the OpenSpiel state is terminal or a seat forfeits.
`num_turns` is the game's `max_game_length()` (an upper bound on the number of
decision steps), so the turn limit never cuts a game short.

**State.** `env.game` and `env.game_state` are the live pyspiel game and state
(bots read them); `clone()` clones the state.

**Bots.** `OpenSpielBot("random", seed=0)` plays a uniformly random legal
action; `OpenSpielBot("mcts", seed=0, simulations=100, rollouts=1)` runs
OpenSpiel's MCTS with random rollouts (sequential, perfect-information games
with terminal rewards). Both return action texts and are seeded.

Versions: v0. v0 changed in place, before any release: one answer names one action
(the looser earliest-mention and prefix-of-a-number readings are gone), invalid answers forfeit by
default, and fallback moves have their own random stream.
"""

from __future__ import annotations

import difflib
from typing import Any, Sequence

import numpy as np

from comlrl_env.action_text import parse_action
from comlrl_env.base import AgentID
from comlrl_env.games.base import INVALID_ACTION_MODES, TextGameEnv
from comlrl_env.games.openspiel_bots import OpenSpielBot, mcts_applies
from comlrl_env.policies import FixedPolicy
from comlrl_env.registry import ID_PATTERN, EnvNotFound, EnvSpec

try:  # optional dependency: the `games` extra
    import pyspiel
except ImportError:  # pragma: no cover (exercised by monkeypatching in the tests)
    pyspiel = None

__all__ = ["INVALID_ACTION_MODES", "OpenSpielBot", "OpenSpielEnv", "game_spec", "mcts_applies", "parse_action"]

_INSTALL = "pip install 'comlrl-env[games]'"


def _pyspiel() -> Any:
    if pyspiel is None:
        raise ImportError(f"OpenSpiel games need the open_spiel package (import pyspiel): {_INSTALL}")
    return pyspiel


def _check_game_name(name: str) -> None:
    names = _pyspiel().registered_names()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise EnvNotFound(f"No OpenSpiel game named {name!r}.{hint} pyspiel.registered_names() lists them all.")


def game_spec(id: str) -> EnvSpec:
    """The spec of an unregistered `openspiel/<game>-v0` id (the registry's resolver for the namespace)."""
    match = ID_PATTERN.match(id)
    if match is None or match["namespace"] != "openspiel":
        raise EnvNotFound(f"{id!r} is not an OpenSpiel id; they look like 'openspiel/kuhn_poker-v0'.")
    if match["version"] != "0":
        raise EnvNotFound(f"OpenSpiel ids have version 0 only, got {id!r}; use 'openspiel/{match['name']}-v0'.")
    _check_game_name(match["name"])
    return EnvSpec(id, OpenSpielEnv, {"game": match["name"]})


def _reward_structure(game_type: Any) -> str:
    utility = game_type.utility
    if utility == pyspiel.GameType.Utility.IDENTICAL:
        return "cooperative"
    if utility in (pyspiel.GameType.Utility.ZERO_SUM, pyspiel.GameType.Utility.CONSTANT_SUM):
        return "competitive"
    return "general"


class OpenSpielEnv(TextGameEnv):
    """An OpenSpiel game as a text environment (see the module docstring).

    Args:
        game: The pyspiel short name, e.g. "kuhn_poker".
        invalid_action: "forfeit" (default) or "random": what an invalid answer does (`comlrl_env.games.base`).
        invalid_action_penalty: With "random": subtracted from the offender's reward per invalid action;
            None takes the game's utility range, the least allowed.
        numbered_actions: Number the legal actions in the prompt (`1. x(0,0)`); a whole-number answer then
            names the action at that position (`action_text`).
        view: "observation" or "information_state"; None picks the observation string when the game has one.
        max_observation_length: Observations are clipped to this many characters.
        max_action_length: Longer actions are clipped (reported in `infos`).
        render_mode: None or "ansi".
        **game_params: The game's parameters, passed to `pyspiel.load_game`.
    """

    metadata: dict[str, Any] = {**TextGameEnv.metadata, "name": "openspiel-v0", "num_tasks": None}

    def __init__(
        self,
        game: str,
        *,
        invalid_action: str = "forfeit",
        invalid_action_penalty: float | None = None,
        numbered_actions: bool = False,
        view: str | None = None,
        max_observation_length: int = 16_384,
        max_action_length: int = 16_384,
        render_mode: str | None = None,
        **game_params: Any,
    ) -> None:
        _pyspiel()
        if not isinstance(game, str):
            raise TypeError(f"game must be a pyspiel short name (str), got {game!r}.")
        _check_game_name(game)
        self.game_name = game
        self.game_params = dict(game_params)
        self.game = self._load_game(self.game_params)
        game_type = self.game.get_type()
        self.view = self._checked_view(view, game_type)
        # Games that sample chance from their own generator are reloaded at each reset, with the given
        # rng_seed (a fixed instance) or one drawn from np_random, so reset(seed=s) replays an episode.
        self._reseed = (
            game_type.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC
            and "rng_seed" in self.game.get_parameters()
        )
        super().__init__(
            num_players=self.game.num_players(),
            num_turns=max(1, int(self.game.max_game_length())),
            invalid_action=invalid_action,
            invalid_action_penalty=invalid_action_penalty,
            numbered_actions=numbered_actions,
            max_observation_length=max_observation_length,
            max_action_length=max_action_length,
            render_mode=render_mode,
        )
        self.metadata = {
            **type(self).metadata,
            "name": f"openspiel/{game}-v0",
            "reward_structure": _reward_structure(game_type),
        }
        self.game_state: Any = None

    def _checked_view(self, view: str | None, game_type: Any) -> str:
        """`view`, or the string view the game provides when None; a game with neither is rejected."""
        views = {
            "observation": game_type.provides_observation_string,
            "information_state": game_type.provides_information_state_string,
        }
        if view is None:
            view = "observation" if views["observation"] else "information_state"
        if view not in views:
            raise ValueError(f"view must be 'observation', 'information_state' or None, got {view!r}.")
        if not any(views.values()):
            raise ValueError(
                f"OpenSpiel game {self.game_name!r} provides neither observation strings nor information-state "
                "strings, so it has no text to show a language model; pick a game that provides one."
            )
        if not views[view]:
            raise ValueError(f"OpenSpiel game {self.game_name!r} provides no {view} strings; use view=None.")
        return view

    def _load_game(self, params: dict[str, Any]) -> Any:
        try:
            return pyspiel.load_game(self.game_name, params)
        except Exception as exc:  # pyspiel.SpielError on bad parameters
            raise ValueError(
                f"OpenSpiel could not load {self.game_name!r} with parameters {params}: {exc}. "
                f"Its parameters and defaults: pyspiel.load_game({self.game_name!r}).get_parameters()."
            ) from exc

    # ----- the game's side of TextGameEnv ---------------------------------------------------

    @property
    def game_title(self) -> str:
        return f"OpenSpiel game {self.game_name!r}"

    def utility_range(self) -> tuple[float, float]:
        return self.game.min_utility(), self.game.max_utility()

    def utility_sum(self) -> float:
        return float(self.game.utility_sum() or 0.0)

    def start_game(self) -> dict[str, Any]:
        if self._reseed:
            seed = int(self.game_params.get("rng_seed", -1))
            if seed < 0:
                seed = int(self.np_random.integers(2**31 - 1))
            self.game = self._load_game({**self.game_params, "rng_seed": seed})
        self.game_state = self.game.new_initial_state()
        chance_history: list[int] = []
        self._play_chance(chance_history)
        return {"chance_history": chance_history}

    def _play_chance(self, chance_history: list[int]) -> None:
        state = self.game_state
        while state.is_chance_node():
            outcomes, probs = zip(*state.chance_outcomes())
            p = np.asarray(probs, dtype=float)
            outcome = int(outcomes[self.np_random.choice(len(outcomes), p=p / p.sum())])
            state.apply_action(outcome)
            chance_history.append(outcome)

    def players_to_move(self) -> list[AgentID]:
        """The current player, or every player who can act at a simultaneous-move node; none at the end."""
        state = self.game_state
        if state is None or state.is_terminal():
            return []
        if state.is_simultaneous_node():
            return [a for i, a in enumerate(self.possible_agents) if state.legal_actions(i)]
        player = state.current_player()
        return [self.possible_agents[player]] if 0 <= player < len(self.possible_agents) else []

    def legal_actions(self, agent: AgentID) -> list[str]:
        """The action texts `agent` may send now; empty when it is not to move."""
        player = self.player(agent)
        if agent not in self.to_move():
            return []
        return [self.game_state.action_to_string(player, a) for a in self.game_state.legal_actions(player)]

    def seat_header(self, agent: AgentID) -> str:
        game_type = self.game.get_type()
        return (f"{game_type.long_name} (OpenSpiel {game_type.short_name}): you are player {self.player(agent)} "
                f"of {self.game.num_players()}.")

    def seat_view(self, agent: AgentID) -> str:
        if self.view == "observation":
            return self.game_state.observation_string(self.player(agent))
        return self.game_state.information_state_string(self.player(agent))

    def apply_moves(self, moves: dict[AgentID, int]) -> tuple[list[float], bool]:
        state = self.game_state
        chosen = {self.player(a): state.legal_actions(self.player(a))[i] for a, i in moves.items()}
        if state.is_simultaneous_node():
            state.apply_actions([chosen.get(p, pyspiel.INVALID_ACTION) for p in range(self.game.num_players())])
        elif chosen:
            state.apply_action(next(iter(chosen.values())))
        self._play_chance(self.task["chance_history"])
        return [float(r) for r in state.returns()], bool(state.is_terminal())

    # ----- chance, replay, bots, copies, rendering -------------------------------------------

    @property
    def chance_history(self) -> list[int]:
        """Chance outcomes applied in this episode, in order."""
        return list(self.task["chance_history"]) if self.task else []

    def replay(self, history: Sequence[int] | None = None) -> Any:
        """A new state of a freshly loaded copy of this episode's game (module docstring: Replay) with `history`
        applied: OpenSpiel's action ids in order, chance outcomes included, a simultaneous node's actions in
        player order (`state.history()`; None takes the live state's: the episode so far)."""
        history = self.game_state.history() if history is None else list(history)
        state = self._load_game(self.game.get_parameters()).new_initial_state()
        i = 0
        while i < len(history):
            if state.is_simultaneous_node():
                state.apply_actions(history[i:i + self.game.num_players()])
                i += self.game.num_players()
            else:
                state.apply_action(history[i])
                i += 1
        return state

    def reference_bots(self) -> dict[str, FixedPolicy]:
        """The benchmark's reference rows for this game (`comlrl_env.benchmark.scripted_policies`): the
        uniform random bot, and MCTS (50 simulations) where it applies, each in every seat."""
        bots: dict[str, FixedPolicy] = {"random-bot": OpenSpielBot("random", seed=0)}
        if mcts_applies(self.game.get_type()):
            bots["mcts-bot"] = OpenSpielBot("mcts", seed=0, simulations=50)
        return bots

    def clone(self) -> "OpenSpielEnv":
        """An independent copy at the same state (the pyspiel state is cloned, the game shared)."""
        twin = super().clone()
        twin.game_state = self.game_state.clone() if self.game_state is not None else None
        return twin

    def render(self) -> str | None:
        text = super().render()
        if text is not None and self.game_state is not None:
            text += "\n" + str(self.game_state)
        return text
