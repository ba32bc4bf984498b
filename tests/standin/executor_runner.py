"""A stand-in for ExecuTorch's ``executor_runner``, for tests: the same flags, the same log lines, honest timings.

Run through a wrapper written by :func:`standin.make_standin`, which bakes the mode into the
environment (``SME2_STANDIN_MODE``, ``SME2_STANDIN_TRACE``, ``SME2_STANDIN_FAULT``):

- ``replay``: replays the first ``--num_executions`` runs of a real recorded ETDump: writes the
  recording to ``--etdump_path`` cut to its load block and those runs (:func:`trimmed_etdump`) and
  logs their own ``Method::execute`` times as the ``Iteration`` lines. The first log line says that
  the timings are from the recording, not measured now. Asked for more runs than the recording
  holds, it exits 2 with a stand-in error: it never invents a run.
- ``measure``: really runs the ``.pte`` with the executorch Python runtime, times each execution
  with ``perf_counter_ns`` and writes an ETDump holding exactly what it measured: the method load
  and one ``Method::execute`` per execution. It never invents per-operator events.

``SME2_STANDIN_TRACER=0`` makes it a build without the event tracer: ``--etdump_path`` is an unknown flag
and no trace is written (a timing-only build; replay then logs only the recording's ``Iteration`` times).
``SME2_STANDIN_XNNLOG`` makes it an XNNPACK-logging build: the run replays that recorded log (one real
execution's debug log) instead. On a host the log goes to stderr, where such a build writes it; on the
emulated phone (which has a logcat buffer at :data:`LOGCAT_BUFFER`) XNNPACK's own lines go to logcat
with tag ``XNNPACK``, as ``__android_log_print`` puts them there, and the runtime's lines to stderr.

A fault (``crash``, ``hang``, ``garbage``, ``no_trace``) replaces the run with that misbehaviour;
``ignore_count`` replays every recorded run whatever ``--num_executions`` asks (a runner that
ignores the flag).
Flags follow gflags: ``--flag value`` or ``--flag=value``; an unknown flag exits 1 with gflags'
message. Log lines go to stderr in the runtime's format
(``I 00:00:00.001783 executorch:executor_runner.cpp:476] ...``).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import struct
import subprocess  # here, not where a cache miss needs it: the same shared libraries mapped either way
import sys
import time
import warnings
from pathlib import Path

START_NS = time.perf_counter_ns()

#: The flags of executor_runner v1.4.1 (tracer build) and their defaults.
FLAGS = {
    "model_path": "model.pte",
    "data_path": "",
    "inputs": "",
    "output_file": "",
    "print_output": "summary",
    "num_executions": "1",
    "method_name": "",
    "etdump_path": "model.etdump",
    "cpu_threads": "-1",
    "server_mode": "false",
}
BOOL_FLAGS = {"server_mode"}

#: The emulated phone's logcat main buffer (tests/emulated_device/shims/logcat); absent on a host.
LOGCAT_BUFFER = Path("/emulated/logcat")
#: ``Note (XNNPACK): <message>`` as XNNPACK logs to stderr -> level and message (logcat has no prefix).
XNNPACK_LINE = re.compile(r"^(Debug|Note|Info|Warning|Error|Fatal) \(XNNPACK\): (.*)$")
LOGCAT_LEVELS = {"Debug": "D", "Note": "I", "Info": "I", "Warning": "W", "Error": "E", "Fatal": "F"}

MODES = ("replay", "measure")
FAULTS = ("crash", "hang", "garbage", "no_trace", "ignore_count")


def log(message: str, line: int = 0, level: str = "I") -> None:
    """One runtime log line on stderr, timestamped from process start like the real runner."""
    seconds = (time.perf_counter_ns() - START_NS) / 1e9
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    sys.stderr.write(
        f"{level} {int(hours):02d}:{int(minutes):02d}:{secs:09.6f} executorch:executor_runner.cpp:{line}] {message}\n"
    )
    sys.stderr.flush()


def abort(message: str, line: int = 0) -> None:
    """What a failed ET_CHECK does in the real runner: a fatal log line, then SIGABRT's exit status."""
    log(message, line, level="F")
    sys.stderr.write("Aborted (core dumped)\n")
    sys.stderr.flush()
    os._exit(134)


