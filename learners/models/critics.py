"""LLM critics: a scalar value head on a causal LM's last hidden state, and loading critic models.

    V(text) = w^T h_L + b            (linear head), or
    V(text) = w2^T tanh(W1 h_L + b1) + b2   (with a hidden layer),

where h_L is the backbone's last-layer hidden state at the position the learner reads (the last prompt
token for V(s), the last completion token for Q(s, a)). IAC and MAAC use these; the reward model of
`rewards.models` has its own head on the last non-padding token.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from learners.models.agents import enable_gradient_checkpointing, load_causal_lm
from learners.parallel.fsdp import Sharding

__all__ = ["CausalLMWithValueHead", "ValueHead", "check_critic_tokenizer", "load_critics", "source_tokenizer"]


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
        param = next(model.parameters())  # (a skeleton's are on meta: its head starts on the CPU, see fsdp.py)
        device = param.device if param.device.type != "meta" else torch.device("cpu")
        model.value_head = ValueHead(size, hidden_dim).to(device=device, dtype=param.dtype)
        return model

    @staticmethod
    def hidden_states(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Last-layer hidden states `(S, L, d)` of the backbone, positions following the mask.

        A model sharded with FSDP gathers its root weights (embeddings, heads) only in its own forward, so
        there the backbone's output is read through the model's forward (its LM head scores one position);
        the root stays gathered after it, for the value head and LM head the caller applies."""
        positions = (attention_mask.cumsum(1) - 1).clamp(min=0)
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=False)
        if not isinstance(model, FSDPModule):
            return model.base_model(**inputs).last_hidden_state
        seen: list[torch.Tensor] = []
        hook = model.base_model.register_forward_hook(lambda module, args, out: seen.append(out.last_hidden_state))
        try:
            model(**inputs, logits_to_keep=1)
        finally:
            hook.remove()
        return seen[0]

def load_critics(sources: list[Any], devices: list[torch.device], model_config: dict[str, Any],
                 hidden_dim: int | None = None, gradient_checkpointing: bool = False,
                 sharding: Sharding | None = None) -> list[nn.Module]:
    """One causal LM with a fresh `ValueHead` per source (an id, a dir or a loaded model), on its device.

    Ids and dirs load with `model_config["critic_model_kwargs"]`; the same model object given for
    several critics is copied, so each critic trains its own weights. Under FSDP (`sharding`) folders load as
    skeletons to shard while filling, and no critic moves to its device whole (`Sharding.place`).
    """
    loaded: dict[int, nn.Module] = {}
    critics = []
    for source, device in zip(sources, devices):
        if isinstance(source, (str, os.PathLike)):
            model = load_causal_lm(source, model_config, kwargs_key="critic_model_kwargs", sharding=sharding)
        elif id(source) in loaded:
            model = copy.deepcopy(loaded[id(source)])
        else:
            model = loaded[id(source)] = load_causal_lm(source, model_config)
        model = sharding.place(model, device) if sharding is not None else model.to(device)
        critics.append(CausalLMWithValueHead.attach(model, hidden_dim))
        if gradient_checkpointing:
            enable_gradient_checkpointing(critics[-1])
    return critics


def source_tokenizer(source: Any) -> PreTrainedTokenizerBase | None:
    """The tokenizer saved with a model source (an id or a folder, or a loaded model's `name_or_path`), from
    local files only; None when there is none to be found there."""
    path = source if isinstance(source, (str, os.PathLike)) else getattr(source, "name_or_path", None)
    if not path:
        return None
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception:  # no tokenizer files there: nothing to compare with
        return None


def check_critic_tokenizer(critic: nn.Module, source: Any, tokenizer: PreTrainedTokenizerBase, agent: int,
                           critic_name: str, reads: str) -> None:
    """Refuse a critic that would read another tokenizer's ids: a critic reads the token ids of agent `agent`'s
    `tokenizer`, so its embeddings must hold every one of them, and its own tokenizer (where its `source` has
    one) must give each of its tokens the same id. A larger vocabulary alone proves nothing: a different
    tokenizer's ids would be read as other text."""
    vocab = critic.get_input_embeddings().weight.shape[0]
    if vocab < len(tokenizer):
        raise ValueError(f"{critic_name} has a vocabulary of {vocab} but reads {reads} ({len(tokenizer)} tokens); use "
                         f"a critic with agent {agent}'s tokenizer.")
    own = source_tokenizer(source)
    if own is not None and not own.get_vocab().items() <= tokenizer.get_vocab().items():
        raise ValueError(
            f"{critic_name} ({own.name_or_path}) has a tokenizer of its own that differs from agent {agent}'s "
            f"({tokenizer.name_or_path}): it would read {reads} as its own ids, which stand for other text. Use a "
            f"critic of agent {agent}'s model family (the same tokenizer), e.g. the agent's own model.")
