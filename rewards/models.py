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
import re
from typing import Any, Sequence

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from rewards import joint

__all__ = ["MIN_ANSWER_TOKENS", "RewardModel", "bradley_terry_loss", "encode_joint_texts", "fair_shares", "joint_text",
           "min_joint_length"]


def joint_text(state: str, completions: Sequence[str]) -> str:
    """The reward model's input: `comlrl_env.joint_text(state, ...)` with completion i as `agent_i`'s action.

    For a final step from `state = env.state()` of an env with agents `agent_0 .. agent_{n-1}`, this is the
    text `env.state()` shows after stepping `completions`.
    """
    return joint.joint_text(state, {f"agent_{i}": c for i, c in enumerate(completions)})


def encode_joint_texts(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask `(B, L)` of joint texts, left-padded, each cut to at most `max_length` tokens.

    A text that fits is tokenized whole. A longer one is cut block by block (`rewards.joint.header_blocks`:
    each observation, the `[joint action]` line, each agent's answer): the blocks share `max_length` by
    `fair_shares`, and a block cut to k tokens keeps its header line and the last tokens of its body (its
    last k tokens when k is shorter than the header). Each agent's answer (an `[<agent> action]` block) is
    served first: its header and `MIN_ANSWER_TOKENS` of its body (all of a shorter body) are kept before the
    rest is shared, so headers never eat the answers' shares. So every agent's answer keeps its share however
    long another's is, and two texts that differ at the end of one answer stay apart (a plain cut from either
    side could drop an answer whole). A `max_length` too short for every answer's header and its first
    tokens raises `ValueError` naming the length needed (`min_joint_length` gives it before any text). Tokens the tokenizer adds to an empty text (a BOS) go first. Done
    here, not by the tokenizer's `truncation_side`, so a shared tokenizer's settings cannot change it. The
    reward model and MAAC's centralized critic read texts this way.
    """
    rows = tokenizer(list(texts))["input_ids"]
    if max_length is not None:
        long = [i for i, r in enumerate(rows) if len(r) > max_length]
        for i, row in zip(long, _cut_by_shares(tokenizer, [texts[i] for i in long], max_length)):
            rows[i] = row
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(r)
            mask[i, width - len(r):] = 1
    return ids, mask


def fair_shares(lengths: Sequence[int], budget: int) -> list[int]:
    """Tokens each part keeps when parts of `lengths` share `budget` max-min fairly.

    Parts no longer than their share keep everything; the others split what is left equally, the odd
    tokens going to the later (longer, then later-placed) parts. Example: [2, 10, 10] with 11 -> [2, 4, 5].
    """
    keep = [0] * len(lengths)
    left = budget
    for rank, i in enumerate(sorted(range(len(lengths)), key=lambda j: (lengths[j], j))):
        keep[i] = min(lengths[i], left // (len(lengths) - rank))
        left -= keep[i]
    return keep


MIN_ANSWER_TOKENS = 4
"""Body tokens of every agent's answer that a cut joint text always keeps (all of a shorter answer)."""
_ANSWER_HEADER = re.compile(r"\[(?!joint action\])[^\n]* action\]\n?")


def min_joint_length(tokenizer: PreTrainedTokenizerBase, agents: Sequence[str]) -> int:
    """The shortest `max_length` at which `encode_joint_texts` keeps every answer of `agents`: the tokens the
    tokenizer adds, each `[<agent> action]` header and `MIN_ANSWER_TOKENS` of each answer."""
    headers = tokenizer([f"[{a} action]\n" for a in agents], add_special_tokens=False)["input_ids"]
    return len(tokenizer("")["input_ids"]) + sum(len(h) + MIN_ANSWER_TOKENS for h in headers)


def _cut_by_shares(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Each text's ids cut as `encode_joint_texts` says (one tokenizer call for every header and body)."""
    specials = tokenizer("")["input_ids"][:max_length]
    parts = []  # per text: (header, body) per block
    for text in texts:
        blocks = []
        for piece in joint.header_blocks(text):
            end = (piece.find("\n") + 1 or len(piece)) if piece.startswith("[") else 0  # its header line
            blocks.append((piece[:end], piece[end:]))
        parts.append(blocks)
    flat = [s for blocks in parts for block in blocks for s in block]
    encoded = iter(tokenizer(flat, add_special_tokens=False)["input_ids"] if flat else [])
    rows = []
    for blocks in parts:
        pairs = [(next(encoded), next(encoded)) for _ in blocks]
        # every answer's header and first tokens first, then the rest shared fairly
        floor = [len(h) + min(len(b), MIN_ANSWER_TOKENS) if _ANSWER_HEADER.fullmatch(head) else 0
                 for (h, b), (head, _) in zip(pairs, blocks)]
        budget = max_length - len(specials) - sum(floor)
        if budget < 0:
            answers = sum(1 for f in floor if f)
            raise ValueError(
                f"max_length={max_length} cannot hold this joint text's {answers} answers: their headers and "
                f"{MIN_ANSWER_TOKENS} tokens of each need {max_length - budget} tokens, so answers would vanish "
                f"and different answers would score alike. Raise it (reward_max_length / critic_max_length) to "
                f"at least {max_length - budget}, or None to keep joint texts whole.")
        extra = fair_shares([len(h) + len(b) - f for (h, b), f in zip(pairs, floor)], budget)
        keep = [f + e for f, e in zip(floor, extra)]
        row = list(specials)
        for (header, body), k in zip(pairs, keep):
            whole = header + body
            row += header + body[len(body) - (k - len(header)):] if k >= len(header) else whole[len(whole) - k:]
        rows.append(row)
    return rows


def bradley_terry_loss(winner_scores: torch.Tensor, loser_scores: torch.Tensor) -> torch.Tensor:
    """-mean log sigmoid(s_w - s_l)."""
    return -nn.functional.logsigmoid(winner_scores - loser_scores).mean()


class RewardModel(nn.Module):
    """A causal LM backbone with a scalar head on the last non-padding token.

    Args:
        backbone: An HF causal LM (its transformer body is used; the LM head is not).
        tokenizer: The backbone's tokenizer (padding on the left).
        freeze_backbone: Train only the head.
        max_length: Cut joint texts to this many tokens, every block keeping its share (`encode_joint_texts`).
        autocast_dtype: Run the forward under autocast to this dtype (e.g. `torch.bfloat16` over fp32
            weights); None: in the weights' dtype.
    """

    def __init__(
        self,
        backbone: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        freeze_backbone: bool = False,
        max_length: int | None = None,
        autocast_dtype: torch.dtype | None = None,
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
        self.autocast_dtype = autocast_dtype
        param = next(backbone.parameters())
        self.reward_head = nn.Linear(size, 1).to(device=param.device, dtype=param.dtype)
        nn.init.normal_(self.reward_head.weight, std=0.02)
        nn.init.zeros_(self.reward_head.bias)
        self.freeze_backbone = freeze_backbone
        if freeze_backbone:
            backbone.requires_grad_(False)

    @classmethod
    def from_pretrained(cls, source: str | os.PathLike, device: Any = "cpu", dtype: torch.dtype | str = torch.float32,
                        model_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> "RewardModel":
        """Load the backbone and tokenizer from a hub id or local dir (and `reward_head.pt` if the dir has one).

        The weights load as `dtype`: float32 by default, whatever the checkpoint's dtype, because a pure-bf16
        model loses most small optimizer updates to rounding (at lr 1e-5, 3 AdamW steps changed 16% of a
        bf16 backbone's entries); "auto" keeps the checkpoint's. `model_kwargs` go to `from_pretrained`.
        """
        dtype = getattr(torch, dtype) if isinstance(dtype, str) and dtype != "auto" else dtype
        load = {**(model_kwargs or {}), "dtype": dtype}
        backbone = AutoModelForCausalLM.from_pretrained(os.fspath(source), **load).to(device)
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
        with torch.autocast(self.device.type, dtype=self.autocast_dtype or torch.bfloat16,
                            enabled=self.autocast_dtype is not None):
            hidden = self.backbone.base_model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                              use_cache=False).last_hidden_state
            return self.reward_head(hidden[:, -1]).squeeze(-1).float()  # left padding: the last token is real

    def encode(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and attention mask `(B, L)` on the model's device: `encode_joint_texts` with `max_length`."""
        ids, mask = encode_joint_texts(self.tokenizer, texts, self.max_length)
        return ids.to(self.device), mask.to(self.device)

    @torch.no_grad()
    def score(self, texts: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """Scores `(B,)` on CPU, without gradients, in batches, each distinct text scored once.

        A text's score moves in its last bits with the padding of its batch; scoring it once gives equal
        texts equal scores, so a tie between them is exact.
        """
        distinct = list(dict.fromkeys(texts))
        if not distinct:
            return torch.zeros(0)
        scores = torch.cat([self(distinct[i:i + batch_size]).cpu() for i in range(0, len(distinct), batch_size)])
        row = {text: i for i, text in enumerate(distinct)}
        return scores[torch.tensor([row[t] for t in texts])]

    def save_pretrained(self, path: str) -> None:
        """`path/` holds the backbone and tokenizer (Auto-loadable) plus `reward_head.pt`."""
        self.backbone.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        torch.save(self.reward_head.state_dict(), os.path.join(path, "reward_head.pt"))
