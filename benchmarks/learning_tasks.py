"""The tasks of the learning benchmark (`learning.py`), as dataset + reward function (+ transition).

Standard library only, so that our side and the reference library's venv import the very same
definitions. Every task is something both libraries can express: a list of dict rows with a
`prompt`, a joint reward function `f(completions_agent0, completions_agent1, *, batch_items=None)`
returning one float per joint sample (the reference calls it with 1-element lists in MAGRPO and
with K-element lists in IAC/MAAC; `rewards.calling` does the same on our side), optional
per-agent formatters, and for several turns an external transition that reads only the raw prompt
and the completions (the reference passes no dataset row to it).

Tasks (2 agents, shared reward in [0, 1]):

- `dense`: whitespace. Reward: the mean over agents of the fraction of whitespace characters in
  the completion (a random tiny model scores ~0.1).
- `sparse`: two lines. Reward 1 when both completions contain a newline, else 0 (a random tiny
  model with 12 new tokens writes one in ~26% of samples, so ~7% of joint samples pay).
- `multiturn`: guess a digit with feedback, 2 turns. Each turn pays the mean over agents of
  `1 - |digit - target| / 9` for the first digit of the agent's completion (0 without one); the
  second turn's prompt says whether the joint guess (the mean of the agents' digits) was too high
  or too low. The target is a function of the game number in the prompt, so the transition can
  give feedback without the dataset row.
- `coord`: say your partner's word. Agent 0's prompt shows the word agent 1 must say and agent 1's
  prompt the word agent 0 must say (words from a list of 4). Reward: the mean over agents of the
  `difflib` ratio between the stripped, lower-cased completion and the agent's own word, which
  only its partner sees: a decentralized critic cannot tell the instances apart, a centralized
  one (MAAC) can.

Env tasks (ours only: the reference trains on dataset + reward tasks): `hanabi` (OpenSpiel tiny_hanabi, both
seats trained) and `tictactoe` (OpenSpiel tic_tac_toe, seat 0 trained against the uniform random bot, with its
own settings, `Task.settings`): one-token answers naming a numbered legal action (`numbered_actions=True`; a
random tiny model names a legal action in about 1 of 200 tokens, and none in 3-token `1,1` answers), trained
with `invalid_action="random"` (each invalid move costs the utility range, 2, at once: a dense signal) and
evaluated by the tests under the default forfeit. MAGRPO only; its budget is 8192 completions per agent.
The curve is the training reward: the trained seat's return with the penalties (about -8 untrained, +0.6
once it names legal moves and wins most games).
"""

from __future__ import annotations

import difflib
import random
import re
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence

__all__ = ["TASKS", "Task", "dataset", "NUM_PROMPTS"]

NUM_PROMPTS = 16
"""Task instances (rows) per task; each seed visits them in its own fixed order."""

TOPICS = ("the sea", "a small town", "winter", "a red kite", "an old clock", "the forest", "a train",
          "the moon", "a garden", "bread", "a river", "music", "a bridge", "rain", "a library", "stones")
WORDS = ("red", "blue", "green", "gold")
_DIGIT = re.compile(r"\d")

SETTINGS: Dict[str, Any] = {
    "num_generations": 4,
    "max_new_tokens": 12,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 50,  # explicit on both sides: the reference's top_k=None still samples the top 50 (transformers' default)
    "learning_rate": 5e-3,  # agents and critics; a 0.3M random model needs a large step to move in a few hundred samples
    "rollout_prompts": 2,  # task instances per rollout (the reference MAGRPO's rollout_buffer_size)
    "ac_samples_per_step": 8,  # IAC/MAAC samples per optimizer step (the reference's rollout_buffer_size)
    "final_fraction": 0.2,  # final reward = mean training reward over the last 20% of the budget
}


class Task:
    """One benchmark task: rows, reward, formatters, turns and transition."""

    def __init__(self, name: str, rows: Callable[[], List[Dict[str, Any]]], reward: Callable[..., List[float]],
                 num_turns: int = 1, formatters: Optional[Sequence[Callable[..., str]]] = None,
                 transition: Optional[Callable[..., List[str]]] = None, doc: str = "",
                 env_id: Optional[str] = None, env_kwargs: Optional[Dict[str, Any]] = None,
                 opponent: Optional[str] = None, settings: Optional[Dict[str, Any]] = None,
                 learners: Optional[Sequence[str]] = None, budget: Optional[int] = None) -> None:
        self.name, self.rows, self.reward = name, rows, reward
        self.num_turns, self.formatters, self.transition, self.doc = num_turns, formatters, transition, doc
        self.env_id = env_id  # a registered env (ours only: the reference trains on dataset + reward tasks)
        self.env_kwargs = dict(env_kwargs or {})  # passed to make(env_id)
        self.opponent = opponent  # seat 1 is this OpenSpiel bot kind ("random") instead of a trained agent
        self.settings = {**SETTINGS, **(settings or {})}  # SETTINGS with this task's overrides
        self.learners = tuple(learners) if learners else None  # None: every learner
        self.budget = budget  # completions per agent per run when --budget is not given (None: the default)