def parse_flags(argv: list[str], *, tracer: bool = True) -> dict[str, str]:
    """gflags-style parsing: ``--name=value``, ``--name value``, ``-name``; bools alone or ``--noname``.

    Without the tracer the runner has no ``etdump_path`` flag at all, as a real build without it.
    """
    values = dict(FLAGS)
    if not tracer:
        del values["etdump_path"]
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg in ("-", "--"):
            i += 1  # gflags leaves positional arguments alone; the runner ignores them
            continue
        body = arg.lstrip("-")
        name, eq, value = body.partition("=")
        if name not in values and name.startswith("no") and name[2:] in BOOL_FLAGS and not eq:
            values[name[2:]] = "false"
            i += 1
            continue
        if name not in values:
            sys.stderr.write(f"ERROR: unknown command line flag '{name}'\n")
            sys.exit(1)
        if not eq:
            if name in BOOL_FLAGS:
                value = "true"
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                sys.stderr.write(f"ERROR: flag '{arg}' is missing its argument\n")
                sys.exit(1)
        values[name] = value
        i += 1
    return values


def int_flag(flags: dict[str, str], name: str) -> int:
    try:
        return int(flags[name])
    except ValueError:
        sys.stderr.write(
            f"ERROR: illegal value '{flags[name]}' specified for int32 flag '{name}'\n"
        )
        sys.exit(1)


def _import_repo() -> None:
    # The stand-in reads traces with the package under test; the wrapper runs it by absolute path,
    # possibly from another directory or inside a sandbox where this tree is bind-mounted as is.
    repo = str(Path(__file__).resolve().parents[2])
    if repo not in sys.path:
        sys.path.insert(0, repo)


# ----------------------------------------------------------------------------------------- faults


def run_fault(fault: str, flags: dict[str, str]) -> None:
    log(f"stand-in executor_runner: simulating fault {fault!r}", 100)
    if fault == "crash":
        log(f"Model file {flags['model_path']} is loaded.", 476)
        abort("In function main(), assert failed (status == Error::Ok): stand-in fault 'crash'", 771)
    elif fault == "hang":
        log(f"stand-in executor_runner: hanging forever (pid {os.getpid()})", 101)
        while True:
            time.sleep(3600)
    elif fault == "garbage":
        rng = random.Random(0xBAD)
        sys.stdout.buffer.write(rng.randbytes(512))
        sys.stdout.flush()
        Path(flags.get("etdump_path", "model.etdump")).write_bytes(rng.randbytes(2048))
        sys.exit(0)
    elif fault == "no_trace":
        log(f"Model file {flags['model_path']} is loaded.", 476)
        log("stand-in executor_runner: exiting 0 without writing a trace", 102)
        sys.exit(0)
    sys.stderr.write(f"stand-in executor_runner: unknown fault {fault!r}; known: {', '.join(FAULTS)}\n")
    sys.exit(2)


# ----------------------------------------------------------------------------------------- replay


def trimmed_etdump(data: bytes, keep_blocks: int) -> bytes:
    """The recorded ETDump with only its first ``keep_blocks`` run-data blocks, every kept byte as recorded.

    The root table's ``run_data`` vector is cut by rewriting its length: the kept blocks, their
    events and strings stay byte for byte where the runtime wrote them, and the dropped blocks'
    bytes remain in the buffer unreferenced, so every flatbuffer reader (this package's, executorch's
    ``deserialize_from_etdump_flatcc``) sees exactly the kept blocks. Re-serializing with
    ``executorch.devtools.etdump.serialize`` would do the same at ~6 s of CPU per run for the import
    alone, paid by every replayed block in the test suite.
    """
    base = 4  # the runtime's files are size-prefixed
    root = base + struct.unpack_from("<I", data, base)[0]
    vtable = root - struct.unpack_from("<i", data, root)[0]
    vtable_size = struct.unpack_from("<H", data, vtable)[0]
    field = struct.unpack_from("<H", data, vtable + 6)[0] if vtable_size > 6 else 0  # field 1: run_data
    if field == 0:
        raise ValueError("the recorded ETDump has no run_data vector")
    at = root + field
    vector = at + struct.unpack_from("<I", data, at)[0]
    length = struct.unpack_from("<I", data, vector)[0]
    if not 0 < keep_blocks <= length:
        raise ValueError(f"cannot keep {keep_blocks} of the recording's {length} run-data blocks")
    out = bytearray(data)
    struct.pack_into("<I", out, vector, keep_blocks)
    return bytes(out)


def _read_recording(trace: Path) -> dict[str, object]:
    """What a replay needs of the recording, read with the package under test: each run's ``Method::execute`` time,
    the method load's time and the file-order run-data block of each execution."""
    _import_repo()
    from pytest_sme2.evidence.trace import KIND_E2E, KIND_LOAD, read_etdump

    timeline = read_etdump(trace)
    table = timeline.table
    load = table[(table["kind"] == KIND_LOAD) & (table["event_name"] == "Program::load_method")]
    return {
        "e2e_ms": [float(ms) for ms in timeline.e2e_ms_per_run()],
        "load_ms": float(load["duration_ms"].iloc[0]) if len(load) else None,
        "execute_blocks": sorted({int(b) for b in table.loc[table["kind"] == KIND_E2E, "block_index"]}),
    }


