"""Run logging: a tqdm progress bar with the live reward, loss and (when it is in the loss) KL, a JSONL metrics
file, wandb and TensorBoard (`report_to="tensorboard"`).

Every JSONL row carries the run's `run_id` and `step` (joint actions played so far), so runs that append to
one `output_dir/metrics.jsonl` (a second run, or a resume, which keeps its run id) stay apart. A resume first
drops its run's rows past the checkpoint's step (`drop_rows_after`): the rollouts a killed run logged after its
last checkpoint are played and logged again, so each appears once.

Files in `output_dir`: `metrics.jsonl` (every logged metrics dict), `completions.jsonl` (a few sampled joint
answers every `log_completions_steps` rollouts) and, for tasks that report `infos[agent]["used_partner_info"]`
(`comlrl_env.info_flow`), `episodes.jsonl`: at every logged rollout, one row per episode with `task_index`,
each agent's `messages` (what it sent at the message turn), `answers`, `used_partner_info` and `returns`.

`wandb.init` happens when the logger opens: in `RunLogger.start()` (called by `learn()`) or on entering
`RunLogger.kept_open()` (MARLHF's `learn()`), never when a learner is built, so constructing a learner opens
no run. `wandb_config` keys: `project`, `entity`, `name` (or `run_name`), `tags`, `dir`, `id`, `resume`,
`mode` ("online", "offline", "disabled") and `config_sections` (merged into the run config).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
from typing import Any, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from comlrl_env.info_flow import write_records
from learners.loop.metrics import completion_rows
from learners.rollout import Rollout

__all__ = ["RunLogger"]

_WANDB_KEYS = ("project", "entity", "name", "run_name", "tags", "dir", "id", "resume", "mode", "config_sections", "group", "notes")


class RunLogger:
    """Writes every metrics dict to the console bar, `output_dir/metrics.jsonl` and wandb.

    Args:
        output_dir: Directory of the JSONL file (None: no file).
        wandb_config: wandb settings (None: no wandb).
        run_config: Hyperparameters recorded with the run.
        verbose: Show the progress bar.
        completions_every: `log_rollout` records a few joint answers every this many rollouts (None: never).
    """

    def __init__(
        self,
        output_dir: str | None,
        wandb_config: dict[str, Any] | None,
        run_config: dict[str, Any],
        verbose: bool = True,
        run_id: str | None = None,
        tensorboard: bool = False,
        completions_every: int | None = None,
    ) -> None:
        if wandb_config is not None:
            if not isinstance(wandb_config, dict):
                raise TypeError(f"wandb_config must be a dict, got {type(wandb_config).__name__}.")
            unknown = sorted(set(wandb_config) - set(_WANDB_KEYS) - {"output_dir"})
            if unknown:
                raise ValueError(f"unknown wandb_config keys {unknown}; known: {sorted(_WANDB_KEYS)}.")
        self.output_dir = output_dir
        self.wandb_config = wandb_config
        self.run_config = run_config
        self.verbose = verbose
        self.run_id = run_id  # on every JSONL row: runs appending to one output_dir stay apart
        self.tensorboard = tensorboard and output_dir is not None
        self.completions_every = completions_every
        self.writer: Any = None  # TensorBoard's SummaryWriter while a run is open
        self.run: Any = None
        self._bar: Any = None
        self._file: Any = None
        self._holds = 0  # open `kept_open()` blocks: while any is open, `close()` keeps the outputs open

    def wandb_identity(self) -> dict[str, Any] | None:
        """`{"id", "project", "entity", "name"}` (the known ones) of the active wandb run; None without one
        or for a disabled run."""
        run = self.run
        if run is None or getattr(run, "disabled", False) or getattr(getattr(run, "settings", None), "mode", None) == "disabled":
            return None
        identity = {k: getattr(run, k, None) for k in ("id", "project", "entity", "name")}
        identity = {k: v for k, v in identity.items() if isinstance(v, str) and v}
        return identity if "id" in identity else None

    def resume_wandb(self, identity: dict[str, Any] | None) -> None:
        """Continue the wandb run of a checkpoint (`identity` as `wandb_identity()` gave it), unless the
        wandb config names a run id or a resume mode of its own: CoMLRL 1.4.3's recipe."""
        config = self.wandb_config
        if identity and config is not None and "id" not in config and "resume" not in config:
            saved = {k: v for k, v in identity.items() if k in ("project", "entity") and v}
            self.wandb_config = {**saved, **config, "id": identity["id"], "resume": "allow"}

    def start(self, total: int, initial: int = 0) -> None:
        """Open the progress bar and, unless they are open already, the JSONL file, TensorBoard and the wandb
        run (if configured)."""
        self._open_outputs()
        self._bar = tqdm(total=total, initial=initial, disable=not self.verbose, desc="train", dynamic_ncols=True)

    @contextlib.contextmanager
    def kept_open(self) -> Iterator[RunLogger]:
        """Open the JSONL file, TensorBoard and wandb now, and keep them open until the block ends.

        The `start()` / `close()` pairs inside the block open and close only the progress bar, so a learner
        that drives another one logs its own metrics between the other's runs into the same file and the same
        wandb run (MARLHF: the preference stages between the policy learner's `learn()` calls).
        """
        self._open_outputs()
        self._holds += 1
        try:
            yield self
        finally:
            self._holds -= 1
            if not self._holds:
                self.close()

    def _open_outputs(self) -> None:
        """Open whatever of the JSONL file, TensorBoard and the wandb run is configured and not open yet."""
        if self.output_dir is not None and self._file is None:
            os.makedirs(self.output_dir, exist_ok=True)
            self._file = open(os.path.join(self.output_dir, "metrics.jsonl"), "a", encoding="utf-8")
        if self.tensorboard and self.writer is None:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

            self.writer = SummaryWriter(os.path.join(self.output_dir, "tensorboard", str(self.run_id)))
        if self.wandb_config is not None and self.run is None:
            cfg = dict(self.wandb_config)
            sections = cfg.pop("config_sections", None) or {}
            cfg.pop("output_dir", None)
            if "run_name" in cfg:
                cfg.setdefault("name", cfg.pop("run_name"))
            if cfg.get("dir"):
                os.makedirs(cfg["dir"], exist_ok=True)
            import wandb  # imported only for a wandb run: it costs ~20 MB of memory

            # wandb.init may draw random numbers; keep training reproducible around it.
            states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
            self.run = wandb.init(config={**self.run_config, **sections}, **cfg)
            random.setstate(states[0])
            np.random.set_state(states[1])
            torch.set_rng_state(states[2])

    def drop_rows_after(self, run_id: str, step: int) -> None:
        """Remove run `run_id`'s rows past `step` from the JSONL files (metrics, completions, episodes), each
        rewritten atomically; other runs' rows and unparsable lines stay. A resume calls it with its checkpoint's
        `env_steps`, which is the `step` of the last rollout the checkpoint holds."""
        if self.output_dir is None:
            return
        for name in ("metrics.jsonl", "completions.jsonl", "episodes.jsonl"):
            path = os.path.join(self.output_dir, name)
            if os.path.isfile(path) and _rewrite_without(path, run_id, step) and name == "metrics.jsonl" \
                    and self._file is not None:  # open (MARLHF keeps it open): follow the new file
                self._file.close()
                self._file = open(path, "a", encoding="utf-8")

    def log(self, metrics: dict[str, float], step: int, advance: int = 0) -> None:
        """Record one metrics dict at `step` (env steps) and move the bar by `advance`."""
        clean = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
        if self._file is not None:
            self._file.write(json.dumps({"run_id": self.run_id, "step": step, **clean}) + "\n")
            self._file.flush()
        if self.run is not None:
            self.run.log(clean, step=step)
        if self.writer is not None:
            for name, value in clean.items():
                self.writer.add_scalar(name, value, step)
        if self._bar is not None:
            if "train/reward_mean" in clean:
                self._bar.set_postfix(_bar_summary(clean), refresh=False)
            self._bar.update(advance)

    def log_rollout(self, rollout: Rollout, step: int, rollouts_done: int, episodes: bool) -> None:
        """Record rollout number `rollouts_done` for reading: a few joint answers every `completions_every`
        rollouts (`log_completions`) and, when `episodes`, its info-flow rows (`log_episodes`; nothing for a
        task that reports none)."""
        if self.completions_every and rollouts_done % self.completions_every == 0:
            self.log_completions(completion_rows(rollout), step)
        if episodes and rollout.episodes:
            self.log_episodes(rollout.episodes, step)

    def log_episodes(self, rows: list[dict[str, Any]], step: int) -> None:
        """Record info-flow rows (`Rollout.episodes`): one JSONL line each in `output_dir/episodes.jsonl`, and a
        wandb Table."""
        if self.output_dir is not None:
            write_records(os.path.join(self.output_dir, "episodes.jsonl"), rows,
                          {"run_id": self.run_id, "step": step}, mode="a")
        if self.run is not None:
            import wandb

            columns = ["task_index", "messages", "answers", "used_partner_info", "returns"]
            table = wandb.Table(columns=["step", *columns],
                                data=[[step, *(json.dumps(r[c]) for c in columns)] for r in rows])
            self.run.log({"episodes": table}, step=step)

    def log_completions(self, rows: list[dict[str, Any]], step: int) -> None:
        """Record sampled joint answers (`learners.loop.metrics.completion_rows`): one JSONL line each in
        `output_dir/completions.jsonl`, and a wandb Table."""
        if self.output_dir is not None:
            with open(os.path.join(self.output_dir, "completions.jsonl"), "a", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps({"run_id": self.run_id, "step": step, **row}) + "\n")
        if self.run is not None:
            import wandb

            table = wandb.Table(columns=["step", "state", "completions", "rewards"],
                                data=[[step, r["state"], json.dumps(r["completions"]), json.dumps(r["rewards"])]
                                      for r in rows])
            self.run.log({"completions": table}, step=step)

    def close(self) -> None:
        """Close the bar and, unless a `kept_open()` block holds them, the JSONL file and TensorBoard, and finish
        the wandb run."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._holds:
            return
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.run is not None:
            self.run.finish()
            self.run = None


def _rewrite_without(path: str, run_id: str, step: int) -> bool:
    """Rewrite JSONL `path` without `run_id`'s rows whose step is past `step`; False when none were there."""
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    kept = [line for line in lines if not _past(line, run_id, step)]
    if len(kept) == len(lines):
        return False
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(kept)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return True


