"""The API reference covers what the guides use and says what every constructor argument means.

Checked by reading files and importing the library, without mkdocs (`make docs` renders the pages):

- every library name used by a Python block of README.md or of a page under docs/, by a file in examples/, or
  named in full (`comlrl_env.league.run_league`) in inline code of README.md or a guide (docs/guide/) has a
  reference entry: a `::: dotted.path` line on a page of docs/reference/ that names the same object (an alias
  or a re-export of it counts). A use that reaches past the object (`AgentPolicy.from_saved`) also needs that
  member shown on the object's entry, with a docstring of its own;
- every constructor argument of every class with an entry is documented: under "Args:" or "Attributes:" of
  the class docstring or of the `__init__` docstring the entry shows, or as a dataclass field with an
  attribute docstring;
- each learner's entry shows its constructor (merged into the class), then the calls a user makes, and none
  of the methods the learners call on themselves; each config entry shows its own fields and nothing else;
- the callback events the learners page lists are the ones `Learner.learn()` fires.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pathlib
import re
import textwrap
from typing import Any

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGES = ("comlrl_env", "learners", "rewards")
ENTRY = re.compile(r"^::: ([\w.]+)[ \t]*\n((?:(?:[ \t]+\S[^\n]*)?\n)*)", re.M)
# The Google-style sections whose items name arguments or fields (griffe's names for them).
SECTION = re.compile(r"^(\s*)(Args|Arguments|Attributes|Parameters|Keyword Args|Keyword Arguments|Other Parameters)"
                     r":\s*$")

# The calls a user makes on a learner, in the order its entry shows them (those a learner has).
LEARNER_API = ["learn", "train", "evaluate", "save_model", "save_checkpoint", "load_checkpoint"]
LEARNERS = ["learners.MAGRPO", "learners.IAC", "learners.MAAC", "learners.MARLHF", "learners.MARLHFIter"]


# ----- reading the reference pages -------------------------------------------------------------------------


@dataclasses.dataclass
class Entry:
    """One `::: path` block of a reference page, with its options merged over mkdocs.yml's."""

    path: str
    where: str
    options: dict[str, Any]


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's loader: its `!ENV [...]` tags read as None (only the plugin options matter here)."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def global_options() -> dict[str, Any]:
    """The mkdocstrings python handler's options in mkdocs.yml."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            return dict(plugin["mkdocstrings"]["handlers"]["python"].get("options", {}))
    raise AssertionError("mkdocs.yml has no mkdocstrings plugin")


def parse_entries(text: str, where: str, defaults: dict[str, Any]) -> list[Entry]:
    """The `::: path` blocks of a markdown text and the options indented under each."""
    entries = []
    for m in ENTRY.finditer(text):
        block = yaml.safe_load(textwrap.dedent(m.group(2))) if m.group(2).strip() else None
        own = (block or {}).get("options", {}) or {}
        line = text[:m.start()].count("\n") + 1
        entries.append(Entry(m.group(1), f"{where}:{line}", {**defaults, **own}))
    return entries


def reference_entries() -> list[Entry]:
    defaults = global_options()
    return [e for page in sorted((DOCS / "reference").glob("*.md"))
            for e in parse_entries(page.read_text(encoding="utf-8"), page.relative_to(ROOT).as_posix(), defaults)]


def resolve(dotted: str) -> Any:
    """The object a dotted path names: the longest importable module, then attributes (a module shadowed by
    a name of its package, `comlrl_env.suites.suites`, is reached as the module)."""
    parts = dotted.split(".")
    obj: Any = importlib.import_module(parts[0])
    for i in range(1, len(parts)):
        if inspect.ismodule(obj):
            prefix = ".".join(parts[:i + 1])
            try:
                obj = importlib.import_module(prefix)
                continue
            except ModuleNotFoundError as e:
                if e.name != prefix:
                    raise
        obj = getattr(obj, parts[i])
    return obj


def resolve_use(dotted: str) -> tuple[str, Any, list[str]] | None:
    """(path to the first object that is not a module, that object, the attribute names after it) of a used
    dotted name; None when the whole name is a module."""
    parts = dotted.split(".")
    for i in range(1, len(parts) + 1):
        obj = resolve(".".join(parts[:i]))
        if not inspect.ismodule(obj):
            return ".".join(parts[:i]), obj, parts[i:]
    return None


# ----- what the guides and examples use -------------------------------------------------------------------


def used_names(source: str) -> set[str]:
    """The dotted library names a Python source uses: `from pkg.mod import Name` as `pkg.mod.Name`, and every
    outermost attribute chain that starts at an imported library module or name (`comlrl_env.make`,
    `AgentPolicy.from_saved` after `from learners.models.policy import AgentPolicy`)."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                found.add(f"{node.module}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top in PACKAGES:  # `import pkg.mod` binds `pkg`; `import pkg.mod as m` binds `m` to the module
                    aliases[a.asname or top] = a.name if a.asname else top
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            parts, n = [], node
            while isinstance(n, ast.Attribute):
                parts.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name) and n.id in aliases:
                found.add(".".join([aliases[n.id], *reversed(parts)]))
    return found


