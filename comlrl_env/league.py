"""A league: round robins between policies on two-player games, with win, draw and loss rates and Elo.

    from comlrl_env.league import league_table, run_league
    from learners.models.policy import AgentPolicy

    league = run_league("games", {"trained": AgentPolicy.from_saved("runs/ttt/agents"),
                                  "base": AgentPolicy(["HuggingFaceTB/SmolLM2-135M-Instruct"])}, episodes=50)
    print(league_table(league))            # or: comlrl-bench --suite games --league --agents ...

A return that rose says an agent improved; a league says how strong it is, against the same opponents.

**Entrants.** The given policies (benchmark policies: `policy(observations, envs) -> actions`, each able
to play any seat, e.g. a saved team) and, per game, its reference bots (`env.reference_bots()`: the
uniform random bot, and MCTS where it applies), unless `bots=False`.

**Games.** Two-player games whose players do not share one utility; a cooperative game has no winner,
and other games are skipped (listed in `skipped`).

**Matches.** Every pair (A, B) plays `episodes` episodes with A in seat 0 and B in seat 1, then the same
episodes (reset seeds `seed..seed+episodes-1`) with the seats swapped: `2 * episodes` games. A game is a
loss for a player whose answer forfeited it (the other way round it is a win; both: a draw), else a win
for the player with the higher return and a draw on equal returns. Each row gives A's win, draw and loss
rates, and each player's invalid-answer rate.

**Elo.** The ratings R maximise the likelihood of the scores (a win 1, a draw 1/2) under
`P(i beats j) = 1 / (1 + 10^((R_j - R_i) / 400))` (Bradley-Terry on the Elo scale), with one virtual draw
added to every pair that played, so a player that wins every game still gets a finite rating. They are fitted
by the minorise-maximise iteration `g_i <- W_i / sum_j n_ij / (g_i + g_j)`, `g = 10^(R / 400)`, and anchored:
the random bot is 1000 when it plays, else the mean is 1000. The 95% interval is a percentile bootstrap:
each pair's games are resampled with replacement `bootstrap` times and the ratings refitted. Ratings are
fitted per game and over all games pooled (`overall`).
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from comlrl_env.base import TextParallelEnv
from comlrl_env.benchmark import Policy, fixed_team, play_episodes, seated
from comlrl_env.registry import make
from comlrl_env.suites import suites

__all__ = ["ANCHOR", "elo_ratings", "league_table", "play_match", "run_league"]

ANCHOR = ("random-bot", 1000.0)
"""The player whose rating is fixed, and its rating (else the mean rating is this value)."""


def play_match(env: TextParallelEnv, a: Policy, b: Policy, episodes: int, seed: int = 0) -> dict[str, float]:
    """A against B: `episodes` episodes in each seat order (module docstring); counts from A's side."""
    if len(env.possible_agents) != 2:
        raise ValueError(f"a match needs a two-player game; {env.metadata.get('name')} has "
                         f"{len(env.possible_agents)} players.")
    wins = draws = losses = 0
    invalid = {"a": [0, 0], "b": [0, 0]}  # [flagged, taken]
    for seats in (("a", "b"), ("b", "a")):
        played = play_episodes(env, seated([a if s == "a" else b for s in seats]), episodes, seed)
        for returns, forfeited in zip(played.returns, played.forfeited):
            mine, theirs = (env.possible_agents[seats.index(s)] for s in ("a", "b"))
            lost = (mine in forfeited) - (theirs in forfeited)
            edge = -lost if lost else (returns[mine] > returns[theirs]) - (returns[mine] < returns[theirs])
            wins, draws, losses = wins + (edge > 0), draws + (edge == 0), losses + (edge < 0)
        for s, agent in zip(seats, env.possible_agents):
            invalid[s][0] += played.invalid[agent]
            invalid[s][1] += played.actions[agent]
    games = wins + draws + losses
    return {"wins": wins, "draws": draws, "losses": losses, "games": games, "win_rate": wins / games,
            "draw_rate": draws / games, "loss_rate": losses / games,
            "invalid_a": invalid["a"][0] / max(invalid["a"][1], 1),
            "invalid_b": invalid["b"][0] / max(invalid["b"][1], 1)}


def _fit(scores: np.ndarray, games: np.ndarray, iterations: int = 2000) -> np.ndarray:
    """Bradley-Terry strengths g of (..., P, P) score and game-count matrices, by minorise-maximise."""
    g = np.ones(scores.shape[:-1])
    wins = scores.sum(-1)
    for _ in range(iterations):
        new = wins / (games / (g[..., :, None] + g[..., None, :])).sum(-1)
        new /= np.exp(np.log(new).mean(-1, keepdims=True))
        if np.max(np.abs(new - g)) < 1e-10:
            return new
        g = new
    return g


