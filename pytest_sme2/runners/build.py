"""Build pytest-sme2's own runner (``runners/cpp/sme2_runner.cpp``) against an installed executorch wheel.

executorch 1.5's wheel is a C++ SDK: ``site-packages/executorch/include`` (runtime, extension and devtools
headers, vendored c10) and ``site-packages/executorch/lib`` (``libexecutorch.so`` and one shared library per
component, built with the event tracer and XNNPACK's profiler). One translation unit compiled against them is a
complete runner, so no CMake is needed: the compiler is called directly with the definitions the wheel's
CMake package documents (``lib/cmake/executorch/executorch-config.cmake``: ``C10_USING_CUSTOM_GENERATED_MACROS``,
``ET_EVENT_TRACER_ENABLED`` — without it the profiling scopes silently record nothing — and
``ET_USE_THREADPOOL``; C++17). That route works with any compiler that can build C++17, where the CMake route
would need CMake >= 3.28 for the wheel's imported targets.

Targets:

- ``host``: this machine (x86_64 or aarch64 Linux; macOS where the wheel ships the SDK), against the
  executorch that is installed in this Python;
- ``linux-aarch64``: cross-built on an x86_64 Linux host with ``aarch64-linux-gnu-g++``, against the aarch64
  wheel of the *same* executorch version, fetched with pip for that platform (or given as a file when
  offline). Its XNNPACK carries KleidiAI's SME2 kernels; the binary is a glibc Linux program that runs under
  ``qemu-aarch64`` (``--sme2-device=qemu``) and on aarch64 Linux hosts, not on Android (bionic).

A build is cached by content: the key hashes the runner source, the SDK (the wheel's ``RECORD``, which holds
the sha256 of every file it installed), the compiler's identity and the target. A second call with nothing
changed returns the cached binary at once; several processes building at once take a lock, and the binary
appears by an atomic rename, so a killed build never leaves half a runner.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_sme2.errors import Sme2Error
from pytest_sme2.progress import Progress
from pytest_sme2.store.files import ensure_dir, file_lock, write_atomic

SCHEMA_VERSION = 1

TARGET_HOST = "host"
TARGET_LINUX_AARCH64 = "linux-aarch64"
TARGETS = (TARGET_HOST, TARGET_LINUX_AARCH64)

#: The runner's source file inside the package.
SOURCE_NAME = "sme2_runner.cpp"
#: The file name of a built runner (the hosts' and the emulator's runner paths end in it).
BINARY_NAME = "sme2_runner"

#: Definitions the wheel's headers need (executorch-config.cmake's EXECUTORCH_COMPILE_DEFINITIONS, plus the
#: thread-pool switch it adds when libexecutorch_threadpool is shipped).
DEFINES = ("C10_USING_CUSTOM_GENERATED_MACROS", "ET_EVENT_TRACER_ENABLED", "ET_USE_THREADPOOL")
#: The libraries the runner links, in order; each must be kept even though the runner names none of its
#: symbols (kernels and backends register themselves at load), hence --no-as-needed on Linux.
LIBRARIES = ("executorch", "executorch_kernels_optimized", "executorch_kernels_quantized",
             "executorch_backend_xnnpack", "executorch_threadpool", "executorch_etdump")
#: -O2 as executorch's own release builds; warnings on, so the source stays warning-free.
CXXFLAGS = ("-std=c++17", "-O2", "-Wall", "-Wextra")

#: The cross compiler for linux-aarch64 on an x86_64 host (Debian/Ubuntu: g++-aarch64-linux-gnu).
CROSS_CXX = "aarch64-linux-gnu-g++"
#: pip's platform tag for the aarch64 wheel.
AARCH64_PLATFORM = "manylinux_2_28_aarch64"


class BuildError(Sme2Error):
    """The runner cannot be built here: a compiler, an SDK or a wheel is missing. The message says how to fix it."""


@dataclass(frozen=True)
class Sdk:
    """An executorch C++ SDK: the ``include`` and ``lib`` directories of a wheel, and what identifies it."""

    root: Path
    version: str
    #: sha256 of the wheel's RECORD (the hashes of every file it installed), or of the wheel file itself
    digest: str
    #: "installed" (this Python's executorch) or the wheel file it was unpacked from
    origin: str

    @property
    def include_dirs(self) -> tuple[Path, ...]:
        inc = self.root / "include"
        return (inc, inc / "executorch" / "runtime" / "core" / "portable_type" / "c10")

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"


@dataclass(frozen=True)
class RunnerBuild:
    """A built runner: where it is, for which target, from which SDK and compiler, and what it cost."""

    path: Path
    target: str
    executorch_version: str
    sdk: str
    compiler: str
    key: str
    #: the sysroot whose dynamic loader and libc run the binary under QEMU (linux-aarch64 built on x86), else ""
    sysroot: str = ""
    #: sha256 of the SDK the binary loads its libraries from (:attr:`Sdk.digest`): part of a measurement's artifact
    sdk_digest: str = ""
    #: True when this call compiled it, False when it came from the cache
    built: bool = False
    seconds: float = 0.0

    def runtime(self) -> dict[str, str]:
        """What the binary loads that decides its numbers besides itself, for a measurement's artifact."""
        return {"executorch_version": self.executorch_version, "sdk_sha256": self.sdk_digest}

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "path": str(self.path), "target": self.target,
                "executorch_version": self.executorch_version, "sdk": self.sdk, "compiler": self.compiler,
                "key": self.key, "sysroot": self.sysroot, "sdk_digest": self.sdk_digest, "built": self.built,
                "seconds": round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunnerBuild:
        return cls(path=Path(data["path"]), target=str(data["target"]),
                   executorch_version=str(data["executorch_version"]), sdk=str(data["sdk"]),
                   compiler=str(data["compiler"]), key=str(data["key"]), sysroot=str(data.get("sysroot", "")),
                   sdk_digest=str(data.get("sdk_digest", "")),
                   built=bool(data.get("built", False)), seconds=float(data.get("seconds", 0.0)))


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/pytest-sme2/runners`` (``~/.cache/...``): runners do not depend on a project."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-sme2" / "runners"


