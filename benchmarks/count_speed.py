"""The instruction counter's own cost: one recorded QEMU log fed to the reference counter and to this checkout's,
alternately, in one process (issue 30 item 2).

    python benchmarks/count_speed.py --record                 # record the logs once (tiny_transformer, both arms)
    python benchmarks/count_speed.py                          # feed them: 5 rounds, medians and the ratio
    python benchmarks/count_speed.py --reference 9069dd2 --rounds 3
    python benchmarks/count_speed.py --live 2                 # real QEMU runs through the pipe, both counters

``--record`` runs :meth:`QemuRunner.record_counts` as the ``count`` command does and copies the log QEMU streams
into the counter (``-d in_asm,exec,nochain``) to ``--logs`` (a few hundred MB to GB per arm), with the runner's
code-map lines beside it. Feeding then reads each log file through ``feed_stream`` (the same code path as the pipe,
without QEMU) with the reference counter (``pytest_sme2/evidence/qemu_counts.py`` as it was at ``--reference``,
loaded from git into a module of its own) and with this checkout's, alternating, ``--rounds`` times; it reports the
median CPU seconds of each (process time: the machine is shared) and their ratio, and checks that both counters hold
the same block executions per counted execution and give the same :class:`InstructionCounts` for every execution.

``--live N`` measures what a user waits for: :meth:`QemuRunner.record_counts` of each arm, QEMU writing its log into
the pipe the counter reads, with the reference counter and with this checkout's, alternating, ``N`` rounds; per arm
the median wall seconds, the CPU seconds of this process (the counter, reading the pipe included, and the attribution
at the end) and of QEMU, and whether both gave the same counts.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The counter before issue 30 item 2 (streamed line by line, one split per Trace line).
REFERENCE = "9069dd206b42209e597decc97ee2674cff662110"
COUNTER_PATH = "pytest_sme2/evidence/qemu_counts.py"


def record(model: str, logs: Path, cache_dir: Path) -> None:
    """Record QEMU's log of each arm of ``model`` (fp32/XNNPACK, 1 warm-up + 1 counted execution) into ``logs``."""
    import example_models.models  # noqa: F401 - registers the example models
    from pytest_sme2.program.export import export_model
    from pytest_sme2.runners import qemu
    from pytest_sme2.runners.base import SME2_OFF, SME2_ON, RunRequest
    from pytest_sme2.runners.build import TARGET_LINUX_AARCH64, build_runner

    build = build_runner(TARGET_LINUX_AARCH64, cache_dir=cache_dir / "runners")
    runner = qemu.QemuRunner(build.path, qemu=qemu.find_qemu(), sysroot=build.sysroot, timeout_s=1800)
    exported = export_model(model, dtype="fp32", backend="xnnpack", cache_dir=cache_dir, progress=None)
    logs.mkdir(parents=True, exist_ok=True)
    for arm in (SME2_ON, SME2_OFF):
        request = RunRequest(pte=exported.pte_path, runs=1, warmup=1, out_dir=Path(tempfile.mkdtemp()),
                             inputs=tuple(exported.input_files), variant=arm, label=model, timeout_s=1800)
        log_path = logs / f"{model}.{arm}.log"
        total = record_arm(runner, request, log_path, log_path.with_suffix(".maps"))
        print(f"recorded {log_path} ({log_path.stat().st_size / 1e6:,.0f} MB): {total:,} instructions")


def record_arm(runner: Any, request: Any, log_path: Path, maps_path: Path) -> int:
    """``runner.record_counts(request)``, copying the log QEMU streams to ``log_path`` (then counting it from there)
    and the runner's code-map lines to ``maps_path``; the total counted."""
    from pytest_sme2.evidence import qemu_counts
    from pytest_sme2.runners import qemu

    class Recording(qemu_counts.BlockCounter):
        def feed_stream(self, stream: BinaryIO, **_: Any) -> None:
            with log_path.open("wb") as out:
                shutil.copyfileobj(stream, out, 1 << 20)
            with log_path.open("rb") as again:
                super().feed_stream(again)

    def keep_maps(counter: Any, maps_lines: Any, *args: Any, **kwargs: Any) -> Any:
        maps = list(maps_lines)
        maps_path.write_text("".join(m + "\n" for m in maps))
        return qemu_counts.counts_of(counter, maps, *args, **kwargs)

    vars(qemu).update(BlockCounter=Recording, counts_of=keep_maps)
    try:
        return int(runner.record_counts(request).total)
    finally:
        vars(qemu).update(BlockCounter=qemu_counts.BlockCounter, counts_of=qemu_counts.counts_of)


