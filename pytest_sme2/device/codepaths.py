"""What else picks the code a measurement runs: the shared objects in its process, and the environment.

The program, inputs and runner build (:mod:`pytest_sme2.store.artifacts`) are not all that decides a number: the same
``executor_runner`` over another ``libexecutorch*.so``, ``libstdc++`` or a preloaded allocator runs other code, and
``LD_PRELOAD``, ``LD_LIBRARY_PATH`` or ``GLIBC_TUNABLES`` choose which. Left outside the artifact, such a change was an
*unchanged* artifact, its slowdown excused as drift. Here they are read as the process has them:

- **Shared objects** from the process' memory map (``/proc/<pid>/maps``), each hashed by content (name ->
  sha256). A runner subprocess is read at its exit, stopped there by ``ptrace`` (:func:`mapped_at_exit`; a probe run
  of one execution per binary and environment, so the measured runs are never traced), which works for any runner
  binary, QEMU included (the guest's libraries are mapped into the emulator). The local runtime reads
  ``/proc/self/maps`` (:func:`runtime_shared_objects`), keeping what the runtime can call into (the executorch and
  torch packages' libraries and the C/C++ runtime): the interpreter maps whatever else the session imported, which
  is no part of what runs the model and would make every artifact depend on the imports.
- **The environment variables that select code paths** (:data:`CODE_PATH_VARIABLES`), those set, with their values.

Where ``/proc`` or ``ptrace`` is not available the shared objects are ``None``: unknown, said, never "changed".
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pytest_sme2.store.files import file_sha256

#: ``RunResult.metadata`` key: the shared objects the run's process mapped, ``{name: sha256}``.
SHARED_OBJECTS = "shared_objects"

#: Environment variables that select the code a runner runs, and why each does.
CODE_PATH_VARIABLES: dict[str, str] = {
    "LD_PRELOAD": "objects loaded before all others: an allocator or an interposed libc function runs instead",
    "LD_LIBRARY_PATH": "where the dynamic loader finds libraries first: another libexecutorch or libstdc++",
    "LD_BIND_NOW": "binds every symbol at load instead of at first call (the first execution's cost)",
    "GLIBC_TUNABLES": "glibc's CPU-feature masks (glibc.cpu.hwcaps: which memcpy/string variant) and malloc tuning",
    "MALLOC_ARENA_MAX": "glibc malloc's arenas (allocation cost with several threads)",
    "OMP_NUM_THREADS": "OpenMP's threads (torch's libgomp, loaded beside the runtime)",
    "OMP_PROC_BIND": "OpenMP threads' binding to CPUs",
    "OMP_WAIT_POLICY": "whether idle OpenMP threads spin (burning a core beside the measurement) or sleep",
    "GOMP_SPINCOUNT": "how long libgomp's idle threads spin",
    "QEMU_CPU": "the emulated CPU of qemu-user: which features (SME2, SVE) the guest code may use",
    "QEMU_LD_PREFIX": "where qemu-user finds the guest's libraries",
}

#: The local runtime's own C/C++ runtime among the interpreter's mapped objects (by file name, up to ``.so``).
_C_RUNTIME = ("ld-linux", "libc.so", "libm.so", "libstdc++.so", "libgcc_s.so", "libpthread.so", "libdl.so",
              "librt.so")
#: The library directories of the packages the local runtime calls into (executorch's kernels and backends, torch's
#: c10 and libgomp); the runtime's extension module itself is in the build identity. Not the packages' other
#: extension modules: an export or a trace analysis loads them in one session and not in the next.
_RUNTIME_PACKAGES = ("/executorch/lib/", "/torch/lib/")


def code_path_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of :data:`CODE_PATH_VARIABLES` set in ``env`` (default: this process'), with their values."""
    source = os.environ if env is None else env
    return {name: source[name] for name in CODE_PATH_VARIABLES if name in source}


def mapped_paths(maps_lines: Iterable[str]) -> list[str]:
    """The shared objects (file names with ``.so``) mapped in ``/proc/<pid>/maps`` lines, each once, sorted."""
    paths = set()
    for line in maps_lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            paths.add(fields[5].strip())
    # a library has several mappings: its name is looked at once (a torch process maps thousands of lines)
    return sorted(p for p in paths if ".so" in p.removesuffix(" (deleted)").rpartition("/")[2])


def hashed(paths: Iterable[str]) -> dict[str, str]:
    """``{file name: sha256}`` of ``paths``; a file replaced since it was mapped (``(deleted)``) or gone: that word."""
    out = {}
    for path in paths:
        name = Path(path.removesuffix(" (deleted)")).name
        if path.endswith(" (deleted)"):
            out[name] = "deleted"
            continue
        try:
            out[name] = file_sha256(path)
        except OSError:
            out[name] = "unreadable"
    return out


