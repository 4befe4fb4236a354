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

**Elo.** The ratings R and each game's first-move edge h maximise the likelihood of the scores (a win 1, a
draw 1/2) under `P(i in seat 0 beats j) = 1 / (1 + 10^((R_j - R_i - h) / 400))` (Bradley-Terry on the Elo
scale, with a seat term): h is what seat 0 (the first mover of a sequential game) gains over seat 1, fitted
jointly, so a game's seat edge does not pull the ratings together. One virtual draw is added to every pair
that played, split evenly over its games and seat orders (one prior per pair, however many games its record
spans), so a player that wins every game still gets a finite rating. The fit
is Newton's method on the log-likelihood, anchored: the random bot is 1000 when it plays, else the mean is
1000. Ratings are fitted per game and over all games pooled (`overall`, with a first-move term per game).

**Intervals.** Each rating's (relative to the anchor) and each first-move edge's 95% interval is a profile
likelihood interval: the values whose best likelihood, with every other parameter refitted, stays within
`chi2_1(0.95) / 2 = 1.92` log-likelihood units of the maximum. A lopsided record has a lopsided interval and a
sweep a wide one (20 wins of 20 in each seat order: the winner 763 Elo above, 95% interval 425 .. 1604),
never a point; the anchor alone is fixed. Seeded simulations check coverage (`tests/test_intervals_coverage.py`:
a +500 player over 16 games, +800 over 40, a first-move edge of 150).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import warnings
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from comlrl_env.base import TextParallelEnv
from comlrl_env.benchmark import Policy, fixed_team, play_episodes, seated
from comlrl_env.registry import make
from comlrl_env.suites import suites

__all__ = ["ANCHOR", "EloDesign", "elo_ratings", "league_table", "play_match", "profile_intervals", "run_league"]

ANCHOR = ("random-bot", 1000.0)
"""The player whose rating is fixed, and its rating (else the mean rating is this value)."""
CHI2_95 = 3.841458820694124
"""The 95% quantile of chi-squared with one degree of freedom: the profile deviance that bounds an interval."""
ELO = 400 / np.log(10)
"""Elo points per unit of natural-log odds."""
INTERVAL = ("95% profile-likelihood intervals, in Elo: each holds the values of a rating (or of a game's "
            "first-move edge) whose likelihood, every other parameter refitted, is within 1.92 log-units of the "
            "maximum; the anchor is fixed.")
"""How the league's intervals are made (its output's header says it)."""


def play_match(env: TextParallelEnv, a: Policy, b: Policy, episodes: int, seed: int = 0) -> dict[str, float]:
    """A against B: `episodes` episodes in each seat order (module docstring); counts from A's side."""
    if len(env.possible_agents) != 2:
        raise ValueError(f"a match needs a two-player game; {env.metadata.get('name')} has "
                         f"{len(env.possible_agents)} players.")
    wins = draws = losses = 0
    invalid = {"a": [0, 0], "b": [0, 0]}  # [flagged, taken]
    first: dict[str, int] = {}
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
        first = first or {"first_wins": wins, "first_draws": draws, "first_losses": losses}  # A in seat 0
    games = wins + draws + losses
    return {"wins": wins, "draws": draws, "losses": losses, **first, "games": games, "win_rate": wins / games,
            "draw_rate": draws / games, "loss_rate": losses / games,
            "invalid_a": invalid["a"][0] / max(invalid["a"][1], 1),
            "invalid_b": invalid["b"][0] / max(invalid["b"][1], 1)}


def _loglik(eta: np.ndarray, scores: np.ndarray, games: np.ndarray) -> np.ndarray:
    """Sum over groups of `s log sigma(eta) + (n - s) log sigma(-eta)`: (B, K) -> (B,)."""
    return -(scores * np.logaddexp(0, -eta) + (games - scores) * np.logaddexp(0, eta)).sum(-1)


