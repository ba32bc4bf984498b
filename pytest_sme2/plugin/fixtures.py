"""The fixtures: ``exported_model``, ``sme2_runner``, ``sme2_baseline``, ``android_device`` (and the session ones).

Each is a few lines: the work is done by the objects in ``measure`` and ``judge`` and by the library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.options import Sme2Options
from pytest_sme2.plugin.check import Sme2Baseline
from pytest_sme2.plugin.markers import parse_model_marker
from pytest_sme2.plugin.measure import MODEL_REQUEST_KEY, Sme2Runner, export, export_ahead
from pytest_sme2.plugin.records import EXPORT_POOL_KEY, OPTIONS_KEY, result_of, update
from pytest_sme2.plugin.session import Sme2Session, call


@pytest.fixture(scope="session")
def sme2_options(pytestconfig: pytest.Config) -> Sme2Options:
    """The resolved ``--sme2-*`` options."""
    return pytestconfig.stash[OPTIONS_KEY]


@pytest.fixture(scope="session")
def sme2_session(pytestconfig: pytest.Config, sme2_options: Sme2Options,
                 tmp_path_factory: pytest.TempPathFactory) -> Sme2Session:
    """Session state shared by the sme2 fixtures (runner built lazily, once)."""
    out = sme2_options.out_dir or tmp_path_factory.mktemp("sme2_runs")
    if sme2_options.models:
        from pytest_sme2.models import load_model_sources

        call(lambda: load_model_sources(sme2_options.models))
    return Sme2Session(pytestconfig, sme2_options, Path(out))


# ------------------------------------------------------------------------------------------ records


@pytest.fixture
def exported_model(request: pytest.FixtureRequest, sme2_session: Sme2Session) -> Any:
    """The ``sme2_model`` marker's model exported to a ``.pte`` (cached by content)."""
    model_request = parse_model_marker(request.node)
    export_ahead(sme2_session, request.session.items)
    exported = call(lambda: export(sme2_session, model_request))
    pool = request.config.stash.get(EXPORT_POOL_KEY, None)
    repaired = exported.repaired
    if pool is not None and exported.cache_key not in sme2_session.reissued:
        # The first test of a model the pool exported gets the warnings its export raised, as if it had exported.
        sme2_session.reissued.add(exported.cache_key)
        for caught in pool.warnings.get(exported.cache_key, ()):
            caught.reissue()
        repaired = repaired or pool.repaired.get(exported.cache_key, "")
    update(request.node, model={
        "name": model_request.name, "dtype": model_request.dtype, "backend": model_request.backend,
        "pte": str(exported.pte_path), "export_cached": bool(exported.cached),
        # a cache hit the export pool made this session (not one from an earlier session)
        "export_pool": pool is not None and exported.cache_key in pool.keys,
        "export_seconds": round(float(exported.export_seconds), 2)})
    if repaired:  # said once, in this test's lines of the terminal section: the next run hits the new entry
        update(request.node, warnings=(*result_of(request.node).warnings, repaired))
    request.node.stash[MODEL_REQUEST_KEY] = model_request
    return exported



@pytest.fixture
def sme2_runner(request: pytest.FixtureRequest, sme2_session: Sme2Session) -> Sme2Runner:
    """Measures exported models on the device chosen with ``--sme2-device``."""
    return Sme2Runner(sme2_session, request.node)



@pytest.fixture
def sme2_baseline(request: pytest.FixtureRequest, sme2_session: Sme2Session, sme2_runner: Sme2Runner) -> Sme2Baseline:
    """Compares profiles with the stored baseline and the test's ``sme2_threshold``."""
    return Sme2Baseline(sme2_session, request.node, sme2_runner)


@pytest.fixture
def android_device(sme2_session: Sme2Session) -> Any:
    """The selected Android device's facts (DeviceInfo); skips unless ``--sme2-device=android``."""
    if sme2_session.options.device != "android":
        pytest.skip("no Android device selected: run with --sme2-device=android (and --sme2-runner)")
    return call(sme2_session.runner.device_info)


# ------------------------------------------------------------------------------------------ reporting
