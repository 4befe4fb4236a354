"""Shared fixtures: tiny random causal LMs with offline tokenizers, built once per session."""

from __future__ import annotations

import pettingzoo
import pytest
import torch
import transformers

import comlrl_env
from comlrl_env.testing import tiny_model

# Tiny models gain nothing from a second thread, and OpenMP threads spinning against other
# processes on a 2-core machine slow everything down by an order of magnitude.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 0.2M-parameter Qwen2 (vocab 2048) saved with its tokenizer."""
    return str(tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), arch="qwen2", seed=0))


@pytest.fixture(scope="session")
def tiny_dir_b(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Another Qwen2 with different weights (seed 1)."""
    return str(tiny_model(tmp_path_factory.mktemp("tiny-qwen2-b"), arch="qwen2", seed=1))


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny Llama with a smaller vocabulary (1024) than the Qwen2 fixture."""
    return str(tiny_model(tmp_path_factory.mktemp("tiny-llama"), arch="llama", vocab_size=1024, seed=2))


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tiny_model(tmp_path_factory.mktemp("tiny-gpt2"), arch="gpt2", seed=3))


@pytest.fixture(autouse=True)
def _restore_torch_rng():
    """Tests that sample must not change each other's random streams."""
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)


@pytest.fixture(autouse=True)
def _restore_registries():
    """Drop the ids a test registers, so other test files see only the built-in tasks."""
    saved = dict(comlrl_env.registry)
    registration = getattr(getattr(pettingzoo, "env_registry", None), "registration", None)
    pz_registry = getattr(registration, "parallel_registry", None)
    pz_saved = dict(pz_registry) if pz_registry is not None else None
    yield
    comlrl_env.registry.clear()
    comlrl_env.registry.update(saved)
    if pz_registry is not None:
        pz_registry.clear()
        pz_registry.update(pz_saved)


@pytest.fixture
def no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any model load in the test fails: the error under test must come before any model loads."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a model was loaded ({args[:1]!r}) before the argument error")
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoModel, transformers.PreTrainedModel):
        monkeypatch.setattr(cls, "from_pretrained", refuse)
