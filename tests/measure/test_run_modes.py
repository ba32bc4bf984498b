"""The seeds' run modes: timing-only latency, traced breakdown, XNNPACK-log kernel evidence that gates SME2.

Every number and kernel name comes from the real recordings in ``tests/data``: the stand-in runner replays
a recorded trace (traced build), only that trace's ``Iteration`` lines (timing-only build), or a recorded
XNNPACK debug log (logging build; to stderr on a host, into the emulated phone's logcat on Android). To tell
the sources apart in a report, the timing builds replay another real recording of the same model than the
traced builds (MobileNetV3 at 2 threads instead of 1), so the gate's samples must be that recording's.

The recordings are x86 (no SME2 kernel at all): on the emulated SME2 phone they are exactly "SME2 on, but
no SME2 kernel was selected". The one case that needs a log naming SME2 kernels (the check passing) replays
``tests/standin/sme2_kernels.xnnlog``: hand-written lines in XNNPACK's format naming real XNNPACK SME2
kernels, and it says so in its header; no arm64 recording exists here.
"""

from __future__ import annotations

import html
import json
import re
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from emulated_device.device import EmulatedPhone
from emulated_device.fixtures import MakePhone
from recorded import DATA, phone_evidence
from standin import make_standin

from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.evidence.kernels import KernelLog, operator_kernels, parse_xnnpack_log, read_xnnpack_log
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.gate.checks import (
    REQUIRED_BY_MARKER,
    SME2_KERNELS,
    SME2_OFF_KERNELS,
    sme2_kernel_checks,
)
from pytest_sme2.gate.decide import decide, gate
from pytest_sme2.gate.verdict import GateConfig, Samples, Status
from pytest_sme2.measure.profile import Profile, measure, record_kernel_log
from pytest_sme2.measure.recipe import Measurement
from pytest_sme2.runners.android import AndroidRunner
from pytest_sme2.runners.base import MODE_LOG, MODE_TIMING, SME2_OFF, SME2_ON, RunRequest
from pytest_sme2.runners.host import HostRunner

pytestmark = pytest.mark.slow

MN = "mobilenet_v3_small_like_fp32_xnnpack"
MN_PTE = DATA / f"{MN}.pte"
MN_INPUT = DATA / "mobilenet_v3_small_like_input_fp32.bin"
ON_TRACE, OFF_TRACE = DATA / f"{MN}_simd-on_t1.etdump", DATA / f"{MN}_simd-off_t1.etdump"
#: another real recording of the same model (2 threads): what the SME2-on timing build replays
ON_TIMING_TRACE = DATA / f"{MN}_simd-on_t2.etdump"
ON_LOG, OFF_LOG = DATA / f"{MN}_simd-on_t1.xnnlog", DATA / f"{MN}_simd-off_t1.xnnlog"
#: Not a recording (the recordings are x86): XNNPACK log lines naming real XNNPACK SME2 kernels; see its header.
SME2_LOG = Path(__file__).parents[1] / "standin" / "sme2_kernels.xnnlog"
SME2_LOG_TEXT = SME2_LOG.read_text()
# Executions per block for the replaying stand-ins: the recordings hold 30, and a timing build must log one
# Iteration line per execution it was asked for (so no time budget may shrink the runs).
RUNS = ("--sme2-runs=27", "--sme2-warmup=3", "--sme2-time-budget=0")

# Test-file source: a recorded .pte standing in for the exported_model fixture (used in pytester files).
RECORDED = textwrap.dedent(f"""\
    from pathlib import Path
    import pytest

    class Recorded:
        name, dtype, backend = "mobilenet_v3_small_like", "fp32", "xnnpack"
        pte_path, input_files = Path({str(MN_PTE)!r}), (Path({str(MN_INPUT)!r}),)

        def to_dict(self):
            return {{"name": self.name, "dtype": self.dtype, "backend": self.backend}}
    """)
ON_OFF_TEST = RECORDED + textwrap.dedent("""\

    def test_on_off(sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile_on_off(Recorded()))
    """)
PLAIN_TESTS = RECORDED + textwrap.dedent("""\

    @pytest.mark.sme2_threshold(require_sme2_kernels=True)
    def test_needs_sme2(sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(Recorded()))

    def test_plain(sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(Recorded()))
    """)


def _e2e(trace: Path) -> list[float]:
    return [float(x) for x in read_etdump(trace).e2e_ms_per_run()]


def _running_labels(log: Path) -> Counter[str]:
    return Counter(re.findall(r"running operator \d+:\d+ \((.+)\) \(xnn_run_operator", log.read_text()))