# ----- dense: whitespace -----

def _ws_fraction(text: str) -> float:
    return sum(c.isspace() for c in text) / len(text) if text else 0.0


def whitespace_reward(completions_agent0: Sequence[str], completions_agent1: Sequence[str], *,
                      batch_items: Any = None) -> List[float]:
    """Mean over agents of each completion's fraction of whitespace characters."""
    return [(_ws_fraction(a) + _ws_fraction(b)) / 2 for a, b in zip(completions_agent0, completions_agent1)]


def _topic_rows(template: str) -> Callable[[], List[Dict[str, Any]]]:
    return lambda: [{"prompt": template.format(topic=t)} for t in TOPICS[:NUM_PROMPTS]]


# ----- sparse: both write a line break -----

def newline_reward(completions_agent0: Sequence[str], completions_agent1: Sequence[str], *,
                   batch_items: Any = None) -> List[float]:
    """1.0 when both completions contain a newline, else 0.0."""
    return [float("\n" in a and "\n" in b) for a, b in zip(completions_agent0, completions_agent1)]


# ----- multi-turn: guess a digit with feedback -----

def target_of(prompt: str) -> int:
    """The hidden digit of the game named in `prompt` ("Game 7: ...")."""
    game = int(re.search(r"Game (\d+)", prompt).group(1))
    return (game * 7 + 3) % 10


def _guess(text: str) -> Optional[int]:
    m = _DIGIT.search(text)
    return int(m.group()) if m else None


def digit_reward(completions_agent0: Sequence[str], completions_agent1: Sequence[str], *,
                 batch_items: Any = None) -> List[float]:
    """Per joint sample: mean over agents of 1 - |digit - target| / 9 (0 for an agent without a digit)."""
    target = batch_items[0]["target"]

    def q(text: str) -> float:
        g = _guess(text)
        return 0.0 if g is None else 1.0 - abs(g - target) / 9
    return [(q(a) + q(b)) / 2 for a, b in zip(completions_agent0, completions_agent1)]


def digit_transition(prompt: str = "", agent_completions: Sequence[str] = (), num_agents: int = 2,
                     **_: Any) -> List[str]:
    """Next prompts: the game's prompt plus whether the joint guess was too high, too low or right."""
    guesses = [g for g in (_guess(c) for c in agent_completions) if g is not None]
    if len(guesses) < num_agents:
        feedback = "Not every agent answered with a digit."
    else:
        joint, target = sum(guesses) / len(guesses), target_of(prompt)
        feedback = (f"The joint guess {joint:g} is correct." if round(joint) == target
                    else f"The joint guess {joint:g} was {'too high' if joint > target else 'too low'}.")
    return [f"{prompt}{feedback} Your last answer: {c[:40]}\nGuess again:" for c in agent_completions]


def _digit_rows() -> List[Dict[str, Any]]:
    rows = []
    for game in range(NUM_PROMPTS):
        prompt = f"Game {game}: guess the hidden digit (0-9). Answer with one digit.\n"
        rows.append({"prompt": prompt, "target": target_of(prompt)})
    return rows


# ----- coordination: say the word only your partner sees -----

def _word_score(text: str, word: str) -> float:
    return difflib.SequenceMatcher(None, text.strip().lower(), word).ratio()


def partner_word_reward(completions_agent0: Sequence[str], completions_agent1: Sequence[str], *,
                        batch_items: Any = None) -> List[float]:
    """Mean over agents of the character similarity of agent i's completion to its word `w{i}`."""
    item = batch_items[0]
    return [(_word_score(a, item["w0"]) + _word_score(b, item["w1"])) / 2
            for a, b in zip(completions_agent0, completions_agent1)]


def _coord_formatter(agent: int) -> Callable[..., str]:
    other = 1 - agent

    def fmt(item: Dict[str, Any], external_prompts: Any = None) -> str:
        return f"{item['prompt']}Your partner must say: {item[f'w{other}']}\nYour word:"
    fmt.__name__ = f"coord_formatter_{agent}"
    return fmt


def _coord_rows() -> List[Dict[str, Any]]:
    pairs = [(a, b) for a in WORDS for b in WORDS]  # 16 instances, every (w0, w1)
    return [{"prompt": "Say your word.\n", "w0": a, "w1": b} for a, b in pairs[:NUM_PROMPTS]]


