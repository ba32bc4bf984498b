"""One ``executor_runner`` execution on the device: the command, running it, reading its exit, the trace.

:func:`device_command` builds ``cd <run dir> && export LD_LIBRARY_PATH=... && exec timeout ...
taskset <mask> <runner> ... </dev/null`` from quoted arguments. :func:`run_on_device` runs it over
shell v2 (real exit code, separate stdout/stderr; the device-side ``timeout`` is the limit, adb's
read timeout a backstop). :func:`exit_error` explains a non-zero exit from the code and the output;
:func:`pull_trace` checks that the trace exists and is non-empty *before* pulling it (adbutils'
pull of a missing file "succeeds" with an empty directory) and that the pulled size matches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import adbutils

from pytest_sme2.errors import DeviceError, RunnerError, tail
from pytest_sme2.runners.android.adb import AdbLink, join_args, quote, storage_hint
from pytest_sme2.runners.android.deploy import Deployed
from pytest_sme2.runners.base import RunRequest, inputs_argv
from pytest_sme2.runners.executor_runner import BUILD_HINT
from pytest_sme2.runners.process import shell_exit_hint, timeout_message

#: Exit status of ``timeout`` (toybox and coreutils) when it had to stop the command.
TIMEOUT_EXIT = 124


def device_command(request: RunRequest, deployed: Mapping[Path, Deployed], runner: Path, libs: Sequence[Path], *,
                   remote_run: str, remote_trace: str | None, mask: str | None, timeout: float) -> str:
    """The device shell command for one run (``remote_trace`` None: no ``--etdump_path``); arguments shlex-quoted.

    ``libs`` are the shared libraries pushed for the runner (``libc++_shared.so``, ``--sme2-runner-libs``): each
    lives in its content directory, so each directory goes on ``LD_LIBRARY_PATH``, the runner's own first.
    """
    lib_dirs = [str(PurePosixPath(deployed[runner].remote).parent)]
    lib_dirs += [str(PurePosixPath(deployed[lib].remote).parent) for lib in libs]
    argv: list[str] = ["timeout", "-k", "5", f"{timeout:g}"]
    if mask is not None:
        argv += ["taskset", mask]
    argv += [deployed[runner].remote, "--model_path", deployed[request.pte].remote]
    if remote_trace is not None:
        argv += ["--etdump_path", remote_trace]
    argv += [f"--num_executions={request.executions}", f"--cpu_threads={request.threads}"]
    argv += inputs_argv([deployed[Path(p)].remote for p in request.inputs or ()], fix="rename the file")
    # stdin from /dev/null: adbutils' shell v2 never closes stdin, so a runner reading it would hang.
    return (f"cd {quote(remote_run)} && export LD_LIBRARY_PATH={quote(':'.join(dict.fromkeys(lib_dirs)))} && "
            f"exec {join_args(argv)} </dev/null")


def run_on_device(link: AdbLink, command: str, *, timeout: float, grace_s: float, runner: Path,
                  request: RunRequest) -> Any:
    """Run ``command`` over shell v2 and return adbutils' ShellReturn (bytes output)."""
    device = link.device()
    try:
        # The device-side `timeout` is the real limit; the adb read timeout is a backstop for a
        # device that stops answering altogether.
        return link.call(f"running {runner.name}",
                         lambda: device.shell2(command, v2=True, timeout=timeout + grace_s, encoding=None),
                         timeout_ok=True)
    except adbutils.AdbTimeout:
        raise RunnerError(
            f"executor_runner {runner} on Android device {link.serial} did not finish within {timeout:g} s "
            f"(+{grace_s:g} s for adb) while running {request.pte.name}, and the device stopped "
            "answering; the command was abandoned (closing its adb stream kills it). Raise --sme2-timeout if "
            "the model is just slow, and check the phone is responsive.",
            command=command,
        ) from None


def exit_error(returncode: int, runner: Path, request: RunRequest, *, serial: str, command: str, output: str,
               log_path: Path, timeout: float) -> RunnerError:
    """The error for a runner that exited non-zero on the device, with what the exit usually means."""
    where = f"executor_runner {runner} on Android device {serial}"
    if returncode == TIMEOUT_EXIT:
        message = timeout_message(where, timeout, request.pte.name, log_path)
    else:
        message = f"{where} exited with code {returncode}{exit_hint(returncode, output, serial)} while " \
                  f"running {request.pte.name}; the full log is {log_path}"
    return RunnerError(message, command=command, returncode=returncode, stderr_tail=tail(output))


def pull_trace(link: AdbLink, remote_trace: str, trace_path: Path, *, runner: Path, command: str, output: str) -> None:
    """Pull the run's trace to ``trace_path``; a missing, empty or cut trace raises and leaves nothing behind."""
    device = link.device()
    st = link.call("checking the trace", lambda: device.sync.stat(remote_trace))
    if st.mode == 0 or st.size == 0:
        # Checked before pulling: adbutils' pull of a missing file "succeeds" with an empty directory.
        raise RunnerError(
            f"executor_runner {runner} on Android device {link.serial} exited 0 but wrote "
            f"{'no' if st.mode == 0 else 'an empty'} trace at {remote_trace}. A runner built without the "
            f"event tracer writes none; {BUILD_HINT}. {storage_hint(output, link.serial)}".rstrip(),
            command=command, returncode=0, stderr_tail=tail(output),
        )
    try:
        link.call("pulling the trace", lambda: device.sync.pull(remote_trace, trace_path))
        got = trace_path.stat().st_size if trace_path.is_file() else -1
        if got != st.size:
            raise DeviceError(
                f"pulling the trace from Android device {link.serial} gave {got} of {st.size} bytes: the "
                "transfer was cut short. Check the cable and rerun; the partial file was deleted."
            )
    except BaseException:
        with contextlib.suppress(OSError):
            trace_path.unlink()
        raise


def exit_hint(returncode: int, output: str, serial: str) -> str:
    """What a device-side exit usually means, from the code and the runner's output."""
    if "sched_setaffinity" in output:
        return (" (taskset could not pin it to the requested CPUs: pick a mask within the device's CPUs "
                "with --sme2-big-cores, or 'none')")
    if "CANNOT LINK EXECUTABLE" in output or "library \"libc++_shared.so\" not found" in output:
        return (" (the dynamic linker failed: a runner built with the shared C++ STL needs "
                "--sme2-libcxx path/to/libc++_shared.so from the same NDK)")
    if "error while loading shared libraries" in output:
        return (" (the dynamic loader could not find a shared library the runner is linked against: pass the "
                "directory of the libraries it was built with, e.g. executorch's lib/, with --sme2-runner-libs DIR)")
    if returncode == 126 or "not executable" in output or "Exec format error" in output:
        return " (the device cannot execute it: build executor_runner for arm64-v8a with the Android NDK)"
    code_hint = shell_exit_hint(returncode, "the device")
    if code_hint:
        return code_hint
    hint = storage_hint(output, serial)
    return f" ({hint[0].lower()}{hint[1:-1]})" if hint else ""
