"""The env registry: register / make / spec, id rules, close-match errors, PettingZoo's registry."""

from __future__ import annotations

import pickle
import warnings

import pettingzoo
import pytest

import comlrl_env
from comlrl_env import EnvNotFound, EnvSpec, TextParallelEnv, make, register, spec
from comlrl_env.testing import check_env


class Echo(TextParallelEnv):
    """Single turn, cooperative: every agent must say the word."""

    metadata = {**TextParallelEnv.metadata, "name": "registry-echo-v0", "num_tasks": 2}
    WORDS = ["up", "down"]

    def __init__(self, word_suffix: str = "", **kwargs):
        super().__init__(**kwargs)
        self.word_suffix = word_suffix

    def load_task(self, task_index):
        i = task_index if task_index is not None else int(self.np_random.integers(2))
        return {"word": self.WORDS[i] + self.word_suffix}

    def prompts(self):
        return {a: f"Say {self.task['word']!r}." for a in self.agents}

    def score(self, actions):
        hits = [self.task["word"] in text for text in actions.values()]
        return float(all(hits)), all(hits)


def make_echo(**kwargs) -> Echo:
    """A module-level factory (picklable by reference), not a class."""
    return Echo(word_suffix="!", **kwargs)


def test_register_make_spec_round_trip():
    registered = register("test/RoundTrip-v0", entry_point=Echo, num_agents=3, num_turns=2)
    assert isinstance(registered, EnvSpec)
    assert spec("test/RoundTrip-v0") is registered
    assert comlrl_env.registry["test/RoundTrip-v0"] is registered
    assert (registered.namespace, registered.name, registered.version) == ("test", "RoundTrip", 0)

    env = make("test/RoundTrip-v0", num_turns=4, word_suffix="?")
    assert isinstance(env, Echo)
    assert len(env.possible_agents) == 3  # default from register
    assert env.num_turns == 4  # make kwargs override the defaults
    assert env.spec.id == "test/RoundTrip-v0"
    assert env.spec.kwargs == {"num_agents": 3, "num_turns": 4, "word_suffix": "?"}
    assert spec("test/RoundTrip-v0").kwargs == {"num_agents": 3, "num_turns": 2}  # registry untouched
    obs, _ = env.reset(seed=0, options={"task_index": 1})
    assert obs["agent_2"] == "Say 'down?'."


def test_spec_make_builds_an_equivalent_env():
    register("test/SpecMake-v0", entry_point=Echo, num_agents=3)
    env = make("test/SpecMake-v0", word_suffix="*")
    twin = env.spec.make()
    assert twin.spec == env.spec
    assert twin.reset(seed=3) == env.reset(seed=3)


def test_factory_function_entry_point():
    register("test/Factory-v0", entry_point=make_echo, num_agents=1)
    env = make("test/Factory-v0")
    obs, _ = env.reset(seed=0, options={"task_index": 0})
    assert obs == {"agent_0": "Say 'up!'."}
    check_env("test/Factory-v0")
    pickle.loads(pickle.dumps(env))


def test_module_attr_string_entry_point():
    register("test/StringEntry-v0", entry_point=f"{__name__}:Echo", num_agents=2)
    env = make("test/StringEntry-v0", word_suffix="#")
    assert type(env).__name__ == "Echo"
    assert env.reset(seed=0, options={"task_index": 0})[0]["agent_1"] == "Say 'up#'."
    assert env.spec.entry_point == f"{__name__}:Echo"


@pytest.mark.parametrize("bad_id", ["no-version", "Foo-v", "Foo-vX", "a b-v0", "ns/", "/Foo-v0", "", "Foo-v1.2"])
def test_malformed_ids_raise_value_error(bad_id):
    with pytest.raises(ValueError, match="must look like 'namespace/Name-vN'"):
        register(bad_id, entry_point=Echo)
    assert bad_id not in comlrl_env.registry


def test_non_str_id_raises_value_error():
    with pytest.raises(ValueError, match="must look like"):
        register(7, entry_point=Echo)


def test_bad_entry_point_raises_type_error():
    with pytest.raises(TypeError, match="entry_point"):
        register("test/BadEntry-v0", entry_point="no_colon_here")
    with pytest.raises(TypeError, match="entry_point"):
        register("test/BadEntry-v0", entry_point=42)


def test_unknown_id_raises_env_not_found_with_close_matches():
    register("test/CloseMatch-v0", entry_point=Echo)
    with pytest.raises(EnvNotFound, match=r"'test/CloseMach-v0'.*Did you mean: .*test/CloseMatch-v0"):
        make("test/CloseMach-v0")
    with pytest.raises(EnvNotFound) as info:
        spec("test/CloseMatch-v7")  # a missing version is unknown too
    assert "test/CloseMatch-v0" in str(info.value)
    assert isinstance(info.value, KeyError)
    assert not str(info.value).startswith('"')  # readable message, not KeyError's repr


