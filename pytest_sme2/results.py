"""The session results document (``--sme2-json``): what every report is rendered from.

One JSON file per pytest session: the tool version, when and where it ran, the options, and per
test the profile(s) with their analyses, the baseline it was judged against, the verdict and the
SME2 on/off comparison. It carries everything the markdown and HTML reports show, so
``pytest-sme2 report results.json`` re-renders them later, and ``--combine`` merges devices.

Files are read with :func:`load_results`, which names the file and the fix for every kind of bad
input (missing, not JSON, not ours, newer schema, a test entry that does not parse).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sme2.analysis.onoff import OnOffComparison
from pytest_sme2.analysis.run import Analysis
from pytest_sme2.errors import ConfigError, Sme2Error, check_schema_version
from pytest_sme2.evidence.instructions import LABEL
from pytest_sme2.evidence.kernels import KernelLog, operator_kernels, side_by_side
from pytest_sme2.gate.instructions import INSTRUCTION_CHECKS
from pytest_sme2.gate.stats import Interval, times_problem
from pytest_sme2.gate.verdict import Status, Verdict
from pytest_sme2.measure.profile import Profile
from pytest_sme2.store.baseline import Baseline, OtherBaseline, now_iso
from pytest_sme2.store.files import read_json, write_atomic
from pytest_sme2.units import fmt_interval, fmt_ms, fmt_signed_pct
from pytest_sme2.version import __version__

SCHEMA_VERSION = 1
KIND = "pytest-sme2-results"
#: Status of a test that was measured but not judged (no baseline yet, no speedup requirement).
MEASURED = "measured"
#: The test wrote (or refreshed) its baseline with ``--sme2-update-baseline``: measured, not judged.
BASELINE_WRITTEN = "baseline-written"
#: No baseline existed for this device: the measurement was recorded as its baseline, not gated.
RECORDED = "recorded"
#: The test failed before a verdict existed (no baseline, a runner or export error, a bad marker).
FAILED = "failed"
#: The test skipped itself (e.g. an SME2 on/off test on a runtime without two runner builds).
SKIPPED = "skipped"
#: Report order of statuses: what needs attention first.
STATUS_ORDER: tuple[str, ...] = (
    Status.REGRESSION.value, Status.BUG.value, FAILED, Status.INVALID.value, Status.INCONCLUSIVE.value,
    Status.DRIFT.value,
    Status.IMPROVEMENT.value, Status.PASS.value, RECORDED, BASELINE_WRITTEN, MEASURED, SKIPPED,
)
#: One icon per status, shared by the markdown report, the GitHub step summary and the terminal.
STATUS_ICONS: Mapping[str, str] = {
    Status.REGRESSION.value: "❌", FAILED: "💥", Status.INVALID.value: "⛔", Status.INCONCLUSIVE.value: "⚠️",
    Status.IMPROVEMENT.value: "🚀", Status.PASS.value: "✅", BASELINE_WRITTEN: "📝", MEASURED: "📏",
    SKIPPED: "⏭️", Status.DRIFT.value: "🌡️", RECORDED: "🆕", Status.BUG.value: "🐞",
}


@dataclass(frozen=True)
class Headline:
    """The few numbers a results-table row shows for one test."""

    status: str
    median_ms: float | None = None
    p90_ms: float | None = None
    #: change of the median vs the baseline, percent, with its CI (from the verdict's e2e check)
    delta_pct: float | None = None
    delta_ci_pct: tuple[float, float] | None = None
    margin: float | None = None
    #: speedup median(off)/median(on) with its CI, for on/off tests (SME2, or one backend against another)
    speedup: Interval | None = None
    #: what the speedup is of: "SME2 speedup", or "speedup portable → xnnpack" for other pairs
    speedup_label: str = "SME2 speedup"
    #: measured on an emulated device: every latency is emulated time, and a speedup is not a device's
    emulated: bool = False


#: What every latency measured on an emulated device is labelled with, wherever it is shown.
EMULATED = "emulated"


@dataclass(frozen=True)
class TestResult:
    """One test's measurement, judgement and comparison; any part may be absent.

    ``profile`` is the measurement (the SME2-on arm in an on/off test), ``profile_off`` the
    SME2-off arm. A verdict-only result (``pytest-sme2 compare``) has a verdict and no profile;
    ``model`` then says what was measured.
    """

    __test__ = False  # a pytest name lookalike, not a test class

    test_id: str
    outcome: str = ""
    profile: Profile | None = None
    profile_off: Profile | None = None
    comparison: OnOffComparison | None = None
    baseline: Baseline | None = None
    baseline_path: str = ""
    verdict: Verdict | None = None
    model: Mapping[str, Any] = field(default_factory=dict)
    duration_s: float | None = None
    note: str = ""
    baseline_written: bool = False
    #: no baseline existed for this device: recorded, not gated
    recorded: bool = False
    #: the baseline's artifact re-measured in this session (changed artifacts)
    reference: Profile | None = None
    #: one-line warnings about the test itself (e.g. its inputs differ from the baseline's)
    warnings: tuple[str, ...] = ()
    #: baselines of this test for other devices or configurations when none is this device's (never compared)
    other_baselines: tuple[OtherBaseline, ...] = ()
    #: the device of the lab's pool that ran it (``--sme2-pool``: a pool entry's name); "" outside a pool
    device: str = ""

    @property
    def analysis(self) -> Analysis | None:
        """The analysis of the measurement (SME2 on in an on/off test)."""
        return self.profile.analysis if self.profile else None

    @property
    def model_info(self) -> dict[str, Any]:
        """Model facts: the profile's (name, dtype, backend, pte_path, ...) overlaid with ``model``."""
        info: dict[str, Any] = {}
        for p in (self.profile_off, self.profile):
            if p is not None:
                info.update(p.model)
        info.update(self.model)
        return info

    @property
    def label(self) -> str:
        """``name dtype backend`` of the model, or the test id when nothing names it."""
        info = self.model_info
        parts = [str(info[k]) for k in ("name", "dtype", "backend") if info.get(k)]
        return " ".join(parts) or self.test_id

    @property
    def emulated(self) -> bool:
        """Measured on an emulated device (QEMU): its identity names the emulator."""
        return any(p is not None and bool(p.identity.get("emulator"))
                   for p in (self.profile, self.profile_off, self.reference))

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(str(p.variant) for p in (self.profile_off, self.profile) if p is not None and p.variant)

    @property
    def status(self) -> str:
        """What became of the test, from the most to the least specific evidence.

        A skipped test is ``skipped``. A test that failed is never shown as passing: a failed verdict
        keeps its status (regression, invalid, inconclusive), any other failure — a functional assert
        after ``check()``, a missing baseline, an error — is ``failed``. Then a fresh baseline
        (``baseline-written``, ``recorded``), the verdict's status, an enforced SME2 speedup check's
        status, else invalid or measured.
        """
        if self.outcome == SKIPPED:
            return SKIPPED
        verdict_status = self.verdict.status.value if self.verdict is not None else None
        if self.outcome == FAILED:
            failing = (Status.REGRESSION.value, Status.BUG.value, Status.INVALID.value, Status.INCONCLUSIVE.value)
            return verdict_status if verdict_status in failing and self.verdict and self.verdict.failed else FAILED
        if self.baseline_written:
            return BASELINE_WRITTEN
        if self.recorded and verdict_status in (None, Status.PASS.value, Status.IMPROVEMENT.value):
            return RECORDED
        if verdict_status is not None:
            return verdict_status
        if self.comparison is not None and not self.comparison.speedup_check.advisory:
            return self.comparison.speedup_check.status.value
        if any(p is not None and p.invalid_reason for p in (self.profile, self.profile_off)):
            return Status.INVALID.value
        return MEASURED

    @property
    def median_ms(self) -> float | None:
        """The one current median of this result: of the samples the verdict judged, else of the latency samples."""
        if self.verdict is not None and self.verdict.median_ms is not None:
            return self.verdict.median_ms
        if self.profile is not None and self.profile.samples_ms:
            return float(np.median(self.profile.samples_ms))
        e2e = self.verdict.e2e if self.verdict else None
        return e2e.candidate if e2e else None

    @property
    def samples_label(self) -> str:
        """Which samples :attr:`median_ms` is from ("first measurement", "two measurements pooled", ...)."""
        if self.verdict is not None and self.verdict.median_ms is not None:
            return self.verdict.samples
        return "first measurement"

    @property
    def headline(self) -> Headline:
        e2e = self.verdict.e2e if self.verdict else None
        samples = self.profile.samples_ms if self.profile else ()
        delta = ci = None
        if e2e is not None and e2e.interval is not None:
            delta = (e2e.interval.estimate - 1) * 100
            ci = ((e2e.interval.low - 1) * 100, (e2e.interval.high - 1) * 100)
        speedup = self.verdict.speedup if self.verdict else None
        return Headline(
            status=self.status, median_ms=self.median_ms,
            p90_ms=float(np.percentile(samples, 90)) if samples else None, delta_pct=delta,
            delta_ci_pct=ci, margin=e2e.margin if e2e else None,
            speedup=speedup.interval if speedup is not None else (self.comparison.speedup if self.comparison else None),
            speedup_label=speedup_label(self.comparison, emulated=self.emulated), emulated=self.emulated,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "test_id": self.test_id,
            "outcome": self.outcome,
            "status": self.status,
            "model": self.model_info,
            "model_override": dict(self.model),
            "variants": list(self.variants),
            "profile": self.profile.to_dict() if self.profile else None,
            "profile_off": self.profile_off.to_dict() if self.profile_off else None,
            "comparison": self.comparison.to_dict() if self.comparison else None,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "baseline_path": self.baseline_path,
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "duration_s": self.duration_s,
            "note": self.note,
            "baseline_written": self.baseline_written,
            "recorded": self.recorded,
            "warnings": list(self.warnings),
            "other_baselines": [o.to_dict() for o in self.other_baselines],
            "device": self.device,
            "reference": self.reference.to_dict() if self.reference else None,
            "median_ms": self.median_ms,
            "median_from": self.samples_label,
            "emulated": self.emulated,
            "sources": self.sources(),
            "kernel_evidence": self.kernel_evidence(),
            "memory": self.memory_view(),
            **({"instructions": self.instructions_view()} if self.instructions_view() else {}),
        }

    def memory_view(self) -> dict[str, Any] | None:
        """The current arm's memory (planned, size, load, peak), with the baseline's, the reference's (the baseline's
        artifact re-measured) and the SME2-off arm's: a derived view for readers of the JSON (each profile and the
        baseline keep their own)."""
        if self.profile is None or self.profile.memory is None:
            return None
        view: dict[str, Any] = self.profile.memory.to_dict()
        view["baseline"] = self.baseline.memory.to_dict() if self.baseline and self.baseline.memory else None
        view["reference"] = self.reference.memory.to_dict() if self.reference and self.reference.memory else None
        view["sme2_off"] = (self.profile_off.memory.to_dict() if self.profile_off and self.profile_off.memory
                            else None)
        return view

    def instructions_view(self) -> dict[str, Any] | None:
        """Instructions executed under emulation per arm (by variant) and the checks that judged them: a derived view
        for readers of the JSON (each profile keeps its own counts). None when no arm was counted."""
        arms = {name: p.instructions.to_dict() for name, p in self._arms() if p.instructions is not None}
        if not arms:
            return None
        checks = [c.to_dict() for c in (self.verdict.checks if self.verdict else ()) if c.name in INSTRUCTION_CHECKS]
        return {"label": LABEL, "arms": arms, "checks": checks}

    def _arms(self) -> list[tuple[str, Profile]]:
        """Each measured arm by its name: its runner variant, or for two backends of one runner (a backend
        comparison, neither arm a variant) its export backend."""
        pair = [p for p in (self.profile_off, self.profile) if p is not None]
        backends = {str(p.model.get("backend", "")) for p in pair}
        by_backend = len(pair) == 2 and len(backends) == 2 and all(p.variant is None for p in pair)
        return [(p.variant or (str(p.model.get("backend")) if by_backend else ("measured" if i else "sme2_off")), p)
                for i, p in enumerate((self.profile_off, self.profile)) if p is not None]

    def sources(self) -> dict[str, dict[str, str]]:
        """Per arm (by variant): where its latency, breakdown and kernel table came from."""
        return {name: {"latency": p.latency_source, "breakdown": p.breakdown_source, "kernels": p.kernel_source}
                for name, p in self._arms()}

    def kernel_evidence(self) -> dict[str, Any] | None:
        """Per arm with an XNNPACK log: its SME2 kernels and operators by kernel kind (joined to the trace);
        the SME2 off/on kernel diff when both arms have one. None when no arm has a log (a derived view for
        readers of the JSON; the logs themselves are in each profile's analysis)."""
        arms = []
        logs: list[KernelLog] = []
        for name, p in self._arms():
            if not p.analysis.kernel_log:
                continue
            log = KernelLog.from_dict(p.analysis.kernel_log)
            logs.append(log)
            ops = operator_kernels(log, [o.name for o in p.analysis.operator_details])
            arms.append({
                "arm": name, "log": log.source, "build": log.build, "kernels": len(log.kernels),
                "sme2_kernels": list(log.sme2_kernels),
                "operators": [{"label": k.label, "trace_operator": k.etdump, "kind": k.kind, "kernel": k.kernel,
                               "sme2": k.sme2, "calls_per_execution": k.calls_per_execution} for k in ops],
            })
        if not arms:
            return None
        diff = ([r.to_dict() for r in side_by_side(logs[0], logs[1])]
                if len(logs) == 2 and self.profile_off is not None else None)
        return {"arms": arms, "diff": diff}

    def samples_problem(self) -> str:
        """What is wrong with the latency samples of a profile this result holds ("" when nothing), as a baseline's
        samples are checked: a NaN or negative time, or block sizes that do not add up (:func:`times_problem`)."""
        for arm, p in (("profile", self.profile), ("profile_off", self.profile_off), ("reference", self.reference)):
            if p is None or not p.samples_ms:
                continue
            name, blocks = ((f"{arm}.latency_ms", f"{arm}.latency_blocks") if p.latency_ms
                            else (f"{arm}.analysis.e2e_ms.per_run", f"{arm}.analysis.block_sizes"))
            problem = times_problem(p.samples_ms, p.block_sizes, name, blocks, blocks_required=False)
            if problem:
                return problem
        return ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TestResult:
        def opt(key: str) -> Any:
            return d.get(key) or None

        profile, profile_off = opt("profile"), opt("profile_off")
        comparison, baseline, verdict = opt("comparison"), opt("baseline"), opt("verdict")
        duration = d.get("duration_s")
        return cls(
            test_id=str(d["test_id"]),
            outcome=str(d.get("outcome", "")),
            profile=Profile.from_dict(profile) if profile else None,
            profile_off=Profile.from_dict(profile_off) if profile_off else None,
            comparison=OnOffComparison.from_dict(comparison) if comparison else None,
            baseline=Baseline.from_dict(baseline, source=f"the baseline of {d['test_id']}") if baseline else None,
            baseline_path=str(d.get("baseline_path", "")),
            verdict=Verdict.from_dict(verdict) if verdict else None,
            # "model" is the merged view, for readers of the JSON; "model_override" is the field itself.
            model=dict(d.get("model_override", d.get("model") if not (profile or profile_off) else {}) or {}),
            duration_s=None if duration is None else float(duration),
            note=str(d.get("note", "")),
            baseline_written=bool(d.get("baseline_written", False)),
            recorded=bool(d.get("recorded", False)),
            warnings=tuple(str(w) for w in d.get("warnings", ())),
            other_baselines=tuple(OtherBaseline.from_dict(o) for o in d.get("other_baselines", ())),
            reference=Profile.from_dict(d["reference"]) if d.get("reference") else None,
            device=str(d.get("device", "")),
        )


