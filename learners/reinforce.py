"""MAGRPO: multi-agent group-relative policy optimization (arXiv 2508.04652).

Each agent i maximizes the team's return with a group baseline instead of a critic:

    L_i = -1/|B| sum_{s in B} sum_t min(rho_st A_is, clip(rho_st, 1 - eps, 1 + eps) A_is) m_st,
    rho_st = pi_i(y_st | x_s, y_s<t) / pi_old(y_st | x_s, y_s<t),

where A_is is the advantage of sample s within its group (siblings of one
tree node, or the copies of one task instance at one turn) and m_st masks
exactly the sampled completion tokens (EOS in; prompt and padding out). With
one optimizer step per rollout rho = 1 and the gradient is -A grad(sum_t log pi),
that of the reference library, CoMLRL 1.4.3 (whose `MAGRPOTrainer` API this
learner mirrors). With several steps per rollout (`train_batch_size` smaller
than the rollout) the ratio corrects for the policy having moved.

    learner = MAGRPO(env="coop/LengthRatio-v1", agent_model="path/to/model", num_agents=2,
                     args=MAGRPOConfig(num_generations=4, num_train_epochs=2))
    learner.learn()
    learner.save_model("out")
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar

import torch

from learners.loop.config import LearnerConfig, canonicalize
from learners.loop.data import seed_everything
from learners.loop.learner import Learner
from learners.loop.losses import POLICY_STATS, policy_loss, policy_stats, reference_kl  # noqa: F401 (public here)
from learners.loop.metrics import MeanMetrics, rollout_metrics, update_metrics
from learners.loop.optim import PolicyBatch, policy_step
from learners.parallel.placement import per_agent
from learners.rollout.backends import rollout_correction
from learners.rollout.samples import Rollout
from learners.rollout.scoring import RolloutCorrection
from learners.rollout.settings import Number

__all__ = [
    "MAGRPO",
    "MAGRPOConfig",
    "MAGRPOTrainer",
    "POLICY_STATS",
    "acting_advantages",
    "acting_group_advantages",
    "counterfactual_advantages",
    "group_relative_advantages",
    "policy_loss",
    "policy_stats",
]

ADVANTAGE_MODES = ("mean", "raw", "max", "rloo", "counterfactual")
AUTO_TREE_TURNS = 4
"""`rollout_mode="auto"` keeps the tree for turn-taking envs of at most this many turns (B m K (2^4 - 1) samples
per rollout at K = 2); longer ones roll out in parallel (`learners.rollout.rollout_samples`)."""


@dataclasses.dataclass
class MAGRPOConfig(LearnerConfig):
    """MAGRPO settings; every field of the reference `MAGRPOConfig` is accepted with its meaning."""

    num_generations: int = 4
    """Samples per agent per node (tree) or copies per task instance (parallel): the group size K >= 2."""
    joint_mode: str = "aligned"
    """"aligned": sample k of every agent forms joint action k; "cross": all K^N combinations (tree only)."""
    rollout_mode: str = "auto"
    """"tree": every node expands K children (as in CoMLRL 1.4.3); "parallel": K independent episodes per task;
    "auto" (resolved when the learner is built, then held here): "parallel" for turn-taking envs (fewer seats
    move than there are) with more than `AUTO_TREE_TURNS` turns, where a tree grows as K^turns, else "tree"
    (and "tree" with joint_mode="cross")."""
    advantage_mode: str = "mean"
    """Baseline: "mean" R - mean(R), "raw" R, "max" R - max(R), "rloo" R - mean of the other samples,
    "counterfactual" (joint_mode="cross" only) COMA-style credit from each node's joint table: Q_i(j) minus
    the mean over agent i's K alternatives with the others' actions fixed, averaged over the joint actions
    holding the sample (`counterfactual_advantages`). Unnormalized it equals "mean"; normalized it divides by
    the std over the node's joint table, so an agent that matters only jointly with others gets ~0, not noise."""
    advantage_normalization: bool = True
    """Divide group-centred advantages by the group's population std (floored at 1e-6). With it on, mean, raw,
    max and rloo differ only by scale and shift inside a group, so use it off to compare baselines
    ("counterfactual" divides by the std over the node's joint table instead)."""
    advantage_grouping: str = "node"
    """"node": each agent's samples are compared within their group (one tree node, or the copies of one task
    instance at one turn), as in the paper; "global": one group per agent over the whole rollout (all task
    instances and turns), for comparison only (docs/DESIGN.md: it learned less on a 2-turn task)."""
    clip_range: float = 0.2
    """PPO clipping of the ratio pi / pi_old when a rollout feeds several optimizer steps."""
    length_normalization: bool = False
    """Average token terms per completion instead of summing them (the reference sums)."""

    NUMBERS: ClassVar[dict[str, Number]] = {
        "num_generations": Number(low=2, integer=True, why=" for a group baseline",
                                  fix="Use IAC for single-sample training."),
        "clip_range": Number(low=0, low_open=True),
    }
    """The rule of each numeric field of MAGRPO's own (`Number`), checked at construction."""

    def __post_init__(self) -> None:
        super().__post_init__()
        canonicalize(self, "joint_mode", ("aligned", "cross"))
        canonicalize(self, "rollout_mode", ("auto", "tree", "parallel"))
        if self.joint_mode == "cross" and self.rollout_mode == "parallel":
            raise ValueError("joint_mode='cross' needs rollout_mode='tree'.")
        canonicalize(self, "advantage_mode", ADVANTAGE_MODES)
        canonicalize(self, "advantage_grouping", ("node", "global"))
        if self.advantage_grouping == "global" and self.advantage_mode == "counterfactual":
            raise ValueError("advantage_mode='counterfactual' compares samples within a node's joint table; it "
                             "needs advantage_grouping='node'.")
        if self.advantage_mode == "counterfactual" and self.joint_mode != "cross":
            raise ValueError(f"advantage_mode='counterfactual' needs every combination of the agents' samples "
                             f"(joint_mode='cross'), got joint_mode={self.joint_mode!r}. Set joint_mode='cross', "
                             "or use advantage_mode='mean'.")


