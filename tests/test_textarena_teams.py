"""TextArena team games with mixed teams: the game pays a faction, a forfeit costs the whole faction, MAGRPO trains
one Taboo faction while a frozen model and the random bot hold the other (and the guide's block that sets it up
runs as written), and one model plays both seats of TicTacToe (self-play) as it does in OpenSpiel games."""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any, Sequence

import pytest

pytest.importorskip("textarena")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from comlrl_env import make  # noqa: E402
from comlrl_env.base import AgentID, TextParallelEnv  # noqa: E402
from comlrl_env.games.textarena import TextArenaBot, TextArenaEnv  # noqa: E402
from comlrl_env.policies import FixedPolicy  # noqa: E402
from learners import MAGRPO, Frozen, MAGRPOConfig  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHORT_TABOO = {"num_players": 4, "max_rounds": 2, "max_attempts_per_player": 1}
"""Taboo in 4 moves: team 0's clue giver and guesser, then team 1's (one attempt each, one round per team)."""


class OracleGuesser(FixedPolicy):
    """A scripted Taboo guesser that reads the secret word from the game and guesses it: its team scores."""

    def act(self, envs: Sequence[TextParallelEnv], agent: AgentID, num_samples: int = 1) -> list[str]:
        return [f"[{env.game.state.game_state['word_to_guess']}]" if agent in env.to_move() else ""
                for env in envs for _ in range(num_samples)]


def play(env: TextArenaEnv, seed: int, policies: dict[AgentID, Any]) -> tuple[dict[AgentID, float], dict]:
    """One episode with `policies[agent]` (a FixedPolicy, or a str it always answers): returns and last infos."""
    env.reset(seed=seed)
    returns, infos = dict.fromkeys(env.possible_agents, 0.0), {}
    while env.agents:
        movers = [a for a in policies if a in env.to_move()]
        actions = {a: policies[a] if isinstance(policies[a], str) else policies[a].act([env], a)[0] for a in movers}
        _, rewards, _, _, infos = env.step(actions)
        for agent, reward in rewards.items():
            returns[agent] += reward
    return returns, infos


# ----- what the game and a forfeit pay a faction ----------------------------------------------------------


def test_the_game_pays_a_faction_and_a_forfeit_costs_the_whole_faction():
    env = make("textarena/Taboo-v0", **SHORT_TABOO)
    env.reset(seed=0)
    team_0, team_1 = env.teams
    assert (team_0, team_1) == (["agent_0", "agent_1"], ["agent_2", "agent_3"])
    bots = {a: TextArenaBot(seed=i) for i, a in enumerate(env.possible_agents)}
    for seed in range(3):
        # team 1's guesser knows the word: the game pays team 1 a win and team 0 a loss, teammates alike
        returns, _ = play(env, seed, {**bots, "agent_3": OracleGuesser()})
        assert returns == {"agent_0": -1.0, "agent_1": -1.0, "agent_2": 1.0, "agent_3": 1.0}
        # team 0's guesser answers nothing: its whole team loses, the offender alone is marked
        returns, infos = play(env, seed, {**bots, "agent_1": ""})
        assert returns == {"agent_0": -1.0, "agent_1": -1.0, "agent_2": 1.0, "agent_3": 1.0}
        assert [a for a in env.possible_agents if infos[a].get("forfeit")] == ["agent_1"]
    assert "your team's return becomes -1" in env.reset(seed=0)[0]["agent_0"]
    mafia = make("textarena/SecretMafia-v0", num_players=6)
    for seed in range(3):
        mafia.reset(seed=seed)
        first = mafia.to_move()[0]
        losing = next(team for team in mafia.teams if first in team)
        returns, _ = play(mafia, seed, {first: ""})
        assert returns == {a: -1.0 if a in losing else 1.0 for a in mafia.possible_agents}, (seed, mafia.teams)
    two = make("textarena/TicTacToe-v0")  # one seat per team: the two-player rule, unchanged
    assert play(two, 0, {"agent_0": ""})[0] == {"agent_0": -1.0, "agent_1": 1.0}
    assert "your return becomes -1" in two.reset(seed=0)[0]["agent_0"]


# ----- MAGRPO on one faction --------------------------------------------------------------------------


def bracket_bias(tokenizer: Any, pairs: Sequence[str], bias: float) -> list[list]:
    """`generate`'s `sequence_bias` (its JSON form): `bias` on each token sequence of `pairs`."""
    return [[tokenizer(text, add_special_tokens=False)["input_ids"], bias] for text in pairs]


