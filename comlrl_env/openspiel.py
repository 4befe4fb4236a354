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

**Agents.** One per player, in player order: `agent_i` is player i.
`metadata["reward_structure"]` is "cooperative" for games whose players share
one utility (tiny_hanabi, hanabi, coop_box_pushing), "competitive" for
zero-sum and constant-sum games, "general" otherwise.

**Observation.** A header line (game and seat), the game's observation string
for that player (its information-state string when the game has no
observation string; `view=` picks one), then, when the player is to move, its
legal actions as text, one per line (numbered `1.`, `2.`, ... with
`numbered_actions=True`, when a whole number answers), the answer rule (`action_text.answer_rule`)
with what an invalid answer costs, and `Your action:`. A player who is not to
move reads that its reply is ignored.

**Turn-taking.** `env.to_move()` names the agents whose text counts now: the
current player in a sequential game, every player with a legal action at a
simultaneous-move node (whose actions are applied together, in one `step`).
`env.legal_actions(agent)` lists the texts an agent may send now (empty when
it is not to move). The text of an agent not to move is ignored: never parsed,
never flagged, never penalised. `infos[agent]["to_move"]` says the same.

**Infos** tell a seat nothing its information state does not: `infos[agent]["turn"]`
counts the steps at which that agent was to move (not the env's steps, which
would count the others' moves, failed attempts included in phantom_ttt), and
its `prompt_history` / `response_history` hold those steps' prompts and answers.
`env.turn`, `env.prompt_history` and `env.response_history` keep every step.

**Action format** (`comlrl_env.action_text`, whose docstring has the rule in
full). An answer plays an action only when it names exactly one legal action:
the whole answer is that action's text (`action_to_string`, e.g. `Bet`,
`x(1,1)`, `(Play 0)`, `[P0]Bid: 3`), compared with case, spacing, brackets and
punctuation ignored, or one of its short forms (`1,1` for `x(1,1)`, `13` or
`bid 13` for `[P0]Bid: 13`, `b` for `Bet`); or the answer has one line
`Action: <text>`. An answer that names two or more actions, restates one of
the seat's own observations (`is_echo(text, agent)`: a copy of another seat's
private view is never checked, so the reason cannot reveal it), uses lookalike
letters, or names an occupied or malformed cell is invalid, and so is empty
text or a non-`str`.
`infos[agent]["invalid_action"]` gives the reason; model text never raises.

**Invalid actions** (`invalid_action=`):

- `"forfeit"` (the default): the episode ends at once and the offending seat's
  return becomes the game's minimum utility (`game.min_utility()`); in a game
  whose players share one utility the whole team's does. In a zero-sum or
  constant-sum game the other seats share what is left of the game's sum
  (each at most `max_utility()`: a two-player zero-sum game pays them
  `-min_utility()`, a win by forfeit); in a general-sum game they keep what
  they were paid. `infos[agent]["forfeit"]` is True for the offenders.
- `"random"`: a uniformly random legal action is played for the offender,
  drawn from the episode's own fallback stream (seeded at reset, apart from
  chance, so an invalid answer never changes later deals), and
  `invalid_action_penalty` is subtracted from the offender's reward only, once
  per invalid action. The penalty defaults to the game's utility range
  (`max_utility() - min_utility()`) and may not be smaller: an episode with an
  invalid action then returns at most the game's minimum, so an invalid move
  never beats a legal one. `infos[agent]["action_played"]` is the text played.

A game without a finite utility range (the mean-field games) needs
`invalid_action="random"` and an explicit `invalid_action_penalty`.

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

Versions: v0. Issue 34 changed v0 in place, before any release: one answer names one action
(the looser earliest-mention and prefix-of-a-number readings are gone), invalid answers forfeit by
default, and fallback moves have their own random stream.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Sequence

import numpy as np

