"""coop/SecretPair-v1, coop/Picnic-v1, coop/SharedPick-v1 and coop/GridPick-v1: private-information tasks a team
solves only by talking.

Each agent sees a different part of what the answer needs (part 0 and part 1 of the instance). A team
episode has two turns: a **message** turn, in which each agent sends its partner a short text, then an
**answer** turn, in which each agent answers with the joint answer; the partner's message is in its prompt.
Neither part alone pins the answer down, so a team beats an agent that knows only its own part only by
passing what it holds.

Views (`make(id, view=...)`), on the same task instances:

- `"team"` (default): `agent_0` holds part 0, `agent_1` part 1; 2 turns (message, answer).
- `"full"`: one agent (`solver`) is shown both parts; 1 turn (answer only).
- `"own"`: one agent (`half-informed solver`) is shown one part; 1 turn. Its task set is every (instance,
  shown part): own index `2 * i + p` is instance `i` with part `p` shown, so `num_tasks` is twice the team's,
  `task["index"]` is the instance `i` and `task["own_part"]` is `p`. Which part is shown is thus independent
  of the instance: the prompt tells nothing about the hidden part (v0 showed part `i % 2`, which leaked the
  hidden part's parity). The instances `H` of a team split are the own indices `2h, 2h + 1` for h in H.

Reward (cooperative, every agent gets it; in [0, 1]): 0.0 on the message turn; on the answer turn the mean
over agents of each answer's credit. The credit pays only for what the answerer was not shown: 1.0 when the
answer is the whole right answer; 0.5 when it is wrong but gets right a part the answerer was not shown (the
partner's part; in the `own` view the hidden part); 0.0 otherwise. So an answer that repeats only its own
part earns 0, and the `full` view's answers earn 1 or 0. A lone agent's answer is scored as a team member's
with the same parts shown. An answer that restates a prompt (`is_echo`), names nothing of the answer, or
names several candidates of a kind (listing every candidate is no answer) earns 0 and is flagged
`invalid_action`; so do empty answers and random words. Words are read case-insensitively, as runs of
letters: punctuation, brackets and prose around them do not matter.

Information flow, in `infos[agent]` at the answer step of the `team` view: `"message_sent"` (the agent's
message-turn text, clipped to 200 characters: exactly what its partner's answer prompt quotes) and
`"used_partner_info"` (True when the agent's answer gets the partner's part right). The lone views set
neither. `metadata["partner_info_chance"]` is the rate of `used_partner_info` that an answer reaches without
its partner's message: given its own part (and the catalogue), the partner's part is uniform over
`1 / chance` candidates across the instances, so any message-free play, over all instances, gets it right at
exactly this rate (1/12 on SecretPair, 1/3 on SharedPick).

Termination: after the answer turn (turn 2 of `team`, turn 1 of `full` and `own`).

## coop/SecretPair-v1

`agent_0` holds a secret colour, `agent_1` a secret animal (12 each: `COLOURS`, `ANIMALS`); the answer is the
pair, e.g. `red cat`. 144 instances: `task_index = 12 * i + j` is colour `i` and animal `j`. An answer is read
as the one colour and the one animal it names ("grey" reads as gray); one of them may be missing (it is
then wrong), but two different colours or two different animals void the answer.

Observations of the `team` view (agent_0; agent_1's swap colour and animal):

    You hold the secret colour: red. Your partner holds the secret animal. Send your partner a short message.

    You hold the secret colour: red.
    Your partner's message: "<what agent_1 sent>"
    Name the secret colour and the secret animal. Answer with two words, like: <colour> <animal>

## coop/Picnic-v1

SecretPair's structure, chance level (1/12) and reading with another scenario and other words: `agent_0` knows
the fruit to bring, `agent_1` the meeting place (12 each: `FRUITS`, `PLACES`); the answer is both, e.g.
`plum zoo`. 144 instances: `task_index = 12 * i + j` is fruit `i` and place `j`. It is GridPick's successor in
the cooperation results (docs/results.md): at GridPick's chance level of 1/3 a silent team's lucky guesses earn
a third of the credit, and a SmolLM2-135M team did not learn to pass its part there.

    You know the fruit to bring: plum. Your partner knows the meeting place. Send your partner a short message.

    You know the fruit to bring: plum.
    Your partner's message: "<what agent_1 sent>"
    Name the fruit to bring and the meeting place. Answer with two words, like: <fruit> <place>

## coop/SharedPick-v1

Both agents see a catalogue of 9 items, every combination of 3 sizes (`SIZES`) and 3 of 8 colours, each
with its own name (9 of the 16 `ITEMS`), e.g. `small red box`. `agent_0` knows the target's colour,
`agent_1` its size: each alone leaves 3 candidates, both together one. The answer is the target's name.
504 instances: `task_index = 9 * c + k` is catalogue `c` (colours: the c-th 3-subset of `COLOURS_8` in
`itertools.combinations` order; names: `ITEMS[(3 * c + 7 * m) % 16]` for the 9 items m in size-major order)
and target item `k` (size `k // 3`, colour `k % 3`). An answer names the one item name it contains (any of
`ITEMS`; a name not in this catalogue is wrong); two different names void it. The answer's credit for a
part is whether the named item has the target's colour (part 0) or size (part 1).

Observations of the `team` view (agent_0; agent_1 knows the size and is told its partner knows the colour):

    Items: small red box, small blue cup, ..., large green ball.
    The target's colour is red. Your partner knows the target's size. Send your partner a short message.

    Items: small red box, small blue cup, ..., large green ball.
    The target's colour is red.
    Your partner's message: "<what agent_1 sent>"
    Which item is the target? Answer with its name, like: <item>

## coop/GridPick-v1

SharedPick without item names: the catalogue is the grid of 3 sizes and this instance's 3 colours, shown on
the answer turn, and the answer is the target's size and colour. Same instances (`task_index = 9 * c + k`)
and parts as SharedPick; what changes is the prompts (SecretPair's wording: "You hold ..."; the message turn
shows only the agent's part) and how an answer is read. An answer is read as the one
size and the one colour (of `COLOURS_8`) it names, as SecretPair reads its pairs: one may be missing (it is
then wrong), two different sizes or colours void it, and a colour outside the instance's three is wrong.
SharedPick's answer needs a lookup (size and colour to the item's name) that neither the untrained
SmolLM2-135M nor 3,072 completions of training learned (docs/results.md); GridPick keeps the task's
structure, its chance level (1/3) and its credit, and drops the lookup. (At the cooperation results' budget of
1,280 completions a SmolLM2-135M team did not learn to pass its part here either: docs/DESIGN.md,
Cooperation results.)

    You hold the target's colour: red. Your partner holds the target's size. Send your partner a short message.

    Sizes: small, medium, large. Colours: red, blue, green.
    You hold the target's colour: red.
    Your partner's message: "<what agent_1 sent>"
    Name the target's size and colour. Answer with two words, like: <size> <colour>

Versions: v1 (all four tasks; GridPick and Picnic started at v1 so that the private-information tasks share a
version): the `own` view has one instance per (instance, shown part). v0: the first; its `own` view showed
part `task_index % 2`, which told a lone agent the parity of the index (SecretPair: the
hidden animal's; SharedPick, with the catalogue, the target's), so a parity guess earned 0.125 and 0.667
there against the chance levels 1/12 and 1/3. The `team` and `full` views are unchanged.
"""

