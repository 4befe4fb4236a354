"""IAC and MAAC: actor-critic learners whose critics are LLMs with value heads (arXiv 2601.21972).

Each actor i minimizes a (clipped) policy-gradient loss weighted by a
critic's advantage, and each critic regresses its value on GAE(lambda) targets:

    delta_t = r_t + discount * V(s_{t+1}) - V(s_t)          (V(s_{T}) = 0 at the episode's end)
    A_t = sum_k (discount * lambda)^k delta_{t+k},   y_t = A_t + V_old(s_t)
    L_actor = -1/|B| sum_s sum_t min(rho A_s, clip(rho, 1 +- eps) A_s) m_st
    L_critic = value_loss_coef * 1/|B| sum_s max((y_s - V_s)^2, (y_s - V_clip,s)^2),
    V_clip = V_old + clip(V - V_old, +- value_clip_range)

lambda = 0 gives the reference's TD(0) targets y_t = r_t + discount * V(s_{t+1}).

- **IAC**: every agent has its own critic. With `use_separate_critic=True` it is
  a separate causal LM plus a value head reading the actor's token ids; with
  `False`, the head sits on the actor's backbone and one forward gives both the
  policy's log-probs and the value (at the last prompt token).
- **MAAC**: one centralized critic reads the joint text of the environment's
  `state()` (every agent's observation), tokenized with agent 0's tokenizer,
  and is updated once per minibatch (not once per agent).
- `critic_type="v"` values the state; `"q"` values the state and the sampled
  (joint) action, read at the last completion token (a SARSA-style target).

Episodes are played in parallel mode: `num_generations` independent copies of
each task instance, one sample per agent per turn.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from typing import Any

import torch
from torch import nn

from learners.agents import load_causal_lm, model_name, resolve_sources
from learners.base import (
    Learner,
    LearnerConfig,
    enable_gradient_checkpointing,
    save_pretrained_with_head,
    seed_everything,
)
from learners.reinforce import POLICY_STATS, policy_loss, policy_stats
from learners.rollout import Rollout, SampleBatch, completion_logprobs, rollout_metrics
from learners.sampling import token_logprobs
from rewards.models import encode_joint_texts

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
    "value_loss",
]


# ----- configs ----------------------------------------------------------------------------


@dataclasses.dataclass
class _ActorCriticConfig(LearnerConfig):
    """Fields shared by IAC and MAAC (the reference's names and meanings)."""

    num_train_epochs: int = 40
    num_generations: int = 1
    """Independent episodes per task instance (parallel copies); 1 as in the reference."""
    rollout_buffer_size: int = 8
    top_k: int | None = None
    critic_learning_rate: float | None = 5e-6
    """AdamW learning rate of the critics; None uses `agent_learning_rate`."""
    critic_type: str = "v"
    """"v": V(s) at the last prompt token; "q": Q(s, a) at the last completion token."""
    value_loss_coef: float = 0.6
    """Weight of the value loss: added to the policy loss for a shared head; scales a critic's own loss."""
    value_clip_range: float | None = 0.2
    """Clip the new value to V_old +- this in the critic loss (every critic type); None disables."""
    advantage_normalization: bool = True
    """Normalize advantages per agent and turn (population std, floored at 1e-6)."""
    gae_lambda: float = 0.95
    """GAE(lambda) for multi-turn episodes; 0 reproduces the reference's TD(0) targets."""
    ppo_epochs: int = 1
    """Passes over each rollout; more than one (or several minibatches) uses the clipped ratio."""
    clip_range: float = 0.2
    """PPO clipping of the ratio pi / pi_old when a rollout feeds several optimizer steps."""
    length_normalization: bool = False
    """Average token terms per completion instead of summing them (the reference sums)."""
    critic_devices: str | list[str] | None = None
    """Device of the critic(s); None: the agents' devices."""
    reference_kl_enabled: bool = False
    """Accepted for compatibility with the reference config; reference KL is implemented in MAGRPO only."""
    reference_kl_coef: float = 0.1
    """Accepted for compatibility with the reference config; unused (reference KL is MAGRPO's)."""
    reference_devices: str | list[str] | None = None
    """Accepted for compatibility with the reference config; unused."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.num_generations, bool) or not isinstance(self.num_generations, int) or self.num_generations < 1:
            raise ValueError(f"num_generations must be >= 1, got {self.num_generations}.")
        if self.critic_type not in ("v", "q"):
            raise ValueError(f"critic_type must be 'v' or 'q', got {self.critic_type!r}.")
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError(f"gae_lambda must be in [0, 1], got {self.gae_lambda}.")
        for name in ("value_loss_coef", "clip_range"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}.")
        if self.value_clip_range is not None and self.value_clip_range <= 0:
            raise ValueError(f"value_clip_range must be > 0 or None, got {self.value_clip_range}.")
        if self.critic_learning_rate is not None and self.critic_learning_rate <= 0:
            raise ValueError(f"critic_learning_rate must be > 0 or None, got {self.critic_learning_rate}.")
        if isinstance(self.ppo_epochs, bool) or not isinstance(self.ppo_epochs, int) or self.ppo_epochs < 1:
            raise ValueError(f"ppo_epochs must be >= 1, got {self.ppo_epochs}.")
        if self.reference_kl_enabled:
            raise ValueError("reference_kl_enabled is implemented for MAGRPO only; use MAGRPO or leave it False.")


@dataclasses.dataclass
class IACConfig(_ActorCriticConfig):
    """IAC settings; every field of the reference `IACConfig` is accepted with its meaning."""

    use_separate_critic: bool = True
    """True: one critic LLM per agent; False: a value head on each actor's backbone."""
    value_head_hidden_dim: int | None = None
    """Hidden size of the shared (actor-backbone) value head; None: a linear head."""
    critic_value_head_hidden_dim: int | None = None
    """Hidden size of the separate critics' value heads; None: a linear head."""


@dataclasses.dataclass
class MAACConfig(_ActorCriticConfig):
    """MAAC settings; the critic head size comes from `model_config["critic_value_head_hidden_dim"]`."""

    critic_max_length: int | None = None
    """Tokens of the joint text the centralized critic reads, keeping the last ones; None: all of it.
    Separate from `max_prompt_length` (one agent's prompt): the joint text holds every agent's."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.critic_max_length is not None and (isinstance(self.critic_max_length, bool)
                                                   or not isinstance(self.critic_max_length, int)
                                                   or self.critic_max_length < 1):
            raise ValueError(f"critic_max_length must be a positive int or None, got {self.critic_max_length!r}.")


# ----- value heads ------------------------------------------------------------------------


class ValueHead(nn.Module):
    """Scalar value of a hidden state: Linear(d, 1), or Linear(d, h) -> Tanh -> Linear(h, 1)."""

    def __init__(self, input_dim: int, hidden_dim: int | None = None) -> None:
        super().__init__()
        if hidden_dim:
            self.net = nn.Sequential(nn.Linear(input_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, 1))
        else:
            self.net = nn.Sequential(nn.Linear(input_dim, 1))
        for layer in self.net:
            if isinstance(layer, nn.Linear):
                nn.init.normal_(layer.weight, std=0.02)
                nn.init.zeros_(layer.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.net(hidden).squeeze(-1)


class CausalLMWithValueHead:
    """Namespace for attaching a `ValueHead` to an HF causal LM as `model.value_head`.

    The model stays a normal HF model (it still generates, saves and moves like
    one); the head is a submodule, so its parameters train with the model's
    optimizer and appear in its state dict under `value_head.*`.
    """

    @staticmethod
    def attach(model: nn.Module, hidden_dim: int | None = None) -> nn.Module:
        size = getattr(model.config, "hidden_size", None) or getattr(model.config, "n_embd", None)
        if size is None:
            raise ValueError(f"cannot find the hidden size of {type(model).__name__} (no hidden_size or n_embd).")
        param = next(model.parameters())
        model.value_head = ValueHead(size, hidden_dim).to(device=param.device, dtype=param.dtype)
        return model

    @staticmethod
    def hidden_states(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Last-layer hidden states `(S, L, d)` of the backbone, positions following the mask."""
        positions = (attention_mask.cumsum(1) - 1).clamp(min=0)
        out = model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                               use_cache=False)
        return out.last_hidden_state


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


