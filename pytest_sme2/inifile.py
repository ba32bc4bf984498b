"""The project's pytest configuration file, found as pytest finds it, for front ends that run without pytest.

The plugin reads ``sme2_*`` keys through pytest's config; the CLI (``pytest-sme2 profile``) runs without
pytest, yet must see the same project: the models a project registers in ``sme2_models`` are the ones its
tests name. :func:`find_inifile` applies pytest's rules (``_pytest/config/findpaths.py``, pytest 8-9): from
the start directory upward, the first directory holding one of these files, in this order, wins —

- ``pytest.toml`` / ``.pytest.toml`` (a ``[pytest]`` table) and ``pytest.ini`` / ``.pytest.ini`` (always,
  even without a ``[pytest]`` section);
- ``pyproject.toml`` with ``[tool.pytest.ini_options]`` (or ``[tool.pytest]``);
- ``tox.ini`` with ``[pytest]``; ``setup.cfg`` with ``[tool:pytest]``.

A relative path in the file is relative to the file's directory, as the plugin takes it. No pytest import.
"""

from __future__ import annotations

import configparser
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sme2.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - pytest itself depends on tomli below 3.11
    import tomli as tomllib

#: pytest's candidates in its order of preference within one directory.
CANDIDATES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


@dataclass(frozen=True)
class IniFile:
    """One pytest configuration file and its pytest section's values (strings, or lists of strings)."""

    path: Path
    values: Mapping[str, Any] = field(default_factory=dict)

    def linelist(self, key: str) -> tuple[str, ...]:
        """A ``linelist`` ini value: a TOML list, or one item per (non-empty) line of an ini string."""
        raw = self.values.get(key)
        if raw is None:
            return ()
        if isinstance(raw, str):
            return tuple(line.strip() for line in raw.splitlines() if line.strip())
        if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
            return tuple(raw)
        raise ConfigError(f"{self.path}: {key} must be a list of strings (one model source per item); got {raw!r}")

    def model_sources(self) -> tuple[str, ...]:
        """``sme2_models``, relative ``.py`` paths made absolute against this file's directory."""
        from pytest_sme2.models import resolve_model_sources

        return resolve_model_sources(self.linelist("sme2_models"), self.path.parent)


def find_inifile(start: str | Path) -> IniFile | None:
    """The pytest configuration file pytest would use when started in ``start``; None when there is none."""
    here = Path(start).resolve()
    for base in (here, *here.parents):
        for name in CANDIDATES:
            path = base / name
            if path.is_file():
                values = _load(path)
                if values is not None:
                    return IniFile(path, values)
    return None


def _load(path: Path) -> Mapping[str, Any] | None:
    """The file's pytest section, or None when the file holds none (pytest then keeps looking)."""
    if path.suffix == ".toml":
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read {path} as TOML ({exc}); fix the file, as pytest would need too") from None
        if path.name == "pyproject.toml":
            tool = doc.get("tool", {}).get("pytest")
            if not isinstance(tool, dict):
                return None
            ini = tool.get("ini_options")
            return ini if isinstance(ini, dict) else {k: v for k, v in tool.items() if k != "ini_options"}
        table = doc.get("pytest")
        return table if isinstance(table, dict) else {}
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(encoding="utf-8"), source=str(path))
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        raise ConfigError(f"cannot read {path} as an ini file ({exc}); fix the file, as pytest would need "
                          "too") from None
    section = "tool:pytest" if path.name == "setup.cfg" else "pytest"
    if parser.has_section(section):
        return dict(parser.items(section))
    # pytest.ini counts even without a [pytest] section: it marks the rootdir, with no values.
    return {} if path.name in ("pytest.ini", ".pytest.ini") else None


__all__ = ["CANDIDATES", "IniFile", "find_inifile"]