from __future__ import annotations

import abc
import itertools
import re
from typing import Any

from comlrl_env.base import AgentID, TextParallelEnv

__all__ = ["ANIMALS", "COLOURS", "COLOURS_8", "FRUITS", "ITEMS", "PLACES", "SIZES", "VIEWS", "GridPick", "Picnic",
           "SecretPair", "SharedPick"]

VIEWS = ("team", "full", "own")
MESSAGE_CHARS = 200  # a message is clipped to this many characters, in the partner's prompt and in infos
# Every word is one token for SmolLM2's tokenizer after a space, and no word is inside another list.
COLOURS = ("red", "blue", "green", "yellow", "black", "white", "pink", "brown", "orange", "purple", "gray", "gold")
ANIMALS = ("cat", "dog", "cow", "pig", "fox", "owl", "bee", "horse", "sheep", "duck", "bear", "lion")
COLOURS_8 = ("red", "blue", "green", "yellow", "black", "white", "brown", "orange")
SIZES = ("small", "medium", "large")
FRUITS = ("apple", "pear", "plum", "grape", "lemon", "peach", "cherry", "mango", "banana", "kiwi", "lime", "fig")
PLACES = ("park", "library", "station", "museum", "beach", "market", "school", "bank", "church", "hotel", "zoo",
          "garden")