def _recording(trace: Path) -> dict[str, object]:
    """:func:`_read_recording` of ``trace``, kept in the temp directory per content of the trace and of the package's
    reader: every replayed block is a new process, and importing the reader (numpy, pandas) cost ~0.35 s of CPU per
    block, the most of a replay, thousands of times per test run. A cache that cannot be read or written is skipped."""
    import hashlib
    import json
    import tempfile

    reader = Path(__file__).resolve().parents[2] / "pytest_sme2" / "evidence" / "trace.py"
    key = hashlib.sha256(trace.read_bytes() + reader.read_bytes() + Path(__file__).read_bytes()).hexdigest()
    cached = Path(tempfile.gettempdir()) / "sme2-standin-recordings" / f"{key}.json"
    try:
        return json.loads(cached.read_text(encoding="utf-8"))  # type: ignore[no-any-return]
    except (OSError, ValueError):
        pass
    # Read (and cached) by a child process: this process maps the same shared libraries whether the cache held the
    # recording or not (the reader's numpy and pandas would be in its maps only on a miss, and a runner's libraries
    # are part of its identity: two sessions of one stand-in would differ by the cache's state).
    done = subprocess.run([sys.executable, "-c", _READ_IN_A_CHILD, __file__, str(trace), str(cached)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        abort(f"stand-in: could not read the recording {trace}: {done.stderr.strip()[-2000:]}", 200)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


_READ_IN_A_CHILD = """
import contextlib, json, runpy, sys
from pathlib import Path
standin = runpy.run_path(sys.argv[1])
recording = standin["_read_recording"](Path(sys.argv[2]))
from pytest_sme2.store.files import replace_atomically
with contextlib.suppress(OSError):  # whole or absent: another replay may read it at any time
    replace_atomically(Path(sys.argv[3]), lambda fh: fh.write(json.dumps(recording).encode("utf-8")))
print(json.dumps(recording))
"""


def run_replay(trace: Path, flags: dict[str, str], *, ignore_count: bool = False) -> None:
    """Replay the first ``--num_executions`` runs of the recording (all of them with ``ignore_count``)."""
    recording = _recording(trace)
    e2e: list[float] = recording["e2e_ms"]  # type: ignore[assignment]
    recorded = len(e2e)
    asked = int_flag(flags, "num_executions")
    runs = recorded if ignore_count else asked
    log(
        f"stand-in executor_runner: replaying recorded trace {trace.name} ({recorded} runs); "
        "timings are from that recording, not measured now",
        100,
    )
    if ignore_count:
        log(f"stand-in executor_runner: fault 'ignore_count': ignoring --num_executions={asked}, replaying all "
            f"{recorded} recorded runs", 101)
    elif not 0 < asked <= recorded:
        sys.stderr.write(
            f"stand-in executor_runner: --num_executions={asked}, but the recording {trace.name} holds "
            f"{recorded} runs; the stand-in replays recorded runs only and never invents one, so ask for "
            f"1 to {recorded} executions (or replay a longer recording)\n"
        )
        sys.exit(2)
    elif asked < recorded:
        log(f"stand-in executor_runner: replaying the first {asked} of the recording's {recorded} runs", 101)
    model = Path(flags["model_path"])
    if not model.is_file():
        abort(f"FileDataLoader::from() failed: 0x22 (model file {model} not found)", 470)
    log(f"Resetting threadpool with num threads = {flags['cpu_threads']}", 340)
    if flags["inputs"]:
        log("Loading inputs from input file(s).", 393)
    log(f"Model file {model} is loaded.", 476)
    log(f"Using method {flags['method_name'] or 'forward'}", 486)
    if recording["load_ms"] is not None:
        log(f"Model loaded in {recording['load_ms']:f} ms.", 624)
    for i, ms in enumerate(e2e[:runs], start=1):
        log(f"Iteration {i} of {runs}: {ms:f} ms", 779)
    log(f"Model executed successfully {runs} time(s) in {sum(e2e[:runs]):f} ms.", 789)
    if "etdump_path" not in flags:
        return  # a build without the tracer writes no trace
    if runs == recorded:
        # copyfile, not copy2: the copy must carry this run's mtime, as a freshly written trace does.
        shutil.copyfile(trace, flags["etdump_path"])
    else:
        # Keep the load block(s) and the blocks of the first ``runs`` executions, in file order.
        execute_blocks: list[int] = recording["execute_blocks"]  # type: ignore[assignment]
        keep = execute_blocks[runs - 1] + 1
        Path(flags["etdump_path"]).write_bytes(trimmed_etdump(trace.read_bytes(), keep))
    log(f"ETDump written to file '{flags['etdump_path']}'.", 261)


# -------------------------------------------------------------------------------------- XNNPACK log


def run_log_replay(xnnlog: Path, flags: dict[str, str]) -> None:
    """Replay one real execution's XNNPACK debug log: stderr on a host, XNNPACK's lines to logcat on the phone."""
    model = Path(flags["model_path"])
    if not model.is_file():
        abort(f"FileDataLoader::from() failed: 0x22 (model file {model} not found)", 470)
    log(f"stand-in executor_runner: replaying recorded XNNPACK log {xnnlog.name}; its kernel names and operator "
        "lines are from that recording, not from running this model now", 100)
    lines = xnnlog.read_text(encoding="utf-8", errors="replace").splitlines()
    on_phone = LOGCAT_BUFFER.exists()
    logcat: list[str] = []
    for line in lines:
        m = XNNPACK_LINE.match(line)
        if on_phone and m:
            stamp = time.strftime("%m-%d %H:%M:%S") + f".{int(time.time() * 1000) % 1000:03d}"
            pid = os.getpid()
            logcat.append(f"{stamp} {pid:5d} {pid:5d} {LOGCAT_LEVELS[m.group(1)]} XNNPACK : {m.group(2)}\n")
        else:
            sys.stderr.write(line + "\n")
    sys.stderr.flush()
    if logcat:
        with LOGCAT_BUFFER.open("a", encoding="utf-8") as fh:
            fh.write("".join(logcat))


# ---------------------------------------------------------------------------------------- measure


def _profile_event(name: str, start_ns: int, end_ns: int) -> object:
    from executorch.devtools.etdump import schema_flatcc as fb

    # Field values as the runtime writes them for framework events (chain -1, instruction 0).
    return fb.Event(
        profile_event=fb.ProfileEvent(
            name=name, chain_index=-1, instruction_id=0, delegate_debug_id_int=-1,
            delegate_debug_id_str=None, delegate_debug_metadata=None, start_time=start_ns, end_time=end_ns,
        ),
        allocation_event=None,
        debug_event=None,
    )


def write_measured_etdump(path: Path, load_span: tuple[int, int], executions: list[tuple[int, int]]) -> None:
    """An ETDump holding only measured spans: one Default block (the method load), one Execute block per run.

    ``serialize_to_etdump_flatcc`` writes a plain flatbuffer; the runtime's files (and the
    Inspector's reader) are size-prefixed, so a 4-byte little-endian length goes in front.
    """
    from executorch.devtools.etdump import schema_flatcc as fb
    from executorch.devtools.etdump.serialize import serialize_to_etdump_flatcc

    blocks = [fb.RunData(name="Default", bundled_input_index=-1, allocators=None,
                         events=[_profile_event("Program::load_method", *load_span)])]
    blocks += [
        fb.RunData(name="Execute", bundled_input_index=-1, allocators=None,
                   events=[_profile_event("Method::execute", start, end)])
        for start, end in executions
    ]
    data = serialize_to_etdump_flatcc(fb.ETDumpFlatCC(version=0, run_data=blocks))
    path.write_bytes(struct.pack("<I", len(data)) + data)


def _format_output(index: int, tensor: object, mode: str) -> str:
    values = tensor.reshape(-1).tolist()  # type: ignore[attr-defined]
    shown = values if mode == "all" else values[:10]
    text = ", ".join(f"{v:g}" for v in shown) + (", ..." if len(shown) < len(values) else "")
    sizes = ", ".join(str(d) for d in tensor.shape)  # type: ignore[attr-defined]
    return f"OutputX {index}: tensor(sizes=[{sizes}], [{text}])"


def run_measure(flags: dict[str, str]) -> None:
    _import_repo()
    model = Path(flags["model_path"])
    if not model.is_file():
        abort(f"FileDataLoader::from() failed: 0x22 (model file {model} not found)", 470)
    log("stand-in executor_runner: measuring with the executorch Python runtime; the trace holds only "
        "Program::load_method and Method::execute (no per-operator events)", 100)
    from pytest_sme2.errors import RunnerError
    from pytest_sme2.runners.local import import_runtime, read_input_files

    import_runtime()  # with the kernels of int8 programs on the portable backend, without the compiler
    from executorch.extension.pybindings import portable_lib
    from executorch.runtime import Runtime, Verification

    threads = int_flag(flags, "cpu_threads")
    if threads > 0:
        log(f"Resetting threadpool with num threads = {threads}", 340)
        portable_lib._unsafe_reset_threadpool(threads)  # before load_method: XNNPACK captures the pool
    try:
        program = Runtime.get().load_program(str(model), verification=Verification.Minimal)
    except RuntimeError as exc:
        abort(f"Program::load() failed: {exc}", 470)
    log(f"Model file {model} is loaded.", 476)
    method_name = flags["method_name"] or sorted(program.method_names)[0]
    log(f"Using method {method_name}", 486)
    load_start = time.perf_counter_ns()
    try:
        method = program.load_method(method_name)
    except RuntimeError as exc:
        abort(f"Loading of method {method_name} failed: {exc}", 600)
    load_end = time.perf_counter_ns()
    log(f"Model loaded in {(load_end - load_start) / 1e6:f} ms.", 624)
    if flags["inputs"]:
        log("Loading inputs from input file(s).", 393)
        try:
            args = read_input_files(method, model, [Path(p) for p in flags["inputs"].split(",")])
        except RunnerError as exc:
            abort(f"Failed to prepare inputs: {exc}", 400)
    else:
        import torch

        meta = method.metadata
        args = tuple(torch.ones(tuple(meta.input_tensor_meta(i).sizes())) for i in range(meta.num_inputs()))
    count = int_flag(flags, "num_executions")
    spans: list[tuple[int, int]] = []
    outputs: list[object] = []
    for i in range(1, count + 1):
        t0 = time.perf_counter_ns()
        outputs = method.execute(args)
        t1 = time.perf_counter_ns()
        spans.append((t0 - START_NS, t1 - START_NS))
        log(f"Iteration {i} of {count}: {(t1 - t0) / 1e6:f} ms", 779)
    total_ms = sum(end - start for start, end in spans) / 1e6
    log(f"Model executed successfully {count} time(s) in {total_ms:f} ms.", 789)
    if flags["print_output"] != "none":
        log(f"{len(outputs)} outputs: ", 798)
        for i, out in enumerate(outputs):
            sys.stderr.write(_format_output(i, out, flags["print_output"]) + "\n")
    if "etdump_path" not in flags:
        return  # a build without the tracer writes no trace
    write_measured_etdump(Path(flags["etdump_path"]), (load_start - START_NS, load_end - START_NS), spans)
    log(f"ETDump written to file '{flags['etdump_path']}'.", 261)


def _replay_trace() -> Path:
    trace = os.environ.get("SME2_STANDIN_TRACE", "")
    if not trace or not Path(trace).is_file():
        sys.stderr.write(f"stand-in executor_runner: replay mode needs a recorded trace; {trace!r} is not a file\n")
        sys.exit(2)
    return Path(trace)


def load_libraries(paths: list[str]) -> None:
    """Load each shared library for real and print this process' own ``/proc/self/maps`` lines of them, prefixed
    ``sme2_runner map: `` as pytest-sme2's own runner prints the libraries it loaded (``print_maps``)."""
    import ctypes

    for path in paths:
        ctypes.CDLL(path)
    with Path("/proc/self/maps").open(encoding="utf-8") as maps:
        for line in maps:
            if any(line.rstrip().endswith(path) for path in paths):
                sys.stderr.write(f"sme2_runner map: {line.rstrip()}\n")


def main(argv: list[str]) -> None:
    warnings.simplefilter("ignore")  # third-party import noise would clutter the runner log
    time.sleep(float(os.environ.get("SME2_STANDIN_PAUSE") or 0))
    flags = parse_flags(argv, tracer=os.environ.get("SME2_STANDIN_TRACER", "1") != "0")
    libraries = [p for p in os.environ.get("SME2_STANDIN_LIBS", "").split(":") if p]
    if libraries:
        load_libraries(libraries)
    mode = os.environ.get("SME2_STANDIN_MODE", "replay")
    fault = os.environ.get("SME2_STANDIN_FAULT", "")
    xnnlog = os.environ.get("SME2_STANDIN_XNNLOG", "")
    if fault == "ignore_count":
        run_replay(_replay_trace(), flags, ignore_count=True)
    elif fault:
        run_fault(fault, flags)
    elif xnnlog:
        run_log_replay(Path(xnnlog), flags)
    elif mode == "replay":
        run_replay(_replay_trace(), flags)
    elif mode == "measure":
        run_measure(flags)
    else:
        sys.stderr.write(f"stand-in executor_runner: unknown mode {mode!r}; known: {', '.join(MODES)}\n")
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
