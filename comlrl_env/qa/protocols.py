"""Team protocols for any verifiable question-answer source (`VerifiedQA`): who answers, who sees what, what
is paid.

Every prompt is the item's question followed by the source's answer format (the final answer in
`<answer>...</answer>`); every reward is the source's, in [0, 1] (`VerifiedQA.reward`: no answer or a
scorer that raised is 0 and flagged invalid).

- `independent` (1 turn): every agent answers the question alone. Each is paid its own answer's score
  (per-agent rewards): the baseline a team protocol must beat.
- `proposer_finalizer` (2 agents, 2 turns): turn 0, agent_0 (the proposer) writes its reasoning and an
  answer; turn 1, agent_1 (the finalizer) sees the question and the proposal and gives the final answer.
  Only the final answer is scored, and both agents are paid its score at turn 1 (0 at turn 0): the
  proposer earns by helping the finalizer. Each turn only its agent moves (`to_move`).
- `debate` (N agents, `rounds + 1` turns): turn 0, every agent answers; at each later turn every agent sees
  its own previous answer and the others' and answers again. Only the last turn is scored: every agent is
  paid the team's mean score (`reward="joint"`) or its own (`reward="per_agent"`); earlier turns pay 0.

The turn count is fixed by the protocol, so no protocol pays for taking longer.

    from comlrl_env.qa import TeamQA, arithmetic_questions
    env = TeamQA(arithmetic_questions(), protocol="proposer_finalizer")
"""

from __future__ import annotations

from typing import Any

from comlrl_env.base import AgentID, TextParallelEnv
from comlrl_env.qa.sources import VerifiedQA, arithmetic_questions

__all__ = ["PROTOCOLS", "TeamQA", "arithmetic_team"]

PROTOCOLS = ("independent", "proposer_finalizer", "debate")
"""The protocols `TeamQA` plays (the module docstring describes each)."""


