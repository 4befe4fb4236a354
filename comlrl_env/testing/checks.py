"""`check_env`: the checks every environment passes, built-in or user-written.

Learners rely on a few properties of an environment that PettingZoo's own API
test does not cover, and that fail silently (a wrong baseline, a lost tree
branch) rather than loudly. `check_env(env)` runs them all in milliseconds for
a simple task, so a user runs it once on a new task before training:

- metadata: `name`, `reward_structure` (`"cooperative" | "competitive" |
  "general"`) and `num_tasks` (int or None) are declared;
- spaces: `observation_space(agent)` / `action_space(agent)` return the same
  object every call (PettingZoo seeds and caches them);
- whole-episode seed determinism: group-relative learners reset several copies
  with one seed and compare their rewards, so two fresh copies reset with the
  same seed (and `options={"task_index": i}`) and fed the same actions must
  return identical observations, rewards, terminations, truncations, infos and
  `state()` at every step, and so must two episodes of one copy;
- gibberish: a model can write anything (empty text, control characters,
  emoji, 20,000 characters, unclosed code fences, tag soup, right-to-left
  text); every such action is a game outcome, never an exception, with finite
  float rewards and `str` observations inside the observation space;
- `pettingzoo.test.parallel_api_test` passes (its output is silenced);
- pickling mid-episode (multiprocess rollouts) and `clone()` mid-episode (tree
  rollouts) continue exactly like the original, and stepping a clone leaves
  the original untouched;
- `state()` returns `str`; `render()` returns `str` with `render_mode="ansi"`.

Usage:

    from comlrl_env.testing import check_env
    check_env(MyTask(num_agents=2))      # or check_env("coop/MyTask-v0")

Failures raise `EnvCheckError` (an `AssertionError`) whose message names the
environment, the check and the first difference found.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import math
import pickle
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from pettingzoo.test import parallel_api_test

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.registry import make
from comlrl_env.testing.episodes import GIBBERISH, first_difference, gibberish, scripted, short_repr

__all__ = ["EnvCheckError", "GIBBERISH", "check_env"]

REWARD_STRUCTURES = ("cooperative", "competitive", "general")


class EnvCheckError(AssertionError):
    """An environment failed one of `check_env`'s checks; the message says which and how."""


def check_env(
    env_or_id: TextParallelEnv | str | Callable[[], TextParallelEnv],
    *,
    seed: int = 0,
    num_episodes: int = 2,
) -> None:
    """Check that an environment meets the contract learners rely on (see the module docstring).

    The instance passed in is only used as a template: every check runs on a
    fresh copy built from `env.spec` when the env came from `make`, else from a
    deep copy of the instance taken before any check runs.

    Args:
        env_or_id: A `TextParallelEnv` instance, a registered env id (built with
            `comlrl_env.make`) or a zero-argument factory returning a fresh env.
        seed: Seed of the first episode; episode `e` uses `seed + e`.
        num_episodes: Episodes of the determinism check. With a finite task set,
            even episodes reset with `options={"task_index": e % num_tasks}` and
            odd ones with the seed alone.

    Raises:
        EnvCheckError: A check failed; the message names the env and the check.
        TypeError: `env_or_id` is not an env, id or factory of a `TextParallelEnv`.
        ValueError: `num_episodes` is not a positive int.
    """
    if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 1:
        raise ValueError(f"num_episodes must be a positive int, got {num_episodes!r}.")
    fresh, label, ansi_factory = _factories(env_or_id)
    checker = _Checker(fresh, label, ansi_factory, seed)
    checker.check_metadata_and_spaces()
    for episode in range(num_episodes):
        checker.check_determinism(episode)
    checker.check_gibberish()
    checker.check_parallel_api()
    checker.check_pickle()
    checker.check_clone()
    checker.check_render()


# ----- building fresh copies ----------------------------------------------------


def _factories(
    env_or_id: Any,
) -> tuple[Callable[[], TextParallelEnv], str, Callable[[], TextParallelEnv] | None]:
    """Return (fresh-copy factory, label for messages, factory of an ansi-rendering copy or None)."""
    if isinstance(env_or_id, str):
        env_or_id = make(env_or_id)
    if isinstance(env_or_id, TextParallelEnv):
        template = env_or_id
        label = _label(template)
        spec = getattr(template, "spec", None)
        if spec is not None and callable(getattr(spec, "make", None)):
            ansi = None
            if _accepts_kwarg(getattr(spec, "entry_point", None), "render_mode"):
                ansi = lambda: spec.make(render_mode="ansi")  # noqa: E731
            return spec.make, label, ansi
        # Copy before any check touches the instance, so every copy starts alike.
        pristine = copy.deepcopy(template)
        return (lambda: copy.deepcopy(pristine)), label, None
    if callable(env_or_id):
        factory = env_or_id
        probe = factory()
        if not isinstance(probe, TextParallelEnv):
            raise TypeError(
                f"check_env: the factory {factory!r} returned a {type(probe).__name__}, not a TextParallelEnv."
            )
        return factory, _label(probe), None
    raise TypeError(
        f"check_env takes a TextParallelEnv, an env id or a zero-argument factory, got {type(env_or_id).__name__}."
    )


