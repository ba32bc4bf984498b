"""Instructions executed under emulation: what counting costs against a plain emulated run, and whether the counts
repeat (issue 32 items 2 and 4).

    python benchmarks/instruction_counts.py                  # the three example models' fp32/XNNPACK on/off pairs
    python benchmarks/instruction_counts.py --models toy_cnn --repeat 3
    python benchmarks/instruction_counts.py --record tests/data/instruction_counts.json   # the CI's expectation
    python benchmarks/instruction_counts.py --repeat 1 --check tests/data/instruction_counts.json   # this host vs it

Per model and arm (SME2 on: ``-cpu max``; off: ``-cpu max,sme=off``), everything real on this machine:

- **plain**: the runner under QEMU without a log, the same two executions (one warm-up, one counted) in one process,
  wall time from ``Popen`` to exit: what the emulated arm costs anyway;
- **counted**: :meth:`QemuRunner.record_counts` (``-d in_asm,exec,nochain`` streamed through a pipe into the
  counter, start-up included, the attribution at the end), wall time, ``--repeat`` times, each a new process;
- **ratio** counted / plain (medians), and whether every repetition gave the same counts (all of them: total, every
  kind, library, exported function and mnemonic).

``--record FILE`` writes the counts (when every repetition agreed) with what they were taken from: the program's
and the runner's sha256, QEMU's version, the emulated CPU, and the host that ran QEMU — the expectation
``tests/runners/test_qemu_counts.py`` compares a CI host's counts with. ``--save FILE`` keeps every number.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pytest_sme2.runners.base import SME2_OFF, SME2_ON, RunRequest  # noqa: E402

MODELS = ("toy_cnn", "mobilenet_v3_small", "tiny_transformer")
ARMS = (SME2_ON, SME2_OFF)
#: The recording's schema (tests/data/instruction_counts.json).
RECORDING_SCHEMA = 1


def cpu_seconds(who: int | None = None) -> float:
    """CPU time of this process and its waited-for children (QEMU) so far (``who``: one of them): on a busy
    machine, wall time is not cost."""
    usage = [resource.getrusage(w) for w in ((who,) if who is not None else (resource.RUSAGE_SELF,
                                                                            resource.RUSAGE_CHILDREN))]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def plain_seconds(runner: Any, request: RunRequest) -> tuple[float, float]:
    """One plain emulated process of ``request`` (no log): wall and CPU time."""
    from pytest_sme2.runners.qemu import qemu_command

    cmd = [*qemu_command(runner.qemu, runner.cpu_for(request.variant), runner.sysroot),
           str(runner.runner_for(request.variant)), "--model_path", str(request.pte),
           f"--num_executions={request.executions}", "--cpu_threads=1",
           "--inputs", ",".join(str(p) for p in request.inputs or ())]
    started, cpu = time.perf_counter(), cpu_seconds()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - started, cpu_seconds() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated example models")
    parser.add_argument("--repeat", type=int, default=2, help="counted processes per arm (default 2)")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".sme2_cache", help="export and runner cache")
    parser.add_argument("--out", type=Path, default=Path("/tmp/sme2_instruction_counts"), help="run directories")
    parser.add_argument("--record", type=Path, help="write the counts as the CI's expectation (JSON)")
    parser.add_argument("--save", type=Path, help="write every number (JSON)")
    parser.add_argument("--check", type=Path, help="compare every arm with a recording (exit 1 naming what differs)")
    args = parser.parse_args(argv)

    import example_models.models  # noqa: F401 - registers the example models
    from pytest_sme2.evidence.instructions import LABEL
    from pytest_sme2.program.export import export_model
    from pytest_sme2.runners.build import TARGET_LINUX_AARCH64, build_runner
    from pytest_sme2.runners.qemu import QemuRunner, _host_cpu, find_qemu
    from pytest_sme2.store.files import file_sha256, write_atomic

    build = build_runner(TARGET_LINUX_AARCH64, cache_dir=args.cache_dir / "runners")
    runner = QemuRunner(build.path, qemu=find_qemu(), sysroot=build.sysroot, timeout_s=1800)
    host = _host_cpu()
    print(f"{LABEL}: QEMU {runner.version} on {host}; runner {build.path}")
    print(f"{'model':<20} {'arm':<9} {'instructions':>13} {'plain s':>8} {'counted s':>10} {'ratio':>6} "
          f"{'plain cpu':>9} {'counted cpu':>11} {'ratio':>6} {'counter':>7}  repeat")
    rows: list[dict[str, Any]] = []
    recording: dict[str, Any] = {}
    for name in args.models.split(","):
        exported = export_model(name, dtype="fp32", backend="xnnpack", cache_dir=args.cache_dir, progress=None)
        for arm in ARMS:
            request = RunRequest(pte=exported.pte_path, runs=1, warmup=1, out_dir=args.out,
                                 inputs=tuple(exported.input_files), variant=arm, label=name, timeout_s=1800)
            plain, plain_cpu = plain_seconds(runner, request)
            counted, counted_cpu, counter_cpu, results = [], [], [], []
            for _ in range(args.repeat):
                started, cpu, mine = time.perf_counter(), cpu_seconds(), cpu_seconds(resource.RUSAGE_SELF)
                results.append(runner.record_counts(request))
                counted.append(time.perf_counter() - started)
                counted_cpu.append(cpu_seconds() - cpu)
                counter_cpu.append(cpu_seconds(resource.RUSAGE_SELF) - mine)
            same = all(r == results[0] for r in results)
            ratio, cpu_ratio = statistics.median(counted) / plain, statistics.median(counted_cpu) / plain_cpu
            print(f"{name:<20} {arm:<9} {results[0].total:>13,} {plain:>8.1f} {statistics.median(counted):>10.1f} "
                  f"{ratio:>6.1f} {plain_cpu:>9.1f} {statistics.median(counted_cpu):>11.1f} {cpu_ratio:>6.1f} "
                  f"{statistics.median(counter_cpu):>7.1f}  "
                  f"{'identical' if same else 'DIFFER: ' + str([r.total for r in results])}", flush=True)
            rows.append({"model": name, "arm": arm, "plain_s": plain, "counted_s": counted, "ratio": ratio,
                         "plain_cpu_s": plain_cpu, "counted_cpu_s": counted_cpu, "cpu_ratio": cpu_ratio,
                         "counter_cpu_s": counter_cpu,
                         "identical": same, "totals": [r.total for r in results]})
            if same:
                recording[f"{name}_fp32_xnnpack/{arm}"] = {
                    "program_sha256": file_sha256(exported.pte_path), "counts": results[0].to_dict()}
    total_plain = sum(r["plain_s"] for r in rows)
    total_counted = sum(statistics.median(r["counted_s"]) for r in rows)
    cpu_plain = sum(r["plain_cpu_s"] for r in rows)
    cpu_counted = sum(statistics.median(r["counted_cpu_s"]) for r in rows)
    print(f"all arms: plain {total_plain:.0f} s, counted {total_counted:.0f} s ({total_counted / total_plain:.1f}x); "
          f"CPU plain {cpu_plain:.0f} s, counted {cpu_counted:.0f} s ({cpu_counted / cpu_plain:.1f}x); "
          f"every repetition identical: {all(r['identical'] for r in rows)}")
    differ = check(args.check, recording, rows) if args.check else []
    if args.record:
        write_atomic(args.record, json.dumps({
            "schema_version": RECORDING_SCHEMA, "label": LABEL, "qemu_version": runner.version,
            "runner_sha256": file_sha256(build.path), "recorded_on": host, "arms": recording}, indent=1) + "\n",
            what="instruction counts recording")
        print(f"Wrote: {args.record}")
    if args.save:
        write_atomic(args.save, json.dumps({"qemu_version": runner.version, "host": host, "rows": rows}, indent=1)
                     + "\n", what="benchmark results")
    return 0 if all(r["identical"] for r in rows) and not differ else 1


def check(path: Path, counted: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The arms whose counts here differ from the recording at ``path`` (printed, with their totals)."""
    recorded = json.loads(path.read_text())
    differ = []
    for key in sorted({f"{r['model']}_fp32_xnnpack/{r['arm']}" for r in rows}):
        mine, theirs = counted.get(key), recorded["arms"].get(key)
        if mine is None or theirs is None or mine["counts"] != theirs["counts"]:
            differ.append(f"{key}: {mine['counts']['total'] if mine else 'none'} here, "
                          f"{theirs['counts']['total'] if theirs else 'none'} recorded")
    print(f"against {path} (recorded on {recorded['recorded_on']}, QEMU {recorded['qemu_version']}): "
          + ("every arm the same" if not differ else "DIFFER: " + "; ".join(differ)))
    return differ


if __name__ == "__main__":
    sys.exit(main())
