"""Preference data: pairs of joint texts that a reward ranks, their selection, replay and held-out split.

A pair is a dict `{"winner": text, "loser": text, "winner_reward": r_w, "loser_reward": r_l}` with
r_w > r_l and two different texts. Pairs on the same two texts (in either order) are one comparison
(`pair_key`): a held-out pair never shares its key with a pair the reward model trains on.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["PAIR_SELECTIONS", "candidate_pairs", "heldout_split", "make_pair", "matched_pairs", "pair_key",
           "replay_draw", "replay_weights", "select_pairs"]

PAIR_SELECTIONS = ("reward_gap", "random", "all")


def make_pair(winner: str, loser: str, winner_reward: float, loser_reward: float) -> dict[str, Any]:
    """One preference pair (JSON-ready)."""
    return {"winner": winner, "loser": loser, "winner_reward": winner_reward, "loser_reward": loser_reward}


def pair_key(pair: dict[str, Any]) -> frozenset[str]:
    """The comparison a pair makes: its two texts, whichever won."""
    return frozenset((pair["winner"], pair["loser"]))


def select_pairs(
    rewards: Sequence[float], pairs_per_sample: int | None, selection: str, generator: torch.Generator | None = None
) -> list[tuple[int, int]]:
    """Ordered (winner, loser) index pairs among one task instance's candidates.

    Every (w, l) with r_w > r_l is a candidate pair (ties dropped); "reward_gap" sorts them by
    r_w - r_l (largest first, stable), "random" shuffles them, "all" keeps index order; then the
    first `pairs_per_sample` are kept. Example: r = [1, 0, 1] -> (0,1), (2,1) with gaps 1, 1.
    """
    pairs = [(w, l) for w in range(len(rewards)) for l in range(len(rewards)) if rewards[w] > rewards[l]]
    return _ordered(pairs, [rewards[w] - rewards[l] for w, l in pairs], pairs_per_sample, selection, generator)


def candidate_pairs(
    texts: Sequence[str], rewards: Sequence[float], pairs_per_sample: int | None, selection: str,
    generator: torch.Generator | None = None,
) -> list[dict[str, Any]]:
    """`select_pairs` over one task instance's distinct candidate texts.

    Candidates with the same text are one candidate (first position, mean reward), so no pair holds one
    text twice and no pair is made twice. Example: texts [a, a, b], rewards [1, 0.5, 0] -> one pair
    (a, b) with rewards 0.75 and 0.
    """
    distinct: dict[str, list[float]] = {}
    for text, reward in zip(texts, rewards):
        distinct.setdefault(text, []).append(reward)
    unique = list(distinct)
    means = [sum(distinct[t]) / len(distinct[t]) for t in unique]
    return [make_pair(unique[w], unique[l], means[w], means[l])
            for w, l in select_pairs(means, pairs_per_sample, selection, generator)]


def matched_pairs(
    mine: Sequence[tuple[str, float]], theirs: Sequence[tuple[str, float]], pairs_per_sample: int | None,
    selection: str, generator: torch.Generator | None = None,
) -> list[dict[str, Any]]:
    """Pairs of index-matched (text, reward) candidates, mine[i] against theirs[i]; the higher reward wins.

    Ties, equal texts and repeats of an earlier comparison are dropped; then ordered and cut as `select_pairs`.
    """
    pairs, seen = [], set()
    for (a, ra), (b, rb) in zip(mine, theirs):
        if ra == rb or a == b or frozenset((a, b)) in seen:
            continue
        seen.add(frozenset((a, b)))
        pairs.append(make_pair(a, b, ra, rb) if ra > rb else make_pair(b, a, rb, ra))
    gaps = [p["winner_reward"] - p["loser_reward"] for p in pairs]
    return _ordered(pairs, gaps, pairs_per_sample, selection, generator)


def _ordered(items: list[Any], gaps: list[float], keep: int | None, selection: str,
             generator: torch.Generator | None) -> list[Any]:
    """`items` by `selection` (largest gap first, stable; shuffled; as given), the first `keep` of them."""
    if selection == "reward_gap":
        items = [items[i] for i in sorted(range(len(items)), key=lambda i: -gaps[i])]
    elif selection == "random":
        items = [items[i] for i in torch.randperm(len(items), generator=generator).tolist()]
    elif selection != "all":
        raise ValueError(f"selection must be one of {PAIR_SELECTIONS}, got {selection!r}.")
    return items if keep is None else items[:keep]


def heldout_split(
    shards: Sequence[Sequence[dict[str, Any]]], weights: Sequence[float], fraction: float, generator: torch.Generator,
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """Held-out pairs, and every shard without their comparisons, chosen before replay draws anything.

    The pool is the distinct comparisons (`pair_key`, first occurrence) of the shards replay may draw
    (weight > 0). When it has at least 10, `int(fraction * len(pool))` of them, drawn by `generator`, are
    held out, and every pair with one of their keys leaves every shard. So no held-out pair is a training
    pair however often replay repeats the rest.
    """
    pool: dict[frozenset[str], dict[str, Any]] = {}
    for shard, w in zip(shards, weights):
        for pair in shard if w > 0 else ():
            pool.setdefault(pair_key(pair), pair)
    n_held = int(len(pool) * fraction) if len(pool) >= 10 else 0
    distinct = list(pool.values())
    held = [distinct[i] for i in torch.randperm(len(distinct), generator=generator)[:n_held].tolist()]
    keys = {pair_key(p) for p in held}
    return held, [[p for p in shard if pair_key(p) not in keys] for shard in shards]


def replay_weights(sizes: Sequence[int], mode: str, k: int | None = None, lam: float | None = None) -> list[float]:
    """Sampling weight of each pair shard (oldest first; `sizes[i]` pairs in shard i). Empty shards weigh 0.

    current: only the newest shard; nearest_k: the newest k non-empty shards, equally; all_history:
    every non-empty shard, equally; lambda_decay: w_a proportional to (1 - lam) lam^a by age a (newest
    a = 0; an empty shard keeps its age), uniform when lam = 1. All zeros when no shard qualifies.
    Example: sizes [5, 3, 0], nearest_k with k = 1 -> [0, 1, 0] (the newest non-empty shard).
    """
    ages = list(reversed(range(len(sizes))))
    if mode == "current":
        w = [1.0 if a == 0 else 0.0 for a in ages]
    elif mode == "nearest_k":
        newest = [i for i in reversed(range(len(sizes))) if sizes[i] > 0][: k or 1]
        w = [1.0 if i in newest else 0.0 for i in range(len(sizes))]
    elif mode == "all_history":
        w = [1.0] * len(sizes)
    elif mode == "lambda_decay":
        w = [1.0] * len(sizes) if lam == 1 else [(1 - lam) * lam**a for a in ages]
    else:
        raise ValueError(f"unknown replay mode {mode!r}.")
    w = [x if n > 0 else 0.0 for x, n in zip(w, sizes)]
    total = sum(w)
    return [x / total for x in w] if total > 0 else [0.0] * len(sizes)


def replay_draw(shards: Sequence[Sequence[dict[str, Any]]], weights: Sequence[float], size: int,
                generator: torch.Generator) -> list[dict[str, Any]]:
    """`size` pairs: each from a shard drawn by `weights`, without replacement within a shard until it is
    used up, then from a reshuffled copy."""
    usable = [i for i, w in enumerate(weights) if w > 0 and shards[i]]
    if not usable:
        return []
    w = torch.tensor([weights[i] for i in usable])
    queues: dict[int, list[int]] = {}
    out = []
    for _ in range(size):
        shard = usable[int(torch.multinomial(w, 1, generator=generator))]
        if not queues.get(shard):
            queues[shard] = torch.randperm(len(shards[shard]), generator=generator).tolist()
        out.append(shards[shard][queues[shard].pop()])
    return out
