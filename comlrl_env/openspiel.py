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
legal actions as text, one per line, a line saying what is accepted, and
`Your action:`. A player who is not to move reads that its reply is ignored.

**Turn-taking.** `env.to_move()` names the agents whose text counts now: the
current player in a sequential game, every player with a legal action at a
simultaneous-move node (whose actions are applied together, in one `step`).
`env.legal_actions(agent)` lists the texts an agent may send now (empty when
it is not to move). The text of an agent not to move is ignored: never parsed,
never flagged, never penalised. `infos[agent]["to_move"]` says the same.

**Action format and parsing** (`parse_action`). The accepted text is a legal
action's `action_to_string`, e.g. `Bet`, `x(1,1)`, `(Play 0)`, `[P0]Bid: 3`.
The answer is matched against the legal actions in this order; the first rule
that matches decides:

1. exact: the answer, stripped of surrounding whitespace, is an action's text;
2. the same, ignoring case;
3. the action whose text occurs earliest in the answer as a whole word,
   ignoring case ("I will bet now" -> `Bet`; not glued to a letter, digit or
   underscore on either side, so `2-1` does not match inside `12-1`); at the
   same position the longer text wins;
4. the answer's first word, ignoring case, is a prefix of exactly one action's
   text (`b` -> `Bet`, `lia` -> `Liar`);
5. rules 2 and 3 on the actions' distinguishing parts: when all legal texts
   share a prefix of 2 or more characters, each text without it (`3` for
   `[P0]Bid: 3` when the others are `[P0]Bid: 1`, `[P0]Bid: 2`, ...: "bid 3"
   and "3" both play `[P0]Bid: 3`).

Anything else (empty text, a non-`str` action, an illegal or ambiguous answer)
is an invalid action: `infos[agent]["invalid_action"]` gives the reason, a
uniformly random legal action is played for that agent (drawn from the env's
`np_random`), and `invalid_action_penalty` (default 1.0; constructor argument)
is subtracted from that agent's reward only, once per invalid action, even in
cooperative games. `infos[agent]["action_played"]` is the text that was played.
Model text never raises.

**Chance.** Chance outcomes are drawn from the env's `np_random` with the
probabilities of `chance_outcomes()` as soon as a chance node is reached, so
`reset(seed=s)` replays an episode; `env.chance_history` lists them in order
(applying the players' actions and these outcomes to a fresh state replays the
episode). Games that sample chance internally from an `rng_seed` parameter
(negotiation) are reloaded at each reset with an `rng_seed` drawn from
`np_random` (or the one you give, which then fixes the instance).

**Reward.** A step's reward is the change of OpenSpiel's `state.returns()`
over the step (the players' move and any chance moves after it): OpenSpiel's
own per-move rewards for games that pay as they go, the final returns on the
last step for games that pay at the end. So an episode's rewards add up to
`state.returns()` (before penalties). Hanabi's `state.rewards()` repeats a
move's reward after the chance deal that follows it, which is why the change of
returns is used rather than a sum of `rewards()`.

**Termination.** The episode terminates when the OpenSpiel state is terminal.
`num_turns` is the game's `max_game_length()` (an upper bound on the number of
decision steps), so the turn limit never cuts a game short.

**State.** `env.game` and `env.game_state` are the live pyspiel game and state
(bots read them); `clone()` clones the state.

**Bots.** `OpenSpielBot("random", seed=0)` plays a uniformly random legal
action; `OpenSpielBot("mcts", seed=0, simulations=100, rollouts=1)` runs
OpenSpiel's MCTS with random rollouts (sequential, perfect-information games
with terminal rewards). Both return action texts and are seeded.