def _builds(tmp_path: Path, *, on_log: Path = ON_LOG) -> dict[str, Path]:
    """Six stand-in builds: traced, timing-only and logging, for SME2 on and off."""
    return {
        "runner": make_standin(tmp_path / "on", trace=ON_TRACE),
        "runner-off": make_standin(tmp_path / "off", trace=OFF_TRACE),
        "runner-timing": make_standin(tmp_path / "on-timing", trace=ON_TIMING_TRACE, tracer=False),
        "runner-off-timing": make_standin(tmp_path / "off-timing", trace=OFF_TRACE, tracer=False),
        "runner-log": make_standin(tmp_path / "on-log", xnnlog=on_log, tracer=False),
        "runner-off-log": make_standin(tmp_path / "off-log", xnnlog=OFF_LOG, tracer=False),
    }


def _args(builds: dict[str, Path], *names: str) -> list[str]:
    return [f"--sme2-{name}={builds[name]}" for name in names]


ALL_BUILDS = ("runner", "runner-off", "runner-timing", "runner-off-timing", "runner-log", "runner-off-log")


class _Exported:
    name, dtype, backend = "mobilenet_v3_small_like", "fp32", "xnnpack"
    pte_path, input_files = MN_PTE, (MN_INPUT,)

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "dtype": self.dtype, "backend": self.backend}


# ------------------------------------------------------------------------------------ kernel logs


def test_operator_labels_join_the_trace_operator_names_of_the_same_recording() -> None:
    joined_logs = 0
    for log_path in sorted(DATA.glob("*_fp32_xnnpack_*.xnnlog")):
        labels = _running_labels(log_path)
        trace = read_etdump(log_path.with_suffix(".etdump")).operators()
        runs = trace["run_index"].nunique()
        per_run = Counter(re.sub(r" #\d+$", "", name) for name in trace["event_name"])
        log = read_xnnpack_log(log_path)
        rows = operator_kernels(log, per_run)
        assert [r.label for r in rows] == list(labels), log_path.name  # every label, in log order
        for row in rows:
            # The trace names the operator by its label, or without a Default/Transpose/Reduce suffix.
            assert row.etdump in (row.label, row.label.rsplit(" ", 1)[0]), (log_path.name, row.label)
            # One execution logged; the trace's calls per run of the same operator agree.
            assert row.calls_per_execution == labels[row.label] == per_run[row.etdump] / runs, row.label
        joined_logs += 1
    assert joined_logs == 6
    gemm = next(r for r in operator_kernels(read_xnnpack_log(ON_LOG)) if r.label.startswith("Fully Connected"))
    assert gemm.kind == "gemm" and gemm.kernel is not None and gemm.kernel.endswith("avx512f_broadcast")
    assert not gemm.sme2


def test_kernel_log_round_trip_keeps_operators_and_build() -> None:
    log = parse_xnnpack_log(ON_LOG.read_text(), source="on.xnnlog", build="b (sha256 0123)")
    again = KernelLog.from_dict(json.loads(json.dumps(log.to_dict())))
    assert again.kernels == log.kernels and again.operator_calls == log.operator_calls
    assert again.operator_calls == tuple(_running_labels(ON_LOG).items())
    assert (again.build, again.executions, again.source) == ("b (sha256 0123)", 1, "on.xnnlog")


# ----------------------------------------------------------------------------------- the gate


def _samples(trace: Path, blocks: int = 5) -> Samples:
    e2e = _e2e(trace)[1:]
    return Samples(tuple(e2e * blocks), (len(e2e),) * blocks)


def test_an_sme2_on_log_without_sme2_kernels_is_a_regression_on_an_sme2_device() -> None:
    (check,) = sme2_kernel_checks(phone_evidence(log=read_xnnpack_log(ON_LOG)))
    assert check.name == SME2_KERNELS and check.status is Status.REGRESSION and not check.advisory
    assert "no SME2 kernel" in check.message and "EmuPhone SME2, which reports SME2" in check.message
    assert "target avx512f (23), scalar (8)" in check.message  # what its kernels target instead
    assert "XNNPACK_ENABLE_ARM_SME2" in check.message  # the fix