def live(model: str, cache_dir: Path, rounds: int, old: ModuleType, new: ModuleType) -> bool:
    """``--live``: real counted runs of each arm with either counter; True when they counted the same."""
    import resource

    import example_models.models  # noqa: F401 - registers the example models
    from pytest_sme2.program.export import export_model
    from pytest_sme2.runners import qemu
    from pytest_sme2.runners.base import SME2_OFF, SME2_ON, RunRequest
    from pytest_sme2.runners.build import TARGET_LINUX_AARCH64, build_runner

    def cpu(who: int) -> float:
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime

    build = build_runner(TARGET_LINUX_AARCH64, cache_dir=cache_dir / "runners")
    runner = qemu.QemuRunner(build.path, qemu=qemu.find_qemu(), sysroot=build.sysroot, timeout_s=1800)
    exported = export_model(model, dtype="fp32", backend="xnnpack", cache_dir=cache_dir, progress=None)
    times: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    counts: dict[str, list[Any]] = {}
    for _ in range(rounds):
        for name, module in (("reference", old), ("new", new)):
            for arm in (SME2_ON, SME2_OFF):
                request = RunRequest(pte=exported.pte_path, runs=1, warmup=1, out_dir=Path(tempfile.mkdtemp()),
                                     inputs=tuple(exported.input_files), variant=arm, label=model, timeout_s=1800)
                vars(qemu).update(BlockCounter=module.BlockCounter)
                try:
                    mine, theirs, wall = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
                    counts.setdefault(arm, []).append(runner.record_counts(request))
                    times.setdefault((name, arm), []).append((time.perf_counter() - wall,
                                                              cpu(resource.RUSAGE_SELF) - mine,
                                                              cpu(resource.RUSAGE_CHILDREN) - theirs))
                finally:
                    vars(qemu).update(BlockCounter=new.BlockCounter)
    print(f"{model}, QEMU's log through the pipe: medians of {rounds} rounds (emulated; seconds)")
    print(f"{'counter':<10} {'arm':<9} {'wall':>6} {'python cpu':>11} {'qemu cpu':>9}")
    for (name, arm), rows in times.items():
        wall_s, python_s, qemu_s = (statistics.median(row[i] for row in rows) for i in range(3))
        print(f"{name:<10} {arm:<9} {wall_s:>6.1f} {python_s:>11.1f} {qemu_s:>9.1f}")
    same = all(c == arm_counts[0] for arm_counts in counts.values() for c in arm_counts)
    print(f"the same counts from both counters in every round: {'yes' if same else 'NO'}")
    return same


def reference_module(rev: str) -> ModuleType:
    """``qemu_counts`` as it was at ``rev``, imported as a module of its own."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{COUNTER_PATH}"], check=True,
                            capture_output=True).stdout
    path = Path(tempfile.mkdtemp()) / "qemu_counts_reference.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("qemu_counts_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def feed(module: ModuleType, log: Path) -> tuple[float, float, Any]:
    """CPU and wall seconds of feeding ``log`` to ``module``'s counter; the counter."""
    counter = module.BlockCounter(str(log))
    cpu, wall = time.process_time(), time.perf_counter()
    with log.open("rb", buffering=1 << 20) as stream:
        counter.feed_stream(stream)
    return time.process_time() - cpu, time.perf_counter() - wall, counter


def executed(counter: Any) -> list[dict[bytes, int]]:
    """Per counted execution: each executed block's instruction lines (joined) -> times, zero counts left out."""
    out = []
    for execution in counter.executions:
        per: dict[bytes, int] = {}
        for block, times in execution.blocks.items():
            if times:
                key = b"".join(counter.blocks[block])
                per[key] = per.get(key, 0) + times
        out.append(per)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--record", action="store_true", help="record the logs first (runs QEMU)")
    parser.add_argument("--model", default="tiny_transformer", help="example model to record (default "
                        "tiny_transformer)")
    parser.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()) / "sme2_count_logs",
                        help="where the logs are (default: $TMPDIR/sme2_count_logs)")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".sme2_cache", help="export and runner cache")
    parser.add_argument("--reference", default=REFERENCE, help=f"git revision of the reference counter "
                        f"(default {REFERENCE[:9]}: before issue 30 item 2)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per log (default 5)")
    parser.add_argument("--live", type=int, metavar="N", help="instead: N rounds of real counted runs of --model")
    args = parser.parse_args(argv)
    from pytest_sme2.evidence import qemu_counts

    old, new = reference_module(args.reference), qemu_counts
    if args.live:
        return 0 if live(args.model, args.cache_dir, args.live, old, new) else 1
    if args.record:
        record(args.model, args.logs, args.cache_dir)
    logs = sorted(args.logs.glob("*.log"))
    if not logs:
        print(f"no logs in {args.logs}: record them with --record", file=sys.stderr)
        return 2
    print(f"counter CPU seconds per log, median of {args.rounds} alternating rounds (reference {args.reference[:9]})")
    print(f"{'log':<34} {'MB':>7} {'lines':>12} {'reference s':>12} {'new s':>8} {'ratio':>6}  same counts")
    ok = True
    for log in logs:
        times: dict[str, list[float]] = {"old": [], "new": []}
        counters: dict[str, Any] = {}
        for _ in range(args.rounds):
            for name, module in (("old", old), ("new", new)):
                cpu, _wall, counters[name] = feed(module, log)
                times[name].append(cpu)
        same = (executed(counters["old"]) == executed(counters["new"])
                and counters["old"].lines == counters["new"].lines)
        maps_file = log.with_suffix(".maps")
        if same and maps_file.exists():
            maps = maps_file.read_text().splitlines()
            same = all(old.counts_of(counters["old"], maps, execution=i) == new.counts_of(counters["new"], maps,
                                                                                          execution=i)
                       for i in range(len(counters["old"].executions)))
        ok = ok and same
        t_old, t_new = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"{log.name:<34} {log.stat().st_size / 1e6:>7,.0f} {counters['old'].lines:>12,} {t_old:>12.2f} "
              f"{t_new:>8.2f} {t_old / t_new:>5.1f}x  {'yes' if same else 'NO'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
