"""Learning benchmark: reward against sampled completions, our learners and comlrl 1.4.3's, at equal budgets.

    .venv/bin/python benchmarks/learning.py                       # everything (~31 min on 2 cores)
    .venv/bin/python benchmarks/learning.py --smoke --no-reference  # < 2 min: the test's configuration
    .venv/bin/python benchmarks/learning.py --tasks dense coord --learners magrpo maac --seeds 0 --budget 128

Rows (ours): `magrpo`, `magrpo_global` (advantage_grouping="global", one group per agent over the rollout),
`magrpo_cross` (joint_mode="cross"), `magrpo_cf` (cross with
advantage_mode="counterfactual"), `iac_separate` (use_separate_critic=True), `iac_shared` (a value head on
the actor), `maac`, `marlhf` (rl_algorithm="magrpo"; single-turn tasks only, as preference learning scores
single-turn joint answers). Reference rows (`ref_*`: CoMLRL 1.4.3 in its own venv, via
`reference_learning.py`): MAGRPO, IAC (separate critic) and MAAC; `--ref-learners` adds `iac_shared`.
Tasks (`learning_tasks.py`, dataset + reward function (+ external transition), so both libraries run the
very same task): `dense`, `sparse`, `multiturn`, `coord`;
plus `hanabi` (OpenSpiel tiny_hanabi) and `tictactoe` (OpenSpiel tic_tac_toe, seat 0 against the random bot, MAGRPO
only, with its own settings and a budget of 8192), ours only: the reference trains on dataset + reward tasks.

Every run gets the same budget of sampled completions per agent (`--budget`), the same rows in the same
seeded order, the same model (`benchmarks/_work/tiny`), reward, seed and settings
(`learning_tasks.SETTINGS`: lr 5e-3 for agents and critics, temperature 1, top_p 1, top_k 50, 12 new
tokens, K = 4 samples per node; IAC/MAAC use K = 1 on the 2-turn task, as the reference must). The
number of epochs is the budget over the completions an episode costs (MAGRPO's tree: K + K^2 on 2 turns,
cross K + K^3); the run stops at the budget. Every reward the task's reward function computes is recorded
in call order (`RewardRecorder`), so a curve is the mean *task* reward (MARLHF too, whose policy phase
trains on its reward model; its preference candidates count toward its budget) against completions per
agent sampled so far. Final reward = mean training reward over the last 20% of the budget. A run whose
reward, loss or any metric becomes NaN/inf stops, and its error is kept in results.json (the learners
themselves stop on a non-finite gradient norm before stepping, and reward calls reject NaN rewards).

Run time (measured on a 2-core CPU, one torch thread per process: with two threads on busy cores
the reference's IAC ran 10x slower, so `BENCH_THREADS` defaults to 1): the default run (8 learners of ours x
5 tasks - 6 MARLHF cells it cannot run, 3 learners of the reference x 4 tasks, 3 seeds, 1024 completions)
took 1877 s (31 min); at 512 completions 847 s. Ours takes ~5 s per single-turn run, 20-30 s per IAC/MAAC
run on the game; the reference ~20 s per run, ~45 s for IAC on 2 turns. Runs stop at the first rollout past
the budget (ours) or at the first reward past it (the reference), so a run samples at most one rollout more.

Outputs (`--out`, default benchmarks/_work/learning/): `results.json` (every run's curve
`[completions, mean reward, rewards]`, final reward, error, seconds; settings and versions),
`learning.md` (mean +- std over seeds of the final reward per learner and task; ours / reference per
learner and task) and `learning.png` (reward vs completions per task, mean line and +-1 std band over
seeds, reference dashed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import learning_tasks as lt  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

LEARNERS = ("magrpo", "magrpo_global", "magrpo_cross", "magrpo_cf", "iac_separate", "iac_shared", "maac", "marlhf")
REF_LEARNERS = ("magrpo", "iac_separate", "iac_shared", "maac")
DEFAULT_REF_LEARNERS = ("magrpo", "iac_separate", "maac")
REF_PYTHON = os.path.join(HERE, ".venv-ref", "bin", "python")
DEFAULT_MODEL = os.path.join(HERE, "_work", "tiny")
DEFAULT_OUT = os.path.join(HERE, "_work", "learning")
BUDGET, SMOKE_BUDGET = 1024, 16


class Guard:
    """Callback: records a curve point per rollout, stops the run at the budget, and on NaN/inf."""

    def __init__(self, recorder: lt.RewardRecorder, budget: int) -> None:
        self.recorder, self.budget = recorder, budget
        self.curve: list[list[float]] = []
        self.offset = 0  # completions sampled before the learner's rollouts (MARLHF's preference candidates)
        self.seen = 0

    def _point(self, completions: int, metrics: dict | None = None) -> None:
        if self.recorder.fn is None:  # an env task: its own rewards, as the learner's rollout mean
            if metrics is not None:
                self.curve.append([completions, metrics["train/reward_mean"], 1])
            return
        new = self.recorder.values[self.seen:]
        if new:
            self.curve.append([completions, sum(new) / len(new), len(new)])
        self.seen = len(self.recorder.values)

    def on_learn_begin(self, learner) -> None:
        # MARLHF's preference candidates (one reward per joint candidate) were scored before its policy learns.
        self.offset = len(self.recorder.values) - learner.completions_sampled
        self._point(self.offset)

    def on_step_end(self, learner, metrics: dict) -> None:
        bad = {k: v for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)
               and ("loss" in k or "reward" in k or "return" in k or "advantage" in k)}
        if bad:
            raise lt.NonFiniteReward(f"non-finite metrics at rollout {learner.rollouts_done}: {bad}")
        done = self.offset + learner.completions_sampled
        self._point(done, metrics)
        if done >= self.budget:
            raise lt.BudgetReached(f"{done} completions")


def build_ours(learner: str, task: str, seed: int, model: str, rows: list, reward, budget: int, callbacks: list):
    """Our learner for `learner` on `task`, with the shared settings."""
    from learners import IAC, MAAC, MAGRPO, MARLHF, IACConfig, MAACConfig, MAGRPOConfig, MARLHFConfig

    spec = lt.TASKS[task]
    s = spec.settings
    k = lt.group_size(learner, task)
    per_episode = lt.completions_per_episode(learner, task)
    common = dict(num_agents=2, num_turns=spec.num_turns, num_train_epochs=lt.epochs_for(budget, per_episode),
                  max_new_tokens=s["max_new_tokens"], temperature=s["temperature"], top_p=s["top_p"],
                  top_k=s["top_k"], agent_learning_rate=s["learning_rate"], early_termination_threshold=None,
                  shuffle=False, eval_interval=0, agent_devices="cpu", verbose=False, seed=seed)
    kw = dict(agent_model=model, train_dataset=rows, reward_func=reward, formatters=spec.formatters,
              external_transition=spec.transition, callbacks=callbacks)
    if spec.learners is not None and learner not in spec.learners:
        raise NotImplementedError(f"task {task} runs {', '.join(spec.learners)} only")
    if spec.env_id is not None:  # a registered env plays its own turns and pays its own rewards
        if learner == "marlhf":
            raise NotImplementedError("MARLHF here learns from dataset + reward tasks only")
        import comlrl_env
        from comlrl_env.games.openspiel import OpenSpielBot

        env = comlrl_env.make(spec.env_id, **spec.env_kwargs)
        kw = dict(env=env, agent_model=model, callbacks=callbacks)
        if spec.opponent is not None:  # seat 1 is a bot: one trained agent
            kw = dict(env=env, agents=[model, OpenSpielBot(spec.opponent, seed=seed)], callbacks=callbacks)
            common.pop("num_agents")
        # The game decides who moves and when it ends, so completions per episode vary: run until the budget stops it.
        common.update(num_turns=1, episodes_per_epoch=lt.NUM_PROMPTS, num_train_epochs=10_000)
    if learner in ("magrpo", "magrpo_global", "magrpo_cross", "magrpo_cf"):
        cfg = MAGRPOConfig(**common, num_generations=k, rollout_buffer_size=s["rollout_prompts"],
                           rollout_mode=s.get("rollout_mode", "tree"),
                           joint_mode="cross" if learner in ("magrpo_cross", "magrpo_cf") else "aligned",
                           advantage_mode="counterfactual" if learner == "magrpo_cf" else "mean",
                           advantage_grouping="global" if learner == "magrpo_global" else "node")
        return MAGRPO(args=cfg, **kw)
    if learner == "marlhf":
        if spec.num_turns > 1:
            raise NotImplementedError("MARLHF scores single-turn joint answers only")
        pref = k * len(rows)  # candidate completions per agent in the preference stage
        common["num_train_epochs"] = lt.epochs_for(max(budget - pref, 1), per_episode)
        cfg = MARLHFConfig(**common, rl_algorithm="magrpo", num_generations=k, rollout_buffer_size=s["rollout_prompts"],
                           preference_num_candidates=k, reward_model_device="cpu", reward_heldout_fraction=0.0,
                           reward_learning_rate=s["learning_rate"], reward_train_batch_size=8)
        return MARLHF(args=cfg, **kw)
    ac = dict(**common, num_generations=k, critic_learning_rate=s["learning_rate"],
              rollout_buffer_size=max(1, s["ac_samples_per_step"] // per_episode),
              # The reference steps once per turn on its buffer of 8 samples: as many steps per completion here.
              train_batch_size=max(1, s["ac_samples_per_step"] // spec.num_turns))
    if learner == "maac":
        return MAAC(args=MAACConfig(**ac), critic_model=model, **kw)
    separate = learner == "iac_separate"
    return IAC(args=IACConfig(**ac, use_separate_critic=separate), critic_model=model if separate else None, **kw)


def task_budget(task: str, budget: int | None, smoke: bool) -> int:
    """Completions per agent of a run on `task`: `--budget`, else the smoke or the task's own or the default."""
    return budget or (SMOKE_BUDGET if smoke else lt.TASKS[task].budget or BUDGET)


