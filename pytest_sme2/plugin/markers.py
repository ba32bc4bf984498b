"""The ``sme2_model`` and ``sme2_threshold`` markers: registration, parsing and validation.

Bad marker use fails that test with a message naming the keyword and what is allowed
(``pytest.fail(..., pytrace=False)``), never an assertion or a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

MODEL_KWARGS = ("dtype", "backend", "inputs")
THRESHOLD_KWARGS = ("latency_pct", "p50_ms", "p90_ms", "categories", "min_speedup", "require_sme2_kernels",
                    "planned_pct", "peak_pct", "planned_mb", "peak_mb", "instructions_pct")
DTYPES = ("fp32", "fp16", "int8")
BACKENDS = ("xnnpack", "portable")


def register(config: pytest.Config) -> None:
    """Declare the markers (``pytest --markers`` lists them; ``--strict-markers`` accepts them)."""
    config.addinivalue_line(
        "markers",
        "sme2_model(name, *, dtype='fp32', backend='xnnpack', inputs=None): the model this performance "
        "test exports and runs (a registered name or a callable returning an nn.Module)",
    )
    config.addinivalue_line(
        "markers",
        "sme2_threshold(*, latency_pct=None, p50_ms=None, p90_ms=None, categories=None, min_speedup=None, "
        "require_sme2_kernels=False, planned_pct=0, peak_pct=5, planned_mb=None, peak_mb=None, "
        "instructions_pct=None): regression margin vs baseline (percent), absolute budgets (ms), per-category "
        "margins ({'GEMM': 10}), minimum SME2 speedup, "
        "whether the XNNPACK log must show SME2 kernels (needs --sme2-runner-log; skipped on a device without SME2), "
        "planned-memory growth allowed (percent, default 0: exact), peak-memory margin (percent), memory "
        "budgets (MB), and on --sme2-device=qemu the change of instructions executed under emulation allowed "
        "(percent; 0 = exact; given, it counts and gates them as --sme2-count-instructions does)",
    )


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
    #: the measured arm must run SME2 kernels (checked on its XNNPACK log; see ``gate.sme2_kernel_checks``)
    require_sme2_kernels: bool = False
    #: memory (see pytest_sme2.gate.memory): planned growth allowed in % (0 = exact; None = the default, exact), the
    #: peak's margin in % (None = the measured default), and absolute budgets in MB
    planned_pct: float | None = None
    peak_pct: float | None = None
    planned_mb: float | None = None
    peak_mb: float | None = None
    #: instructions executed under emulation: the change allowed in % (0 = exact); given, the test counts and gates
    #: them on an emulated device (None = as ``--sme2-count-instructions`` says, exact)
    instructions_pct: float | None = None

    def instructions(self, count_instructions: bool) -> float | None:
        """The tolerance (a share) instructions executed under emulation are gated with: the marker's, else exact
        with ``--sme2-count-instructions``; None = not counted, not gated."""
        if self.instructions_pct is not None:
            return self.instructions_pct / 100
        return 0.0 if count_instructions else None

    def margin_pct(self, default: float) -> float:
        """The E2E latency margin in percent: ``latency_pct``, else ``default`` (``--sme2-margin``)."""
        return self.latency_pct if self.latency_pct is not None else default

    def precision(self, options: Any) -> float:
        """How precisely to measure (a share, :class:`~pytest_sme2.measure.sequential.Precision`): ``--sme2-precision``,
        else half the test's latency margin (0 = every block). Half: on real blocks (benchmarks/gate_paired.py) the
        A/A false alarms and the detection at +10 % and +20 % were those of every block, at half the blocks."""
        pct = options.precision if options.precision is not None else self.margin_pct(options.margin) / 2
        return pct / 100


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
    from pytest_sme2.evidence.categories import CATEGORIES

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
    require = kw.get("require_sme2_kernels", False)
    if not isinstance(require, bool):
        _marker_error(item, f"sme2_threshold require_sme2_kernels={require!r} must be True or False")
    planned_pct = kw.get("planned_pct")
    if planned_pct is not None and planned_pct == 0 and not isinstance(planned_pct, bool):
        planned_pct = 0.0  # exact, the default said out loud: allowed, unlike a 0 % latency margin
    else:
        # a growth allowance may pass 100 % (a batch of 4 plans ~4x the arena of a batch of 1)
        planned_pct = _number(item, "planned_pct", planned_pct, upper=1000)
    instructions_pct = kw.get("instructions_pct")
    if instructions_pct is not None and instructions_pct == 0 and not isinstance(instructions_pct, bool):
        instructions_pct = 0.0  # exact: a count has no noise to allow for
    else:
        instructions_pct = _number(item, "instructions_pct", instructions_pct, upper=100)
    return Threshold(
        instructions_pct=instructions_pct, planned_pct=planned_pct,
        peak_pct=_number(item, "peak_pct", kw.get("peak_pct"), upper=100),
        planned_mb=_number(item, "planned_mb", kw.get("planned_mb")),
        peak_mb=_number(item, "peak_mb", kw.get("peak_mb")),
        latency_pct=_number(item, "latency_pct", kw.get("latency_pct"), upper=100),
        p50_ms=_number(item, "p50_ms", kw.get("p50_ms")),
        p90_ms=_number(item, "p90_ms", kw.get("p90_ms")),
        categories={k: v for k, v in margins.items() if v is not None},
        min_speedup=_number(item, "min_speedup", kw.get("min_speedup")),
        require_sme2_kernels=bool(require),
    )


#: The markers a test takes once, and how to say what it meant: with two, pytest's closest one would win and the other
#: be dropped without a word (two sme2_model markers judged one model against the other's baseline).
ONCE = {
    "sme2_model": "a test measures one model: keep one marker, or parametrize the test with one "
                  "pytest.param(..., marks=pytest.mark.sme2_model(...)) per model (each gets its own baseline)",
    "sme2_threshold": "give one marker with every keyword, e.g. sme2_threshold(latency_pct=10, p50_ms=5)",
}


def _shown(marker: Any) -> str:
    args = [repr(a) if isinstance(a, str) else getattr(a, "__name__", repr(a)) for a in marker.args]
    return f"{marker.name}({', '.join([*args, *(f'{k}={v!r}' for k, v in marker.kwargs.items())])})"


def duplicate_markers(item: pytest.Item) -> list[str]:
    """What is wrong with ``item``'s markers before it runs: each marker of :data:`ONCE` given more than once
    (on the test, its class, its module or its parameters), with the markers found and what is allowed."""
    problems = []
    for name, allowed in ONCE.items():
        found = list(item.iter_markers(name))
        if len(found) > 1:
            problems.append(f"has {len(found)} @pytest.mark.{name} markers ({'; '.join(map(_shown, found))}) and "
                            f"takes one: the closest would win and the others be dropped without a word; {allowed}")
    return problems


def refuse_at_collection(report: pytest.CollectReport) -> None:
    """Fail the collection of a module or class whose tests misuse markers (:func:`duplicate_markers`), as pytest
    fails one that uses an unknown marker under ``--strict-markers``: the session stops before anything is measured
    (exit 2), naming every test and marker."""
    if not report.passed:
        return
    problems = [f"{item.nodeid}: {problem}" for item in report.result if isinstance(item, pytest.Item)
                for problem in duplicate_markers(item)]
    if problems:
        report.outcome = "failed"
        report.longrepr = "\n".join(problems)
        report.result = []


def min_speedup_without_pair(item: pytest.Item, threshold: Threshold) -> None:
    """``min_speedup`` judges a pair's speedup; on one profile it has nothing to judge: fail, saying what applies."""
    if threshold.min_speedup is not None:
        _marker_error(item, f"sme2_threshold(min_speedup={threshold.min_speedup:g}) cannot apply: the test checks one "
                      "profile (sme2_runner.profile()), and a speedup is measured on a pair. Check what "
                      "sme2_runner.profile_on_off() (SME2 off vs on) or sme2_runner.compare_backends() (portable vs "
                      "xnnpack) returns, or drop min_speedup")


#: marker -> the fixture that reads it
_MARKER_FIXTURES = {"sme2_model": "exported_model", "sme2_threshold": "sme2_baseline"}


def check_marker_fixtures(item: pytest.Item) -> None:
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

