"""The package's layers hold: every import inside ``pytest_sme2/`` points down, and no modules import each other in a
circle (issue 27 item 2).

The contracts are import-linter's, in ``pyproject.toml`` (``[tool.importlinter]``): a ``layers`` contract from the
front ends down to ``errors``/``units`` (TYPE_CHECKING imports count), and ``acyclic_siblings`` inside every package.
README "Architecture" says what each layer holds. A broken contract fails here with import-linter's own report: the
importing module, the imported one and the line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter brings tomli
    import tomli as tomllib


def _contracts() -> list[dict]:
    return tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with ``root``'s pyproject.toml, on the package in ``root`` (not an installed copy of it)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    return subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_every_import_points_down_and_no_package_has_a_circle() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, f"an import breaks the package's layers (pyproject.toml [tool.importlinter]):\n" \
                                 f"{done.stdout}{done.stderr}"
    assert "Contracts: 2 kept, 0 broken." in done.stdout, done.stdout


def test_the_contracts_count_type_checking_imports() -> None:
    """An import only for the type checker is an arrow too: a Protocol or a lower home for the type breaks it."""
    table = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    assert table.get("exclude_type_checking_imports", False) is False


def test_every_module_of_the_package_is_in_a_layer() -> None:
    """A new module or folder is placed in the layers (a module outside every layer would be checked by nothing)."""
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    named = {m.strip().strip("()") for layer in layers for m in layer.replace(":", "|").split("|")}
    graph = grimp.build_graph("pytest_sme2", cache_dir=None)
    outside = sorted(m for m in graph.modules
                     if m != "pytest_sme2"
                     and not any(m == n or m.startswith(n + ".") for n in named)  # in a layer
                     and not any(n.startswith(m + ".") for n in named))  # a package whose modules are named one by one
    assert not outside, f"modules in no layer of pyproject.toml [tool.importlinter]: {outside}"


def test_no_module_imports_the_package_itself() -> None:
    """``pytest_sme2/__init__.py`` stands above every layer (it is imported first): nothing imports from it, not even
    ``__version__`` (``pytest_sme2.version``)."""
    graph = grimp.build_graph("pytest_sme2", cache_dir=None)
    assert not graph.find_modules_that_directly_import("pytest_sme2")


@pytest.mark.parametrize(("module", "upward", "said"), [
    # an arrow back up: the store importing the measurement above it
    ("pytest_sme2/store/artifacts.py", "from pytest_sme2.measure import profile as _up  # noqa\n",
     "- pytest_sme2.store.artifacts -> pytest_sme2.measure.profile"),
    # a circle inside one package, for the type checker only
    ("pytest_sme2/gate/stats.py",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pytest_sme2.gate import suite as _up  # noqa\n",
     "No cycles are allowed in pytest_sme2.gate."),
])
def test_an_upward_import_breaks_the_contract(tmp_path: Path, module: str, upward: str, said: str) -> None:
    """The check can fail: the same contracts on a copy of the package with one arrow added are broken, naming it."""
    copy = tmp_path / "src"
    (copy / "pytest_sme2").mkdir(parents=True)
    for path in (ROOT / "pytest_sme2").rglob("*.py"):
        target = copy / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    target = copy / module
    text = target.read_text()
    head, sep, rest = text.partition("from __future__ import annotations\n")
    target.write_text(head + sep + upward + rest if sep else upward + text)
    (copy / "pyproject.toml").write_text(PYPROJECT.read_text())
    done = _lint(copy)
    assert done.returncode != 0, done.stdout
    assert said in done.stdout, done.stdout
