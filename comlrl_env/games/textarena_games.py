"""Which TextArena games `make("textarena/<Game>-v0")` builds: `ALLOWED` (each game's player counts and
settings) and `REFUSED` (each game's reason), and `game_spec`, the registry's resolver for the namespace.

The allowlist is the games that play to the end offline with TextArena 0.7.4 on Python 3.10-3.11: every one
finishes within its `num_turns` when bots play every seat (tests/test_textarena.py plays them all). This
module imports neither textarena nor the env, so an id is refused or resolved without the package.
"""

from __future__ import annotations

import difflib
from typing import Any

from comlrl_env.registry import ID_PATTERN, EnvNotFound, EnvSpec

__all__ = ["ALLOWED", "REFUSED", "game_spec"]


def _game(players: tuple[int, ...], num_turns: int, **settings: Any) -> dict[str, Any]:
    return {"players": players, "num_turns": num_turns, "settings": settings}


ALLOWED: dict[str, dict[str, Any]] = {
    # two players
    "Alquerque": _game((2,), 60),
    "Battleship": _game((2,), 50),
    "Breakthrough": _game((2,), 224),
    "Briscola": _game((2,), 40),
    "Chopsticks": _game((2,), 42),
    "ColonelBlotto": _game((2,), 18),
    "ConnectFour": _game((2,), 42),
    "Crusade": _game((2,), 40),
    "GameOfPureStrategy": _game((2,), 26),
    "GermanWhist": _game((2,), 52),
    "Golf": _game((2,), 150),
    "HighSociety": _game((2,), 150),
    "IndianPoker": _game((2,), 150),
    "IteratedMatchingPennies": _game((2,), 20),
    "IteratedPrisonersDilemma": _game((2,), 40),
    "IteratedRockPaperScissors": _game((2,), 18),
    "IteratedTwoThirdsAverage": _game((2,), 20),
    "IteratedUltimatumGame": _game((2,), 12),
    "KuhnPoker": _game((2,), 9),
    "LinesOfAction": _game((2,), 150),
    "MemoryGame": _game((2,), 32),
    "NewRecruit": _game((2,), 12),
    "Nim": _game((2,), 12),
    "Othello": _game((2,), 70),
    "PigDice": _game((2,), 150),
    "QuantumTicTacToe": _game((2,), 27),
    "SimpleBlindAuction": _game((2,), 10),
    "SimpleNegotiation": _game((2,), 12),
    "SimpleTak": _game((2,), 16),
    "Tak": _game((2,), 150),
    "TicTacToe": _game((2,), 9),
    "TruthAndDeception": _game((2,), 8),
    "TwoDollar": _game((2,), 22),
    "UltimateTicTacToe": _game((2,), 81),
    "WildTicTacToe": _game((2,), 9),
    # two or more players
    "LiarsDice": _game((2, 3, 4), 150),
    "Snake": _game((2, 3, 4), 42),
    "Surround": _game((2, 3, 4), 42),
    # more players
    "SecretMafia": _game((6, 7, 8), 250),
    "Taboo": _game((4, 6), 72),
    "ThreePlayerTicTacToe": _game((3,), 25),
    "ThreePlayerGOPS": _game((3,), 39),
    "ThreePlayerIPD": _game((3,), 30),
    "SettlersOfCatan": _game((4,), 202),
}
"""Game -> `players` (the player counts it is checked with; the first is the default), `num_turns` and `settings`
(TextArena keyword arguments given by default; `make(..., **kwargs)` overrides them; none so far).

`num_turns` is the env's step cap under `invalid_action="forfeit"` or "random" (twice it under "retry"): the
most moves the game's rules allow at its default settings and largest player count (TicTacToe 9, KuhnPoker's 3 rounds 9,
Taboo's 4 rounds of 6 attempts per guesser 72), with a step or two of margin where TextArena's own turn limit
lets one more move through; 150 where the rules set no bound (Golf, HighSociety's tied bids, IndianPoker's
raises, LinesOfAction, PigDice's rolls, Tak, LiarsDice), 250 for SecretMafia (8 players). Other settings
(`max_rounds=15`) may need `num_turns=` too."""

_NLTK = "needs nltk word lists (nltk.download), which this package never fetches"
_JUDGE = "needs an LLM judge through OpenRouter (an API key and network) when it is built"
_PY312 = "uses Python 3.12 f-string syntax (a SyntaxError on import under Python 3.10-3.11)"
_UNREGISTERED = "has a folder in TextArena 0.7.4 but no registered id"

REFUSED: dict[str, str] = {
    **dict.fromkeys(["Codenames", "DontSayIt", "Hangman", "LetterAuction", "SpellingBee", "WordChains", "WordLadder",
                     "WordSearch", "Wordle"], _NLTK),
    **dict.fromkeys(["Debate", "GuessWho", "ScenarioPlanning", "TwentyQuestions"], _JUDGE),
    **dict.fromkeys(["Chess", "Checkers", "ReverseTicTacToe", "IteratedStagHunt", "UltimateTexasHoldem"], _PY312),
    "Klondike": "broken upstream: a SyntaxError on import under Python 3.11 (and an error under 3.12)",
    "ScorableGames": "broken upstream: its game data files are missing from the package",
    "UsedCarNegotiation": "broken upstream: its data files are missing from the package",
    "BabyAiText": "needs the gym package, which textarena does not install",
    "UsedCar": "broken upstream: imports a module missing from the package",
    "CharacterConclave": "broken upstream: its first move raises a TypeError (add_observation's arguments)",
    **dict.fromkeys(["Hanabi", "LeducHoldem", "Diplomacy", "TwoRoomsAndABoom"], _UNREGISTERED),
    "Poker": "does not finish: 400 steps of naive play ended no game, and its invalid moves never end one",
    "SantoriniBaseFixed": "does not finish: 400 steps of naive play ended no game, and its invalid moves never "
                          "end one",
    "SpiteAndMalice": "does not finish: with bots in both seats 17 of 20 games ran past 2,000 steps",
    "Stratego": "broken upstream: its win check raises a TypeError in the middle of some games (bot games run "
                "1,356 steps at the median)",
}
"""Game -> why `make("textarena/<Game>-v0")` refuses it (it raises `EnvNotFound` with this reason)."""


def game_spec(id: str) -> EnvSpec:
    """The spec of a `textarena/<Game>-v0` id (the registry's resolver for the namespace): an allowlisted game,
    else `EnvNotFound` with the reason it is refused or the closest allowlisted names."""
    match = ID_PATTERN.match(id)
    if match is None or match["namespace"] != "textarena":
        raise EnvNotFound(f"{id!r} is not a TextArena id; they look like 'textarena/KuhnPoker-v0'.")
    name = match["name"]
    if match["version"] != "0":
        raise EnvNotFound(f"TextArena ids have version 0 only, got {id!r}; use 'textarena/{name}-v0'.")
    if name in REFUSED:
        raise EnvNotFound(f"TextArena game {name!r} is refused ({REFUSED[name]}). "
                          f"comlrl_env.games.textarena.ALLOWED lists the games that play.")
    if name not in ALLOWED:
        close = difflib.get_close_matches(name, list(ALLOWED), n=5, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise EnvNotFound(f"No allowlisted TextArena game named {name!r}.{hint} "
                          f"comlrl_env.games.textarena.ALLOWED lists them: {', '.join(sorted(ALLOWED))}.")
    return EnvSpec(id, "comlrl_env.games.textarena:TextArenaEnv", {"game": name})