Versions: v0, the first version.
"""

from __future__ import annotations

import difflib
import os
import re
from typing import Any, Sequence

import numpy as np

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.policies import FixedPolicy
from comlrl_env.registry import ID_PATTERN, EnvNotFound, EnvSpec

try:  # optional dependency: the `games` extra
    import pyspiel
except ImportError:  # pragma: no cover (exercised by monkeypatching in the tests)
    pyspiel = None

__all__ = ["OpenSpielBot", "OpenSpielEnv", "game_spec", "mcts_applies", "parse_action"]

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


def parse_action(text: str, legal: Sequence[str]) -> int | None:
    """Index in `legal` of the action `text` names, or None (the rules are in the module docstring).

    >>> parse_action(" I bet. ", ["Pass", "Bet"]), parse_action("p", ["Pass", "Bet"]), parse_action("x", ["Pass", "Bet"])
    (1, 0, None)
    """
    answer = text.strip()
    stripped = [s.strip() for s in legal]
    if answer in stripped:
        return stripped.index(answer)
    found = _match_loosely(answer, stripped)
    if found is not None:
        return found
    words = answer.split()
    if words:
        first = words[0].lower()
        hits = [i for i, s in enumerate(stripped) if s.lower().startswith(first)]
        if len(hits) == 1:
            return hits[0]
    prefix = os.path.commonprefix(stripped) if len(stripped) > 1 else ""
    if len(prefix) >= 2:
        return _match_loosely(answer, [s[len(prefix):].strip() for s in stripped])
    return None


def _match_loosely(answer: str, texts: list[str]) -> int | None:
    """Rules 2 and 3: a case-insensitive exact match, else the earliest whole-word occurrence."""
    lowered = [s.lower() for s in texts]
    if answer.lower() in lowered:
        return lowered.index(answer.lower())
    best: tuple[int, int, int] | None = None  # (position, -length, index)
    for i, s in enumerate(texts):
        if not s:
            continue
        found = re.search(rf"(?<!\w){re.escape(s)}(?!\w)", answer, flags=re.IGNORECASE)
        if found and (best is None or (found.start(), -len(s)) < best[:2]):
            best = (found.start(), -len(s), i)
    return None if best is None else best[2]


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
        invalid_action_penalty: Subtracted from an agent's reward per invalid action (class default 1.0).
        view: "observation" or "information_state"; None picks the observation string when the game has one.
        max_observation_length: Observations are clipped to this many characters.
        max_action_length: Longer actions are clipped (reported in `infos`).
        render_mode: None or "ansi".
        **game_params: The game's parameters, passed to `pyspiel.load_game`.
    """

    metadata: dict[str, Any] = {**TextParallelEnv.metadata, "name": "openspiel-v0", "num_tasks": None}
    invalid_action_penalty: float = 1.0
    invalid_action_penalty_shared = False  # the offender pays, also in cooperative games

    def __init__(
        self,
        game: str,
        *,
        invalid_action_penalty: float | None = None,
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
        if invalid_action_penalty is not None:
            self.invalid_action_penalty = float(invalid_action_penalty)
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

    def player(self, agent: AgentID) -> int:
        """The OpenSpiel player index `agent` plays (`agent_i` is player i)."""
        if agent not in self.possible_agents:
            raise ValueError(f"unknown agent {agent!r}; agents: {self.possible_agents}.")
        return self.possible_agents.index(agent)

    def to_move(self) -> list[AgentID]:
        """The agents whose action counts now: the current player, or every player who can act at a
        simultaneous-move node; none once the game is over."""
        state = self.game_state
        if not self.agents or state is None or state.is_terminal():
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
        # "paid": the returns already handed out as rewards; a step pays the difference.
        return {"chance_history": chance_history, "paid": [0.0] * self.game.num_players()}

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
                lines += [
                    "Legal actions, one per line:",
                    *self.legal_actions(agent),
                    "",
                    "Reply with exactly one legal action, written as above.",
                    "Your action:",
                ]
            else:
                lines += ["It is not your turn; your reply is ignored. Reply: wait"]
            observations[agent] = "\n".join(lines)
        return observations

    def score(self, actions: dict[AgentID, str]) -> tuple[dict[AgentID, float], bool]:
        state = self.game_state
        movers = self.to_move()
        chosen: dict[int, int] = {}
        for agent in movers:
            player = self.player(agent)
            legal = state.legal_actions(player)
            texts = [state.action_to_string(player, a) for a in legal]
            index = parse_action(actions.get(agent, ""), texts)
            if index is None:
                shown = ", ".join(texts[:8]) + (", ..." if len(texts) > 8 else "")
                self.flag_invalid(agent, f"{actions.get(agent, '')[:80]!r} is not a legal action ({shown})")
                index = int(self.np_random.integers(len(legal)))
            chosen[player] = legal[index]
            self._step_infos.setdefault(agent, {})["action_played"] = texts[index]
        if state.is_simultaneous_node():
            state.apply_actions([chosen.get(p, pyspiel.INVALID_ACTION) for p in range(self.game.num_players())])
        elif chosen:
            state.apply_action(next(iter(chosen.values())))
        self._play_chance(self.task["chance_history"])
        returns = [float(r) for r in state.returns()]
        paid = self.task["paid"]
        rewards = {a: returns[i] - paid[i] for i, a in enumerate(self.possible_agents) if a in self.agents}
        self.task["paid"] = returns
        return rewards, bool(state.is_terminal())

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


def mcts_applies(game_type: Any) -> bool:
    """True for the games OpenSpiel's MCTS bot plays: sequential, perfect information, terminal rewards."""
    return (game_type.dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL
            and game_type.information == pyspiel.GameType.Information.PERFECT_INFORMATION
            and game_type.reward_model == pyspiel.GameType.RewardModel.TERMINAL)


class OpenSpielBot(FixedPolicy):
    """A scripted player for `OpenSpielEnv` seats: "random" (uniform legal action) or "mcts".

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
        if not isinstance(env, OpenSpielEnv):
            raise TypeError(f"OpenSpielBot plays OpenSpielEnv seats, got a {type(env).__name__}.")
        legal = env.legal_actions(agent)
        if not legal:
            return ""  # not to move: the env ignores this text
        if self.kind == "random":
            return legal[int(self.rng.integers(len(legal)))]
        return self._mcts(env, agent)

    def _mcts(self, env: OpenSpielEnv, agent: AgentID) -> str:
        from open_spiel.python.algorithms import mcts

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