def run_ours(learner: str, task: str, seed: int, model: str, budget: int, out: str) -> dict:
    """One of our runs: its curve, final reward, error and seconds."""
    import torch
    import transformers

    import comlrl_env

    torch.manual_seed(seed)
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    recorder = lt.RewardRecorder(lt.TASKS[task].reward)
    guard = Guard(recorder, budget)
    record = {"side": "ours", "learner": learner, "task": task, "seed": seed, "budget": budget,
              "library": f"comlrl-env {comlrl_env.__version__}", "torch": torch.__version__,
              "transformers": transformers.__version__, "error": None}
    t0 = time.perf_counter()
    learner_obj = None
    try:
        learner_obj = build_ours(learner, task, seed, model, lt.dataset(task, seed), recorder, budget, [guard])
        learner_obj.learn()
    except NotImplementedError as exc:
        record["error"] = f"not supported: {exc}"
    except lt.BudgetReached:
        pass
    except Exception as exc:  # noqa: BLE001 - a failed run is a result, not a crash of the sweep
        record.update(lt.run_error(exc))
    policy = getattr(learner_obj, "policy", learner_obj)
    record["seconds"] = round(time.perf_counter() - t0, 2)
    record["completions"] = (guard.offset + policy.completions_sampled) if policy is not None else 0
    record["curve"] = guard.curve
    record["final"] = lt.final_reward(guard.curve, budget) if guard.curve else None
    return record


