"""The pytest adapter: options, markers, fixtures, terminal section, results files.

Everything that measures or judges lives in the library (``export``, ``runners``, ``profile``,
``gate``, ``baseline``, ``report``); this module only translates between pytest and it:

- ``pytest_addoption`` registers the ``--sme2-*`` table from ``options`` (with ``sme2_*`` ini keys);
  ``pytest_configure`` builds the one frozen :class:`Sme2Options` and checks conflicts;
- fixtures ``exported_model``, ``sme2_runner``, ``sme2_baseline``, ``android_device`` read the
  ``sme2_model`` / ``sme2_threshold`` markers and call the library;
- each test's result travels to the controller in ``report.user_properties`` (so it works under
  pytest-xdist), where the terminal section and the JSON/markdown files are written once.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import pytest

from .errors import ConfigError, Sme2Error
from .options import OPTION_TABLE, OptionSpec, Sme2Options

RESULT_PROPERTY = "sme2_result"
OPTIONS_KEY = pytest.StashKey[Sme2Options]()
RESULTS_KEY = pytest.StashKey[list[dict[str, Any]]]()
RECORD_KEY = pytest.StashKey["TestRecord"]()

MODEL_KWARGS = ("dtype", "backend", "inputs")
THRESHOLD_KWARGS = ("latency_pct", "p50_ms", "p90_ms", "categories", "min_speedup")
DTYPES = ("fp32", "fp16", "int8")
BACKENDS = ("xnnpack", "portable")


# ------------------------------------------------------------------------------------------ options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sme2", "pytest-sme2: performance regression testing of ExecuTorch models")
    for spec in OPTION_TABLE:
        kwargs: dict[str, Any] = {"dest": spec.dest, "help": spec.help, "default": None}
        if spec.action:
            kwargs["action"] = spec.action
        else:
            if spec.type is not None:
                kwargs["type"] = spec.type
            if spec.choices:
                kwargs["choices"] = spec.choices
            kwargs["metavar"] = spec.name.split("-")[-1].upper()
        group.addoption(spec.flag, **kwargs)
        parser.addini(spec.dest, help=f"{spec.help} [ini of {spec.flag}]", type=spec.ini_type,  # type: ignore[arg-type]
                      default=_ini_default(spec))


def _ini_default(spec: OptionSpec) -> Any:
    if spec.ini_type == "bool":
        return False
    if spec.ini_type == "linelist":
        return []
    return None


def _from_ini(config: pytest.Config, spec: OptionSpec) -> Any:
    raw = config.getini(spec.dest)
    if spec.ini_type in ("bool", "linelist"):
        return raw
    if raw in (None, ""):
        return spec.default
    convert = spec.type
    if spec.choices and raw not in spec.choices:
        raise pytest.UsageError(f"ini {spec.dest} = {raw!r}: allowed values are {', '.join(spec.choices)}")
    if callable(convert):
        try:
            return convert(raw)
        except argparse.ArgumentTypeError as exc:
            raise pytest.UsageError(f"ini {spec.dest} = {raw!r}: {exc}") from None
    return raw


def build_options(config: pytest.Config) -> Sme2Options:
    """Resolve every ``--sme2-*`` option (command line, then ini, then default) and check conflicts."""
    values: dict[str, Any] = {}
    for spec in OPTION_TABLE:
        value = config.getoption(spec.dest)
        if value is None or value is False:
            value = _from_ini(config, spec)
        if value is None:
            value = spec.default
        values[spec.dest.removeprefix("sme2_")] = value
    root = config.rootpath
    values["baseline_dir"] = root / str(values["baseline_dir"])
    values["cache_dir"] = root / str(values["cache_dir"])
    for key in ("runner", "runner_off", "libcxx", "json", "markdown", "out_dir"):
        if values[key] is not None:
            values[key] = Path(values[key])
    values["models"] = tuple(values["models"] or ())
    values["update_baseline"] = bool(values["update_baseline"])
    opts = Sme2Options(**values)
    _check_conflicts(opts)
    return opts


def _check_conflicts(opts: Sme2Options) -> None:
    if opts.serial and opts.device != "android":
        raise pytest.UsageError(
            f"--sme2-serial {opts.serial} only applies to --sme2-device=android (device is {opts.device!r}); "
            "add --sme2-device=android or drop --sme2-serial"
        )
    if opts.device == "local" and (opts.runner or opts.runner_off):
        raise pytest.UsageError(
            "--sme2-runner/--sme2-runner-off are executor_runner builds for --sme2-device=host or android; "
            "the local device uses the executorch Python runtime. Add --sme2-device=host (or android)."
        )
    if opts.device in ("host", "android") and opts.runner is None:
        raise pytest.UsageError(
            f"--sme2-device={opts.device} needs --sme2-runner PATH: an executor_runner built with "
            "-DEXECUTORCH_BUILD_DEVTOOLS=ON -DEXECUTORCH_ENABLE_EVENT_TRACER=ON (see the README)"
        )
    if opts.runner_off is not None and opts.runner is None:
        raise pytest.UsageError("--sme2-runner-off needs --sme2-runner (the SME2-on build) as well")
    if opts.libcxx is not None and opts.device != "android":
        raise pytest.UsageError("--sme2-libcxx only applies to --sme2-device=android")
    if opts.device in ("local", "host"):
        from .errors import ConfigError
        from .runners.base import check_threads

        try:
            check_threads(opts.threads, os.cpu_count() or 0, "this host")
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sme2_model(name, *, dtype='fp32', backend='xnnpack', inputs=None): the model this performance "
        "test exports and runs (a registered name or a callable returning an nn.Module)",
    )
    config.addinivalue_line(
        "markers",
        "sme2_threshold(*, latency_pct=None, p50_ms=None, p90_ms=None, categories=None, min_speedup=None): "
        "regression margin vs baseline (percent), absolute budgets (ms), per-category margins "
        "({'GEMM': 10}), minimum SME2 speedup",
    )
    config.stash[OPTIONS_KEY] = build_options(config)
    config.stash[RESULTS_KEY] = []
    config.pluginmanager.register(Collector(config), "sme2_collector")
    # pytest-html is "active" when it writes a report; being installed is not enough.
    if config.pluginmanager.hasplugin("html") and getattr(config.option, "htmlpath", None):
        from . import plugin_html

        config.pluginmanager.register(plugin_html, "sme2_html")


# ------------------------------------------------------------------------------------------ markers


@dataclass(frozen=True)
class ModelRequest:
    """What ``@pytest.mark.sme2_model`` asked for."""

    model: str | Callable[[], Any]
    dtype: str = "fp32"
    backend: str = "xnnpack"
    inputs: tuple[Any, ...] | None = None

    @property
    def name(self) -> str:
        return self.model if isinstance(self.model, str) else getattr(self.model, "__name__", "model")


@dataclass(frozen=True)
class Threshold:
    """What ``@pytest.mark.sme2_threshold`` asked for (percentages as given)."""

    latency_pct: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    categories: Mapping[str, float] = field(default_factory=dict)
    min_speedup: float | None = None


def _marker_error(item: pytest.Item, message: str) -> None:
    pytest.fail(f"{item.nodeid}: {message}", pytrace=False)


def parse_model_marker(item: pytest.Item) -> ModelRequest:
    marker = item.get_closest_marker("sme2_model")
    if marker is None:
        _marker_error(item, "uses exported_model but has no @pytest.mark.sme2_model(name, dtype=..., "
                      "backend=...) marker; add one naming a registered model")
        raise AssertionError  # unreachable: pytest.fail raises
    unknown = sorted(set(marker.kwargs) - set(MODEL_KWARGS))
    if unknown:
        _marker_error(item, f"sme2_model got unknown keyword(s) {', '.join(unknown)}; "
                      f"allowed: {', '.join(MODEL_KWARGS)}")
    if len(marker.args) != 1 or not (isinstance(marker.args[0], str) or callable(marker.args[0])):
        _marker_error(item, "sme2_model takes exactly one positional argument: a registered model name or a "
                      f"callable returning an nn.Module (got {marker.args!r})")
    dtype = marker.kwargs.get("dtype", "fp32")
    backend = marker.kwargs.get("backend", "xnnpack")
    if dtype not in DTYPES:
        _marker_error(item, f"sme2_model dtype={dtype!r} is not supported; allowed: {', '.join(DTYPES)}")
    if backend not in BACKENDS:
        _marker_error(item, f"sme2_model backend={backend!r} is not supported; allowed: {', '.join(BACKENDS)}")
    inputs = marker.kwargs.get("inputs")
    if inputs is not None:
        if not isinstance(inputs, (tuple, list)):
            inputs = (inputs,)
        inputs = tuple(inputs)
    return ModelRequest(marker.args[0], dtype, backend, inputs)


def _number(item: pytest.Item, key: str, value: Any, *, upper: float | None = None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        # "not value > 0" also catches NaN, which compares false with everything and would disable the check.
        _marker_error(item, f"sme2_threshold {key}={value!r} must be a positive number (finite: not nan or inf)")
    if upper is not None and value >= upper:
        _marker_error(item, f"sme2_threshold {key}={value!r} must be below {upper}")
    return float(value)


def parse_threshold_marker(item: pytest.Item) -> Threshold:
    marker = item.get_closest_marker("sme2_threshold")
    if marker is None:
        return Threshold()
    from .categories import CATEGORIES

    if marker.args:
        _marker_error(item, f"sme2_threshold takes keyword arguments only ({', '.join(THRESHOLD_KWARGS)}); "
                      f"got positional {marker.args!r}")
    unknown = sorted(set(marker.kwargs) - set(THRESHOLD_KWARGS))
    if unknown:
        _marker_error(item, f"sme2_threshold got unknown keyword(s) {', '.join(unknown)}; "
                      f"allowed: {', '.join(THRESHOLD_KWARGS)}")
    kw = marker.kwargs
    cats = kw.get("categories") or {}
    if not isinstance(cats, Mapping):
        _marker_error(item, "sme2_threshold categories must be a dict like {'GEMM': 10, 'Data Movement': 15}")
    bad = sorted(set(cats) - set(CATEGORIES))
    if bad:
        _marker_error(item, f"sme2_threshold categories has unknown categor(y/ies) {', '.join(map(repr, bad))}; "
                      f"allowed: {', '.join(CATEGORIES)}")
    margins = {str(k): _number(item, f"categories[{k!r}]", v, upper=100) for k, v in cats.items()}
    return Threshold(
        latency_pct=_number(item, "latency_pct", kw.get("latency_pct"), upper=100),
        p50_ms=_number(item, "p50_ms", kw.get("p50_ms")),
        p90_ms=_number(item, "p90_ms", kw.get("p90_ms")),
        categories={k: v for k, v in margins.items() if v is not None},
        min_speedup=_number(item, "min_speedup", kw.get("min_speedup")),
    )


_MARKER_FIXTURES = {"sme2_model": "exported_model", "sme2_threshold": "sme2_baseline"}


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A marker written on a test that does not use the fixture reading it would do nothing: say so.

    Only the test's own markers (decorator or ``pytest.param(marks=...)``) are checked; a module- or
    class-wide ``pytestmark`` may cover helper tests that do not measure anything.
    """
    names = getattr(item, "fixturenames", ())
    for marker in getattr(item, "own_markers", ()):
        fixture = _MARKER_FIXTURES.get(marker.name)
        if fixture is not None and fixture not in names:
            _marker_error(item, f"has @pytest.mark.{marker.name} but does not use the {fixture} fixture, which "
                          f"is what reads it, so the marker would do nothing; add {fixture} to the test's "
                          "arguments or remove the marker")


