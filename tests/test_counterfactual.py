"""MAGRPO's counterfactual advantages (issue 17): by hand on 2x2 joint tables, against "mean" mode and a
grid reference on scripted cross rollouts (several turns, turn-taking, a fixed seat), and end to end."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import pytest
import torch
from datasets import Dataset

from comlrl_env import TextParallelEnv
from comlrl_env.policies import FixedPolicy
from learners.reinforce import (
    MAGRPO,
    MAGRPOConfig,
    acting_advantages,
    counterfactual_advantages,
    group_relative_advantages,
)
from learners.rollout import GenerationSettings, RolloutEngine, SampleBatch

# ----- a scripted engine: sample k of every agent answers "k" ---------------------------------------


class Scripted(RolloutEngine):
    """No models: sample k of each prompt answers str(k), with one token and log-prob 0."""

    def __init__(self, num_agents: int = 2, fixed: dict[int, FixedPolicy] | None = None):
        self.agents, self.tokenizers = [None] * num_agents, [_PadOnly()] * num_agents
        self.settings, self.concurrent, self.shared_base, self.fixed = GenerationSettings(), False, None, fixed or {}

    def generate(self, agent, prompts, num_samples, greedy=False):
        texts = [str(k) for _ in prompts for k in range(num_samples)]
        ones = torch.ones(len(texts), 1, dtype=torch.long)
        return SampleBatch(ones, ones, ones, ones, texts, torch.zeros(len(texts), 1))

    def prompt_rows(self, agent, prompts, num_samples):  # a waiting agent's rows hold its prompt: one token here
        S = len(prompts) * num_samples
        ones, empty = torch.ones(S, 1, dtype=torch.long), torch.zeros(S, 0, dtype=torch.long)
        return SampleBatch(ones, ones, empty, empty.clone(), [""] * S, torch.zeros(S, 0))


class _PadOnly:
    pad_token_id = 0


class SampleIndex(FixedPolicy):
    """A fixed seat that samples like an agent: sample k answers str(k)."""

    def act(self, envs, agent, num_samples=1):
        return [str(k) for _ in envs for k in range(num_samples)]


class Table(TextParallelEnv):
    """Two agents, one turn; the joint reward of answers (k_1, k_2) is `table[k_1][k_2]`."""

    metadata = {**TextParallelEnv.metadata, "name": "test/Table-v0", "num_tasks": 1}

    def __init__(self, table):
        super().__init__(num_agents=2, num_turns=1)
        self.table = table

    def load_task(self, task_index):
        return {}

    def prompts(self):
        return {a: "pick" for a in self.agents}

    def score(self, actions):
        k1, k2 = (int(actions[a]) for a in self.possible_agents)
        return float(self.table[k1][k2]), False


def table_rollout(table):
    env = Table(table)
    env.reset(seed=0)
    return Scripted().collect([env], num_generations=2, rollout_mode="tree", joint_mode="cross")


# ----- by hand ------------------------------------------------------------------------------------


def test_the_rollout_keeps_the_joint_table():
    r = table_rollout([[3, 1], [2, 0]])
    # One node, rows 0 and 1 per agent; joint actions in product order (k_1, k_2).
    assert r.joint_rows.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert r.joint_returns[:, 0].tolist() == [3, 1, 2, 0] and r.joint_returns[:, 1].tolist() == [3, 1, 2, 0]
    assert r.joint_fixed.tolist() == [0, 0, 0, 0]


def test_an_asymmetric_table_by_hand():
    r = table_rollout([[3, 1], [2, 0]])  # Q(k_1, k_2): rows k_1, columns k_2
    # Agent 1 (k_1), others held fixed: column k_2 = 0 has mean (3 + 2) / 2 = 2.5, column 1 (1 + 0) / 2 = .5,
    # so A_1(j) = [[3 - 2.5, 1 - .5], [2 - 2.5, 0 - .5]] = [[.5, .5], [-.5, -.5]]; per sample k_1: [.5, -.5].
    # Agent 2 (k_2): row means (3 + 1) / 2 = 2 and (2 + 0) / 2 = 1, A_2(j) = [[1, -1], [1, -1]] -> [1, -1].
    adv = counterfactual_advantages(r, normalize=False)
    assert torch.allclose(adv, torch.tensor([[0.5, -0.5], [1.0, -1.0]]))
    # Normalized by the std over the 4 joint actions: sqrt(mean(.25 x 4)) = .5 and sqrt(mean(1 x 4)) = 1.
    assert torch.allclose(counterfactual_advantages(r), torch.tensor([[1.0, -1.0], [1.0, -1.0]]))
    # An additive table: mean mode agrees (marginals [2, 1] and [2.5, .5], centred, over std .5 and 1).
    assert torch.allclose(acting_advantages(r.returns, r, "mean"), torch.tensor([[1.0, -1.0], [1.0, -1.0]]))


def test_an_xor_table_gives_zero():
    r = table_rollout([[1, 0], [0, 1]])
    # Agent 1: column means .5 and .5: A_1(j) = [[.5, -.5], [-.5, .5]], per sample (.5 - .5) / 2 = 0 (both).
    # Agent 2 the same by symmetry. Std over the table .5: normalized 0 as well.
    assert counterfactual_advantages(r, normalize=False).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert counterfactual_advantages(r).tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_a_near_xor_table_where_mean_mode_amplifies_noise():
    r = table_rollout([[1, 0], [0, 1.02]])
    # Agent 1: column means (1 + 0) / 2 = .5 and (0 + 1.02) / 2 = .51:
    # A_1(j) = [[.5, -.51], [-.5, .51]]; per sample k_1 = 0: (.5 - .51) / 2 = -.005, k_1 = 1: +.005.
    # Table std: sqrt((.25 + .2601 + .25 + .2601) / 4) = sqrt(.2551); agent 2 the same (symmetric table).
    raw = torch.tensor([[-0.005, 0.005]] * 2)
    assert torch.allclose(counterfactual_advantages(r, normalize=False), raw, atol=1e-6)
    assert torch.allclose(counterfactual_advantages(r), raw / math.sqrt(0.2551), atol=1e-5)  # +-.0099
    # Mean mode: marginals [.5, .51], centred +-.005 over their own std .005 -> +-1, a full-size signal.
    assert torch.allclose(acting_advantages(r.returns, r, "mean"), torch.tensor([[-1.0, 1.0]] * 2), atol=1e-3)


def test_the_kl_penalty_enters_each_agents_table():
    r = table_rollout([[3, 1], [2, 0]])
    kl = torch.tensor([[0.0, 2.0], [0.0, 0.0]])  # agent 1's sample 1 drifted from the reference
    # Agent 1's table becomes Q - .5 x kl(k_1) = [[3, 1], [1, -1]]: column means 2 and 0 ->
    # A_1(j) = [[1, 1], [-1, -1]] -> per sample [1, -1]. Agent 2 is unchanged: [1, -1].
    adv = counterfactual_advantages(r, normalize=False, kl=kl, kl_coef=0.5)
    assert torch.allclose(adv, torch.tensor([[1.0, -1.0], [1.0, -1.0]]))


def test_counterfactual_needs_the_joint_table():
    env = Table([[3, 1], [2, 0]])
    env.reset(seed=0)
    aligned = Scripted().collect([env], num_generations=2, rollout_mode="tree", joint_mode="aligned")
    with pytest.raises(ValueError, match="need a joint_mode='cross' tree rollout"):
        counterfactual_advantages(aligned)
    aligned.joint_rows = None
    with pytest.raises(ValueError, match="need the rollout's joint table"):
        counterfactual_advantages(aligned)
    with pytest.raises(ValueError, match="use counterfactual_advantages"):
        group_relative_advantages(torch.zeros(1, 2), torch.zeros(2, dtype=torch.long), mode="counterfactual")


# ----- scripted cross rollouts: against mean mode and a grid reference ----------------------------------


class RandomRewards(TextParallelEnv):
    """`num_agents` seats, `num_turns` turns; each seat's reward is a pseudo-random function of the history
    and the joint action. `take_turns`: after turn 0 the movers depend on the history (one or several)."""

    metadata = {**TextParallelEnv.metadata, "name": "test/RandomRewards-v0", "num_tasks": 2}

    def __init__(self, num_agents: int, num_turns: int, take_turns: bool = False):
        super().__init__(num_agents=num_agents, num_turns=num_turns)
        self.take_turns = take_turns

    def load_task(self, task_index):
        return {"history": f"task {task_index}"}

    def prompts(self):
        return {a: self.task["history"] for a in self.agents}

    def to_move(self):
        if not self.take_turns or self.turn == 0 or not self.agents:
            return list(self.agents)
        h = sum(map(ord, self.task["history"]))
        return [a for i, a in enumerate(self.agents) if (h >> i) % 2] or self.agents[h % len(self.agents):][:1]

    def score(self, actions):
        self.task["history"] += "|" + ",".join(actions[a] for a in self.possible_agents)
        return {a: random.Random(f"{self.task['history']}/{a}").random() for a in self.agents}, False


def random_rollout(num_agents, num_turns, K, take_turns=False, fixed=None):
    roots = []
    for i in range(2):
        env = RandomRewards(num_agents + len(fixed or {}), num_turns, take_turns)
        env.reset(seed=0, options={"task_index": i})
        roots.append(env)
    engine = Scripted(num_agents, fixed)
    return engine.collect(roots, num_generations=K, rollout_mode="tree", joint_mode="cross", discount=0.9)


def grid_reference(r, normalize, kl=None, kl_coef=0.0):
    """The definition, node by node: each node's table as a grid over its movers (and the fixed seats'
    samples), A_i = Q_i - mean over agent i's axis, per sample the mean over the other axes."""
    A, S = r.joint_rows.shape[1], r.num_samples
    acted = r.acted if r.acted is not None else torch.ones(A, S, dtype=torch.bool)
    out = torch.zeros(A, S)
    for g in r.group.unique().tolist():
        first = int((r.group == g).nonzero()[0])
        K = int((r.group == g).sum())
        joint = ((r.joint_rows[:, 0] >= first) & (r.joint_rows[:, 0] < first + K)).nonzero().squeeze(1)
        movers = [a for a in range(A) if acted[a, first]]
        F = int(r.joint_fixed[joint].max()) + 1
        for i_axis, a in enumerate(movers):
            grid = torch.full([K] * len(movers) + [F], float("nan"))
            for j in joint.tolist():
                q = float(r.joint_returns[j, a])
                if kl is not None:
                    q -= kl_coef * float(kl[a, r.joint_rows[j, a]])
                grid[tuple(int(r.joint_rows[j, m]) - first for m in movers) + (int(r.joint_fixed[j]),)] = q
            assert not grid.isnan().any()  # the node's table is the full product
            adv = grid - grid.mean(i_axis, keepdim=True)
            if normalize:
                adv = adv / max(float(adv.pow(2).mean().sqrt()), 1e-6)
            for k in range(K):
                out[a, first + k] = adv.select(i_axis, k).mean()
    return out


