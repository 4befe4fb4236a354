"""`comlrl-bench`: evaluate teams of saved agents on suites and environments, with confidence intervals.

    comlrl-bench --suite smoke --agents outputs/quickstart/agents --episodes 64 --out bench/
    comlrl-bench --env smoke/FormatAgreement-v1 --env mytasks:MyEnv \\
        --agents trained=outputs/run/agents --agents base=outputs/base/agents --temperature 1.0 --out bench/
    comlrl-bench --suite games --league --agents trained=outputs/ttt/agents --agents base=outputs/base --out league/

- `--agents` may repeat: one team each, named by its folder or by `NAME=DIR`; a team is a `save_model`
  output dir (holding `agent_0/`, `agent_1/`, ...) or one dir per agent.
- `--env` (a registered id, or `module:Class` importable from the working directory) may repeat, with or
  without `--suite`.
- Sampling defaults to the settings each team was trained with (its `comlrl_env.json`, one value or one per
  agent); `--temperature`, `--top-p`, `--top-k`, `--max-new-tokens`, `--greedy` and `--seed` override them for
  every team. The first four take one value, or one per agent (`--temperature 0.7 1.0`).
  `--episodes` (default 32) is the number of task instances per env; `--samples-per-task k` plays each
  instance k times, on procedural envs too (the same reset seed), for pass@k. Every 95% interval is over the
  task instances, so k repeats of one instance never narrow it: a reward's is the t interval over per-task
  means, and a reward the task declares 0/1 and each rate get the Wilson interval at the effective sample size
  (the output's first line says so). The team table names the teams whose intervals overlap: more episodes would tell them apart.

Writes `results.json` (settings, agents with a content hash, versions, rows), `results.md` and `results.png`;
with `--record-episodes`, for tasks that report what agents told each other (`comlrl_env.info_flow`), also
`episodes/<env>__<team>.jsonl`: per episode each agent's message, answer, whether it used its partner's
information, and returns.

`--league` plays a round robin instead (`comlrl_env.league`): on every two-player game with a winner, each
pair of the teams and the game's reference bots (random, MCTS where it applies) plays `--episodes` episodes
in each seat order; it prints each pair's win, draw and loss rates, every player's Elo rating and each
game's first-move edge (fitted jointly) with 95% profile-likelihood intervals, per game and over all games,
and writes `league.json` and `league.md`. `--agents` may then be left out (a league of the bots).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

import torch
import transformers

import comlrl_env
from comlrl_env import TextParallelEnv
from comlrl_env.benchmark import interval_header, markdown_table, run_suite, team_table
from comlrl_env.league import league_table, run_league
from comlrl_env.suites import suites
from learners.models.policy import AgentPolicy, agent_dirs, content_hash, saved_settings

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The `comlrl-bench` argument parser (docs/cli.md is generated from it)."""
    parser = argparse.ArgumentParser(prog="comlrl-bench", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(suites), metavar="SUITE",
                        help="a suite of envs to play")
    parser.add_argument("--env", action="append", default=[], help="a registered id or module:Class (repeatable)")
    parser.add_argument("--agents", action="append", nargs="+", default=[], metavar="[NAME=]DIR",
                        help="one team per use: a save_model output dir or its agent dirs")
    parser.add_argument("--league", action="store_true",
                        help="round robin with win/draw/loss rates and Elo, between the teams and the games' bots")
    parser.add_argument("--episodes", type=int, default=32,
                        help="task instances per env (in a league: episodes per seat order)")
    parser.add_argument("--samples-per-task", type=int, default=1,
                        help="plays each task instance k times (the same reset seed): pass@k")
    parser.add_argument("--out", required=True,
                        help="folder for results.json, results.md and results.png (a league: league.json, league.md)")
    parser.add_argument("--greedy", action="store_true", help="decode greedily instead of sampling")
    parser.add_argument("--seed", type=int, default=0, help="seeds sampling, the instance order and reset seeds")
    parser.add_argument("--record-episodes", action="store_true",
                        help="write per-episode messages and answers of message tasks to OUT/episodes/")
    for flag, kind in (("--temperature", float), ("--top-p", float), ("--top-k", int), ("--max-new-tokens", int)):
        parser.add_argument(flag, type=kind, nargs="+", help="one value for every agent, or one per agent")
    parser.add_argument("--chat-template", action="store_true", default=None,
                        help="render prompts with the chat template (default: as the team was trained)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run `comlrl-bench` with `argv` (default: the command line); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.suite is None and not args.env:
        parser.error("give --suite, --env, or both.")
    if not args.agents and not args.league:
        parser.error("give --agents (one team per use), or --league for a league of the games' bots.")
    overrides = {"temperature": one_or_per_agent(args.temperature), "top_p": one_or_per_agent(args.top_p),
                 "top_k": one_or_per_agent(args.top_k), "max_new_tokens": one_or_per_agent(args.max_new_tokens),
                 "use_chat_template": args.chat_template}
    teams, agents, settings = {}, {}, {}
    for spec in args.agents:
        name, dirs = team_spec(spec)
        teams[name] = AgentPolicy.from_saved(dirs, greedy=args.greedy, seed=args.seed, **overrides)
        agents[name] = [{"path": os.path.abspath(d), "sha256": content_hash(d)} for d in dirs]
        settings[name] = {**saved_settings(dirs), **{k: v for k, v in overrides.items() if v is not None},
                          "greedy": args.greedy, "seed": args.seed}
    envs: Any = args.suite if not args.env else [*(suites[args.suite] if args.suite else []),
                                                   *(load_env(spec) for spec in args.env)]
    metadata = {"settings": settings if len(settings) > 1 else next(iter(settings.values()), {}), "agents": agents,
                "versions": {"comlrl_env": comlrl_env.__version__, "torch": torch.__version__,
                             "transformers": transformers.__version__}}
    if args.league:
        league = run_league(envs, teams, args.episodes, args.out, args.seed, metadata=metadata)
        print(league_table(league), end="")
        print(f"wrote {args.out}/league.json, league.md")
        return 0
    results = run_suite(envs, teams, args.episodes, args.out, args.seed,
                        samples_per_task=args.samples_per_task, metadata=metadata, record_episodes=args.record_episodes)
    print(interval_header(results) + "\n" + team_table(results["rows"]) + "\n" + markdown_table(results["rows"]),
          end="")
    print(f"wrote {args.out}/results.json, results.md, results.png")
    return 0


def one_or_per_agent(values: list[Any] | None) -> Any:
    """A flag's values as a setting: None when not given, the value when given once, else the list (per agent)."""
    return values[0] if values is not None and len(values) == 1 else values


def team_spec(spec: list[str]) -> tuple[str, list[str]]:
    """(team name, agent dirs) of one `--agents` use: `NAME=DIR ...`, else named by the first dir's folder."""
    name = None
    if "=" in spec[0]:
        name, first = spec[0].split("=", 1)
        spec = [first, *spec[1:]]
    return name or os.path.basename(os.path.normpath(spec[0])), agent_dirs(spec)


def load_env(spec: str) -> TextParallelEnv | str:
    """A registered id as is, or `module:Class` imported from the working directory and built with no arguments."""
    if ":" not in spec or "/" in spec.split(":", 1)[0]:
        return spec
    module, _, cls = spec.partition(":")
    sys.path.insert(0, os.getcwd())
    try:
        env = getattr(importlib.import_module(module), cls)()
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"comlrl-bench: cannot build --env {spec!r}: {exc}") from exc
    finally:
        sys.path.remove(os.getcwd())
    if not isinstance(env, TextParallelEnv):
        raise SystemExit(f"comlrl-bench: --env {spec!r} built a {type(env).__name__}, not a TextParallelEnv.")
    return env


if __name__ == "__main__":
    sys.exit(main())
