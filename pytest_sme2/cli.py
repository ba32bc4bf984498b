"""``pytest-sme2`` / ``python -m pytest_sme2``: the library's command-line front end.

Commands: ``analyze`` (a trace), ``profile`` (export + run + analyze a registered model), ``build-runner``
(pytest-sme2's own runner from the executorch wheel, for the host or linux-aarch64), ``count``
(instructions executed under emulation, SME2 on and off), ``rebuild`` (the programs of committed baselines into the
artifact store, from their commits, proven by hash), ``history`` (runs across
commits: steps, current regressions, the PR view, the trend page; docs/history.md),
``compare`` (the regression gate on two result files, exit 1 on a regression), ``report`` (markdown
from a results JSON or run directory) and ``export-trace`` (Chrome/Perfetto JSON).

Exit codes (:data:`EXIT_CODES_HELP`, also in ``--help``): 0 ok; 1 the gate failed: a regression, a test of OLD that
NEW does not have (a test that was not measured must not look green), or with ``--strict`` an inconclusive
comparison; 2 bad input or usage (one line naming the file and the fix, never a traceback; checked before anything
runs where it can be, as outputs that would overwrite each other or an input), and ``compare`` of measurements from
other device identities; 3 a runner or device failed; 130 Ctrl-C. Which is which follows the error's class
(:attr:`pytest_sme2.errors.Sme2Error.exit_code`).

``compare`` judges two files as two sessions (:func:`pytest_sme2.judge.compare_recorded`): the same artifact
is drift (reported, never failed), a changed or unknown one is judged on the stored samples with the margin
widened by ``--drift-allowance``; each test's lines say which rule was used.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sme2.errors import ConfigError, ModelError, Sme2Error
from pytest_sme2.options import (
    COOLDOWN_S,
    WARMUP,
    add_cli_options,
    executable_file,
    existing_dir,
    existing_file,
    nonnegative_percent,
    percent,
    rules_file,
)
from pytest_sme2.version import __version__

if TYPE_CHECKING:
    from pytest_sme2.measure.profile import StreamProgress

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_RUN_FAILED = 0, 1, 2, 3
#: Ctrl-C, as a shell reports SIGINT (128 + 2)
EXIT_INTERRUPTED = 130

#: The one exit-code rule of every command (docs/reliability.md), shown by ``pytest-sme2 --help``.
EXIT_CODES_HELP = (
    "exit codes (every command): 0 ok; 1 a gate failed (compare: a regression, a test of OLD that NEW lacks, or with "
    "--strict an inconclusive one; history regressions: a current regression; rebuild: a baseline whose program "
    "cannot be rebuilt); 2 bad input or usage (a file, store or "
    "option that cannot be used, or compare of measurements from other device identities: one line naming it and "
    "the fix, nothing written); 3 a run failed (a runner or device); 130 interrupted (Ctrl-C)."
)


RULES_HELP = ('JSON file of extra operator-category rules, tried before the defaults: a list of {"category": ..., '
              '"pattern": ...}, or {"rules": [...], "replace": true} to drop the defaults')


def _add_analyze(sub: Any) -> None:
    p = sub.add_parser("analyze", help="analyze an ETDump trace: E2E statistics, categories, operators")
    p.add_argument("trace", type=Path, help="ETDump file written by a tracer-enabled executor_runner")
    p.add_argument("--etrecord", type=Path,
                   help="ETRecord exported with the model (optional; names the delegate backend)")
    p.add_argument("--xnnlog", type=Path, help="XNNPACK debug log of the same runner build, for kernel hints")
    p.add_argument("--warmup", type=WARMUP, default=1,
                   help="leading runs left out of statistics (run 0 is cold; default 1)")
    p.add_argument("--rules", type=rules_file, help=RULES_HELP)
    p.add_argument("--json", type=Path, default=Path("analysis_summary.json"), dest="json_out",
                   help="where to write the analysis summary (default ./analysis_summary.json)")
    p.add_argument("--csv-dir", type=Path, help="where to write the timeline and ops-stats CSVs "
                   "(default: the JSON file's directory)")
    p.add_argument("--quiet", action="store_true", help="print only the category table")
    p.set_defaults(files_read=(("TRACE", "trace"), ("--etrecord", "etrecord"), ("--xnnlog", "xnnlog"),
                               ("--rules", "rules")), files_written=(("--json", "json_out"),))


def _add_profile(sub: Any) -> None:
    p = sub.add_parser("profile", help="export a registered model (cached), or take a .pte, run it, analyze it")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", action="append", dest="models", help="registered model name (repeatable)")
    what.add_argument("--pte", type=existing_file,
                      help="an existing .pte to run as it is (e.g. one recorded with a trace); not exported here")
    p.add_argument("--inputs", type=existing_file, nargs="+", default=[], metavar="FILE",
                   help="with --pte: raw input tensor files, one per input, as executor_runner --inputs takes "
                   "them (default: all ones)")
    p.add_argument("--dtype", choices=("fp32", "fp16", "int8"),
                   help="export dtype (default fp32); with --pte only a label")
    p.add_argument("--backend", choices=("xnnpack", "portable"),
                   help="export backend (default xnnpack); with --pte only a label")
    # The measurement's options are the plugin's (pytest_sme2.options.OPTION_TABLE): the same types and defaults.
    add_cli_options(p, "runs", "warmup", "blocks", "time-budget", "busy-limit", "threads", "timeout")
    p.add_argument("--runner", type=executable_file,
                   help="a tracer-enabled executor_runner; without it, the local executorch Python runtime "
                        "(which records an ETDump per block)")
    from pytest_sme2.runners.registry import help_text

    p.add_argument("--device", help=f"{help_text('host with --runner, else local')}. Host without --runner builds "
                   "pytest-sme2's own runner from the executorch wheel; android pushes --runner to a phone over adb "
                   "(see docs/android.md); qemu's time is emulated time (see docs/arm-emulation.md)")
    p.add_argument("--qemu", type=executable_file, help="qemu: the qemu-aarch64 binary (default: on PATH)")
    p.add_argument("--serial", help="android: adb serial (default $ANDROID_SERIAL, else the only device)")
    add_cli_options(p, "ssh-host", "ssh-config")
    p.add_argument("--libcxx", type=existing_file, help="android: libc++_shared.so to push beside the runner")
    p.add_argument("--runner-libs", type=existing_dir,
                   help="android: a directory whose .so files the runner needs (pushed beside it, on LD_LIBRARY_PATH)")
    p.add_argument("--big-cores", help="android: taskset hex mask, or 'none' (default: the fastest cluster)")
    p.add_argument("--cooldown", type=COOLDOWN_S, default=0.0,
                   help="android: seconds to wait between blocks (default 0)")
    p.add_argument("--fixed-performance", action="store_true",
                   help="android: fixed performance mode while measuring (Android 11+)")
    p.add_argument("--rules", type=rules_file,
                   help=RULES_HELP + " (needs a runner that records a per-operator trace: --runner)")
    p.add_argument("--models", "--models-from", action="append", dest="model_sources", metavar="SRC",
                   help="module name or .py file that registers models (repeatable), as the plugin's --sme2-models; "
                   "default: sme2_models of the project's pytest ini file (pytest.ini, pyproject.toml "
                   "[tool.pytest.ini_options], tox.ini or setup.cfg, found upward from here as pytest finds it; "
                   "relative paths there are relative to that file)")
    add_cli_options(p, "cache-dir")
    p.add_argument("--out", type=Path, default=Path("sme2_out"), help="output directory (default sme2_out)")


def _add_compare(sub: Any) -> None:
    p = sub.add_parser("compare",
                       help="gate NEW against OLD (analysis, baseline or results JSON); exit 1 on regression")
    p.add_argument("old", type=existing_file,
                   help="baseline: analysis_summary.json, a baseline file, or --sme2-json results")
    p.add_argument("new", type=existing_file, help="candidate, same kinds")
    p.add_argument("--margin", type=percent, default=5.0, help="relative margin, e.g. 5%% (default 5%%)")
    p.add_argument("--strict", action="store_true", help="an inconclusive comparison also fails (exit 1)")
    p.add_argument("--drift-allowance", type=nonnegative_percent, default=None, metavar="PCT",
                   help="how far this machine drifts between sessions, set by hand (uncalibrated): added to the margin "
                   "of a changed artifact (two files are two sessions), as the plugin's --sme2-drift-allowance. "
                   "Default: calibrated from --history; without either a changed artifact is not decided")
    p.add_argument("--history", type=Path, default=None, metavar="DIR",
                   help="a history store (.sme2_history) whose unchanged sessions of each test on its device calibrate "
                   "the drift allowance (pytest-sme2 history)")
    p.add_argument("--json", type=Path, dest="json_out", help="write the verdicts as JSON")
    p.set_defaults(files_read=(("OLD", "old"), ("NEW", "new")), files_written=(("--json", "json_out"),))


def _add_build_runner(sub: Any) -> None:
    p = sub.add_parser(
        "build-runner", help="build pytest-sme2's own runner against the installed executorch wheel",
        description="Build pytest-sme2's runner (one C++ file, executor_runner's flags, traced or timing-only) "
        "against the executorch wheel's C++ SDK: for this host, or cross-built for linux-aarch64 against the "
        "aarch64 wheel of the same executorch version (fetched with pip). Cached by content; prints the path.")
    p.add_argument("--target", choices=("host", "linux-aarch64", "all"), default="host",
                   help="host (default), linux-aarch64 (runs under qemu-aarch64 and on aarch64 Linux), or all")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where builds are kept (default ~/.cache/pytest-sme2/runners; the plugin uses "
                   "<--sme2-cache-dir>/runners)")
    p.add_argument("--wheel", type=existing_file, help="linux-aarch64: the aarch64 executorch wheel file, for a "
                   "machine that cannot reach PyPI")
    p.add_argument("--force", action="store_true", help="build again even when the cache has this build")
    p.add_argument("--json", type=Path, dest="json_out", help="write the build records (path, key, compiler) as JSON")
    p.set_defaults(files_read=(("--wheel", "wheel"),), files_written=(("--json", "json_out"),))


def _add_count(sub: Any) -> None:
    p = sub.add_parser(
        "count", help="instructions executed under emulation by one method execution, SME2 on and off (QEMU)",
        description="Run a registered model (exported, cached) or a .pte under qemu-aarch64 with SME2 on (-cpu max) "
        "and off (-cpu max,sme=off), one warm-up and one counted execution per arm, and print the instructions the "
        "counted execution executed: in total, by kind (sme, sve, neon, load_store, scalar), by library and by "
        "exported function. Exact and repeatable (the same QEMU, runner and program gave the same counts in every "
        "process and setting tried); counts, never "
        "times (docs/arm-emulation.md).")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", action="append", dest="models", help="registered model name (repeatable)")
    what.add_argument("--pte", type=existing_file, help="an existing .pte to count as it is")
    p.add_argument("--inputs", type=existing_file, nargs="+", default=[], metavar="FILE",
                   help="with --pte: raw input tensor files, one per input (default: all ones)")
    p.add_argument("--dtype", choices=("fp32", "fp16", "int8"), help="export dtype (default fp32)")
    p.add_argument("--backend", choices=("xnnpack", "portable"), help="export backend (default xnnpack)")
    p.add_argument("--device", default="qemu", help="a device that counts instructions (default and only built-in: "
                   "qemu)")
    p.add_argument("--qemu", type=executable_file, help="the qemu-aarch64 binary (default: on PATH)")
    p.add_argument("--runner", type=executable_file,
                   help="an aarch64 runner with pytest-sme2's count markers (default: pytest-sme2's own, built)")
    add_cli_options(p, "timeout")
    p.add_argument("--models", "--models-from", action="append", dest="model_sources", metavar="SRC",
                   help="module name or .py file that registers models (repeatable), as profile's")
    add_cli_options(p, "cache-dir")
    p.add_argument("--out", type=Path, default=Path("sme2_out"), help="output directory (default sme2_out)")
    p.add_argument("--json", type=Path, dest="json_out", help="write every arm's counts as JSON")
    p.set_defaults(files_read=(("--pte", "pte"), ("--inputs", "inputs")), files_written=(("--json", "json_out"),))


def cmd_count(args: argparse.Namespace) -> int:
    from pytest_sme2.measure.counts import count_arms
    from pytest_sme2.measure.hostlock import LOCK_NAME
    from pytest_sme2.measure.profile import stderr_progress
    from pytest_sme2.measure.recipe import ProgramFile
    from pytest_sme2.models import get_model, load_model_sources
    from pytest_sme2.program.export import export_model
    from pytest_sme2.report.instruction_table import counts_table
    from pytest_sme2.runners.registry import RunnerContext, make_runner
    from pytest_sme2.store.files import write_atomic

    load_model_sources(_model_sources(args))
    args.threads = 1
    if args.inputs and args.pte is None:
        raise ConfigError("--inputs goes with --pte; a registered model (--model) brings its own example inputs")
    options = _device_options(args)
    specs = [get_model(name) for name in args.models or ()]
    runner = make_runner(options, RunnerContext(progress=stderr_progress, runner_cache=args.cache_dir / "runners"))
    programs: list[Any] = [ProgramFile(args.pte, tuple(args.inputs))] if args.pte is not None else []
    programs += [export_model(spec, dtype=args.dtype or "fp32", backend=args.backend or "xnnpack",
                              cache_dir=args.cache_dir, progress=stderr_progress) for spec in specs]
    results = {}
    for program in programs:
        label = "_".join(p for p in (program.name, program.dtype, program.backend) if p != "unknown")
        arms = count_arms(runner, program, out_dir=args.out / label, label=label, timeout_s=args.timeout,
                          lock_file=args.cache_dir / LOCK_NAME)
        print(counts_table(arms, what=label) + "\n")
        results[label] = {arm: counts.to_dict() for arm, counts in arms.items()}
    if args.json_out is not None:
        print(f"Wrote: {write_atomic(args.json_out, json.dumps(results, indent=2) + chr(10), what='counts')}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytest-sme2",
        description="Performance-regression analysis of ExecuTorch models (SME2 on/off, Arm CPUs).",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("--version", action="version", version=f"pytest-sme2 {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_analyze(sub)
    _add_profile(sub)
    _add_compare(sub)
    _add_report_commands(sub)
    _add_build_runner(sub)
    _add_count(sub)
    _add_rebuild(sub)
    _add_rebaselined(sub)
    from pytest_sme2.history import cli as history_cli

    history_cli.add_parser(sub)
    return parser


def _add_baseline_dir(p: Any) -> None:
    """``--baseline-dir``, as ``rebuild`` and ``rebaselined`` take it."""
    p.add_argument("--baseline-dir", type=Path, default=Path(".sme2_baselines"),
                   help="directory of baseline JSON files (default .sme2_baselines)")


def _add_rebuild(sub: Any) -> None:
    p = sub.add_parser(
        "rebuild", help="rebuild committed baselines' programs into the artifact store from their commits (proven by "
        "sha256); exit 1 when one cannot be",
        description="Put what each baseline measured (its .pte, inputs, and pytest-sme2's own runner build) into the "
        "artifact store, rebuilding what the store lacks from the commit the baseline was recorded at (a git worktree "
        "under --cache-dir/rebuild; your model code as it was) and keeping it only when it hashes to the baseline's: "
        "what the plugin does for a changed test on a fresh runner, done ahead (a CI step before the tests, or to "
        "check that every committed baseline can be rebuilt). Needs the git history (fetch-depth: 0).")
    p.add_argument("baselines", nargs="*", type=Path, metavar="BASELINE",
                   help="baseline files (default: every *.json in --baseline-dir)")
    _add_baseline_dir(p)
    p.add_argument("--artifact-dir", type=Path, default=Path(".sme2_artifacts"),
                   help="the artifact store the plugin reads (default .sme2_artifacts, as --sme2-artifact-dir)")
    p.add_argument("--cache-dir", type=Path, default=Path(".sme2_cache"),
                   help="export cache and rebuild worktrees (default .sme2_cache, as --sme2-cache-dir)")


def _add_rebaselined(sub: Any) -> None:
    p = sub.add_parser(
        "rebaselined", help="baselines re-recorded since the merge-base, against the merge-base's; exit 1 on an "
        "unacknowledged regression",
        description="Compare every baseline file that differs from its version at `git merge-base HEAD BASE` with "
        "that version, by the rule two sessions get (as `compare`): a re-recorded baseline that is slower fails unless "
        "sme2_acknowledged.json accepts it (docs/history.md#re-recorded-baselines).")
    p.add_argument("--base", required=True, help="the branch the change goes into, e.g. origin/main")
    _add_baseline_dir(p)
    p.add_argument("--ack", type=Path, default=Path("sme2_acknowledged.json"),
                   help="acknowledged changes (default sme2_acknowledged.json; missing = none)")
    p.add_argument("--margin", type=percent, default=5.0, help="relative margin, e.g. 5%% (default 5%%)")
    p.add_argument("--drift-allowance", type=nonnegative_percent, default=0.0, metavar="PCT",
                   help="how far the machines that recorded the two drift apart, added to the margin of a changed "
                   "artifact, as compare's (default 0)")


def cmd_rebaselined(args: argparse.Namespace) -> int:
    from pytest_sme2.gate.verdict import GateConfig
    from pytest_sme2.history import acknowledge
    from pytest_sme2.history.rebaselined import rebaselined

    config = GateConfig(margin=args.margin / 100, drift_allowance=args.drift_allowance / 100)
    report = rebaselined(args.baseline_dir, base_ref=args.base, config=config,
                         acknowledgements=acknowledge.load(args.ack))
    print("\n".join(report.lines()))
    return EXIT_REGRESSION if report.failed else EXIT_OK


def _add_report_commands(sub: Any) -> None:
    p = sub.add_parser("report", help="render the markdown report from a --sme2-json results file or a run directory")
    p.add_argument("source", type=Path, nargs="+", help="results JSON file(s) or directories holding them")
    p.add_argument("--out", type=Path, help="markdown file to write (default: print the report)")
    p.add_argument("--combine", action="store_true", help="one combined report across several results files/devices")
    p.add_argument("--title", help="report title")
    p.add_argument("--format", choices=("markdown", "bmf", "gab", "pytest-benchmark"), default="markdown",
                   help="markdown (default); bmf = Bencher Metric Format (bencher run --adapter json); gab = "
                   "github-action-benchmark's customSmallerIsBetter JSON; pytest-benchmark = a --benchmark-json "
                   "document for pytest-benchmark compare. The three JSON formats take one results file")
    p.set_defaults(files_read=(("SOURCE", "source", "*.json"),), files_written=(("--out", "out"),))
    t = sub.add_parser("export-trace", help="convert an ETDump to Chrome trace / Perfetto JSON",
                       description="Convert an ETDump to Chrome trace JSON: one track per run, each operator "
                       "nested in its execute call. Open it in https://ui.perfetto.dev or chrome://tracing.")
    t.add_argument("trace", type=Path,
                   help="ETDump file written by a tracer-enabled executor_runner (or by the profile command)")
    t.add_argument("--out", type=Path, default=Path("trace.json"),
                   help="where to write the trace JSON (default trace.json)")
    t.set_defaults(files_read=(("TRACE", "trace"),), files_written=(("--out", "out"),))


# ---------------------------------------------------------------------------------------- analyze


def cmd_analyze(args: argparse.Namespace) -> int:
    from pytest_sme2.analysis.run import analyze_trace
    from pytest_sme2.evidence.categories import DEFAULT, CategoryRules
    from pytest_sme2.evidence.kernels import read_xnnpack_log
    from pytest_sme2.evidence.trace import etrecord_backend, read_etdump
    from pytest_sme2.report.csv import write_csvs
    from pytest_sme2.report.kernel_view import operator_evidence_table
    from pytest_sme2.report.text import bottleneck_lines, category_table, latency_line, operator_table, render_table
    from pytest_sme2.store.files import write_atomic
    from pytest_sme2.thirdparty import third_party_output

    rules = CategoryRules.load(args.rules) if args.rules else DEFAULT
    kernel_log = read_xnnpack_log(args.xnnlog) if args.xnnlog else None  # a file that is not one is refused
    csv_dir = args.csv_dir or args.json_out.parent
    backend = None
    if args.etrecord:
        # Reading an ETRecord imports executorch's devtools, torch and torchao, whose load messages and notices
        # ("Failed to load ..._C_mxfp8...so", _pytree) are not the analysis: into a log beside the summary.
        with third_party_output(csv_dir / "third_party.log", label=f"analyze --etrecord {args.etrecord}",
                                python_output=True):
            backend = etrecord_backend(args.etrecord)
    timeline = read_etdump(args.trace, rules=rules, delegate_backend=backend)
    analysis = analyze_trace(timeline, warmup=args.warmup, kernel_log=kernel_log)
    stem = args.trace.name.removesuffix(".etdump").removesuffix(".etdp")
    csvs = write_csvs(timeline, analysis, csv_dir, stem)
    summary = analysis.to_dict()
    summary["csv_files"] = [str(p) for p in csvs]
    summary["csv_dir"] = str(csv_dir)
    write_atomic(args.json_out, json.dumps(summary, indent=2) + "\n", what="analysis summary")
    if not args.quiet:
        print(f"Trace: {args.trace} ({analysis.runs_total} runs)")
        print(latency_line(analysis))
        print()
    print(category_table(analysis))
    if not args.quiet:
        print()
        print(operator_table(analysis))
        print()
        print(bottleneck_lines(analysis))
        evidence = operator_evidence_table(analysis)
        if evidence is not None and analysis.trace_evidence is not None:
            print(f"\nSME evidence: {analysis.trace_evidence.summary()}.")
            print(render_table(evidence))
        print(f"\nportable ops {analysis.portable_ms:.3f} ms/run, delegated ops {analysis.delegated_ms:.3f} ms/run")
        kept = f" (torch's and executorch's output: {csv_dir / 'third_party.log'})" if args.etrecord else ""
        print(f"Wrote: {args.json_out} and {len(csvs)} CSV files in {csv_dir}{kept}")
    return EXIT_OK


# ---------------------------------------------------------------------------------------- profile


def cmd_profile(args: argparse.Namespace) -> int:
    from pytest_sme2.measure.profile import progress_to
    from pytest_sme2.thirdparty import user_stderr

    with user_stderr() as terminal:  # progress reaches the user while the runtime's output goes to the log
        progress = progress_to(terminal)
        try:
            return _profile(args, progress)
        finally:
            progress.done()


def _profile(args: argparse.Namespace, progress: StreamProgress) -> int:
    from pytest_sme2.evidence.categories import CategoryRules
    from pytest_sme2.measure.hostlock import LOCK_NAME, heavy_work
    from pytest_sme2.measure.profile import profile_exported
    from pytest_sme2.measure.recipe import ProgramFile
    from pytest_sme2.models import get_model, load_model_sources
    from pytest_sme2.program.export import export_model
    from pytest_sme2.report.text import category_table, latency_line, operator_table
    from pytest_sme2.runners.local import check_input_files
    from pytest_sme2.runners.registry import RunnerContext
    from pytest_sme2.runners.registry import device as device_row
    from pytest_sme2.store.files import check_writable_dir, write_atomic
    from pytest_sme2.thirdparty import third_party_output

    load_model_sources(_model_sources(args))  # a module of them may register a device of the user's too
    options = _device_options(args)
    if args.inputs and args.pte is None:
        raise ConfigError("--inputs goes with --pte; a registered model (--model) brings its own example inputs")
    rules = CategoryRules.load(args.rules) if args.rules else None
    twice = sorted({name for name in args.models or () if args.models.count(name) > 1})
    if twice:
        # The second measurement would replace the first's summary in the same --out directory.
        raise ConfigError(f"--model {', '.join(twice)} given more than once: each model is measured once into "
                          f"{args.out}/<model>_<dtype>_<backend>; give each name once (for more blocks: --blocks)")
    try:
        specs = [get_model(name) for name in args.models or ()]  # an unknown name fails here, before anything
    except ModelError as exc:
        raise ModelError(f"{exc} Model sources here: {args.models_where}.") from None
    row = device_row(options.device)
    # Measuring on this host's CPUs waits for any other measurement here (a pytest run of the same project shares the
    # lock in its cache directory): two at once skew each other with nothing in the evidence. A phone is its own.
    # Builds and exports hold it shared: they wait for a measurement, never run beside one.
    lock = args.cache_dir / LOCK_NAME if row.host_lock else None
    context = RunnerContext(progress=progress, runner_cache=args.cache_dir / "runners")
    # pytest-sme2's own runner is built (or found in the cache) now
    with heavy_work(lock if row.builds_own_runner(options) else None, what="building the runner", progress=progress):
        runner = row.make(options, context)
    runner.heartbeat = progress.tick  # a long runner process (an emulated block) shows its elapsed time
    check_writable_dir(args.out, what="--out directory")  # before minutes of export and measurement
    targets: list[Any] = []
    if args.pte is not None:
        if args.inputs and not runner.in_process:  # the local runner reads them itself, as bad input
            check_input_files(args.pte, args.inputs)
        targets.append(ProgramFile(args.pte, tuple(args.inputs), args.dtype or "unknown", args.backend or "unknown"))
    for spec in specs:
        with heavy_work(lock, what=f"exporting {spec.name}", progress=progress):
            targets.append(export_model(spec, dtype=args.dtype or "fp32", backend=args.backend or "xnnpack",
                                        cache_dir=args.cache_dir, progress=progress))
    for exported in targets:
        label = "_".join(part for part in (exported.name, exported.dtype, exported.backend) if part != "unknown")
        out_dir = args.out / label
        # What the runtime prints (executorch's C++ log, cpuinfo) is not the result: into a log file.
        third_party_log = out_dir / "third_party.log"
        with third_party_output(third_party_log, label=f"profile {label}", python_output=True):
            profile = profile_exported(
                exported, runner, runs=args.runs, warmup=args.warmup, threads=args.threads, out_dir=out_dir,
                blocks=args.blocks, timeout_s=args.timeout, label=label, rules=rules, progress=progress,
                busy_limit=args.busy_limit / 100, lock_file=lock, time_budget_s=args.time_budget,
            )
        progress.done()  # the results below start on a clean line
        analysis = profile.analysis
        where = f"{runner.name} {profile.device.get('serial', '')}".rstrip()
        print(f"== {label} on {where} ({profile.build}), {args.threads} thread(s); {args.blocks} block(s) of "
              f"{args.warmup} warm-up + {args.runs} measured executions")
        if runner.emulated:
            print("EMULATED: every time below is emulated time under QEMU, not device time (150-500x slower than "
                  "native; SME emulates more slowly than NEON): use it for which operators and kernels ran, not speed")
        if profile.invalid_reason:
            print(f"INVALID: {profile.invalid_reason}")
        if profile.note:
            print(f"note: {profile.note}")
        if profile.disturbance:  # blocks re-measured, or runs and blocks a time budget shrank
            print(f"note: {profile.disturbance}")
        if rules is not None and not analysis.per_operator:
            print(f"note: --rules {args.rules} changes nothing here: {runner.name} records no per-operator trace "
                  "(pass --runner, a tracer-enabled executor_runner)")
        print(latency_line(analysis))
        print(category_table(analysis))
        if analysis.per_operator:
            print(operator_table(analysis))
        summary = analysis.to_dict()
        summary["profile"] = {k: v for k, v in profile.to_dict().items() if k != "analysis"}
        path = write_atomic(out_dir / "analysis_summary.json", json.dumps(summary, indent=2) + "\n",
                            what="analysis summary")
        print(f"Wrote: {path} (runtime output: {third_party_log})\n")
    return EXIT_OK


def _device_options(args: argparse.Namespace) -> Any:
    """``profile``'s device and its options as the plugin's :class:`~pytest_sme2.options.Sme2Options` (every argument
    whose name is an option's), checked by the device's registry row as the plugin checks them, in the CLI's spelling.
    """
    import dataclasses
    import os

    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners import registry

    name = args.device or ("host" if args.runner else "local")
    registry.device(name, sources=f"a model source ({args.models_where})")
    named = {f.name for f in dataclasses.fields(Sme2Options)} - {"device"}
    given = {key: value for key, value in vars(args).items() if key in named}
    options = registry.resolve(Sme2Options(device=name, **given))
    registry.check_options(options, registry.Spelling("--", "--device ", frozenset(given)))
    registry.check_threads_here(options, os.cpu_count() or 0)
    return options


def _model_sources(args: argparse.Namespace) -> tuple[str, ...]:
    """The model sources ``profile`` imports: ``--models``, else the project's ini ``sme2_models`` (as the plugin).

    Sets ``args.models_where``: where they came from, for the unknown-model message.
    """
    from pytest_sme2.inifile import find_inifile

    if args.model_sources:
        args.models_where = f"--models {' '.join(args.model_sources)}"
        return tuple(args.model_sources)
    ini = find_inifile(Path.cwd())
    if ini is None:
        args.models_where = (f"no pytest ini file found from {Path.cwd()} upward, so no sme2_models; pass "
                             "--models FILE.py")
        return ()
    sources = ini.model_sources()
    args.models_where = (f"sme2_models of {ini.path}: {', '.join(sources)}" if sources else
                         f"{ini.path} lists no sme2_models; pass --models FILE.py or add it there")
    return sources


# ---------------------------------------------------------------------------------------- compare


def _recorded_by_test(path: Path) -> dict[str, Any]:
    """Read any of our JSON kinds into ``{test id: judge.Recorded}`` (single-profile files use ``""``).

    Each keeps the identity and artifact its file records (a baseline, a ``profile`` summary, a results file;
    an ``analyze`` summary has neither).
    """
    from pytest_sme2.analysis.run import Analysis
    from pytest_sme2.evidence.memory import Memory
    from pytest_sme2.gate.verdict import Samples
    from pytest_sme2.judge import Recorded
    from pytest_sme2.measure.profile import stored_identity
    from pytest_sme2.store.artifacts import Artifact
    from pytest_sme2.store.baseline import Baseline

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start}), so not a pytest-sme2 JSON file; pass an "
                          "analysis summary, a baseline or a --sme2-json results file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path} is not a pytest-sme2 JSON file (expected an object)")
    if "samples_ms" in data:
        b = Baseline.from_dict(data, source=str(path))
        return {b.test_id: Recorded(b.samples(), b.identity, b.artifact, b.memory)}
    if "e2e_ms" in data and "runs" in data:
        try:
            a = Analysis.from_dict(data)
        except Sme2Error as exc:
            raise ConfigError(f"{path}: {exc}; re-create it with pytest-sme2 analyze or profile") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(
                f"{path} looks like an analysis summary but does not match its schema ({type(exc).__name__}: "
                f"{exc}); re-create it with pytest-sme2 analyze or profile"
            ) from None
        cats = a.category_per_run_ms if a.per_operator else {}
        # ``profile`` records why a measurement cannot be trusted (thermal throttling): it must come out
        # INVALID, never a regression or a pass.
        profile = data.get("profile")
        profile = profile if isinstance(profile, Mapping) else {}
        invalid = str(profile.get("invalid_reason") or "")
        samples = Samples(a.measured_ms, a.block_sizes, cats, a.block_sizes if cats else (), invalid,
                          category_operators=a.delegated_operators if cats else {})
        art = profile.get("artifact")
        try:
            artifact = Artifact.from_dict(art) if isinstance(art, Mapping) else None
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: its profile's artifact does not match the schema ({type(exc).__name__}: "
                              f"{exc}); re-create it with pytest-sme2 profile") from None
        return {"": Recorded(samples, stored_identity(profile), artifact,
                             Memory.maybe(profile.get("memory")))}
    if "tests" in data:
        from pytest_sme2.results import SessionResults

        results = SessionResults.from_dict(data, source=str(path))
        out = {}
        for t in results.tests:
            if t.profile is not None:
                out[t.test_id] = Recorded(t.profile.samples(), t.profile.identity, t.profile.artifact,
                                          t.profile.memory)
        return out
    raise ConfigError(
        f"{path} is neither an analysis summary (pytest-sme2 analyze/profile), a baseline file, "
        "nor a --sme2-json results file"
    )


def cmd_compare(args: argparse.Namespace) -> int:
    from pytest_sme2.gate.verdict import GateConfig
    from pytest_sme2.judge import compare_recorded
    from pytest_sme2.store.files import write_atomic

    old, new = _recorded_by_test(args.old), _recorded_by_test(args.new)
    strict = ", strict" if args.strict else ""
    allowance = (f", drift allowance +{args.drift_allowance:g}% (hand-set)" if args.drift_allowance is not None else
                 f", drift allowance calibrated from {args.history}" if args.history is not None else "")
    print(f"pytest-sme2 compare: baseline {args.old} -> candidate {args.new} (margin +{args.margin:g}%{allowance}"
          f"{strict})")
    missing: list[str] = []
    not_in_old: list[str] = []
    if "" in old and "" in new and len(old) == len(new) == 1:
        pairs = [("", old[""], new[""])]
    else:
        common = [k for k in new if k in old]
        if not common:
            raise ConfigError(f"{args.old} and {args.new} have no test in common; compare files of the same suite")
        pairs = [(k, old[k], new[k]) for k in common]
        missing = [k for k in old if k not in new]
        not_in_old = [k for k in new if k not in old]
    config = GateConfig(margin=args.margin / 100, strict=args.strict,
                        drift_allowance=args.drift_allowance / 100 if args.drift_allowance is not None else None)
    calibrate = None
    if args.history is not None:
        from pytest_sme2.history.calibration import HistoryCalibration

        calibrate = HistoryCalibration(args.history)
    worst = EXIT_OK
    verdicts = {}
    refused: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for test_id, a, b in pairs:
        outcome = compare_recorded(a, b, config, test_id=test_id, calibrate=calibrate)
        verdict = outcome.verdict
        if verdict is None:
            refused[test_id or "comparison"] = list(outcome.refused)
            counts["refused"] = counts.get("refused", 0) + 1
            print(f"{'REFUSED':<12} {test_id or args.new.name}  measured on another device identity than in "
                  f"{args.old.name}, so not compared; differs in: {'; '.join(outcome.refused)}")
            continue
        verdicts[test_id or "comparison"] = verdict.to_dict()
        counts[verdict.status.value] = counts.get(verdict.status.value, 0) + 1
        e2e = verdict.e2e
        head = f"{verdict.status.value.upper():<12} {test_id or args.new.name}"
        if e2e and e2e.interval:
            head += f"  median {e2e.baseline:.4f} -> {e2e.candidate:.4f} ms ({e2e.delta_pct:+.1f}%)"
        print(head)
        for line in verdict.summary().splitlines():
            print(f"    {line}")
        if verdict.failed:
            worst = EXIT_REGRESSION
    for test_id in missing:
        print(f"{'MISSING':<12} {test_id}  in {args.old.name}, not measured in {args.new.name} (not run, skipped, or "
              "failed before it measured): not compared")
    for test_id in not_in_old:
        print(f"{'NOT IN OLD':<12} {test_id}  nothing to compare it with in {args.old.name}")
    if missing:
        worst = EXIT_REGRESSION  # a test that was not measured must not look green
    tally = [f"{n} {status}" for status, n in sorted(counts.items())]
    if missing:
        tally.append(f"{len(missing)} missing from {args.new.name}")
    if not_in_old:
        tally.append(f"{len(not_in_old)} not in {args.old.name}")
    print(f"{len(pairs)} compared: {', '.join(tally)}")
    if args.json_out:
        doc = {"schema_version": 1, "verdicts": verdicts, "missing": missing, "not_in_old": not_in_old,
               "refused": refused}
        write_atomic(args.json_out, json.dumps(doc, indent=2) + "\n", what="verdicts")
    if refused:
        print(f"pytest-sme2 compare: error: {len(refused)} test(s) of {args.new} were measured on another device "
              f"identity than in {args.old} (listed REFUSED above): a baseline belongs to its device; compare files "
              "from the same device (and threads, dtype, backend), or record a baseline on this one", file=sys.stderr)
        return EXIT_USAGE
    return worst


# ---------------------------------------------------------------------------------------- reports


def _report_dashboard(args: argparse.Namespace, files: list[Path], loaded: list[Any]) -> int:
    """One results file in a dashboard's JSON format, to --out or stdout."""
    from pytest_sme2.report.dashboards import render, write_dashboard

    if len(loaded) != 1:
        raise ConfigError(f"--format {args.format} takes one results file, got {len(loaded)} "
                          f"({', '.join(str(f) for f in files)}); run it once per file")
    if args.out is None:
        sys.stdout.write(json.dumps(render(loaded[0], args.format), indent=1) + "\n")
        return EXIT_OK
    write_dashboard(args.out, loaded[0], args.format)
    print(f"Wrote: {args.out}")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from pytest_sme2.report.markdown import render_combined, render_markdown
    from pytest_sme2.results import load_results
    from pytest_sme2.store.files import write_atomic

    files: list[Path] = []
    for src in args.source:
        if src.is_dir():
            found = sorted(src.glob("*.json"))
            if not found:
                raise ConfigError(f"directory {src} holds no results JSON; pass the file written by --sme2-json")
            files.extend(found)
        else:
            files.append(src)
    loaded = [load_results(f) for f in files]
    if args.format != "markdown":
        return _report_dashboard(args, files, loaded)
    combine = args.combine or len(loaded) > 1
    text = render_combined(loaded) if combine else render_markdown(loaded[0], title=args.title)
    if args.out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return EXIT_OK
    write_atomic(args.out, text, what="markdown report")
    print(f"Wrote: {args.out}")
    return EXIT_OK


def cmd_export_trace(args: argparse.Namespace) -> int:
    from pytest_sme2.evidence.trace import read_etdump
    from pytest_sme2.report.chrome_trace import etdump_to_chrome_trace
    from pytest_sme2.store.files import write_atomic

    doc = etdump_to_chrome_trace(read_etdump(args.trace))
    write_atomic(args.out, json.dumps(doc) + "\n", what="trace JSON")
    print(f"Wrote: {args.out} ({len(doc['traceEvents'])} events); open it in https://ui.perfetto.dev")
    return EXIT_OK


def cmd_build_runner(args: argparse.Namespace) -> int:
    from pytest_sme2.measure.profile import stderr_progress
    from pytest_sme2.runners.build import TARGETS, build_runner
    from pytest_sme2.store.files import write_atomic

    targets = TARGETS if args.target == "all" else (args.target,)
    records = []
    for target in targets:
        build = build_runner(target, cache_dir=args.cache_dir, wheel=args.wheel, force=args.force,
                             progress=stderr_progress)
        how = f"built in {build.seconds:.1f} s" if build.built else "from the cache"
        print(f"{target}: {build.path} ({how}; executorch {build.executorch_version}, {build.compiler})")
        if build.sysroot:
            print(f"  runs under: qemu-aarch64 -cpu max -L {build.sysroot} {build.path} --model_path M.pte ...")
        records.append(build.to_dict())
    if args.json_out is not None:
        write_atomic(args.json_out, json.dumps(records, indent=2) + "\n", what="build records")
    return EXIT_OK


def cmd_rebuild(args: argparse.Namespace) -> int:
    from pytest_sme2.errors import BaselineError
    from pytest_sme2.measure.hostlock import LOCK_NAME
    from pytest_sme2.measure.profile import stderr_progress
    from pytest_sme2.measure.rebuild import rebuild_baseline
    from pytest_sme2.store.artifacts import ArtifactStore

    files = list(args.baselines)
    if not files:
        if not args.baseline_dir.is_dir():
            raise BaselineError(f"no baseline directory {args.baseline_dir}: name one with --baseline-dir, or "
                                "baseline files")
        files = sorted(args.baseline_dir.glob("*.json"))
        if not files:
            raise BaselineError(f"{args.baseline_dir} holds no baseline (*.json): record them with "
                                "pytest --sme2-update-baseline first")
    for path in files:
        if not path.is_file():
            raise BaselineError(f"baseline file {path} does not exist")
    store = ArtifactStore(args.artifact_dir)
    failed = 0
    for path in files:
        made = rebuild_baseline(path, store, args.cache_dir, progress=stderr_progress,
                                lock_file=args.cache_dir / LOCK_NAME)
        failed += not made.ok
        print(f"{'ok' if made.ok else 'NOT REBUILT'}  {path.name}: {made.message}")
    print(f"{len(files) - failed} of {len(files)} baselines have their program in {store.root}"
          + (f"; {failed} cannot be rebuilt (their changed tests are compared with the stored samples)" if failed
             else ""))
    return EXIT_REGRESSION if failed else EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    from pytest_sme2.history import cli as history_cli

    return history_cli.run(args)


COMMANDS = {
    "analyze": cmd_analyze, "profile": cmd_profile, "compare": cmd_compare, "report": cmd_report,
    "export-trace": cmd_export_trace, "build-runner": cmd_build_runner, "history": cmd_history,
    "rebaselined": cmd_rebaselined, "count": cmd_count, "rebuild": cmd_rebuild,
}


def refuse_overlapping_files(args: argparse.Namespace) -> None:
    """Refuse a command whose outputs share a path, or write a file it reads, before it runs (one rule for all).

    Each parser declares them with ``set_defaults``: ``files_read`` and ``files_written`` hold ``(name, dest)``
    pairs (a list value is several files); a read entry may add a glob, for a directory the command reads files of
    (``report DIR``: its ``*.json``; a history store: its run files).
    """
    import os

    from pytest_sme2.store.files import files_matching, refuse_overlaps

    def named(entries: Sequence[tuple[str, ...]]) -> list[tuple[str, Path]]:
        out: list[tuple[str, Path]] = []
        for name, dest, *pattern in entries:
            value = getattr(args, dest, None)
            for path in value if isinstance(value, list) else [value]:
                if path is None:
                    continue
                found = files_matching(Path(path), pattern[0]) if pattern else []
                out += [(f"{name} {path}", f) for f in found] or [(name, Path(path))]
        return out

    written = named(getattr(args, "files_written", ()))
    summary = os.environ.get("GITHUB_STEP_SUMMARY", "").strip()
    if getattr(args, "step_summary", False) and summary:
        written.append(("$GITHUB_STEP_SUMMARY (--step-summary)", Path(summary)))
    refuse_overlaps(written, named(getattr(args, "files_read", ())))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        refuse_overlapping_files(args)
        return COMMANDS[args.command](args)
    except Sme2Error as exc:
        print(f"pytest-sme2 {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("pytest-sme2: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