def run_reference(learner: str, task: str, seeds: list[int], model: str, budget: int) -> list[dict]:
    """The reference's runs of `learner` on `task` (one subprocess in its venv, one JSON line per seed)."""
    cmd = [REF_PYTHON, os.path.join(HERE, "reference_learning.py"), "--model", model, "--learner", learner,
           "--task", task, "--budget", str(budget), "--seeds", *map(str, seeds)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    recs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(recs) != len(seeds):
        done = {r["seed"] for r in recs}
        recs += [{"side": "reference", "learner": learner, "task": task, "seed": s, "budget": budget, "curve": [],
                  "final": None, "error": f"reference process failed (rc {proc.returncode}): {proc.stderr[-1500:]}"}
                 for s in seeds if s not in done]
    return recs


# ----- report -----------------------------------------------------------------------------------

def _row_name(r: dict) -> str:
    return r["learner"] if r["side"] == "ours" else f"ref_{r['learner']}"


def _cell(finals: list) -> tuple[float | None, float | None]:
    vals = [f for f in finals if f is not None]
    if not vals:
        return None, None
    return statistics.mean(vals), statistics.pstdev(vals) if len(vals) > 1 else 0.0


def _shown(model: str) -> str:
    """The model as the page names it: its path inside the repository, else its folder's name (never a machine's
    absolute path)."""
    inside = os.path.relpath(model, ROOT)
    return f"`{inside}`" if not inside.startswith("..") else f"`{os.path.basename(os.path.normpath(model))}`"


def write_markdown(results: dict, path: str) -> None:
    runs, tasks = results["runs"], results["tasks"]
    rows = [n for n in list(LEARNERS) + [f"ref_{x}" for x in REF_LEARNERS] if any(_row_name(r) == n for r in runs)]
    table = {(n, t): [r for r in runs if _row_name(r) == n and r["task"] == t] for n in rows for t in tasks}
    seeds = ", ".join(map(str, results["seeds"]))
    ref = [v.replace("comlrl ", "CoMLRL ") for v in results.get("versions", {}).get("reference", [])]
    lines = [f"# Learning benchmark ({_shown(results['model'])}, {results['budget']} completions per agent per run, "
             f"seeds {seeds})", "",
             "Final reward: mean task reward over the last 20% of each run's budget; mean ± std over seeds "
             "(n = seeds that finished; ✗ = errors, see results.json). Budgets of their own: " +
             (", ".join(f"{t} {b}" for t, b in results.get("task_budgets", {}).items() if b != results["budget"])
              or "none") + "." + (f" Rows `ref_*`: {', '.join(ref)}'s learners." if ref else ""), "",
             "| learner | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for n in rows:
        cells = []
        for t in tasks:
            rs = table[(n, t)]
            mean, std = _cell([r["final"] for r in rs if not r.get("error")])
            errs = sum(bool(r.get("error")) for r in rs)
            if rs and all(str(r.get("error", "")).startswith("not supported") for r in rs):
                cells.append("n/a")
            else:
                cells.append(("—" if mean is None else f"{mean:.3f} ± {std:.3f}") + (f" ✗{errs}" if errs else ""))
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", "## Ours / CoMLRL (ratio of mean final rewards)", "",
              "| learner | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for n in REF_LEARNERS:
        if f"ref_{n}" not in rows or n not in rows:
            continue
        cells = []
        for t in tasks:
            ours = _cell([r["final"] for r in table[(n, t)] if not r.get("error")])[0]
            ref = _cell([r["final"] for r in table[(f"ref_{n}", t)] if not r.get("error")])[0]
            cells.append(f"{ours:.3f} / {ref:.3f} = {ours / ref:.2f}" if ours is not None and ref else
                         "—" if ours is None or ref is None else f"{ours:.3f} / 0")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    errors = [r for r in runs if r.get("error") and not str(r["error"]).startswith("not supported")]
    if errors:
        lines += ["", "## Errors", ""] + [f"- {_row_name(r)} {r['task']} seed {r['seed']}: {r['error'][:300]}"
                                          for r in errors]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def _grid_curve(curve: list, grid: list[float]) -> list[float]:
    """The curve's reward at each grid point: the mean of its points up to there since the previous one
    (carried forward where a segment holds none)."""
    out, j, last = [], 0, float("nan")
    for g in grid:
        seg = []
        while j < len(curve) and curve[j][0] <= g:
            seg.append(curve[j])
            j += 1
        if seg:
            last = sum(p[1] * p[2] for p in seg) / sum(p[2] for p in seg)
        out.append(last)
    return out


def write_plot(results: dict, path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        print("matplotlib is not installed: no learning.png", file=sys.stderr)
        return False
    tasks = results["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False)
    names = sorted({_row_name(r) for r in results["runs"]}, key=lambda n: (n.startswith("ref_"), n))
    colors = {n: f"C{i % 10}" for i, n in enumerate(LEARNERS)}
    for ax, t in zip(axes[0], tasks):
        budget = results.get("task_budgets", {}).get(t, results["budget"])
        # Runs stop at the first rollout past the budget (MARLHF: its preference stage may already pass a tiny one).
        top = max([p[0] for r in results["runs"] if r["task"] == t for p in r["curve"]] + [budget])
        grid = [top * (i + 1) / 20 for i in range(20)]
        ax.axvline(budget, color="0.7", lw=0.8)
        for n in names:
            curves = [_grid_curve(r["curve"], grid) for r in results["runs"]
                      if _row_name(r) == n and r["task"] == t and r["curve"] and not r.get("error")]
            if not curves:
                continue
            arr = np.array(curves, dtype=float)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # grid points before a run's first point
                mean, std = np.nanmean(arr, 0), np.nanstd(arr, 0)
            base = n.removeprefix("ref_")
            style = "--" if n.startswith("ref_") else "-"
            ax.plot(grid, mean, style, color=colors.get(base, "k"), label=n)
            ax.fill_between(grid, mean - std, mean + std, color=colors.get(base, "k"), alpha=0.12)
        ax.set_title(f"{t}: {lt.TASKS[t].doc}", fontsize=9)
        ax.set_xlabel("completions per agent")
        ax.set_ylabel("mean training reward")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", choices=sorted(lt.TASKS), default=list(lt.TASKS))
    p.add_argument("--learners", nargs="+", choices=LEARNERS, default=list(LEARNERS))
    p.add_argument("--ref-learners", nargs="+", choices=REF_LEARNERS, default=list(DEFAULT_REF_LEARNERS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--budget", type=int, default=None, help=f"completions per agent per run (default {BUDGET})")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--no-reference", action="store_true", help="run our learners only")
    p.add_argument("--smoke", action="store_true",
                   help=f"tiny config (<2 min): seed 0, budget {SMOKE_BUDGET}, reference on `dense` with magrpo only")
    p.add_argument("--out", default=DEFAULT_OUT)
    a = p.parse_args(argv)
    budget = a.budget or (SMOKE_BUDGET if a.smoke else BUDGET)
    seeds = [0] if a.smoke and a.seeds == [0, 1, 2] else a.seeds
    ref_tasks, ref_learners = (a.tasks[:1], a.ref_learners[:1]) if a.smoke else (a.tasks, a.ref_learners)
    ref_tasks = [t for t in ref_tasks if lt.TASKS[t].env_id is None]  # the reference has no env tasks
    model = os.path.abspath(a.model)
    if not os.path.isdir(model):
        raise SystemExit(f"no model at {model}: run `.venv/bin/python benchmarks/make_models.py tiny`")
    if not a.no_reference and not os.path.exists(REF_PYTHON):
        raise SystemExit(f"no reference venv at {REF_PYTHON}: run `bash benchmarks/setup_ref_venv.sh` or pass "
                         "--no-reference")
    os.makedirs(a.out, exist_ok=True)
    import torch
    import transformers

    runs: list[dict] = []
    t0 = time.perf_counter()
    for task in a.tasks:
        for learner in a.learners:
            for seed in seeds:
                r = run_ours(learner, task, seed, model, task_budget(task, a.budget, a.smoke), a.out)
                runs.append(r)
                print(f"ours {learner:13s} {task:9s} seed {seed}: final "
                      f"{'—' if r['final'] is None else format(r['final'], '.3f')} ({r['completions']} completions, "
                      f"{r['seconds']:.1f} s){'  ERROR ' + r['error'][:200] if r['error'] else ''}", flush=True)
        if not a.no_reference and task in ref_tasks:
            for learner in ref_learners:
                for r in run_reference(learner, task, seeds, model, task_budget(task, a.budget, a.smoke)):
                    runs.append(r)
                    print(f"ref  {learner:13s} {task:9s} seed {r['seed']}: final "
                          f"{'—' if r['final'] is None else format(r['final'], '.3f')} "
                          f"({r.get('completions', 0)} completions, {r.get('seconds', 0):.1f} s)"
                          f"{'  ERROR ' + r['error'][:200] if r['error'] else ''}", flush=True)
    ref_versions = sorted({r["library"] for r in runs if r["side"] == "reference" and r.get("library")})
    results = {"model": model, "budget": budget, "seeds": seeds, "tasks": a.tasks, "settings": lt.SETTINGS,
               "task_budgets": {t: task_budget(t, a.budget, a.smoke) for t in a.tasks},
               "task_settings": {t: lt.TASKS[t].settings for t in a.tasks if lt.TASKS[t].settings != lt.SETTINGS},
               "final_reward": "mean training task reward over the last 20% of the budget",
               "versions": {"ours": runs[0]["library"] if runs else None, "reference": ref_versions,
                            "torch": torch.__version__, "transformers": transformers.__version__},
               "seconds": round(time.perf_counter() - t0, 1), "runs": runs}
    with open(os.path.join(a.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    write_markdown(results, os.path.join(a.out, "learning.md"))
    write_plot(results, os.path.join(a.out, "learning.png"))
    print(f"wrote {a.out}/results.json, learning.md, learning.png in {results['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