SETTINGS = {
    "three agents, two turns": dict(num_agents=3, num_turns=2, K=2),
    "turn-taking, K = 3": dict(num_agents=3, num_turns=3, K=3, take_turns=True),
    "a fixed seat that samples": dict(num_agents=2, num_turns=2, K=2, fixed={2: SampleIndex()}),
}


@pytest.mark.parametrize("setting", SETTINGS.values(), ids=SETTINGS.keys())
def test_unnormalized_counterfactual_is_mean_mode_and_matches_the_definition(setting):
    r = random_rollout(**setting)
    kl = torch.rand(r.returns.shape, generator=torch.Generator().manual_seed(0))
    if setting.get("take_turns"):  # the setting has both one-mover and several-mover nodes
        movers = r.acted.sum(0)
        assert (movers == 1).any() and (movers >= 2).any() and not r.acted.all()
    # The equivalence (the marginal mean is the counterfactual baseline), with and without the KL penalty.
    mean = acting_advantages(r.returns, r, "mean", normalize=False)
    assert torch.allclose(counterfactual_advantages(r, normalize=False), mean, atol=1e-5)
    mean_kl = acting_advantages(r.returns - 0.3 * kl, r, "mean", normalize=False)
    assert torch.allclose(counterfactual_advantages(r, False, kl, 0.3), mean_kl, atol=1e-5)
    # Normalized: the table's std, node by node.
    for normalize in (False, True):
        expected = grid_reference(r, normalize, kl, 0.3)
        assert torch.allclose(counterfactual_advantages(r, normalize, kl, 0.3), expected, atol=1e-5)
    # Waiting rows get 0.
    if r.acted is not None:
        assert (counterfactual_advantages(r)[~r.acted] == 0).all()


