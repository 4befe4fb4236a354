"""`TextParallelEnv`: the PettingZoo parallel environment every task subclasses.

Observations and actions are `str`. One episode is one task instance played
for up to `num_turns` turns; every live agent acts at every turn, unless the
task takes turns: then `to_move()` names the agents whose action counts now
(`infos[agent]["to_move"]` says the same), the others' text is ignored, and
learners neither sample nor train those agents at that step. A subclass
writes three methods and the base does the rest (seeding, histories, turn
limits, clipping, malformed-action handling, `observe()`, `state()`, `clone()`, `render()`):

    class Echo(TextParallelEnv):
        metadata = {**TextParallelEnv.metadata, "name": "echo-v0", "num_tasks": 3}
        WORDS = ["red", "green", "blue"]

        def load_task(self, task_index):
            i = task_index if task_index is not None else self.np_random.integers(3)
            return {"word": self.WORDS[i]}

        def prompts(self):
            return {a: f"Say {self.task['word']!r}." for a in self.agents}

        def score(self, actions):
            hits = [self.task["word"] in text.lower() for text in actions.values()]
            return float(all(hits)), all(hits)     # joint reward, task solved

`score` returns `(rewards, terminated)`: `rewards` is one float (every agent
gets it: a cooperative task) or a dict of per-agent floats. Text a task cannot
parse is reported with `self.flag_invalid(agent, reason)`, never raised.

Episode state lives in `self.task` (the instance, plus anything the task
mutates) and the base's own fields, which `clone()` deep-copies; everything
else (datasets, reward functions) is shared between clones.
"""

from __future__ import annotations

import abc
import copy
import difflib
from typing import Any

import gymnasium
import numpy as np
from gymnasium.utils import seeding
from pettingzoo import ParallelEnv

from comlrl_env.spaces import TextSpace
from rewards.joint import joint_text, text_blocks

__all__ = ["AgentID", "TextParallelEnv", "joint_text"]

AgentID = str
"""An agent's name in an env, e.g. `"agent_0"`: the keys of observations, actions, rewards and infos."""


_EPISODE_FIELDS = (
    "agents",
    "task",
    "task_index",
    "turn",
    "np_random",
    "prompt_history",
    "response_history",
    "last_actions",
    "last_rewards",
    "_observations",
    "_step_infos",
)