def runner_source() -> bytes:
    """The runner's C++ source, as shipped in the package."""
    return resources.files("pytest_sme2").joinpath("runners", "cpp", SOURCE_NAME).read_bytes()


# ------------------------------------------------------------------------------------------ SDKs


def installed_sdk(folder: Path | None = None) -> Sdk:
    """The C++ SDK of the executorch installed in this Python (or in ``folder``, where ``pip install --target`` put
    another release: :mod:`pytest_sme2.measure.runtimes`); a wheel without one says how to get one."""
    from importlib.metadata import PackageNotFoundError, distribution, distributions

    try:
        if folder is not None:
            found = [d for d in distributions(path=[str(folder)]) if d.metadata["Name"] == "executorch"]
            if not found:
                raise PackageNotFoundError("executorch")
            dist = found[0]
        else:
            dist = distribution("executorch")
    except PackageNotFoundError:
        raise BuildError("executorch is not installed in this Python: pip install 'executorch>=1.5.1,<1.6' (after "
                         "torch==2.13.0), then build the runner again") from None
    root = Path(str(dist.locate_file("executorch")))
    record = dist.read_text("RECORD") or ""
    sdk = Sdk(root=root, version=dist.version, digest=hashlib.sha256(record.encode()).hexdigest(),
              origin="installed" if folder is None else str(folder))
    _check_sdk(sdk, fix="pip install 'executorch>=1.5.1,<1.6': from 1.5 on the wheel ships the C++ SDK")
    return sdk


def _check_sdk(sdk: Sdk, *, fix: str) -> None:
    missing = [str(p) for p in (*sdk.include_dirs, sdk.lib_dir) if not p.is_dir()]
    libs = [name for name in LIBRARIES if not _library_file(sdk.lib_dir, name).is_file()]
    if missing or libs:
        what = ", ".join(missing) if missing else "libraries " + ", ".join(f"lib{n}" for n in libs)
        raise BuildError(
            f"executorch {sdk.version} at {sdk.root} ({sdk.origin}) has no C++ SDK: {what} missing. Wheels before "
            f"1.5 (e.g. 1.4) ship only the Python runtime; {fix}"
        )