ITEMS = ("box", "cup", "hat", "bag", "key", "pen", "cap", "jar", "ball", "book", "bell", "coin", "ring", "sock",
         "lamp", "fork")
ALIASES = {"grey": "gray"}
CATALOGUES = tuple(itertools.combinations(range(len(COLOURS_8)), 3))  # 56 colour trios
_WORD = re.compile(r"[a-z]+")


def words(text: str) -> list[str]:
    """The runs of letters in `text`, lower-cased, with `ALIASES` applied (what every answer is read as)."""
    return [ALIASES.get(w, w) for w in _WORD.findall(text.lower())]


def named(text: str, vocabulary: tuple[str, ...]) -> list[str]:
    """The distinct words of `vocabulary` that `text` names, in order of first appearance."""
    wanted = set(vocabulary)
    return list(dict.fromkeys(w for w in words(text) if w in wanted))


class _PrivateInfoTask(TextParallelEnv):
    """Shared turn structure and scoring of the private-information tasks (see the module docstring).

    A subclass writes `instance(i)` (the dict its texts need, with "parts"), `known(part)`,
    `hidden(part, partner)`, `context()`, `question`, `message_hint(part)`, `read(text)` and `answer_text()`.
    """

    #: The answer turn's instruction, with an example of the format (placeholders, never an answer).
    question = ""
    role_names: tuple[str, str] = ("part 0 holder", "part 1 holder")

    def __init__(self, view: str = "team", **kwargs: Any) -> None:
        if view not in VIEWS:
            raise ValueError(f"view must be one of {VIEWS}, got {view!r}: 'team' (2 agents, message then answer), "
                             "'full' (1 agent shown both parts) or 'own' (1 agent shown one part).")
        fixed = sorted(set(kwargs) & {"num_agents", "num_turns", "roles"})
        if fixed:
            raise ValueError(f"{fixed} are set by the view (team: 2 agents, 2 turns; full and own: 1 agent, "
                             f"1 turn); pass view= instead, got {view=!r} and {fixed}.")
        team = view == "team"
        roles = list(self.role_names) if team else ["solver" if view == "full" else "half-informed solver"]
        super().__init__(num_agents=len(roles), num_turns=2 if team else 1, roles=roles, **kwargs)
        self.view = view
        instances = type(self).metadata["num_tasks"]
        self.metadata = {**type(self).metadata, "view": view, "num_tasks": instances * (2 if view == "own" else 1)}

    # ----- who is shown what ----------------------------------------------------

    def held_parts(self, agent: AgentID) -> tuple[int, ...]:
        """The parts `agent` is shown: its own in the team (agent_i holds part i), both (full), one (own)."""
        if self.view == "team":
            return (self.possible_agents.index(agent),)
        return (0, 1) if self.view == "full" else (self.task["own_part"],)

    def message(self, agent: AgentID) -> str:
        """`agent`'s message-turn text, clipped to `MESSAGE_CHARS` ("" before the message turn)."""
        history = self.response_history.get(agent) or [""]
        return history[0][:MESSAGE_CHARS]

    def partner(self, agent: AgentID) -> AgentID:
        return self.possible_agents[1 - self.possible_agents.index(agent)]

    # ----- TextParallelEnv ------------------------------------------------------

    def load_task(self, task_index: int | None) -> dict:
        """Instance `task_index` (a seeded draw when None) of this view's task set: `instance(i)` plus its
        `"index"` i and the `"own_part"` the `own` view shows (own index `2 * i + p`; 0 in the other views)."""
        index = int(self.np_random.integers(self.metadata["num_tasks"])) if task_index is None else task_index
        instance, own_part = divmod(index, 2) if self.view == "own" else (index, 0)
        return {**self.instance(instance), "index": instance, "own_part": own_part}

    def prompts(self) -> dict[AgentID, str]:
        context = self.context()
        out = {}
        for agent in self.agents:
            held = self.held_parts(agent)
            known = " ".join(self.known(p) for p in held)
            if self.view == "own":
                out[agent] = f"{context}{known} {self.hidden(1 - held[0], partner=False)}\n{self.question}\n"
            elif self.view == "full":
                out[agent] = f"{context}{known}\n{self.question}\n"
            elif self.turn == 0:
                out[agent] = (f"{context}{known} {self.hidden(1 - held[0], partner=True)} "
                              "Send your partner a short message.\n")
            else:
                out[agent] = (f"{context}{known}\nYour partner's message: \"{self.message(self.partner(agent))}\"\n"
                              f"{self.question}\n")
        return out

    def score(self, actions: dict[AgentID, str]) -> tuple[float, bool]:
        """0 on the message turn; on the answer turn the mean over agents of `credit`, and the episode ends."""
        if self.view == "team" and self.turn == 0:
            return 0.0, False
        credits = []
        for agent, text in actions.items():
            right, reason = (set(), "the answer restates the prompt") if self.is_echo(text) else self.read(text)
            if reason:
                self.flag_invalid(agent, reason)
            credits.append(credit(right, self.held_parts(agent)))
            if self.view == "team":
                self._step_infos.setdefault(agent, {}).update(
                    message_sent=self.message(agent), used_partner_info=1 - self.held_parts(agent)[0] in right)
        return sum(credits) / len(credits), True

    def canonical_actions(self) -> dict[AgentID, str]:
        """The reference play: on the message turn each agent states its part, then every agent answers right."""
        if self.view == "team" and self.turn == 0:
            return {a: self.message_hint(self.held_parts(a)[0]) for a in self.agents}
        return {a: self.answer_text() for a in self.agents}

    # ----- what a subclass writes ---------------------------------------------------

    def context(self) -> str:
        """Text both agents see before their parts ("" when none); ends with a newline when not empty."""
        return ""

    @abc.abstractmethod
    def instance(self, index: int) -> dict:
        """Task instance `index` of the team's set: a dict with "parts" (part 0, part 1) and what texts need."""

    @abc.abstractmethod
    def known(self, part: int) -> str:
        """The sentence that shows `part` to the agent holding it."""

    @abc.abstractmethod
    def hidden(self, part: int, partner: bool) -> str:
        """The sentence that says `part` is not shown: the partner holds it, or (lone) it is hidden."""

    @abc.abstractmethod
    def message_hint(self, part: int) -> str:
        """The reference message that passes `part` on (`canonical_actions`)."""

    @abc.abstractmethod
    def answer_text(self) -> str:
        """The whole right answer."""

    @abc.abstractmethod
    def read(self, text: str) -> tuple[set[int], str | None]:
        """The parts `text` gets right, and why it is invalid (None when it is a well-formed answer)."""