def test_unknown_id_with_no_close_match_lists_registered_ids():
    register("test/Listed-v0", entry_point=Echo)
    with pytest.raises(EnvNotFound, match=r"Registered ids: .*test/Listed-v0") as info:
        spec("zzzzzzzzzzzzzzzzzzzzzzzzzzz-v0")
    assert "Did you mean" not in str(info.value)


def test_id_without_version_resolves_to_latest():
    register("test/Versioned-v0", entry_point=Echo, num_agents=1)
    register("test/Versioned-v3", entry_point=Echo, num_agents=3)
    register("test/Versioned-v1", entry_point=Echo, num_agents=2)
    assert spec("test/Versioned").id == "test/Versioned-v3"
    assert len(make("test/Versioned").possible_agents) == 3
    assert spec("test/Versioned-v1").kwargs == {"num_agents": 2}
    assert make("test/Versioned").spec.id == "test/Versioned-v3"


def test_id_without_namespace():
    register("PlainTestEcho-v2", entry_point=Echo)
    assert spec("PlainTestEcho").namespace is None
    assert spec("PlainTestEcho").version == 2
    assert isinstance(make("PlainTestEcho-v2"), Echo)


def test_reregistering_warns_and_overrides():
    register("test/Override-v0", entry_point=Echo, num_agents=1)
    with pytest.warns(UserWarning, match="Overriding environment 'test/Override-v0'"):
        register("test/Override-v0", entry_point=Echo, num_agents=2)
    assert len(make("test/Override-v0").possible_agents) == 2


@pytest.mark.skipif(not hasattr(pettingzoo, "make"), reason="this PettingZoo has no registry")
def test_pettingzoo_make_builds_envs_registered_here():
    register("test/PZ-v0", entry_point=Echo, num_agents=3)
    env = pettingzoo.make("parallel", "test/PZ-v0", num_turns=2)
    assert isinstance(env, Echo)
    assert len(env.possible_agents) == 3 and env.num_turns == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "expected a ParallelEnv" warning
        pettingzoo.make("parallel", "test/PZ-v0")


@pytest.mark.skipif(not hasattr(pettingzoo, "make"), reason="this PettingZoo has no registry")
def test_pettingzoo_make_with_string_entry_point_and_latest_version():
    register("test/PZString-v0", entry_point=f"{__name__}:Echo")
    register("test/PZString-v1", entry_point=f"{__name__}:make_echo")
    env = pettingzoo.make("parallel", "test/PZString")
    assert env.reset(seed=0, options={"task_index": 0})[0]["agent_0"] == "Say 'up!'."


def test_made_env_passes_check_env_through_its_spec():
    register("test/Checked-v0", entry_point=Echo, num_agents=2, num_turns=1)
    check_env(make("test/Checked-v0", word_suffix="~"))


def test_env_from_lambda_entry_point_pickles():
    register("test/Lambda-v0", entry_point=lambda **kw: Echo(**kw))
    env = make("test/Lambda-v0")
    env.reset(seed=0)
    pickle.loads(pickle.dumps(env))


def test_register_namespace_resolves_unregistered_ids(monkeypatch: pytest.MonkeyPatch):
    import sys

    registry_module = sys.modules["comlrl_env.registry"]  # `comlrl_env.registry` is the dict
    from comlrl_env.registry import register_namespace

    monkeypatch.setattr(registry_module, "_namespaces", dict(registry_module._namespaces))
    asked = []

    def resolver(id: str) -> EnvSpec:
        asked.append(id)
        name = id.split("/")[1].rsplit("-v", 1)[0]
        if name not in Echo.WORDS:
            raise EnvNotFound(f"no echo word {name!r}")
        return EnvSpec(id, Echo, {"word_suffix": "-" + name})

    register_namespace("echo", resolver)
    env = make("echo/up-v0", num_agents=3)
    assert asked == ["echo/up-v0"] and env.spec.id == "echo/up-v0" and len(env.possible_agents) == 3
    assert "echo/up-v0" not in comlrl_env.registry  # resolved, not registered
    assert pickle.loads(pickle.dumps(env)).spec.kwargs == {"word_suffix": "-up", "num_agents": 3}
    with pytest.raises(EnvNotFound, match="no echo word 'sideways'"):
        make("echo/sideways-v0")
    register("echo/up-v0", entry_point=Echo)  # a registered id wins over the namespace
    assert make("echo/up-v0").spec.kwargs == {}
    with pytest.raises(EnvNotFound, match="No environment registered as 'other/up-v0'"):
        make("other/up-v0")
    register_namespace("lazy", f"{__name__}:_lazy_resolver")  # "module:attr", imported on first use
    assert isinstance(make("lazy/anything-v0"), Echo)
    with pytest.raises(TypeError, match="resolver"):
        register_namespace("bad", 42)
    with pytest.raises(ValueError, match="namespace"):
        register_namespace("not a word", resolver)


def _lazy_resolver(id: str) -> EnvSpec:
    return EnvSpec(id, Echo, {})