# ----- end to end ---------------------------------------------------------------------------------------


def space_reward(first, second):
    return [sum(ch.isspace() for ch in a + b) / max(len(a + b), 1) for a, b in zip(first, second)]


def test_magrpo_trains_with_counterfactual_advantages(tiny_dir):
    cfg = MAGRPOConfig(num_train_epochs=1, num_generations=2, max_new_tokens=4, temperature=1.0, top_p=1.0,
                       top_k=None, eval_interval=0, verbose=False, rollout_buffer_size=2, agent_learning_rate=1e-2,
                       joint_mode="cross", advantage_mode="counterfactual", reference_kl_enabled=True,
                       reference_kl_coef=0.1)
    learner = MAGRPO(agent_model=tiny_dir, num_agents=2, reward_func=space_reward, args=cfg,
                     train_dataset=Dataset.from_list([{"prompt": f"Question {i}:"} for i in range(2)]))
    before = [next(a.parameters()).detach().clone() for a in learner.agents]
    seen = []
    update = learner.update
    learner.update = lambda rollout, advantages, *rest: seen.append(advantages) or update(rollout, advantages, *rest)
    metrics = learner.learn()
    (advantages,) = seen
    assert learner.last_rollout.num_joint_actions == 2 * 4  # 2 prompts x K^2
    assert advantages.shape == (2, 4) and torch.isfinite(advantages).all()
    assert math.isfinite(metrics["train/agent_0/loss"])
    assert all(not torch.equal(b, next(a.parameters())) for b, a in zip(before, learner.agents))


