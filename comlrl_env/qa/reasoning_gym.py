"""reasoning-gym's datasets as team tasks: `make("reasoning_gym/<dataset>-v0", ...)`.

Any dataset in reasoning-gym's own registry resolves (needs `pip install "comlrl-env[reasoning]"`, which pins
reasoning-gym 0.1.25), except those in `REFUSED`, which say why. Each is a `TeamQA` (`comlrl_env.qa.protocols`)
over a `ReasoningGymQA` source:

    env = make("reasoning_gym/basic_arithmetic-v0", protocol="proposer_finalizer", size=500, seed=0,
               max_terms=3)   # the dataset's own config fields pass through

- **Items** are the dataset's, made with `create_dataset(name, seed=seed, size=size, **config)` and kept as
  Python objects: `env.task` is `{"question", "answer", "metadata"}` as reasoning-gym made it (a JSON round
  trip would change most of them, and can break their own scorers).
- **Splits.** Most datasets make item i from `Random(seed + i)`, so seeds s and s + 1 share all items but one:
  another seed is not a held-out set. `split="held_out"` makes the items from seed `seed + HELD_OUT_SEED`
  (10**9), disjoint from every training split of fewer than 10**9 items whose seed is below that. The
  `reasoning` suite's envs, `reasoning/<dataset>-v0`, are held-out splits.
- **Levels.** reasoning-gym's curricula (every offered dataset but gsm_symbolic) become the env's
  `curriculum_levels`: `set_curriculum_level(k)` (or `make(..., curriculum_level=k)`) remakes the items at
  the curriculum's global level k, every difficulty attribute at its k-th setting (or its last), over the
  same seed and indices; a config field the curriculum sets is overridden. With `curriculum_threshold`,
  learners move up the levels as the team improves (`learners.loop.curriculum`).
- **Answers** are extracted with reasoning-gym's convention (`reasoning_gym.utils.extract_answer`: the last
  `<answer>...</answer>`), or with `answer_style="plain"` the whole reply is the answer (the prompt asks
  for the answer only: models of about 100M parameters never write the tags), and scored by the dataset's `score_answer`, through `VerifiedQA.reward`: a scorer
  that raises costs one flagged answer, and the floor some scorers pay any text (0.01 to 0.25) is taken
  off, so doing nothing earns 0.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from comlrl_env.qa.protocols import TeamQA
from comlrl_env.qa.sources import PLAIN_FORMAT, VerifiedQA, plain_answer
from comlrl_env.registry import ID_PATTERN, EnvNotFound, EnvSpec

__all__ = ["HELD_OUT_SEED", "INSTALL", "REASONING_SUITE", "REFUSED", "ReasoningGymQA", "dataset_spec",
           "reasoning_gym_env"]

INSTALL = 'pip install "comlrl-env[reasoning]"'
"""How to install reasoning-gym for the `reasoning_gym/` ids."""

REFUSED = {
    "game_of_life_halting": "its scorer pays 1.0 for any non-empty answer (it reads the text 'False' as true)",
    "list_functions": "its items differ between two runs with the same seed, so results would not repeat",
    "composite": "it mixes other datasets by a config of them; make those datasets instead",
    "acre": "its scorer pays partial credit to random words in answer tags (0.09 measured), which a team would "
            "learn to write",
    "spell_backward": "its scorer pays partial credit for letters in common, so random words in answer tags "
                      "earn up to 0.17, which a team would learn to write",
    "figlet_font": "its scorer pays partial credit for letters in common, so random words in answer tags earn "
                   "up to 0.2, which a team would learn to write",
    **{name: "its scorer runs the answer through Python's eval, so model text would run as code in the trainer"
       for name in ("binary_matrix", "n_queens", "spiral_matrix", "string_insertion")},
    **{name: "its scorer parses the answer with sympy's parse_expr, which runs it through Python's eval (model text "
             "would run as code in the trainer, and a huge number in it takes minutes)"
       for name in ("countdown", "puzzle24", "polynomial_multiplication", "simple_integration",
                    "intermediate_integration")},
}
"""reasoning-gym datasets that are not offered, and why."""

HELD_OUT_SEED = 10**9
"""`split="held_out"` makes its items from seed `seed + HELD_OUT_SEED`."""

REASONING_SUITE = ("basic_arithmetic", "chain_sum", "gcd", "simple_equations", "polynomial_equations",
                   "knights_knaves", "syllogism", "aiw", "shortest_path", "course_schedule", "mini_sudoku", "maze")
"""The `reasoning` suite's datasets: arithmetic, algebra, logic, graphs and puzzles, each cheap to score."""

_ENV_KEYS = ("protocol", "num_agents", "rounds", "reward", "max_observation_length", "max_action_length",
             "render_mode")


