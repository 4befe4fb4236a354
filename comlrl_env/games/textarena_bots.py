"""A scripted player for TextArena seats: `TextArenaBot("random", seed=0)`, and `listed_moves`, the moves a seat's
view lists.

    from comlrl_env.games.textarena_bots import TextArenaBot
    learner = MAGRPO(env="textarena/KuhnPoker-v0", agents=[model_dir, TextArenaBot("random", seed=0)], ...)

TextArena lists no legal actions: a move is free text that the game judges. Many games print their moves in
the seat's view (`Available Moves: '[0]', '[4]'`, `Your remaining hand: '[A]' '[2]'`, `Valid: [1], [3]`); others
only give a format with an example (`'[A4 B2 C2]'`). The bot plays a uniformly random one of the moves the
view lists (`listed_moves`), with a format's placeholders filled (`[play X]` -> `[play 2]`,
`fill_placeholders`), drawn from its own seeded generator. So it plays legally where the game lists its moves
and often loses by an invalid move where it only gives a format; `LEGAL_SHARES` gives, per game, the share of
its moves that were valid.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.policies import FixedPolicy

__all__ = ["LEGAL_SHARES", "Message", "TextArenaBot", "fill_placeholders", "listed_moves"]

Message = tuple[str, str, str]
"""One message of a seat's view: (sender, kind, text). The sender is "GAME" or a player's role name (e.g.
"Player 1"); the kind is TextArena's `ObservationType` name ("PROMPT", "GAME_BOARD", "PLAYER_ACTION", ...)."""

_TOKEN = re.compile(r"\[[^\[\]\n]{1,60}\]")
# A line that presents moves rather than describing the board: "Available Moves: ...", "Valid: ...".
_LIST_LINE = re.compile(r"avail|valid|legal|possible|options?\b|choose|remaining", re.IGNORECASE)
_QUOTED = re.compile(r"'(\[[^\[\]\n]{1,60}\])'")
_PLACEHOLDER = re.compile(r"<[^<>]{1,20}>|(?<!\w)(?:X|Y|N)(?!\w)|\b(?:number|amount|quantity)\b")
# Messages that report what was played; their tokens are past moves, not choices.
_REPORTS = ("PLAYER_ACTION", "GAME_ACTION_DESCRIPTION")

LEGAL_SHARES: dict[str, float] = {
    "Alquerque": 0.5, "Battleship": 0.67, "Breakthrough": 0.5, "Briscola": 0.07, "Chopsticks": 0.0,
    "ColonelBlotto": 0.0, "ConnectFour": 0.91, "Crusade": 1.0, "GameOfPureStrategy": 1.0, "GermanWhist": 0.62,
    "Golf": 0.65, "HighSociety": 1.0, "IndianPoker": 1.0, "IteratedMatchingPennies": 1.0,
    "IteratedPrisonersDilemma": 1.0, "IteratedRockPaperScissors": 1.0, "IteratedTwoThirdsAverage": 1.0,
    "IteratedUltimatumGame": 0.51, "KuhnPoker": 1.0, "LinesOfAction": 0.5, "MemoryGame": 0.5, "NewRecruit": 0.0,
    "Nim": 0.38, "Othello": 1.0, "PigDice": 1.0, "QuantumTicTacToe": 0.0, "SimpleBlindAuction": 0.97,
    "SimpleNegotiation": 1.0, "SimpleTak": 1.0, "Tak": 0.0, "TicTacToe": 1.0, "TruthAndDeception": 1.0,
    "TwoDollar": 0.0, "UltimateTicTacToe": 0.53, "WildTicTacToe": 1.0, "LiarsDice": 0.39, "Snake": 1.0,
    "Surround": 1.0, "SecretMafia": 0.98, "Taboo": 1.0, "ThreePlayerTicTacToe": 1.0, "ThreePlayerGOPS": 1.0,
    "ThreePlayerIPD": 1.0, "SettlersOfCatan": 0.3,
}
"""Per allowlisted game, the share of `TextArenaBot("random", seed=0)`'s moves that were valid, with the bot in
every seat for 50 episodes (reset seeds 0-49, the default player count and `invalid_action="forfeit"`, so an
episode ends at its first invalid move). 1.0 where the view lists the moves (TicTacToe's `Available Moves`,
KuhnPoker's actions) or the rules name them all (IteratedRockPaperScissors); 0.0 where the rules give only
a format with an example that is never valid as it stands (ColonelBlotto's `[A4 B2 C2]` spends 8 of 20
units). tests/test_textarena.py measures it again."""