def _maximise(X: np.ndarray, offset: np.ndarray, scores: np.ndarray, games: np.ndarray, psi: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Newton's method with step halving on `_loglik(offset + psi X^T)` over psi (B, D), from `psi`; the
    likelihood is concave, and the virtual draws keep its maximum finite. Returns (psi, log-likelihood)."""
    ll = _loglik(offset + psi @ X.T, scores, games)
    if X.shape[1] == 0:
        return psi, ll
    for _ in range(200):
        p = 1 / (1 + np.exp(-(offset + psi @ X.T)))
        grad = (scores - games * p) @ X
        hessian = np.einsum("kd,bk,ke->bde", X, games * p * (1 - p), X) + 1e-12 * np.eye(X.shape[1])
        step = np.linalg.solve(hessian, grad[..., None])[..., 0]
        t = np.ones(len(psi))
        for _ in range(50):
            new_ll = _loglik(offset + (psi + t[:, None] * step) @ X.T, scores, games)
            worse = new_ll < ll - 1e-12 * np.abs(ll)
            if not worse.any():
                break
            t = np.where(worse, t / 2, t)
        t = np.where(worse, 0.0, t)
        psi, ll = psi + t[:, None] * step, np.where(worse, ll, new_ll)
        if np.abs(t[:, None] * step).max() < 1e-10:
            break
    return psi, ll


def profile_intervals(X: np.ndarray, scores: np.ndarray, games: np.ndarray, contrasts: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimates and 95% profile-likelihood intervals of `contrasts @ phi`, in Elo, for B leagues at once.

    The model: group k (a pair in one seat order) has `games[k]` games in which A scored `scores[b, k]`, each
    with `P(A wins) = sigma(X[k] @ phi)` (natural-log odds). `phi` maximises the likelihood; the interval of
    `c @ phi` is every value r whose best likelihood under `c @ phi = r` is within `chi2_1(0.95) / 2 = 1.92`
    of the maximum (found by bisection). A zero contrast (the anchor) has a point interval.

    Args:
        X: (K, D) the design: +1 on A's rating, -1 on B's, +-1 on the game's first-move term.
        scores: (B, K) A's scores (a win 1, a draw 1/2), the virtual draws included.
        games: (K,) games per group, the virtual draws included.
        contrasts: (C, D) the quantities to report.

    Returns:
        (estimate, low, high), each (B, C), in Elo (400 / ln 10 natural-log odds).
    """
    B, D = len(scores), contrasts.shape[1]
    phi, best = _maximise(X, np.zeros_like(scores), scores, games, np.zeros((B, D)))
    estimate = phi @ contrasts.T
    p = 1 / (1 + np.exp(-(phi @ X.T)))
    covariance = np.linalg.inv(np.einsum("kd,bk,ke->bde", X, games * p * (1 - p), X) + 1e-12 * np.eye(D))
    low, high = estimate.copy(), estimate.copy()
    for c, a in enumerate(contrasts):
        if not a.any():
            continue
        null = np.linalg.svd(a[None])[2][1:].T  # (D, D - 1): the directions that keep a @ phi fixed
        direction = a / (a @ a)
        se = np.sqrt(np.einsum("d,bde,e->b", a, covariance, a))
        side = np.repeat([-1.0, 1.0], B)
        near, far = np.tile(estimate[:, c], 2), np.tile(estimate[:, c], 2) + side * np.tile(8 * se + 5, 2)
        psi = np.tile(phi @ null, (2, 1))
        data, top = np.tile(scores, (2, 1)), np.tile(best, 2)

        def deviance(r: np.ndarray, psi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            psi, ll = _maximise(X @ null, r[:, None] * (X @ direction), data, games, psi)
            return 2 * (top - ll), psi

        reached, _ = deviance(far, psi)
        for _ in range(30):  # halves the bracket (8 se + 5 log-odds wide) to a few 1e-8 log-odds
            mid = (near + far) / 2
            dev, psi = deviance(mid, psi)
            near, far = np.where(dev < CHI2_95, mid, near), np.where(dev < CHI2_95, far, mid)
        bound = np.where(reached < CHI2_95, side * np.inf, (near + far) / 2)
        low[:, c], high[:, c] = bound[:B], bound[B:]
    return estimate * ELO, low * ELO, high * ELO


@dataclasses.dataclass
class EloDesign:
    """The Bradley-Terry model of match rows (module docstring), as arrays for `profile_intervals`."""

    players: list[str]
    seat_games: list[str]  # the games whose rows give a seat split, each with a first-move term
    X: np.ndarray  # (K, D) groups x (ratings of players[1:], first-move terms)
    scores: np.ndarray  # (K,) A's observed score per group, with its share of the virtual draw
    games: np.ndarray  # (K,) games per group, with its share of the virtual draw
    played: dict[str, int]  # real games per player

    @classmethod
    def from_rows(cls, rows: Sequence[dict[str, Any]]) -> "EloDesign":
        """A group per row, or two (one per seat order) where the row has `first_wins`, `first_draws` and
        `first_losses` (A's record in seat 0). Each pair of players gets ONE virtual draw, split evenly between
        all its groups, however its games are split into rows (games, seat orders): a pair's prior does not
        grow with the number of games in a suite."""
        players = sorted({r[k] for r in rows for k in ("a", "b")})
        seat_games = list(dict.fromkeys(r.get("game", "") for r in rows if "first_wins" in r))
        at, D = {p: i for i, p in enumerate(players)}, len(players) - 1 + len(seat_games)
        X, scores, games, played = [], [], [], dict.fromkeys(players, 0)
        played_rows = [r for r in rows if r["wins"] + r["draws"] + r["losses"] > 0]
        groups: dict[frozenset[str], int] = {}  # groups per pair: the virtual draw's share is 1 / this
        for r in played_rows:
            pair = frozenset((r["a"], r["b"]))
            groups[pair] = groups.get(pair, 0) + (2 if "first_wins" in r else 1)
        for r in played_rows:
            total = np.array([r["wins"], r["draws"], r["losses"]], dtype=float)
            played[r["a"]] += int(total.sum())
            played[r["b"]] += int(total.sum())
            x = np.zeros(D)
            x[at[r["a"]] - 1] += at[r["a"]] > 0
            x[at[r["b"]] - 1] -= at[r["b"]] > 0
            share = 1.0 / groups[frozenset((r["a"], r["b"]))]
            if "first_wins" in r:
                first = np.array([r["first_wins"], r["first_draws"], r["first_losses"]], dtype=float)
                splits = [(first, 1.0), (total - first, -1.0)]
            else:
                splits = [(total, 0.0)]
            for (w, d, l), seat in splits:
                row = x.copy()
                if seat:
                    row[len(players) - 1 + seat_games.index(r.get("game", ""))] = seat
                X.append(row)
                scores.append(w + d / 2 + share / 2)
                games.append(w + d + l + share)
        return cls(players, seat_games, np.array(X).reshape(-1, D), np.array(scores), np.array(games), played)

    def contrasts(self) -> np.ndarray:
        """(P + G, D): each player's rating minus the anchor's (the mean's without it), then each first-move
        term."""
        P, G = len(self.players), len(self.seat_games)
        anchor = ANCHOR[0]
        base = np.eye(P)[self.players.index(anchor)] if anchor in self.players else np.full(P, 1 / P)
        ratings = (np.eye(P) - base)[:, 1:]
        return np.block([[ratings, np.zeros((P, G))], [np.zeros((G, P - 1)), np.eye(G)]])


def connected_parts(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The players of match rows grouped into the parts that games connect (a player is in the part of every
    opponent it played, directly or through others), each part sorted, largest first."""
    parent: dict[str, str] = {}

    def root(p: str) -> str:
        while parent.setdefault(p, p) != p:
            p = parent[p]
        return p

    for r in rows:
        a, b = root(r["a"]), root(r["b"])  # every player is in some part, even one with no games yet
        if r["wins"] + r["draws"] + r["losses"] > 0:
            parent[a] = b
    parts: dict[str, list[str]] = {}
    for p in sorted(parent):
        parts.setdefault(root(p), []).append(p)
    return sorted(parts.values(), key=lambda part: (-len(part), part))


def elo_ratings(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Elo ratings and first-move edges of match rows (`a`, `b`, `wins`, `draws`, `losses`, and `game` and
    the `first_*` counts for a seat term), with 95% profile-likelihood intervals (module docstring):
    `{"players": {player: {"elo", "low", "high", "games"}}, "first_move": {game: {"elo", "low", "high"}}}`.

    Ratings compare only players that games connect. When the rows fall into several parts that never met,
    each part is rated on its own (anchored at the random bot where it plays in that part, else at a mean of
    1000), every player carries its `part` (0 for the largest), and a warning names the parts: a rating in
    one part says nothing about a player in another.
    """
    parts = connected_parts(rows)
    if len(parts) > 1:
        warnings.warn(f"the league's players fall into {len(parts)} parts that never played each other: "
                      + "; ".join(f"part {i}: {', '.join(part)}" for i, part in enumerate(parts))
                      + ". Each part is rated on its own; do not compare ratings across parts (add matches "
                      "between them to rank everyone).", stacklevel=2)
        fits = [_fit([r for r in rows if r["a"] in part], part_index=i) for i, part in enumerate(parts)]
        return {"players": {p: v for fit in fits for p, v in fit["players"].items()},
                "first_move": {g: v for fit in fits for g, v in fit["first_move"].items()}}
    return _fit(rows)


def _fit(rows: Sequence[dict[str, Any]], part_index: int | None = None) -> dict[str, Any]:
    """`elo_ratings` of rows whose players games connect (`part_index`: the part they are, when several)."""
    design = EloDesign.from_rows(rows)
    if len(design.players) < 2:
        return {"players": {}, "first_move": {}}
    estimate, low, high = (x[0] for x in profile_intervals(design.X, design.scores[None], design.games,
                                                           design.contrasts()))
    P = len(design.players)
    players = {p: {"elo": float(ANCHOR[1] + estimate[i]), "low": float(ANCHOR[1] + low[i]),
                   "high": float(ANCHOR[1] + high[i]), "games": design.played[p]}
               for i, p in enumerate(design.players)}
    if part_index is not None:
        for rating in players.values():
            rating["part"] = part_index
    first_move = {g: {"elo": float(estimate[P + k]), "low": float(low[P + k]), "high": float(high[P + k])}
                  for k, g in enumerate(design.seat_games)}
    return {"players": players, "first_move": first_move}


def run_league(games: str | Sequence[str | TextParallelEnv], policies: dict[str, Policy], episodes: int,
               out_dir: str | None = None, seed: int = 0, bots: bool = True,
               metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """Round robins between `policies` (and each game's reference bots) on every two-player competitive or
    general-sum game of `games` (a suite name, or env ids and instances); see the module docstring.

    Returns (and writes to `out_dir` as `league.json` and `league.md`): `games` (per game: `rows`, one per
    pair, `ratings` and `first_move`, the seat-0 edge in Elo), `overall` (ratings over all games), `skipped`
    (games with no winner or not two players, with why), plus `metadata`.

    Args:
        games: A suite name (e.g. "games"), or env ids and env instances; games that are not two-player
            competitive or general-sum are skipped.
        policies: `{name: policy}`: benchmark policies (`comlrl_env.benchmark.Policy`, e.g. an `AgentPolicy`),
            each able to play either seat.
        episodes: Episodes per pair and seat order (each pair plays `2 * episodes` games).
        out_dir: Where to write `league.json` and `league.md`; None writes nothing.
        seed: Reset seeds are `seed .. seed + episodes - 1`, the same for every pair.
        bots: Add each game's reference bots (`env.reference_bots()`: random, and MCTS where it applies).
        metadata: Keys added to the result and `league.json` (e.g. the agents and versions).
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
        fit = elo_ratings(mine)
        per_game[name] = {"rows": mine, "ratings": fit["players"], "first_move": fit["first_move"].get(name)}
    league = {**(metadata or {}), "episodes": episodes, "seed": seed, "interval": INTERVAL, "games": per_game,
              "overall": elo_ratings(rows)["players"], "skipped": skipped}
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "league.json"), "w", encoding="utf-8") as f:
            json.dump(league, f, indent=2, default=str)
        with open(os.path.join(out_dir, "league.md"), "w", encoding="utf-8") as f:
            f.write(league_table(league))
    return league


def _ratings_lines(ratings: dict[str, dict[str, float]]) -> list[str]:
    lines = ["| player | Elo | 95% interval | games | not told apart from |", "|---|---|---|---|---|"]
    for p, r in sorted(ratings.items(), key=lambda kv: -kv[1]["elo"]):
        close = [q for q, o in ratings.items() if q != p and o["low"] <= r["high"] and r["low"] <= o["high"]
                 and o.get("part") == r.get("part")]
        name = f"{p} (part {r['part']})" if "part" in r else p  # parts that never met: not comparable
        lines.append(f"| {name} | {r['elo']:.0f} | {r['low']:.0f} .. {r['high']:.0f} | {r['games']} | "
                     f"{', '.join(sorted(close)) or '-'} |")
    return lines


def league_table(league: dict[str, Any]) -> str:
    """Markdown: per game, each pair's win/draw/loss rates and invalid-answer rates, the Elo ratings (with the
    players whose intervals overlap: too few games to rank them) and the first-move edge; then the ratings
    over all games.

    Args:
        league: What `run_league` returned (or its `league.json`, loaded).
    """
    anchor, value = ANCHOR
    lines = [f"# League ({league['episodes']} episodes per seat order, seed {league['seed']}; Elo anchored at "
             f"{anchor} = {value:.0f} when it plays, else mean {value:.0f})", "", f"Intervals: {INTERVAL}", ""]
    for name, game in league["games"].items():
        lines += [f"## {name}", "", "| A | B | A wins | draws | A losses | games | invalid A | invalid B |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['a']} | {r['b']} | {r['win_rate']:.2f} | {r['draw_rate']:.2f} | {r['loss_rate']:.2f} | "
                  f"{r['games']} | {r['invalid_a']:.2f} | {r['invalid_b']:.2f} |" for r in game["rows"]]
        lines += ["", *_ratings_lines(game["ratings"]), ""]
        edge = game.get("first_move")
        if edge:
            lines += [f"First-move edge (seat 0 over seat 1): {edge['elo']:+.0f} Elo, 95% interval "
                      f"{edge['low']:+.0f} .. {edge['high']:+.0f}", ""]
    if league["overall"]:
        lines += ["## All games", "", *_ratings_lines(league["overall"]), ""]
    if league["skipped"]:
        lines += ["Skipped: " + ", ".join(f"{g} ({why})" for g, why in league["skipped"].items()), ""]
    return "\n".join(lines)
