"""What playing TextArena games costs the env, against what training on them costs.

    .venv/bin/python benchmarks/textarena_cost.py [--games KuhnPoker TicTacToe ...] [--episodes 20] [--repeats 3]
        [--out benchmarks/results/textarena_cost]

For each game of the `textarena` suite (`--games`: any allowlisted two-player games), `--episodes` episodes of
the random bot in both seats (reset seeds 0..), on a fresh env per run: the seconds to reset, to clone the reset
env (a learner clones each reset root into its group's copies), to step (one move, the game's own step and the
adapter's bookkeeping) and to build the prompts (every seat's view and prompt, `env.prompts()`), each per move:
reset and clone are spread over the episode's moves. The bot's own time is left out. Median of `--repeats`
runs. The training cost it is compared with is measured, not assumed: the MAGRPO team unit of the cooperation
results (SmolLM2-135M, LoRA, 2 CPU cores) spent `seconds_train / completions` per completion; a move is one
completion of the seat to move, so the share is the env's seconds per move over that.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINING_UNIT = os.path.join(HERE, "results", "coop", "secretpair", "seed0", "team-magrpo-lora.json")
PARTS = ("reset", "clone", "step", "prompts")


def measure(game: str, episodes: int) -> dict[str, float]:
    """Seconds spent in each of PARTS over `episodes` bot episodes of a fresh env, and the moves played."""
    from comlrl_env import make
    from comlrl_env.games.textarena import TextArenaBot

    env = make(f"textarena/{game}-v0")
    bots = {a: TextArenaBot("random", seed=i) for i, a in enumerate(env.possible_agents)}
    spent, moves = dict.fromkeys(PARTS, 0.0), 0
    for seed in range(episodes):
        start = time.perf_counter()
        env.reset(seed=seed)
        spent["reset"] += time.perf_counter() - start
        start = time.perf_counter()
        env.clone()
        spent["clone"] += time.perf_counter() - start
        while env.agents:
            actions = {a: bots[a].act([env], a)[0] for a in env.to_move()}
            start = time.perf_counter()
            env.step(actions)  # builds the prompts too: their time is measured below and taken off
            spent["step"] += time.perf_counter() - start
            moves += 1
            if env.agents:  # a step builds the prompts unless it ends the episode: the same work again
                start = time.perf_counter()
                env.prompts()
                spent["prompts"] += time.perf_counter() - start
    spent["step"] -= spent["prompts"]
    return {**spent, "moves": moves}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", help="TextArena game names (default: the textarena suite's)")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "textarena_cost"))
    args = parser.parse_args()

    import textarena

    from comlrl_env.suites import suites

    names = args.games or [spec.split("/", 1)[1].rsplit("-v", 1)[0] for spec in suites["textarena"]]
    unit = json.load(open(TRAINING_UNIT))
    completions = 2 * unit["training"]["completions_per_agent"]
    train_per_completion = unit["training"]["seconds"] / completions
    rows = []
    for name in names:
        runs = [measure(name, args.episodes) for _ in range(args.repeats)]
        per_move = {part: 1000 * statistics.median(r[part] / r["moves"] for r in runs) for part in PARTS}
        total = sum(per_move.values())
        rows.append({"game": name, "moves_per_episode": statistics.median(r["moves"] for r in runs) / args.episodes,
                     **{f"{part}_ms_per_move": ms for part, ms in per_move.items()}, "env_ms_per_move": total,
                     "share_of_training": total / 1000 / train_per_completion})
    os.makedirs(args.out, exist_ok=True)
    result = {"episodes": args.episodes, "repeats": args.repeats, "textarena": textarena.__version__,
              "train_seconds_per_completion": train_per_completion,
              "training_unit": os.path.relpath(TRAINING_UNIT, HERE), "rows": rows}
    with open(os.path.join(args.out, "textarena_cost.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = [f"training: {train_per_completion:.3f} s per completion (MAGRPO, SmolLM2-135M, LoRA; "
             f"{os.path.relpath(TRAINING_UNIT, HERE)})",
             f"median of {args.repeats} runs of {args.episodes} random-bot episodes (reset seeds "
             f"0-{args.episodes - 1}), textarena {textarena.__version__}; reset and clone spread over each "
             "episode's moves",
             "| game | moves/episode | reset ms/move | clone ms/move | step ms/move | prompts ms/move | env ms/move | "
             "share of training |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['game']} | {r['moves_per_episode']:.1f} | {r['reset_ms_per_move']:.3f} | "
              f"{r['clone_ms_per_move']:.3f} | {r['step_ms_per_move']:.3f} | {r['prompts_ms_per_move']:.3f} | "
              f"{r['env_ms_per_move']:.3f} | {100 * r['share_of_training']:.2f}% |" for r in rows]
    worst = max(rows, key=lambda r: r["share_of_training"])
    lines.append(f"worst: {worst['game']}, {worst['env_ms_per_move']:.2f} ms per move, "
                 f"{100 * worst['share_of_training']:.2f}% of a training completion")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "textarena_cost.txt"), "w") as f:
        f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