def config(**changes: Any) -> MAGRPOConfig:
    fields = dict(num_train_epochs=1, episodes_per_epoch=4, rollout_buffer_size=4, num_generations=4,
                  rollout_mode="parallel", max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=None,
                  agent_learning_rate=1e-3, gradient_accumulation_steps=4, eval_interval=0, verbose=False, seed=0)
    return MAGRPOConfig(**{**fields, **changes})


def test_magrpo_trains_one_taboo_faction_against_a_frozen_model_and_the_bot(tiny_dir, tiny_dir_b, tmp_path):
    """Team 0 trains (two tiny models); team 1 is a frozen model (clue giver) and the random bot (guesser).

    A random tiny model almost never writes a bracketed guess (1 episode of 64 without help), so nearly every
    episode forfeits at team 0's guesser, every return is -1 and the advantages are 0; a bias of 8 toward `[` and
    `]` makes about half the guesses well formed (36 episodes of 64), and those episodes end in a draw (0)."""
    env = make("textarena/Taboo-v0", max_observation_length=2048, **SHORT_TABOO)
    env.reset(seed=0)
    faction, others = env.teams
    frozen, bot = Frozen(tiny_dir_b), TextArenaBot("random", seed=0)
    fixed = dict(zip(others, (frozen, bot)))
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    learner = MAGRPO(env=env, agents=[fixed.get(a, tiny_dir) for a in env.possible_agents],
                     args=config(generation_kwargs={"sequence_bias": bracket_bias(tok, "[]", 8.0)}))
    assert [learner.seat_name(a) for a in range(learner.num_agents)] == faction and learner.num_seats == 4
    before = [[p.detach().clone() for p in model.parameters()] for model in learner.agents]
    learner.learn()
    rollout = learner.last_rollout
    # the faction's two seats are paid alike on every row: -1 (a forfeit or a loss) or 0 (a draw), both seen
    assert torch.equal(rollout.returns[0], rollout.returns[1])
    assert set(rollout.returns[0].tolist()) == {-1.0, 0.0}
    for start, model in zip(before, learner.agents):  # each trained seat learns from the faction's outcome
        assert any(not torch.equal(b, p) for b, p in zip(start, model.parameters()))
    reference = AutoModelForCausalLM.from_pretrained(tiny_dir_b).state_dict()
    assert all(torch.equal(reference[k], v) for k, v in frozen.engine.agents[0].state_dict().items())
    assert frozen.describe()["weights_match_source"] is True and bot.describe()["kind"] == "random"
    learner.save_model(str(tmp_path / "out"))
    manifest = json.loads((tmp_path / "out" / "comlrl_env.json").read_text())
    assert manifest["trained_seats"] == faction and sorted(manifest["fixed_seats"]) == others
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [*faction, "comlrl_env.json"]


def test_the_guide_block_freezes_a_faction_as_written(tiny_dir, tiny_dir_b):
    text = (ROOT / "docs" / "guide" / "games.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"^<!-- run by tests/test_textarena_teams\.py[^\n]*-->\n```python\n(.*?)^```", text,
                          re.M | re.S)
    namespace = {"model_dir": tiny_dir, "other_dir": tiny_dir_b}
    exec(compile(block, "docs/guide/games.md", "exec"), namespace)
    learner = namespace["learner"]
    assert [learner.seat_name(a) for a in range(learner.num_agents)] == namespace["trained"] == ["agent_0", "agent_1"]
    assert [type(learner.fixed[s]).__name__ for s in (2, 3)] == ["Frozen", "TextArenaBot"]


# ----- self-play on a two-player game -----------------------------------------------------------------


def test_one_model_plays_both_seats_of_tictactoe(tiny_dir):
    """Self-play as for OpenSpiel games: one policy (one optimizer, one step per rollout) trained on both seats'
    moves. The bias favours moves of the form `[d]` (a cell), so some games run several moves and end in a win,
    a loss or a draw, and some answers name a taken cell and forfeit."""
    model, tok = AutoModelForCausalLM.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir)
    bias = bracket_bias(tok, ["[", *(f"[{d}" for d in range(9)), *(f"{d}]" for d in range(9))], 8.0)
    learner = MAGRPO(env=make("textarena/TicTacToe-v0", max_observation_length=2048), agents=[model, model],
                     tokenizer=tok, args=config(max_new_tokens=3, generation_kwargs={"sequence_bias": bias}))
    assert learner.agents[0] is learner.agents[1] and len(learner.optimizers) == 1
    assert learner.model_agents() == [[0, 1]] and set(learner.checkpoint_modules()) == {"agent_0"}
    before = [p.detach().clone() for p in model.parameters()]
    learner.learn()
    rollout = learner.last_rollout
    assert rollout.acted[0].any() and rollout.acted[1].any()  # both seats moved and were sampled
    assert learner.optimizer_steps == 1
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
