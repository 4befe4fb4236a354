"""Curricula: a task that gets harder once the team does well at it.

An env offers levels through three members, the interface a user's own env implements too:

    curriculum_levels: int | None    # the number of levels (0 .. curriculum_levels - 1); None: none
    curriculum_level: int | None     # the current one (None: not on the curriculum yet)
    set_curriculum_level(level)      # later episodes are made at `level`

With `curriculum_threshold` set, the learner starts the env at level 0 (unless it was made at another) and,
after each rollout, appends the rollout's mean training reward (`train/reward_mean`, averaged over ranks) to a
window of the last `curriculum_window` rollouts. When the window is full and its mean is at least the
threshold, the env moves up one level and the window empties, so each level is judged on its own rollouts.
`train/curriculum_level` is logged every rollout; the level and the window are saved in checkpoints, so a
resumed run continues at the same level with the same window.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Curriculum", "check_levels"]


def check_levels(env: Any) -> None:
    """ValueError unless `env` offers curriculum levels (see the module docstring), naming the fix."""
    levels = getattr(env, "curriculum_levels", None)
    if not callable(getattr(env, "set_curriculum_level", None)) or not isinstance(levels, int) or levels < 2:
        name = env.metadata.get("name", type(env).__name__) if hasattr(env, "metadata") else type(env).__name__
        raise ValueError(f"curriculum_threshold is set but the env {name!r} has no curriculum levels "
                         f"(curriculum_levels={levels!r}); set curriculum_threshold=None, or give the env "
                         "curriculum_levels, curriculum_level and set_curriculum_level(level) "
                         "(learners.loop.curriculum).")


class Curriculum:
    """The rolling-window rule that moves an env up its levels (see the module docstring).

    Args:
        env: The training env (it offers levels; `check_levels`).
        threshold: The mean training reward over the window that moves the env up a level.
        window: Rollouts in the window.
    """

    def __init__(self, env: Any, threshold: float, window: int) -> None:
        check_levels(env)
        self.env, self.threshold, self.window = env, threshold, window
        self.recent: list[float] = []
        if env.curriculum_level is None:
            env.set_curriculum_level(0)

    def after_rollout(self, reward: float) -> int:
        """Add one rollout's mean training reward; move up a level when the full window's mean reaches the
        threshold; return the level the next rollout plays at."""
        self.recent = [*self.recent, float(reward)][-self.window:]
        level = self.env.curriculum_level
        full = len(self.recent) == self.window
        if full and sum(self.recent) / self.window >= self.threshold and level + 1 < self.env.curriculum_levels:
            level += 1
            self.env.set_curriculum_level(level)
            self.recent = []
        return level

    def state_dict(self) -> dict[str, Any]:
        return {"level": self.env.curriculum_level, "recent": list(self.recent)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.set_curriculum_level(int(state["level"]))
        self.recent = [float(r) for r in state["recent"]]
