"""Built-in tasks, registered on import. Each module's docstring is its documentation."""

from comlrl_env.registry import register
from comlrl_env.tasks.guess_number import GuessNumber
from comlrl_env.tasks.length_ratio import LengthRatio
from comlrl_env.tasks.split_pie import SplitPie

__all__ = ["GuessNumber", "LengthRatio", "SplitPie"]

register("coop/LengthRatio-v1", entry_point=LengthRatio)
register("coop/GuessNumber-v1", entry_point=GuessNumber)
register("general/SplitPie-v1", entry_point=SplitPie)

from comlrl_env.tasks.code import HumanEvalCoop, HumanEvalCoopMultiTurn  # noqa: E402
from comlrl_env.tasks.smoke import Arithmetic, FormatAgreement  # noqa: E402
from comlrl_env.tasks.writing import DocSummary, DocSummaryGeneralSum  # noqa: E402

__all__ += [
    "Arithmetic",
    "DocSummary",
    "DocSummaryGeneralSum",
    "FormatAgreement",
    "HumanEvalCoop",
    "HumanEvalCoopMultiTurn",
]

register("smoke/FormatAgreement-v1", entry_point=FormatAgreement)
register("smoke/Arithmetic-v1", entry_point=Arithmetic)
register("code/HumanEvalCoop-v1", entry_point=HumanEvalCoop)
register("code/HumanEvalCoopMultiTurn-v2", entry_point=HumanEvalCoopMultiTurn)
register("writing/DocSummary-v1", entry_point=DocSummary)
register("writing/DocSummaryGeneralSum-v1", entry_point=DocSummaryGeneralSum)
