"""The model registry: names -> factories of ``torch.nn.Module`` plus representative inputs.

Users register their own models in their own project, without touching this package::

    from pytest_sme2.models import register_model

    @register_model("my_net")
    def my_net():
        model = MyNet().eval()
        return model, (torch.randn(1, 3, 224, 224),)

The factory returns ``(module, example_inputs)``. It is called with torch's global RNG seeded
(:data:`FACTORY_SEED`, the caller's RNG state restored afterwards), so random weights and ``torch.randn``
inputs are the same in every session: the export cache hits, and an unchanged model is an unchanged
artifact. Models are found by importing the modules that
register them: the ``pytest_sme2.models`` entry-point group (so an installed package can ship models
the way pytest plugins ship hooks), and any module or ``.py`` file named with ``--sme2-models`` /
ini ``sme2_models`` / ``pytest-sme2 profile --models`` (which also reads the project's ini).

A ``.py`` file is imported under the name Python itself would give it (``my_models``, or
``pkg.models`` inside a package), with its root put on ``sys.path`` as pytest does for test modules,
so a test that also does ``from my_models import MyNet`` gets the same module, not a second copy.
A registration is identified by the factory's file and qualified name, so the same file reached
twice under two module names is one registration, not a clash.
torch is imported only when a factory is called.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_sme2.errors import ModelError

#: ``() -> (module, example_inputs)``; typed loosely so this module never imports torch.
ModelFactory = Callable[[], tuple[Any, tuple[Any, ...]]]


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: its name, factory and where it was defined (for cache keys/errors)."""

    name: str
    factory: ModelFactory
    origin: str

    def build(self) -> tuple[Any, tuple[Any, ...]]:
        """Instantiate the module (in eval mode) and its example inputs, under the fixed seed :data:`FACTORY_SEED`."""
        try:
            result = _seeded(self.factory)
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


#: torch's global RNG is seeded with this around every factory call (and restored after it): a factory that
#: builds random weights or ``torch.randn`` inputs gives the same module and inputs every session, so the
#: export cache hits and an unchanged model stays an unchanged artifact.
FACTORY_SEED = 0