def test_sme2_kernel_evidence_in_each_situation() -> None:
    sme2 = parse_xnnpack_log(SME2_LOG_TEXT, source="arm.xnnlog")
    (ok,) = sme2_kernel_checks(phone_evidence(log=sme2))
    assert ok.status is Status.PASS and "xnn_pf32_gemm_minmax_ukernel_1x32__neonsme2" in ok.message
    (na,) = sme2_kernel_checks(phone_evidence(log=read_xnnpack_log(ON_LOG), device_sme2=False, device="EmuPhone NoSME"))
    assert na.status is Status.INCONCLUSIVE and na.advisory and "reports no SME2" in na.message
    (missing,) = sme2_kernel_checks(phone_evidence(log=None))
    assert missing.status is Status.INCONCLUSIVE and missing.advisory and "--sme2-runner-log" in missing.message
    # The marker enforces it: a requirement nothing can check is not passed silently.
    (enforced,) = sme2_kernel_checks(phone_evidence(required_by=REQUIRED_BY_MARKER, enforced=True, log=None))
    assert enforced.status is Status.INCONCLUSIVE and not enforced.advisory
    checks = sme2_kernel_checks(phone_evidence(log=sme2, off_log=sme2))
    off = next(c for c in checks if c.name == SME2_OFF_KERNELS)
    assert off.status is Status.INVALID and "XNNPACK_ENABLE_ARM_SME2=OFF" in off.message
    assert sme2_kernel_checks(None) == []


def test_evidence_fails_the_verdict_but_never_triggers_a_second_measurement() -> None:
    calls: list[int] = []

    def again() -> tuple[Samples | None, Samples, Samples | None]:
        calls.append(1)
        return _samples(ON_TRACE), _samples(ON_TRACE), None

    same = _samples(ON_TRACE)
    x86 = phone_evidence(log=read_xnnpack_log(ON_LOG))
    verdict = decide((same, same, None), again, GateConfig(margin=0.1), evidence=x86)
    assert verdict.status is Status.REGRESSION and calls == []  # the timing passed; the log does not change
    assert "[regression] sme2_kernels: no SME2 kernel" in verdict.summary()
    # A measured regression is still confirmed by measuring again.
    verdict = decide((same, _samples(OFF_TRACE), None), again, GateConfig(margin=0.1),
                     evidence=phone_evidence(log=parse_xnnpack_log(SME2_LOG_TEXT, source="arm.xnnlog")))
    assert calls == [1] and verdict.attempts == 2


def test_a_required_kernel_check_without_a_log_is_inconclusive_and_fails_strict() -> None:
    same = _samples(ON_TRACE)
    unverifiable = phone_evidence(required_by=REQUIRED_BY_MARKER, enforced=True, log=None)
    verdict = gate(same, same, GateConfig(margin=0.1), evidence=unverifiable)
    assert verdict.status is Status.INCONCLUSIVE and not verdict.failed
    assert "[inconclusive] sme2_kernels: not checked" in verdict.summary()
    strict = gate(same, same, GateConfig(margin=0.1, strict=True), evidence=unverifiable)
    assert strict.failed
    # Not required by the test itself (an on/off pair without a log build): advisory, the verdict passes.
    assert gate(same, same, GateConfig(margin=0.1), evidence=phone_evidence(log=None)).status is Status.PASS


# --------------------------------------------------------------------------------- host runner


def test_host_timing_build_gives_the_recorded_iteration_times_untraced(tmp_path: Path) -> None:
    traced = make_standin(tmp_path / "traced", trace=ON_TRACE)
    timing = make_standin(tmp_path / "timing", trace=ON_TIMING_TRACE, tracer=False)
    runner = HostRunner(traced, timing={None: timing})
    req = RunRequest(pte=MN_PTE, runs=27, warmup=3, out_dir=tmp_path / "out", inputs=(MN_INPUT,), mode=MODE_TIMING)
    result = runner.run(req)
    assert "--etdump_path" not in result.metadata["command"]
    assert result.metadata["mode"] == MODE_TIMING and not result.per_operator
    assert list(result.e2e_ms) == pytest.approx(_e2e(ON_TIMING_TRACE), abs=1e-6)  # printed with 6 decimals
    assert str(timing) in result.build
    # A missing build names its option; a "timing" build with the tracer is refused (it would time the tracer).
    with pytest.raises(ConfigError, match="--sme2-runner-off-timing"):
        runner.run(RunRequest(**{**req.__dict__, "variant": SME2_OFF}))
    wrong = HostRunner(traced, timing={None: make_standin(tmp_path / "wrong", trace=ON_TRACE)})
    with pytest.raises(RunnerError, match="built with the event tracer"):
        wrong.run(req)


def test_host_log_build_writes_the_xnnpack_log_to_stderr(tmp_path: Path) -> None:
    log_build = make_standin(tmp_path / "log", xnnlog=ON_LOG, tracer=False)
    runner = HostRunner(make_standin(tmp_path / "traced", trace=ON_TRACE), log={None: log_build})
    m = Measurement.of(_Exported(), runs=27, warmup=3, out_dir=tmp_path / "out")
    log = record_kernel_log(runner, m)
    recorded = read_xnnpack_log(ON_LOG)
    assert log.kernels == recorded.kernels and log.operator_calls == recorded.operator_calls
    assert str(log_build) in log.build
    text = Path(log.source).read_text()
    assert "replaying recorded XNNPACK log" in text  # the stand-in says what it does