def credit(right: set[int], held: tuple[int, ...]) -> float:
    """One answer's credit: 1 when both parts are right, 0.5 when a part the answerer was not shown is, else 0.

    `right` holds the parts (0, 1) the answer gets right; `held` the parts the answerer was shown. A better
    answer never earns less: credit({}) = credit(held only) = 0 <= credit(unshown) = 0.5 <= credit({0, 1}) = 1.
    """
    if right >= {0, 1}:
        return 1.0
    return 0.5 if right - set(held) else 0.0


def read_pair(text: str, vocabularies: tuple[tuple[str, ...], tuple[str, ...]], kinds: tuple[str, str],
              parts: tuple[str, str]) -> tuple[set[int], str | None]:
    """How SecretPair and GridPick read an answer: the one word of each vocabulary it names (one may be missing,
    and is then wrong). The parts it gets right, and why it is invalid: it names no word of either, or two
    different words of one (None when well formed)."""
    found = [named(text, vocabulary) for vocabulary in vocabularies]
    if not any(found):
        return set(), f"no {kinds[0]} or {kinds[1]} in the answer"
    if any(len(f) > 1 for f in found):
        return set(), (f"the answer names {len(found[0])} {kinds[0]}s and {len(found[1])} {kinds[1]}s; "
                       "name one of each")
    return {p for p in (0, 1) if found[p] == [parts[p]]}, None