from comlrl_env.action_text import ActionMatch, answer_rule, parse_action, read_action
from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.openspiel_bots import OpenSpielBot, mcts_applies
from comlrl_env.policies import FixedPolicy
from comlrl_env.registry import ID_PATTERN, EnvNotFound, EnvSpec

try:  # optional dependency: the `games` extra
    import pyspiel
except ImportError:  # pragma: no cover (exercised by monkeypatching in the tests)
    pyspiel = None

__all__ = ["INVALID_ACTION_MODES", "OpenSpielBot", "OpenSpielEnv", "game_spec", "mcts_applies", "parse_action"]

_INSTALL = "pip install 'comlrl-env[games]'"
INVALID_ACTION_MODES = ("forfeit", "random")
"""What an invalid answer does (`OpenSpielEnv(invalid_action=...)`; the module docstring says how each pays)."""


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


class OpenSpielEnv(TextParallelEnv):
    """An OpenSpiel game as a text environment (see the module docstring).

    Args:
        game: The pyspiel short name, e.g. "kuhn_poker".
        invalid_action: "forfeit" (default) or "random": what an invalid answer does (module docstring).
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

    metadata: dict[str, Any] = {**TextParallelEnv.metadata, "name": "openspiel-v0", "num_tasks": None}
    invalid_action_penalty_shared = False  # "random": the offender pays, also in cooperative games

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
                f"OpenSpiel game {game!r} provides neither observation strings nor information-state strings, "
                "so it has no text to show a language model; pick a game that provides one."
            )
        if not views[view]:
            raise ValueError(f"OpenSpiel game {game!r} provides no {view} strings; use view=None.")
        self.view = view
        self.invalid_action = invalid_action
        if not isinstance(numbered_actions, bool):
            raise TypeError(f"numbered_actions must be a bool, got {numbered_actions!r}.")
        self.numbered_actions = numbered_actions
        self.invalid_action_penalty = self._penalty(invalid_action, invalid_action_penalty)
        # Games that sample chance from their own generator are reloaded at each reset, with the given
        # rng_seed (a fixed instance) or one drawn from np_random, so reset(seed=s) replays an episode.
        self._reseed = (
            game_type.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC
            and "rng_seed" in self.game.get_parameters()
        )
        num_players = self.game.num_players()
        super().__init__(
            num_agents=num_players,
            num_turns=max(1, int(self.game.max_game_length())),
            roles=[f"player {i}" for i in range(num_players)],
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

    def _penalty(self, mode: str, penalty: float | None) -> float:
        """The per-invalid-action penalty of `mode`, checked against the game's utility range."""
        if mode not in INVALID_ACTION_MODES:
            raise ValueError(f"invalid_action must be one of {INVALID_ACTION_MODES}, got {mode!r}.")
        low, high = self.game.min_utility(), self.game.max_utility()
        span = high - low if math.isfinite(low) and math.isfinite(high) else math.inf
        if mode == "forfeit":
            if penalty is not None:
                raise ValueError(f"invalid_action_penalty={penalty!r} applies to invalid_action='random'; with "
                                 f"'forfeit' an invalid answer ends the game at the minimum utility ({low}).")
            if not math.isfinite(low):
                raise ValueError(f"OpenSpiel game {self.game_name!r} declares no finite minimum utility ({low}), so "
                                 "it cannot be forfeited; use invalid_action='random' with invalid_action_penalty.")
            return 0.0  # the forfeit is the cost
        if penalty is None:
            if not math.isfinite(span):
                raise ValueError(f"OpenSpiel game {self.game_name!r} declares no finite utility range; give "
                                 "invalid_action_penalty (a bound on its returns' range).")
            return float(span)
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not penalty >= min(span, math.inf):
            raise ValueError(
                f"invalid_action_penalty must be at least the game's utility range {span:g} (max {high:g} - "
                f"min {low:g}), so that an invalid move never beats a legal one; got {penalty!r}. Leave it None.")
        return float(penalty)

    def _load_game(self, params: dict[str, Any]) -> Any:
        try:
            return pyspiel.load_game(self.game_name, params)
        except Exception as exc:  # pyspiel.SpielError on bad parameters
            raise ValueError(
                f"OpenSpiel could not load {self.game_name!r} with parameters {params}: {exc}. "
                f"Its parameters and defaults: pyspiel.load_game({self.game_name!r}).get_parameters()."
            ) from exc

    # ----- turn-taking ----------------------------------------------------------------

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

    def player(self, agent: AgentID) -> int:
        """The OpenSpiel player index `agent` plays (`agent_i` is player i)."""
        if agent not in self.possible_agents:
            raise ValueError(f"unknown agent {agent!r}; agents: {self.possible_agents}.")
        return self.possible_agents.index(agent)

    def to_move(self) -> list[AgentID]:
        """The agents whose action counts now: the current player, or every player who can act at a
        simultaneous-move node; none once the game is over."""
        state = self.game_state
        if not self.agents or state is None or state.is_terminal() or (self.task or {}).get("forfeited"):
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

    # ----- the task -----------------------------------------------------------------------

    def load_task(self, task_index: int | None) -> dict[str, Any]:
        if self._reseed:
            seed = int(self.game_params.get("rng_seed", -1))
            if seed < 0:
                seed = int(self.np_random.integers(2**31 - 1))
            self.game = self._load_game({**self.game_params, "rng_seed": seed})
        self.game_state = self.game.new_initial_state()
        chance_history: list[int] = []
        self._play_chance(chance_history)
        # Fallback moves ("random") draw from their own stream, seeded here, so they never shift chance.
        fallback = np.random.default_rng(int(self.np_random.integers(2**63 - 1)))
        # "paid": the returns already handed out as rewards; a step pays the difference.
        # "decisions": per agent, the steps at which it was to move (what its infos may tell it about).
        return {"chance_history": chance_history, "paid": [0.0] * self.game.num_players(), "fallback": fallback,
                "forfeited": [], "decisions": {a: [] for a in self.possible_agents}}

    def _play_chance(self, chance_history: list[int]) -> None:
        state = self.game_state
        while state.is_chance_node():
            outcomes, probs = zip(*state.chance_outcomes())
            p = np.asarray(probs, dtype=float)
            outcome = int(outcomes[self.np_random.choice(len(outcomes), p=p / p.sum())])
            state.apply_action(outcome)
            chance_history.append(outcome)

    def prompts(self) -> dict[AgentID, str]:
        movers = self.to_move()
        game_type = self.game.get_type()
        observations = {}
        for agent in self.agents:
            player = self.player(agent)
            if self.view == "observation":
                view = self.game_state.observation_string(player)
            else:
                view = self.game_state.information_state_string(player)
            lines = [
                f"{game_type.long_name} (OpenSpiel {game_type.short_name}): you are player {player} "
                f"of {self.game.num_players()}.",
                "",
                view.rstrip() or "(nothing to see yet)",
                "",
            ]
            if agent in movers:
                legal = self.legal_actions(agent)
                listed = [f"{i}. {text}" for i, text in enumerate(legal, 1)] if self.numbered_actions else legal
                rule = answer_rule(legal, self.numbered_actions)
                lines += ["Legal actions, one per line:", *listed, "", f"{rule} {self._cost_text()}", "Your action:"]
            else:
                lines += ["It is not your turn; your reply is ignored. Reply: wait"]
            observations[agent] = "\n".join(lines)
        return observations

    def _cost_text(self) -> str:
        """What an invalid answer costs, as the prompt says it."""
        if self.invalid_action == "forfeit":
            whose = "the team's" if self.metadata["reward_structure"] == "cooperative" else "your"
            return f"An invalid answer forfeits the game: {whose} return becomes {self.game.min_utility():g}."
        return f"An invalid answer plays a random legal action for you and costs you {self.invalid_action_penalty:g}."

    def score(self, actions: dict[AgentID, str]) -> tuple[dict[AgentID, float], bool]:
        state = self.game_state
        chosen: dict[int, int] = {}
        offenders: list[AgentID] = []
        for agent in self.to_move():
            self.task["decisions"][agent].append(self.turn)
            player = self.player(agent)
            legal = state.legal_actions(player)
            texts = [state.action_to_string(player, a) for a in legal]
            text = actions.get(agent, "")
            found = read_action(text, texts, self.numbered_actions)
            reason = found.reason
            # An answer that parses restates an observation only when it is much longer than its action. Only
            # the seat's own observations count: a copy of another seat's private view must not be told apart.
            if found.index is not None and len(text) > len(texts[found.index]) + 40 and self.is_echo(text, agent):
                found, reason = ActionMatch(None), "it restates the observation"
            if found.index is None:
                self.flag_invalid(agent, f"{text[:80]!r}: {reason}")
                offenders.append(agent)
                if self.invalid_action == "forfeit":
                    continue
                index = int(self.task["fallback"].integers(len(legal)))
            else:
                index = found.index
            chosen[player] = legal[index]
            self._step_infos.setdefault(agent, {})["action_played"] = texts[index]
        if offenders and self.invalid_action == "forfeit":
            return self._forfeit(offenders), True
        if state.is_simultaneous_node():
            state.apply_actions([chosen.get(p, pyspiel.INVALID_ACTION) for p in range(self.game.num_players())])
        elif chosen:
            state.apply_action(next(iter(chosen.values())))
        self._play_chance(self.task["chance_history"])
        return self._pay([float(r) for r in state.returns()]), bool(state.is_terminal())

    def _info(self, agent: AgentID) -> dict[str, Any]:
        """The base's infos, cut to what the seat knows: `turn` counts the steps at which `agent` was to move,
        and `prompt_history` / `response_history` hold those steps' prompts and answers only. The steps in
        between would count the others' moves, which a game can hide (phantom_ttt's failed attempts)."""
        info = super()._info(agent)
        steps = (self.task or {}).get("decisions", {}).get(agent, [])
        info["turn"] = len(steps)
        info["prompt_history"] = [self.prompt_history[agent][t] for t in steps]
        info["response_history"] = [self.response_history[agent][t] for t in steps]
        return info

    def _pay(self, returns: list[float]) -> dict[AgentID, float]:
        """Rewards that bring each seat's paid total to `returns`."""
        paid = self.task["paid"]
        rewards = {a: returns[i] - paid[i] for i, a in enumerate(self.possible_agents) if a in self.agents}
        self.task["paid"] = returns
        return rewards

    def _forfeit(self, offenders: list[AgentID]) -> dict[AgentID, float]:
        """End the episode: the offenders' returns become the game's minimum utility (every seat's when the
        players share one utility); the other seats share the rest of a zero- or constant-sum game's sum, or
        keep what they were paid (general sum)."""
        low, high = self.game.min_utility(), self.game.max_utility()
        utility = self.game.get_type().utility
        lost = {self.player(a) for a in offenders}
        returns = list(self.task["paid"])
        others = [p for p in range(len(returns)) if p not in lost]
        for p in range(len(returns)):
            if p in lost or utility == pyspiel.GameType.Utility.IDENTICAL:
                returns[p] = low
        if others and utility in (pyspiel.GameType.Utility.ZERO_SUM, pyspiel.GameType.Utility.CONSTANT_SUM):
            total = float(self.game.utility_sum() or 0.0)
            for p in others:
                returns[p] = min((total - low * len(lost)) / len(others), high)
        for agent in offenders:
            self._step_infos.setdefault(agent, {})["forfeit"] = True
        self.task["forfeited"] = sorted(offenders)
        return self._pay(returns)

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
