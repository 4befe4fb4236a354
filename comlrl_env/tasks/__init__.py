"""Built-in tasks, registered on import. Each module's docstring is its documentation."""

from comlrl_env.registry import register, register_namespace
from comlrl_env.tasks.guess_number import GuessNumber
from comlrl_env.tasks.length_ratio import LengthRatio
from comlrl_env.tasks.split_pie import SplitPie

__all__ = ["GuessNumber", "LengthRatio", "SplitPie"]

register("coop/LengthRatio-v1", entry_point=LengthRatio)
register("coop/GuessNumber-v1", entry_point=GuessNumber)
register("general/SplitPie-v1", entry_point=SplitPie)

from comlrl_env.tasks.code import HumanEvalCoop, HumanEvalCoopMultiTurn  # noqa: E402
from comlrl_env.tasks.private_info import GridPick, Picnic, SecretPair, SharedPick  # noqa: E402
from comlrl_env.tasks.smoke import Arithmetic, FormatAgreement  # noqa: E402
from comlrl_env.tasks.writing import DocSummary, DocSummaryGeneralSum  # noqa: E402

__all__ += [
    "Arithmetic",
    "DocSummary",
    "DocSummaryGeneralSum",
    "FormatAgreement",
    "GridPick",
    "HumanEvalCoop",
    "HumanEvalCoopMultiTurn",
    "Picnic",
    "SecretPair",
    "SharedPick",
]

register("smoke/FormatAgreement-v1", entry_point=FormatAgreement)
register("smoke/Arithmetic-v1", entry_point=Arithmetic)
register("code/HumanEvalCoop-v2", entry_point=HumanEvalCoop)
register("code/HumanEvalCoopMultiTurn-v3", entry_point=HumanEvalCoopMultiTurn)
register("writing/DocSummary-v1", entry_point=DocSummary)
register("writing/DocSummaryGeneralSum-v1", entry_point=DocSummaryGeneralSum)
register("coop/SecretPair-v1", entry_point=SecretPair)  # view="team" | "full" | "own"
register("coop/Picnic-v1", entry_point=Picnic)
register("coop/SharedPick-v1", entry_point=SharedPick)
register("coop/GridPick-v1", entry_point=GridPick)

# reasoning-gym's datasets as team tasks (comlrl_env/qa/reasoning_gym.py; needs `pip install
# 'comlrl-env[reasoning]'`, imported on first use): any `reasoning_gym/<dataset>-v0` resolves on demand.
register_namespace("reasoning_gym", "comlrl_env.qa.reasoning_gym:dataset_spec")
register("qa/Arithmetic-v0", entry_point="comlrl_env.qa.protocols:arithmetic_team")
# The `reasoning` suite: held-out splits of 12 reasoning-gym datasets.
from comlrl_env.qa.reasoning_gym import REASONING_SUITE  # noqa: E402

for _dataset in REASONING_SUITE:
    register(f"reasoning/{_dataset}-v0", entry_point="comlrl_env.qa.reasoning_gym:reasoning_gym_env",
             dataset=_dataset, split="held_out", size=200)

# OpenSpiel games (comlrl_env/games/openspiel.py; needs `pip install 'comlrl-env[games]'`, imported on first use).
# Any `openspiel/<game>-v0` resolves on demand; the `games` suite's ids are registered with small defaults.
register_namespace("openspiel", "comlrl_env.games.openspiel:game_spec")
register_namespace("textarena", "comlrl_env.games.textarena:game_spec")  # `pip install 'comlrl-env[textarena]'`
OPENSPIEL_GAMES: dict[str, dict[str, object]] = {
    "tiny_hanabi": {},
    "hanabi": {"players": 2, "colors": 2, "ranks": 2, "hand_size": 2, "max_information_tokens": 3,
               "max_life_tokens": 2},
    "coop_box_pushing": {"horizon": 10},
    "bargaining": {},
    "negotiation": {"num_items": 2, "enable_utterances": False},
    "kuhn_poker": {},
    "leduc_poker": {},
    "tic_tac_toe": {},
    "liars_dice": {"numdice": 1, "dice_sides": 4},
    "goofspiel": {"num_cards": 4, "imp_info": True},
}
for _game, _params in OPENSPIEL_GAMES.items():
    register(f"openspiel/{_game}-v0", entry_point="comlrl_env.games.openspiel:OpenSpielEnv", game=_game, **_params)
