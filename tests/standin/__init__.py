"""An ``executor_runner`` stand-in for tests: replays real recorded traces or measures for real, or misbehaves.

:func:`make_standin` writes an executable wrapper with its mode baked in; point a
:class:`~pytest_sme2.runners.host.HostRunner` (or an emulated Android device) at it like at a real
runner. The wrapper is a ``/bin/sh`` script holding absolute paths of the Python interpreter, the
stand-in script and the recorded trace, so it keeps working when copied elsewhere, and inside a
sandbox as long as those paths are bind-mounted at the same place.

The stand-in never invents a measurement: replayed timings come from a real recording (and the log
says so), measured ones from ``perf_counter_ns`` around real executions, with no per-operator events.

Three kinds of build, as the plugin's run modes need them (docs/run-modes.md): the default is a traced
build; ``tracer=False`` stands in for a timing-only build (no ``--etdump_path`` flag, no trace, only the
``Iteration`` lines); ``xnnlog=`` for an XNNPACK-logging build, which replays a recorded XNNPACK log (to
stderr on a host; on the emulated phone XNNPACK's lines go to its logcat buffer, as on Android).
``sme2_kernels.xnnlog`` beside this file is not a recording: a few hand-written log lines naming real
XNNPACK SME2 kernels (every recording in tests/data is x86), for the test whose SME2 kernel check passes.
A replay honours ``--num_executions``: it replays the recording's first N runs, and refuses (exit 2)
more runs than the recording holds (30 for every trace in ``tests/data``).
"""

from __future__ import annotations

import platform
import shlex
import stat
import struct
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().with_name("executor_runner.py")
MODES = ("replay", "measure")
FAULTS = ("crash", "hang", "garbage", "no_trace", "exec_format", "ignore_count")

__all__ = ["FAULTS", "MODES", "SCRIPT", "make_standin"]


def _foreign_elf() -> bytes:
    """A 64-bit ELF header for an architecture this machine cannot run: exec fails with ENOEXEC."""
    machine = 62 if platform.machine().lower() in ("aarch64", "arm64") else 183  # x86-64 : AArch64
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little-endian, version 1, SysV
    header = struct.pack(
        "<HHIQQQIHHHHHH",
        2,  # ET_EXEC
        machine,
        1,  # EV_CURRENT
        0x400000,  # entry point
        64,  # program headers right after this header
        0,  # no section headers
        0,  # flags
        64,  # header size
        56,  # program header entry size
        0,  # no program headers
        64,  # section header entry size
        0,
        0,
    )
    return ident + header + bytes(64)


def make_standin(
    directory: str | Path,
    *,
    mode: str = "replay",
    trace: str | Path | None = None,
    fault: str | None = None,
    name: str = "executor_runner",
    tracer: bool = True,
    xnnlog: str | Path | None = None,
    libraries: tuple[str | Path, ...] = (),
    pause_s: float = 0.0,
) -> Path:
    """Write an executable stand-in named ``name`` into ``directory`` and return its path.

    ``mode="replay"`` needs ``trace``, a real recorded ETDump (e.g. from ``tests/data``).
    ``fault`` makes it misbehave instead: ``crash`` (abort, exit 134), ``hang`` (sleep forever),
    ``garbage`` (random bytes to stdout and as the trace, exit 0), ``no_trace`` (exit 0, no trace),
    ``exec_format`` (not a wrapper at all: an ELF file for a foreign architecture, with +x),
    ``ignore_count`` (replays all of ``trace``'s runs whatever ``--num_executions`` asks).
    ``tracer=False``: a build without the event tracer (``--etdump_path`` is an unknown flag, no trace is
    written). ``xnnlog``: a recorded XNNPACK debug log (``tests/data/*.xnnlog``) the run replays instead of
    executing (a logging build; ``trace`` is then not needed). ``libraries``: shared libraries the stand-in loads
    (really, with ``ctypes``) and whose ``/proc/self/maps`` lines it prints as pytest-sme2's own runner prints the
    libraries it loaded. ``pause_s``: the process waits this long before it starts (a slow runner process, e.g. an
    emulated one, as a progress display sees it; the replayed timings are the trace's, untouched).
    """
    if mode not in MODES:
        raise ValueError(f"unknown stand-in mode {mode!r}; choose one of {', '.join(MODES)}")
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown stand-in fault {fault!r}; choose one of {', '.join(FAULTS)}")
    trace_path = Path(trace).resolve() if trace is not None else None
    log_path = Path(xnnlog).resolve() if xnnlog is not None else None
    if log_path is not None and not log_path.is_file():
        raise ValueError(f"xnnlog must be an existing recorded XNNPACK log; got {xnnlog!r}")
    if (mode == "replay" and fault in (None, "ignore_count") and log_path is None
            and (trace_path is None or not trace_path.is_file())):
        raise ValueError(f"replay mode needs an existing recorded trace; got {trace!r}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    if fault == "exec_format":
        path.write_bytes(_foreign_elf())
    else:
        settings = {
            "SME2_STANDIN_MODE": mode,
            "SME2_STANDIN_TRACE": str(trace_path) if trace_path else "",
            "SME2_STANDIN_FAULT": fault or "",
            "SME2_STANDIN_TRACER": "1" if tracer else "0",
            "SME2_STANDIN_XNNLOG": str(log_path) if log_path else "",
            "SME2_STANDIN_LIBS": ":".join(str(Path(lib).resolve()) for lib in libraries),
            "SME2_STANDIN_PAUSE": str(pause_s),
        }
        lines = [
            "#!/bin/sh",
            f"# executor_runner stand-in for pytest-sme2 tests (mode={mode}, fault={fault}, tracer={tracer}, "
            f"xnnlog={log_path}); see {SCRIPT}",
            *(f"{key}={shlex.quote(value)}" for key, value in settings.items()),
            "export " + " ".join(settings),
            f'exec {shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))} "$@"',
            "",
        ]
        path.write_text("\n".join(lines), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path
