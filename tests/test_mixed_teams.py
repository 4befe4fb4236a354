"""Turn-taking and mixed teams: only the agent to move generates and trains; fixed seats act and are never
trained, saved or exported; a frozen copy stays frozen; self-play shares one model."""

from __future__ import annotations

import json
import os

import pytest
import torch

from comlrl_env import TextParallelEnv
from comlrl_env.policies import CallablePolicy, FixedPolicy, as_fixed_policy
from learners import IAC, MAAC, MAGRPO, Frozen, IACConfig, MAACConfig, MAGRPOConfig
from learners.loop.data import reset_roots
from learners.rollout import joint_combinations

FAST = dict(num_train_epochs=1, max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=None, eval_interval=0,
            verbose=False, rollout_buffer_size=2)


class TakeTurns(TextParallelEnv):
    """Two seats, `num_turns` turns; seat `turn % 2` moves (or only `only` when set). Each move scores the
    fraction of spaces in the mover's text, paid to every agent."""

    metadata = {**TextParallelEnv.metadata, "name": "take_turns-v0", "num_tasks": 4}

    def __init__(self, num_turns: int = 2, only: int | None = None) -> None:
        super().__init__(num_agents=2, num_turns=num_turns)
        self.only = only
        self.seen: list[dict[str, str]] = []

    def load_task(self, task_index):
        return {"i": 0 if task_index is None else task_index}

    def to_move(self):
        seat = self.only if self.only is not None else self.turn % 2
        return [self.possible_agents[seat]] if self.agents else []

    def prompts(self):
        mover = self.to_move()[0]
        return {a: f"Task {self.task['i']} turn {self.turn}: {'your move' if a == mover else 'wait'}."
                for a in self.agents}

    def score(self, actions):
        self.seen.append(dict(actions))
        text = actions[self.to_move()[0]]
        return sum(ch.isspace() for ch in text) / max(len(text), 1), False


def magrpo(tiny_dir, env, agents=None, **cfg):
    return MAGRPO(env=env, agents=agents or [tiny_dir, tiny_dir],
                  args=MAGRPOConfig(**{**FAST, "num_generations": 2, **cfg}))


# ----- the env's mark and the engine --------------------------------------------------------------


def test_infos_say_who_is_to_move_and_nobody_after_the_end():
    env = TakeTurns(num_turns=2)
    _, infos = env.reset(seed=0)
    assert [infos[a]["to_move"] for a in env.possible_agents] == [True, False]
    _, _, _, _, infos = env.step({"agent_0": "a b", "agent_1": ""})
    assert [infos[a]["to_move"] for a in env.possible_agents] == [False, True]
    _, _, _, trunc, infos = env.step({"agent_0": "", "agent_1": "c"})
    assert all(trunc.values()) and not any(info["to_move"] for info in infos.values())


@pytest.mark.parametrize("mode", ["tree", "parallel"])
def test_only_the_agent_to_move_generates_and_its_other_rows_hold_no_tokens(tiny_dir, mode):
    learner = magrpo(tiny_dir, TakeTurns(num_turns=2), rollout_mode=mode)
    engine = learner.engine
    asked: list[tuple[int, list[str]]] = []
    generate = engine.generate

    def spy(agent, prompts, num_samples, greedy=False):
        asked.append((agent, list(prompts)))
        return generate(agent, prompts, num_samples, greedy)

    engine.generate = spy
    roots = reset_roots(learner.env, [(0, 0), (0, 1)])
    rollout = engine.collect(roots, 2, mode)
    assert asked and all("your move" in p for _, prompts in asked for p in prompts)
    assert {agent for agent, _ in asked} == {0, 1}
    for a in range(2):
        acted = rollout.acted[a]
        lengths = rollout.samples[a].completion_mask.sum(1)
        assert bool((lengths[acted] > 0).all()) and bool((lengths[~acted] == 0).all())
        assert bool((rollout.samples[a].prompt_mask.sum(1) > 0).all())  # critics still read the prompt
        assert all(rollout.samples[a].completions[i] == "" for i in torch.nonzero(~acted).squeeze(1).tolist())
    assert bool((rollout.acted[0] == (rollout.turn == 0)).all())
    assert bool((rollout.acted[1] == (rollout.turn == 1)).all())


def test_the_waiting_agents_text_is_ignored_and_never_invalid(tiny_dir):
    learner = magrpo(tiny_dir, TakeTurns(num_turns=2))
    roots = reset_roots(learner.env, [(0, 0)])
    rollout = learner.engine.collect(roots, 2, "parallel")
    assert float(rollout.invalid_actions.sum()) == 0
    for row, turn in enumerate(rollout.turn.tolist()):
        waiting = 1 - turn
        assert rollout.joint_action(row)[waiting] == ""


def test_joint_combinations_cross_only_the_agents_to_move():
    assert joint_combinations(2, [True, False, True], "cross") == [(0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1)]
    assert joint_combinations(3, [True, False], "cross") == [(0, 0), (1, 1), (2, 2)]  # one mover: K actions
    assert joint_combinations(2, [True, True], "aligned") == [(0, 0), (1, 1)]


def test_an_agent_that_never_moves_is_never_trained(tiny_dir):
    learner = magrpo(tiny_dir, TakeTurns(num_turns=2, only=0), agent_learning_rate=1e-2)
    before = [{k: v.clone() for k, v in m.state_dict().items()} for m in learner.agents]
    learner.learn()
    moved = any(not torch.equal(before[0][k], v) for k, v in learner.agents[0].state_dict().items())
    still = all(torch.equal(before[1][k], v) for k, v in learner.agents[1].state_dict().items())
    assert moved and still