def _tokens(text: str, quoted_first: bool = False) -> list[str]:
    """The bracketed tokens of `text`, without repeats: those on lines that present moves when there are any,
    else (with `quoted_first`) the quoted ones ('[check]') when there are any, else all."""
    listed = [t for line in text.splitlines() if _LIST_LINE.search(line) for t in _TOKEN.findall(line)]
    if listed:
        return list(dict.fromkeys(listed))
    quoted = _QUOTED.findall(text) if quoted_first else []
    return list(dict.fromkeys(quoted or _TOKEN.findall(text)))


def fill_placeholders(move: str, rng: np.random.Generator) -> str:
    """`move` with each placeholder of a move format (`X`, `Y`, `N`, `<number>`, `amount`, `quantity`, in a
    token without digits: `[play X]`, `[Offer: $X]`, `[swap X Y]`) replaced by a random whole number 1-10."""
    if any(ch.isdigit() for ch in move):
        return move  # a concrete move ("[X 4]" in WildTicTacToe names the mark X)
    return _PLACEHOLDER.sub(lambda _: str(int(rng.integers(1, 11))), move)


def listed_moves(messages: Sequence[Message]) -> list[str]:
    """The moves a seat's view lists, from its newest game message with a bracketed token.

    Player messages and reports of moves played are skipped. Within a message, the tokens on lines that
    present moves ("Available Moves: ...", "Valid: ...") win; without such lines, all its tokens count. When
    no later message has a token, the rules (the "PROMPT" messages) are read the same way, their quoted tokens
    first (rules quote their moves, `'[rock]', '[paper]', or '[scissors]'`, and often name other things in
    brackets). Empty when none has a token. Move formats come as listed (`[play X]`); the bot fills them.
    """
    game = [(kind, text) for sender, kind, text in messages if sender == "GAME" and kind not in _REPORTS]
    for kind, text in reversed(game):
        if kind != "PROMPT":
            found = _tokens(text)
            if found:
                return found
    rules = "\n".join(text for kind, text in game if kind == "PROMPT")
    return _tokens(rules, quoted_first=True)


def random_listed_move(messages: Sequence[Message], rng: np.random.Generator) -> str | None:
    """A uniformly random one of the moves `messages` list (`listed_moves`), placeholders filled from `rng`;
    None when they list none."""
    moves = listed_moves(messages)
    return fill_placeholders(moves[int(rng.integers(len(moves)))], rng) if moves else None


class TextArenaBot(FixedPolicy):
    """A scripted player for TextArena seats: "random" plays a uniformly random move of those the seat's view
    lists (`listed_moves`, placeholders filled by `fill_placeholders`), or `fallback` when it lists none.

    Args:
        kind: "random".
        seed: Seeds the bot's own numpy Generator.
        fallback: The text sent when the view lists no move (a turn of talk in a conversation game).
    """

    KINDS = ("random",)

    def __init__(self, kind: str = "random", seed: int | None = 0, fallback: str = "I have nothing to add.") -> None:
        if kind not in self.KINDS:
            raise ValueError(f"TextArenaBot kind must be one of {self.KINDS}, got {kind!r}.")
        if not isinstance(fallback, str) or not fallback.strip():
            raise ValueError(f"fallback must be a non-empty str, got {fallback!r}.")
        self.kind, self.seed, self.fallback = kind, seed, fallback
        self.rng = np.random.default_rng(seed)

    def act(self, envs: Sequence[TextParallelEnv], agent: AgentID, num_samples: int = 1) -> list[str]:
        return [self._act_once(env, agent) for env in envs for _ in range(num_samples)]

    def _act_once(self, env: Any, agent: AgentID) -> str:
        if not callable(getattr(env, "seat_messages", None)):
            raise TypeError(f"TextArenaBot plays seats of TextArena games (env.seat_messages(agent), as "
                            f"TextArenaEnv has), got a {type(env).__name__}.")
        if agent not in env.to_move():
            return ""  # not to move: the env ignores this text
        move = random_listed_move(env.seat_messages(agent), self.rng)
        return self.fallback if move is None else move

    def describe(self) -> dict[str, Any]:
        return {"policy": "textarena_bot", "kind": self.kind, "seed": self.seed}