def _seeded(factory: ModelFactory) -> tuple[Any, tuple[Any, ...]]:
    """``factory()`` with torch's RNG seeded :data:`FACTORY_SEED`, the caller's RNG state restored afterwards."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(FACTORY_SEED)
        return factory()


_REGISTRY: dict[str, ModelSpec] = {}
_DISCOVERED = False


def _origin(factory: ModelFactory) -> str:
    """Where ``factory`` is defined: ``file:qualname``, independent of the name its module was imported as."""
    qualname = getattr(factory, "__qualname__", getattr(factory, "__name__", "?"))
    code = getattr(factory, "__code__", None)
    filename = getattr(code, "co_filename", "")
    if filename and not filename.startswith("<"):
        return f"{os.path.realpath(filename)}:{qualname}"
    return f"{getattr(factory, '__module__', '?')}.{qualname}"  # a REPL or a compiled callable


def register_model(name: str) -> Callable[[ModelFactory], ModelFactory]:
    """Decorator: register ``factory`` under ``name`` (re-registering from the same place is allowed)."""

    def decorate(factory: ModelFactory) -> ModelFactory:
        origin = _origin(factory)
        existing = _REGISTRY.get(name)
        if existing is not None and existing.origin != origin:
            raise ModelError(
                f"model name {name!r} is registered twice: by {existing.origin} and by {origin}; "
                "rename one of them"
            )
        _REGISTRY[name] = ModelSpec(name=name, factory=factory, origin=origin)
        return factory

    return decorate


def resolve_model_sources(sources: Iterable[str], base_dir: str | Path) -> tuple[str, ...]:
    """``sources`` with every relative ``.py`` path made absolute against ``base_dir``; module names as they are.

    For paths written in an ini file: they are relative to that file, not to where pytest was started.
    """
    resolved = []
    for source in sources:
        path = Path(source)
        is_file = source.endswith(".py") or (Path(base_dir) / path).is_file()
        resolved.append(str(Path(base_dir) / path) if is_file and not path.is_absolute() else source)
    return tuple(resolved)


def load_model_sources(sources: Iterable[str], *, base_dir: str | Path | None = None) -> None:
    """Import modules (dotted names) or ``.py`` files so that their ``register_model`` calls run.

    A relative file path is taken relative to ``base_dir`` when given (see :func:`resolve_model_sources`),
    else to the current directory.
    """
    for source in resolve_model_sources(sources, base_dir) if base_dir is not None else sources:
        path = Path(source)
        if source.endswith(".py") or path.is_file():
            if not path.is_file():
                raise ModelError(f"models file {path} does not exist; pass a .py file or a module name")
            _import_file(path.resolve(), source)
        else:
            try:
                importlib.import_module(source)
            except ImportError as exc:
                raise ModelError(
                    f"cannot import models module {source!r}: {exc}. Pass an importable module name "
                    "or a path to a .py file."
                ) from exc
            except Exception as exc:
                raise ModelError(
                    f"importing models module {source!r} failed: {type(exc).__name__}: {exc}"
                ) from exc


def _same_file(module: ModuleType, path: Path) -> bool:
    filename = getattr(module, "__file__", None)
    return bool(filename) and os.path.realpath(str(filename)) == str(path)


def _natural_name(path: Path) -> tuple[str, Path]:
    """``(dotted module name, directory to import it from)``, walking up through ``__init__.py`` packages."""
    parts = [path.stem]
    root = path.parent
    while (root / "__init__.py").is_file() and root.name.isidentifier():
        parts.insert(0, root.name)
        root = root.parent
    return ".".join(parts), root


def _import_file(path: Path, source: str) -> None:
    """Import one models file once, under its natural module name when nothing else holds that name."""
    if any(_same_file(m, path) for m in list(sys.modules.values())
           if isinstance(m, ModuleType) and str(getattr(m, "__file__", "")).endswith(path.name)):
        return  # already imported (e.g. ``example_models.models`` by a test), so already registered
    name, root = _natural_name(path)
    if all(part.isidentifier() for part in name.split(".")) and _name_is_free(name, path, root):
        if str(root) not in sys.path:
            # What pytest's default import mode does for a test module: its root becomes importable,
            # so sibling imports in the models file and ``from my_models import ...`` in tests work.
            sys.path.insert(0, str(root))
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            raise ModelError(f"importing models file {source} failed: {type(exc).__name__}: {exc}") from exc
        if _same_file(module, path):
            return
    # The natural name belongs to another module: a private name, stable across processes.
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    _exec_file(path, f"_sme2_models_{path.stem}_{digest}", source)


def _name_is_free(name: str, path: Path, root: Path) -> bool:
    """Does importing ``name`` from ``root`` give ``path`` (and not some other module of that name)?"""
    top = name.split(".", maxsplit=1)[0]
    loaded = sys.modules.get(top)
    if loaded is not None:
        locations = [os.path.realpath(p) for p in getattr(loaded, "__path__", [])]
        return str(root / top) in locations if "." in name else _same_file(loaded, path)
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return True
    where = spec.origin if spec.submodule_search_locations is None else next(iter(spec.submodule_search_locations))
    expected = root / top if "." in name else path
    return bool(where) and os.path.realpath(str(where)) in (str(expected), str(expected / "__init__.py"))


def _exec_file(path: Path, mod_name: str, source: str) -> None:
    if mod_name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"models file {source} cannot be imported as Python source; pass a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[mod_name]
        raise ModelError(f"importing models file {source} failed: {type(exc).__name__}: {exc}") from exc


def discover() -> None:
    """Import the modules of the ``pytest_sme2.models`` entry-point group, once per process.

    An installed package declares its models module in its metadata::

        [project.entry-points."pytest_sme2.models"]
        my_models = "my_package.models"
    """
    global _DISCOVERED  # noqa: PLW0603 - one-time discovery of registrations, not state flipped by hooks
    if _DISCOVERED:
        return
    _DISCOVERED = True
    from importlib.metadata import entry_points

    for ep in entry_points(group="pytest_sme2.models"):
        try:
            ep.load()
        except Exception as exc:
            dist = getattr(getattr(ep, "dist", None), "name", None) or "an installed package"
            raise ModelError(
                f"the pytest_sme2.models entry point {ep.name!r} = {ep.value!r} of {dist} failed to load: "
                f"{type(exc).__name__}: {exc}. Fix or reinstall that package, or uninstall it."
            ) from exc


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
            "@pytest_sme2.models.register_model(name) in a .py file or module named with --sme2-models "
            "(ini sme2_models; pytest-sme2 profile --models), or ship it in a package's "
            "pytest_sme2.models entry point."
        ) from None


def registered_models() -> list[str]:
    discover()
    return sorted(_REGISTRY)
