"""TextArena games as text environments: `make("textarena/<Game>-v0", num_players=2, **game_kwargs)`.

    from comlrl_env import make
    env = make("textarena/KuhnPoker-v0")                   # TextArena's KuhnPoker-v0-raw, two players
    env = make("textarena/SecretMafia-v0", num_players=7)  # kwargs are TextArena's settings
    obs, infos = env.reset(seed=0)
    mover = env.to_move()[0]
    obs, rewards, terminations, truncations, infos = env.step({mover: "I bet. [bet]"})

Needs `pip install "comlrl-env[textarena]"` (textarena 0.7.4); `comlrl_env` itself imports without it. Only
the games of `ALLOWED` are built (those that play to the end offline); a game of `REFUSED` raises
`EnvNotFound` with its reason, an unknown name with the closest allowlisted ones. Each id plays TextArena's
`<Game>-v0-raw` (no wrappers); the keyword arguments go to the game's constructor (`max_rounds=5` for
KuhnPoker), over the defaults in `ALLOWED`.

This module reads and plays the TextArena game. The game-independent part (prompts, invalid answers,
paying the change of returns, infos) is `comlrl_env.games.base.TextGameEnv`; TextArena's seats are its
free-text seats.

**Agents.** One per player: `agent_i` is TextArena's player i. `metadata["reward_structure"]` is
"competitive" for the two-player games (+1 win, -1 loss, 0 draw) and "general" for games of more players
(ranks spread over [-1, 1], or a faction's +1/-1). `env.teams` lists the seats that share a reward: the
factions of SecretMafia (Mafia and Village, dealt at reset) and Taboo (two teams), one seat per team elsewhere.

**Observation.** A header line (game and seat), then the seat's view: every message TextArena addressed to
that player (`state.observations[pid]`, as `[GAME] ...` or `[Player 1] ...`), so a seat sees exactly what the
game showed it and nothing else. A view keeps the rules (the game's opening prompt) and as many of the most
recent messages as fit in `max_observation_length`, noting how many it left out. The player to move reads
that its answer is its move, in the form the rules ask for, and what an invalid answer costs.

**Turn-taking.** `env.to_move()` is TextArena's `state.current_player_id` (not strict alternation: Kuhn poker
opens some rounds with player 1, SecretMafia's night moves go to its Mafia). The others' text is ignored.

**Answers and invalid moves.** TextArena lists no legal actions: the answer text is the move and the game
judges it (`legal_actions` is empty). An answer is invalid when it is empty, not a `str`, restates the seat's
observation, names two or more of the moves the seat's view lists (`listed_moves`), or the game reports it
invalid (its `error_count` rises, its admin message says so, or its `game_info[pid]["invalid_move"]` is set).
`invalid_action="forfeit"` (the default) ends the episode: the offender's return becomes -1, the other seat
of a two-player game gets +1, and in a game of more players the others keep what they were paid (0: games
pay at the end). In a team game (SecretMafia, Taboo) a forfeit is its faction's loss: every seat of the
offender's team gets -1 and every other seat +1, as the game pays a lost and a won game, so a team never
gains by a teammate's invalid answer (with the offender alone at -1, a losing team's two seats got -1 and 0
rather than -1 and -1). `invalid_action="retry"` gives one retry per move (TextArena's own `error_allowance=1`: the
seat reads why and moves again), and a second invalid answer in a row forfeits as above.
`invalid_action="random"` plays a random one of the moves the seat's view lists instead (`fallback_text`, from
the episode's fallback stream) and charges the utility range, 2, as OpenSpiel's "random" does; where the view
lists none, or the random move is invalid too, the seat forfeits. Some games flag
nothing: IteratedPrisonersDilemma and ThreePlayerIPD read any text without `[Defect]` as cooperating; in
Snake and Surround an unreadable move kills the player's snake. A game that raises on an answer ends the
episode as a forfeit of that seat.

**Randomness.** TextArena seeds and draws from Python's global `random` (and may draw from numpy's global
generator). Each episode keeps its own `random` and numpy states, swapped in around every call into
TextArena and out again after, so building, resetting, stepping and cloning leave the caller's generators as
they were. `reset(seed=s)` draws the game's seed from the env's `np_random`, so the same seed replays the same
game.

**Reward.** Games pay at the end (`close()`); a step's reward is the change of returns, so an episode adds up
to the game's rewards, or to the forfeit's. `utility_range()` is (-1, 1) for every allowlisted game.

**Termination.** When the game is done or a seat forfeits; `num_turns` (the game's most moves, in
`ALLOWED`; twice that under "retry") caps the steps and truncates with nothing paid.

**State.** `env.game` is the live TextArena env of the episode; `clone()` deep-copies it with its generator
states, so a clone plays on independently. `env.seat_messages(agent)` lists a seat's whole view.

**Bots.** `TextArenaBot("random", seed=0)` plays a random one of the moves a seat's view lists
(`comlrl_env.games.textarena_bots`, with its measured share of legal moves per game).

Versions: v0.
"""

