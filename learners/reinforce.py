"""MAGRPO: multi-agent group-relative policy optimization (arXiv 2508.04652).

Each agent i maximizes the team's return with a group baseline instead of a critic:

    L_i = -1/|B| sum_{s in B} sum_t min(rho_st A_is, clip(rho_st, 1 - eps, 1 + eps) A_is) m_st,
    rho_st = pi_i(y_st | x_s, y_s<t) / pi_old(y_st | x_s, y_s<t),

where A_is is the advantage of sample s within its group (siblings of one
tree node, or the copies of one task instance at one turn) and m_st masks
exactly the sampled completion tokens (EOS in; prompt and padding out). With
one optimizer step per rollout rho = 1 and the gradient is the reference's
-A grad(sum_t log pi). With several steps per rollout (`train_batch_size`
smaller than the rollout) the ratio corrects for the policy having moved.

    learner = MAGRPO(env="coop/LengthRatio-v1", agent_model="path/to/model", num_agents=2,
                     args=MAGRPOConfig(num_generations=4, num_train_epochs=2))
    learner.learn()
    learner.save_model("out")
"""

from __future__ import annotations

import copy
import dataclasses
import time

import torch

from learners.base import Learner, LearnerConfig, seed_everything
from learners.rollout import Rollout, completion_logprobs, per_agent, rollout_metrics, sampled_logprobs

__all__ = [
    "MAGRPO",
    "MAGRPOConfig",
    "MAGRPOTrainer",
    "POLICY_STATS",
    "group_relative_advantages",
    "policy_loss",
    "policy_stats",
]

ADVANTAGE_MODES = ("mean", "raw", "max", "rloo")
POLICY_STATS = ("surrogate", "clip_fraction", "approx_kl", "entropy")