def test_traced_only_latency_says_it_includes_the_tracer(tmp_path: Path) -> None:
    runner = HostRunner(make_standin(tmp_path / "traced", trace=ON_TRACE))
    p = measure(runner, Measurement.of(_Exported(), runs=27, warmup=3, out_dir=tmp_path / "out", blocks=1))
    assert p.latency_source.startswith("trace build (latency includes the tracer's cost)")
    assert "µs per recorded operator event" in p.latency_source and "--sme2-runner-timing" in p.latency_source
    assert p.breakdown_source.startswith("trace build")
    assert p.kernel_source.startswith("none: no XNNPACK-logging build") and "--sme2-runner-log" in p.kernel_source
    # Why there is no log is a field of its own (no behaviour reads a source string's prefix),
    # kept by the results file; a file written before the field had only the "none: <why>" source text.
    assert p.no_kernel_log.startswith("no XNNPACK-logging build") and p.kernel_source.endswith(p.no_kernel_log)
    assert Profile.from_dict(p.to_dict()).no_kernel_log == p.no_kernel_log
    old = {k: v for k, v in p.to_dict().items() if k != "no_kernel_log"}
    assert Profile.from_dict(old).no_kernel_log == p.no_kernel_log
    assert Profile.from_dict({**old, "kernel_source": "log build: x, log y"}).no_kernel_log == ""
    # The reports say it per arm; the terminal leaves it out (a flag, not a filter on the line's text).
    from pytest_sme2.report.tables import kernel_evidence_lines
    from pytest_sme2.results import TestResult

    t = TestResult(test_id="t::x", profile=p)
    assert any("no XNNPACK log (no XNNPACK-logging build" in line for line in kernel_evidence_lines(t))
    assert not any("no XNNPACK log" in line for line in kernel_evidence_lines(t, missing=False))


# ------------------------------------------------------------------------------ Android runner


