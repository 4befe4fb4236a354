"""Text games whose seats answer from a list of legal actions: `TextGameEnv`, the part no game library needs.

A game env (`comlrl_env.games.openspiel.OpenSpielEnv` is one) says how its game is read and played: who is to
move, each seat's legal action texts and view, the utility bounds, how chosen moves are applied. This base
turns that into prompts, reads the answers, handles invalid ones and pays the change of returns. It imports
no game library.

**Observation.** A header line (`seat_header`), the seat's view of the game (`seat_view`), then, when the
seat is to move, its legal actions as text, one per line (numbered `1.`, `2.`, ... with
`numbered_actions=True`, when a whole number answers), the answer rule (`action_text.answer_rule`) with
what an invalid answer costs, and `Your action:`. A player who is not to move reads that its reply is
ignored.

**Turn-taking.** `env.to_move()` names the agents whose text counts now (`players_to_move()`; none once
the episode is over or a seat forfeited), and `env.legal_actions(agent)` lists the texts an agent may send
now (empty when it is not to move). The text of an agent not to move is ignored: never parsed, never
flagged, never penalised. `infos[agent]["to_move"]` says the same.

**Action format** (`comlrl_env.action_text`, whose docstring has the rule in full). An answer plays an
action only when it names exactly one legal action: the whole answer is that action's text (e.g. `Bet`,
`x(1,1)`, `(Play 0)`, `[P0]Bid: 3`), compared with case, spacing, brackets and punctuation ignored, or one
of its short forms (`1,1` for `x(1,1)`, `13` or `bid 13` for `[P0]Bid: 13`, `b` for `Bet`); or the answer
has one line `Action: <text>`. An answer that names two or more actions, restates one of the seat's own
observations (`is_echo(text, agent)`: a copy of another seat's private view is never checked, so the
reason cannot reveal it), uses lookalike letters, or names an occupied or malformed cell is invalid, and
so is empty text or a non-`str`. `infos[agent]["invalid_action"]` gives the reason; model text never
raises.

**Invalid actions** (`invalid_action=`, one of `INVALID_ACTION_MODES`):

- `"forfeit"` (the default): the episode ends at once and the offending seat's return becomes the game's
  minimum utility (`utility_range()`); in a game whose players share one utility (`reward_structure`
  "cooperative") the whole team's does. In a zero-sum or constant-sum game ("competitive") the other
  seats share what is left of the game's sum (`utility_sum()`; each at most the maximum utility: a
  two-player zero-sum game pays them minus the minimum, a win by forfeit); in a general-sum game they
  keep what they were paid. `infos[agent]["forfeit"]` is True for the offenders.
- `"random"`: a uniformly random legal action is played for the offender, drawn from the episode's own
  fallback stream (seeded at reset, apart from the game's chance, so an invalid answer never changes later
  deals), and `invalid_action_penalty` is subtracted from the offender's reward only, once per invalid
  action. The penalty defaults to the game's utility range (maximum minus minimum) and may not be smaller:
  an episode with an invalid action then returns at most the game's minimum, so an invalid move never
  beats a legal one. `infos[agent]["action_played"]` is the text played.

A game without a finite utility range needs `invalid_action="random"` and an explicit
`invalid_action_penalty`.

**Free-text seats.** A game that lists no legal actions (TextArena's) says so per seat with
`free_text(agent)`: the prompt then asks for the move in the game's own format, and the answer text is the
move, which the game judges (`play_text`). Empty text, a non-`str` and an answer that restates the seat's
observation are invalid before the game sees them. Each invalid answer goes to `reject_text(agent, reason)`,
which says whether it forfeits (always under "forfeit"; a game env may give a retry first, or play a
move of its choosing instead, `fallback_text`, as TextArena's "random" mode does).

**Reward.** A step's reward is the change of the game's returns over the step (`apply_moves` returns
them), so an episode played to the end adds up to the game's returns (before penalties), and one that
ends by forfeit to the forfeit returns.

**Infos** tell a seat nothing its information state does not: `infos[agent]["turn"]` counts the steps at
which that agent was to move (not the env's steps, which would count the others' moves, failed attempts
included in phantom_ttt), and its `prompt_history` / `response_history` hold those steps' prompts and
answers. `env.turn`, `env.prompt_history` and `env.response_history` keep every step.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np

from comlrl_env.action_text import ActionMatch, answer_rule, read_action
from comlrl_env.base import AgentID, TextParallelEnv

__all__ = ["INVALID_ACTION_MODES", "TextGameEnv"]

INVALID_ACTION_MODES = ("forfeit", "random")
"""What an invalid answer does (`invalid_action=` of a game env, e.g. `OpenSpielEnv`; the module docstring says how
each pays)."""


class TextGameEnv(TextParallelEnv):
    """A text game: each seat to move answers with one of its legal actions (see the module docstring).

    A subclass loads its game, then calls this constructor, and writes the game's side: `start_game`,
    `players_to_move`, `legal_actions`, `seat_header`, `seat_view`, `apply_moves`, `utility_range`,
    `utility_sum` and `game_title`; a game whose answers are free text also `free_text` and `play_text`
    (module docstring). Agent `agent_i` is player i.

    Args:
        num_players: The number of seats, one agent each.
        num_turns: Turn limit (an upper bound on the game's decision steps, so it never cuts a game short).
        invalid_action: "forfeit" or "random": what an invalid answer does (module docstring).
        invalid_action_penalty: With "random": subtracted from the offender's reward per invalid action;
            None takes the game's utility range, the least allowed.
        numbered_actions: Number the legal actions in the prompt (`1. x(0,0)`); a whole-number answer then
            names the action at that position (`action_text`).
        max_observation_length: Observations are clipped to this many characters.
        max_action_length: Longer actions are clipped (reported in `infos`).
        render_mode: None or "ansi".
    """

    invalid_action_penalty_shared = False  # "random": the offender pays, also in cooperative games

    def __init__(
        self,
        num_players: int,
        num_turns: int,
        *,
        invalid_action: str,
        invalid_action_penalty: float | None,
        numbered_actions: bool,
        max_observation_length: int,
        max_action_length: int,
        render_mode: str | None,
    ) -> None:
        self.invalid_action = invalid_action
        if not isinstance(numbered_actions, bool):
            raise TypeError(f"numbered_actions must be a bool, got {numbered_actions!r}.")
        self.numbered_actions = numbered_actions
        self.invalid_action_penalty = self._penalty(invalid_action, invalid_action_penalty)
        super().__init__(
            num_agents=num_players,
            num_turns=num_turns,
            roles=[f"player {i}" for i in range(num_players)],
            max_observation_length=max_observation_length,
            max_action_length=max_action_length,
            render_mode=render_mode,
        )

    def _penalty(self, mode: str, penalty: float | None) -> float:
        """The per-invalid-action penalty of `mode`, checked against the game's utility range."""
        if mode not in INVALID_ACTION_MODES:
            raise ValueError(f"invalid_action must be one of {INVALID_ACTION_MODES}, got {mode!r}.")
        low, high = self.utility_range()
        span = high - low if math.isfinite(low) and math.isfinite(high) else math.inf
        if mode == "forfeit":
            if penalty is not None:
                raise ValueError(f"invalid_action_penalty={penalty!r} applies to invalid_action='random'; with "
                                 f"'forfeit' an invalid answer ends the game at the minimum utility ({low}).")
            if not math.isfinite(low):
                raise ValueError(f"{self.game_title} declares no finite minimum utility ({low}), so it cannot be "
                                 "forfeited; use invalid_action='random' with invalid_action_penalty.")
            return 0.0  # the forfeit is the cost
        if penalty is None:
            if not math.isfinite(span):
                raise ValueError(f"{self.game_title} declares no finite utility range; give "
                                 "invalid_action_penalty (a bound on its returns' range).")
            return float(span)
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not 0 < penalty < math.inf:
            raise ValueError(f"invalid_action_penalty must be a positive number, got {penalty!r}.")
        if math.isfinite(span) and not penalty >= span:  # unbounded: the given penalty bounds the range
            raise ValueError(
                f"invalid_action_penalty must be at least the game's utility range {span:g} (max {high:g} - "
                f"min {low:g}), so that an invalid move never beats a legal one; got {penalty!r}. Leave it None.")
        return float(penalty)

    # ----- the game's side ----------------------------------------------------------------

    @property
    @abc.abstractmethod
    def game_title(self) -> str:
        """How messages name the game, e.g. "OpenSpiel game 'kuhn_poker'"."""

    @abc.abstractmethod
    def start_game(self) -> dict[str, Any]:
        """Start a new game for an episode (its randomness from `self.np_random`); return the fields of
        `self.task` the game keeps (the base adds its own after them)."""

    @abc.abstractmethod
    def players_to_move(self) -> list[AgentID]:
        """The agents the game asks to move now (`to_move()` adds: none after a forfeit)."""

    @abc.abstractmethod
    def legal_actions(self, agent: AgentID) -> list[str]:
        """The action texts `agent` may send now, in the order the prompt lists them; empty when it is not
        to move."""

    @abc.abstractmethod
    def seat_header(self, agent: AgentID) -> str:
        """The prompt's first line: the game and `agent`'s seat."""

    @abc.abstractmethod
    def seat_view(self, agent: AgentID) -> str:
        """What `agent` sees of the game now, as text."""

    @abc.abstractmethod
    def apply_moves(self, moves: dict[AgentID, int]) -> tuple[list[float], bool]:
        """Play `moves` (agent -> index into its `legal_actions`, one per agent to move) and all that follows
        before the next decision (chance); return each player's return so far and whether the game is over."""

    @abc.abstractmethod
    def utility_range(self) -> tuple[float, float]:
        """The game's minimum and maximum utility (either may be infinite)."""

    @abc.abstractmethod
    def utility_sum(self) -> float:
        """The sum of the players' returns in a zero-sum or constant-sum game."""

    # ----- turn-taking --------------------------------------------------------------------

    def player(self, agent: AgentID) -> int:
        """The player index `agent` plays (`agent_i` is player i)."""
        if agent not in self.possible_agents:
            raise ValueError(f"unknown agent {agent!r}; agents: {self.possible_agents}.")
        return self.possible_agents.index(agent)

    def to_move(self) -> list[AgentID]:
        """The agents whose action counts now (`players_to_move()`); none once the game is over or forfeited."""
        if not self.agents or (self.task or {}).get("forfeited"):
            return []
        return self.players_to_move()

    # ----- the episode: prompts, answers, payment ----------------------------------------------

    def load_task(self, task_index: int | None) -> dict[str, Any]:
        game_fields = self.start_game()
        # Fallback moves ("random") draw from their own stream, seeded here, so they never shift chance.
        fallback = np.random.default_rng(int(self.np_random.integers(2**63 - 1)))
        # "paid": the returns already handed out as rewards; a step pays the difference.
        # "decisions": per agent, the steps at which it was to move (what its infos may tell it about).
        return {**game_fields, "paid": [0.0] * len(self.possible_agents), "fallback": fallback,
                "forfeited": [], "decisions": {a: [] for a in self.possible_agents}}

    def prompts(self) -> dict[AgentID, str]:
        movers = self.to_move()
        observations = {}
        for agent in self.agents:
            lines = [self.seat_header(agent), "", self.seat_view(agent).rstrip() or "(nothing to see yet)", ""]
            if agent in movers and self.free_text(agent):
                lines += [f"{self.free_text_rule(agent)} {self._cost_text()}", "Your move:"]
            elif agent in movers:
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
            return f"An invalid answer forfeits the game: {whose} return becomes {self.utility_range()[0]:g}."
        return f"An invalid answer plays a random legal action for you and costs you {self.invalid_action_penalty:g}."

    def score(self, actions: dict[AgentID, str]) -> tuple[dict[AgentID, float], bool]:
        if any(self.free_text(agent) for agent in self.to_move()):
            return self._score_free_text(actions)
        moves: dict[AgentID, int] = {}
        offenders: list[AgentID] = []
        for agent in self.to_move():
            self.task["decisions"][agent].append(self.turn)
            texts = self.legal_actions(agent)
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
                index = int(self.task["fallback"].integers(len(texts)))
            else:
                index = found.index
            moves[agent] = index
            self._step_infos.setdefault(agent, {})["action_played"] = texts[index]
        if offenders and self.invalid_action == "forfeit":
            return self._forfeit(offenders), True
        returns, terminated = self.apply_moves(moves)
        return self._pay(returns), terminated

    # ----- free-text seats ------------------------------------------------------------------

    def free_text(self, agent: AgentID) -> bool:
        """True when `agent`'s answer is itself its move, judged by the game (`play_text`); False (the default)
        when it names one of `legal_actions(agent)`."""
        return False

    def free_text_rule(self, agent: AgentID) -> str:
        """What the prompt of a free-text seat asks for, before what an invalid answer costs."""
        return "Answer with your move in the form the rules ask for; the game judges it."

    def play_text(self, agent: AgentID, text: str) -> tuple[list[float], bool, str | None]:
        """Play `text` as a free-text seat's move; return each player's return so far, whether the game is over,
        and why the game judged the move invalid (None when it took it)."""
        raise NotImplementedError(f"{type(self).__name__} has free-text seats but does not implement play_text.")

    def reject_text(self, agent: AgentID, reason: str) -> bool:
        """Take note of an invalid free-text answer of `agent` and say whether it forfeits the game: always under
        "forfeit" (a game env with another mode, such as a retry, overrides it)."""
        return self.invalid_action == "forfeit"

    def fallback_text(self, agent: AgentID) -> str | None:
        """The move played for `agent` after an invalid free-text answer that does not forfeit (a game env's
        "random" mode), or None (the default: the seat moves again, as under a retry)."""
        return None

    def _score_free_text(self, actions: dict[AgentID, str]) -> tuple[dict[AgentID, float], bool]:
        """Free-text seats: each mover's answer is played as it is, unless it is invalid on its face (empty, not
        a `str`, a restated observation); the game judges the rest."""
        returns, terminated, offenders = list(self.task["paid"]), False, []  # offenders: those who forfeit
        for agent in self.to_move():
            self.task["decisions"][agent].append(self.turn)
            text = actions.get(agent, "")
            reason = self._step_infos.get(agent, {}).get("invalid_action")  # not a str: flagged when cleaned
            if reason is None and not text.strip():
                reason = "empty answer"
            elif reason is None and len(text) > 40 and self.is_echo(text, agent):
                reason = "it restates the observation"
            if reason is None:
                returns, terminated, reason = self.play_text(agent, text)
            if reason is not None:
                self.flag_invalid(agent, f"{text[:80]!r}: {reason}")
                if self.reject_text(agent, reason):
                    offenders.append(agent)
                elif (move := self.fallback_text(agent)) is not None:  # "random": a listed move instead
                    self._step_infos.setdefault(agent, {})["action_played"] = move
                    returns, terminated, failed = self.play_text(agent, move)
                    if failed is not None:
                        offenders.append(agent)
        if offenders:
            return self._forfeit(offenders), True
        return self._pay(returns), terminated

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
        low, high = self.utility_range()
        structure = self.metadata["reward_structure"]
        lost = {self.player(a) for a in offenders}
        returns = list(self.task["paid"])
        others = [p for p in range(len(returns)) if p not in lost]
        for p in range(len(returns)):
            if p in lost or structure == "cooperative":
                returns[p] = low
        if others and structure == "competitive":
            total = self.utility_sum()
            for p in others:
                returns[p] = min((total - low * len(lost)) / len(others), high)
        for agent in offenders:
            self._step_infos.setdefault(agent, {})["forfeit"] = True
        self.task["forfeited"] = sorted(offenders)
        return self._pay(returns)