def fenced_python(text: str) -> list[tuple[int, str]]:
    """(line, code) of each ```python block of a markdown text."""
    return [(text[:m.start()].count("\n") + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S)]


def inline_names(text: str) -> set[str]:
    """Full dotted library names in inline code outside fenced blocks: `comlrl_env.benchmark.run_suite(...)`."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return set(re.findall(rf"`((?:{'|'.join(PACKAGES)})(?:\.\w+)+)", prose))


def guide_uses() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """({dotted name: where} used by code, {dotted name: where} named in the guides' inline code)."""
    code: dict[str, set[str]] = {}
    prose: dict[str, set[str]] = {}
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    for page in pages:
        rel = page.relative_to(ROOT).as_posix()
        text = page.read_text(encoding="utf-8")
        for line, block in fenced_python(text):
            for name in used_names(block):
                code.setdefault(name, set()).add(f"{rel}:{line}")
        if rel == "README.md" or rel.startswith("docs/guide/"):
            for name in inline_names(text):
                prose.setdefault(name, set()).add(rel)
    for path in sorted((ROOT / "examples").glob("*.py")):
        for name in used_names(path.read_text(encoding="utf-8")):
            code.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    return code, prose


# ----- what an entry shows ---------------------------------------------------------------------------------


def _keep(name: str, filters: Any) -> bool:
    """mkdocstrings' name filters: the last matching filter decides; with no match, keep unless every filter
    is an include."""
    if filters == "public":
        return not name.startswith("_")
    keep, kinds = None, set()
    for f in filters or []:
        exclude = f.startswith("!")
        kinds.add(exclude)
        if re.search(f[1:] if exclude else f, name):
            keep = not exclude
    return (kinds != {False}) if keep is None else keep


def _library_classes(cls: type) -> list[type]:
    """`cls` and the classes of its MRO whose source a docs build reads (not builtins or the stdlib)."""
    return [k for k in cls.__mro__ if k.__module__.split(".")[0] in PACKAGES or k is cls
            or k.__module__ == __name__]


def attribute_docs(cls: type) -> dict[str, str]:
    """{name: docstring} of the class-body assignments of `cls` followed by a string (attribute docstrings)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for stmt, nxt in zip(body, body[1:]):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        doc = nxt.value.value if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) else None
        for t in targets:
            if isinstance(t, ast.Name) and isinstance(doc, str) and doc.strip():
                docs[t.id] = doc
    return docs


def own_doc(cls: type, name: str) -> str | None:
    """The docstring `cls` itself gives member `name` (griffe shows no docstring a member only inherits)."""
    if name in attribute_docs(cls):
        return attribute_docs(cls)[name]
    raw = cls.__dict__.get(name)
    func = getattr(raw, "__func__", None) or getattr(raw, "fget", None) or raw  # classmethod, property
    nested = inspect.isclass(func) and func.__qualname__ == f"{cls.__qualname__}.{name}"
    # A plain class attribute (`config_class = MAGRPOConfig`) has only an attribute docstring, found above.
    doc = func.__doc__ if inspect.isfunction(func) or nested else None
    return doc if isinstance(doc, str) and doc.strip() else None


def members_of(cls: type) -> dict[str, type]:
    """{member name: the class that defines it}, for `cls` and its library bases (nearest first)."""
    found: dict[str, type] = {}
    for klass in _library_classes(cls):
        names = list(vars(klass)) + list(vars(klass).get("__annotations__", {}))
        for name in names:
            found.setdefault(name, klass)
    return found


def shown_members(entry: Entry, cls: type) -> list[str]:
    """The members a class entry renders under mkdocstrings' rules (its `inherited_members`, `members` and
    `filters` options; a member without a docstring of its own is left out; a merged `__init__` is not a
    member)."""
    opts = entry.options
    inherited_opt = opts.get("inherited_members", False)
    members_opt = opts.get("members")
    shown = []
    for name, owner in members_of(cls).items():
        inherited = owner is not cls
        if name == "__init__" and opts.get("merge_init_into_class"):
            continue
        if inherited and not (inherited_opt is True or (isinstance(inherited_opt, list) and name in inherited_opt)):
            continue
        picked = isinstance(inherited_opt, list) and inherited
        if members_opt is True:
            keep = True
        elif members_opt is False or members_opt == []:
            keep = inherited
        elif isinstance(members_opt, list):
            keep = name in members_opt or picked
        else:
            keep = (_keep(name, opts.get("filters", ["!^_"])) or picked) and (
                picked or opts.get("show_if_no_docstring") or own_doc(owner, name) is not None)
        if keep:
            shown.append(name)
    return shown


def shown_init(entry: Entry, cls: type) -> Any:
    """The `__init__` whose docstring the class entry shows merged, or None."""
    if not entry.options.get("merge_init_into_class"):
        return None
    owner = members_of(cls).get("__init__")
    inherited_opt = entry.options.get("inherited_members", False)
    if owner is None or (owner is not cls and not (inherited_opt is True or "__init__" in (inherited_opt or []))):
        return None
    return owner.__dict__["__init__"]


# ----- documented arguments --------------------------------------------------------------------------------


def section_names(doc: str | None) -> set[str]:
    """The names listed under "Args:", "Attributes:" (and their synonyms) of a Google-style docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    names: set[str] = set()
    i = 0
    while i < len(lines):
        m = SECTION.match(lines[i])
        i += 1
        if not m:
            continue
        base, item = len(m.group(1)), None
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > base):
            indent = len(lines[i]) - len(lines[i].lstrip())
            if lines[i].strip() and (item is None or indent == item):
                item = indent
                name = re.match(r"\s*\**(\w+)\s*(?:\([^)]*\))?\s*:", lines[i])
                if name:
                    names.add(name.group(1))
            i += 1
    return names