class TeamQA(TextParallelEnv):
    """A team answering questions of a `VerifiedQA` source under one protocol (see the module docstring).

    Task instance i is the source's item i, and `env.task` is that item as the source made it.

    Args:
        source: The questions and their scorer.
        protocol: "independent", "proposer_finalizer" or "debate".
        num_agents: Agents (2 for proposer_finalizer).
        rounds: Debate only: the rounds of answering again after the first answers.
        reward: Debate only: "joint" (the mean of the last answers, paid to every agent) or "per_agent".
        **kwargs: Passed to `TextParallelEnv` (length limits, render_mode).
    """

    metadata: dict[str, Any] = {**TextParallelEnv.metadata, "name": "qa-v0", "reward_range": (0.0, 1.0)}

    def __init__(self, source: VerifiedQA, protocol: str = "independent", num_agents: int = 2, rounds: int = 1,
                 reward: str = "joint", **kwargs: Any) -> None:
        if not isinstance(source, VerifiedQA):
            raise TypeError(f"source must be a VerifiedQA (items, a question each and a scorer), got "
                            f"{type(source).__name__}; wrap a dataset with VerifiedQA(rows, score=...).")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}.")
        if protocol == "proposer_finalizer" and num_agents != 2:
            raise ValueError(f"protocol='proposer_finalizer' has 2 agents (proposer, finalizer), got "
                             f"num_agents={num_agents!r}.")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"rounds must be an int >= 1 (debate rounds after the first answers), got {rounds!r}.")
        if reward not in ("joint", "per_agent"):
            raise ValueError(f"reward must be 'joint' or 'per_agent', got {reward!r}.")
        turns = {"independent": 1, "proposer_finalizer": 2, "debate": rounds + 1}[protocol]
        roles = {"independent": ["solver"] * num_agents, "proposer_finalizer": ["proposer", "finalizer"],
                 "debate": ["debater"] * num_agents}[protocol]
        super().__init__(num_agents=num_agents, num_turns=turns, roles=roles, **kwargs)
        self.source, self.protocol, self.rounds, self.reward_mode = source, protocol, rounds, reward
        joint = protocol == "proposer_finalizer" or (protocol == "debate" and reward == "joint")
        self.metadata = {**type(self).metadata, "name": f"{source.name}[{protocol}]", "num_tasks": len(source),
                         "reward_structure": "cooperative" if joint else "general"}
        self.item_index = 0

    # ----- the episode ------------------------------------------------------------

    def load_task(self, task_index: int | None) -> Any:
        if task_index is None:
            task_index = int(self.np_random.integers(len(self.source)))
        self.item_index = task_index
        return self.source[task_index]

    def to_move(self) -> list[AgentID]:
        if self.protocol == "proposer_finalizer" and self.agents:
            return [self.agents[min(self.turn, 1)]]
        return list(self.agents)

    def prompts(self) -> dict[AgentID, str]:
        question, form = self.source.question_of(self.item_index), self.source.answer_format
        if self.protocol == "proposer_finalizer":
            proposer, finalizer = self.possible_agents
            if self.turn == 0:
                return {proposer: f"{question}\n\nPropose a solution: a teammate will read your reasoning and "
                                  f"answer, then give the final answer. {form}",
                        finalizer: "Your teammate is writing a proposal; you answer next."}
            proposal = self.response_history[proposer][-1]
            return {proposer: "Your teammate is giving the final answer.",
                    finalizer: f"{question}\n\nA teammate proposed:\n{proposal}\n\nCheck the proposal and give the "
                               f"final answer. {form}"}
        if self.protocol == "debate" and self.turn > 0:
            out = {}
            for agent in self.agents:
                others = "\n\n".join(f"{other}:\n{self.response_history[other][-1]}"
                                     for other in self.agents if other != agent)
                out[agent] = (f"{question}\n\nYour previous answer:\n{self.response_history[agent][-1]}\n\n"
                              f"The other agents answered:\n{others}\n\nReconsider and answer again. {form}")
            return out
        return {agent: f"{question}\n\n{form}" for agent in self.agents}

    def score(self, actions: dict[AgentID, str]) -> tuple[float | dict[AgentID, float], bool]:
        last = self.turn + 1 == self.num_turns
        if not last:
            return 0.0, False  # proposals and earlier debate rounds are not paid
        scored = self.to_move()
        paid = {a: self._paid(a, actions[a]) for a in scored}
        if self.protocol == "independent" or (self.protocol == "debate" and self.reward_mode == "per_agent"):
            return paid, True
        return sum(paid.values()) / len(paid), True

    # ----- curriculum levels (learners.loop.curriculum), where the source has them ----------

    @property
    def curriculum_levels(self) -> int | None:
        """The source's difficulty levels (reasoning-gym's curricula); None when it has none."""
        return getattr(self.source, "levels", None)

    @property
    def curriculum_level(self) -> int | None:
        """The source's current level; None before one is set."""
        return getattr(self.source, "level", None)

    def set_curriculum_level(self, level: int) -> None:
        """Make the next episodes' items at `level` (the source's `set_level`)."""
        if self.curriculum_levels is None:
            raise ValueError(f"{self.metadata['name']} has no curriculum levels: its source has none.")
        self.source.set_level(level)

    @property
    def canonical_actions(self) -> Any:
        """The reference answer in answer tags for every agent to move (`canonical_actions()`, the benchmark's
        `canonical` row); absent (AttributeError) when the source's items carry no reference answer."""
        if self.source.answer is None:
            raise AttributeError(f"{self.metadata['name']}'s items carry no reference answer")
        return lambda: {a: f"<answer>{self.source.reference(self.item_index)}</answer>" for a in self.to_move()}

    def stub_actions(self) -> dict[AgentID, str]:
        """The answer format with nothing in it (`check_task` plays it every turn)."""
        return {agent: "<answer></answer>" for agent in self.agents}

    def _paid(self, agent: AgentID, completion: str) -> float:
        value, invalid = self.source.reward(completion, self.item_index)
        if invalid is not None:
            self.flag_invalid(agent, invalid)
        return value


def arithmetic_team(max_operand: int = 9, **kwargs: Any) -> TeamQA:
    """`qa/Arithmetic-v0`: `arithmetic_questions(max_operand)` under a protocol (`**kwargs` go to `TeamQA`)."""
    return TeamQA(arithmetic_questions(max_operand), **kwargs)