@dataclass(frozen=True)
class SessionResults:
    """Every pytest-sme2 test of one session, with when, where and how it ran."""

    tests: tuple[TestResult, ...]
    created: str = field(default_factory=now_iso)
    tool_version: str = __version__
    #: versions and host facts (python, executorch_version, platform, host, config_file: the ini file)
    environment: Mapping[str, Any] = field(default_factory=dict)
    #: the options the session ran with (runs, warmup, margin, device, runner paths, ...)
    config: Mapping[str, Any] = field(default_factory=dict)
    #: why the session stopped before its end (Ctrl-C, a collection error), "" when it ran to its end: its tests are
    #: then only part of the suite, and every report says so
    interrupted: str = ""

    def counts(self) -> dict[str, int]:
        """How many tests ended in each status, in :data:`STATUS_ORDER` (zero counts included)."""
        out = dict.fromkeys(STATUS_ORDER, 0)
        for t in self.tests:
            out[t.status] = out.get(t.status, 0) + 1
        return out

    @property
    def device_label(self) -> str:
        """A short name of the device the session measured (first profile's), for combined reports."""
        for t in self.tests:
            for p in (t.profile, t.profile_off):
                if p is None:
                    continue
                dev, fp = p.device, p.identity
                name = (dev.get("product") or dev.get("model") or dev.get("name") or fp.get("model")
                        or fp.get("cpu_model"))
                if name:
                    return str(name)
        return str(self.environment.get("host", "")) or "unknown device"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": KIND,
            "created": self.created,
            "tool_version": self.tool_version,
            "environment": dict(self.environment),
            "config": dict(self.config),
            "counts": self.counts(),
            **({"interrupted": self.interrupted} if self.interrupted else {}),
            "tests": [t.to_dict() for t in self.tests],
        }

    @classmethod
    def from_dict(cls, d: Any, *, source: str = "<results>") -> SessionResults:
        """Parse a results document; every problem is a :class:`ConfigError` naming ``source``."""
        if not isinstance(d, Mapping) or "tests" not in d:
            raise ConfigError(
                f"{source} is not a pytest-sme2 results file (expected a JSON object with \"tests\"); "
                "pass the file written by --sme2-json"
            )
        check_schema_version(d, reads=SCHEMA_VERSION, what="results file", source=source,
                             fix="pass the file written by --sme2-json")
        kind = d.get("kind", KIND)
        if kind != KIND:
            raise ConfigError(f"{source} has kind {kind!r}, not {KIND!r}: it is not a pytest-sme2 results file; "
                              "pass the file written by --sme2-json")
        if not isinstance(d["tests"], list):
            raise ConfigError(f"{source}: \"tests\" must be a list, found {type(d['tests']).__name__}")
        tests = []
        for i, t in enumerate(d["tests"]):
            name = t.get("test_id", f"#{i}") if isinstance(t, Mapping) else f"#{i}"
            try:
                tests.append(TestResult.from_dict(t))
                problem = tests[-1].samples_problem()
            except Sme2Error as exc:
                raise ConfigError(f"{source}: test {name}: {exc}") from None
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise ConfigError(
                    f"{source}: test {name} does not match the results schema ({type(exc).__name__}: {exc}); "
                    "the file was edited or truncated — re-run the session with --sme2-json to rewrite it"
                ) from None
            if problem:
                raise ConfigError(f"{source}: test {name}: {problem}; no measurement has such times: the file was "
                                  "edited or damaged — re-run the session with --sme2-json to rewrite it")
        return cls(
            tests=tuple(tests), created=str(d.get("created", "")), tool_version=str(d.get("tool_version", "")),
            environment=dict(d.get("environment") or {}), config=dict(d.get("config") or {}),
            interrupted=str(d.get("interrupted") or ""),
        )


