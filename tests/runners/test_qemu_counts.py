"""Instructions executed under emulation, for real: toy_cnn fp32/XNNPACK under qemu-aarch64, SME2 on and off.

The counts must repeat exactly (another process, another run directory, another time) and equal the recording in
``tests/data/instruction_counts.json`` (``python benchmarks/instruction_counts.py --record ...``), which says on which
host, QEMU, runner and program they were taken: a CI host whose counts differ fails here, named.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.evidence.instructions import INSTRUCTION_KINDS, InstructionCounts
from pytest_sme2.runners.base import SME2_OFF, SME2_ON, RunRequest
from pytest_sme2.runners.qemu import QemuRunner, _host_cpu
from pytest_sme2.store.files import file_sha256

pytestmark = pytest.mark.slow

RECORDING = Path(__file__).parents[1] / "data" / "instruction_counts.json"


@pytest.fixture(scope="module")
def emulated(aarch64_runner_build: Any, sme2_qemu: Path) -> QemuRunner:
    return QemuRunner(aarch64_runner_build.path, qemu=sme2_qemu, sysroot=aarch64_runner_build.sysroot,
                      runtime=aarch64_runner_build.runtime())


@pytest.fixture(scope="module")
def toy_cnn(example_export: Any) -> Any:
    return example_export("fp32", "xnnpack")


@pytest.fixture(scope="module")
def counted_runs(emulated: QemuRunner, toy_cnn: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each arm's counting process (its counts and the kernels it ran), once per module (~2 s of CPU each)."""
    out = tmp_path_factory.mktemp("counts")
    return {arm: emulated.record_counted(_request(toy_cnn, arm, out)) for arm in (SME2_ON, SME2_OFF)}


@pytest.fixture(scope="module")
def counted(counted_runs: dict[str, Any]) -> dict[str, Any]:
    """Each arm's counts."""
    return {arm: run.counts for arm, run in counted_runs.items()}


def _request(exported: Any, arm: str, out: Path) -> RunRequest:
    return RunRequest(pte=exported.pte_path, runs=1, warmup=1, out_dir=out, inputs=tuple(exported.input_files),
                      variant=arm, label="toy_cnn")


def test_every_instruction_is_counted_once_by_kind_and_by_library(counted: dict[str, InstructionCounts]) -> None:
    for counts in counted.values():
        assert set(counts.by_kind) == set(INSTRUCTION_KINDS)
        assert sum(counts.by_kind.values()) == counts.total == sum(counts.by_library.values())
        assert sum(counts.by_symbol.values()) <= counts.total
        assert counts.by_kind["undecoded"] == 0  # every word QEMU 11.1 left unnamed was an SME/SVE group word


def test_the_sme2_on_arm_runs_sme2_kernels_and_the_off_arm_neon(counted: dict[str, InstructionCounts]) -> None:
    on, off = counted[SME2_ON], counted[SME2_OFF]
    assert (on.cpu, off.cpu) == ("max", "max,sme=off")
    assert on.by_kind["sme"] > 0 and on.by_mnemonic.get("fmopa za", 0) > 0 and on.sme2_instructions > 0
    assert any("sme2_mopa" in s for s in on.sme2_symbols)
    # off: no SME at all, the GEMM work on NEON multiply-accumulates
    assert off.by_kind["sme"] == 0 and off.sme2_symbols == () and off.sme2_instructions == 0
    assert off.by_mnemonic.get("fmla v", 0) > 0 and off.by_kind["neon"] > on.by_kind["neon"]


def test_the_same_program_counts_the_same_in_another_process(emulated: QemuRunner, toy_cnn: Any,
                                                              counted: dict[str, InstructionCounts],
                                                              tmp_path: Path) -> None:
    again = emulated.record_counts(_request(toy_cnn, SME2_ON, tmp_path / "another" / "run" / "directory"))
    assert again == counted[SME2_ON]


@pytest.mark.parametrize("arm", [SME2_ON, SME2_OFF])
def test_the_counts_equal_the_recording(arm: str, counted: dict[str, InstructionCounts], emulated: QemuRunner,
                                        aarch64_runner_build: Any, toy_cnn: Any) -> None:
    recording = json.loads(RECORDING.read_text())
    recorded = recording["arms"][f"toy_cnn_fp32_xnnpack/{arm}"]
    here = counted[arm]
    expected = InstructionCounts.from_dict(recorded["counts"])
    if here != expected:
        differs = [f"{what} {key}: {getattr(here, what).get(key, 0)} here, {getattr(expected, what).get(key, 0)} "
                   "recorded" for what in ("by_kind", "by_library")
                   for key in sorted(set(getattr(here, what)) | set(getattr(expected, what)))
                   if getattr(here, what).get(key, 0) != getattr(expected, what).get(key, 0)]
        sources = [f"{what} {'the same' if a == b else f'{a} here, {b} recorded'}" for what, a, b in (
            ("program", file_sha256(toy_cnn.pte_path)[:12], recorded["program_sha256"][:12]),
            ("runner", file_sha256(aarch64_runner_build.path)[:12], recording["runner_sha256"][:12]),
            ("QEMU", emulated.version, recording["qemu_version"]))]
        pytest.fail(f"instructions executed under emulation by toy_cnn fp32/xnnpack ({arm}, -cpu {here.cpu}) differ "
                    f"on this host ({_host_cpu()}) from {RECORDING.name}, recorded on {recording['recorded_on']}: "
                    f"total {here.total} here, {expected.total} recorded; {'; '.join(differs[:8])}. "
                    f"{', '.join(sources)}. Same program, runner and QEMU: this host counts differently — say so in "
                    "the issue; otherwise re-record with python benchmarks/instruction_counts.py --record "
                    f"tests/data/{RECORDING.name}")