class ReasoningGymQA(VerifiedQA):
    """One reasoning-gym dataset as a `VerifiedQA` source; items are made on first use and kept.

    Args:
        dataset: The reasoning-gym dataset name, e.g. "basic_arithmetic".
        size: Number of items.
        seed: The dataset's seed (item i depends on `(seed, i)` only).
        split: "train" (the items of `seed`) or "held_out" (those of `seed + HELD_OUT_SEED`).
        curriculum_level: Start at this level of the dataset's curriculum; None: the dataset's own defaults.
        answer_style: "tags" (reasoning, then the answer in `<answer>` tags: reasoning-gym's convention) or
            "plain" (the whole reply is the answer).
        **config: The dataset's config fields (its `*Config` dataclass), e.g. `max_terms=3`.
    """

    def __init__(self, dataset: str, size: int = 500, seed: int = 0, split: str = "train",
                 curriculum_level: int | None = None, answer_style: str = "tags", **config: Any) -> None:
        check_dataset_name(dataset)
        from reasoning_gym.utils import extract_answer

        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int (the number of items), got {size!r}.")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < HELD_OUT_SEED:
            raise ValueError(f"seed must be an int in [0, 10**9) (held-out items use seed + 10**9), got {seed!r}.")
        if split not in ("train", "held_out"):
            raise ValueError(f"split must be 'train' or 'held_out', got {split!r}.")
        if answer_style not in ("tags", "plain"):
            raise ValueError(f"answer_style must be 'tags' or 'plain', got {answer_style!r}.")
        self.made_from, self.size = seed + (HELD_OUT_SEED if split == "held_out" else 0), size
        self.dataset = self._make(dataset, config)
        items = _Kept(self.dataset)
        # 5 datasets carry no answer and score from the metadata: they have no reference answer
        style = ({"answer_format": PLAIN_FORMAT, "extract": plain_answer} if answer_style == "plain"
                 else {"extract": extract_answer})
        super().__init__(items, score=self.dataset.score_answer, **style,
                         answer="answer" if items[0]["answer"] is not None else None, name=f"reasoning_gym/{dataset}")
        self.recipe = (dataset, size, seed, split, answer_style, dict(config))
        self.level: int | None = None
        self.levels = _curriculum_levels(dataset)
        if curriculum_level is not None:
            self.set_level(curriculum_level)

    def set_level(self, level: int) -> None:
        """Remake the items at the curriculum's global `level` (the same seed and indices)."""
        if self.levels is None:
            raise ValueError(f"{self.name} has no curriculum in reasoning-gym; train it without "
                             "curriculum_threshold or curriculum_level.")
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level < self.levels:
            raise ValueError(f"curriculum_level must be an int in 0..{self.levels - 1} for {self.name}, "
                             f"got {level!r}.")
        from reasoning_gym.factory import create_curriculum

        curriculum = create_curriculum(self.recipe[0])
        curriculum.set_global_level(level)
        fields = {k: v for k, v in dataclasses.asdict(curriculum.generate_configuration()).items()
                  if k not in ("seed", "size")}
        self.dataset = self._make(self.recipe[0], {**self.recipe[5], **fields})
        self.items, self.score, self._floors, self.level = _Kept(self.dataset), self.dataset.score_answer, {}, level

    def _make(self, dataset: str, config: dict[str, Any]) -> Any:
        from reasoning_gym.factory import create_dataset

        try:
            return create_dataset(dataset, seed=self.made_from, size=self.size, **config)
        except TypeError as e:  # an unknown config field
            raise TypeError(f"reasoning_gym/{dataset}: {e}") from None
        except AssertionError as e:  # the config's own validate(): values that do not fit together
            raise ValueError(f"reasoning_gym/{dataset}: its config {config!r} is invalid: {e}; see the "
                             f"dataset's config class for the allowed values.") from None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its recipe and level: some datasets hold lambdas, and item i depends on `(seed, i)` only."""
        return _remade, (*self.recipe, self.level)


def _remade(dataset: str, size: int, seed: int, split: str, answer_style: str, config: dict[str, Any],
            level: int | None) -> ReasoningGymQA:
    return ReasoningGymQA(dataset, size=size, seed=seed, split=split, curriculum_level=level,
                          answer_style=answer_style, **config)


def _curriculum_levels(dataset: str) -> int | None:
    """The number of global levels of the dataset's curriculum (its longest attribute's), None without one."""
    from reasoning_gym.factory import create_curriculum

    try:
        curriculum = create_curriculum(dataset)
    except (KeyError, ValueError):
        return None
    return max(len(attr.levels) for attr in curriculum.attributes.values()) if curriculum.attributes else None


class _Kept:
    """A dataset's items, each made on first use and kept (making one can take a second)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset, self.made = dataset, {}

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        if index not in self.made:
            self.made[index] = self.dataset[index]
        return self.made[index]


def check_dataset_name(name: str) -> None:
    """EnvNotFound for a name reasoning-gym does not have (naming close ones) or one that is refused (with
    why); ImportError with the install command when reasoning-gym is missing."""
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise ImportError(f"the reasoning_gym/ envs need reasoning-gym: {INSTALL}") from None
    if name in REFUSED:
        raise EnvNotFound(f"reasoning_gym/{name} is not offered: {REFUSED[name]}.")
    if name not in DATASETS:
        close = difflib.get_close_matches(name, [n for n in DATASETS if n not in REFUSED], n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise EnvNotFound(f"reasoning-gym has no dataset {name!r}.{hint}")


def reasoning_gym_env(dataset: str, size: int = 500, seed: int = 0, split: str = "train", **kwargs: Any) -> TeamQA:
    """A `TeamQA` over reasoning-gym's `dataset`: `protocol`, `num_agents`, `rounds`, `reward` and the length
    limits go to `TeamQA`, every other keyword to the dataset's config."""
    env_kwargs = {k: kwargs.pop(k) for k in _ENV_KEYS if k in kwargs}
    return TeamQA(ReasoningGymQA(dataset, size=size, seed=seed, split=split, **kwargs), **env_kwargs)


def dataset_spec(id: str) -> EnvSpec:
    """The spec of a `reasoning_gym/<dataset>-v0` id (the registry's resolver for the namespace)."""
    match = ID_PATTERN.match(id)
    if match is None or match["namespace"] != "reasoning_gym":
        raise EnvNotFound(f"{id!r} is not a reasoning-gym id; they look like 'reasoning_gym/basic_arithmetic-v0'.")
    if match["version"] != "0":
        raise EnvNotFound(f"reasoning-gym ids have version 0 only, got {id!r}; use "
                          f"'reasoning_gym/{match['name']}-v0'.")
    check_dataset_name(match["name"])
    return EnvSpec(id, reasoning_gym_env, {"dataset": match["name"]})