def load_results(path: str | Path) -> SessionResults:
    """Read a ``--sme2-json`` file; raises :class:`ConfigError` saying what is wrong and what to do."""
    data = read_json(path, what="results file", fix="pass the file written by --sme2-json (re-run the session with "
                     "it to write one)")
    return SessionResults.from_dict(data, source=str(path))


def write_results(path: str | Path, results: SessionResults) -> Path:
    """Write ``results`` as indented JSON, atomically (a reader never sees half a file)."""
    text = json.dumps(results.to_dict(), indent=1) + "\n"
    return write_atomic(path, text, what="results JSON")


# ------------------------------------------------------------------------------ GitHub summary



def _num(x: float | None, fmt: str = ".3f") -> str:
    return "—" if x is None or not math.isfinite(x) else format(x, fmt)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def delta_text(h: Headline) -> str:
    """``+2.3% (CI -0.4% .. +4.8%)`` or ``—`` without a baseline verdict."""
    if h.delta_pct is None:
        return "—"
    if not h.delta_ci_pct:
        return fmt_signed_pct(h.delta_pct)
    return fmt_interval(h.delta_pct, *h.delta_ci_pct, fmt_signed_pct, level="CI")


def speedup_label(comparison: OnOffComparison | None, *, emulated: bool = False) -> str:
    """``SME2 speedup`` for SME2 off/on pairs, ``speedup <off> → <on>`` for any other pair (e.g. two backends);
    on an emulated device ``emulated SME2 off/on ratio``: emulated time is not device time, so no speedup."""
    if comparison is None or (comparison.off_label, comparison.on_label) == ("SME2 off", "SME2 on"):
        return "emulated SME2 off/on ratio" if emulated else "SME2 speedup"
    pair = f"{comparison.off_label} → {comparison.on_label}"
    return f"emulated ratio {pair}" if emulated else f"speedup {pair}"


