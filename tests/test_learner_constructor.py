"""Every learner's constructor is documented where the site shows it: each parameter of the signature a class
shows (its own `__init__`, or the one it inherits) has an entry in that `__init__`'s Google "Args:" section,
and MARLHF's "Keyword Args:" list every argument it passes on to its policy learner. MAGRPO, IAC and MAAC
define no `__init__` of their own, so they show `Learner`'s signature and documentation."""

from __future__ import annotations

import inspect
import re

import pytest

from learners import IAC, MAAC, MAGRPO, MARLHF, Learner, MARLHFIter

SECTION = re.compile(r"^(?P<title>[A-Z][\w ]*):\s*$")
ENTRY = re.compile(r"^    (?P<name>\*{0,2}\w+)(?: \(.+\))?: \S")


def sections(doc: str) -> dict[str, list[str]]:
    """The entry names of each section ("Args", "Keyword Args", "Raises", ...) of a Google-style docstring."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in inspect.cleandoc(doc).splitlines():
        title = SECTION.match(line)
        if title:
            current = out.setdefault(title.group("title"), [])
        elif current is not None and (entry := ENTRY.match(line)):
            current.append(entry.group("name"))
        elif line and not line.startswith(" "):
            current = None  # text after a section ends it
    return out


def parameters(function: object) -> list[str]:
    """The documented names of a function's parameters: `*args` and `**kwargs` with their stars, no `self`."""
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [stars.get(p.kind, "") + name for name, p in inspect.signature(function).parameters.items()
            if name != "self"]


def test_the_parser_reads_google_sections():
    doc = """Summary.

    Args:
        a: First.
            More about a.
        b (int): Second.
        **kwargs: Rest.

    Raises:
        ValueError: When.
    """
    assert sections(doc) == {"Args": ["a", "b", "**kwargs"], "Raises": ["ValueError"]}


@pytest.mark.parametrize("cls", [Learner, MAGRPO, IAC, MAAC, MARLHF, MARLHFIter], ids=lambda c: c.__name__)
def test_every_constructor_parameter_is_documented(cls):
    init = cls.__init__  # the class's own, or the one it inherits: what the site shows for it
    documented = sections(inspect.getdoc(init) or "").get("Args", [])
    assert [p for p in parameters(init) if p not in documented] == []
    assert [d for d in documented if d not in parameters(init)] == []  # no stale entries


@pytest.mark.parametrize("cls", [MAGRPO, IAC, MAAC], ids=lambda c: c.__name__)
def test_the_learners_show_the_base_constructor(cls):
    assert "__init__" not in vars(cls)
    assert cls.__init__ is Learner.__init__


def test_marlhf_lists_every_argument_it_passes_to_its_policy_learner():
    own = set(parameters(MARLHF.__init__)) - {"**kwargs"}
    passed_on = [p for p in parameters(Learner.__init__) if p not in own]
    assert sections(inspect.getdoc(MARLHF.__init__))["Keyword Args"] == passed_on
    assert MARLHFIter.__init__ is MARLHF.__init__


def test_the_base_constructor_documents_its_errors_and_shows_a_call():
    doc = inspect.getdoc(Learner.__init__)
    assert {"TypeError", "ValueError"} <= set(sections(doc)["Raises"])
    assert "Example:" in doc and "MAGRPO(env=" in doc