# ------------------------------------------------------------------------------------------ session


class Sme2Session:
    """Per-session state: options, the device runner (built on first use), the output dir."""

    def __init__(self, config: pytest.Config, options: Sme2Options, out_dir: Path) -> None:
        self.config = config
        self.options = options
        self.out_dir = out_dir
        self._runner: Any = None

    @property
    def runner(self) -> Any:
        if self._runner is None:
            from .runners import make_runner

            o = self.options
            extra: dict[str, Any] = {}
            if o.device == "android":
                extra = {"libcxx": o.libcxx, "big_cores": o.big_cores, "cooldown_s": o.cooldown,
                         "fixed_performance": o.fixed_performance, "worker": _worker_id(self.config)}
            try:
                runner = make_runner(
                    o.device, runner_path=o.runner, runner_off=o.runner_off, serial=o.serial, timeout_s=o.timeout,
                    **extra)
                self._runner = runner
            except Sme2Error as exc:
                error = exc
            else:
                return self._runner
            if isinstance(error, ConfigError):
                # A wrong choice of device or option (several phones and no serial, a mask naming no
                # CPU) is wrong for every test: one usage error for the session, not a failure per test.
                pytest.exit(f"pytest-sme2: {error}", returncode=pytest.ExitCode.USAGE_ERROR)
            _fail_without_chain(str(error))
        return self._runner

    def progress(self, message: str) -> None:
        """Show a progress line live (outside capture) for work that takes seconds."""
        capman = self.config.pluginmanager.getplugin("capturemanager")
        reporter = self.config.pluginmanager.getplugin("terminalreporter")
        if reporter is None or _worker_id(self.config) is not None:
            return
        if capman is not None:
            with capman.global_and_fixture_disabled():
                reporter.write_line(f"[sme2] {message}")
        else:  # pragma: no cover - capture is always registered in practice
            reporter.write_line(f"[sme2] {message}")