from __future__ import annotations

import contextlib
import copy
import io
import random
from typing import Any, Iterator

import numpy as np

from comlrl_env.base import AgentID
from comlrl_env.games.base import TextGameEnv
from comlrl_env.games.textarena_bots import Message, TextArenaBot, listed_moves, random_listed_move
from comlrl_env.games.textarena_games import ALLOWED, REFUSED, game_spec
from comlrl_env.policies import FixedPolicy

__all__ = ["ALLOWED", "INVALID_MOVE_MODES", "REFUSED", "TextArenaBot", "TextArenaEnv", "game_spec", "listed_moves"]

INVALID_MOVE_MODES = ("forfeit", "retry", "random")
"""What an invalid answer does in a TextArena game (`invalid_action=`; the module docstring says how each pays)."""

_INSTALL = 'pip install "comlrl-env[textarena]"'
_RESERVE = 400  # characters of a prompt kept for its header and answer lines, outside the view


def _seeded(seed: int) -> dict[str, Any]:
    """Fresh Python `random` and numpy global-generator states seeded with `seed`."""
    return {"random": random.Random(seed).getstate(), "numpy": np.random.RandomState(seed % 2**32).get_state()}


@contextlib.contextmanager
def _own_rng(states: dict[str, Any]) -> Iterator[None]:
    """Run TextArena code on `states` (updated in place) and give the caller's `random` and numpy states back.
    The game's prints (SettlersOfCatan prints its board at reset) are kept off stdout."""
    outer = random.getstate(), np.random.get_state()
    random.setstate(states["random"])
    np.random.set_state(states["numpy"])
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        states["random"], states["numpy"] = random.getstate(), np.random.get_state()
        random.setstate(outer[0])
        np.random.set_state(outer[1])


_TEXTARENA: Any = None  # the package, once imported


def _textarena() -> Any:
    """The textarena package; importing it draws from `random` (rich does), so it is imported on a spare state."""
    global _TEXTARENA
    if _TEXTARENA is None:
        try:
            with _own_rng(_seeded(0)):
                import textarena
        except ImportError as exc:
            raise ImportError(f"TextArena games need the textarena package: {_INSTALL}") from exc
        _TEXTARENA = textarena
    return _TEXTARENA


def _checked_game(game: Any) -> str:
    if not isinstance(game, str):
        raise TypeError(f"game must be a TextArena game name (str) such as 'KuhnPoker', got {game!r}.")
    if game not in ALLOWED:
        game_spec(f"textarena/{game}-v0")  # raises EnvNotFound with the reason or the close matches
    return game


