"""How agents sample (`GenerationSettings`), the one rule for settings that take one value for every seat or
one value per seat, and the one rule for numeric settings (`Number`).

A learner derives its `GenerationSettings` from its config (`LearnerConfig.generation_settings()`); the
rollout engine hands each agent's own values (`for_agent`) to the generation backend.

Every numeric field of a settings dataclass (these and the learner configs) has a `Number` in its class's
`NUMBERS` table (`number_rules` merges a class's and its bases'); `check_numbers` applies them at
construction: a finite number, an int where the field counts something, in range, or None where None
means "off". A bad value raises naming the field, the value and the fix.

`generation_kwargs` (extra `model.generate` arguments) are checked the same way by `check_generation_kwargs`:
known names, `GENERATE_NUMBERS` for the numeric ones, then each agent's whole call through
`GenerationConfig.validate()`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import operator
from typing import Any, Callable, ClassVar, Iterable

from rewards.plain_data import short_repr

__all__ = ["GENERATE_NUMBERS", "GenerationSettings", "Number", "PER_AGENT_FIELDS", "SAMPLING_NUMBERS",
           "SETTINGS_PER_AGENT", "agent_value", "check_agent_count", "check_generation_kwargs", "check_numbers",
           "check_sampling", "number_rules", "per_agent_values"]


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


@dataclasses.dataclass(frozen=True)
class Number:
    """What a numeric setting may hold: a finite number (an int when `integer`) within `low` and `high` (each
    excluded when its `*_open` flag is set), or None when `optional`. `why` follows the range in an error
    message (" for a group baseline"); `fix` is the sentence that ends it (else the field's default is named).
    """

    low: float | None = None
    high: float | None = None
    integer: bool = False
    optional: bool = False
    low_open: bool = False
    high_open: bool = False
    why: str = ""
    fix: str = ""

    def requirement(self) -> str:
        """The range as a message says it: ">= 1", "> 0", "in [0, 1)", "<= 2" (or the kind without bounds),
        with " or None" when optional."""
        return (self.bounds() or ("an int" if self.integer else "a finite number")) + (" or None" if self.optional
                                                                                        else "")

    def bounds(self) -> str:
        """The bounds alone (">= 1", "in (0, 1]"), or "" when there are none."""
        if self.low is not None and self.high is not None:
            return (f"in {'(' if self.low_open else '['}{_plain(self.low)}, {_plain(self.high)}"
                    f"{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_plain(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_plain(self.high)}"
        return ""

    def check(self, name: str, value: Any, default: Any = None, given: str = "") -> Any:
        """`value` as a plain int or float (numpy scalars included), or None; raise TypeError (not a number, or
        not a whole one where an int counts) or ValueError (NaN, infinite, out of range) naming `name`, `value`
        and the fix. `given` is added after the value (the whole per-agent list)."""
        if value is None and self.optional:
            return None
        kind = "an int" if self.integer else "a number"
        named = f"The default is {default!r}." if default is not None or self.optional else ""
        fix = self.fix or named
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be {kind}{' or None' if self.optional else ''}, got {short_repr(value)} "
                            f"({type(value).__name__}){given}. {fix}".rstrip())
        if self.integer:
            try:
                value = operator.index(value)
            except TypeError:
                whole = f"Use a whole number, e.g. {round(value)}." if math.isfinite(value) else fix
                raise TypeError(f"{name} must be an int, got {short_repr(value)} ({type(value).__name__}){given}. "
                                f"{whole}".rstrip()) from None
        elif not isinstance(value, (int, float)):
            value = float(value)  # numpy floats and other Reals: a plain float, as JSON writes it
        if not self.integer and not math.isfinite(_as_float(value)):
            finite = " ".join(filter(None, ("a finite number", self.bounds(), "or None" if self.optional else "")))
            raise ValueError(f"{name} must be {finite}, got {short_repr(value)}{given}. {named}".rstrip())
        if not self._in_range(value):
            raise ValueError(f"{name} must be {self.requirement()}{self.why}, got {short_repr(value)}{given}. "
                             f"{fix}".rstrip())
        return value

    def _in_range(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)


SAMPLING_NUMBERS: dict[str, Number] = {
    "max_new_tokens": Number(low=1, integer=True),
    "temperature": Number(low=0, low_open=True, fix="Use eval_greedy for greedy decoding."),
    "top_p": Number(low=0, high=1, low_open=True, fix="1.0 disables nucleus sampling."),
    "top_k": Number(low=1, integer=True, optional=True, fix="None disables top-k."),
    "max_prompt_length": Number(low=1, integer=True, optional=True, fix="None keeps prompts whole."),
}
"""The numeric sampling settings, as `LearnerConfig` and `GenerationSettings` share them."""


GENERATE_NUMBERS: dict[str, Number] = {
    **{name: Number(low=1, integer=True) for name in ("max_new_tokens", "max_length", "num_beams", "num_beam_groups")},
    **{name: Number(low=0, integer=True) for name in ("min_new_tokens", "min_length", "top_k", "no_repeat_ngram_size",
                                                      "encoder_no_repeat_ngram_size")},
    **{name: Number(low=0, high=1) for name in ("top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff")},
    **{name: Number(low=0, low_open=True)
       for name in ("temperature", "repetition_penalty", "encoder_repetition_penalty", "max_time")},
    **{name: Number(low=0) for name in ("diversity_penalty", "penalty_alpha")},
    **{name: Number() for name in ("length_penalty", "guidance_scale")},
}
"""The numeric `generate` arguments `generation_kwargs` may set, each with its rule (`Number`)."""
_GENERATE_FLAGS = ("do_sample", "use_cache", "output_scores", "output_logits", "output_attentions",
                   "output_hidden_states", "renormalize_logits", "remove_invalid_values", "low_memory")
_ENGINE_OWNS = {"num_return_sequences": "num_generations sets it", "input_ids": "the rollout engine passes the prompts",
                "inputs": "the rollout engine passes the prompts", "attention_mask": "the rollout engine passes it",
                "return_dict_in_generate": "the rollout engine reads the token ids generate returns"}


def check_generation_kwargs(settings: Any) -> None:
    """Check `settings.generation_kwargs` (a config or `GenerationSettings`) as `model.generate` would, at
    construction: a dict of known `generate` arguments (GenerationConfig fields and `generate`'s own
    parameters), the numeric ones by `GENERATE_NUMBERS`, the flags bools, none that the rollout engine sets,
    then each agent's whole call (its sampling settings, `num_generations` samples, these arguments) through
    `GenerationConfig(...).validate()`. Raises TypeError or ValueError naming the key, the value and the fix."""
    kwargs = settings.generation_kwargs
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise TypeError(f"generation_kwargs must be a dict of generate() arguments by name, got {short_repr(kwargs)}.")
    if not kwargs:
        return
    import difflib
    import inspect

    from transformers import GenerationConfig
    from transformers.generation.utils import GenerationMixin

    fields = set(vars(GenerationConfig())) - {"transformers_version", "_from_model_config"}
    known = fields | set(inspect.signature(GenerationMixin.generate).parameters) - {"self", "kwargs"}
    for name, value in kwargs.items():
        label = f"generation_kwargs[{name!r}]"
        if name in _ENGINE_OWNS:
            raise ValueError(f"{label} cannot be set: {_ENGINE_OWNS[name]}. Remove it.")
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"Did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"{label}: generate() has no argument {name!r}. {hint}Remove it or fix its name.")
        if name in GENERATE_NUMBERS:
            dataclasses.replace(GENERATE_NUMBERS[name], fix="Fix the value or remove the key.").check(label, value)
        elif name in _GENERATE_FLAGS and not isinstance(value, bool):
            raise TypeError(f"{label} must be True or False, got {short_repr(value)} ({type(value).__name__}).")
    count = max([len(v) for n in PER_AGENT_FIELDS if (v := per_agent_values(n, getattr(settings, n))) is not None],
                default=1)
    samples = getattr(settings, "num_generations", None)
    for agent in range(count):
        call = dict(do_sample=True, temperature=agent_value(settings, "temperature", agent),
                    top_p=agent_value(settings, "top_p", agent), top_k=agent_value(settings, "top_k", agent) or 0,
                    max_new_tokens=agent_value(settings, "max_new_tokens", agent),
                    **({"num_return_sequences": samples} if isinstance(samples, int) else {}))
        call.update({k: v for k, v in kwargs.items() if k in fields})
        try:
            GenerationConfig(**call).validate()
        except ValueError as exc:
            where = f" for agent {agent}" if count > 1 else ""
            raise ValueError(f"generation_kwargs={short_repr(kwargs)} do not make a valid generate() call{where}: "
                             f"{str(exc).strip()[:300]} Fix the value or remove the key.") from None


def number_rules(cls: type) -> dict[str, Number]:
    """The `Number` of each numeric field of the settings class `cls`: its `NUMBERS` and its bases' (nearest wins)."""
    rules: dict[str, Number] = {}
    for klass in reversed(cls.__mro__):
        rules.update(vars(klass).get("NUMBERS", {}))
    return rules


def check_numbers(settings: Any) -> None:
    """Check every numeric field of the dataclass `settings` against `number_rules(type(settings))`, each agent's
    value of a per-agent field on its own; plain ints and floats replace numpy scalars."""
    defaults = {f.name: f.default for f in dataclasses.fields(settings)}
    for name, rule in number_rules(type(settings)).items():
        value = getattr(settings, name)
        values = per_agent_values(name, value) if name in SETTINGS_PER_AGENT else None
        default = defaults.get(name, dataclasses.MISSING)
        default = None if default is dataclasses.MISSING else default
        if values is None:
            setattr(settings, name, rule.check(name, value, default))
        else:
            given = f" ({name}={short_repr(value)})"
            setattr(settings, name, [rule.check(f"{name}[{i}]", v, default, given) for i, v in enumerate(values)])


def _as_float(value: float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond the float range
        return math.inf




def _plain(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _strings(v: Any) -> bool:
    return v is None or isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v))


_SAMPLING_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "use_chat_template": (lambda v: isinstance(v, bool), "True or False"),
    "stop_strings": (_strings, "a list of strings or None"),
}
"""The sampling fields that are not numbers: the test each agent's value passes and the requirement."""