def _worker_id(config: pytest.Config) -> str | None:
    worker = getattr(config, "workerinput", None)
    return None if worker is None else str(worker.get("workerid"))


def _call(fn: Callable[[], Any]) -> Any:
    """Run library code; its errors fail the test with their message, not a traceback."""
    try:
        return fn()
    except Sme2Error as exc:
        message = str(exc)
    _fail_without_chain(message)


def _fail_without_chain(message: str) -> NoReturn:
    # Called outside the except block, so pytest does not print the library error as a chained cause.
    pytest.fail(message, pytrace=False)


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
        from .models import load_model_sources

        _call(lambda: load_model_sources(sme2_options.models))
    return Sme2Session(pytestconfig, sme2_options, Path(out))


# ------------------------------------------------------------------------------------------ records


@dataclass
class TestRecord:
    """What one test measured and concluded; serialized into ``report.user_properties``."""

    test_id: str
    model: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    profile_off: dict[str, Any] | None = None
    comparison: dict[str, Any] | None = None
    baseline: dict[str, Any] | None = None
    verdict: dict[str, Any] | None = None
    baseline_path: str = ""
    baseline_written: bool = False
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Keys of :class:`pytest_sme2.report.results.TestResult` (plus ``baseline_written``)."""
        d = dict(self.__dict__)
        d["model_override"] = d.pop("model")
        return d


def _record(item: pytest.Item) -> TestRecord:
    if RECORD_KEY not in item.stash:
        item.stash[RECORD_KEY] = TestRecord(item.nodeid)
    return item.stash[RECORD_KEY]


# ------------------------------------------------------------------------------------------ fixtures


def _model_spec(request: ModelRequest) -> Any:
    from .models import ModelSpec, get_model

    if isinstance(request.model, str):
        return get_model(request.model)
    factory = request.model

    def build() -> tuple[Any, tuple[Any, ...]]:
        module = factory()
        if isinstance(module, tuple):
            return module  # already (module, inputs)
        inputs = getattr(module, "example_inputs", None)
        if inputs is None and request.inputs is None:
            raise Sme2Error(f"model callable {request.name} returned a module without example inputs; "
                            "pass inputs=(tensor, ...) to sme2_model")
        return module, tuple(inputs or ())

    return ModelSpec(request.name, build, f"{getattr(factory, '__module__', '?')}.{request.name}")


def _export(session: Sme2Session, request: ModelRequest, backend: str | None = None) -> Any:
    from .export import export_model

    spec = _model_spec(request)
    return export_model(spec, dtype=request.dtype, backend=backend or request.backend, inputs=request.inputs,
                        cache_dir=session.options.cache_dir, progress=session.progress)


@pytest.fixture
def exported_model(request: pytest.FixtureRequest, sme2_session: Sme2Session) -> Any:
    """The ``sme2_model`` marker's model exported to a ``.pte`` (cached by content)."""
    model_request = parse_model_marker(request.node)
    exported = _call(lambda: _export(sme2_session, model_request))
    rec = _record(request.node)
    rec.model = {"name": model_request.name, "dtype": model_request.dtype, "backend": model_request.backend,
                 "pte": str(exported.pte_path)}
    request.node.stash[_MODEL_REQUEST_KEY] = model_request
    return exported