# ----- the expected gradient, exactly over every draw -------------------------------------------------


TWO_ACTIONS = dict(Q=[[1.0, 0.2], [0.0, 0.7]], logits1=[0.3, -0.2], logits2=[-0.1, 0.4])
THREE_ACTIONS = dict(Q=[[1.0, 0.2, 0.5], [0.0, 0.7, 0.1], [0.4, 0.3, 0.9]], logits1=[0.3, -0.2, 0.1],
                     logits2=[-0.1, 0.4, 0.0])


def expected_gradients(K: int, Q: list, logits1: list, logits2: list) -> tuple[dict[bool, torch.Tensor], torch.Tensor]:
    """Agent 1's expected counterfactual policy gradient w.r.t. its logits, exactly over every draw of both
    agents' K samples (softmax policies), unnormalized and normalized; and the true gradient of E[Q]."""
    Q = torch.tensor(Q, dtype=torch.float64)
    n = Q.shape[0]
    p1, p2 = torch.tensor(logits1).double().softmax(0), torch.tensor(logits2).double().softmax(0)
    eye = torch.eye(n, dtype=torch.float64)
    env = Table([[0] * K] * K)
    env.reset(seed=0)
    base = Scripted().collect([env], num_generations=K, rollout_mode="tree", joint_mode="cross")
    rows = base.joint_rows
    true = sum(p1[a] * p2[b] * Q[a, b] * (eye[a] - p1) for a in range(n) for b in range(n))
    expected = {False: torch.zeros(n, dtype=torch.float64), True: torch.zeros(n, dtype=torch.float64)}
    for d1 in itertools.product(range(n), repeat=K):
        for d2 in itertools.product(range(n), repeat=K):
            prob = torch.prod(p1[list(d1)]) * torch.prod(p2[list(d2)])
            q = Q[torch.tensor(d1)[rows[:, 0]], torch.tensor(d2)[rows[:, 1]]]
            rollout = dataclasses.replace(base, joint_returns=q[:, None].expand(-1, 2).float())
            for normalize in (False, True):
                adv = counterfactual_advantages(rollout, normalize=normalize)[0].double()
                expected[normalize] += prob * (adv[:, None] * (eye[list(d1)] - p1)).sum(0) / K
    return expected, true


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("game", [TWO_ACTIONS, THREE_ACTIONS], ids=["2 actions", "3 actions"])
def test_expected_gradient_is_k_minus_1_over_k_of_the_true_one_and_normalizing_turns_it(K, game):
    """The baseline averages over the K samples including the scored one, so unnormalized the expected
    gradient is exactly (K - 1) / K of the true one; normalized (the default) its direction turns, here even
    reverses with two actions: every node votes with the same size whatever is at stake in it, so the more
    likely partner action wins over the larger payoff (figures in docs/DESIGN.md, "Counterfactual credit")."""
    expected, true = expected_gradients(K, **game)
    assert torch.allclose(expected[False], (K - 1) / K * true, atol=1e-9)
    cosine = float(expected[True] @ true / (expected[True].norm() * true.norm()))
    print(f"K={K}, {len(game['Q'])} actions: normalized cosine with the true gradient {cosine:.4f}")
    assert cosine < 0.99
    if len(game["Q"]) == 2:
        assert cosine == pytest.approx(-1.0)
