"""Built-in tasks, registered on import. Each module's docstring is its documentation."""

from comlrl_env.registry import register
from comlrl_env.tasks.guess_number import GuessNumber
from comlrl_env.tasks.length_ratio import LengthRatio
from comlrl_env.tasks.split_pie import SplitPie

__all__ = ["GuessNumber", "LengthRatio", "SplitPie"]

register("coop/LengthRatio-v0", entry_point=LengthRatio)
register("coop/GuessNumber-v0", entry_point=GuessNumber)
register("general/SplitPie-v0", entry_point=SplitPie)