def speedup_text(iv: Interval | None, *, emulated: bool = False) -> str:
    """``2.59× (CI 2.56×–2.60×)`` or ``—``; emulated: ``0.95× (CI ...; emulated, not device time: not gated)``."""
    if iv is None:
        return "—"
    note = "; emulated, not device time: not gated" if emulated else ""
    return fmt_interval(iv.estimate, iv.low, iv.high, level="CI", note=note)


def median_text(h: Headline, digits: int | None = None) -> str:
    """``0.0845 ms``, or ``32.14 ms (emulated)`` on an emulated device; ``—`` without a median."""
    if h.median_ms is None:
        return "—"
    value = f"{h.median_ms:.{digits}f}" if digits is not None else fmt_ms(h.median_ms)
    return f"{value} ms" + (f" ({EMULATED})" if h.emulated else "")


def github_step_summary(results: SessionResults) -> str:
    """A compact markdown table for ``$GITHUB_STEP_SUMMARY``: one row per test, problems first."""
    if not results.tests:
        return "### pytest-sme2: no performance test ran\n"
    counts = {k: v for k, v in results.counts().items() if v}
    head = ", ".join(f"{v} {k}" for k, v in counts.items())
    lines = [f"### pytest-sme2: {len(results.tests)} test{'s' if len(results.tests) != 1 else ''} — {head}", ""]
    if results.interrupted:
        lines[1:1] = [f"**Interrupted:** {results.interrupted}; the other tests were not run.", ""]
    lines += ["| | test | model | median ms | p90 ms | vs baseline | speedup off → on | verdict |",
              "|---|---|---|---:|---:|---|---|---|"]
    order = {s: i for i, s in enumerate(STATUS_ORDER)}
    for t in sorted(results.tests, key=lambda t: (order.get(t.status, len(order)), t.test_id)):
        h = t.headline
        status = f"**{h.status}**" if h.status in (Status.REGRESSION.value, Status.INVALID.value) else h.status
        lines.append(
            f"| {STATUS_ICONS.get(h.status, '')} | `{_cell(t.test_id)}` | {_cell(t.label)} | {_num(h.median_ms)}"
            f"{' (emulated)' if h.emulated else ''} | {_num(h.p90_ms)} | {delta_text(h)} | "
            f"{speedup_text(h.speedup, emulated=h.emulated)} | {status} |"
        )
    return "\n".join(lines) + "\n"


