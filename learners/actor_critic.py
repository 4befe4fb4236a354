"""IAC and MAAC: actor-critic learners whose critics are LLMs with value heads (arXiv 2601.21972).

Each actor i minimizes a (clipped) policy-gradient loss weighted by a
critic's advantage, and each critic regresses its value on GAE(lambda) targets:

    delta_t = r_t + discount * V(s_{t+1}) - V(s_t)          (V(s_{T}) = 0 at the episode's end)
    A_t = sum_k (discount * lambda)^k delta_{t+k},   y_t = A_t + V_old(s_t)
    L_actor = -1/|B| sum_s sum_t min(rho A_s, clip(rho, 1 +- eps) A_s) m_st
    L_critic = value_loss_coef * 1/|B| sum_s max((y_s - V_s)^2, (y_s - V_clip,s)^2),
    V_clip = V_old + clip(V - V_old, +- value_clip_range)

lambda = 0 gives the TD(0) targets y_t = r_t + discount * V(s_{t+1}) of the reference
library, CoMLRL 1.4.3 (whose `IACTrainer` and `MAACTrainer` API these learners mirror).

- **IAC**: every agent has its own critic. With `use_separate_critic=True` it is
  a separate causal LM plus a value head reading the actor's token ids; with
  `False`, the head sits on the actor's backbone and one forward gives both the
  policy's log-probs and the value (at the last prompt token).
- **MAAC**: one centralized critic reads the joint text of the environment's
  `state()` (every agent's observation), tokenized with agent 0's tokenizer,
  and is updated once per minibatch (not once per agent).
- `critic_type="v"` values the state; `"q"` values the state and the sampled
  (joint) action, read at the last completion token (a SARSA-style target).

Episodes are played in parallel mode: `num_generations` copies of each task instance, one sample per agent per turn.
The settings (`IACConfig`, `MAACConfig`) live in `learners.actor_critic_config`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import torch
from torch import nn

from learners.actor_critic_config import ActorCriticConfig, IACConfig, MAACConfig
from learners.loop.data import seed_everything
from learners.loop.learner import Learner
from learners.loop.losses import POLICY_STATS, policy_terms, reference_kl, value_loss
from learners.loop.metrics import MeanMetrics, rollout_metrics, update_metrics
from learners.loop.optim import PolicyBatch, accumulate_gradients, adamw, gradient_step, policy_step
from learners.models.agents import resolve_sources, save_gathered
from learners.models.critics import CausalLMWithValueHead, ValueHead, check_critic_tokenizer, load_critics
from learners.parallel.fsdp import pass_sync
from learners.parallel.placement import resolve_devices
from learners.reinforce import acting_group_advantages
from learners.rollout import Rollout, SampleBatch
from learners.rollout.backends import rollout_correction
from learners.rollout.scoring import RolloutCorrection, token_logprobs
from learners.rollout.settings import Number
from rewards.models import encode_joint_texts, joint_text, min_joint_length

__all__ = [
    "CausalLMWithValueHead",
    "IAC",
    "IACConfig",
    "IACTrainer",
    "MAAC",
    "MAACConfig",
    "MAACTrainer",
    "ValueHead",
    "gae_advantages",
    "normalize_per_turn",
    "value_loss",
]


# ----- pure functions ---------------------------------------------------------------------------


def gae_advantages(
    rewards: torch.Tensor, values: torch.Tensor, next_index: torch.Tensor, turn: torch.Tensor,
    discount: float = 1.0, lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(lambda) advantages and value targets for episodes flattened into rows.

    Args:
        rewards, values: `(A, S)` per agent (or `(1, S)` for a joint critic).
        next_index: `(S,)` row of the episode's next turn, -1 at its end (no bootstrap).
        turn: `(S,)` turn of each row.
    Returns:
        `(advantages, targets)`, both `(A, S)`, with targets = advantages + values.
    Example: r = [1, 2], V = [0.5, 1.0] on one two-turn episode, discount 0.9, lambda 0.5:
        delta = [1 + 0.9 * 1.0 - 0.5, 2 - 1.0] = [1.4, 1.0], A = [1.4 + 0.45 * 1.0, 1.0] = [1.85, 1.0].
    """
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    has_next = next_index >= 0
    nxt = next_index.clamp(min=0)
    next_values = torch.where(has_next, values[:, nxt], torch.zeros_like(values))
    delta = rewards + discount * next_values - values
    for t in sorted(turn.unique().tolist(), reverse=True):
        rows = turn == t
        later = torch.where(has_next, adv[:, nxt], torch.zeros_like(adv))
        adv[:, rows] = delta[:, rows] + discount * lam * later[:, rows]
    return adv, adv + values


