"""The library stays readable: no module reaches into another object's private members, no file grows past
500 lines, no folder holds more than 15 modules, imports flow one way (no circles, layers kept), and the
documented import paths still work after the move into rooms."""

from __future__ import annotations

import ast
import collections
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).parent.parent
PACKAGES = ("comlrl_env", "learners", "rewards")
LIBRARY = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
FORBIDDEN = {"rewards": {"comlrl_env", "learners"}, "comlrl_env": {"learners"}}


def private_uses(source: str) -> list[str]:
    """`x._name` on anything but self, cls or super(), and `from m import _name`, as source text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                continue
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.ImportFrom):
            found += [f"line {node.lineno}: from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_")]
    return found


def test_the_scan_finds_what_it_looks_for():
    assert sorted(private_uses("learner._epoch_order(env)\nself._ok()\nsuper()._validate()\nfrom a import _b\n")) == [
        "line 1: learner._epoch_order", "line 4: from a import _b"]


def module_name(path: pathlib.Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def library_imports() -> dict[str, set[str]]:
    """Each library module's imports of other library modules (any import, also inside functions), resolved to
    the longest module prefix; a package's face (`__init__`) and its own submodules are not edges."""
    modules = {module_name(p): p for p in LIBRARY}

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules), None)

    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]) if node.level \
                    else node.module
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            targets |= {t for t in map(resolve, names) if t and t != mod}
        faces = {t for t in targets if modules[t].name == "__init__.py" and mod.startswith(t + ".")}
        own = {t for t in targets if path.name == "__init__.py" and t.startswith(mod + ".")}
        graph[mod] = targets - faces - own
    return graph


# The uses allowed, with their reasons. FSDP2 overrides `nn.Module._apply` to swap new storage into its sharded
# parameters; its public wrapper `to_empty` would also reallocate what is already real, which measured 0.66x
# of the team at start-up against 0.50x (tests/test_fsdp.py's build peak). A preempted run whose stop outlasts
# `preemption_timeout` must exit with its status from the timer thread while the main thread may be blocked in
# a collective or a write, which only `os._exit` does.
ALLOWED = {"learners.parallel.loading": ["model._apply"], "learners.loop.preemption": ["os._exit"]}


@pytest.mark.parametrize("path", LIBRARY, ids=module_name)
def test_no_library_module_uses_another_objects_private_members(path):
    allowed = ALLOWED.get(module_name(path), [])
    found = [use for use in private_uses(path.read_text(encoding="utf-8"))
             if use.split(": ", 1)[1] not in allowed]
    assert found == []


@pytest.mark.parametrize("path", LIBRARY, ids=module_name)
def test_no_library_module_is_over_500_lines(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 500


def test_no_folder_holds_more_than_15_modules():
    counts = collections.Counter(p.parent.relative_to(ROOT).as_posix() for p in LIBRARY)
    assert {folder: n for folder, n in counts.items() if n > 15} == {}


def test_layers_are_kept():
    graph = library_imports()
    breaks = [f"{a} -> {b}" for a, targets in graph.items() for b in targets
              if b.split(".")[0] in FORBIDDEN.get(a.split(".")[0], ())]
    assert breaks == []


def test_no_import_circles():
    graph = library_imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles = []

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for nxt in sorted(graph.get(mod, ())):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert circles == []


ROOMS = ["learners.parallel", "learners.checkpointing", "learners.rollout", "learners.models", "learners.loop"]
"""The rooms of learners/, lowest first: a room imports only rooms below it (the algorithms at the top use all)."""


def test_learner_rooms_import_only_rooms_below_them():
    def room(mod: str) -> int:
        return next((i for i, r in enumerate(ROOMS) if mod == r or mod.startswith(r + ".")), len(ROOMS))

    upward = [f"{a} -> {b}" for a, targets in library_imports().items() for b in targets
              if a.startswith("learners") and b.startswith("learners") and room(b) > room(a)]
    assert upward == []


def test_the_circle_finder_finds_a_circle(tmp_path, monkeypatch):
    for name, text in {"rewards/__init__.py": "", "rewards/a.py": "def f():\n    from rewards import b\n",
                       "rewards/b.py": "from rewards.a import f\n"}.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.setattr(__import__(__name__), "LIBRARY", sorted((tmp_path / "rewards").rglob("*.py")))
    assert library_imports() == {"rewards": set(), "rewards.a": {"rewards.b"}, "rewards.b": {"rewards.a"}}


@pytest.mark.parametrize("path, names", [
    ("learners", ["MAGRPO", "IAC", "MAAC", "MARLHF", "MARLHFIter", "Frozen", "read_checkpoint_metadata",
                  "RolloutEngine", "SampleBatch", "GenerationSettings", "Learner", "LearnerConfig"]),
    ("learners.reinforce", ["MAGRPOConfig", "MAGRPOTrainer", "group_relative_advantages"]),
    ("learners.actor_critic", ["IACConfig", "IACTrainer", "MAACConfig", "MAACTrainer"]),
    ("learners.preference", ["MARLHFConfig", "MARLHFTrainer", "MARLHFIterTrainer"]),
    ("learners.checkpoint", ["read_checkpoint_metadata", "save_checkpoint", "load_checkpoint", "CheckpointError"]),
    ("learners.rollout", ["RolloutEngine", "SampleBatch", "Rollout", "GenerationSettings"]),
    ("rewards.code", ["execute", "execute_many", "ExecutionResult"]),
    ("comlrl_env", ["joint_text", "make", "register", "TextParallelEnv"]),
    ("comlrl_env.openspiel", ["OpenSpielEnv", "OpenSpielBot", "INVALID_ACTION_MODES", "game_spec", "mcts_applies",
                              "parse_action"]),
    ("comlrl_env.openspiel_bots", ["OpenSpielBot", "mcts_applies"]),
    ("comlrl_env.action_text", ["ActionMatch", "answer_rule", "normalize_action", "parse_action", "read_action"]),
])
def test_documented_import_paths_still_work(path, names):
    module = importlib.import_module(path)
    assert [n for n in names if not hasattr(module, n)] == []


def test_moved_paths_re_export_the_same_objects():
    import comlrl_env.games.base
    import comlrl_env.games.openspiel
    import comlrl_env.openspiel
    import learners.checkpoint
    import learners.checkpointing
    import rewards.code
    import rewards.sandbox

    assert learners.checkpoint.read_checkpoint_metadata is learners.checkpointing.read_checkpoint_metadata
    assert learners.checkpoint.CheckpointError is learners.checkpointing.CheckpointError
    assert rewards.code.execute is rewards.sandbox.execute
    assert comlrl_env.openspiel.INVALID_ACTION_MODES is comlrl_env.games.base.INVALID_ACTION_MODES
    assert comlrl_env.openspiel is comlrl_env.games.openspiel  # the old path is the moved module itself