_MODEL_REQUEST_KEY = pytest.StashKey[ModelRequest]()
_LOCAL_VARIANTS = ("xnnpack", "portable")


@dataclass(frozen=True)
class OnOff:
    """An interleaved SME2 off/on measurement of one model."""

    off: Any
    on: Any

    @property
    def speedup(self) -> float:
        import numpy as np

        return float(np.median(self.off.samples_ms) / np.median(self.on.samples_ms))


class Sme2Runner:
    """The ``sme2_runner`` fixture: measures exported models on the selected device."""

    def __init__(self, session: Sme2Session, item: pytest.Item) -> None:
        self._session = session
        self._item = item
        self.remeasure: Callable[[], Any] | None = None

    @property
    def device(self) -> str:
        return self._session.options.device

    @property
    def runner(self) -> Any:
        return self._session.runner

    def _skip_without_sme2_builds(self, variant: str) -> None:
        o = self._session.options
        if o.device == "local":
            pytest.skip(f"variant {variant!r} needs two executor_runner builds (SME2 on/off); the local executorch "
                        "runtime has no SME2 build switch. Run with --sme2-device=host or android and "
                        "--sme2-runner/--sme2-runner-off")
        if variant not in self.runner.variants():
            pytest.skip(f"variant {variant!r} is not available: pass --sme2-runner-off with the SME2-off build")
        info = getattr(self.runner, "device_info", None)
        device = info() if callable(info) else None
        if variant == "sme2_on" and device is not None and device.sme2 is False:
            pytest.skip(f"device {device.name or device.serial} has no SME2 (no 'sme2' in its CPU features): "
                        "an SME2-on measurement there would not measure SME2")

    def profile(self, exported: Any, *, variant: str | None = None, runs: int | None = None) -> Any:
        """Measure ``exported`` (``--sme2-blocks`` blocks of ``--sme2-runs``); returns a Profile."""
        from .profile import profile_exported

        o = self._session.options
        _check_exported(exported, "profile")
        if variant not in _VARIANTS:
            pytest.fail(f"sme2_runner.profile(variant={variant!r}): unknown variant; allowed: None (the default "
                        f"build), {', '.join(repr(v) for v in _VARIANTS if v)}", pytrace=False)
        target = exported
        run_variant = variant
        if variant in _LOCAL_VARIANTS:
            if o.device != "local":
                pytest.skip(f"variant {variant!r} compares backends on the local runtime only")
            req = self._item.stash.get(_MODEL_REQUEST_KEY, None)
            if req is None:
                pytest.fail("variant= needs the exported_model fixture of this test", pytrace=False)
            if variant != exported.backend:
                target = _call(lambda: _export(self._session, req, backend=variant))
            run_variant = None
        elif variant is not None:
            self._skip_without_sme2_builds(variant)

        def measure() -> Any:
            return _call(lambda: profile_exported(
                target, self.runner, runs=o.runs if runs is None else runs, warmup=o.warmup, threads=o.threads,
                out_dir=self._session.out_dir / _safe(self._item.nodeid), variant=run_variant,
                blocks=o.blocks, timeout_s=o.timeout, progress=None))

        result = measure()
        self.remeasure = measure
        _record(self._item).profile = result.to_dict()
        return result

    def profile_on_off(self, exported: Any, *, runs: int | None = None, blocks: int | None = None) -> OnOff:
        """Measure the SME2-off and SME2-on builds in interleaved blocks (ABBA)."""
        from .profile import profile_on_off

        o = self._session.options
        _check_exported(exported, "profile_on_off")
        self._skip_without_sme2_builds("sme2_on")
        self._skip_without_sme2_builds("sme2_off")

        def measure() -> OnOff:
            off, on = _call(lambda: profile_on_off(
                exported, self.runner, runs=o.runs if runs is None else runs, warmup=o.warmup, threads=o.threads,
                out_dir=self._session.out_dir / _safe(self._item.nodeid), blocks=o.blocks if blocks is None else blocks,
                timeout_s=o.timeout, progress=self._session.progress))
            return OnOff(off, on)

        pair = measure()
        self.remeasure = lambda: measure().on
        rec = _record(self._item)
        rec.profile, rec.profile_off = pair.on.to_dict(), pair.off.to_dict()
        return pair