def group_relative_advantages(
    returns: torch.Tensor, group: torch.Tensor, mode: str = "mean", normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Advantages of `returns` `(A, S)` against the baseline of each sample's group `(S,)`.

    mean: A = R - mean_g(R);  raw: A = R;  max: A = R - max_g(R);
    rloo: A = R - (sum_g(R) - R) / (K_g - 1)  (= mean mode when K_g = 1).
    normalize: A <- (A - mean_g(A)) / max(std_g(A), eps) in every group (population std), so a lone sample
    gets 0 in every mode: it has nothing to be compared with.
    Example: one group, R = [1, 0, 0, 1], mean mode, no normalization -> [0.5, -0.5, -0.5, 0.5].
    """
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"mode must be one of {ADVANTAGE_MODES}, got {mode!r}.")
    if mode == "counterfactual":
        raise ValueError("mode='counterfactual' needs each node's joint table, not per-sample returns: "
                         "use counterfactual_advantages(rollout).")
    R = returns.float()
    _, group = torch.unique(group, return_inverse=True)
    G = int(group.max()) + 1 if group.numel() else 0
    K = torch.bincount(group, minlength=G).float()[group]  # (S,) size of each sample's group

    def group_mean(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0], G).index_add_(1, group, x)[:, group] / K

    if mode == "raw":
        adv = R.clone()
    elif mode == "max":
        gmax = torch.full((R.shape[0], G), float("-inf")).scatter_reduce(
            1, group.expand_as(R), R, reduce="amax", include_self=True
        )
        adv = R - gmax[:, group]
    elif mode == "rloo":
        mean = group_mean(R)
        adv = torch.where(K > 1, (K * R - K * mean) / (K - 1).clamp(min=1), R - mean)
    else:
        adv = R - group_mean(R)
    if normalize:
        centred = adv - group_mean(adv)
        adv = centred / group_mean(centred**2).sqrt().clamp(min=eps)
    return adv


def acting_advantages(returns: torch.Tensor, rollout: Rollout, mode: str = "mean",
                      normalize: bool = True) -> torch.Tensor:
    """`group_relative_advantages` of `returns` `(A, S)` in the rollout's groups (`rollout.group`), each
    agent's groups holding only the rows at which it was to move (`acting_group_advantages`)."""
    return acting_group_advantages(returns, rollout.group, rollout.acted, mode, normalize)


def acting_group_advantages(returns: torch.Tensor, group: torch.Tensor, acted: torch.Tensor | None,
                            mode: str = "mean", normalize: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """`group_relative_advantages` of `returns` `(A, S)` in the groups `group` `(S,)`, with each agent's
    groups holding only the rows at which it was to move (`acted` `(A, S)`; turn-taking tasks). Its other
    rows get advantage 0: they hold no sampled token and are not trained on, so they must not move the
    mean and std of the rows that are. `acted=None` (everyone moves everywhere) is
    `group_relative_advantages` itself. MAGRPO groups by tree node or task copy, IAC and MAAC by turn.
    Example: R = [[1, 5, 3, 0]] in one group, acted [[T, F, T, F]], mean mode -> [[-1, 0, 1, 0]]."""
    if acted is None or bool(acted.all()):
        return group_relative_advantages(returns, group, mode, normalize, eps)
    out = torch.zeros(returns.shape, dtype=torch.float32)
    for a in range(returns.shape[0]):
        rows = acted[a]
        if bool(rows.any()):
            out[a, rows] = group_relative_advantages(returns[a:a + 1, rows], group[rows], mode, normalize, eps)[0]
    return out


def counterfactual_advantages(rollout: Rollout, normalize: bool = True, kl: torch.Tensor | None = None,
                              kl_coef: float = 0.0, eps: float = 1e-6) -> torch.Tensor:
    """COMA-style advantages `(A, S)` from the joint table of a cross-mode tree rollout (`Rollout.joint_rows`).

    At a node with K samples per agent, Q_i(j) is agent i's return of joint action j = (k_1..k_N), minus
    kl_coef * KL of agent i's sample in j when `kl` `(A, S)` is given. Holding the others' actions fixed,

        A_i(j) = Q_i(j) - 1/K sum_{k'} Q_i(k', j_{-i}),   A_i(k) = mean_{j: j_i = k} A_i(j)

    for agent i's sample k. Since every j_{-i} occurs once with each k, A_i(k) = Qbar_i(k) - mean of Q_i over
    the node's table: unnormalized this IS "mean" mode (the marginal mean is already the counterfactual
    baseline). `normalize` divides by the population std of A_i(j) over the node's whole table (its mean is
    0), floored at `eps`, instead of the std of the K values A_i(k): an agent that matters only jointly (XOR)
    has equal marginals, where mean mode divides ~0 by ~0, and gets ~0 here. j_{-i} holds the others'
    samples where they move and the moving fixed seats' (`Rollout.joint_fixed`); an agent not to move at a
    node gets advantage 0 there, as in `acting_advantages`.
    Bias: the baseline averages over the K samples including the scored one, so unnormalized the expected
    gradient is exactly (K - 1) / K of the true one (an unbiased direction, a smaller step). Normalized, the
    direction is biased: every node's advantages get the same size whatever is at stake there, so a likely
    partner action can outvote a large payoff; exactly over all draws, the cosine with the true gradient was
    0.57 (K=2) and 0.83 (K=3) on a 3-action table and -1 on a 2-action one (`tests/test_counterfactual.py`).
    Use `advantage_normalization=False` when the direction matters more than the step size.
    Example: K = 2, Q_1 = [[3, 1], [2, 0]] (row k_1, column k_2): A_1(j) = [[.5, .5], [-.5, -.5]],
    A_1(k) = [.5, -.5], std .5, normalized [1, -1]. XOR Q_1 = [[1, 0], [0, 1]]: A_1(k) = [0, 0].
    """
    if rollout.joint_rows is None or rollout.joint_returns is None:
        raise ValueError("counterfactual advantages need the rollout's joint table (Rollout.joint_rows and "
                         "joint_returns, which RolloutEngine.collect fills); this rollout has none.")
    rows, Q = rollout.joint_rows, rollout.joint_returns.float()
    (J, A), S = rows.shape, rollout.num_samples
    acted = torch.ones(A, S, dtype=torch.bool) if rollout.acted is None else rollout.acted
    fixed = torch.zeros(J, dtype=torch.long) if rollout.joint_fixed is None else rollout.joint_fixed
    moves = torch.stack([acted[a, rows[:, a]] for a in range(A)], 1)  # (J, A) whether agent a moves in j's node
    picks = torch.where(moves, rows, -1)  # a waiting agent's row is no choice of its own: leave it out of j_{-i}
    _, group = torch.unique(rollout.group, return_inverse=True)
    num_samples = torch.bincount(group)  # (G,) K of each node (tree mode: a group is one node)
    node = group[rows[:, 0]]  # (J,)
    out = torch.zeros(A, S)
    for a in range(A):
        on = moves[:, a]
        if not bool(on.any()):
            continue
        q = Q[on, a] if kl is None else Q[on, a] - kl_coef * kl[a, rows[on, a]].float()
        others = torch.cat([node[:, None], picks[:, :a], picks[:, a + 1:], fixed[:, None]], 1)[on]
        _, context = torch.unique(others, dim=0, return_inverse=True)  # j_{-i}
        size = torch.bincount(context)
        if not torch.equal(size[context], num_samples[node[on]]):
            raise ValueError(f"agent {a}'s joint actions do not hold each of its samples once per choice of the "
                             "others': counterfactual advantages need a joint_mode='cross' tree rollout.")
        adv = q - (torch.zeros(len(size)).index_add_(0, context, q) / size)[context]
        ones = torch.ones(len(q))
        if normalize:
            G = len(num_samples)
            var = torch.zeros(G).index_add_(0, node[on], adv**2) / torch.zeros(G).index_add_(0, node[on], ones)
            adv = adv / var.sqrt().clamp(min=eps)[node[on]]
        count = torch.zeros(S).index_add_(0, rows[on, a], ones)
        out[a] = torch.zeros(S).index_add_(0, rows[on, a], adv) / count.clamp(min=1)
    return out


class MAGRPO(Learner):
    """Multi-agent group-relative policy optimization: each agent learns from the team's return measured
    against its group's, with no critic.

    Follows MAGRPO (arXiv 2508.04652). The agents sample `num_generations` answers per task instance (a tree
    whose nodes' children are siblings, or parallel copies of the instance: `rollout_mode`), and each agent i
    minimizes

        L_i = -1/|B| sum_{s in B} sum_t m_st min(rho_st A_is,
                                                 clip(rho_st, 1 - eps, 1 + eps) A_is),
        rho_st = pi_i(y_st | x_s, y_s<t) / pi_old(y_st | x_s, y_s<t),

    where A_is is sample s's return against its group's baseline (`advantage_mode`; divided by the group's std
    with `advantage_normalization`), m_st masks exactly the sampled completion tokens and eps is `clip_range`.
    With one optimizer step per rollout rho = 1. Settings: `MAGRPOConfig`; the constructor is `Learner`'s (no
    critic: `critic_model` and `critics` raise).
    """

    config_class = MAGRPOConfig

    def rollout_plan(self) -> tuple[int, str, str]:
        cfg: MAGRPOConfig = self.args
        return cfg.num_generations, cfg.rollout_mode, cfg.joint_mode

    def _seed_sampling(self) -> None:
        seed_everything(self.args.seed + self.dist.rank)  # ranks sample different completions

    def _validate(self) -> None:
        super()._validate()
        cfg: MAGRPOConfig = self.args
        if cfg.rollout_mode == "auto":
            self.env.reset(seed=cfg.seed)
            turn_taking = len(self.env.to_move()) < self.num_seats
            long = turn_taking and self.env.num_turns > AUTO_TREE_TURNS and cfg.joint_mode != "cross"
            cfg.rollout_mode = "parallel" if long else "tree"
        if cfg.joint_mode == "cross" and cfg.num_generations ** self.num_seats > 4096:
            raise ValueError(
                f"joint_mode='cross' with K={cfg.num_generations} and {self.num_seats} seats that move (fixed "
                f"ones included) makes up to {cfg.num_generations ** self.num_seats} joint actions per node; use "
                "'aligned'."
            )

    def step(self, roots: list) -> dict[str, float]:
        """One rollout of the batch `roots`, group-relative advantages, one update; returns metrics."""
        cfg: MAGRPOConfig = self.args
        rollout = self.collect(roots, cfg.num_generations, cfg.rollout_mode, cfg.joint_mode)
        t0 = time.perf_counter()
        groups = torch.unique(rollout.group)
        chunks = [torch.nonzero(torch.isin(rollout.group, groups[part])).squeeze(1)
                  for part in self.minibatches(len(groups))]
        need_old = len(chunks) > 1 or cfg.reference_kl_enabled
        old = [self.old_logprobs(a, rollout) for a in range(self.num_agents)] if need_old else None
        kl = (reference_kl(self.reference_models, rollout.samples, old, self.scoring_supports())
              if cfg.reference_kl_enabled else None)
        if cfg.advantage_mode == "counterfactual":
            advantages = counterfactual_advantages(rollout, cfg.advantage_normalization, kl, cfg.reference_kl_coef)
        else:
            returns = rollout.returns if kl is None else rollout.returns - cfg.reference_kl_coef * kl
            grouped = rollout if cfg.advantage_grouping == "node" else dataclasses.replace(
                rollout, group=torch.zeros_like(rollout.group))  # one group per agent over the rollout
            advantages = acting_advantages(returns, grouped, cfg.advantage_mode, cfg.advantage_normalization)
        correction = rollout_correction(self, rollout, chunks[0])  # an engine's samples: w_s and pi_old
        metrics = self.update(rollout, advantages, chunks, old, correction)
        metrics.update(rollout_metrics(rollout, advantages, kl))
        metrics.update(update_metrics(time.perf_counter() - t0, correction))
        return metrics

    def update(self, rollout: Rollout, advantages: torch.Tensor, chunks: list[torch.Tensor],
               old: list[torch.Tensor] | None, correction: RolloutCorrection | None = None) -> dict[str, float]:
        """Every model's optimizer steps on one rollout, one per minibatch of groups (`chunks`); returns the
        loss, policy statistics and gradient norm of each agent, averaged over its steps. A model playing
        several seats (self-play) steps once per minibatch on all its seats' samples. An engine-sampled
        rollout's `correction` weighs the advantages and gives pi_old (`old` is then unused)."""
        # Models on their own accelerators update concurrently (never under torchrun: collectives stay ordered).
        concurrent = self.engine.concurrent and not self.dist.enabled
        groups = self.model_agents()
        metrics: dict[str, float] = {}
        for part in per_agent(lambda m: self.update_model(m, rollout, advantages, chunks, old, correction),
                              len(groups), concurrent):
            metrics.update(part)
        return metrics

    def update_model(self, m: int, rollout: Rollout, advantages: torch.Tensor, chunks: list[torch.Tensor],
                     old: list[torch.Tensor] | None, correction: RolloutCorrection | None) -> dict[str, float]:
        """Model `m`'s optimizer steps on the minibatches `chunks` (sample rows) of `rollout`, each on the rows
        of every agent it plays; an empty one (torchrun: this rank has no groups left) joins the other ranks'
        step with zero gradients. Its metrics are logged under each of its agents."""
        agents = self.model_agents()[m]
        means = MeanMetrics()
        for idx in chunks:
            parts = [PolicyBatch(rollout.samples[a], rollout.acting(a, idx), advantages[a],
                                 None if old is None else old[a], self.engine.backend.support(a), correction, a)
                     for a in agents]
            means.add(policy_step(self.agents[agents[0]], self.optimizers[m], parts, self.args, self.dist))
        return {f"train/agent_{a}/{name}": value for a in agents for name, value in means.means().items()}


MAGRPOTrainer = MAGRPO