TASKS: Dict[str, Task] = {
    "dense": Task("dense", _topic_rows("Write about {topic}.\n"), whitespace_reward,
                  doc="single turn, dense: whitespace fraction"),
    "sparse": Task("sparse", _topic_rows("Write two lines about {topic}.\n"), newline_reward,
                   doc="single turn, sparse 0/1: both write a newline"),
    "multiturn": Task("multiturn", _digit_rows, digit_reward, num_turns=2, transition=digit_transition,
                      doc="2 turns with feedback: guess a digit"),
    "coord": Task("coord", _coord_rows, partner_word_reward, formatters=[_coord_formatter(0), _coord_formatter(1)],
                  doc="each agent sees only its partner's word"),
    "hanabi": Task("hanabi", lambda: [], None, num_turns=2, env_id="openspiel/tiny_hanabi-v0",
                   env_kwargs={"invalid_action": "random", "numbered_actions": True},
                   settings={"max_new_tokens": 1, "learning_rate": 3e-2},
                   doc="cooperative game, turn-taking: OpenSpiel tiny_hanabi (ours only)"),
    "tictactoe": Task("tictactoe", lambda: [], None, env_id="openspiel/tic_tac_toe-v0",
                      env_kwargs={"invalid_action": "random", "numbered_actions": True}, opponent="random",
                      settings={"max_new_tokens": 1, "learning_rate": 3e-2, "top_k": None, "num_generations": 8,
                                "rollout_prompts": 16, "rollout_mode": "parallel"},  # a tree is K^moves
                      learners=("magrpo",), budget=8192,
                      doc="x against the random bot: OpenSpiel tic_tac_toe (ours only)"),
}


def dataset(task: str, seed: int) -> List[Dict[str, Any]]:
    """The task's rows in the seed's fixed order (both libraries then visit them in this order)."""
    rows = TASKS[task].rows()
    random.Random(seed).shuffle(rows)
    return rows


# ----- bookkeeping both sides share -----

def group_size(learner: str, task: str) -> int:
    """Samples per agent per node: K, or 1 for IAC/MAAC on multi-turn tasks (the reference needs 1 there)."""
    ac = learner.startswith(("iac", "maac"))
    return 1 if ac and TASKS[task].num_turns > 1 else TASKS[task].settings["num_generations"]


def completions_per_episode(learner: str, task: str) -> int:
    """Completions each agent samples per task instance: a tree of K children per joint action (MAGRPO,
    aligned: K + K^2 for 2 turns; cross: K + K^2 * K) or one chain (IAC/MAAC, K = 1 on several turns)."""
    k, turns = group_size(learner, task), TASKS[task].num_turns
    joint_per_node = k * k if learner in ("magrpo_cross", "magrpo_cf") else k
    total, nodes = 0, 1
    for _ in range(turns):
        total += nodes * k
        nodes *= joint_per_node if not learner.startswith(("iac", "maac")) else 1
    return total


def epochs_for(budget: int, per_episode: int) -> int:
    """Epochs over the NUM_PROMPTS rows that reach `budget` completions per agent (the last one is cut)."""
    return max(1, -(-budget // (per_episode * NUM_PROMPTS)))


class BudgetReached(Exception):
    """The run sampled its budget of completions per agent; training stops here."""


class NonFiniteReward(Exception):
    """A reward, a loss or a metric became NaN or infinite; the run stops with this error."""


class RewardRecorder:
    """Wraps a reward function: records every reward it returns, in call order; raises NonFiniteReward
    on a NaN/inf reward and, when `stop_after` is set, BudgetReached once that many are recorded."""

    def __init__(self, fn: Callable[..., List[float]], stop_after: Optional[int] = None) -> None:
        self.fn, self.stop_after, self.values = fn, stop_after, []
        self.active = True

    def __call__(self, completions_agent0: Sequence[str], completions_agent1: Sequence[str], *,
                 batch_items: Any = None) -> List[float]:
        if self.active and self.stop_after is not None and len(self.values) >= self.stop_after:
            raise BudgetReached(f"{len(self.values)} rewards recorded")
        out = self.fn(completions_agent0, completions_agent1, batch_items=batch_items)
        if any(v != v or v in (float("inf"), float("-inf")) for v in out):
            raise NonFiniteReward(f"reward function returned {out}")
        if self.active:
            self.values.extend(float(v) for v in out)
        return out


def run_error(exc: BaseException) -> Dict[str, Any]:
    """What a run that raised `exc` records: nothing when the budget stopped it (possibly wrapped in another
    exception by the trainer), else the error and the end of its traceback (NaN rewards included)."""
    cause: Optional[BaseException] = exc
    while cause is not None and not isinstance(cause, (BudgetReached, NonFiniteReward)):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, BudgetReached):
        return {}
    return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}


def final_reward(curve: Sequence[Sequence[float]], budget: int, fraction: float = SETTINGS["final_fraction"]) -> Optional[float]:
    """Mean reward over the points `[completions, mean_reward, n_rewards]` past (1 - fraction) * budget,
    weighted by their reward counts; None for an empty curve."""
    last = [p for p in curve if p[0] > (1 - fraction) * budget] or list(curve[-1:])
    n = sum(p[2] for p in last)
    return sum(p[1] * p[2] for p in last) / n if n else None