_VARIANTS = (None, *_LOCAL_VARIANTS, "sme2_on", "sme2_off")


def _check_exported(exported: Any, method: str) -> None:
    if not hasattr(exported, "pte_path"):
        pytest.fail(f"sme2_runner.{method}() takes the exported_model fixture (an ExportedModel); got "
                    f"{type(exported).__name__} {exported!r:.60}", pytrace=False)


def _safe(nodeid: str) -> str:
    from .baseline import safe_name

    return safe_name(nodeid)


@pytest.fixture
def sme2_runner(request: pytest.FixtureRequest, sme2_session: Sme2Session) -> Sme2Runner:
    """Measures exported models on the device chosen with ``--sme2-device``."""
    return Sme2Runner(sme2_session, request.node)


class Sme2Baseline:
    """The ``sme2_baseline`` fixture: compares a profile with the stored baseline and the thresholds."""

    def __init__(self, session: Sme2Session, item: pytest.Item, runner: Sme2Runner) -> None:
        self._session = session
        self._item = item
        self._runner = runner

    def gate_config(self) -> Any:
        from .gate import GateConfig

        t = parse_threshold_marker(self._item)
        o = self._session.options
        return GateConfig(
            margin=(t.latency_pct if t.latency_pct is not None else o.margin) / 100,
            strict=o.strict,
            category_margins={k: v / 100 for k, v in t.categories.items()},
            p50_ms=t.p50_ms, p90_ms=t.p90_ms, min_speedup=t.min_speedup,
        )

    def check(self, result: Any) -> Any:
        """Judge ``result`` (a Profile, or an on/off pair) and fail the test on a regression."""
        from .baseline import Baseline, BaselineStore, fingerprint_diff, now_iso
        from .gate import Check, Status, Verdict, gate_confirmed, speedup_check

        if not (isinstance(result, OnOff) or hasattr(result, "fingerprint")):
            pytest.fail(f"sme2_baseline.check() takes what sme2_runner.profile() or profile_on_off() returned; got "
                        f"{type(result).__name__} {result!r:.60}", pytrace=False)
        config = self.gate_config()
        o = self._session.options
        rec = _record(self._item)
        extra_checks: list[Check] = []
        profile = result
        if isinstance(result, OnOff):
            profile = result.on
            extra_checks.append(speedup_check(result.off.samples_ms, result.on.samples_ms,
                                              min_speedup=config.min_speedup, config=config,
                                              off_blocks=result.off.analysis.block_sizes,
                                              on_blocks=result.on.analysis.block_sizes))
            from .report.comparison import compare_on_off

            rec.comparison = compare_on_off(result.off.analysis, result.on.analysis).to_dict()
        store = BaselineStore(o.baseline_dir)
        rec.baseline_path = str(store.path_for(self._item.nodeid, profile.fingerprint))
        if o.update_baseline:
            # The old file is not read: a corrupt one must not stop the update that replaces it.
            stats = profile.analysis.e2e.to_dict()
            baseline = Baseline(
                test_id=self._item.nodeid, fingerprint=profile.fingerprint, samples_ms=profile.samples_ms,
                category_totals_ms=dict(profile.analysis.category_totals_ms),
                category_per_run_ms=dict(profile.analysis.category_per_run_ms) if profile.per_operator else {},
                per_operator=profile.per_operator, stats=stats,
                top_operators=tuple(op.to_dict() for op in profile.analysis.operator_details[:10]),
                created=now_iso(), tool_version=_version(), block_sizes=profile.analysis.block_sizes,
            )
            path = _call(lambda: store.save(baseline))
            rec.baseline_written = True
            rec.baseline = baseline.to_dict()
            rec.note = f"baseline written: {path}"
            verdict = Verdict(_overall_extra(extra_checks), tuple(extra_checks), strict=config.strict)
            rec.verdict = verdict.to_dict()
            self._fail_if(verdict)
            return verdict
        lookup = _call(lambda: store.lookup(self._item.nodeid, profile.fingerprint))
        if lookup.baseline is None:
            lines = [f"no baseline for {self._item.nodeid} on this device/runner (fingerprint "
                     f"{lookup.path.stem.rsplit('@', 1)[-1]}): expected {lookup.path}"]
            for other_path, other in lookup.others:
                diff = "; ".join(fingerprint_diff(other.fingerprint, profile.fingerprint)) or "?"
                lines.append(f"  a baseline exists for another fingerprint ({other_path.name}); differs in: {diff}")
            lines.append(f"create it with: pytest {self._item.nodeid!r} --sme2-update-baseline "
                         f"(and --sme2-device={o.device} as now), then commit {o.baseline_dir.name}/")
            rec.note = "\n".join(lines)
            pytest.fail(rec.note, pytrace=False)
        rec.baseline = lookup.baseline.to_dict()
        confirm = not o.no_confirm and self._runner.remeasure is not None
        measure = self._runner.remeasure or (lambda: profile)
        verdict, _pooled = gate_confirmed(lookup.baseline.samples(), lambda: _samples_of(measure()), config,
                                       first=profile.samples(), confirm=confirm)
        if extra_checks:
            checks = (*verdict.checks, *extra_checks)
            statuses = {c.status for c in extra_checks if not c.advisory}
            status = verdict.status
            for s in (Status.INVALID, Status.REGRESSION, Status.INCONCLUSIVE):
                if s in statuses and status not in (Status.INVALID, Status.REGRESSION):
                    status = s
            verdict = replace(verdict, status=status, checks=checks)
        rec.verdict = verdict.to_dict()
        rec.note = verdict.summary()
        self._fail_if(verdict)
        return verdict

    def _fail_if(self, verdict: Any) -> None:
        if verdict.failed:
            head = f"sme2 {verdict.status.value.upper()}: {self._item.nodeid}"
            pytest.fail(f"{head}\n{verdict.summary()}", pytrace=False)


