"""Environment registry: `register`, `make`, `spec` and the `registry` mapping.

Ids look like gymnasium's: `[namespace/]Name-vN`. A change in a task's
behaviour bumps N, so results stay comparable across releases. Every id is
also registered in PettingZoo's own registry when the installed PettingZoo
has one (`pettingzoo.make("parallel", id)` then works too).

A namespace can also resolve ids nobody registered one by one:
`register_namespace("openspiel", "comlrl_env.games.openspiel:game_spec")` makes
`make("openspiel/<game>-v0")` build any OpenSpiel game, importing the resolver
(and its optional dependency) only when such an id is first asked for.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import re
import warnings
from typing import Any, Callable

import pettingzoo

from comlrl_env.base import TextParallelEnv

__all__ = ["EnvNotFound", "EnvSpec", "ID_PATTERN", "make", "register", "register_namespace", "registry", "spec"]

ID_PATTERN = re.compile(r"^(?:(?P<namespace>[\w.-]+)/)?(?P<name>[\w.:-]+?)-v(?P<version>\d+)$")
"""A versioned env id: `[namespace/]name-v<version>`."""


class EnvNotFound(KeyError):
    """Raised by `make` / `spec` for an id that is not registered."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What `make(id)` builds: the entry point and its default keyword arguments."""

    id: str
    """The registered id, `[namespace/]Name-v<version>` (e.g. "coop/LengthRatio-v1")."""
    entry_point: Callable[..., TextParallelEnv] | str
    """The env class or factory, or its import path as "module:attribute" (imported on first `make`)."""
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Default keyword arguments of the entry point; `make(id, **kwargs)` overrides them."""

    @property
    def namespace(self) -> str | None:
        return ID_PATTERN.match(self.id)["namespace"]

    @property
    def name(self) -> str:
        return ID_PATTERN.match(self.id)["name"]

    @property
    def version(self) -> int:
        return int(ID_PATTERN.match(self.id)["version"])

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle by id: entry points may be lambdas or local factories.
        return (_registered_spec, (self.id, self.kwargs))

    def make(self, **kwargs: Any) -> TextParallelEnv:
        """Build the environment with the spec's defaults overridden by `kwargs`."""
        factory = self.entry_point
        if isinstance(factory, str):
            module, _, attr = factory.partition(":")
            factory = getattr(importlib.import_module(module), attr)
        env = factory(**{**self.kwargs, **kwargs})
        env.spec = dataclasses.replace(self, kwargs={**self.kwargs, **kwargs})
        return env


registry: dict[str, EnvSpec] = {}
"""Every registered env id and its `EnvSpec`: `register` adds to it, `make` and `spec` read it."""

# namespace -> resolver(id) -> EnvSpec, for ids of that namespace that are not in `registry`.
_namespaces: dict[str, Callable[[str], EnvSpec] | str] = {}


def _registered_spec(id: str, kwargs: dict[str, Any]) -> EnvSpec:
    return dataclasses.replace(spec(id), kwargs=dict(kwargs))


def register(id: str, entry_point: Callable[..., TextParallelEnv] | str, **defaults: Any) -> EnvSpec:
    """Register `entry_point` (a class, factory or "module:attr") under a versioned id."""
    if not isinstance(id, str) or not ID_PATTERN.match(id):
        raise ValueError(f"env id {id!r} must look like 'namespace/Name-vN' or 'Name-vN' (e.g. 'coop/Echo-v0').")
    if not (callable(entry_point) or (isinstance(entry_point, str) and ":" in entry_point)):
        raise TypeError(f"entry_point for {id!r} must be callable or 'module:attr', got {entry_point!r}.")
    if id in registry:
        warnings.warn(f"Overriding environment {id!r} in the comlrl_env registry.", stacklevel=2)
    registry[id] = new = EnvSpec(id, entry_point, dict(defaults))
    if hasattr(pettingzoo, "register"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Through our make(), so PettingZoo-made envs carry their spec too.
            pettingzoo.register("parallel", id, functools.partial(make, id))
    return new


def register_namespace(namespace: str, resolver: Callable[[str], EnvSpec] | str) -> None:
    """Resolve unregistered ids `namespace/Name-vN` with `resolver(id) -> EnvSpec`.

    `resolver` is a callable or a "module:attr" string, imported on first use (so an optional
    dependency is needed only by who uses the namespace). It raises `EnvNotFound` for a name it
    does not know. Ids registered with `register` take precedence.
    """
    if not isinstance(namespace, str) or not re.fullmatch(r"[\w.-]+", namespace):
        raise ValueError(f"namespace must be a word like 'openspiel', got {namespace!r}.")
    if not (callable(resolver) or (isinstance(resolver, str) and ":" in resolver)):
        raise TypeError(f"resolver for namespace {namespace!r} must be callable or 'module:attr', got {resolver!r}.")
    _namespaces[namespace] = resolver


def spec(id: str) -> EnvSpec:
    """The `EnvSpec` of `id`; without `-vN`, the latest registered version."""
    if id in registry:
        return registry[id]
    versions = [s for s in registry.values() if s.id.rsplit("-v", 1)[0] == id]
    if versions:
        return max(versions, key=lambda s: s.version)
    match = ID_PATTERN.match(id) if isinstance(id, str) else None
    if match and match["namespace"] in _namespaces:
        resolver = _namespaces[match["namespace"]]
        if isinstance(resolver, str):
            module, _, attr = resolver.partition(":")
            resolver = getattr(importlib.import_module(module), attr)
        return resolver(id)
    close = difflib.get_close_matches(id, list(registry), n=5, cutoff=0.4)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise EnvNotFound(f"No environment registered as {id!r}.{hint} Registered ids: {', '.join(sorted(registry))}.")


def make(id: str, **kwargs: Any) -> TextParallelEnv:
    """Build a registered environment: `make("coop/Echo-v0", num_agents=2)`."""
    return spec(id).make(**kwargs)
