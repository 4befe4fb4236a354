"""Named lists of env ids, for running one method over a family of tasks.

    from comlrl_env import make
    from comlrl_env.suites import suites

    envs = [make(env_id) for env_id in suites["smoke"]]

- `smoke`: cheap procedural tasks (a regex per agent, no data, no sandbox) on
  which a tiny model improves within CPU minutes; for checking that a learner learns.
- `code`: HumanEval with a helper agent and a main agent, single- and
  multi-turn (needs `pip install 'comlrl-env[code]'`; runs code in a sandbox).
- `writing`: summarize and expand Python standard-library module docs, with a
  joint reward and with per-agent (general-sum) rewards.
- `basic`: the first built-in tasks (length ratio, number guessing with
  feedback, the pie-splitting game): one of each reward structure and turn style.
- `private_info`: tasks a team solves only by sharing what each agent knows (a message turn, then
  an answer turn); each also has one-agent views (`view="full"`, `view="own"`). See `comlrl_env.tasks.private_info`.
- `reasoning`: held-out splits of 12 reasoning-gym datasets (arithmetic, algebra, logic, graphs,
  puzzles; needs `pip install 'comlrl-env[reasoning]'`), each `reasoning/<dataset>-v0`: 200 items
  that no training split `reasoning_gym/<dataset>-v0` holds. See `comlrl_env.qa.reasoning_gym`.
- `games`: OpenSpiel games in small configurations (needs `pip install
  'comlrl-env[games]'`): cooperative (tiny_hanabi, hanabi, coop_box_pushing),
  general-sum negotiation (bargaining, negotiation) and competitive (kuhn_poker,
  leduc_poker, tic_tac_toe, liars_dice, goofspiel); sequential and
  simultaneous-move, with and without chance. See `comlrl_env.games.openspiel`.
- `textarena`: seven two-player TextArena games (needs `pip install 'comlrl-env[textarena]'`; ids
  resolved by the `textarena` namespace): cards with hidden information (KuhnPoker), boards
  (TicTacToe, ConnectFour, Othello), a repeated social dilemma with talk (IteratedPrisonersDilemma),
  trading by talk and offers (SimpleNegotiation) and deception in conversation (TruthAndDeception).
  Chosen because the random bot (the league's anchor) plays legally in them, so its games end by the
  rules rather than by its forfeits: its share of valid moves is 1.0 in six and 0.91 in ConnectFour
  (`comlrl_env.games.textarena_bots.LEGAL_SHARES`), where Nim's 0.38 or ColonelBlotto's 0.0 would
  rate mostly the bot's invalid answers; and because they are cheap: the env spends under 1 ms per
  move in each (reset, step and every seat's prompt; benchmarks/textarena_cost.py). See
  `comlrl_env.games.textarena`.
"""

from __future__ import annotations

from comlrl_env.qa.reasoning_gym import REASONING_SUITE

__all__ = ["suites"]

suites: dict[str, list[str]] = {
    "smoke": [
        "smoke/FormatAgreement-v1",
        "smoke/Arithmetic-v1",
        "coop/LengthRatio-v1",
        "coop/GuessNumber-v1",
    ],
    "code": ["code/HumanEvalCoop-v2", "code/HumanEvalCoopMultiTurn-v3"],
    "writing": ["writing/DocSummary-v1", "writing/DocSummaryGeneralSum-v1"],
    "basic": ["coop/LengthRatio-v1", "coop/GuessNumber-v1", "general/SplitPie-v1"],
    "private_info": ["coop/SecretPair-v1", "coop/Picnic-v1", "coop/SharedPick-v1", "coop/GridPick-v1"],
    "reasoning": [f"reasoning/{name}-v0" for name in REASONING_SUITE],
    "games": [
        "openspiel/tiny_hanabi-v0",
        "openspiel/hanabi-v0",
        "openspiel/coop_box_pushing-v0",
        "openspiel/bargaining-v0",
        "openspiel/negotiation-v0",
        "openspiel/kuhn_poker-v0",
        "openspiel/leduc_poker-v0",
        "openspiel/tic_tac_toe-v0",
        "openspiel/liars_dice-v0",
        "openspiel/goofspiel-v0",
    ],
    "textarena": [f"textarena/{game}-v0" for game in ("KuhnPoker", "TicTacToe", "ConnectFour", "Othello",
                                                      "IteratedPrisonersDilemma", "SimpleNegotiation",
                                                      "TruthAndDeception")],
}
"""Suite name -> its env ids (registered, or resolved by a namespace such as `textarena/`), e.g.
`[make(i) for i in suites["smoke"]]`; the module docstring describes each suite."""