@pytest.mark.emulated_device
def test_android_log_run_reads_logcat_cleared_before_the_run(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone("sme2_phone")
    stale = "01-01 00:00:00.000  1  1 I XNNPACK : Using gemm microkernel 'xnn_stale_from_an_earlier_run'.\n"
    phone.rootfs.logcat_buffer.write_text(stale)
    runner = AndroidRunner(make_standin(tmp_path / "traced", trace=ON_TRACE), serial=phone.serial, timeout_s=60,
                           runner_log=make_standin(tmp_path / "log", xnnlog=ON_LOG, tracer=False))
    m = Measurement.of(_Exported(), runs=27, warmup=3, out_dir=tmp_path / "out", variant=SME2_ON)
    log = record_kernel_log(runner, m)
    recorded = read_xnnpack_log(ON_LOG)
    assert log.kernels == recorded.kernels and log.operator_calls == recorded.operator_calls
    assert "xnn_stale_from_an_earlier_run" not in {k.name for k in log.kernels}
    # XNNPACK's lines went to logcat (tag XNNPACK), not to the runner's stderr.
    xnnpack_lines = re.findall(r"^\w+ \(XNNPACK\): (.*)$", ON_LOG.read_text(), flags=re.M)
    assert [line.split(" XNNPACK : ", 1)[1] for line in phone.rootfs.logcat_lines()] == xnnpack_lines
    text = Path(log.source).read_text()
    assert "logcat -s XNNPACK:*" in text and "replaying recorded XNNPACK log" in text
    commands = phone.history.commands
    clear = next(i for i, c in enumerate(commands) if c.startswith("logcat -c"))
    run = next(i for i, c in enumerate(commands) if "--model_path" in c)
    dump = next(i for i, c in enumerate(commands) if c.startswith("logcat -d"))
    assert clear < run < dump
    assert "-m 200000" in commands[dump] and "--etdump_path" not in commands[run]
    with pytest.raises(ConfigError, match="--sme2-runner-off-log"):
        record_kernel_log(runner, Measurement.of(_Exported(), runs=1, out_dir=tmp_path / "out", variant=SME2_OFF))


# ----------------------------------------------------------------------------------- the plugin


def _results(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    return {t["test_id"].split("::")[-1]: t for t in json.loads((pytester.path / "r.json").read_text())["tests"]}


def _phone_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, phone: EmulatedPhone,
               *args: str) -> pytest.RunResult:
    monkeypatch.setenv("ANDROID_SERIAL", phone.serial)
    return pytester.runpytest("--sme2-device=android", *RUNS, "--sme2-busy-limit=100", "--sme2-update-baseline",
                              "--sme2-json=r.json", "-p", "no:cacheprovider", "-rs", *args)


@pytest.mark.emulated_device
def test_on_off_with_timing_trace_and_log_builds_on_an_sme2_phone(
    make_emulated_phone: MakePhone, tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The x86 logs name no SME2 kernel: on a phone that reports SME2 that fails, and every report says where
    its latency, breakdown and kernels came from."""
    phone = make_emulated_phone("sme2_phone")
    builds = _builds(tmp_path)
    pytester.makepyfile(test_onoff=ON_OFF_TEST)
    result = _phone_run(pytester, monkeypatch, phone, *_args(builds, *ALL_BUILDS), "--sme2-blocks=4",
                        "--sme2-markdown=r.md", "--html=r.html")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "baseline not written: no SME2 kernel" in out and "which reports SME2" in out
    t = _results(pytester)["test_on_off"]
    on, off = t["profile"], t["profile_off"]
    # Latency: the timing builds' runs (the on arm's 2-thread recording), one per traced run, 4 blocks.
    assert on["latency_ms"] == pytest.approx(_e2e(ON_TIMING_TRACE)[3:] * 4, abs=1e-6)
    assert off["latency_ms"] == pytest.approx(_e2e(OFF_TRACE)[3:] * 4, abs=1e-6)
    modes = [r["metadata"]["mode"] for r in on["runs"]]
    assert modes == ["timing", "trace"] * 4
    # Breakdown: the traced builds' recordings (1 thread).
    assert on["analysis"]["e2e_ms"]["per_run"] == pytest.approx(_e2e(ON_TRACE)[3:] * 4, abs=1e-6)
    assert on["analysis"]["operator_details"]
    # Kernels: each arm's log build, run once each for the session.
    assert [k["name"] for k in on["analysis"]["kernel_log"]["kernels"]] == \
        [k.name for k in read_xnnpack_log(ON_LOG).kernels]
    assert sum(c.startswith("logcat -c") for c in phone.history.commands) == 2
    sources = t["sources"]
    assert sources["sme2_on"]["latency"].startswith(f"timing build: {builds['runner-timing']}")
    assert sources["sme2_on"]["breakdown"].startswith(f"trace build: {builds['runner']}")
    assert sources["sme2_on"]["kernels"].startswith(f"log build: {builds['runner-log']}")
    assert sources["sme2_off"]["latency"].startswith(f"timing build: {builds['runner-off-timing']}")
    assert sources["sme2_off"]["kernels"].startswith(f"log build: {builds['runner-off-log']}")
    check = next(c for c in t["verdict"]["checks"] if c["name"] == "sme2_kernels")
    assert check["status"] == "regression"
    # JSON: kernel evidence per arm, operators by kernel kind, the on/off diff.
    ev = t["kernel_evidence"]
    assert [a["arm"] for a in ev["arms"]] == ["sme2_off", "sme2_on"]
    assert all(a["sme2_kernels"] == [] for a in ev["arms"])
    fc = next(o for o in ev["arms"][1]["operators"] if o["label"].startswith("Fully Connected"))
    assert fc["trace_operator"] == fc["label"] and fc["kind"] == "gemm"
    # The diff, per kind, from the recorded logs' own "Using gemm microkernel" lines.
    using = {path: re.findall(r"Using gemm microkernel '([^']+)'", path.read_text()) for path in (OFF_LOG, ON_LOG)}
    gemm_row = next(row for row in ev["diff"] if row["kind"] == "gemm")
    assert sorted(gemm_row["only_on"]) == sorted(set(using[ON_LOG]) - set(using[OFF_LOG]))
    assert sorted(gemm_row["only_off"]) == sorted(set(using[OFF_LOG]) - set(using[ON_LOG]))
    assert gemm_row["only_on"] and gemm_row["only_off"]
    # Markdown and HTML: the source labels and the kernel tables.
    md = (pytester.path / "r.md").read_text()
    assert "Where the numbers come from" in md and "timing build" in md and "log build" in md
    assert "| Blocks | 4: 27 runs each | 4: 27 runs each |" in md  # both arms: the blocks, as measured
    assert "Kernel Insights" in md and "SME2 on with no SME2 kernel" in md
    assert "Operators by kernel kind" in md and "Side by side" in md
    assert "xnn_f32_gemm_minmax_ukernel_7x32__avx512f_broadcast" in md
    page = html.unescape((pytester.path / "r.html").read_text())
    assert "Kernels (XNNPACK log, trace, emulator)" in page and "Where the numbers come from" in page
    assert "timing build" in page and "Operators by kernel kind" in page and "4: 27 runs each" in page
    assert "xnn_f32_gemm_minmax_ukernel_7x32__avx512f_broadcast" in page


@pytest.mark.emulated_device
def test_on_off_fails_on_the_x86_trace_even_when_the_sme2_on_log_names_sme2_kernels(
    make_emulated_phone: MakePhone, tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Trace evidence is attached to every traced run (intended): the replayed x86 trace names no SME operator,
    so on a phone that reports SME2 the SME2-on arm fails — the log's SME2 kernels cannot outvote the trace (a
    source showing SME2 absent decides), and the message carries both findings."""
    phone = make_emulated_phone("sme2_phone")
    builds = _builds(tmp_path, on_log=SME2_LOG)  # the phone sees tests/, not tmp_path
    pytester.makepyfile(test_onoff=ON_OFF_TEST)
    result = _phone_run(pytester, monkeypatch, phone, *_args(builds, *ALL_BUILDS), "--sme2-blocks=4")
    result.assert_outcomes(failed=1)
    t = _results(pytester)["test_on_off"]
    check = next(c for c in t["verdict"]["checks"] if c["name"] == "sme2_kernels")
    assert check["status"] == "regression" and check["message"].startswith("no SME operator")
    assert "Convolution (NHWC, F32) IGEMM" in check["message"]
    assert "Also: the XNNPACK log" in check["message"] and "__neonsme2" in check["message"]
    # The log's SME2 kernels are still what the kernel evidence shows for that arm.
    assert t["kernel_evidence"]["arms"][1]["sme2_kernels"] == re.findall(r"'(\w+__neonsme2)'", SME2_LOG_TEXT)


@pytest.mark.emulated_device
def test_on_off_without_log_builds_is_judged_by_the_trace(
    make_emulated_phone: MakePhone, tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without log builds the trace evidence (attached to every traced run, intended) judges the SME2-on arm:
    the replayed x86 trace names no SME operator, which on a phone that reports SME2 fails the on/off test. Before
    trace evidence existed this passed with an advisory "not checked"."""
    phone = make_emulated_phone("sme2_phone")
    builds = _builds(tmp_path)
    pytester.makepyfile(test_onoff=ON_OFF_TEST)
    result = _phone_run(pytester, monkeypatch, phone, *_args(builds, "runner", "runner-off"), "--sme2-blocks=4")
    result.assert_outcomes(failed=1)
    t = _results(pytester)["test_on_off"]
    check = next(c for c in t["verdict"]["checks"] if c["name"] == "sme2_kernels")
    assert check["status"] == "regression" and not check["advisory"]
    assert check["message"].startswith("no SME operator") and "XNNPACK log" not in check["message"]
    assert t["sources"]["sme2_on"]["latency"].startswith("trace build (latency includes the tracer's cost)")
    assert not any(c.startswith("logcat") for c in phone.history.commands)


@pytest.mark.emulated_device
def test_require_sme2_kernels_marker_on_plain_tests(
    phone_of_each_profile: EmulatedPhone, tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
) -> None:
    phone, profile = phone_of_each_profile, phone_of_each_profile.profile.name
    builds = _builds(tmp_path)
    pytester.makepyfile(test_plain=PLAIN_TESTS)
    result = _phone_run(pytester, monkeypatch, phone, *_args(builds, "runner", "runner-log"), "--sme2-blocks=1")
    out = result.stdout.str()
    if profile == "nosme_phone":
        result.assert_outcomes(passed=1, skipped=1)
        assert "require_sme2_kernels=True): the device" in out and "reports no SME2" in out
    else:
        result.assert_outcomes(passed=1, failed=1)
        assert "test_needs_sme2" in out and "no SME2 kernel: sme2_threshold(require_sme2_kernels=True)" in out
        # One log run for the model, shared by both tests.
        assert sum(c.startswith("logcat -c") for c in phone.history.commands) == 1
        plain = _results(pytester)["test_plain"]
        assert plain["profile"]["kernel_source"].startswith("log build:")
        assert not any(c["name"] == "sme2_kernels" for c in plain["verdict"]["checks"])


@pytest.mark.emulated_device
def test_on_off_is_skipped_on_a_phone_without_sme2_even_with_log_builds(
    make_emulated_phone: MakePhone, tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
) -> None:
    phone = make_emulated_phone("nosme_phone")
    builds = _builds(tmp_path)
    pytester.makepyfile(test_onoff=ON_OFF_TEST)
    result = _phone_run(pytester, monkeypatch, phone, *_args(builds, *ALL_BUILDS))
    result.assert_outcomes(skipped=1)
    assert "has no SME2" in result.stdout.str()
    assert not any(c.startswith("logcat") for c in phone.history.commands)


def test_host_on_off_with_timing_trace_and_log_builds(tmp_path: Path, pytester: pytest.Pytester) -> None:
    """The same three builds on the host: logs on stderr; this x86 host reports no SME2, so the kernel check
    is not applicable there and the comparison is judged on its timings."""
    builds = _builds(tmp_path)
    pytester.makepyfile(test_onoff=ON_OFF_TEST, test_plain=PLAIN_TESTS)
    result = pytester.runpytest("--sme2-device=host", *_args(builds, *ALL_BUILDS), *RUNS, "--sme2-blocks=4",
                                "--sme2-busy-limit=100", "--sme2-update-baseline", "--sme2-json=r.json",
                                "--sme2-markdown=r.md", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=2, skipped=1)  # test_needs_sme2 cannot be met on x86
    results = _results(pytester)
    t = results["test_on_off"]
    assert t["profile"]["latency_ms"] == pytest.approx(_e2e(ON_TIMING_TRACE)[3:] * 4, abs=1e-6)
    assert t["sources"]["sme2_on"]["latency"].startswith("timing build:")
    assert t["sources"]["sme2_on"]["kernels"].startswith(f"log build: {builds['runner-log']}")
    check = next(c for c in t["verdict"]["checks"] if c["name"] == "sme2_kernels")
    assert check["status"] == "inconclusive" and check["advisory"] and "reports no SME2" in check["message"]
    assert [a["arm"] for a in t["kernel_evidence"]["arms"]] == ["sme2_off", "sme2_on"]
    # The default build's log is the SME2-on one; it was run once for the on/off test and reused.
    assert results["test_plain"]["profile"]["analysis"]["kernel_log"]["source"] == \
        t["profile"]["analysis"]["kernel_log"]["source"]
    md = (pytester.path / "r.md").read_text()
    assert "Where the numbers come from" in md and "Operators by kernel kind" in md
    out = result.stdout.str()
    assert "latency: timing build · breakdown: trace build · kernels: log build" in out


def test_a_changed_timing_build_is_compared_with_the_baseline_s_own_timing_build(
    tmp_path: Path, pytester: pytest.Pytester,
) -> None:
    """Same traced build, a slower timing build: the baseline's timing build is re-measured beside the new one
    (kept in the artifact store), so the slowdown is seen, not timed twice with the new build."""
    traced = make_standin(tmp_path / "traced", trace=ON_TRACE)
    fast = make_standin(tmp_path / "fast", trace=ON_TRACE, tracer=False)
    slow = make_standin(tmp_path / "slow", trace=OFF_TRACE, tracer=False)  # the recorded simd-off runs
    pytester.makepyfile(test_plain=RECORDED + textwrap.dedent("""\

        def test_plain(sme2_runner, sme2_baseline):
            sme2_baseline.check(sme2_runner.profile(Recorded()))
        """))
    args = ("--sme2-device=host", f"--sme2-runner={traced}", *RUNS, "--sme2-blocks=4", "--sme2-busy-limit=100",
            "--sme2-json=r.json", "-p", "no:cacheprovider")
    pytester.runpytest(*args, f"--sme2-runner-timing={fast}", "--sme2-update-baseline").assert_outcomes(passed=1)
    result = pytester.runpytest(*args, f"--sme2-runner-timing={slow}")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "[regression] e2e: slower" in out
    reference = _results(pytester)["test_plain"]["reference"]
    assert reference["latency_source"].startswith(f"timing build: {pytester.path / '.sme2_artifacts'}")
    assert reference["latency_ms"] == pytest.approx(_e2e(ON_TRACE)[3:] * 4, abs=1e-6)


# ------------------------------------------------------------------------------ option validation


@pytest.mark.parametrize(("names", "extra", "message"), [
    (("runner", "runner-off", "runner-off-timing"), (),
     "--sme2-runner-off-timing needs --sme2-runner-timing too"),
    (("runner", "runner-off", "runner-timing"), (), "needs --sme2-runner-off-timing"),
    (("runner", "runner-off-log"), (), "--sme2-runner-off-log is the SME2-off arm's log build"),
    (("runner", "runner-timing"), ("--sme2-latency=traced",), "the timing builds would not be used"),
    (("runner",), ("--sme2-latency=untraced",), "pass --sme2-runner-timing"),
])
def test_run_mode_option_conflicts_are_usage_errors(tmp_path: Path, pytester: pytest.Pytester,
                                                     names: tuple[str, ...], extra: tuple[str, ...],
                                                     message: str) -> None:
    builds = _builds(tmp_path)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--sme2-device=host", *_args(builds, *names), *extra, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_run_mode_builds_on_the_local_device_and_missing_files(tmp_path: Path, pytester: pytest.Pytester) -> None:
    builds = _builds(tmp_path)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(*_args(builds, "runner-log"), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--sme2-runner-log are executor_runner builds for --sme2-device=host or android" in result.stderr.str()
    result = pytester.runpytest("--sme2-device=host", *_args(builds, "runner"),
                                f"--sme2-runner-timing={tmp_path / 'nope'}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--sme2-runner-timing" in result.stderr.str() and "nope" in result.stderr.str()


def test_ini_keys_give_the_run_mode_builds(tmp_path: Path, pytester: pytest.Pytester) -> None:
    builds = _builds(tmp_path)
    pytester.makeini("[pytest]\n" + "".join(f"sme2_{n.replace('-', '_')} = {builds[n]}\n"
                                            for n in ("runner", "runner-timing")))
    pytester.makepyfile(test_x=textwrap.dedent("""\
        def test_x(request):
            from pytest_sme2.plugin.records import OPTIONS_KEY
            o = request.config.stash[OPTIONS_KEY]
            print("TIMING", o.runner_timing, o.latency_mode)
        """))
    result = pytester.runpytest("--sme2-device=host", "-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*TIMING {builds['runner-timing']} untraced"])


def test_marker_require_sme2_kernels_must_be_a_bool(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=textwrap.dedent("""\
        import pytest

        @pytest.mark.sme2_threshold(require_sme2_kernels="yes")
        def test_x(sme2_baseline):
            sme2_baseline.gate_config()
        """))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*require_sme2_kernels='yes' must be True or False*"])


def test_requests_of_log_and_timing_modes_are_what_the_runners_read() -> None:
    m = Measurement(pte=MN_PTE, latency="untraced", timing_build=Path("/t"), build=Path("/b"))
    assert m.modes == (MODE_TIMING, "trace")
    assert m.request(MODE_TIMING).build == Path("/t") and m.request("trace").build == Path("/b")
    assert m.request(MODE_LOG).build is None  # the log build is always the arm's own
    assert Measurement.from_dict(json.loads(json.dumps(m.to_dict()))) == m


def test_emulated_device_defaults_apply_only_to_options_left_unset(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nsme2_warmup = 2\n")
    pytester.makepyfile(test_x=textwrap.dedent("""\
        def test_x(request):
            from pytest_sme2.plugin.records import OPTIONS_KEY
            o = request.config.stash[OPTIONS_KEY]
            print("DESIGN", o.device, o.blocks, o.runs, o.warmup)
        """))
    result = pytester.runpytest("--sme2-device=qemu", "-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    # One execution per arm (the evidence and the outputs need no more), warm-up from the ini ...
    result.stdout.fnmatch_lines(["*DESIGN qemu 1 1 2"])
    result = pytester.runpytest("--sme2-device=qemu", "--sme2-blocks=4", "-s", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*DESIGN qemu 4 1 2"])
    # ... and emulated time in full only when asked for.
    result = pytester.runpytest("--sme2-device=qemu", "--sme2-emulated-timing", "-s", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*DESIGN qemu 6 3 2"])
    result = pytester.runpytest("--sme2-emulated-timing", "-s", "-p", "no:cacheprovider")
    assert "--sme2-emulated-timing only applies to --sme2-device=qemu (device is 'local')" in result.stderr.str()
    result = pytester.runpytest("-s", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*DESIGN local 15 10 2"])


def test_an_emulated_device_without_emulated_timing_gates_evidence_and_writes_no_baseline(
        pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The qemu device's default measures one execution per arm and gates no emulated time, so it never
    makes a baseline of it (one execution is no reference); --sme2-update-baseline there says how to record one.
    A host runner marked emulated stands in for QEMU here (the plan and the judgement are the plugin's, not QEMU's)."""
    on, off = make_standin(tmp_path / "on", trace=ON_TRACE), make_standin(tmp_path / "off", trace=OFF_TRACE)
    pytester.makeconftest("from pytest_sme2.runners.host import HostRunner\nHostRunner.emulated = True\n")
    pytester.makepyfile(test_x=ON_OFF_TEST)
    args = (f"--sme2-runner={on}", f"--sme2-runner-off={off}", "--sme2-device=host", "--sme2-blocks=1",
            "--sme2-runs=3", "--sme2-warmup=0", "-p", "no:cacheprovider", "--sme2-json=r.json")
    result = pytester.runpytest_subprocess(*args, "--sme2-update-baseline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*baseline not written: a baseline of emulated time is measured in full; run with "
                                 "--sme2-update-baseline --sme2-emulated-timing*"])
    assert not (pytester.path / ".sme2_baselines").exists()
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=1)
    test = json.loads((pytester.path / "r.json").read_text())["tests"][0]
    assert test["status"] == "pass" and not test["recorded"] and test["verdict"]["comparison"] is None
    assert not (pytester.path / ".sme2_baselines").exists()
    assert "sme2: emulated time, not gated: measured for the kernel evidence and the outputs" in result.stdout.str()
