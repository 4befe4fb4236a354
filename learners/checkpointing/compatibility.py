"""Whether a checkpoint belongs to this learner: class, agent count, tokenizers, config, data, progress and
stateful objects, compared as plain data (`state.json` against a `TrainingState`).

`check_compatible` raises ValueError with the rest of a sentence that starts "checkpoint <path> ..."; only
the config fields in `PORTABLE_FIELDS` (and `*_dir` fields) may differ between a run and its resume.
"""

from __future__ import annotations

from typing import Any

from learners.checkpointing.fingerprints import plain_config, tokenizer_fingerprints
from learners.checkpointing.state import TrainingState

__all__ = ["PORTABLE_FIELDS", "check_compatible", "stateful_slots"]

PORTABLE_FIELDS = frozenset({
    "num_train_epochs", "num_iterations", "agent_devices", "critic_devices", "reference_devices",
    "reward_model_device", "parallel_training", "logging_steps", "verbose", "output_dir", "eval_interval",
    "eval_num_samples", "eval_batch_size", "eval_greedy", "gradient_accumulation_steps", "group_by_length",
    "mixed_precision",
})
"""Config fields that may change between a run and its resume (plus every field ending in "_dir")."""


def check_compatible(saved: dict[str, Any], state: TrainingState) -> None:
    """Raise ValueError unless learner class, agent count, tokenizers, config, data, progress and stateful
    objects of the checkpoint metadata `saved` match the learner's `state`."""
    if saved["learner"] != state.learner or saved.get("learner_class", state.learner_class) != state.learner_class:
        raise ValueError(f"was written by {saved.get('learner_class') or saved['learner']}, not "
                         f"{state.learner_class}; resume it with the same learner class.")
    if saved["num_agents"] != state.num_agents:
        raise ValueError(f"has {saved['num_agents']} agents, this learner {state.num_agents}.")
    now_tok = tokenizer_fingerprints(state.tokenizers)
    if saved["tokenizers"] != now_tok:
        which = [i for i, (a, b) in enumerate(zip(saved["tokenizers"], now_tok)) if a != b] or "all"
        raise ValueError(f"was trained with different tokenizers (agent(s) {which}: vocabulary, special tokens, "
                         "chat template or padding differ); build the learner with the same tokenizers.")
    _check_config(saved["config"], plain_config(state.config), plain_config(state.config_defaults))
    saved_data = saved.get("data") or {}
    for key in ("num_tasks", "epoch_size", "sample_sha", "order_sha"):
        if key in saved_data and key in state.data and saved_data[key] != state.data[key]:
            raise ValueError(f"was trained on different data ({key}: saved {saved_data[key]!r}, now "
                             f"{state.data[key]!r}); pass the same dataset / environment.")
    _check_progress(saved["progress"], state.batches_per_epoch)
    now_stateful = stateful_slots(state)
    if saved["stateful"] != now_stateful:
        raise ValueError(f"saved the state of {_describe(saved['stateful'])}; this learner has "
                         f"{_describe(now_stateful)}. Pass the same stateful callbacks, datasets and functions.")


def _check_progress(progress: dict[str, int], per_epoch: int) -> None:
    """The counters must be the run's own: `batch_in_epoch` within an epoch of `per_epoch` batches, and
    `rollouts_done` exactly the rollouts of the epochs done plus this epoch's batches (one rollout per batch,
    so `epoch * per_epoch + batch_in_epoch`). Negative counters are refused earlier (`check_schema`)."""
    epoch, batch, done = progress["epoch"], progress["batch_in_epoch"], progress["rollouts_done"]
    if batch > per_epoch:
        raise ValueError(f"is at batch {batch} of an epoch of {per_epoch} batches; its state.json does not belong "
                         "to this run (same data and rollout_buffer_size).")
    if done != epoch * per_epoch + batch:
        raise ValueError(f"counts rollouts_done={done}, but epoch {epoch} x {per_epoch} batches per epoch + batch "
                         f"{batch} makes {epoch * per_epoch + batch}; its state.json's progress was changed or "
                         "belongs to another run. Resume from an unchanged checkpoint of this run.")


def stateful_slots(state: TrainingState) -> list[list[str]]:
    """`[slot, class name]` of each stateful object of `state`, as state.json records them."""
    return [[slot, type(h).__name__] for slot, h in state.stateful]


def _check_config(saved: dict[str, Any], current: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Only portable fields may differ. A saved field this config no longer has is ignored; a field the
    checkpoint predates counts as unchanged while it holds its default."""
    def differs(k: str) -> bool:
        if k in saved:
            return saved[k] != current[k]
        return k not in defaults or defaults[k] != current[k]

    changed = [k for k in sorted(current) if not _portable(k) and differs(k)]
    if changed:
        detail = ", ".join(f"{k}: saved {saved[k]!r}, now {current[k]!r}" if k in saved
                           else f"{k}: not saved, now {current[k]!r}" for k in changed)
        raise ValueError(f"used a different config ({detail}); only {sorted(PORTABLE_FIELDS)} and *_dir fields "
                         "may change on resume.")


def _portable(field: str) -> bool:
    return field in PORTABLE_FIELDS or field.endswith("_dir")


def _describe(stateful: list) -> str:
    return "[" + ", ".join(f"{s} ({c})" for s, c in stateful) + "]" if stateful else "no stateful objects"