class SecretPair(_PrivateInfoTask):
    """agent_0 holds a colour, agent_1 an animal; each answers with the pair (see the module docstring)."""

    metadata = {**TextParallelEnv.metadata, "name": "coop/SecretPair-v1", "num_tasks": len(COLOURS) * len(ANIMALS),
                "success_threshold": 1.0, "partner_info_chance": 1 / len(ANIMALS),  # 12 colours, 12 animals
                "reward_range": (0.0, 1.0)}
    question = "Name the secret colour and the secret animal. Answer with two words, like: <colour> <animal>"
    role_names = ("colour holder", "animal holder")
    KINDS = ("colour", "animal")
    VOCABULARIES = (COLOURS, ANIMALS)  # part 0's words, part 1's (as many of each)

    def instance(self, index: int) -> dict:
        i, j = divmod(index, len(self.VOCABULARIES[1]))
        return {"parts": (self.VOCABULARIES[0][i], self.VOCABULARIES[1][j])}

    def known(self, part: int) -> str:
        return f"You hold the secret {self.KINDS[part]}: {self.task['parts'][part]}."

    def hidden(self, part: int, partner: bool) -> str:
        return (f"Your partner holds the secret {self.KINDS[part]}." if partner
                else f"The secret {self.KINDS[part]} is hidden from you.")

    def message_hint(self, part: int) -> str:
        return f"My {self.KINDS[part]} is {self.task['parts'][part]}."

    def answer_text(self) -> str:
        return " ".join(self.task["parts"])

    def read(self, text: str) -> tuple[set[int], str | None]:
        return read_pair(text, self.VOCABULARIES, self.KINDS, self.task["parts"])


class Picnic(SecretPair):
    """agent_0 knows the fruit to bring, agent_1 the meeting place; each answers with both (module docstring)."""

    metadata = {**SecretPair.metadata, "name": "coop/Picnic-v1", "num_tasks": len(FRUITS) * len(PLACES),
                "partner_info_chance": 1 / len(PLACES)}  # 12 fruits, 12 places
    question = "Name the fruit to bring and the meeting place. Answer with two words, like: <fruit> <place>"
    role_names = ("fruit holder", "place holder")
    KINDS = ("fruit", "place")
    VOCABULARIES = (FRUITS, PLACES)
    _THINGS = ("the fruit to bring", "the meeting place")

    def known(self, part: int) -> str:
        return f"You know {self._THINGS[part]}: {self.task['parts'][part]}."

    def hidden(self, part: int, partner: bool) -> str:
        return (f"Your partner knows {self._THINGS[part]}." if partner
                else f"{self._THINGS[part].capitalize()} is hidden from you.")

    def message_hint(self, part: int) -> str:
        return f"Bring {self.task['parts'][part]}." if part == 0 else f"We meet at the {self.task['parts'][part]}."


