"""Shared test configuration.

The emulated Android device tier (real adb server + Python adbd + bubblewrap sandbox) is a
fixture plugin in ``tests/emulated_device``; ``tests/`` has no ``__init__.py``, so pytest puts it on
``sys.path`` and the plugin is importable as ``emulated_device.fixtures``.

The core tests run on the real recorded traces in ``tests/data`` (see ``TRACES_README.md``) and
check them against executorch's own ETDump decoder, which is slow to import (seconds) and runs
``flatc`` per file: ``reference_etdump`` decodes each file once per session.

pytest-sme2's own runner is built once per test run (all xdist workers share one cache directory; builds
take a lock) by ``host_runner_build`` and ``aarch64_runner_build``; ``example_export`` exports the example
models into the same shared cache, which pytester projects get as ``--sme2-cache-dir`` (the plugin keeps its
runner builds in ``<cache>/runners``), so a plugin run reuses both. A missing compiler or SME2-capable QEMU
skips their tests with the reason, and fails them in CI (``tests/toolchain.py``).

The fast tier (``-m fast``, DEVELOPERS.md "Test tiers") never exports a model or builds a runner: a test marked
``fast`` that carries a marker of a slower tier or asks for a fixture that exports or builds is refused at
collection, and one that exports or builds in this process fails with the reason.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ci
import pytest

pytest_plugins = ["emulated_device.fixtures"]

# Before any fixture runs (session-scoped ones start pytest projects too) and before xdist starts its workers:
# the plugin under test must not see CI, while ci.IN_CI (and the workers, through ci.MARK) keep what was seen.
if ci.IN_CI:
    os.environ[ci.MARK] = "1"
os.environ.pop("CI", None)
# ... nor a pull request's target branch (--sme2-base-ref's default): pytest projects under tmp are not its checkout.
for _variable in ("GITHUB_BASE_REF", "CI_MERGE_REQUEST_TARGET_BRANCH_NAME"):
    os.environ.pop(_variable, None)


#: Markers of the tiers a fast test cannot belong to, and the fixtures that export models or build runners.
NOT_FAST_MARKERS = ("slow", "emulated_device", "browser")
NOT_FAST_FIXTURES = frozenset({"example_export", "host_runner_build", "aarch64_runner_build", "sme2_qemu",
                               "make_emulated_phone", "adb_server"})


#: Where xdist's workers write which tests share a fixture of their file (set by the controller, see below).
GROUPS_FILE = "SME2_TESTS_XDIST_GROUPS"


def pytest_configure(config: pytest.Config) -> None:
    """Under ``-n`` (xdist's default ``load`` distribution) the controller gives the workers a file to write the
    tests' groups to, read by :class:`_SharedFixtureScheduling`."""
    if _distributes_by_load(config) and GROUPS_FILE not in os.environ:
        handle, name = tempfile.mkstemp(prefix="sme2-xdist-groups-", suffix=".json")
        os.close(handle)
        os.environ[GROUPS_FILE] = name  # the workers start after this and inherit it
        config.add_cleanup(lambda: Path(name).unlink(missing_ok=True))


def _distributes_by_load(config: pytest.Config) -> bool:
    return (bool(getattr(config.option, "numprocesses", None)) and getattr(config.option, "dist", "no") == "load"
            and not hasattr(config, "workerinput"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's ``load`` distribution, except that the tests sharing a fixture of their file go to one worker."""
    if not _distributes_by_load(config):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class _SharedFixtureScheduling(LoadScopeScheduling):
        """Each group of tests that share a module- or session-scoped fixture of their own file is one unit of work
        (its worker sets the fixture up once: a recorded project, a history of sessions, an export cache); every other
        test is a unit of its own. Groups go first (largest first), then the tests one at a time in collection order
        (``_order_for_xdist``), to whichever worker is free: the long tests start early and neither worker waits long
        for the other at the end."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # complete: every worker wrote it before it reported its collection
                try:
                    self.groups = json.loads(Path(os.environ[GROUPS_FILE]).read_text(encoding="utf-8"))
                except (KeyError, OSError, ValueError):
                    self.groups = {}
            return self.groups.get(nodeid, nodeid)

    return _SharedFixtureScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a ``fast`` test that is also in a slower tier or asks for an export or a runner build; order the tests
    and, in an xdist worker, write their groups for the controller's scheduler."""
    _refuse_slow_fast_tests(items)
    _order_for_xdist(items)
    if hasattr(config, "workerinput") and os.environ.get(GROUPS_FILE):
        from pytest_sme2.store.files import write_atomic

        write_atomic(os.environ[GROUPS_FILE], json.dumps(_shared_fixture_groups(items)))  # both workers: the same


def _shared_fixture_groups(items: list[pytest.Item]) -> dict[str, str]:
    """``{nodeid: group}`` for the tests that share a module- or session-scoped fixture defined in their own file (two
    fixtures shared by one test make one group); a test that shares none is in no group."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    keys_of: dict[str, list[str]] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        keys = sorted(f"{module}::{d[-1].argname}" for d in defs
                      if d and d[-1].scope in ("module", "session") and d[-1].baseid == module)
        for key in keys[1:]:
            parent[find(key)] = find(keys[0])
        if keys:
            keys_of[item.nodeid] = keys
    members = Counter(find(keys[0]) for keys in keys_of.values())
    return {nodeid: find(keys[0]) for nodeid, keys in keys_of.items() if members[find(keys[0])] > 1}


def _order_for_xdist(items: list[pytest.Item]) -> None:
    """The slow tiers first, the fast tier last (stable: each file's tests keep their order)."""

    def tier(item: pytest.Item) -> int:
        if any(item.get_closest_marker(name) is not None for name in NOT_FAST_MARKERS):
            return 0
        return 2 if item.get_closest_marker("fast") is not None else 1

    items.sort(key=tier)


def _refuse_slow_fast_tests(items: list[pytest.Item]) -> None:
    wrong = []
    for item in items:
        if item.get_closest_marker("fast") is None:
            continue
        tiers = [name for name in NOT_FAST_MARKERS if item.get_closest_marker(name) is not None]
        fixtures = sorted(NOT_FAST_FIXTURES.intersection(getattr(item, "fixturenames", ())))
        if tiers or fixtures:
            wrong.append(f"{item.nodeid}: marked {', '.join(tiers)}" if tiers else
                         f"{item.nodeid}: uses {', '.join(fixtures)}")
    if wrong:
        raise pytest.UsageError("tests marked fast must not export models, build runners or belong to a slower tier "
                                "(DEVELOPERS.md, 'Test tiers'); remove their fast marker:\n  " + "\n  ".join(wrong))


@pytest.fixture(autouse=True)
def _fast_tests_neither_export_nor_build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``fast`` that exports a model or builds a runner in this process fails, saying which."""
    if request.node.get_closest_marker("fast") is None:
        return

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            pytest.fail(f"{request.node.nodeid} is marked fast but {what}: remove its fast marker "
                        "(DEVELOPERS.md, 'Test tiers')", pytrace=False)

        return refused

    monkeypatch.setattr("torch.export.export", refuse("exports a model (torch.export.export)"))
    monkeypatch.setattr("pytest_sme2.runners.build.host_compiler", refuse("builds a runner"))
    monkeypatch.setattr("pytest_sme2.runners.build.cross_compiler", refuse("builds a runner"))


@pytest.fixture(autouse=True)
def _compiler_before_in_process_runs(request: pytest.FixtureRequest) -> None:
    """executorch's compiler imported before a test's in-process pytest runs (``pytester``): each run drops the
    modules first imported during it, and the compiler registers torch operators, which a second import cannot. (The
    plugin imports the runtime without the compiler, ``runners/local.import_runtime``: a run may be the first to need
    it.)"""
    if "pytester" in request.fixturenames:
        import executorch.exir  # noqa: F401


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


@pytest.fixture(scope="session")
def sme2_shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export and runner cache shared by every xdist worker of this test run (exports and builds are
    written atomically and take locks, so workers may fill it at once)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    cache = root / "sme2_shared_cache"
    cache.mkdir(exist_ok=True)
    return cache


@pytest.fixture(scope="session")
def runner_cache(sme2_shared_cache: Path) -> Path:
    """Where the plugin keeps runner builds for ``--sme2-cache-dir=<sme2_shared_cache>``."""
    return sme2_shared_cache / "runners"


@pytest.fixture(scope="session")
def host_runner_build(runner_cache: Path) -> Any:
    """pytest-sme2's runner for this host (a RunnerBuild), built once per test run."""
    from toolchain import require_host_compiler

    from pytest_sme2.runners.build import TARGET_HOST, build_runner

    require_host_compiler()
    return build_runner(TARGET_HOST, cache_dir=runner_cache)


@pytest.fixture(scope="session")
def aarch64_runner_build(runner_cache: Path) -> Any:
    """pytest-sme2's runner cross-built for linux-aarch64 (the aarch64 wheel fetched with pip once)."""
    from toolchain import require_cross_compiler, tool_missing

    from pytest_sme2.runners.build import TARGET_LINUX_AARCH64, BuildError, aarch64_wheel, build_runner, installed_sdk

    require_cross_compiler()
    try:
        aarch64_wheel(installed_sdk().version, runner_cache)
    except BuildError as exc:
        tool_missing(f"the aarch64 executorch wheel cannot be fetched here: {exc}")
    return build_runner(TARGET_LINUX_AARCH64, cache_dir=runner_cache)


@pytest.fixture(scope="session")
def sme2_qemu(aarch64_runner_build: Any) -> Path:
    """qemu-aarch64 whose ``-cpu max`` gives the aarch64 runner SME2 (probed), else skipped (failed in CI)."""
    from toolchain import require_sme2_qemu

    return require_sme2_qemu(aarch64_runner_build.path, aarch64_runner_build.sysroot)


@pytest.fixture(scope="session")
def example_export(sme2_shared_cache: Path) -> Callable[[str, str], Any]:
    """``export(dtype, backend)`` -> the ExportedModel of toy_cnn, exported once into the shared cache."""
    import example_models  # noqa: F401 - registers the example models
    from pytest_sme2.program.export import export_model
    from pytest_sme2.store.files import file_lock

    done: dict[tuple[str, str], Any] = {}

    def export(dtype: str, backend: str) -> Any:
        if (dtype, backend) not in done:
            # One worker exports, the other waits and finds it in the cache (an export is 10-40 s of CPU).
            with file_lock(sme2_shared_cache / f".export-{dtype}-{backend}.lock"):
                done[dtype, backend] = export_model("toy_cnn", dtype=dtype, backend=backend,
                                                    cache_dir=sme2_shared_cache, progress=None)
        return done[dtype, backend]

    return export