def constructor_arguments(cls: type) -> list[str]:
    """The named arguments of `cls(...)`: a dataclass's init fields, else `inspect.signature(cls)`'s
    parameters but `self`, `*args` and `**kwargs`."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls) if f.init]
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # a builtin's constructor, e.g. an exception's
        return []
    return [p.name for p in params if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def undocumented_arguments(entry: Entry, cls: type) -> list[str]:
    """The constructor arguments of a class entry that its page does not explain."""
    documented = section_names(cls.__dict__.get("__doc__"))
    init = shown_init(entry, cls)
    documented |= section_names(getattr(init, "__doc__", None))
    for klass in _library_classes(cls):
        documented |= set(attribute_docs(klass))
    return [name for name in constructor_arguments(cls) if name not in documented]


# ----- the checks catch what they are for ------------------------------------------------------------------

PLANTED_PAGE = """# A page

::: learners.models.policy.AgentPolicy
    options:
      members: [from_saved]

::: comlrl_env.make
"""

PLANTED_CODE = """
import comlrl_env
import learners as L
from comlrl_env.league import run_league
from learners.models.policy import AgentPolicy

env = comlrl_env.make("smoke/FormatAgreement-v1")
team = AgentPolicy.from_saved("runs/agents")
run_league("games", {"team": team}, episodes=2)
L.MAGRPOConfig(num_generations=2).seed
"""


def problems_with(uses: dict[str, set[str]], entries: list[Entry], strict: bool = True) -> list[str]:
    """Each used name with no entry (or a member its entry does not show); with `strict`, each that does not
    resolve."""
    documented = {}
    for entry in entries:
        documented.setdefault(id(resolve(entry.path)), entry)
    out = []
    for name, where in sorted(uses.items()):
        try:
            found = resolve_use(name)
        except (ImportError, AttributeError) as e:
            if strict:
                out.append(f"{name} ({', '.join(sorted(where))}) does not resolve: {e}")
            continue
        if found is None:
            continue  # a module, whose names are checked where they are used
        path, obj, rest = found
        entry = documented.get(id(obj))
        if entry is None:
            out.append(f"{name} ({', '.join(sorted(where))}): no entry; add `::: {path}` to a reference page")
        elif rest and inspect.isclass(obj) and rest[0] not in shown_members(entry, obj):
            out.append(f"{name} ({', '.join(sorted(where))}): the entry at {entry.where} does not show "
                       f"{rest[0]!r}; list it in its `members` option or give it a docstring")
    return out


def test_the_scan_finds_what_it_looks_for():
    uses = {name: {"planted"} for name in used_names(PLANTED_CODE)}
    assert sorted(uses) == ["comlrl_env.league.run_league", "comlrl_env.make", "learners.MAGRPOConfig",
                            "learners.models.policy.AgentPolicy", "learners.models.policy.AgentPolicy.from_saved"]
    entries = parse_entries(PLANTED_PAGE, "planted", {"filters": ["!^_"]})
    assert entries[0].options["members"] == ["from_saved"] and entries[1].path == "comlrl_env.make"
    found = problems_with(uses, entries)
    assert [p.split(" ")[0] for p in found] == ["comlrl_env.league.run_league", "learners.MAGRPOConfig"]
    entries[0].options["members"] = ["__call__"]  # the member the code calls is no longer shown
    assert "learners.models.policy.AgentPolicy.from_saved" in [p.split(" ")[0] for p in problems_with(uses, entries)]
    assert "does not resolve" in problems_with({"learners.NoSuchName": {"planted"}}, entries)[0]
    assert inline_names("Use `comlrl_env.benchmark.run_suite(...)`.\n```python\nx = `learners.X`\n```\n") == {
        "comlrl_env.benchmark.run_suite"}


class PlantedPolicy:
    """A planted class whose constructor documents one of its two arguments.

    Args:
        episodes: Documented.
    """

    def __init__(self, episodes: int, seed: int = 0) -> None:
        self.episodes, self.seed = episodes, seed


@dataclasses.dataclass
class PlantedConfig:
    """A planted config: one field with an attribute docstring, one without, a table that is no field."""

    documented: int = 1
    """Documented."""
    bare: int = 2

    NUMBERS = {"documented": 1}
    """A class-level table."""

    def helper(self) -> int:
        """A method."""
        return self.documented


class PlantedLearner(PlantedPolicy):
    """A subclass that inherits its constructor."""

    config_class = PlantedConfig  # a class attribute without a docstring of its own: not shown

    def learn(self) -> None:
        """Public."""

    def step(self) -> None:
        """Internal, called by `learn`."""


def test_the_argument_check_finds_what_it_looks_for():
    entry = Entry("planted", "planted", {"merge_init_into_class": True, "filters": ["!^_"]})
    assert undocumented_arguments(entry, PlantedPolicy) == ["seed"]
    assert undocumented_arguments(entry, PlantedConfig) == ["bare"]
    assert section_names(PlantedPolicy.__doc__) == {"episodes"}
    assert shown_members(entry, PlantedConfig) == ["documented", "NUMBERS", "helper"]
    assert config_problems(entry, PlantedConfig) == ["shows NUMBERS, helper, which are no fields",
                                                     "hides the fields ['bare']"]
    fields_only = Entry("planted", "planted", {**entry.options, "filters": ["!^_", "!^NUMBERS$", "!^helper$"],
                                               "show_if_no_docstring": True})
    assert config_problems(fields_only, PlantedConfig) == []
    assert shown_members(entry, PlantedLearner) == ["learn", "step"]
    only_api = Entry("planted", "planted", {**entry.options, "members": ["learn"], "inherited_members": ["__init__"]})
    assert shown_members(only_api, PlantedLearner) == ["learn"] and shown_init(only_api, PlantedLearner) is not None
    assert shown_init(entry, PlantedLearner) is None  # an inherited __init__ that the entry does not select


# ----- the reference pages ---------------------------------------------------------------------------------


def test_every_entry_resolves():
    broken = []
    for entry in reference_entries():
        try:
            resolve(entry.path)
        except (ImportError, AttributeError) as e:
            broken.append(f"{entry.where}: {entry.path} ({e})")
    assert not broken, broken


def test_every_name_the_guides_and_examples_use_has_an_entry():
    code, prose = guide_uses()
    entries = reference_entries()
    missing = problems_with(code, entries) + problems_with(prose, entries, strict=False)
    assert not missing, "\n".join(missing)


def class_entries() -> list[tuple[Entry, type]]:
    """Every entry that names a public class, with the class."""
    out = []
    for entry in reference_entries():
        obj = resolve(entry.path)
        if inspect.isclass(obj) and not entry.path.rsplit(".", 1)[-1].startswith("_"):
            out.append((entry, obj))
    return out


@pytest.mark.parametrize("entry, cls", [pytest.param(e, c, id=e.path) for e, c in class_entries()])
def test_every_constructor_argument_is_documented(entry, cls):
    missing = undocumented_arguments(entry, cls)
    assert not missing, (f"{entry.where}: {cls.__name__}'s constructor takes {missing}, which its docstring "
                         "does not explain: add them under Args: (or as field docstrings)")


def entry_for(path: str) -> Entry:
    """The one entry of `path` on the reference pages."""
    matches = [e for e in reference_entries() if e.path == path]
    assert len(matches) == 1, f"{path} has {len(matches)} entries on the reference pages"
    return matches[0]


@pytest.mark.parametrize("path", LEARNERS + ["learners.Learner"])
def test_each_learner_entry_shows_its_constructor_and_the_calls_a_user_makes(path):
    entry, cls = entry_for(path), resolve(path)
    assert entry.options.get("merge_init_into_class"), f"{entry.where}: set merge_init_into_class: true"
    assert shown_init(entry, cls) is not None, (
        f"{entry.where}: {cls.__name__} inherits __init__; add it to inherited_members so that its docstring shows")
    expected = [name for name in LEARNER_API if hasattr(cls, name)]
    if path == "learners.Learner":
        expected.append("step")  # what a new learner implements
    shown = shown_members(entry, cls)
    assert sorted(shown) == sorted(expected), f"{entry.where}: shows {shown}, expected {expected}"
    bare = [name for name in shown if not inspect.getdoc(getattr(cls, name))]
    assert not bare, f"{cls.__name__}: {bare} have no docstring"


def config_problems(entry: Entry, cls: type) -> list[str]:
    """What a config entry shows that is no field, and which of the class's own fields it hides."""
    fields = {f.name for f in dataclasses.fields(cls)}
    shown = shown_members(entry, cls)
    extra = [name for name in shown if name not in fields]
    own = [name for name in cls.__dict__.get("__annotations__", {}) if name in fields]
    hidden = [name for name in own if name not in shown]
    return ([f"shows {', '.join(extra)}, which are no fields"] if extra else []) + (
        [f"hides the fields {hidden}"] if hidden else [])