def normalize_per_turn(adv: torch.Tensor, turn: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(A - mean) / max(std, eps) per agent over the rows of each turn (population std)."""
    out = adv.clone()
    for t in turn.unique().tolist():
        rows = turn == t
        x = adv[:, rows]
        if x.shape[1] > 1:
            out[:, rows] = (x - x.mean(1, keepdim=True)) / x.std(1, unbiased=False, keepdim=True).clamp(min=eps)
    return out


def value_loss(values: torch.Tensor, old_values: torch.Tensor, targets: torch.Tensor, clip: float | None) -> torch.Tensor:
    """mean max((y - V)^2, (y - V_clip)^2), V_clip = V_old + clip(V - V_old, +-clip); plain MSE when clip is None."""
    loss = (targets - values) ** 2
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        loss = torch.maximum(loss, (targets - clipped) ** 2)
    return loss.mean()


# ----- the shared learner ------------------------------------------------------------------


class _ActorCritic(Learner):
    """What IAC and MAAC share: the rollout, GAE, the actor update; critics differ."""

    def step(self, roots: list) -> dict[str, float]:
        cfg: _ActorCriticConfig = self.args
        rollout = self.engine.collect(roots, cfg.num_generations, "parallel", "aligned", cfg.discount)
        rollout = self._relabel(rollout)
        self.env_steps += int(self.dist.sum(rollout.num_joint_actions))
        t0 = time.perf_counter()
        old_values = self.critic_values(rollout)  # (C, S): C = agents (IAC) or 1 (MAAC)
        rewards = self.critic_rewards(rollout)
        adv, targets = gae_advantages(rewards, old_values, rollout.next_index, rollout.turn, cfg.discount,
                                      cfg.gae_lambda)
        actor_adv = adv if adv.shape[0] == self.num_agents else adv.expand(self.num_agents, -1)
        if cfg.advantage_normalization:
            actor_adv = normalize_per_turn(actor_adv, rollout.turn)
        passes = [self._minibatches(rollout.num_samples, p) for p in range(cfg.ppo_epochs)]  # reshuffled each pass
        reuse = sum(len(chunks) for chunks in passes) > 1
        old_logprobs = [self._old_logprobs(a, rollout) for a in range(self.num_agents)] if reuse else None
        metrics: dict[str, float] = {}
        for chunks in passes:
            for idx in chunks:
                metrics.update(self.update(rollout, idx, actor_adv, old_logprobs, old_values, targets))
        metrics["perf/seconds_update"] = time.perf_counter() - t0
        metrics.update(rollout_metrics(rollout, actor_adv))
        for c in range(old_values.shape[0]):
            metrics[f"train/critic_{c}/value_mean"] = float(old_values[c].mean())
            metrics[f"train/critic_{c}/target_mean"] = float(targets[c].mean())
        return metrics

    def actor_step(self, a: int, rollout: Rollout, idx: torch.Tensor, adv: torch.Tensor,
                   old_logprobs: list[torch.Tensor] | None) -> dict[str, float]:
        """One optimizer step of actor `a` on the samples `idx` (`adv`: `(A, S)`)."""
        model, optimizer = self.agents[a], self.optimizers[a]

        def loss_fn(micro: torch.Tensor) -> tuple[torch.Tensor, ...]:
            batch = rollout.samples[a].select(micro)
            logprobs = completion_logprobs(model, batch, self.logprob_temperature)
            return self._policy_loss(a, micro, batch, logprobs, adv, old_logprobs)

        norm, loss, *stats = self._accumulated_step(model, optimizer, idx, loss_fn)
        return {f"train/agent_{a}/loss": loss, f"train/agent_{a}/grad_norm": norm,
                f"train/agent_{a}/learning_rate": optimizer.param_groups[0]["lr"],
                **{f"train/agent_{a}/{name}": x for name, x in zip(POLICY_STATS, stats)}}

    def critic_step(self, c: int, rollout: Rollout, idx: torch.Tensor, old_values: torch.Tensor,
                    targets: torch.Tensor) -> dict[str, float]:
        """One optimizer step of critic `c` on the samples `idx` (`old_values`, `targets`: `(C, S)`)."""
        coef = self.args.value_loss_coef

        def loss_fn(micro: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            loss = self._value_loss(c, micro, self._critic_values(c, rollout, micro), old_values, targets)
            return coef * loss, loss

        norm, _, loss = self._accumulated_step(self.critics[c], self.critic_optimizers[c], idx, loss_fn)
        return {f"train/critic_{c}/loss": loss, f"train/critic_{c}/grad_norm": norm}

    def _policy_loss(self, a: int, idx: torch.Tensor, batch: SampleBatch, logprobs: torch.Tensor, adv: torch.Tensor,
                     old_logprobs: list[torch.Tensor] | None) -> tuple[torch.Tensor, ...]:
        """Clipped policy loss of agent `a` on the samples `idx` (`batch`, `logprobs`: their rows; `adv`: `(A, S)`),
        then the `policy_stats`; the ratio is 1 without old log-probs."""
        cfg: _ActorCriticConfig = self.args
        old = logprobs.detach() if old_logprobs is None else old_logprobs[a][idx][:, : logprobs.shape[1]]
        old, advantages = old.to(logprobs.device), adv[a, idx].to(logprobs.device)
        mask = batch.completion_mask.to(logprobs.device)
        loss = policy_loss(logprobs, old, advantages, mask, cfg.clip_range, cfg.length_normalization)
        return loss, *policy_stats(logprobs, old, advantages, mask, cfg.clip_range)

    def _value_loss(self, c: int, idx: torch.Tensor, values: torch.Tensor, old_values: torch.Tensor,
                    targets: torch.Tensor) -> torch.Tensor:
        """Clipped value loss of critic `c`'s `values` on the samples `idx` (`old_values`, `targets`: `(C, S)`)."""
        return value_loss(values, old_values[c, idx].to(values.device), targets[c, idx].to(values.device),
                          self.args.value_clip_range)

    def _empty_step(self) -> dict[str, float]:
        """No local samples left (torchrun): join the other ranks' steps with zero gradients."""
        for model, optimizer in zip(self.agents, self.optimizers):
            self._optimizer_step(model, optimizer, None, 0)
        for critic, optimizer in zip(self.critics, self.critic_optimizers):
            self._optimizer_step(critic, optimizer, None, 0)
        return {}

    # ----- shared helpers ------------------------------------------------------------------

    def _critic_optimizers(self) -> None:
        cfg: _ActorCriticConfig = self.args
        lr = cfg.critic_learning_rate if cfg.critic_learning_rate is not None else cfg.agent_learning_rate
        self.critic_optimizers = [self._optimizer(c.parameters(), lr) for c in self.critics]
        self.critic_schedulers = [self._scheduler(o) for o in self.critic_optimizers]

    def _load_critic_models(self, sources: list[Any], hidden_dim: int | None, devices: list[torch.device]) -> list[nn.Module]:
        loaded: dict[int, nn.Module] = {}
        critics = []
        for source, device in zip(sources, devices):
            if isinstance(source, (str, os.PathLike)):
                model = load_causal_lm(source, self.model_config, kwargs_key="critic_model_kwargs")
            elif id(source) in loaded:  # one object for several agents: each gets its own copy
                model = copy.deepcopy(loaded[id(source)])
            else:
                model = loaded[id(source)] = load_causal_lm(source, self.model_config)
            critics.append(CausalLMWithValueHead.attach(model.to(device), hidden_dim))
            if self.args.gradient_checkpointing:
                enable_gradient_checkpointing(critics[-1])
        return critics

    def checkpoint_modules(self) -> dict[str, nn.Module]:
        modules = super().checkpoint_modules()
        modules.update({f"critic_{i}": c for i, c in enumerate(self.critics)})
        return modules

    def checkpoint_optimizers(self) -> tuple[list[torch.optim.Optimizer], list[Any]]:
        return (list(self.optimizers) + list(self.critic_optimizers),
                list(self.schedulers) + list(self.critic_schedulers))


def _critic_devices(spec: Any, count: int, fallback: list[torch.device]) -> list[torch.device]:
    if spec is None:
        return (fallback * count)[:count] if len(fallback) >= count else [fallback[0]] * count
    if isinstance(spec, str):
        return [torch.device(spec)] * count
    spec = list(spec)
    if len(spec) not in (1, count):
        raise ValueError(f"critic_devices has {len(spec)} entries for {count} critics; give 1 or {count}.")
    return [torch.device(s) for s in (spec * count if len(spec) == 1 else spec)]


# ----- IAC ---------------------------------------------------------------------------------------


class IAC(_ActorCritic):
    """Independent actor-critic: each agent has its own critic (separate LLM or a head on its backbone)."""

    config_class = IACConfig
    name = "iac"

    def _validate(self) -> None:
        cfg: IACConfig = self.args
        if cfg.peft_config is not None and not cfg.use_separate_critic:
            raise ValueError("peft_config needs use_separate_critic=True for IAC: a value head on a LoRA actor's "
                             "backbone is not supported.")
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
            sources = resolve_sources("critic", self.critic_model, self.critic_sources, self.num_agents, broadcast_objects=True)
            devices = _critic_devices(cfg.critic_devices, self.num_agents, self.devices)
            self.critics = self._load_critic_models(sources, cfg.critic_value_head_hidden_dim, devices)
            for i, (critic, tok) in enumerate(zip(self.critics, self.tokenizers)):
                if critic.get_input_embeddings().weight.shape[0] < len(tok):
                    raise ValueError(f"critic {i} has a vocabulary of {critic.get_input_embeddings().weight.shape[0]} "
                                     f"but reads agent {i}'s token ids ({len(tok)} tokens); use a critic with the "
                                     "actor's tokenizer.")
            self.critic_names = [model_name(s) for s in sources]
        else:
            self.critics = []
            for agent in self.agents:
                CausalLMWithValueHead.attach(agent, cfg.value_head_hidden_dim)
        self._critic_optimizers()
        seed_everything(cfg.seed + self.dist.rank)  # ranks sample different completions

    def critic_values(self, rollout: Rollout) -> torch.Tensor:
        with torch.no_grad():
            return torch.stack([self._values(a, rollout.samples[a])[0].cpu() for a in range(self.num_agents)])

    def critic_rewards(self, rollout: Rollout) -> torch.Tensor:
        return rollout.rewards

    def _values(self, a: int, batch: SampleBatch, with_logprobs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
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
            logprobs = token_logprobs(logits, batch.completion_ids.to(device), self.logprob_temperature)
            logprobs = logprobs * batch.completion_mask.to(device)
        return values.float(), logprobs

    def update(self, rollout: Rollout, idx: torch.Tensor, adv: torch.Tensor, old_logprobs: list | None,
               old_values: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        cfg: IACConfig = self.args
        if len(idx) == 0:
            return self._empty_step()
        metrics: dict[str, float] = {}
        for a in range(self.num_agents):
            if cfg.use_separate_critic:
                metrics.update(self.actor_step(a, rollout, idx, adv, old_logprobs))
                metrics.update(self.critic_step(a, rollout, idx, old_values, targets))
            else:
                metrics.update(self._shared_step(a, rollout, idx, adv, old_logprobs, old_values, targets))
        return metrics

    def _critic_values(self, c: int, rollout: Rollout, idx: torch.Tensor) -> torch.Tensor:
        """Values `(len(idx),)` of agent c's separate critic on the samples `idx`, with gradients."""
        return self._values(c, rollout.samples[c].select(idx))[0]

    def _shared_step(self, a: int, rollout: Rollout, idx: torch.Tensor, adv: torch.Tensor,
                     old_logprobs: list | None, old_values: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """One optimizer step of actor `a` and its value head: one forward gives log-probs and values, and the
        loss is policy loss + value_loss_coef * value loss."""
        cfg: IACConfig = self.args
        model, optimizer = self.agents[a], self.optimizers[a]

        def loss_fn(micro: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            batch = rollout.samples[a].select(micro)
            values, logprobs = self._values(a, batch, with_logprobs=True)
            critic_loss = self._value_loss(a, micro, values, old_values, targets)
            actor_loss, *stats = self._policy_loss(a, micro, batch, logprobs, adv, old_logprobs)
            return actor_loss + cfg.value_loss_coef * critic_loss, actor_loss, critic_loss, *stats

        norm, _, actor_loss, critic_loss, *stats = self._accumulated_step(model, optimizer, idx, loss_fn)
        return {f"train/agent_{a}/loss": actor_loss, f"train/agent_{a}/grad_norm": norm,
                f"train/agent_{a}/learning_rate": optimizer.param_groups[0]["lr"],
                f"train/critic_{a}/loss": critic_loss,
                **{f"train/agent_{a}/{name}": x for name, x in zip(POLICY_STATS, stats)}}

    def _save_extra_models(self, output_dir: str) -> None:
        """Separate critics go to `agent_{i}/critic/` (with `value_head.pt`); shared heads are saved with the agent."""
        for i, critic in enumerate(self.critics):
            save_pretrained_with_head(critic, os.path.join(output_dir, f"agent_{i}", "critic"), self.tokenizers[i])


# ----- MAAC --------------------------------------------------------------------------------------


class MAAC(_ActorCritic):
    """Multi-agent actor-critic with one centralized critic over the joint text."""

    config_class = MAACConfig
    name = "maac"

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
        devices = _critic_devices(cfg.critic_devices, 1, self.devices)
        hidden = self.model_config.get("critic_value_head_hidden_dim")
        self.critics = self._load_critic_models(sources, hidden, devices)
        self.critic_names = [model_name(s) for s in sources]
        self._critic_optimizers()
        seed_everything(cfg.seed + self.dist.rank)  # ranks sample different completions

    def _joint_texts(self, rollout: Rollout, idx: torch.Tensor) -> list[str]:
        """The critic's input: env.state() (V), plus the sampled joint action (Q)."""
        texts = [rollout.states[i] for i in idx.tolist()]
        if self.args.critic_type == "q":
            texts = [t + "\n\n[joint action]\n" + "\n".join(
                f"[agent_{a} action]\n{rollout.samples[a].completions[i]}" for a in range(self.num_agents))
                for t, i in zip(texts, idx.tolist())]
        return texts

    def _joint_values(self, texts: list[str]) -> torch.Tensor:
        """Values of joint texts, each cut to its last `critic_max_length` tokens (as the reward model cuts)."""
        critic = self.critics[0]
        ids, mask = encode_joint_texts(self.tokenizers[0], texts, self.args.critic_max_length)
        hidden = CausalLMWithValueHead.hidden_states(critic, ids.to(critic.device), mask.to(critic.device))
        return critic.value_head(hidden[:, -1]).float()

    def critic_values(self, rollout: Rollout) -> torch.Tensor:
        with torch.no_grad():
            return self._joint_values(self._joint_texts(rollout, torch.arange(rollout.num_samples))).cpu()[None]

    def critic_rewards(self, rollout: Rollout) -> torch.Tensor:
        """The team's reward: the mean over agents (the joint reward in cooperative tasks)."""
        return rollout.rewards.mean(0, keepdim=True)

    def update(self, rollout: Rollout, idx: torch.Tensor, adv: torch.Tensor, old_logprobs: list | None,
               old_values: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        if len(idx) == 0:
            return self._empty_step()
        metrics: dict[str, float] = {}
        for a in range(self.num_agents):
            metrics.update(self.actor_step(a, rollout, idx, adv, old_logprobs))
        metrics.update(self.critic_step(0, rollout, idx, old_values, targets))  # one critic step per minibatch
        return metrics

    def _critic_values(self, c: int, rollout: Rollout, idx: torch.Tensor) -> torch.Tensor:
        """Values `(len(idx),)` of the centralized critic (c = 0) on the samples `idx`, with gradients."""
        return self._joint_values(self._joint_texts(rollout, idx))

    def _save_extra_models(self, output_dir: str) -> None:
        save_pretrained_with_head(self.critics[0], os.path.join(output_dir, "critic"), self.tokenizers[0])


IACTrainer = IAC
MAACTrainer = MAAC