class TextArenaEnv(TextGameEnv):
    """A TextArena game as a text environment (see the module docstring).

    Args:
        game: The game's name as in `ALLOWED`, e.g. "KuhnPoker".
        num_players: Players (one agent each); None takes the game's first count in `ALLOWED`.
        invalid_action: "forfeit" (default), "retry" or "random": what an invalid answer does.
        num_turns: Step cap; None takes the game's in `ALLOWED`.
        max_observation_length: Observations are at most this many characters (the view keeps the rules and
            the most recent messages that fit).
        max_action_length: Longer actions are clipped (reported in `infos`).
        render_mode: None or "ansi".
        **game_kwargs: Keyword arguments of the TextArena game's constructor, over the defaults in `ALLOWED`.
    """

    metadata: dict[str, Any] = {**TextGameEnv.metadata, "name": "textarena-v0", "num_tasks": None,
                                "reward_range": (-1.0, 1.0)}

    def __init__(
        self,
        game: str,
        num_players: int | None = None,
        *,
        invalid_action: str = "forfeit",
        num_turns: int | None = None,
        max_observation_length: int = 8_192,
        max_action_length: int = 4_096,
        render_mode: str | None = None,
        **game_kwargs: Any,
    ) -> None:
        _textarena()
        self.game_name = _checked_game(game)
        entry = ALLOWED[game]
        self.num_players = self._checked_players(num_players, entry["players"])
        self.game_kwargs = {**entry["settings"], **game_kwargs}
        self._probe()
        super().__init__(
            num_players=self.num_players,
            num_turns=self._default_turns(entry["num_turns"], invalid_action) if num_turns is None else num_turns,
            invalid_action=invalid_action,
            invalid_action_penalty=None,
            numbered_actions=False,
            max_observation_length=max_observation_length,
            max_action_length=max_action_length,
            render_mode=render_mode,
        )
        structure = "competitive" if self.num_players == 2 else "general"
        self.metadata = {**type(self).metadata, "name": f"textarena/{game}-v0", "reward_structure": structure}
        self._judged: AgentID | None = None  # set by play_text when the game flagged the move (for reject_text)

    @staticmethod
    def _default_turns(moves: int, invalid_action: str) -> int:
        """The step cap: the game's most moves, twice that with a retry per move."""
        return 2 * moves if invalid_action == "retry" else moves

    def _checked_players(self, num_players: Any, allowed: tuple[int, ...]) -> int:
        if num_players is None:
            return allowed[0]
        if isinstance(num_players, bool) or not isinstance(num_players, int) or num_players not in allowed:
            raise ValueError(f"TextArena game {self.game_name!r} is played here with num_players in {allowed}, "
                             f"got {num_players!r}.")
        return num_players

    def _probe(self) -> None:
        """Build and reset one game, so bad settings fail now (and the game's module is imported now, not
        inside the first episode, where its import could draw from the episode's generator)."""
        try:
            with _own_rng(_seeded(0)):
                game = _textarena().make(f"{self.game_name}-v0-raw", **self.game_kwargs)
                game.reset(num_players=self.num_players, seed=0)
        except Exception as exc:
            raise ValueError(f"TextArena could not build {self.game_name!r} for {self.num_players} players with "
                             f"settings {self.game_kwargs}: {type(exc).__name__}: {exc}") from exc

    def _penalty(self, mode: str, penalty: float | None) -> float:
        if mode not in INVALID_MOVE_MODES:
            raise ValueError(f"invalid_action must be one of {INVALID_MOVE_MODES} for TextArena games, got {mode!r}.")
        if mode == "random":  # the utility range: a game with an invalid answer never beats one without
            low, high = self.utility_range()
            return high - low
        return 0.0  # the forfeit is the cost; a retry costs the retry

    # ----- the game's side of TextGameEnv ---------------------------------------------------

    @property
    def game_title(self) -> str:
        return f"TextArena game {self.game_name!r}"

    @property
    def game(self) -> Any:
        """The episode's live TextArena env (None before `reset`)."""
        return (self.task or {}).get("game")

    @property
    def teams(self) -> list[list[AgentID]] | None:
        """The seats that share a reward, per team, in this episode (None before `reset`): SecretMafia's
        factions (dealt at reset), Taboo's two teams, one seat per team in the other games."""
        return copy.deepcopy((self.task or {}).get("teams"))

    def utility_range(self) -> tuple[float, float]:
        return -1.0, 1.0

    def utility_sum(self) -> float:
        return 0.0

    def start_game(self) -> dict[str, Any]:
        seed = int(self.np_random.integers(2**31 - 1))
        rng = _seeded(seed)
        with _own_rng(rng):
            game = _textarena().make(f"{self.game_name}-v0-raw", **self.game_kwargs)
            game.reset(num_players=self.num_players, seed=seed)
        fields = {"game": game, "rng": rng, "game_seed": seed, "views": {p: [] for p in range(self.num_players)},
                  "strikes": dict.fromkeys(self.possible_agents, 0), "broken": False}
        fields["teams"] = self._teams(game)
        self._collect(fields)
        return fields

    def _teams(self, game: Any) -> list[list[AgentID]]:
        agents = self.possible_agents
        if self.game_name == "SecretMafia":
            mafia = [a for p, a in enumerate(agents) if game.player_roles[p] == "Mafia"]
            return [mafia, [a for a in agents if a not in mafia]]
        if self.game_name == "Taboo":
            return [[a for p, a in enumerate(agents) if p // game.team_size == t] for t in range(2)]
        return [[a] for a in agents]

    def _collect(self, fields: dict[str, Any]) -> dict[int, list[Message]]:
        """Move the messages TextArena queued for each player into that seat's view; return the new ones."""
        state, views = fields["game"].state, fields["views"]
        roles, game_id = getattr(state, "role_mapping", None) or {}, _textarena().GAME_ID
        new: dict[int, list[Message]] = {}
        for pid in range(self.num_players):
            queued, state.observations[pid] = state.observations[pid], []
            new[pid] = [("GAME" if sender == game_id else str(roles.get(sender, f"Player {sender}")),
                         getattr(kind, "name", str(kind)), str(text)) for sender, text, kind in queued]
            views[pid].extend(new[pid])
        return new

    def players_to_move(self) -> list[AgentID]:
        game = self.game
        if game is None or game.state.done:
            return []
        return [self.possible_agents[game.state.current_player_id]]

    def legal_actions(self, agent: AgentID) -> list[str]:
        """Empty: TextArena lists no legal actions; the answer text is the move (`listed_moves` reads the
        moves a seat's view shows)."""
        self.player(agent)
        return []

    def free_text(self, agent: AgentID) -> bool:
        return True

    def seat_messages(self, agent: AgentID) -> list[Message]:
        """Every message TextArena addressed to `agent` this episode, in order: (sender, kind, text)."""
        return list(self.task["views"][self.player(agent)]) if self.task else []

    def seat_header(self, agent: AgentID) -> str:
        return f"TextArena game {self.game_name}: you are player {self.player(agent)} of {self.num_players}."

    def seat_view(self, agent: AgentID) -> str:
        """The rules and the most recent messages that fit the observation length (module docstring)."""
        seen = self.seat_messages(agent)
        messages = [f"[{sender}] {text}" for sender, _, text in seen]
        opening = [i for i, (_, kind, _) in enumerate(seen) if kind == "PROMPT"] or ([0] if seen else [])
        budget = self._observation_space.max_length - len(self.seat_header(agent)) - _RESERVE
        rules = "\n".join(messages[i] for i in opening)[: max(budget // 2, 0)]
        budget -= len(rules)
        recent: list[str] = []
        for i in reversed([i for i in range(len(messages)) if i not in opening]):
            if len(messages[i]) + 1 > budget:
                break
            recent.append(messages[i])
            budget -= len(messages[i]) + 1
        left_out = len(messages) - len(opening) - len(recent)
        gap = [f"({left_out} earlier messages left out)"] if left_out else []
        return "\n".join([rules, *gap, *reversed(recent)])

    def free_text_rule(self, agent: AgentID) -> str:
        return ("Answer with one move in the form the rules ask for (naming two or more of the moves listed "
                "above is invalid); the game judges it.")

    def play_text(self, agent: AgentID, text: str) -> tuple[list[float], bool, str | None]:
        """Play `text` in the game; say why it was invalid when the game (or the one-move rule) says it is."""
        paid, pid = list(self.task["paid"]), self.player(agent)
        named = [move for move in listed_moves(self.seat_messages(agent)) if move.lower() in text.lower()]
        if len(named) > 1:
            return paid, False, f"it names {len(named)} of the moves the view lists ({', '.join(named[:4])})"
        game = self.task["game"]
        state = game.state
        errors, flagged = getattr(state, "error_count", 0), state.game_info.get(pid, {}).get("invalid_move")
        try:
            with _own_rng(self.task["rng"]):
                done, _ = game.step(text)
        except Exception as exc:  # a bug of the game: its state can no longer be trusted
            self.task["broken"] = True
            return paid, True, f"the game raised {type(exc).__name__}: {str(exc)[:120]}"
        admin = [t for _, kind, t in self._collect(self.task)[pid] if kind == "GAME_ADMIN" and "invalid" in t.lower()]
        reason = None
        if getattr(state, "error_count", 0) > errors or admin or (
                state.game_info.get(pid, {}).get("invalid_move") and not flagged):
            reason = "the game judged it invalid" + (f": {admin[-1][:200]}" if admin else "")
            self._judged = agent
        else:
            self.task["strikes"][agent] = 0
        if not done:
            return paid, False, reason
        with _own_rng(self.task["rng"]):
            rewards, _ = game.close()
        return [float((rewards or {}).get(p, 0.0)) for p in range(self.num_players)], True, reason

    def reject_text(self, agent: AgentID, reason: str) -> bool:
        """Forfeit under "forfeit"; under "retry", the first invalid answer of a move gets a retry (with a note in
        the seat's view when the game itself said nothing) and the second forfeits; under "random", a random
        listed move follows (`fallback_text`), or a forfeit when the view lists none or the game is over."""
        judged, self._judged = self._judged == agent, None
        self.task["strikes"][agent] += 1
        if self.invalid_action == "forfeit" or self.task["strikes"][agent] > 1 or self.task["broken"]:
            return True
        if self.invalid_action == "random":
            return self.task["game"].state.done or not listed_moves(self.seat_messages(agent))
        if not judged:
            note = f"Your answer was not a valid move ({reason}). Please resubmit a valid move."
            self.task["views"][self.player(agent)].append(("GAME", "GAME_ADMIN", note))
        return False

    def fallback_text(self, agent: AgentID) -> str | None:
        """Under "random": a random one of the moves the seat's view lists (placeholders filled), drawn from
        the episode's fallback stream, so the game's own chance is untouched. The game judges it as any move:
        where the view lists a format rather than the legal moves, it can be invalid too, and forfeits."""
        if self.invalid_action != "random":
            return None
        return random_listed_move(self.seat_messages(agent), self.task["fallback"])

    def _team_game(self) -> bool:
        """True when a team of this episode has two seats or more (SecretMafia, Taboo)."""
        return any(len(team) > 1 for team in (self.task or {}).get("teams") or [])

    def _cost_text(self) -> str:
        whose = "your team's" if self._team_game() else "your"
        if self.invalid_action == "retry":
            return ("An invalid answer gets one retry; a second invalid answer in a row forfeits the game: "
                    f"{whose} return becomes {self.utility_range()[0]:g}.")
        if self.invalid_action == "random":
            return (f"An invalid answer costs you {self.invalid_action_penalty:g} and a random one of the listed "
                    "moves is played instead.")
        return f"An invalid answer forfeits the game: {whose} return becomes {self.utility_range()[0]:g}."

    def _forfeit(self, offenders: list[AgentID]) -> dict[AgentID, float]:
        """The base's forfeit (the offenders at -1, their `forfeit` infos); in a team game, then the faction's loss:
        the offenders' teammates -1 and every other seat +1, what the game pays a lost and a won game."""
        rewards = super()._forfeit(offenders)
        if not self._team_game():
            return rewards
        losing = {a for team in self.task["teams"] if set(team) & set(offenders) for a in team}
        more = self._pay([-1.0 if a in losing else 1.0 for a in self.possible_agents])
        return {a: rewards[a] + more.get(a, 0.0) for a in rewards}

    def apply_moves(self, moves: dict[AgentID, int]) -> tuple[list[float], bool]:
        raise TypeError("TextArena moves are free text, played by play_text; there are no legal-action indices.")

    # ----- bots, copies, rendering -------------------------------------------------------------

    def reference_bots(self) -> dict[str, FixedPolicy]:
        """The benchmark's reference row for this game: the random bot of `TextArenaBot` in every seat."""
        return {"random-bot": TextArenaBot("random", seed=0)}

    def render(self) -> str | None:
        text = super().render()
        if text is not None and self.game is not None:
            text += "\n" + "\n".join(f"[GAME -> {a}] {m[-1][2][:200]!r}" for a, m in
                                     ((a, self.seat_messages(a)) for a in self.possible_agents) if m)
        return text