def _overall_extra(checks: list[Any]) -> Any:
    from .gate import Status

    statuses = {c.status for c in checks if not c.advisory}
    for s in (Status.INVALID, Status.REGRESSION, Status.INCONCLUSIVE):
        if s in statuses:
            return s
    return Status.PASS


def _samples_of(result: Any) -> Any:
    return result.samples()


def _version() -> str:
    from . import __version__

    return __version__


@pytest.fixture
def sme2_baseline(request: pytest.FixtureRequest, sme2_session: Sme2Session, sme2_runner: Sme2Runner) -> Sme2Baseline:
    """Compares profiles with the stored baseline and the test's ``sme2_threshold``."""
    return Sme2Baseline(sme2_session, request.node, sme2_runner)


@pytest.fixture
def android_device(sme2_session: Sme2Session) -> Any:
    """The selected Android device's facts (DeviceInfo); skips unless ``--sme2-device=android``."""
    if sme2_session.options.device != "android":
        pytest.skip("no Android device selected: run with --sme2-device=android (and --sme2-runner)")
    return _call(sme2_session.runner.device_info)


# ------------------------------------------------------------------------------------------ reporting


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # The call phase carries the record; so does a setup that failed or skipped (an export error, a
    # missing SME2 build), so that the reports list every sme2 test, not only those that ran.
    carries = report.when == "call" or (report.when == "setup" and not report.passed)
    if carries and RECORD_KEY in item.stash:
        record = item.stash[RECORD_KEY]
        report.user_properties.append((RESULT_PROPERTY, json.dumps(record.to_dict())))
    return report