def _library_file(lib_dir: Path, name: str) -> Path:
    suffix = ".dylib" if sys.platform == "darwin" else ".so"
    return lib_dir / f"lib{name}{suffix}"


def aarch64_wheel(version: str, cache_dir: Path, *, wheel: Path | None = None,
                  progress: Progress | None = None) -> Path:
    """The aarch64 Linux wheel of executorch ``version``: ``wheel`` if given, else a cached or pip-fetched one."""
    py = f"{sys.version_info.major}{sys.version_info.minor}"
    name = f"executorch-{version}-cp{py}-cp{py}-{AARCH64_PLATFORM}.whl"
    if wheel is not None:
        if not wheel.is_file():
            raise BuildError(f"the aarch64 wheel {wheel} does not exist; pass the file {name} (pip download "
                             f"--no-deps --only-binary=:all: --platform {AARCH64_PLATFORM} --python-version {py} "
                             f"executorch=={version})")
        return wheel
    wheels = cache_dir / "wheels"
    cached = sorted(wheels.glob(f"executorch-{version}-*{AARCH64_PLATFORM}*.whl"))
    if cached:
        return cached[0]
    ensure_dir(wheels)
    if progress:
        progress(f"fetching the aarch64 wheel of executorch {version} with pip (~18 MB)")
    with tempfile.TemporaryDirectory(dir=wheels, prefix=".download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform",
               AARCH64_PLATFORM, "--python-version", py, f"executorch=={version}", "-d", tmp, "-q"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        got = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not got:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise BuildError(
                f"could not fetch the aarch64 wheel of executorch {version} with pip ({last[0]}). Offline, download "
                f"{name} on a connected machine (pip download --no-deps --only-binary=:all: --platform "
                f"{AARCH64_PLATFORM} --python-version {py} executorch=={version}) and pass it with --wheel FILE "
                f"(pytest: --sme2-aarch64-wheel FILE), or put it in {wheels}"
            )
        target = wheels / got[0].name
        got[0].replace(target)
    return target


def unpacked_sdk(wheel: Path, version: str, cache_dir: Path) -> Sdk:
    """The SDK (include/ and lib/) of a wheel file, unpacked once into the cache by the wheel's hash."""
    digest = _sha256_file(wheel)
    root = cache_dir / "sdk" / digest[:16] / "executorch"
    if not (root / ".complete").is_file():
        with file_lock(root.parent / ".lock"):
            if not (root / ".complete").is_file():
                shutil.rmtree(root, ignore_errors=True)
                try:
                    with zipfile.ZipFile(wheel) as z:
                        members = [n for n in z.namelist() if n.startswith(("executorch/include/", "executorch/lib/"))]
                        z.extractall(root.parent, members)  # shared libraries load without the x bit
                except zipfile.BadZipFile:
                    raise BuildError(f"{wheel} is not a wheel (a zip file); fetch it again") from None
                # A wheel without include/ and lib/ extracts nothing: _check_sdk below names what is missing.
                root.mkdir(parents=True, exist_ok=True)
                (root / ".complete").write_text(digest)
    sdk = Sdk(root=root, version=version, digest=digest, origin=str(wheel))
    _check_sdk(sdk, fix=f"use the {AARCH64_PLATFORM} wheel of executorch 1.5.1 or newer")
    return sdk


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------ compilers


def host_compiler() -> str:
    """The C++ compiler for the host: ``$CXX``, else ``c++``, ``g++`` or ``clang++`` on PATH."""
    env = os.environ.get("CXX")
    candidates = [env] if env else ["c++", "g++", "clang++"]
    for name in candidates:
        found = shutil.which(name) if name else None
        if found:
            return found
    if env:
        raise BuildError(f"$CXX is {env!r}, which is not an executable on PATH; set CXX to a C++17 compiler or "
                         "unset it")
    hint = ("xcode-select --install" if sys.platform == "darwin"
            else "apt-get install g++ (Debian/Ubuntu), dnf install gcc-c++ (Fedora)")
    raise BuildError(f"no C++ compiler found (looked for c++, g++, clang++ on PATH) to build pytest-sme2's runner: "
                     f"{hint}")


def cross_compiler() -> str:
    """The aarch64 Linux cross compiler on an x86_64 host (``$SME2_CROSS_CXX`` or ``aarch64-linux-gnu-g++``)."""
    name = os.environ.get("SME2_CROSS_CXX") or CROSS_CXX
    found = shutil.which(name)
    if found:
        return found
    raise BuildError(
        f"no aarch64 cross compiler ({name}) on PATH to build the linux-aarch64 runner: apt-get install "
        "g++-aarch64-linux-gnu (Debian/Ubuntu; it brings the arm64 sysroot QEMU runs the binary with), or set "
        "SME2_CROSS_CXX to another aarch64-linux-gnu C++17 compiler"
    )


def compiler_identity(compiler: str) -> str:
    """The compiler's first ``--version`` line: part of the cache key (a compiler update rebuilds)."""
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"the compiler {compiler} does not run ({exc}); install a working C++17 compiler") from None
    return (out.stdout.strip().splitlines() or [compiler])[0]