class SharedPick(_PrivateInfoTask):
    """A shared catalogue; agent_0 knows the target's colour, agent_1 its size; both name it (module docstring)."""

    metadata = {**TextParallelEnv.metadata, "name": "coop/SharedPick-v1", "num_tasks": 9 * len(CATALOGUES),
                "success_threshold": 1.0, "partner_info_chance": 1 / 3,  # 3 sizes of a colour, 3 colours of a size
                "reward_range": (0.0, 1.0)}
    question = "Which item is the target? Answer with its name, like: <item>"
    role_names = ("colour holder", "size holder")
    KINDS = ("colour", "size")

    def instance(self, index: int) -> dict:
        c, k = divmod(index, 9)
        colours = [COLOURS_8[i] for i in CATALOGUES[c]]
        # item m (size-major order) is (SIZES[m // 3], colours[m % 3]) and is called ITEMS[(3c + 7m) % 16]:
        # 7 is prime to 16, so the 9 names differ.
        items = {ITEMS[(3 * c + 7 * m) % len(ITEMS)]: (colours[m % 3], SIZES[m // 3]) for m in range(9)}
        target = list(items)[k]
        return {"items": items, "target": target, "parts": items[target]}

    def context(self) -> str:
        listed = ", ".join(f"{size} {colour} {name}" for name, (colour, size) in self.task["items"].items())
        return f"Items: {listed}.\n"

    def known(self, part: int) -> str:
        return f"The target's {self.KINDS[part]} is {self.task['parts'][part]}."

    def hidden(self, part: int, partner: bool) -> str:
        return (f"Your partner knows the target's {self.KINDS[part]}." if partner
                else f"The target's {self.KINDS[part]} is hidden from you.")

    def message_hint(self, part: int) -> str:
        return f"Its {self.KINDS[part]} is {self.task['parts'][part]}."

    def answer_text(self) -> str:
        return self.task["target"]

    def read(self, text: str) -> tuple[set[int], str | None]:
        found = named(text, ITEMS)
        if not found:
            return set(), "no item named in the answer"
        if len(found) > 1:
            return set(), f"the answer names {len(found)} items; name one"
        attributes = self.task["items"].get(found[0])
        if attributes is None:  # a name from another catalogue: no part of it is right
            return set(), None
        return {p for p in (0, 1) if attributes[p] == self.task["parts"][p]}, None


class GridPick(SharedPick):
    """SharedPick with the target named by its size and colour, not an item name (see the module docstring)."""

    metadata = {**SharedPick.metadata, "name": "coop/GridPick-v1"}
    question = "Name the target's size and colour. Answer with two words, like: <size> <colour>"

    def context(self) -> str:
        """The grid, on every answer turn (the message turn needs only the agent's own part)."""
        if self.view == "team" and self.turn == 0:
            return ""
        colours = list(dict.fromkeys(colour for colour, _ in self.task["items"].values()))
        return f"Sizes: {', '.join(SIZES)}. Colours: {', '.join(colours)}.\n"

    def known(self, part: int) -> str:
        return f"You hold the target's {self.KINDS[part]}: {self.task['parts'][part]}."

    def hidden(self, part: int, partner: bool) -> str:
        return (f"Your partner holds the target's {self.KINDS[part]}." if partner
                else f"The target's {self.KINDS[part]} is hidden from you.")

    def answer_text(self) -> str:
        colour, size = self.task["parts"]
        return f"{size} {colour}"

    def read(self, text: str) -> tuple[set[int], str | None]:
        return read_pair(text, (COLOURS_8, SIZES), self.KINDS, self.task["parts"])