def normalize_per_turn(adv: torch.Tensor, turn: torch.Tensor, acted: torch.Tensor | None = None,
                       eps: float = 1e-6) -> torch.Tensor:
    """(A - mean) / max(std, eps) per agent over the rows of each turn at which it was to move (population std).

    `adv` `(A, S)`, `turn` `(S,)`, `acted` `(A, S)` (None: every agent moves at every row). The rows where
    an agent waited are not trained on: they get 0 and move neither the mean nor the std. A turn with one
    acting row gets 0 there, as the formula says: nothing to compare it with (so IAC and MAAC learn nothing
    from a rollout of one episode with `advantage_normalization` on). The rule is MAGRPO's
    (`learners.reinforce.acting_group_advantages`) with the turn as the group and the GAE advantage as the return.
    Example: adv [[1, 3, 7.5]], turn [0, 0, 1] -> [[-1, 1, 0]].
    """
    return acting_group_advantages(adv, turn, acted, mode="raw", normalize=True, eps=eps)


# ----- the shared learner ------------------------------------------------------------------


@dataclasses.dataclass
class UpdateData:
    """What every minibatch step of one update reads: the `rollout`, the actors' advantages `adv` `(A, S)`,
    pi_old (`old_logprobs`, per agent; None: ratio 1) or the engine `correction` that gives it and weighs the
    advantages, and the critics' `old_values` and `targets` `(C, S)`."""

    rollout: Rollout
    adv: torch.Tensor
    old_logprobs: list[torch.Tensor] | None
    correction: RolloutCorrection | None
    old_values: torch.Tensor
    targets: torch.Tensor