def record_of(report: pytest.TestReport) -> dict[str, Any] | None:
    """The sme2 record a test report carries, with the report's outcome (and skip reason) filled in."""
    for key, value in report.user_properties:
        if key == RESULT_PROPERTY:
            record: dict[str, Any] = json.loads(str(value))
            record["outcome"] = report.outcome
            if report.skipped and isinstance(report.longrepr, tuple) and not record.get("note"):
                record["note"] = str(report.longrepr[2]).removeprefix("Skipped: ")
            return record
    return None


class Collector:
    """Gathers every test's record on the controller (xdist workers' included) and reports once."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = record_of(report)
        if record is not None:
            self.config.stash[RESULTS_KEY].append(record)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        _terminal_summary(terminalreporter, config)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        _session_finish(session)


def _terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    records = config.stash.get(RESULTS_KEY, [])
    if not records or _worker_id(config) is not None:
        return
    from .gate import Status
    from .report.results import BASELINE_WRITTEN, FAILED, SKIPPED, TestResult, delta_text, speedup_text

    tr = terminalreporter
    tr.write_sep("=", "sme2 performance")
    tests = [TestResult.from_dict(r) for r in records]
    for t in tests:
        h = t.headline
        line = f"{h.status.upper():<16} {t.test_id}"
        if h.median_ms is not None:
            line += f"  median {h.median_ms:.4f} ms"
        if h.delta_pct is not None:
            line += f"  delta {delta_text(h)}"
        if h.speedup is not None:
            line += f"  SME2 speedup {speedup_text(h.speedup)}"
        bad = (Status.REGRESSION.value, FAILED)
        markup = {"red": True} if h.status in bad else (
            {"yellow": True} if h.status in (Status.INCONCLUSIVE.value, Status.INVALID.value, SKIPPED)
            else {"green": True})
        tr.write_line(line, **markup)
        if h.status in (BASELINE_WRITTEN, SKIPPED) and t.note:
            tr.write_line(f"    {t.note.splitlines()[0]}")
        elif h.status in (Status.INCONCLUSIVE.value, Status.INVALID.value) and t.verdict is not None:
            # Not a failure (unless --sme2-strict), so say why here: it must not read as a pass.
            for check in t.verdict.checks:
                if check.status.value == h.status and not check.advisory:
                    tr.write_line(f"    {check.name}: {check.message}")
    counts: dict[str, int] = {}
    for t in tests:
        counts[t.status] = counts.get(t.status, 0) + 1
    tr.write_line("sme2 verdicts: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))


def _session_finish(session: pytest.Session) -> None:
    config = session.config
    if _worker_id(config) is not None:
        return  # workers never write shared reports; the controller has every record
    records = config.stash.get(RESULTS_KEY, [])
    opts = config.stash.get(OPTIONS_KEY, None)
    if opts is None:
        return
    try:
        _write_reports(config, opts, records)
    except Sme2Error as exc:
        # A report that cannot be written is an error of the run, shown once, without a traceback.
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"pytest-sme2: {exc}", red=True)
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    if any((r.get("verdict") or {}).get("status") == "regression" for r in records) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def results_from_records(records: list[dict[str, Any]], opts: Sme2Options) -> Any:
    """The session's records as a :class:`~pytest_sme2.report.results.SessionResults`."""
    import platform
    import sys

    from .report.results import SessionResults, TestResult

    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in opts.__dict__.items()}
    environment = {"python": sys.version.split()[0], "platform": platform.platform(), "host": platform.node()}
    return SessionResults(tests=tuple(TestResult.from_dict(r) for r in records), environment=environment,
                          config=config)


def _write_reports(config: pytest.Config, opts: Sme2Options, records: list[dict[str, Any]]) -> None:
    if not (opts.json or opts.markdown or os.environ.get("GITHUB_STEP_SUMMARY")):
        return
    from .report.results import append_step_summary, write_results

    results = results_from_records(records, opts)
    if opts.json:
        write_results(opts.json, results)
    if opts.markdown:
        from .atomic import write_atomic
        from .report.markdown import render_markdown

        write_atomic(opts.markdown, render_markdown(results), what="markdown report")
    if records:
        append_step_summary(results)
