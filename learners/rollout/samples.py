"""The data a rollout hands to the learners: `SampleBatch` (one agent's sampled completions, token-exact)
and `Rollout` (a batch of finished episodes, flattened into rows that every agent shares).

`learners.rollout.RolloutEngine` builds them; every learner reads them.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

__all__ = ["Rollout", "SampleBatch"]


@dataclasses.dataclass
class SampleBatch:
    """One agent's samples; row s of every field describes sample s."""

    prompt_ids: torch.Tensor
    """(S, P) Left-padded prompt token ids."""
    prompt_mask: torch.Tensor
    """(S, P) 1 on prompt tokens, 0 on padding."""
    completion_ids: torch.Tensor
    """(S, T) Sampled token ids, right-padded with the pad id."""
    completion_mask: torch.Tensor
    """(S, T) 1 on sampled tokens up to and including EOS."""
    completions: list[str]
    """(S,) The decoded completions (special tokens skipped)."""
    logprobs: torch.Tensor | None = None
    """(S, T) log pi of each sampled token as sampled, under softmax(z / `GenerationSettings.logprob_temperature`),
    0 off the mask; None when the backend did not keep them (the learner scores the tokens itself)."""
    prompt_cut: torch.Tensor | None = None
    """(S,) Prompt tokens cut from the left to fit the prompt limit (0: the whole prompt); None: not recorded."""

    def __len__(self) -> int:
        return len(self.completions)

    def select(self, index: torch.Tensor) -> "SampleBatch":
        """Rows `index`, with columns that are padding in every selected row trimmed away."""
        prompt_mask = self.prompt_mask[index]
        completion_mask = self.completion_mask[index]
        p0 = int((prompt_mask.sum(0) > 0).int().argmax()) if prompt_mask.any() else prompt_mask.shape[1]
        t1 = int(completion_mask.sum(1).max()) if len(index) else 0
        return SampleBatch(
            self.prompt_ids[index][:, p0:],
            prompt_mask[:, p0:],
            self.completion_ids[index][:, :t1],
            completion_mask[:, :t1],
            [self.completions[i] for i in index.tolist()],
            None if self.logprobs is None else self.logprobs[index][:, :t1],
            None if self.prompt_cut is None else self.prompt_cut[index],
        )

    @staticmethod
    def cat(parts: Sequence["SampleBatch"], pad_id: int) -> "SampleBatch":
        """Concatenate rows, left-padding prompts and right-padding completions to common widths."""
        P = max(p.prompt_ids.shape[1] for p in parts)
        T = max(p.completion_ids.shape[1] for p in parts)

        def left(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
            return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)

        def right(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
            return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

        return SampleBatch(
            torch.cat([left(p.prompt_ids, P, pad_id) for p in parts]),
            torch.cat([left(p.prompt_mask, P, 0) for p in parts]),
            torch.cat([right(p.completion_ids, T, pad_id) for p in parts]),
            torch.cat([right(p.completion_mask, T, 0) for p in parts]),
            [c for p in parts for c in p.completions],
            None if any(p.logprobs is None for p in parts) else torch.cat([right(p.logprobs, T, 0) for p in parts]),
            None if all(p.prompt_cut is None for p in parts) else torch.cat([
                torch.zeros(len(p), dtype=torch.long) if p.prompt_cut is None else p.prompt_cut for p in parts]),
        )


@dataclasses.dataclass
class Rollout:
    """A batch of finished episodes, flattened into samples (rows shared by all agents)."""

    samples: list[SampleBatch]
    """(A,) One `SampleBatch` per agent, each with S rows."""
    rewards: torch.Tensor
    """(A, S) Immediate reward of the sample's joint action(s)."""
    returns: torch.Tensor
    """(A, S) Discounted return from the sample's joint action(s)."""
    group: torch.Tensor
    """(S,) Group id: the samples of one group start from the same state."""
    turn: torch.Tensor
    """(S,) Turn index of the sample."""
    task: torch.Tensor
    """(S,) Index of the sample's task instance within the batch."""
    episode_returns: torch.Tensor
    """(A, B) Mean undiscounted return of each task instance's episodes."""
    next_index: torch.Tensor
    """(S,) Row of the same episode's next sample, -1 at its end (parallel mode)."""
    states: list[str]
    """(S,) `env.state()` of the sample's node before acting (the joint text)."""
    invalid_actions: torch.Tensor
    """(A,) Number of joint actions flagged invalid, per agent."""
    num_joint_actions: int
    """Env steps taken (one per joint action)."""
    timings: dict[str, float]
    """Seconds spent generating and stepping environments, by phase."""
    task_episode_returns: torch.Tensor | None = None
    """(A, B) The task's own returns when a reward model relabelled `rewards`; else None."""
    acted: torch.Tensor | None = None
    """(A, S) True where the agent was to move; None: everywhere (simultaneous moves)."""
    joint_actions: list[list[str]] | None = None
    """(S,) Every seat's action text per row, fixed seats included."""
    # The joint table: every joint action played, over all turns. Row indices are rollout rows, so in tree mode
    # joint action j belongs to the group (node) of its rows. None when a rollout was built otherwise.
    joint_rows: torch.Tensor | None = None
    """(J, A) Row of each agent's sample in joint action j (None when the rollout kept no joint table)."""
    joint_returns: torch.Tensor | None = None
    """(J, A) Discounted return of joint action j, per agent."""
    joint_fixed: torch.Tensor | None = None
    """(J,) The samples of the fixed seats that moved in j, as one number (0: none)."""
    episodes: list[dict] | None = None
    """Info-flow rows (`comlrl_env.info_flow.episode_record` plus `task`, the instance within the batch, and
    `turn`), one per step whose infos report `used_partner_info`; None when the env reports none."""

    def acting(self, agent: int, idx: torch.Tensor) -> torch.Tensor:
        """The rows of `idx` at which `agent` was to move (turn-taking tasks); its other rows hold no sampled
        tokens and are never trained on."""
        return idx if self.acted is None else idx[self.acted[agent, idx]]

    def joint_action(self, row: int) -> list[str]:
        """Every seat's action text at sample `row`, in seat order (what the env was stepped with)."""
        if self.joint_actions is not None:
            return self.joint_actions[row]
        return [batch.completions[row] for batch in self.samples]

    @property
    def num_samples(self) -> int:
        """S, the number of rows."""
        return int(self.group.numel())
