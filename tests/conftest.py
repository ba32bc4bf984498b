"""Shared test configuration.

The emulated Android device tier (real adb server + Python adbd + bubblewrap sandbox) is a
fixture plugin in ``tests/emulated_device``; ``tests/`` has no ``__init__.py``, so pytest puts it on
``sys.path`` and the plugin is importable as ``emulated_device.fixtures``.

The core tests run on the real recorded traces in ``tests/data`` (see ``TRACES_README.md``) and
check them against executorch's own ETDump decoder, which is slow to import (seconds) and runs
``flatc`` per file: ``reference_etdump`` decodes each file once per session.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["emulated_device.fixtures"]


@pytest.fixture(autouse=True)
def _without_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs as on a developer's machine: ``CI`` (which makes the plugin fail closed) is removed from the
    environment of the test and of the pytest runs it starts; ``ci.IN_CI`` keeps what the session saw."""
    monkeypatch.delenv("CI", raising=False)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``tests/data``: the real recorded traces, their manifests, logs and ``.pte`` files."""
    return Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def reference_etdump() -> Callable[[Path], Any]:
    """``decode(path)`` -> executorch's ``ETDumpFlatCC`` for that file, decoded once per session."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    cache: dict[Path, Any] = {}

    def decode(path: Path) -> Any:
        if path not in cache:
            cache[path] = deserialize_from_etdump_flatcc(Path(path).read_bytes())
        return cache[path]

    return decode
