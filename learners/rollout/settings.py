"""How agents sample (`GenerationSettings`), and the one rule for settings that take one value for every
seat or one value per seat.

A learner derives its `GenerationSettings` from its config (`LearnerConfig.generation_settings()`); the
rollout engine hands each agent's own values (`for_agent`) to the generation backend.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

__all__ = ["GenerationSettings", "PER_AGENT_FIELDS", "SETTINGS_PER_AGENT", "agent_value", "check_agent_count",
           "check_sampling", "per_agent_values"]


PER_AGENT_FIELDS = ("max_new_tokens", "temperature", "top_p", "top_k", "use_chat_template", "stop_strings")
"""Sampling fields that take one value for every agent or a list (or tuple) with one value per agent."""
SETTINGS_PER_AGENT = (*PER_AGENT_FIELDS, "logprob_temperature")
"""The per-agent fields of `GenerationSettings`: those of the config and the derived scoring temperature."""


def per_agent_values(name: str, value: Any) -> list[Any] | None:
    """The values of field `name`, one per agent, when `value` has the per-agent form; None when it is one value
    for every agent.

    A list or tuple is per agent. `stop_strings`, whose one value is itself a list of strings, is per agent
    when it is a non-empty list whose items are all lists (or tuples) or None: `["###"]` ends every agent's
    completions at "###", `[["###"], None]` only agent 0's.
    """
    if not isinstance(value, (list, tuple)):
        return None
    if name != "stop_strings":
        return list(value)
    nested = [v is None or isinstance(v, (list, tuple)) for v in value]
    if value and all(nested):
        return list(value)
    if any(nested):
        raise TypeError(f"stop_strings mixes strings and lists: {value!r}; give one list of strings for every "
                        "agent (['###']) or one list (or None) per agent ([['###'], None]).")
    return None


def agent_value(settings: Any, name: str, agent: int) -> Any:
    """Agent `agent`'s value of the field `name` of `settings`: the value itself when it is one for every agent."""
    value = getattr(settings, name)
    values = per_agent_values(name, value)
    return value if values is None else values[agent]


def check_agent_count(settings: Any, count: int, names: Iterable[str] = PER_AGENT_FIELDS) -> None:
    """Raise a ValueError for each field in `names` of `settings` with per-agent values but not `count` of them."""
    for name in names:
        values = per_agent_values(name, getattr(settings, name))
        if values is not None and len(values) != count:
            raise ValueError(f"{name} has {len(values)} value{'s' * (len(values) != 1)} for {count} "
                             f"agent{'s' * (count != 1)}; give one value or one per agent.")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _strings(v: Any) -> bool:
    return v is None or isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v))


_SAMPLING_CHECKS: dict[str, tuple[Callable[[Any], bool], type[Exception], str, str]] = {
    "max_new_tokens": (lambda v: _number(v) and v > 0, ValueError, "a positive number", ""),
    "temperature": (lambda v: _number(v) and v > 0, ValueError, "> 0", "; use eval_greedy for greedy decoding"),
    "logprob_temperature": (lambda v: _number(v) and v > 0, ValueError, "> 0", ""),
    "top_p": (lambda v: _number(v) and 0 < v <= 1, ValueError, "in (0, 1]", "; 1.0 disables nucleus sampling"),
    "top_k": (lambda v: v is None or (_number(v) and v > 0), ValueError, "a positive number or None",
              "; None disables top-k"),
    "use_chat_template": (lambda v: isinstance(v, bool), TypeError, "True or False", ""),
    "stop_strings": (_strings, TypeError, "a list of strings or None", ""),
}
"""Per sampling field: the test each agent's value passes, the error, the requirement and the fix."""


def check_sampling(settings: Any, names: Iterable[str] = PER_AGENT_FIELDS) -> None:
    """Turn the per-agent tuples of the fields `names` of `settings` into lists (configs round-trip through JSON),
    then check every agent's value; a bad one raises naming the field, the agent, the value and the fix."""
    for name in names:
        value = getattr(settings, name)
        if name == "stop_strings" and isinstance(value, tuple):
            value = list(value)
        values = per_agent_values(name, value)
        if values is not None:
            value = [list(v) if name == "stop_strings" and isinstance(v, tuple) else v for v in values]
        setattr(settings, name, value)
        test, error, requirement, fix = _SAMPLING_CHECKS[name]
        labelled = [(name, value)] if values is None else [(f"{name}[{i}]", v) for i, v in enumerate(value)]
        for label, v in labelled:
            if not test(v):
                given = "" if values is None else f" ({name}={value!r})"
                raise error(f"{label} must be {requirement}, got {v!r}{given}{fix}.")



@dataclasses.dataclass
class GenerationSettings:
    """How agents sample: temperature, top-p and top-k (None disables it) in our sampling loop; with
    `generation_kwargs` or `stop_strings`, `model.generate` samples and gets `generation_kwargs` unchanged.
    A learner derives it from its config (`LearnerConfig.generation_settings()`). The fields of
    `PER_AGENT_FIELDS` and `logprob_temperature` take one value or one per agent (`for_agent(i)` picks)."""

    max_new_tokens: int | list[int] = 256
    """Most tokens a completion may have, its EOS included."""
    temperature: float | list[float] = 0.6
    """Sampling temperature (> 0)."""
    top_p: float | list[float] = 0.6
    """Nucleus sampling mass; 1.0 disables it."""
    top_k: int | None | list[int | None] = 50
    """Top-k sampling; None disables it."""
    use_chat_template: bool | list[bool] = False
    """Render each observation with the tokenizer's chat template."""
    stop_strings: list[str] | list[list[str] | None] | None = None
    """End a completion at the first of these strings (kept in it); per agent: a list of lists (or None)."""
    max_prompt_length: int | None = None
    """Truncate prompts (from the left) to this many tokens."""
    generation_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Extra `generate` arguments."""
    logprob_temperature: float | list[float] = 1.0
    """The kept log-probs are under softmax(z / this): the learners' scoring temperature."""
    batch_adapters: bool = True
    """LoRA agents on one shared base sample together in one batch, each row through its own adapter."""

    def __post_init__(self) -> None:
        check_sampling(self, SETTINGS_PER_AGENT)

    def check_per_agent(self, count: int) -> None:
        """Raise a ValueError when a field has per-agent values but not `count` of them."""
        check_agent_count(self, count, SETTINGS_PER_AGENT)

    def for_agent(self, agent: int) -> "GenerationSettings":
        """Agent `agent`'s settings, every per-agent field replaced by its value."""
        return dataclasses.replace(self, **{name: agent_value(self, name, agent) for name in SETTINGS_PER_AGENT})