def append_step_summary(results: SessionResults, *, environ: Mapping[str, str] | None = None) -> Path | None:
    """Append :func:`github_step_summary` to the file ``$GITHUB_STEP_SUMMARY`` names; None when unset.

    GitHub Actions shows that file on the job page; several steps append to it, so this appends
    rather than replaces.
    """
    return append_to_step_summary(github_step_summary(results) + "\n", environ=environ)


def append_to_step_summary(markdown: str, *, environ: Mapping[str, str] | None = None) -> Path | None:
    """Append ``markdown`` to the file ``$GITHUB_STEP_SUMMARY`` names (None when unset): the plugin's summary and
    ``pytest-sme2 history pr --step-summary`` alike. A path that cannot take it (a directory, a path under a regular
    file, no permission) is a :class:`ConfigError` naming the variable and the fix, never a traceback."""
    env = os.environ if environ is None else environ
    target = env.get("GITHUB_STEP_SUMMARY", "").strip()
    if not target:
        return None
    p = Path(target)
    try:
        with p.open("a", encoding="utf-8") as fh:
            fh.write(markdown)
    except OSError as exc:
        raise ConfigError(
            f"cannot append the pytest-sme2 summary to $GITHUB_STEP_SUMMARY ({p}): {exc.strerror or exc}; "
            "unset GITHUB_STEP_SUMMARY or point it at a writable file"
        ) from None
    return p