@pytest.mark.parametrize("entry, cls", [pytest.param(e, c, id=e.path) for e, c in class_entries()
                                        if dataclasses.is_dataclass(c) and c.__name__.endswith(("Config", "Settings"))])
def test_each_config_entry_shows_its_fields_and_nothing_else(entry, cls):
    found = config_problems(entry, cls)
    assert not found, f"{entry.where} ({cls.__name__}): {found}; exclude the others with the entry's `filters`"


LEARNERS_PAGE = ROOT / "docs/reference/learners.md"


def fired_events() -> set[str]:
    """The callback events the training loop fires: `callback(learner, "on_step_end", ...)` in learners/loop/."""
    return {event for path in sorted((ROOT / "learners" / "loop").glob("*.py"))
            for event in re.findall(r"callback\((?:\w+, )?\"(on_\w+)\"", path.read_text(encoding="utf-8"))}


def callbacks_section() -> str:
    """The text of the learners page's Callbacks section."""
    section = re.search(r"^## Callbacks\n(.*?)(?=^## |\Z)", LEARNERS_PAGE.read_text(encoding="utf-8"), re.M | re.S)
    assert section, f"{LEARNERS_PAGE.relative_to(ROOT)} has no '## Callbacks' section"
    return section.group(1)


def test_the_callback_events_listed_are_those_the_loop_fires():
    fired = fired_events()
    listed = set(re.findall(r"^- `(on_\w+)\(learner", callbacks_section(), re.M))
    assert fired and listed == fired, f"the loop fires {sorted(fired)}; the page lists {sorted(listed)}"


def test_the_callback_example_runs_as_written():
    from learners.checkpointing.state import Stateful

    blocks = fenced_python(callbacks_section())
    assert len(blocks) == 1
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0][1], str(LEARNERS_PAGE.relative_to(ROOT)), "exec"), namespace)
    callback = namespace["RewardLog"]()
    events = [name for name in vars(type(callback)) if name.startswith("on_")]
    assert events and set(events) <= fired_events()  # every method it defines is an event the loop fires
    learner = type("Learner", (), {"epoch": 1})()
    callback.on_step_end(learner, {"train/reward_mean": 0.25})
    callback.on_epoch_end(learner)
    assert isinstance(callback, Stateful)  # so checkpoints save it
    restored = namespace["RewardLog"]()
    restored.load_state_dict(callback.state_dict())
    assert restored.rewards == [0.25]
