"""Learned reward models: a joint reward model scored on the whole team's text.

`RewardModel` is a causal-LM backbone plus a scalar head read at the last
non-padding token of a joint text (every agent's observation and answer). It
is trained from pairwise preferences with the Bradley-Terry loss

    L = -mean log sigmoid(s(winner) - s(loser))

and then frozen and used as the reward of a policy learner. `score(texts)`
is batched on the model's device.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from rewards import joint

__all__ = ["RewardModel", "bradley_terry_loss", "encode_joint_texts", "joint_text"]


def joint_text(state: str, completions: Sequence[str]) -> str:
    """The reward model's input: `comlrl_env.joint_text(state, ...)` with completion i as `agent_i`'s action.

    For a final step from `state = env.state()` of an env with agents `agent_0 .. agent_{n-1}`, this is the
    text `env.state()` shows after stepping `completions`.
    """
    return joint.joint_text(state, {f"agent_{i}": c for i, c in enumerate(completions)})


def encode_joint_texts(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask `(B, L)` of joint texts, left-padded, each cut to its last `max_length` tokens.

    The answers come last in a joint text, so a long one loses its beginning, never its answers: cutting
    from the right (the tokenizer's default side) would score two texts that differ only in their
    answers alike. Done here, not through the tokenizer's `truncation_side`, so a shared tokenizer's
    settings cannot change it. The reward model and MAAC's centralized critic read texts this way.
    """
    rows = tokenizer(list(texts))["input_ids"]
    if max_length is not None:
        rows = [r[-max_length:] for r in rows]
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(r)
            mask[i, width - len(r):] = 1
    return ids, mask


def bradley_terry_loss(winner_scores: torch.Tensor, loser_scores: torch.Tensor) -> torch.Tensor:
    """-mean log sigmoid(s_w - s_l)."""
    return -nn.functional.logsigmoid(winner_scores - loser_scores).mean()


class RewardModel(nn.Module):
    """A causal LM backbone with a scalar head on the last non-padding token.

    Args:
        backbone: An HF causal LM (its transformer body is used; the LM head is not).
        tokenizer: The backbone's tokenizer (padding on the left).
        freeze_backbone: Train only the head.
        max_length: Truncate joint texts (from the left) to this many tokens.
    """

    def __init__(
        self,
        backbone: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        freeze_backbone: bool = False,
        max_length: int | None = None,
    ) -> None:
        super().__init__()
        size = getattr(backbone.config, "hidden_size", None) or getattr(backbone.config, "n_embd", None) \
            or getattr(backbone.config, "d_model", None)
        if size is None:
            raise ValueError(f"cannot find the hidden size of {type(backbone).__name__}.")
        self.backbone = backbone
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.max_length = max_length
        param = next(backbone.parameters())
        self.reward_head = nn.Linear(size, 1).to(device=param.device, dtype=param.dtype)
        nn.init.normal_(self.reward_head.weight, std=0.02)
        nn.init.zeros_(self.reward_head.bias)
        self.freeze_backbone = freeze_backbone
        if freeze_backbone:
            backbone.requires_grad_(False)

    @classmethod
    def from_pretrained(cls, source: str | os.PathLike, device: Any = "cpu", **kwargs: Any) -> "RewardModel":
        """Load the backbone and tokenizer from a hub id or local dir (and `reward_head.pt` if the dir has one)."""
        backbone = AutoModelForCausalLM.from_pretrained(os.fspath(source)).to(device)
        tokenizer = AutoTokenizer.from_pretrained(os.fspath(source))
        model = cls(backbone, tokenizer, **kwargs)
        head = os.path.join(os.fspath(source), "reward_head.pt")
        if os.path.isfile(head):
            model.reward_head.load_state_dict(torch.load(head, map_location=device, weights_only=True))
        return model

    @property
    def device(self) -> torch.device:
        return self.reward_head.weight.device

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        """Scores `(B,)` of joint texts, with gradients."""
        ids, mask = self.encode(texts)
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        hidden = self.backbone.base_model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                          use_cache=False).last_hidden_state
        return self.reward_head(hidden[:, -1]).squeeze(-1).float()  # left padding: the last token is real

    def encode(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and attention mask `(B, L)` on the model's device: `encode_joint_texts` with `max_length`."""
        ids, mask = encode_joint_texts(self.tokenizer, texts, self.max_length)
        return ids.to(self.device), mask.to(self.device)

    @torch.no_grad()
    def score(self, texts: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """Scores `(B,)` on CPU, without gradients, in batches."""
        return torch.cat([self(texts[i:i + batch_size]).cpu() for i in range(0, len(texts), batch_size)]) \
            if texts else torch.zeros(0)

    def save_pretrained(self, path: str) -> None:
        """`path/` holds the backbone and tokenizer (Auto-loadable) plus `reward_head.pt`."""
        self.backbone.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        torch.save(self.reward_head.state_dict(), os.path.join(path, "reward_head.pt"))