class TextParallelEnv(ParallelEnv[AgentID, str, str], metaclass=abc.ABCMeta):
    """Base class of text environments: `str` observations and actions, up to `num_turns` turns.

    `invalid_action_penalty` is subtracted once per flagged agent: from every
    agent in a cooperative task, from the offender otherwise (a subclass sets
    `invalid_action_penalty_shared` to choose). The text of an agent that is not
    to move (`to_move()`) is ignored: it is never parsed nor flagged, and is
    recorded as "".

    Args:
        num_agents: Number of agents; ids are `agent_0 .. agent_{n-1}`.
        num_turns: Turn limit; reaching it truncates the episode.
        roles: Optional role name per agent (documentation and prompts).
        max_observation_length: Observations are clipped to this many characters.
        max_action_length: Longer actions are clipped (reported in `infos`).
        render_mode: None or "ansi".
    """

    metadata: dict[str, Any] = {
        "name": "text_env-v0",
        "render_modes": ["ansi"],
        "is_parallelizable": True,
        "reward_structure": "cooperative",  # "cooperative" | "competitive" | "general"
        "num_tasks": None,  # size of the finite task set, None when procedural
        # Optional, read by the benchmark's intervals (`comlrl_env.benchmark.reward_interval`):
        # "binary_reward": True when every episode's reward is 0 or 1 (a rate);
        # "reward_range": (low, high) that every episode's reward lies in.
    }
    """What the task is: `name` (its id), `render_modes`, `is_parallelizable`, `reward_structure`
    ("cooperative", "competitive" or "general") and `num_tasks` (the size of its finite task set; None when
    procedural). A task extends it: `metadata = {**TextParallelEnv.metadata, "name": "my/Task-v0", ...}`."""
    invalid_action_penalty: float = 0.0
    """Subtracted once per agent whose action is flagged invalid (a subclass sets it)."""
    invalid_action_penalty_shared: bool | None = None
    """Who pays `invalid_action_penalty`: every agent (True), the offender only (False), or None for the
    default, shared in a cooperative task (a game whose players share a utility still charges the offender)."""

    def __init__(
        self,
        num_agents: int = 2,
        num_turns: int = 1,
        roles: list[str] | None = None,
        max_observation_length: int = 16_384,
        max_action_length: int = 16_384,
        render_mode: str | None = None,
    ) -> None:
        if not isinstance(num_agents, int) or num_agents < 1:
            raise ValueError(f"num_agents must be a positive int, got {num_agents!r}.")
        if not isinstance(num_turns, int) or num_turns < 1:
            raise ValueError(f"num_turns must be a positive int, got {num_turns!r}.")
        if roles is not None and len(roles) != num_agents:
            raise ValueError(
                f"roles has {len(roles)} names for num_agents={num_agents}; give one role per agent."
            )
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}.")
        self.possible_agents: list[AgentID] = [f"agent_{i}" for i in range(num_agents)]
        self.agents: list[AgentID] = []
        self.num_turns = num_turns
        self.roles = list(roles) if roles is not None else [f"agent {i}" for i in range(num_agents)]
        self.render_mode = render_mode
        self._observation_space = TextSpace(max_observation_length)
        self._action_space = TextSpace(max_action_length)
        self.np_random, self.np_random_seed = seeding.np_random()
        self.task: Any = None
        self.task_index: int | None = None
        self.task_subset: tuple[int, ...] | None = None  # set by select_tasks
        self.turn = 0
        self.prompt_history: dict[AgentID, list[str]] = {}
        self.response_history: dict[AgentID, list[str]] = {}
        self.last_actions: dict[AgentID, str] = {}
        self.last_rewards: dict[AgentID, float] = {}
        self._observations: dict[AgentID, str] = {}
        self._step_infos: dict[AgentID, dict[str, Any]] = {}

    # ----- what a task writes -------------------------------------------------

    @abc.abstractmethod
    def load_task(self, task_index: int | None) -> Any:
        """Return task instance `task_index`, or one drawn with `self.np_random` when None."""

    @abc.abstractmethod
    def prompts(self) -> dict[AgentID, str]:
        """Observation of every live agent at the current turn (`self.turn`, histories available)."""

    @abc.abstractmethod
    def score(self, actions: dict[AgentID, str]) -> tuple[float | dict[AgentID, float], bool]:
        """Score one joint action: `(reward or {agent: reward}, task finished)`."""

    def improvement(self, quality: float) -> float:
        """Per-turn reward of a multi-turn task: this turn's `quality` minus the last turn's (0 before).

        Over turns 0..T with discount g the return is `(1 - g) * sum_{t<T} g^t q_t + g^T q_T`, a mean of
        the turns' qualities with weights that sum to 1 and favour earlier turns (with g = 1, the last
        quality). So a better answer at any turn never returns less, and reaching the best quality sooner
        never returns less; paying `q_t` every turn instead would reward staying unsolved for longer.
        The previous quality is kept in `self.task["quality"]`.
        """
        previous = self.task.get("quality", 0.0)
        self.task["quality"] = quality
        return quality - previous

    def is_echo(self, text: str, agent: AgentID | None = None) -> bool:
        """True when `text` restates an observation of this episode (any agent's, or `agent`'s own; any turn).

        It restates one when it contains it (whitespace and case aside) or is nearly it (difflib ratio
        >= 0.9). Tasks treat such an answer as no answer, so copying the prompt earns nothing. A game of
        private information passes the answering `agent`: whether a guess at another seat's prompt is
        flagged must not tell the seat that its guess was right.
        """
        answer = " ".join(text.split()).lower()
        if not answer:
            return False
        agents = list(self._observations) if agent is None else [agent]
        seen = [*(self._observations.get(a, "") for a in agents),
                *(o for a, h in self.prompt_history.items() if agent is None or a == agent for o in h)]
        for observation in {" ".join(o.split()).lower() for o in seen}:
            if observation and observation in answer:
                return True
            if 2 * min(len(answer), len(observation)) < 0.9 * (len(answer) + len(observation)):
                continue  # the ratio is at most this bound (real_quick_ratio), without building a matcher
            matcher = difflib.SequenceMatcher(None, answer, observation, autojunk=False)
            if matcher.real_quick_ratio() >= 0.9 and matcher.quick_ratio() >= 0.9 and matcher.ratio() >= 0.9:
                return True
        return False

    def to_move(self) -> list[AgentID]:
        """The live agents whose action counts at this step; the others' text is ignored.

        Every live agent by default. A turn-taking task overrides it (a board game: the player on move);
        rollouts ask only these agents to generate, and train only on their steps.
        """
        return list(self.agents)

    def flag_invalid(self, agent: AgentID, reason: str) -> None:
        """Report that `agent`'s action could not be parsed (a game outcome, not an error)."""
        self._step_infos.setdefault(agent, {}).setdefault("invalid_action", reason)  # the first reason wins

    # ----- PettingZoo API -------------------------------------------------------

    @property
    def num_tasks(self) -> int | None:
        """Number of task instances (None for procedural tasks); after `select_tasks`, the number selected."""
        if self.task_subset is not None:
            return len(self.task_subset)
        return self.metadata.get("num_tasks")

    def select_tasks(self, indices: Any) -> "TextParallelEnv":
        """Keep only the task instances `indices` of the full set, renumbered `0..len(indices) - 1`; return self.

        For a train/held-out split that never overlaps, as `datasets.Dataset.select` for rows:

            train = make("smoke/Arithmetic-v1", max_operand=19).select_tasks(range(100, 400))
            held_out = make("smoke/Arithmetic-v1", max_operand=19).select_tasks(range(100))

        `reset(options={"task_index": i})` then plays instance `indices[i]`, a seeded reset without one draws
        among the selected instances, and `num_tasks` (what learners and benchmarks iterate over) is
        `len(indices)`; `infos[agent]["task_index"]` is the index within the selection. Procedural tasks
        have no finite set: their instances are reset seeds, which learners and benchmarks already keep apart.
        """
        full = self.metadata.get("num_tasks")
        if full is None:
            raise ValueError(f"{self.metadata.get('name')} is procedural (num_tasks None): it has no task set to "
                             "select from; hold out reset seeds instead.")
        if self.task_subset is not None:
            raise ValueError("select_tasks was already called on this env; select from a fresh env.")
        picked = tuple(indices)
        bad = [i for i in picked if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < full]
        if bad or not picked or len(set(picked)) != len(picked):
            raise ValueError(f"select_tasks needs distinct int task indices in 0..{full - 1}; got {len(picked)} "
                             f"indices, {len(picked) - len(set(picked))} repeated, out of range or not int: {bad[:5]}.")
        picked = tuple(int(i) for i in picked)
        self.task_subset = picked
        return self

    def observation_space(self, agent: AgentID) -> gymnasium.spaces.Text:
        return self._observation_space

    def action_space(self, agent: AgentID) -> gymnasium.spaces.Text:
        return self._action_space

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[AgentID, str], dict[AgentID, dict[str, Any]]]:
        """Start an episode: `options={"task_index": i}` picks instance i, else a seeded draw."""
        if seed is not None:
            self.np_random, self.np_random_seed = seeding.np_random(seed)
        task_index = (options or {}).get("task_index")
        if task_index is not None:
            task_index = self._check_task_index(task_index)
        if task_index is None and self.task_subset is not None:
            task_index = int(self.np_random.integers(len(self.task_subset)))
        self.task_index = task_index
        self.agents = list(self.possible_agents)
        self.turn = 0
        self.prompt_history = {a: [] for a in self.agents}
        self.response_history = {a: [] for a in self.agents}
        self.last_actions, self.last_rewards, self._step_infos = {}, {}, {}
        self.task = self.load_task(task_index if self.task_subset is None else self.task_subset[task_index])
        self._observations = self._observe()
        return dict(self._observations), {a: self._info(a) for a in self.agents}

    def step(self, actions: dict[AgentID, str]) -> tuple[
        dict[AgentID, str],
        dict[AgentID, float],
        dict[AgentID, bool],
        dict[AgentID, bool],
        dict[AgentID, dict[str, Any]],
    ]:
        """Play one joint action; malformed text is scored with the task's penalty."""
        if not self.agents:
            raise RuntimeError("step() called on a finished episode; call reset() first.")
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise ValueError(f"actions for agents not in the episode: {sorted(unknown)}; live: {self.agents}.")
        self._step_infos = {a: {} for a in self.agents}
        movers = set(self.to_move())
        clean = {a: self._clean_action(a, actions.get(a)) if a in movers else "" for a in self.agents}
        for a in self.agents:
            self.prompt_history[a].append(self._observations[a])
            self.response_history[a].append(clean[a])
        rewards, terminated = self.score(clean)
        if not isinstance(rewards, dict):
            rewards = {a: rewards for a in self.agents}
        rewards = {a: float(rewards[a]) for a in self.agents}
        offenders = [a for a in self.agents if "invalid_action" in self._step_infos[a]]
        if offenders and self.invalid_action_penalty:
            # A cooperative team shares every penalty; otherwise only the offender pays.
            shared = self.invalid_action_penalty_shared
            if shared is None:
                shared = self.metadata.get("reward_structure") == "cooperative"
            for a in self.agents:
                count = len(offenders) if shared else int(a in offenders)
                rewards[a] -= count * self.invalid_action_penalty
        self.last_actions, self.last_rewards = clean, rewards
        self.turn += 1
        truncated = not terminated and self.turn >= self.num_turns
        done = terminated or truncated
        if not done:
            self._observations = self._observe()
        infos = {a: self._info(a) for a in self.agents}
        observations = dict(self._observations)
        terminations = {a: bool(terminated) for a in self.agents}
        truncations = {a: bool(truncated) for a in self.agents}
        if done:
            self.agents = []
            for info in infos.values():
                info["to_move"] = False
        return observations, rewards, terminations, truncations, infos

    def observe(self, agent: AgentID) -> str:
        """The agent's current observation, as the last `reset` or `step` returned it.

        After the final step that is the last turn's observation (a finished episode shows no new one).

        Raises:
            RuntimeError: Called before `reset()`.
            ValueError: `agent` has no observation in this episode.
        """
        if not self._observations:
            raise RuntimeError("observe() called before reset(); call reset() first.")
        if agent not in self._observations:
            raise ValueError(f"no observation for agent {agent!r}; agents with one: {list(self._observations)}.")
        return self._observations[agent]

    @property
    def observations(self) -> dict[AgentID, str]:
        """A copy of every agent's current observation (see `observe`); empty before `reset()`."""
        return dict(self._observations)

    def state(self) -> str:
        """Joint text: every agent's observation, then (after a step) the last joint action (`joint_text`).

        Observations and actions are escaped (`rewards.joint.escape`): no text an agent wrote, even quoted
        in its partner's observation, can pass for another block's header.
        """
        observations = text_blocks((a, self._observations.get(a, "")) for a in self.possible_agents)
        if not self.last_actions:
            return observations
        return joint_text(observations, {a: self.last_actions.get(a, "") for a in self.possible_agents})

    def clone(self) -> "TextParallelEnv":
        """An independent copy at the same state (shares datasets and reward functions)."""
        twin = copy.copy(self)
        memo: dict[int, Any] = {}  # one memo: objects shared between fields stay shared
        for name in _EPISODE_FIELDS:
            setattr(twin, name, copy.deepcopy(getattr(self, name), memo))
        return twin

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        lines = [f"== {self.metadata.get('name')} turn {self.turn}/{self.num_turns} =="]
        for a in self.possible_agents:
            lines.append(f"[{a}] obs: {self._observations.get(a, '')!r}")
            if a in self.last_actions:
                lines.append(f"[{a}] act: {self.last_actions[a]!r} reward={self.last_rewards.get(a)}")
        return "\n".join(lines)

    def close(self) -> None:
        pass

    # ----- internals ------------------------------------------------------------

    def _check_task_index(self, task_index: Any) -> int:
        if isinstance(task_index, bool) or not isinstance(task_index, (int, np.integer)):
            raise TypeError(f"options['task_index'] must be an int, got {task_index!r}.")
        n = self.num_tasks
        if task_index < 0 or (n is not None and task_index >= n):
            raise ValueError(f"task_index {task_index} is out of range; this env has {n} task instances.")
        return int(task_index)

    def _observe(self) -> dict[AgentID, str]:
        limit = self._observation_space.max_length
        observations = {}
        for a, text in self.prompts().items():
            if len(text) > limit:
                self._step_infos.setdefault(a, {})["observation_clipped"] = len(text)
                text = text[:limit]
            observations[a] = text
        return observations

    def _clean_action(self, agent: AgentID, action: Any) -> str:
        if action is None:
            self.flag_invalid(agent, "no action given")
            return ""
        if not isinstance(action, str):
            self.flag_invalid(agent, f"action is a {type(action).__name__}, not a str")
            return ""
        limit = self._action_space.max_length
        if len(action) > limit:
            self._step_infos[agent]["action_clipped"] = len(action)
            action = action[:limit]
        return action

    def _info(self, agent: AgentID) -> dict[str, Any]:
        info = dict(self._step_infos.get(agent, {}))
        info["turn"] = self.turn
        info["task_index"] = self.task_index
        info["to_move"] = agent in self.to_move() if self.agents else False
        info["prompt_history"] = list(self.prompt_history.get(agent, []))
        info["response_history"] = list(self.response_history.get(agent, []))
        return info