def _past(line: str, run_id: str, step: int) -> bool:
    try:
        row = json.loads(line)
    except ValueError:
        return False
    return (isinstance(row, dict) and row.get("run_id") == run_id and isinstance(row.get("step"), (int, float))
            and row["step"] > step)


def _bar_summary(metrics: dict[str, float]) -> dict[str, str]:
    """The progress bar's live figures: the reward, the agents' mean loss, and their mean KL to the reference
    only when that KL is a term of the objective (`reference_kl_enabled`: the `train/agent_{i}/kl` metrics).

    Fixed-point, 4 decimals: at ratio 1 a group-relative loss is -mean_s A_s |c_s| with each group's
    advantages summing to 0, so it sits at 0 up to float rounding (1e-7) when lengths are equal, which `.3g`
    would print as `1.19e-07`; `-0.0000` shows as `0.0000`. The policy step's `approx_kl` (always there, a
    diagnostic) stays in the metrics files."""
    out = {"reward": f"{metrics['train/reward_mean']:.3f}"}
    for label, suffix in (("loss", "/loss"), ("kl", "/kl")):
        values = [v for k, v in metrics.items() if k.startswith("train/agent_") and k.endswith(suffix)]
        if values:
            out[label] = f"{round(sum(values) / len(values), 4) + 0.0:.4f}"
    return out
