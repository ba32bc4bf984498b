"""The model registry: names -> factories of ``torch.nn.Module`` plus representative inputs.

Users register their own models the same way the example models are registered, without touching
this package::

    from pytest_sme2.models import register_model

    @register_model("my_net")
    def my_net():
        model = MyNet().eval()
        return model, (torch.randn(1, 3, 224, 224),)

The factory returns ``(module, example_inputs)``. Models are found by importing the modules that
register them: the ``pytest_sme2.models`` entry-point group, ``example_models`` when importable,
and any module or ``.py`` file named with ``--sme2-models`` / ``pytest-sme2 --models``.
torch is not imported here: factories import it when called.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ModelError

#: ``() -> (module, example_inputs)``; typed loosely so this module never imports torch.
ModelFactory = Callable[[], tuple[Any, tuple[Any, ...]]]


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: its name, factory and where it was defined (for cache keys/errors)."""

    name: str
    factory: ModelFactory
    origin: str

    def build(self) -> tuple[Any, tuple[Any, ...]]:
        """Instantiate the module (in eval mode) and its example inputs."""
        try:
            result = self.factory()
        except Exception as exc:
            raise ModelError(
                f"model {self.name!r} (from {self.origin}) failed to build: {type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], tuple)):
            raise ModelError(
                f"model factory {self.name!r} (from {self.origin}) returned {type(result).__name__}; "
                "it must return (module, example_inputs) with example_inputs a tuple of tensors"
            )
        module, inputs = result
        if not callable(getattr(module, "eval", None)):
            raise ModelError(
                f"model factory {self.name!r} (from {self.origin}) returned a {type(module).__name__} as its "
                "module; it must return a torch.nn.Module (with its example inputs)"
            )
        return module.eval(), inputs


_REGISTRY: dict[str, ModelSpec] = {}
_DISCOVERED = False


def register_model(name: str) -> Callable[[ModelFactory], ModelFactory]:
    """Decorator: register ``factory`` under ``name`` (re-registering the same origin is allowed)."""

    def decorate(factory: ModelFactory) -> ModelFactory:
        origin = f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', '?')}"
        existing = _REGISTRY.get(name)
        if existing is not None and existing.origin != origin:
            raise ModelError(
                f"model name {name!r} is registered twice: by {existing.origin} and by {origin}; "
                "rename one of them"
            )
        _REGISTRY[name] = ModelSpec(name=name, factory=factory, origin=origin)
        return factory

    return decorate


def load_model_sources(sources: Iterable[str]) -> None:
    """Import modules (dotted names) or ``.py`` files so that their ``register_model`` calls run."""
    for source in sources:
        path = Path(source)
        if source.endswith(".py") or path.is_file():
            if not path.is_file():
                raise ModelError(f"models file {source} does not exist; pass a .py file or a module name")
            mod_name = f"_sme2_models_{abs(hash(str(path.resolve())))}"
            if mod_name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(mod_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[mod_name]
                raise ModelError(f"importing models file {source} failed: {type(exc).__name__}: {exc}") from exc
        else:
            try:
                importlib.import_module(source)
            except ImportError as exc:
                raise ModelError(
                    f"cannot import models module {source!r}: {exc}. Pass an importable module name "
                    "or a path to a .py file."
                ) from exc


def discover() -> None:
    """Import the default model sources once: entry points, then ``example_models`` if importable."""
    global _DISCOVERED  # noqa: PLW0603 - one-time discovery of registrations, not state flipped by hooks
    if _DISCOVERED:
        return
    _DISCOVERED = True
    from importlib.metadata import entry_points

    for ep in entry_points(group="pytest_sme2.models"):
        ep.load()
    try:
        importlib.import_module("example_models")
    except ModuleNotFoundError as exc:
        # Not installed is fine (a user's own project); a broken import inside it must not vanish.
        if exc.name != "example_models":
            raise


def get_model(name: str) -> ModelSpec:
    """The registered model ``name``; an unknown name lists the registered ones."""
    if name not in _REGISTRY:
        discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "(none)"
        raise ModelError(
            f"unknown model {name!r}; registered models: {known}. Register yours with "
            "@pytest_sme2.models.register_model(name) in a module passed with --sme2-models."
        ) from None


def registered_models() -> list[str]:
    discover()
    return sorted(_REGISTRY)