@dataclasses.dataclass
class MAGRPOConfig(LearnerConfig):
    """MAGRPO settings; every field of the reference `MAGRPOConfig` is accepted with its meaning."""

    num_generations: int = 4
    """Samples per agent per node (tree) or copies per task instance (parallel): the group size K >= 2."""
    joint_mode: str = "aligned"
    """"aligned": sample k of every agent forms joint action k; "cross": all K^N combinations (tree only)."""
    rollout_mode: str = "tree"
    """"tree": every node expands K children (the seed system); "parallel": K independent episodes per task."""
    advantage_mode: str = "mean"
    """Baseline: "mean" R - mean(R), "raw" R, "max" R - max(R), "rloo" R - mean of the other samples."""
    advantage_normalization: bool = True
    """Divide group-centred advantages by the group's population std (floored at 1e-6). With it on, the
    four modes differ only by scale and shift inside a group, so use it off to compare baselines."""
    clip_range: float = 0.2
    """PPO clipping of the ratio pi / pi_old when a rollout feeds several optimizer steps."""
    length_normalization: bool = False
    """Average token terms per completion instead of summing them (the reference sums)."""
    reference_kl_enabled: bool = False
    """Shape returns with R' = R - coef * KL(pi || pi_ref) (k3 estimate summed over the completion)."""
    reference_kl_coef: float = 0.1
    """Weight of the KL penalty in R' = R - coef * KL(pi || pi_ref) when `reference_kl_enabled`."""
    reference_devices: str | list[str] | None = None
    """Devices of the frozen reference copies; None: each agent's device."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_group_size()
        if self.joint_mode == "align":
            self.joint_mode = "aligned"
        if self.joint_mode not in ("aligned", "cross"):
            raise ValueError(f"joint_mode must be 'aligned' or 'cross', got {self.joint_mode!r}.")
        if self.rollout_mode not in ("tree", "parallel"):
            raise ValueError(f"rollout_mode must be 'tree' or 'parallel', got {self.rollout_mode!r}.")
        if self.joint_mode == "cross" and self.rollout_mode != "tree":
            raise ValueError("joint_mode='cross' needs rollout_mode='tree'.")
        if self.advantage_mode not in ADVANTAGE_MODES:
            raise ValueError(f"advantage_mode must be one of {', '.join(ADVANTAGE_MODES)}, got {self.advantage_mode!r}.")
        if self.clip_range <= 0:
            raise ValueError(f"clip_range must be > 0, got {self.clip_range}.")
        if self.reference_kl_coef < 0:
            raise ValueError(f"reference_kl_coef must be >= 0, got {self.reference_kl_coef}.")

    def _check_group_size(self, minimum: int = 2) -> None:
        k = self.num_generations
        if isinstance(k, bool) or not isinstance(k, int) or k < minimum:
            raise ValueError(f"num_generations must be >= {minimum} for a group baseline, got {k}. "
                             "Use IAC for single-sample training.")


def group_relative_advantages(
    returns: torch.Tensor, group: torch.Tensor, mode: str = "mean", normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Advantages of `returns` `(A, S)` against the baseline of each sample's group `(S,)`.

    mean: A = R - mean_g(R);  raw: A = R;  max: A = R - max_g(R);
    rloo: A = R - (sum_g(R) - R) / (K_g - 1)  (= mean mode when K_g = 1).
    normalize: A <- (A - mean_g(A)) / max(std_g(A), eps) in groups of K_g > 1 (population std).
    Example: one group, R = [1, 0, 0, 1], mean mode, no normalization -> [0.5, -0.5, -0.5, 0.5].
    """
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"mode must be one of {ADVANTAGE_MODES}, got {mode!r}.")
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
        std = group_mean(centred**2).sqrt().clamp(min=eps)
        adv = torch.where(K > 1, centred / std, adv)
    return adv


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float = 0.2,
    length_normalization: bool = False,
) -> torch.Tensor:
    """Clipped policy-gradient loss over completion tokens: `(S, T)` log-probs, `(S,)` advantages.

    -mean_s sum_t min(rho A_s, clip(rho, 1 +- eps) A_s) m_st with rho = exp(logprobs - old_logprobs);
    with `length_normalization` each completion's sum is divided by its length.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_range, 1 + clip_range) * adv) * mask
    per_sequence = surrogate.sum(-1)
    if length_normalization:
        per_sequence = per_sequence / mask.sum(-1).clamp(min=1)
    return -per_sequence.mean()


def policy_stats(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
    clip_range: float = 0.2,
) -> torch.Tensor:
    """Diagnostics of a policy step `(4,)`, in `POLICY_STATS` order: token means over the mask, no gradients.

    surrogate: min(rho A, clip(rho, 1 +- eps) A), the clipped objective per token; clip_fraction: the
    share of tokens with |rho - 1| > eps; approx_kl: (rho - 1) - log rho, an estimate of KL(pi_old || pi)
    that is >= 0 token by token; entropy: -log pi_old of the sampled tokens, a Monte-Carlo estimate of the
    sampling policy's per-token entropy. At rho = 1 (a rollout's first step) clip_fraction = approx_kl = 0.
    Example: log rho = [log 1.5, 0], A = 1, eps 0.2 -> surrogate (1.2 + 1) / 2, clip_fraction 0.5.
    """
    with torch.no_grad():
        log_ratio = logprobs - old_logprobs
        ratio = log_ratio.exp()
        adv = advantages[:, None]
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_range, 1 + clip_range) * adv)
        terms = torch.stack([surrogate, ((ratio - 1).abs() > clip_range).float(), ratio - 1 - log_ratio,
                             -old_logprobs])
        return (terms * mask).sum((1, 2)) / mask.sum().clamp(min=1)


class MAGRPO(Learner):
    """Multi-agent GRPO on environment rollouts; see the module docstring for the objective."""

    config_class = MAGRPOConfig
    name = "magrpo"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        cfg: MAGRPOConfig = self.args
        self.reference_models = []
        if cfg.reference_kl_enabled:
            devices = cfg.reference_devices
            devices = [devices] * self.num_agents if isinstance(devices, str) else devices or self.devices
            for model, device in zip(self.agents, devices):
                ref = copy.deepcopy(model).to(device).eval()
                ref.requires_grad_(False)
                self.reference_models.append(ref)
        seed_everything(cfg.seed + self.dist.rank)  # ranks sample different completions

    def _validate(self) -> None:
        super()._validate()
        cfg: MAGRPOConfig = self.args
        if cfg.joint_mode == "cross" and cfg.num_generations ** self.num_agents > 4096:
            raise ValueError(
                f"joint_mode='cross' with K={cfg.num_generations} and {self.num_agents} agents makes "
                f"{cfg.num_generations ** self.num_agents} joint actions per node; use 'aligned'."
            )

    def step(self, roots: list) -> dict[str, float]:
        cfg: MAGRPOConfig = self.args
        rollout = self.engine.collect(roots, cfg.num_generations, cfg.rollout_mode, cfg.joint_mode, cfg.discount)
        rollout = self._relabel(rollout)
        self.env_steps += int(self.dist.sum(rollout.num_joint_actions))
        t0 = time.perf_counter()
        groups = torch.unique(rollout.group)
        chunks = [torch.nonzero(torch.isin(rollout.group, groups[part])).squeeze(1)
                  for part in self._minibatches(len(groups))]
        need_old = len(chunks) > 1 or cfg.reference_kl_enabled
        old = [self._old_logprobs(a, rollout) for a in range(self.num_agents)] if need_old else None
        returns, kl = rollout.returns, None
        if cfg.reference_kl_enabled:
            kl = torch.stack([self._reference_kl(rollout, a, old[a]) for a in range(self.num_agents)])
            returns = returns - cfg.reference_kl_coef * kl
        advantages = group_relative_advantages(returns, rollout.group, cfg.advantage_mode, cfg.advantage_normalization)
        metrics = self.update(rollout, advantages, chunks, old)
        metrics["perf/seconds_update"] = time.perf_counter() - t0
        metrics.update(rollout_metrics(rollout, advantages, kl))
        return metrics

    def update(
        self, rollout: Rollout, advantages: torch.Tensor, chunks: list[torch.Tensor], old: list[torch.Tensor] | None
    ) -> dict[str, float]:
        """One optimizer step per agent per minibatch of groups; returns loss and gradient-norm metrics."""
        cfg: MAGRPOConfig = self.args

        def update_agent(a: int) -> dict[str, float]:
            model, optimizer = self.agents[a], self.optimizers[a]

            def loss_fn(micro: torch.Tensor) -> tuple[torch.Tensor, ...]:
                batch = rollout.samples[a].select(micro)
                logprobs = completion_logprobs(model, batch, self.logprob_temperature)
                mask = batch.completion_mask.to(logprobs.device)
                old_lp = logprobs.detach() if old is None else old[a][micro][:, : logprobs.shape[1]].to(logprobs.device)
                adv = advantages[a, micro].to(logprobs.device)
                loss = policy_loss(logprobs, old_lp, adv, mask, cfg.clip_range, cfg.length_normalization)
                return loss, *policy_stats(logprobs, old_lp, adv, mask, cfg.clip_range)

            sums, steps, norms = [0.0] * (1 + len(POLICY_STATS)), 0, []
            for idx in chunks:
                if len(idx) == 0:  # this rank has no groups left: join the others' step with zero gradients
                    norms.append(self._optimizer_step(model, optimizer, None, 0))
                    continue
                norm, *terms = self._accumulated_step(model, optimizer, idx, loss_fn)
                norms.append(norm)
                sums, steps = [x + t for x, t in zip(sums, terms)], steps + 1
            names = ["loss", *POLICY_STATS]
            metrics = {f"train/agent_{a}/{n}": x / max(steps, 1) for n, x in zip(names, sums)}
            metrics.update({f"train/agent_{a}/grad_norm": sum(norms) / len(norms),
                            f"train/agent_{a}/learning_rate": optimizer.param_groups[0]["lr"]})
            return metrics

        # Agents on their own accelerators update concurrently (never under torchrun: collectives stay ordered).
        concurrent = self.engine.concurrent and not self.dist.enabled
        metrics: dict[str, float] = {}
        for part in per_agent(update_agent, self.num_agents, concurrent):
            metrics.update(part)
        return metrics

    # ----- helpers ------------------------------------------------------------------

    def _reference_kl(self, rollout: Rollout, agent: int, logprobs: torch.Tensor) -> torch.Tensor:
        """k3 estimate per sample: sum_t exp(ref - pi) - (ref - pi) - 1 over completion tokens."""
        ref = sampled_logprobs(self.reference_models[agent], rollout.samples[agent],
                               temperature=self.logprob_temperature)
        diff = ref - logprobs
        mask = rollout.samples[agent].completion_mask
        return ((diff.exp() - diff - 1) * mask).sum(-1)


MAGRPOTrainer = MAGRPO