def elo_ratings(rows: Sequence[dict[str, Any]], bootstrap: int = 1000, seed: int = 0
                ) -> dict[str, dict[str, float]]:
    """Elo rating and 95% bootstrap interval of every player in `rows` (match rows with `a`, `b`, `wins`,
    `draws`, `losses`), as the module docstring says: `{player: {"elo", "low", "high", "games"}}`."""
    players = sorted({r[k] for r in rows for k in ("a", "b")})
    if len(players) < 2:
        return {}
    at = {p: i for i, p in enumerate(players)}
    P = len(players)
    rng = np.random.default_rng(seed)
    counts = np.zeros((bootstrap + 1, P, P, 3))  # wins, draws, losses of i against j; sample 0 is the data
    for r in rows:
        i, j = at[r["a"]], at[r["b"]]
        observed = np.array([r["wins"], r["draws"], r["losses"]], dtype=float)
        n = int(observed.sum())
        if n == 0:
            continue
        resampled = np.concatenate([observed[None], rng.multinomial(n, observed / n, size=bootstrap)])
        counts[:, i, j] += resampled
        counts[:, j, i] += resampled[:, ::-1]
    games = counts.sum(-1)
    met = games > 0
    scores = counts[..., 0] + 0.5 * counts[..., 1] + 0.5 * met  # one virtual draw per pair that played
    ratings = 400 * np.log10(_fit(scores, games + met))
    anchor, value = ANCHOR
    ratings += value - (ratings[:, [at[anchor]]] if anchor in at else ratings.mean(-1, keepdims=True))
    low, high = np.percentile(ratings[1:], [2.5, 97.5], axis=0) if bootstrap else (ratings[0], ratings[0])
    return {p: {"elo": float(ratings[0, i]), "low": float(low[i]), "high": float(high[i]),
                "games": int(games[0, i].sum())} for p, i in at.items()}


def run_league(games: str | Sequence[str | TextParallelEnv], policies: dict[str, Policy], episodes: int,
               out_dir: str | None = None, seed: int = 0, bots: bool = True, bootstrap: int = 1000,
               metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """Round robins between `policies` (and each game's reference bots) on every two-player competitive or
    general-sum game of `games` (a suite name, or env ids and instances); see the module docstring.

    Returns (and writes to `out_dir` as `league.json` and `league.md`): `games` (per game: `rows`, one per
    pair, and `ratings`), `overall` (ratings over all games), `skipped` (games with no winner or not two
    players, with why), plus `metadata`.
    """
    if isinstance(games, str) and games not in suites:
        raise ValueError(f"unknown suite {games!r}; known: {sorted(suites)}.")
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}.")
    specs = suites[games] if isinstance(games, str) else list(games)
    per_game: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    jobs = []
    for spec in specs:
        env = make(spec) if isinstance(spec, str) else spec
        name = spec if isinstance(spec, str) else env.metadata.get("name", type(env).__name__)
        if len(env.possible_agents) != 2 or env.metadata.get("reward_structure") == "cooperative":
            skipped[name] = (f"{len(env.possible_agents)} players" if len(env.possible_agents) != 2
                             else "cooperative: no winner")
            continue
        entrants = dict(policies)
        if bots and hasattr(env, "reference_bots"):
            entrants.update({bot: fixed_team([p]) for bot, p in env.reference_bots().items()})
        if len(entrants) < 2:
            raise ValueError(f"a league needs two players or more; {name} has {sorted(entrants)} (bots={bots}).")
        jobs += [(name, env, a, b, entrants[a], entrants[b]) for a, b in itertools.combinations(entrants, 2)]
    rows = []
    for name, env, a, b, pa, pb in tqdm(jobs, desc="league"):
        rows.append({"game": name, "a": a, "b": b, **play_match(env, pa, pb, episodes, seed)})
    for name in dict.fromkeys(r["game"] for r in rows):
        mine = [r for r in rows if r["game"] == name]
        per_game[name] = {"rows": mine, "ratings": elo_ratings(mine, bootstrap, seed)}
    league = {**(metadata or {}), "episodes": episodes, "seed": seed, "bootstrap": bootstrap, "games": per_game,
              "overall": elo_ratings(rows, bootstrap, seed), "skipped": skipped}
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "league.json"), "w", encoding="utf-8") as f:
            json.dump(league, f, indent=2, default=str)
        with open(os.path.join(out_dir, "league.md"), "w", encoding="utf-8") as f:
            f.write(league_table(league))
    return league


def _ratings_lines(ratings: dict[str, dict[str, float]]) -> list[str]:
    lines = ["| player | Elo | 95% interval | games |", "|---|---|---|---|"]
    for p, r in sorted(ratings.items(), key=lambda kv: -kv[1]["elo"]):
        lines.append(f"| {p} | {r['elo']:.0f} | {r['low']:.0f} .. {r['high']:.0f} | {r['games']} |")
    return lines


def league_table(league: dict[str, Any]) -> str:
    """Markdown: per game, each pair's win/draw/loss rates and invalid-answer rates, then the Elo ratings;
    then the ratings over all games."""
    anchor, value = ANCHOR
    lines = [f"# League ({league['episodes']} episodes per seat order, seed {league['seed']}; Elo anchored at "
             f"{anchor} = {value:.0f} when it plays, 95% bootstrap intervals)", ""]
    for name, game in league["games"].items():
        lines += [f"## {name}", "", "| A | B | A wins | draws | A losses | games | invalid A | invalid B |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['a']} | {r['b']} | {r['win_rate']:.2f} | {r['draw_rate']:.2f} | {r['loss_rate']:.2f} | "
                  f"{r['games']} | {r['invalid_a']:.2f} | {r['invalid_b']:.2f} |" for r in game["rows"]]
        lines += ["", *_ratings_lines(game["ratings"]), ""]
    if league["overall"]:
        lines += ["## All games", "", *_ratings_lines(league["overall"]), ""]
    if league["skipped"]:
        lines += ["Skipped: " + ", ".join(f"{g} ({why})" for g, why in league["skipped"].items()), ""]
    return "\n".join(lines)