@pytest.mark.parametrize("kind", ["iac", "maac"])
def test_actor_critic_trains_only_the_agent_that_moves(tiny_dir, kind):
    env = TakeTurns(num_turns=2, only=0)
    if kind == "iac":
        # Separate critics: a value head on the actor's backbone would learn the waiting agent's values
        # (critics learn every row's value; only the policy loss is limited to the agent's own moves).
        learner = IAC(env=env, agents=[tiny_dir, tiny_dir], critic_model=tiny_dir, args=IACConfig(
            **FAST, num_generations=2, use_separate_critic=True, agent_learning_rate=1e-2))
    else:
        learner = MAAC(env=env, agents=[tiny_dir, tiny_dir], critic_model=tiny_dir,
                       args=MAACConfig(**FAST, num_generations=2, agent_learning_rate=1e-2))
    frozen_actor = {k: v.clone() for k, v in learner.agents[1].state_dict().items() if "value_head" not in k}
    learner.learn()
    after = {k: v for k, v in learner.agents[1].state_dict().items() if "value_head" not in k}
    assert all(torch.equal(frozen_actor[k], after[k]) for k in frozen_actor)


# ----- fixed seats -------------------------------------------------------------------------------


def test_seat_entries_that_are_policies():
    assert as_fixed_policy("some/model") is None and as_fixed_policy(torch.nn.Linear(1, 1)) is None
    wrapped = as_fixed_policy(str.upper)
    assert isinstance(wrapped, CallablePolicy) and wrapped.describe() == {"policy": "callable", "name": "str.upper"}
    bot = CallablePolicy(lambda obs: "x")
    assert as_fixed_policy(bot) is bot


def test_a_fixed_seat_acts_where_it_moves_and_is_never_trained_saved_or_exported(tiny_dir, tmp_path):
    calls: list[str] = []

    def scripted(observation: str) -> str:
        calls.append(observation)
        return "a b c"

    env = TakeTurns(num_turns=2)
    learner = magrpo(tiny_dir, env, agents=[tiny_dir, scripted], output_dir=str(tmp_path / "run"))
    assert learner.num_agents == 1 and len(learner.agents) == 1 and len(learner.optimizers) == 1
    learner.learn()
    assert calls and all("your move" in obs for obs in calls)  # asked only on its turns
    assert {seen["agent_1"] for seen in env.seen} == {"", "a b c"}  # "" while waiting (ignored), its text on its turns
    rollout = learner.last_rollout
    assert rollout.rewards.shape[0] == 1  # the per-agent fields cover the trained agent only
    assert {r[1] for r, t in zip(rollout.joint_actions, rollout.turn.tolist()) if t == 1} == {"a b c"}
    assert set(learner.checkpoint_modules()) == {"agent_0"}
    learner.save_model(str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path / "out")) == ["agent_0", "comlrl_env.json"]
    manifest = json.load(open(tmp_path / "out" / "comlrl_env.json"))
    assert manifest["trained_seats"] == ["agent_0"]
    assert manifest["fixed_seats"] == {"agent_1": {"policy": "callable", "name": "test_a_fixed_seat_acts_where_it_"
                                                   "moves_and_is_never_trained_saved_or_exported.<locals>.scripted"}}
    assert learner.logger.run_config["fixed_seats"] == manifest["fixed_seats"]  # wandb's run config


def test_a_frozen_copy_samples_but_stays_as_it_was(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    frozen = Frozen(model, tok, temperature=0.7)
    learner = MAGRPO(env=TakeTurns(num_turns=2), agents=[model, frozen], tokenizer=[tok, tok],
                     args=MAGRPOConfig(**FAST, num_generations=2, agent_learning_rate=1e-2))
    learner.learn()
    copy = frozen.engine.agents[0]
    assert copy is not model and not any(p.requires_grad for p in copy.parameters())
    assert all(torch.equal(start[k], v) for k, v in copy.state_dict().items())
    assert any(not torch.equal(start[k], v) for k, v in model.state_dict().items())
    assert frozen.engine.settings.temperature == 0.7
    assert learner.logger.run_config["fixed_seats"]["agent_1"] == {"policy": "frozen", "model": tiny_dir,
                                                                   "weights_match_source": True, "temperature": 0.7}
    texts = [row[1] for row, t in zip(learner.last_rollout.joint_actions, learner.last_rollout.turn.tolist()) if t == 1]
    assert texts and all(isinstance(t, str) for t in texts)


def test_self_play_one_model_in_both_seats_trains_from_both(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    learner = MAGRPO(env=TakeTurns(num_turns=2), agents=[model, model], tokenizer=tok,
                     args=MAGRPOConfig(**FAST, num_generations=2))
    assert learner.agents[0] is learner.agents[1]
    learner.learn()
    assert learner.optimizer_steps > 0


def test_every_seat_fixed_is_refused_before_any_model_loads():
    with pytest.raises(ValueError, match="at least one trainable model"):
        MAGRPO(env=TakeTurns(), agents=[str.upper, str.lower], args=MAGRPOConfig(**FAST, num_generations=2))


def test_a_fixed_policy_subclass_gets_every_env_where_it_moves(tiny_dir):
    class Counting(FixedPolicy):
        def __init__(self):
            self.batches = []

        def act(self, envs, agent, num_samples=1):
            self.batches.append((len(envs), num_samples))
            return ["x y"] * (len(envs) * num_samples)

    bot = Counting()
    learner = magrpo(tiny_dir, TakeTurns(num_turns=2), agents=[tiny_dir, bot], rollout_mode="tree")
    roots = reset_roots(learner.env, [(0, 0), (0, 1)])
    learner.engine.collect(roots, 2, "tree")
    assert bot.batches == [(4, 2)]  # one call at turn 1: 2 roots x 2 children, 2 samples each
