"""`DatasetEnv`: a dataset, a reward function and optional formatters as an environment.

This is CoMLRL 1.4.3's way of describing a task (a `datasets.Dataset`,
per-agent formatters, a joint reward function and, for several turns, an
external transition) expressed as a `TextParallelEnv`:

- task instance i is row i of the dataset; agent a observes `formatters[a](row)`
  (default: `row["prompt"]`);
- a joint action is scored by `reward_func` with the conventions of
  `rewards.calling` (positional completion lists, `prompts=` and
  `batch_items=` keywords when declared); one returned value is the joint
  reward, N values are per-agent rewards; `reward_processor` maps each value;
- at turn t > 0, `external_transition(prompt=row["prompt"], agent_completions=
  [...], num_agents=N, prompt_history_per_agent=..., response_history_per_agent=
  ..., batch_item=row)` returns the N next prompts (`batch_item` only when the
  function declares it or `**kwargs`); each goes through that agent's
  formatter as `row["prompt"]`, or is used verbatim with
  `external_prompt_passthrough=True`. Prompt histories hold the observations
  the agents actually saw (formatted). A transition that raises or returns
  anything but N strings raises `TransitionError`;
- the reward function gets `prompts=[agent_0's observation]` and
  `batch_items=[row]` (one joint action per call); a function that raises or
  returns an unusable value raises `RewardFunctionError` naming the dataset
  index and turn;
- a single-turn episode terminates after its step; a multi-turn one is
  truncated at `num_turns`, or terminates early once the mean reward of a turn
  exceeds `early_termination_threshold`.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Mapping
from typing import Any, Callable, Sequence

from comlrl_env.base import AgentID, TextParallelEnv
from rewards.calling import RewardFunctionError, call_reward_function
from rewards.plain_data import short_repr

__all__ = ["DatasetEnv", "TransitionError"]

Formatter = Callable[..., str]


class TransitionError(ValueError):
    """An external transition raised, or returned something other than one prompt string per agent."""


class DatasetEnv(TextParallelEnv):
    """An environment whose task instances are the rows of a dataset.

    Args:
        dataset: A `datasets.Dataset` or any sequence of dict rows.
        reward_func: Joint reward function (see `rewards.calling`).
        num_agents: Number of agents.
        formatters: None (use `row["prompt"]`), one callable for every agent, or one per agent.
            A formatter may declare an `external_prompts` keyword to see the transition's prompt.
        external_transition: Builds the next prompts on multi-turn episodes (required when num_turns > 1).
        num_turns: Turns per episode.
        reward_processor: Callable applied to every reward value (e.g. scaling).
        external_prompt_passthrough: Use the transition's prompts verbatim, without formatters.
        early_termination_threshold: End the episode once a turn's mean reward exceeds this.
        **kwargs: Passed to `TextParallelEnv` (roles, length limits, render_mode).
    """

    def __init__(
        self,
        dataset: Sequence[dict[str, Any]],
        reward_func: Callable[..., Any],
        num_agents: int = 2,
        formatters: Formatter | Sequence[Formatter] | None = None,
        external_transition: Callable[..., Sequence[str]] | None = None,
        num_turns: int = 1,
        reward_processor: Callable[[float], float] | None = None,
        external_prompt_passthrough: bool = False,
        early_termination_threshold: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(num_agents=num_agents, num_turns=num_turns, **kwargs)
        if not callable(reward_func):
            raise TypeError(f"reward_func must be callable, got {reward_func!r}.")
        if isinstance(dataset, Mapping):  # a DatasetDict of splits, or a dict of columns
            raise TypeError(
                f"dataset must be a sequence of rows, got a {type(dataset).__name__} with keys {list(dataset)[:5]}. "
                "Pass one split (dataset['train']) or, for a dict of columns, Dataset.from_dict(columns)."
            )
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError(
                f"dataset must support len() and indexing (a datasets.Dataset or a list of dicts), "
                f"got {type(dataset).__name__}. Materialize an IterableDataset with Dataset.from_list(list(it))."
            )
        if len(dataset) == 0:
            raise ValueError("dataset is empty; DatasetEnv needs at least one row.")
        if num_turns > 1 and external_transition is None:
            raise ValueError(
                f"num_turns={num_turns} needs an external_transition that builds the next prompts; "
                "pass external_transition=... or set num_turns=1."
            )
        if external_transition is not None and not callable(external_transition):
            raise TypeError(f"external_transition must be callable, got {external_transition!r}.")
        if reward_processor is not None and not callable(reward_processor):
            raise TypeError(f"reward_processor must be callable, got {reward_processor!r}.")
        threshold = early_termination_threshold
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, numbers.Real)):
            raise TypeError(f"early_termination_threshold must be a number or None, got {threshold!r}.")
        if threshold is not None and math.isnan(threshold):
            raise ValueError("early_termination_threshold is NaN; pass a number, or None to never end early.")
        self.dataset = dataset
        self.reward_func = reward_func
        self.formatters = _formatters(formatters, num_agents)
        self.external_transition = external_transition
        self.reward_processor = reward_processor
        self.external_prompt_passthrough = external_prompt_passthrough
        self.early_termination_threshold = early_termination_threshold
        self.metadata = {
            **TextParallelEnv.metadata,
            "name": f"DatasetEnv({getattr(reward_func, '__name__', 'reward')})",
            "num_tasks": len(dataset),
        }
        self._check_formatters(dataset[0])

    def load_task(self, task_index: int | None) -> dict[str, Any]:
        if task_index is None:
            task_index = int(self.np_random.integers(len(self.dataset)))
            self.task_index = task_index
        return {"item": self.dataset[task_index]}

    def prompts(self) -> dict[AgentID, str]:
        item = self.task["item"]
        where = f"dataset index {self.task_index}, turn {self.turn}"
        if self.turn == 0:
            return {
                a: _checked_format(i, f, item, None, where)
                for i, (a, f) in enumerate(zip(self.agents, self.formatters))
            }
        raw = self._transition(item)
        if self.external_prompt_passthrough:
            return dict(zip(self.agents, raw))
        return {
            a: _checked_format(i, f, {**item, "prompt": text}, text, where)
            for i, (a, f, text) in enumerate(zip(self.agents, self.formatters, raw))
        }

    def score(self, actions: dict[AgentID, str]) -> tuple[dict[AgentID, float], bool]:
        where = f"dataset index {self.task_index}, turn {self.turn}"
        rewards = call_reward_function(
            self.reward_func,
            [[actions[a]] for a in self.agents],
            prompts=[self._observations[self.agents[0]]],
            batch_items=[self.task["item"]],
            where=where,
        )[0]
        if self.reward_processor is not None:
            rewards = [self._process(r, where) for r in rewards]
        per_agent = dict(zip(self.agents, rewards))
        if self.num_turns == 1:
            return per_agent, True
        threshold = self.early_termination_threshold
        return per_agent, threshold is not None and sum(rewards) / len(rewards) > threshold

    # ----- internals ------------------------------------------------------------

    def _process(self, reward: float, where: str) -> float:
        fn = self.reward_processor
        name = getattr(fn, "__qualname__", repr(fn))
        try:
            value = fn(reward)
        except Exception as exc:
            raise RewardFunctionError(
                f"reward_processor {name} raised {exc!r} on reward {reward!r} ({where})."
            ) from exc
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise RewardFunctionError(
                f"reward_processor {name} mapped reward {reward!r} to {short_repr(value)} ({where}); "
                "it must return a finite number."
            )
        return float(value)

    def _transition(self, item: dict[str, Any]) -> list[str]:
        fn = self.external_transition
        kwargs = dict(
            prompt=item.get("prompt", "") if isinstance(item, Mapping) else "",
            agent_completions=[self.response_history[a][-1] for a in self.agents],
            num_agents=len(self.agents),
            prompt_history_per_agent=[list(self.prompt_history[a]) for a in self.agents],
            response_history_per_agent=[list(self.response_history[a]) for a in self.agents],
        )
        if _accepts(fn, "batch_item"):
            kwargs["batch_item"] = item
        name = getattr(fn, "__qualname__", repr(fn))
        where = f"dataset index {self.task_index}, turn {self.turn}"
        try:
            raw = fn(**kwargs)
        except Exception as exc:
            raise TransitionError(f"external_transition {name} raised {exc!r} on {where}.") from exc
        wanted = f"return a list of {len(self.agents)} prompt strings, one per agent."
        if not isinstance(raw, (list, tuple)) or len(raw) != len(self.agents):
            count = f"{len(raw)} values" if isinstance(raw, (list, tuple)) else f"a {type(raw).__name__}"
            raise TransitionError(
                f"external_transition {name} returned {count} on {where}: {short_repr(raw)}; {wanted}")
        for i, text in enumerate(raw):
            if not isinstance(text, str):
                raise TransitionError(
                    f"external_transition {name} returned a {type(text).__name__} for agent {i} on {where}: "
                    f"{short_repr(raw)}; {wanted}"
                )
        return list(raw)

    def _check_formatters(self, item: Any) -> None:
        for i, f in enumerate(self.formatters):
            _checked_format(i, f, item, None, "dataset index 0")


def _default_formatter(item: dict[str, Any]) -> str:
    if not isinstance(item, Mapping):
        raise TypeError(
            f"the default formatter reads row['prompt'], but the rows are {type(item).__name__}s; "
            "use dict rows with a 'prompt' field, or pass formatters=... that read your rows."
        )
    return item["prompt"]


def _checked_format(index: int, formatter: Formatter, item: Any, external: str | None, where: str) -> str:
    """Agent `index`'s prompt for `item`, with errors that name the formatter, the field and the row."""
    name = getattr(formatter, "__qualname__", repr(formatter))
    try:
        text = _format(formatter, item, external)
    except KeyError as exc:
        fields = sorted(map(str, item)) if isinstance(item, Mapping) else type(item).__name__
        raise ValueError(
            f"formatter {index} ({name}) needs dataset field {exc} that the row at {where} does not have "
            f"(fields: {fields}). Add the field or pass formatters=... that use existing ones."
        ) from exc
    if not isinstance(text, str):
        raise TypeError(
            f"formatter {index} ({name}) returned a {type(text).__name__} at {where}, not a str; "
            "formatters must return the prompt text."
        )
    return text


def _formatters(formatters: Any, num_agents: int) -> list[Formatter]:
    if formatters is None:
        return [_default_formatter] * num_agents
    if callable(formatters):
        return [formatters] * num_agents
    if isinstance(formatters, (list, tuple)) and all(callable(f) for f in formatters):
        if len(formatters) != num_agents:
            raise ValueError(
                f"got {len(formatters)} formatters for num_agents={num_agents}; give one callable or one per agent."
            )
        return list(formatters)
    raise TypeError(f"formatters must be None, a callable, or a list of callables, got {formatters!r}.")


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind == p.VAR_KEYWORD for p in params)


def _format(formatter: Formatter, item: Any, external: str | None) -> str:
    if external is not None and _accepts(formatter, "external_prompts"):
        return formatter(item, external_prompts=external)
    return formatter(item)