def test_the_count_command_prints_both_arms_labelled_as_counts(emulated: QemuRunner, toy_cnn: Any,
                                                               counted: dict[str, InstructionCounts], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_sme2.cli import main

    out = tmp_path / "counts.json"
    code = main(["count", "--pte", str(toy_cnn.pte_path), "--inputs", *map(str, toy_cnn.input_files),
                 "--qemu", str(emulated.qemu), "--runner", str(emulated.runner_for(None)),
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"), "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert printed.startswith("instructions executed under emulation by model")
    assert f"{counted[SME2_ON].total:,}" in printed and f"{counted[SME2_OFF].total:,}" in printed
    assert "speedup" not in printed and " ms" not in printed
    written = json.loads(out.read_text())["model"]
    assert {arm: InstructionCounts.from_dict(c) for arm, c in written.items()} == counted


def test_the_total_equals_single_instruction_blocks_counted_apart(emulated: QemuRunner, toy_cnn: Any,
                                                                    counted: dict[str, InstructionCounts],
                                                                    tmp_path: Path) -> None:
    """An independent count: with ``-one-insn-per-tb`` every block QEMU executes is one instruction, so the ``Trace``
    lines between the markers are the instructions, with no translation log and no block bookkeeping."""
    import os
    import subprocess

    from pytest_sme2.runners.qemu import _stage, qemu_command

    request = _request(toy_cnn, SME2_ON, tmp_path)
    argv = _stage(tmp_path, emulated.runner_for(SME2_ON), request)
    read_end, write_end = os.pipe()
    cmd = [*qemu_command(emulated.qemu, "max", emulated.sysroot), "-one-insn-per-tb", "-d", "exec,nochain",
           "-D", f"/dev/fd/{write_end}", *argv]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env={}, pass_fds=(write_end,), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    os.close(write_end)
    per_execution, n, on = [], 0, False
    with os.fdopen(read_end, "rb", buffering=1 << 20) as log:
        for line in log:
            if line.startswith(b"Trace "):
                symbol = line.rsplit(b"]", 1)[-1].strip()
                if symbol == b"sme2_runner_count_begin":
                    on, n = True, 0
                elif symbol == b"sme2_runner_count_end":
                    on = False
                    per_execution.append(n)
                elif on:
                    n += 1
    assert proc.wait() == 0
    assert len(per_execution) == 2  # the warm-up, then the counted one
    assert per_execution[1] == counted[SME2_ON].total


def test_a_runner_without_the_markers_is_refused_with_the_fix(aarch64_runner_build: Any, runner_cache: Path,
                                                               emulated: QemuRunner, toy_cnn: Any,
                                                               tmp_path: Path) -> None:
    """pytest-sme2's runner as it was before the markers (its calls to them taken out): nothing is counted."""
    from pytest_sme2.errors import TraceError
    from pytest_sme2.runners.build import TARGET_LINUX_AARCH64, build_runner, runner_source

    source = runner_source()
    unmarked = source.replace(b"    sme2_runner_count_begin();\n", b"").replace(b"    sme2_runner_count_end();\n", b"")
    assert unmarked != source
    build = build_runner(TARGET_LINUX_AARCH64, cache_dir=runner_cache, source=unmarked)
    old = QemuRunner(build.path, qemu=emulated.qemu, sysroot=build.sysroot)
    with pytest.raises(TraceError, match=r"no block of sme2_runner_count_begin executed.*build-runner"):
        old.record_counts(_request(toy_cnn, SME2_ON, tmp_path))


@pytest.mark.parametrize("arm", [SME2_ON, SME2_OFF])
def test_the_counting_process_names_the_kernels_an_in_asm_process_names(arm: str, emulated: QemuRunner, toy_cnn: Any,
                                                                         counted_runs: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    """One emulated process per arm when a test counts: its blocks say which kernels ran, as a separate ``-d in_asm``
    process does (the same exported functions, the same SME2 kernels), so no second process runs (issue 30)."""
    counted = counted_runs[arm]
    in_asm = emulated.record_executed(replace(_request(toy_cnn, arm, tmp_path), warmup=0))

    def names(functions: Any) -> set[str]:
        return {f"{Path(f.library).name}!{f.name}" for f in functions}

    # the same exported functions ran (by file name: the counting process runs a staged link of the runner), in
    # the same libraries: the runtime's and the runner (the C library's depend on the environment and outputs)
    assert names(counted.executed.functions) == names(in_asm.functions)
    assert {Path(r.library).name for r in counted.executed.unmapped} == {Path(r.library).name for r in in_asm.unmapped}
    assert names(counted.executed.sme2_functions) == names(in_asm.sme2_functions)
    if arm == SME2_ON:
        assert counted.executed.sme2_functions, "the SME2-on arm ran no SME2 kernel"
        # and they hold the instructions counted as SME2 kernels'
        assert {s.split("!", 1)[1] for s in counted.counts.sme2_symbols} <= {
            f.name for f in counted.executed.sme2_functions}
    else:
        assert not counted.executed.sme2_functions and not counted.counts.sme2_symbols