def _label(env: TextParallelEnv) -> str:
    spec = getattr(env, "spec", None)
    name = getattr(spec, "id", None) or (env.metadata or {}).get("name")
    return f"{name} ({type(env).__name__})" if name else type(env).__name__


def _accepts_kwarg(factory: Any, name: str) -> bool:
    if isinstance(factory, str) or factory is None:
        return True  # a "module:attr" entry point: assume the documented TextParallelEnv signature
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


Record = dict[str, Any]
Policy = Callable[[int, list[AgentID]], dict[AgentID, str]]


class _Checker:
    """Runs the checks on fresh copies and turns every failure into an `EnvCheckError`."""

    def __init__(
        self,
        fresh: Callable[[], TextParallelEnv],
        label: str,
        ansi_factory: Callable[[], TextParallelEnv] | None,
        seed: int,
    ) -> None:
        self._fresh = fresh
        self.label = label
        self.ansi_factory = ansi_factory
        self.seed = seed
        self._references: dict[int, list[Record]] = {}
        # One copy replays episodes for the gibberish, pickle and clone checks: a reset with
        # the reference's seed puts it where a fresh copy would be (the determinism check
        # runs first), and it spares a deep copy of the env per episode.
        self.work = self.fresh()
        self.num_tasks = self.work.num_tasks
        self.num_turns = getattr(self.work, "num_turns", None)

    # ----- plumbing -----------------------------------------------------------

    def fail(self, check: str, message: str) -> EnvCheckError:
        return EnvCheckError(f"check_env({self.label}) failed [{check}]: {message}")

    @contextlib.contextmanager
    def stage(self, check: str, doing: str) -> Iterator[None]:
        """Report an exception raised by the env as a failed check, with what was being done."""
        try:
            yield
        except EnvCheckError:
            raise
        except Exception as exc:
            raise self.fail(check, f"{doing} raised {type(exc).__name__}: {exc}") from exc

    def fresh(self) -> TextParallelEnv:
        env = self._fresh()
        if not isinstance(env, TextParallelEnv):
            raise TypeError(f"check_env({self.label}): building a fresh copy gave a {type(env).__name__}.")
        return env

    def options(self, episode: int) -> dict[str, Any] | None:
        if self.num_tasks and episode % 2 == 0:
            return {"task_index": (episode // 2) % self.num_tasks}
        return None

    def describe(self, episode: int) -> str:
        return f"seed={self.seed + episode}, options={self.options(episode)}"

    def reset(self, env: TextParallelEnv, episode: int, check: str) -> Record:
        with self.stage(check, f"reset({self.describe(episode)})"):
            observations, infos = env.reset(seed=self.seed + episode, options=copy.deepcopy(self.options(episode)))
            state = env.state()
        self.validate(env, check, "reset", list(env.agents), observations, None, None, None, infos, state)
        return copy.deepcopy({"observations": observations, "infos": infos, "state": state})

    def step(
        self, env: TextParallelEnv, actions: dict[AgentID, str], check: str, where: str, show_actions: bool = True
    ) -> Record:
        acting = list(env.agents)
        doing = f"step() at {where}" + (f" with actions {short_repr(actions)}" if show_actions else "")
        with self.stage(check, doing):
            observations, rewards, terminations, truncations, infos = env.step(actions)
            state = env.state()
        self.validate(env, check, where, acting, observations, rewards, terminations, truncations, infos, state)
        return copy.deepcopy(
            {
                "observations": observations,
                "rewards": rewards,
                "terminations": terminations,
                "truncations": truncations,
                "infos": infos,
                "state": state,
            }
        )

    def play(self, env: TextParallelEnv, policy: Policy, check: str, first_turn: int = 0) -> list[Record]:
        """Step `env` with `policy` until every agent is done; one record per step."""
        records = []
        turn = first_turn
        limit = self.num_turns if isinstance(self.num_turns, int) and self.num_turns > 0 else 1_000
        while env.agents:
            if turn >= limit:
                raise self.fail(check, f"agents {env.agents} are still live after num_turns={limit} steps; "
                                "the turn limit must truncate the episode.")
            records.append(self.step(env, policy(turn, list(env.agents)), check, f"turn {turn}"))
            turn += 1
        return records

    def validate(
        self,
        env: TextParallelEnv,
        check: str,
        where: str,
        acting: list[AgentID],
        observations: Any,
        rewards: Any,
        terminations: Any,
        truncations: Any,
        infos: Any,
        state: Any,
    ) -> None:
        """Types and keys of one reset/step output."""
        outputs = {"observations": observations, "infos": infos}
        if rewards is not None:
            outputs.update(rewards=rewards, terminations=terminations, truncations=truncations)
        for name, value in outputs.items():
            if not isinstance(value, dict):
                raise self.fail(check, f"{where}: {name} is a {type(value).__name__}, not a dict.")
            missing = [a for a in acting if a not in value]
            if missing:
                raise self.fail(check, f"{where}: {name} has no entry for live agents {missing}.")
        for agent, obs in observations.items():
            if not isinstance(obs, str):
                raise self.fail(check, f"{where}: observation of {agent} is a {type(obs).__name__}, not a str.")
            space = env.observation_space(agent)
            if not space.contains(obs):
                raise self.fail(check, f"{where}: observation of {agent} ({len(obs)} chars, {short_repr(obs, 60)}) "
                                f"is not inside observation_space {space!r}.")
        for agent, info in infos.items():
            if not isinstance(info, dict):
                raise self.fail(check, f"{where}: infos[{agent!r}] is a {type(info).__name__}, not a dict.")
        if rewards is not None:
            for agent, reward in rewards.items():
                if not isinstance(reward, float) or not math.isfinite(reward):
                    raise self.fail(check, f"{where}: reward of {agent} is {type(reward).__name__} {reward!r}; "
                                    "rewards must be finite Python floats.")
            for name, flags in (("terminations", terminations), ("truncations", truncations)):
                for agent, flag in flags.items():
                    if not isinstance(flag, (bool, np.bool_)):
                        raise self.fail(
                            check, f"{where}: {name}[{agent!r}] is {type(flag).__name__} {flag!r}, not a bool."
                        )
        if not isinstance(state, str):
            raise self.fail(check, f"{where}: state() returned a {type(state).__name__}, not a str.")

    def compare(self, check: str, what: str, expected: list[Record], got: list[Record], offset: int = 0) -> None:
        """Fail at the first step where two runs differ."""
        if len(expected) != len(got):
            raise self.fail(check, f"{what}: the episode lasted {len(got)} steps instead of {len(expected)}.")
        for i, (a, b) in enumerate(zip(expected, got)):
            step = "reset" if i + offset == 0 else f"step {i + offset}"
            for key in a:
                found = first_difference(a[key], b.get(key), key)
                if found:
                    raise self.fail(check, f"{what}: at {step}, {found}")

    def reference(self, episode: int) -> list[Record]:
        """Reset record followed by the scripted episode, on a fresh copy (cached)."""
        if episode not in self._references:
            env = self.fresh()
            first = self.reset(env, episode, "determinism")
            self._references[episode] = [first] + self.play(env, scripted, "determinism")
        return self._references[episode]

    # ----- the checks ---------------------------------------------------------

    def check_metadata_and_spaces(self) -> None:
        check = "metadata"
        env = self.work
        metadata = env.metadata
        if not isinstance(metadata, dict):
            raise self.fail(check, f"metadata is a {type(metadata).__name__}, not a dict.")
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            raise self.fail(check, f"metadata['name'] must be a non-empty str like 'echo-v0', got {name!r}.")
        structure = metadata.get("reward_structure")
        if structure not in REWARD_STRUCTURES:
            raise self.fail(
                check, f"metadata['reward_structure'] must be one of {REWARD_STRUCTURES}, got {structure!r}."
            )
        if "num_tasks" not in metadata:
            raise self.fail(check, "metadata has no 'num_tasks'; set it to the task-set size, or None when procedural.")
        for where, n in (("metadata['num_tasks']", metadata["num_tasks"]), ("env.num_tasks", env.num_tasks)):
            if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1):
                raise self.fail(check, f"{where} must be a positive int or None, got {n!r}.")

        check = "spaces"
        agents = env.possible_agents
        if not agents or not all(isinstance(a, str) for a in agents):
            raise self.fail(check, f"possible_agents must be a non-empty list of str ids, got {agents!r}.")
        for agent in agents:
            for kind in ("observation_space", "action_space"):
                with self.stage(check, f"{kind}({agent!r})"):
                    first, second = getattr(env, kind)(agent), getattr(env, kind)(agent)
                if first is not second:
                    raise self.fail(check, f"{kind}({agent!r}) returned a different object on each call; "
                                    "build the space once in __init__ and return that object.")

    def check_determinism(self, episode: int) -> None:
        check = "determinism"
        expected = self.reference(episode)
        env = self.fresh()
        first = [self.reset(env, episode, check)] + self.play(env, scripted, check)
        self.compare(check, f"two fresh copies reset with {self.describe(episode)} and given the same actions "
                     "differ (randomness must come from self.np_random, seeded by reset)", expected, first)
        again = [self.reset(env, episode, check)] + self.play(env, scripted, check)
        self.compare(check, f"a second reset of the same env with {self.describe(episode)} differs from the first "
                     "(state leaks across episodes, or the seed is ignored)", expected, again)

    def check_gibberish(self) -> None:
        check = "gibberish"
        env = self.work
        for kind, text in GIBBERISH:
            self.reset(env, 0, check)
            turn = 0
            while env.agents:
                where = f"turn {turn} with {kind} action {short_repr(text, 60)}"
                self.step(env, {a: text for a in env.agents}, check, where, show_actions=False)
                turn += 1
                if isinstance(self.num_turns, int) and turn > self.num_turns:
                    raise self.fail(check, f"agents are still live after num_turns={self.num_turns} steps.")
        self.reset(env, 1, check)
        self.play(env, gibberish, check)  # each agent a different kind of gibberish

    def check_parallel_api(self) -> None:
        check = "parallel_api_test"
        env = self.fresh()
        num_cycles = self.num_turns + 1 if isinstance(self.num_turns, int) else 100
        with self.stage(check, "pettingzoo.test.parallel_api_test"), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with contextlib.redirect_stdout(io.StringIO()):
                parallel_api_test(env, num_cycles=num_cycles)
        for w in caught:
            if str(w.filename).endswith("parallel_test.py"):
                raise self.fail(check, f"parallel_api_test warned: {w.message}")

    def check_pickle(self) -> None:
        def roundtrip(env: TextParallelEnv) -> TextParallelEnv:
            with self.stage("pickle", "pickle.loads(pickle.dumps(env))"):
                return pickle.loads(pickle.dumps(env))

        self._check_copies("pickle", "pickle.loads(pickle.dumps(env))", roundtrip)

    def check_clone(self) -> None:
        def clone(env: TextParallelEnv) -> TextParallelEnv:
            with self.stage("clone", "env.clone()"):
                twin = env.clone()
            if twin is env:
                raise self.fail("clone", "clone() returned the env itself; it must return an independent copy.")
            return twin

        self._check_copies("clone", "env.clone()", clone)

    def _check_copies(self, check: str, how: str, copy_env: Callable[[TextParallelEnv], TextParallelEnv]) -> None:
        """A copy taken after `k` steps continues like the reference; stepping it leaves the original alone."""
        expected = self.reference(0)
        num_steps = len(expected) - 1
        for k in (0, 1):
            if k >= num_steps:
                break
            env = self.work
            self.reset(env, 0, check)
            for turn in range(k):
                self.step(env, scripted(turn, list(env.agents)), check, f"turn {turn}")
            point = "after reset" if k == 0 else f"after {k} step"
            other = copy_env(env)
            before = (list(env.agents), env.state())
            self.play(other, gibberish, check, first_turn=k)
            if (list(env.agents), env.state()) != before:
                raise self.fail(check, f"stepping the result of {how} taken {point} changed the original env's "
                                "agents or state(); the copy must not share episode state.")
            twin = copy_env(env)
            self.compare(check, f"the result of {how} taken {point} continues differently from an "
                         "uninterrupted episode", expected[k + 1:], self.play(twin, scripted, check, k), offset=k + 1)
            self.compare(check, f"the original env continues differently after {how} was taken {point} and "
                         "stepped", expected[k + 1:], self.play(env, scripted, check, k), offset=k + 1)
        # A copy of a finished episode starts the next episode like the original.
        env = self.work
        self.reset(env, 0, check)
        self.play(env, scripted, check)
        twin = copy_env(env)
        if twin.state() != env.state():
            raise self.fail(check, f"{how} of a finished episode has a different state().")
        replay = [self.reset(twin, 0, check)] + self.play(twin, scripted, check)
        self.compare(check, f"the result of {how} taken at the end of an episode plays the next episode "
                     "differently", expected, replay)

    def check_render(self) -> None:
        check = "render"
        env = self.fresh()
        if "ansi" not in (env.metadata or {}).get("render_modes", ()):
            return  # the env does not offer text rendering
        if self.ansi_factory is not None:
            with self.stage(check, "building the env with render_mode='ansi'"):
                env = self.ansi_factory()
        else:
            env.render_mode = "ansi"
        self.reset(env, 0, check)
        for where in ("after reset", "after a step"):
            with self.stage(check, f"render() {where}"):
                text = env.render()
            if not isinstance(text, str):
                raise self.fail(check, f"render() {where} with render_mode='ansi' returned "
                                f"{type(text).__name__}, not a str.")
            if where == "after reset":
                self.step(env, scripted(0, list(env.agents)), check, "turn 0")