def check_sampling(settings: Any, names: Iterable[str] = PER_AGENT_FIELDS) -> None:
    """Turn the per-agent tuples of the fields `names` of `settings` into lists (configs round-trip through JSON),
    then check every agent's value of the fields that are not numbers (`check_numbers` checks those); a bad one
    raises a TypeError naming the field, the agent, the value and the requirement."""
    for name in names:
        value = getattr(settings, name)
        if name == "stop_strings" and isinstance(value, tuple):
            value = list(value)
        values = per_agent_values(name, value)
        if values is not None:
            value = [list(v) if name == "stop_strings" and isinstance(v, tuple) else v for v in values]
        setattr(settings, name, value)
        if name not in _SAMPLING_CHECKS:
            continue
        test, requirement = _SAMPLING_CHECKS[name]
        labelled = [(name, value)] if values is None else [(f"{name}[{i}]", v) for i, v in enumerate(value)]
        for label, v in labelled:
            if not test(v):
                given = "" if values is None else f" ({name}={value!r})"
                raise TypeError(f"{label} must be {requirement}, got {v!r}{given}.")


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
    """End a completion at the first of these strings in its own text (kept in it); per agent: a list of lists
    (or None)."""
    max_prompt_length: int | None = None
    """Truncate prompts (from the left) to this many tokens; the backends also cut them to the model's context
    minus `max_new_tokens` (`learners.rollout.backends.hf.prompt_limit`)."""
    generation_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Extra `generate` arguments."""
    logprob_temperature: float | list[float] = 1.0
    """The kept log-probs are under softmax(z / this): the learners' scoring temperature."""
    batch_adapters: bool = True
    """LoRA agents on one shared base sample together in one batch, each row through its own adapter."""

    NUMBERS: ClassVar[dict[str, Number]] = {**SAMPLING_NUMBERS, "logprob_temperature": Number(low=0, low_open=True)}
    """The rule of each numeric field (`Number`), checked at construction."""

    def __post_init__(self) -> None:
        check_sampling(self, SETTINGS_PER_AGENT)
        check_numbers(self)
        check_generation_kwargs(self)

    def check_per_agent(self, count: int) -> None:
        """Raise a ValueError when a field has per-agent values but not `count` of them."""
        check_agent_count(self, count, SETTINGS_PER_AGENT)

    def for_agent(self, agent: int) -> "GenerationSettings":
        """Agent `agent`'s settings, every per-agent field replaced by its value."""
        return dataclasses.replace(self, **{name: agent_value(self, name, agent) for name in SETTINGS_PER_AGENT})