def cross_sysroot(compiler: str) -> str:
    """The directory holding the target's ``lib/ld-linux-aarch64.so.1`` and libc (QEMU's ``-L``), or ""."""
    try:
        out = subprocess.run([compiler, "-print-file-name=libc.so.6"], capture_output=True, text=True, check=False,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    libc = Path(out.stdout.strip())
    return str(libc.resolve().parent.parent) if libc.is_absolute() and libc.exists() else ""


def host_is_aarch64() -> bool:
    return platform.machine().lower() in ("aarch64", "arm64")


# ------------------------------------------------------------------------------------------ building


#: The runner finds the SDK's libraries through ``lib/`` beside itself (a link to the SDK's lib directory), so the
#: binary holds no absolute path: two checkouts, or two machines with the same compiler, build the same bytes, and
#: the artifact a baseline records (the runner's sha256) does not change with where the cache is.
RPATH = "@loader_path/lib" if sys.platform == "darwin" else "$ORIGIN/lib"


def compile_command(compiler: str, sdk: Sdk, source: Path, output: Path) -> list[str]:
    """The one compiler call that builds the runner (RUNPATH ``$ORIGIN/lib``, see :data:`RPATH`)."""
    cmd = [compiler, *CXXFLAGS, *(f"-D{d}" for d in DEFINES), *(f"-I{d}" for d in sdk.include_dirs), str(source),
           "-o", str(output), f"-L{sdk.lib_dir}"]
    libs = [f"-l{name}" for name in LIBRARIES]
    if sys.platform == "darwin" and compiler != CROSS_CXX:
        cmd += libs
    else:
        cmd += ["-Wl,--no-as-needed", *libs, "-Wl,--as-needed"]
    cmd += [f"-Wl,-rpath,{RPATH}"]
    return cmd


def build_runner(
    target: str = TARGET_HOST,
    *,
    cache_dir: Path | None = None,
    wheel: Path | None = None,
    force: bool = False,
    progress: Progress | None = None,
    source: bytes | None = None,
    sdk: Sdk | None = None,
) -> RunnerBuild:
    """Build (or take from the cache) pytest-sme2's runner for ``target``; see the module docstring.

    ``source`` replaces the package's runner source (the runner as it was at another commit, to rebuild a baseline's
    build: :mod:`pytest_sme2.measure.rebuild`); ``sdk`` the SDK it is built against, for ``target`` (another
    executorch release's, to build the runner a baseline ran on it: :mod:`pytest_sme2.measure.runtimes`)."""
    if target not in TARGETS:
        raise BuildError(f"unknown runner target {target!r}; allowed: {', '.join(TARGETS)}")
    cache = (cache_dir or default_cache_dir()).expanduser().absolute()
    given = sdk
    if target == TARGET_HOST or (target == TARGET_LINUX_AARCH64 and host_is_aarch64() and sys.platform == "linux"):
        sdk, compiler, sysroot = given or installed_sdk(), host_compiler(), ""
    elif sys.platform != "linux":
        raise BuildError(f"the {target} runner is cross-built on x86_64 Linux (or built natively on aarch64 Linux); "
                         f"this is {sys.platform}/{platform.machine()}")
    else:
        compiler = cross_compiler()
        if given is None:
            version = installed_sdk().version
            given = unpacked_sdk(aarch64_wheel(version, cache, wheel=wheel, progress=progress), version, cache)
        sdk = given
        sysroot = cross_sysroot(compiler)
    source = runner_source() if source is None else source
    identity = compiler_identity(compiler)
    key = hashlib.sha256(json.dumps({
        "source": hashlib.sha256(source).hexdigest(), "sdk": sdk.digest, "version": sdk.version, "target": target,
        "compiler": identity, "flags": [*CXXFLAGS, *DEFINES, *LIBRARIES, RPATH], "schema": SCHEMA_VERSION,
    }, sort_keys=True).encode()).hexdigest()[:16]
    out_dir = cache / target / key
    binary = out_dir / BINARY_NAME
    meta_path = out_dir / "build.json"
    started = time.perf_counter()
    with file_lock(cache / target / f".{key}.lock"):
        cached, damage = _cached_build(binary, meta_path)
        if cached is not None and not force:
            return replace(cached, built=False, seconds=time.perf_counter() - started)
        if damage and progress:
            progress(f"runner build {out_dir} was damaged ({damage}): building it again")
        if progress:
            progress(f"building pytest-sme2's runner for {target} against executorch {sdk.version} ({identity})")
        ensure_dir(out_dir)
        src = out_dir / SOURCE_NAME
        write_atomic(src, source, what="runner source")
        tmp = out_dir / f".{BINARY_NAME}.tmp-{os.getpid()}"
        cmd = compile_command(compiler, sdk, src, tmp)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
        except subprocess.TimeoutExpired:
            raise BuildError(f"compiling the runner with {compiler} took over 600 s; the command was: "
                             f"{' '.join(cmd)}") from None
        if proc.returncode != 0:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise BuildError(f"compiling pytest-sme2's runner for {target} failed (exit {proc.returncode}) with "
                             f"{identity}; the command was:\n  {' '.join(cmd)}\n{tail}")
        lib = out_dir / "lib"
        if lib.is_symlink() or lib.exists():
            lib.unlink()
        lib.symlink_to(sdk.lib_dir, target_is_directory=True)
        tmp.replace(binary)
        build = RunnerBuild(path=binary, target=target, executorch_version=sdk.version, sdk=sdk.origin,
                            compiler=identity, key=key, sysroot=sysroot, sdk_digest=sdk.digest, built=True,
                            seconds=time.perf_counter() - started)
        record = {**build.to_dict(), "binary_sha256": _sha256_file(binary), "binary_bytes": binary.stat().st_size}
        write_atomic(meta_path, json.dumps(record, indent=2, sort_keys=True), what="runner build record")
    return build


def _cached_build(binary: Path, meta_path: Path) -> tuple[RunnerBuild | None, str]:
    """``(the cached build, "")``; ``(None, "")`` when there is none; ``(None, what is wrong)`` when it is damaged
    (its record unreadable, its binary missing or no longer what was built): then it is built again, never run."""
    if not binary.exists() and not meta_path.exists():
        return None, ""
    try:
        data = json.loads(meta_path.read_text(encoding="utf-8"))
        cached = RunnerBuild.from_dict(data)
    except FileNotFoundError:
        return None, f"{meta_path.name} is missing"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"{meta_path.name} is unreadable ({type(exc).__name__}: {exc})"
    if not binary.is_file():
        return None, f"{binary.name} is missing"
    size, sha = data.get("binary_bytes"), data.get("binary_sha256")  # absent in records of earlier versions
    if size is not None and binary.stat().st_size != size:
        return None, f"{binary.name} has {binary.stat().st_size} bytes where {size} were built"
    if sha is not None and _sha256_file(binary) != sha:
        return None, f"{binary.name} no longer has the content it was built with"
    return cached, ""