class ActorCritic(Learner):
    """What IAC and MAAC share: the rollout, GAE and the update loop; their critics differ.

    A subclass provides `critic_values(rollout)` `(C, S)` (C = agents for IAC, 1 for MAAC),
    `critic_rewards(rewards)` `(C, S)` and `minibatch_step(data, idx)`, one optimizer step of every actor
    and critic on a minibatch of samples.
    """

    def step(self, roots: list) -> dict[str, float]:
        """One rollout of the batch `roots`, GAE(lambda) advantages and value targets, one update."""
        cfg: ActorCriticConfig = self.args
        rollout = self.collect(roots, cfg.num_generations)
        t0 = time.perf_counter()
        old_logprobs = [self.old_logprobs(a, rollout) for a in range(self.num_agents)] if cfg.reference_kl_enabled else None
        kl = (reference_kl(self.reference_models, rollout.samples, old_logprobs, self.scoring_supports())
              if cfg.reference_kl_enabled else None)
        rewards = rollout.rewards if kl is None else rollout.rewards - cfg.reference_kl_coef * kl
        old_values = self.critic_values(rollout)  # (C, S)
        adv, targets = gae_advantages(self.critic_rewards(rewards), old_values, rollout.next_index, rollout.turn,
                                      cfg.discount, cfg.gae_lambda)
        actor_adv = adv if adv.shape[0] == self.num_agents else adv.expand(self.num_agents, -1)
        if cfg.advantage_normalization:
            actor_adv = normalize_per_turn(actor_adv, rollout.turn, rollout.acted)
        passes = [self.minibatches(rollout.num_samples, p) for p in range(cfg.ppo_epochs)]
        correction = rollout_correction(self, rollout, passes[0][0])  # an engine's samples: w_s and pi_old
        metrics = self.update(rollout, actor_adv, old_values, targets, passes, old_logprobs, correction)
        metrics.update(rollout_metrics(rollout, actor_adv, kl))
        metrics.update(update_metrics(time.perf_counter() - t0, correction))
        for c in range(old_values.shape[0]):
            metrics[f"train/critic_{c}/value_mean"] = float(old_values[c].mean())
            metrics[f"train/critic_{c}/target_mean"] = float(targets[c].mean())
        return metrics

    def update(self, rollout: Rollout, adv: torch.Tensor, old_values: torch.Tensor, targets: torch.Tensor,
               passes: list[list[torch.Tensor]], old_logprobs: list[torch.Tensor] | None = None,
               correction: RolloutCorrection | None = None) -> dict[str, float]:
        """`passes` over one rollout (`ppo_epochs` of them, each its own shuffle into minibatches of samples);
        one optimizer step of every actor and critic per minibatch. Returns each metric averaged over the
        steps. An engine-sampled rollout's `correction` weighs the advantages and gives pi_old."""
        needs_old = correction is None and old_logprobs is None and sum(len(chunks) for chunks in passes) > 1
        if needs_old:  # the policy moves: ratio needed
            old_logprobs = [self.old_logprobs(a, rollout) for a in range(self.num_agents)]
        data = UpdateData(rollout, adv, old_logprobs, correction, old_values, targets)
        means = MeanMetrics()
        for chunks in passes:
            for idx in chunks:
                means.add(self.minibatch_step(data, idx))
        return means.means()

    def actor_step(self, m: int, data: "UpdateData", idx: torch.Tensor) -> dict[str, float]:
        """One optimizer step of model `m` on the samples `idx` of every agent it plays."""
        agents, rollout = self.model_agents()[m], data.rollout
        parts = [PolicyBatch(rollout.samples[a], rollout.acting(a, idx), data.adv[a],
                             None if data.old_logprobs is None else data.old_logprobs[a],
                             self.engine.backend.support(a), data.correction, a) for a in agents]
        metrics = policy_step(self.agents[agents[0]], self.optimizers[m], parts, self.args, self.dist)
        return {f"train/agent_{a}/{name}": value for a in agents for name, value in metrics.items()}

    def critic_step(self, c: int, data: "UpdateData", idx: torch.Tensor) -> dict[str, float]:
        """One optimizer step of critic `c` on the samples `idx`."""
        cfg: ActorCriticConfig = self.args
        critic, optimizer = self.critics[c], self.critic_optimizers[c]

        def loss_fn(micro: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            values = self.values_with_grad(c, data.rollout, micro)
            loss = self.value_terms(c, micro, values, data.old_values, data.targets)
            return cfg.value_loss_coef * loss, loss

        optimizer.zero_grad(set_to_none=True)
        sync = pass_sync(critic, self.dist, len(idx))  # FSDP: every rank runs as many passes
        terms = accumulate_gradients(idx, loss_fn, cfg.gradient_accumulation_steps, sync)  # forward + backward
        grad_norm = gradient_step(critic, optimizer, len(idx), cfg.max_grad_norm, self.dist)
        return {f"train/critic_{c}/grad_norm": grad_norm, **({f"train/critic_{c}/loss": terms[1]} if terms else {})}

    def value_terms(self, c: int, idx: torch.Tensor, values: torch.Tensor, old_values: torch.Tensor,
                    targets: torch.Tensor) -> torch.Tensor:
        """Clipped value loss of critic `c`'s `values` on the samples `idx` (`old_values`, `targets`: `(C, S)`)."""
        old, target = old_values[c, idx].to(values.device), targets[c, idx].to(values.device)
        return value_loss(values, old, target, self.args.value_clip_range)

    def _load_critics(self, sources: list[Any], count: int, hidden_dim: int | None, per_seat: bool = False) -> None:
        """Load the critics (value heads on) on their devices (IAC's per seat), their optimizers and schedules."""
        cfg: ActorCriticConfig = self.args
        seats = dict(count=self.num_seats, seats=self.seats) if per_seat else dict(count=count)
        devices = resolve_devices(cfg.critic_devices, what="critic", default=self.devices, **seats)
        self.critics = load_critics(sources, devices, self.model_config, hidden_dim, cfg.gradient_checkpointing,
                                    self.sharding)  # under FSDP folders load as skeletons (`Sharding.build`)
        self._critic_optimizers()

    def _critic_optimizers(self) -> None:
        cfg: ActorCriticConfig = self.args
        lr = float(cfg.critic_learning_rate if cfg.critic_learning_rate is not None else cfg.agent_learning_rate)
        self.critic_optimizers = [adamw(c.parameters(), lr, cfg.weight_decay) for c in self.critics]
        self.critic_schedulers = [self._scheduler(o) for o in self.critic_optimizers]

    def checkpoint_modules(self) -> dict[str, nn.Module]:
        modules = super().checkpoint_modules()
        modules.update({f"critic_{i}": c for i, c in enumerate(self.critics)})
        return modules

    def checkpoint_optimizers(self) -> tuple[list[torch.optim.Optimizer], list[Any]]:
        return (list(self.optimizers) + list(self.critic_optimizers),
                list(self.schedulers) + list(self.critic_schedulers))


# ----- IAC ---------------------------------------------------------------------------------------


class IAC(ActorCritic):
    """Independent actor-critic: every agent has a critic of its own, which reads only that agent's input.

    Follows the independent actor-critic of arXiv 2601.21972, with LLM critics. Actor i minimizes a clipped
    policy-gradient loss weighted by its critic's GAE(lambda) advantage A, and its critic regresses its value
    V on the targets y_t = A_t + V_old(s_t):

        L_actor = -1/|B| sum_s sum_t min(rho A_s, clip(rho, 1 +- eps) A_s) m_st
        L_critic = value_loss_coef * 1/|B| sum_s max((y_s - V_s)^2, (y_s - V_clip,s)^2)

    A critic is a causal LM with a fresh scalar value head, reading the agent's prompt (`critic_type="v"`:
    at its last token) or prompt and completion ("q"). With `use_separate_critic=True` (the default) each
    agent's critic is an LM of its own, on `critic_devices`: pass `critic_model` (an id or folder, loaded once
    per agent, or a loaded model, copied for every agent after the first) or `critics` (one entry per trained
    agent); one of the two is required. With `use_separate_critic=False` the head sits on the actor's own backbone, one forward
    gives log-probs and value, and neither may be passed. Settings: `IACConfig`; the constructor is
    `Learner`'s.
    """

    config_class = IACConfig

    def _validate(self) -> None:
        cfg: IACConfig = self.args
        if cfg.peft_config is not None and not cfg.use_separate_critic:
            raise ValueError("peft_config needs use_separate_critic=True for IAC: a value head on a LoRA actor's "
                             "backbone is not supported.")
        if not cfg.use_separate_critic and any(len(agents) > 1 for agents in self.model_agents()):
            raise ValueError("self-play (one model in several seats) needs use_separate_critic=True for IAC: a "
                             "value head on the shared backbone would have to value every seat at once.")
        given = self.critic_model is not None or self.critic_sources is not None
        if not cfg.use_separate_critic and given:
            raise ValueError("critics can only be provided when use_separate_critic=True: with "
                             "use_separate_critic=False each actor's backbone carries its value head.")
        if cfg.use_separate_critic:
            if not given:
                raise ValueError("Either critic_model or critics must be provided when use_separate_critic=True "
                                 "(or set use_separate_critic=False to put value heads on the actors).")
            resolve_sources("critic", self.critic_model, self.critic_sources, self.num_agents, broadcast_objects=True)

    def _setup_models(self) -> None:
        cfg: IACConfig = self.args
        seed_everything(cfg.seed)  # value heads start identical across runs and ranks
        if cfg.use_separate_critic:
            sources = resolve_sources("critic", self.critic_model, self.critic_sources, self.num_agents,
                                      broadcast_objects=True)
            self._load_critics(sources, self.num_agents, cfg.critic_value_head_hidden_dim, per_seat=True)
            for i in range(self.num_agents):
                check_critic_tokenizer(self.critics[i], sources[i], self.tokenizers[i], i, f"critic {i}",
                                       f"agent {i}'s token ids")
        else:
            for agent in self.agents:
                CausalLMWithValueHead.attach(agent, cfg.value_head_hidden_dim)
            self.critics = []
            self._critic_optimizers()
        seed_everything(cfg.seed + self.dist.rank)  # ranks sample different completions

    def critic_values(self, rollout: Rollout) -> torch.Tensor:
        with torch.no_grad():
            return torch.stack([self.values(a, rollout.samples[a])[0].cpu() for a in range(self.num_agents)])

    def critic_rewards(self, rewards: torch.Tensor) -> torch.Tensor:
        """Each agent's critic learns its agent's rewards `(A, S)`."""
        return rewards

    def values(self, a: int, batch: SampleBatch, with_logprobs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Values `(S,)` of agent a's critic on its samples (and the actor's log-probs for a shared head)."""
        cfg: IACConfig = self.args
        model = self.critics[a] if cfg.use_separate_critic else self.agents[a]
        device = model.device
        ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1).to(device)
        mask = torch.cat([batch.prompt_mask, batch.completion_mask], 1).to(device)
        hidden = CausalLMWithValueHead.hidden_states(model, ids, mask)
        P = batch.prompt_ids.shape[1]
        if cfg.critic_type == "v":
            at = torch.full((ids.shape[0],), P - 1, device=device)
        else:
            at = P + batch.completion_mask.sum(1).to(device) - 1
        values = model.value_head(hidden[torch.arange(ids.shape[0], device=device), at])
        logprobs = None
        if with_logprobs:
            T = batch.completion_ids.shape[1]
            logits = model.get_output_embeddings()(hidden[:, P - 1:P + T - 1])
            logprobs = token_logprobs(logits, batch.completion_ids.to(device), self.engine.backend.support(a))
            logprobs = logprobs * batch.completion_mask.to(device)
        return values.float(), logprobs

    def values_with_grad(self, c: int, rollout: Rollout, idx: torch.Tensor) -> torch.Tensor:
        """Values `(len(idx),)` of agent c's separate critic on the samples `idx`, with gradients."""
        return self.values(c, rollout.samples[c].select(idx))[0]

    def minibatch_step(self, data: UpdateData, idx: torch.Tensor) -> dict[str, float]:
        """One optimizer step of every actor and its critic (or shared value head) on the samples `idx`."""
        metrics: dict[str, float] = {}
        if self.args.use_separate_critic:
            for m in range(len(self.optimizers)):
                metrics.update(self.actor_step(m, data, idx))
            for a in range(self.num_agents):
                metrics.update(self.critic_step(a, data, idx))
        else:  # no self-play here (`_validate`): model a is agent a
            for a in range(self.num_agents):
                metrics.update(self.shared_step(a, data, idx))
        return metrics

    def shared_step(self, a: int, data: UpdateData, idx: torch.Tensor) -> dict[str, float]:
        """One optimizer step of actor `a` and its value head: one forward gives log-probs and values, and the
        loss is policy loss + value_loss_coef * value loss.

        The value loss averages over all rows of `idx`, the policy loss over the rows at which the agent was
        to move (turn-taking): their advantages are scaled by |idx| / |acting rows| and the others' set to 0,
        which is exact because the clipped surrogate is positively homogeneous in the advantage.
        """
        cfg: IACConfig = self.args
        model, optimizer, rollout = self.agents[a], self.optimizers[a], data.rollout
        part = PolicyBatch(rollout.samples[a], idx, data.adv[a],
                           None if data.old_logprobs is None else data.old_logprobs[a],
                           self.engine.backend.support(a), data.correction, a)
        acting = len(rollout.acting(a, idx))
        weight = (torch.ones(rollout.num_samples) if rollout.acted is None
                  else rollout.acted[a].float() * (len(idx) / max(acting, 1)))

        def loss_fn(micro: torch.Tensor) -> tuple[torch.Tensor, ...]:
            batch = rollout.samples[a].select(micro)
            values, logprobs = self.values(a, batch, with_logprobs=True)
            critic_loss = self.value_terms(a, micro, values, data.old_values, data.targets)
            advantages, old = part.terms(micro, logprobs)
            actor_loss, *stats = policy_terms(logprobs, old, advantages * weight[micro], batch.completion_mask,
                                              cfg.clip_range, cfg.length_normalization)
            return actor_loss + cfg.value_loss_coef * critic_loss, actor_loss, critic_loss, *stats

        optimizer.zero_grad(set_to_none=True)
        sync = pass_sync(model, self.dist, len(idx))  # FSDP: every rank runs as many passes
        terms = accumulate_gradients(idx, loss_fn, cfg.gradient_accumulation_steps, sync)  # forward + backward
        grad_norm = gradient_step(model, optimizer, len(idx), cfg.max_grad_norm, self.dist)
        metrics = {f"train/agent_{a}/grad_norm": grad_norm, f"train/agent_{a}/learning_rate": optimizer.param_groups[0]["lr"]}
        if terms:
            _, actor_loss, critic_loss, *stats = terms
            metrics.update({f"train/agent_{a}/loss": actor_loss, f"train/critic_{a}/loss": critic_loss,
                            **{f"train/agent_{a}/{name}": x for name, x in zip(POLICY_STATS, stats)}})
        return metrics

    def _save_extra_models(self, output_dir: str) -> None:
        """Separate critics go to `agent_{seat}/critic/` (`value_head.pt` in it); heads are saved with the agent."""
        for i, critic in enumerate(self.critics):
            path = os.path.join(output_dir, self.seat_name(i), "critic")
            save_gathered(critic, path, self.tokenizers[i], self.sharding)


# ----- MAAC --------------------------------------------------------------------------------------


class MAAC(ActorCritic):
    """Multi-agent actor-critic: the agents share one centralized critic that reads every agent's observation.

    Follows the centralized-critic actor-critic of arXiv 2601.21972, with an LLM critic. The actors' loss is
    IAC's, each weighted by the one critic's GAE(lambda) advantage; the critic regresses the team's value (its
    reward is the mean of the agents' rewards) on GAE targets, one optimizer step per minibatch.

    The critic is a causal LM with a fresh scalar value head, reading the joint text of the env's `state()`
    (`critic_type="v"`) or of the state and the joint action ("q"), tokenized with agent 0's tokenizer and cut
    to `critic_max_length`. It is required: pass `critic_model` (an id, a folder or a loaded model) or
    `critics` (a list of one). Its head's hidden size is `model_config["critic_value_head_hidden_dim"]` (None:
    a linear head); it sits on `critic_devices`. Settings: `MAACConfig`; the constructor is `Learner`'s.
    """

    config_class = MAACConfig

    def _validate(self) -> None:
        if self.critic_model is None and self.critic_sources is None:
            raise ValueError("Either critic_model or critics must be provided for MAAC (one centralized critic).")
        if self.critic_sources is not None and len(list(self.critic_sources)) != 1:
            raise ValueError(f"critics length ({len(list(self.critic_sources))}) must match 1 critic: MAAC has "
                             "one centralized critic.")
        resolve_sources("critic", self.critic_model, self.critic_sources, 1)

    def _setup_models(self) -> None:
        cfg: MAACConfig = self.args
        seed_everything(cfg.seed)  # the value head starts identical across runs and ranks
        sources = resolve_sources("critic", self.critic_model, self.critic_sources, 1)
        self._load_critics(sources, 1, self.model_config.get("critic_value_head_hidden_dim"))
        check_critic_tokenizer(self.critics[0], sources[0], self.tokenizers[0], 0, "MAAC's critic",
                               "the joint text tokenized with agent 0's tokenizer")
        shortest = min_joint_length(self.tokenizers[0], self.env.possible_agents)
        if cfg.critic_max_length is not None and cfg.critic_max_length < shortest:
            raise ValueError(f"critic_max_length={cfg.critic_max_length} cannot hold every agent's answer header and "
                             f"first tokens ({shortest} tokens with agent 0's tokenizer): the critic would value "
                             f"answers it cannot see. Raise it to at least {shortest}, or None to read all of it.")
        seed_everything(cfg.seed + self.dist.rank)  # ranks sample different completions

    def joint_texts(self, rollout: Rollout, idx: torch.Tensor) -> list[str]:
        """The critic's input: env.state() (V), plus the sampled joint action (Q), as the reward model reads it."""
        texts = [rollout.states[i] for i in idx.tolist()]
        if self.args.critic_type == "q":
            texts = [joint_text(t, rollout.joint_action(i)) for t, i in zip(texts, idx.tolist())]
        return texts

    def joint_values(self, texts: list[str]) -> torch.Tensor:
        """Values of joint texts, each cut block by block to `critic_max_length` tokens (as the reward model cuts)."""
        critic = self.critics[0]
        ids, mask = encode_joint_texts(self.tokenizers[0], texts, self.args.critic_max_length)
        hidden = CausalLMWithValueHead.hidden_states(critic, ids.to(critic.device), mask.to(critic.device))
        return critic.value_head(hidden[:, -1]).float()

    def critic_values(self, rollout: Rollout) -> torch.Tensor:
        with torch.no_grad():
            return self.joint_values(self.joint_texts(rollout, torch.arange(rollout.num_samples))).cpu()[None]

    def critic_rewards(self, rewards: torch.Tensor) -> torch.Tensor:
        """The team's reward `(1, S)`: the mean over agents of `rewards` `(A, S)` (the joint reward in
        cooperative tasks)."""
        return rewards.mean(0, keepdim=True)

    def values_with_grad(self, c: int, rollout: Rollout, idx: torch.Tensor) -> torch.Tensor:
        """Values `(len(idx),)` of the centralized critic (c = 0) on the samples `idx`, with gradients."""
        return self.joint_values(self.joint_texts(rollout, idx))

    def minibatch_step(self, data: UpdateData, idx: torch.Tensor) -> dict[str, float]:
        """One optimizer step of every actor, then one of the centralized critic, on the samples `idx`."""
        metrics: dict[str, float] = {}
        for m in range(len(self.optimizers)):
            metrics.update(self.actor_step(m, data, idx))
        metrics.update(self.critic_step(0, data, idx))
        return metrics

    def _save_extra_models(self, output_dir: str) -> None:
        save_gathered(self.critics[0], os.path.join(output_dir, "critic"), self.tokenizers[0], self.sharding)


IACTrainer = IAC
MAACTrainer = MAAC