def runtime_shared_objects(maps: Path = Path("/proc/self/maps")) -> dict[str, str] | None:
    """The shared objects the local runtime can run, as this process maps them: ``{name: sha256}``; None without
    ``/proc``."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return None
    keep = [p for p in mapped_paths(lines)
            if any(d in p for d in _RUNTIME_PACKAGES) or Path(p).name.startswith(_C_RUNTIME)]
    return hashed(keep)


# ----------------------------------------------------------------------------------- a runner process' map

_PTRACE_TRACEME, _PTRACE_CONT, _PTRACE_SETOPTIONS = 0, 7, 0x4200
_PTRACE_O_TRACEEXIT, _PTRACE_O_EXITKILL = 0x40, 0x100000
_PTRACE_EVENT_EXIT = 6
_TRACED = ("import ctypes, os, sys\nctypes.CDLL(None).ptrace(ctypes.c_long(0), ctypes.c_long(0), None, None)\n"
           "os.execvp(sys.argv[1], sys.argv[1:])")
_PROBED: dict[tuple[str, int, int, tuple[tuple[str, str], ...]], list[str] | None] = {}


def mapped_at_exit(cmd: Sequence[str], *, cwd: Path, timeout_s: float) -> list[str] | None:
    """Run ``cmd`` to its end and return its ``/proc/<pid>/maps`` lines as they were when it exited; None where the
    process cannot be stopped at its exit (no ``ptrace``: another OS, or a sandbox that forbids it) or it timed out.

    The child asks to be traced (``PTRACE_TRACEME``) and is stopped at its exit (``PTRACE_O_TRACEEXIT``), its memory
    still mapped: everything it loaded, ``dlopen`` included, and nothing the parent guessed. It is stopped nowhere
    else (signals are passed on), so it runs as it would untraced.
    """
    if not Path("/proc/self/maps").exists():
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ptrace = libc.ptrace
    except (OSError, AttributeError):
        return None
    ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    ptrace.restype = ctypes.c_long
    try:  # a Python that asks to be traced, then becomes the command (no preexec_fn: unsafe beside threads)
        cwd.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", _TRACED, *cmd], cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
    lines: list[str] | None = None
    deadline = time.monotonic() + timeout_s
    try:
        options = ctypes.c_void_p(_PTRACE_O_TRACEEXIT | _PTRACE_O_EXITKILL)
        configured = False
        while True:
            status = _wait(proc.pid, deadline)
            if status is None:  # timed out
                return None
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                proc.returncode = os.waitstatus_to_exitcode(status)
                return lines
            if not os.WIFSTOPPED(status):
                continue
            sig = os.WSTOPSIG(status)
            if not configured:  # the stop after exec: from here on, stop it at its exit only
                configured = ptrace(_PTRACE_SETOPTIONS, proc.pid, None, options) == 0
            if status >> 8 == (signal.SIGTRAP | (_PTRACE_EVENT_EXIT << 8)):
                with contextlib.suppress(OSError):
                    lines = Path(f"/proc/{proc.pid}/maps").read_text().splitlines()
                sig = 0
            elif sig == signal.SIGTRAP:
                sig = 0  # an exec's stop, not a signal of the program's
            ptrace(_PTRACE_CONT, proc.pid, None, ctypes.c_void_p(sig))
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(proc.pid, 0)
            proc.returncode = -signal.SIGKILL


def _wait(pid: int, deadline: float) -> int | None:
    """The next wait status of ``pid`` (its stops included), or None at ``deadline``."""
    delay = 0.001
    while True:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            return status
        if time.monotonic() > deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def runner_shared_objects(binary: Path, cmd: Sequence[str], *, cwd: Path, timeout_s: float) -> dict[str, str] | None:
    """The shared objects a runner process maps, ``{name: sha256}``, from one probe run of ``cmd`` (see
    :func:`mapped_at_exit`); which objects, probed once per binary content and code-path environment in this process;
    their content, hashed each time (by path, size and mtime: :func:`~pytest_sme2.store.files.file_sha256`)."""
    st = binary.stat()
    key = (str(binary.resolve()), st.st_size, st.st_mtime_ns, tuple(sorted(code_path_environment().items())))
    if key not in _PROBED:
        lines = mapped_at_exit(cmd, cwd=cwd, timeout_s=timeout_s)
        _PROBED[key] = mapped_paths(lines) if lines is not None else None
    paths = _PROBED[key]
    return hashed(paths) if paths is not None else None  # hashed every time: a library rebuilt in place is another


def changed_objects(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """``name`` for each shared object in both with other content, ``+name``/``-name`` for one loaded or no longer."""
    out = []
    for name in sorted({*old, *new}):
        if name not in old:
            out.append(f"+{name}")
        elif name not in new:
            out.append(f"-{name}")
        elif old[name] != new[name]:
            out.append(f"{name} {old[name][:10]} -> {new[name][:10]}")
    return out


__all__ = ["CODE_PATH_VARIABLES", "SHARED_OBJECTS", "changed_objects", "code_path_environment", "hashed",
           "mapped_at_exit", "mapped_paths", "runner_shared_objects", "runtime_shared_objects"]
