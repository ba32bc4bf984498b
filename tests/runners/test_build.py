"""``pytest-sme2 build-runner``: pytest-sme2's own runner, built from the installed executorch wheel.

Real builds with the real compilers: the host runner (g++ against this Python's executorch) and the
linux-aarch64 runner (aarch64-linux-gnu-g++ against the aarch64 wheel of the same version, fetched with pip),
each run once to show it works (``--help`` here, ``--probe`` under QEMU). Each error is provoked for real (a
compiler that does not exist, a wheel without the SDK, an index that cannot be reached) and must name its fix.
"""

from __future__ import annotations

import json
import platform
import struct
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from toolchain import HWCAP2_SME2, probe_hwcap2, require_cross_compiler, tool_missing

from pytest_sme2.runners.build import (
    TARGET_HOST,
    TARGET_LINUX_AARCH64,
    BuildError,
    RunnerBuild,
    Sdk,
    _check_sdk,
    aarch64_wheel,
    build_runner,
    unpacked_sdk,
)

pytestmark = pytest.mark.slow

#: ELF e_machine values (the ELF spec): what each target's binary must be.
EM_X86_64, EM_AARCH64 = 62, 183
ET_VERSION = version("executorch")
PY_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
#: The wheel file an offline user must provide, spelled out here (the error must name exactly this).
AARCH64_WHEEL_NAME = f"executorch-{ET_VERSION}-{PY_TAG}-{PY_TAG}-manylinux_2_28_aarch64.whl"


def _elf_machine(path: Path) -> int:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int(struct.unpack_from("<H", head, 18)[0])


def _host_machine() -> int:
    return EM_AARCH64 if platform.machine().lower() in ("aarch64", "arm64") else EM_X86_64


# ------------------------------------------------------------------------------------------ builds that work


def test_host_runner_builds_and_runs(host_runner_build: RunnerBuild) -> None:
    binary = host_runner_build.path
    assert host_runner_build.target == TARGET_HOST and host_runner_build.executorch_version == ET_VERSION
    assert _elf_machine(binary) == _host_machine()
    done = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    for flag in ("--model_path", "--num_executions", "--etdump_path", "--cpu_threads", "--inputs", "--output_file"):
        assert flag in done.stdout


def test_aarch64_runner_probes_the_emulated_cpu_under_qemu(aarch64_runner_build: RunnerBuild, sme2_qemu: Path) -> None:
    build = aarch64_runner_build
    assert build.target == TARGET_LINUX_AARCH64 and build.executorch_version == ET_VERSION
    assert _elf_machine(build.path) == EM_AARCH64
    # SME2 on is -cpu max, off the same CPU with sme=off: the runner's own process sees the difference.
    assert probe_hwcap2(sme2_qemu, "max", build.path, build.sysroot) & HWCAP2_SME2
    assert not probe_hwcap2(sme2_qemu, "max,sme=off", build.path, build.sysroot) & HWCAP2_SME2


@pytest.mark.parametrize("target", [TARGET_HOST, TARGET_LINUX_AARCH64])
def test_a_second_build_is_a_cache_hit(target: str, runner_cache: Path, request: pytest.FixtureRequest) -> None:
    first: RunnerBuild = request.getfixturevalue("host_runner_build" if target == TARGET_HOST
                                                 else "aarch64_runner_build")
    mtime = first.path.stat().st_mtime_ns
    again = build_runner(target, cache_dir=runner_cache)
    assert not again.built
    assert again.path == first.path and again.key == first.key
    assert again.path.stat().st_mtime_ns == mtime  # not rewritten


@pytest.mark.parametrize("target", [TARGET_HOST, TARGET_LINUX_AARCH64])
def test_two_cache_dirs_build_byte_identical_runners(target: str, tmp_path: Path, runner_cache: Path,
                                                     request: pytest.FixtureRequest) -> None:
    request.getfixturevalue("host_runner_build" if target == TARGET_HOST else "aarch64_runner_build")
    wheel = next(iter(sorted((runner_cache / "wheels").glob("*.whl"))), None) if target != TARGET_HOST else None
    a = build_runner(target, cache_dir=tmp_path / "a", wheel=wheel)
    b = build_runner(target, cache_dir=tmp_path / "b", wheel=wheel)
    assert a.built and b.built and a.path != b.path
    data = a.path.read_bytes()
    assert data == b.path.read_bytes()
    # Location-independent: the libraries are found through $ORIGIN/lib, no cache path is baked in.
    assert b"$ORIGIN/lib" in data and str(tmp_path).encode() not in data
    assert (a.path.parent / "lib").resolve() == unpacked_or_installed_lib(a)


def unpacked_or_installed_lib(build: RunnerBuild) -> Path:
    """The SDK ``lib/`` the build's ``lib`` link must point at: this Python's executorch, or the unpacked wheel."""
    if build.target == TARGET_HOST:
        import executorch  # a namespace package: no __file__

        return (Path(next(iter(executorch.__path__))) / "lib").resolve()
    libs = list((build.path.parents[2] / "sdk").glob("*/executorch/lib"))
    assert len(libs) == 1, libs
    return libs[0].resolve()


def test_cli_prints_the_paths_and_writes_json(runner_cache: Path, tmp_path: Path, host_runner_build: RunnerBuild,
                                              aarch64_runner_build: RunnerBuild) -> None:
    out = tmp_path / "builds.json"
    done = subprocess.run([sys.executable, "-m", "pytest_sme2", "build-runner", "--target", "all", "--cache-dir",
                           str(runner_cache), "--json", str(out)], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert f"host: {host_runner_build.path} (from the cache" in done.stdout
    assert f"linux-aarch64: {aarch64_runner_build.path} (from the cache" in done.stdout
    assert f"qemu-aarch64 -cpu max -L {aarch64_runner_build.sysroot} {aarch64_runner_build.path}" in done.stdout
    records: list[dict[str, Any]] = json.loads(out.read_text())
    assert [(r["target"], r["path"], r["key"]) for r in records] == [
        (b.target, str(b.path), b.key) for b in (host_runner_build, aarch64_runner_build)]
    assert all(r["schema_version"] == 1 and r["executorch_version"] == ET_VERSION for r in records)


# ------------------------------------------------------------------------------------------ errors name the fix


def test_a_missing_host_compiler_names_cxx(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(BuildError, match=r"\$CXX is '/nonexistent/c\+\+', which is not an executable") as info:
        build_runner(TARGET_HOST, cache_dir=tmp_path)
    assert "set CXX to a C++17 compiler or unset it" in str(info.value)
    assert not (tmp_path / TARGET_HOST).exists() or not list((tmp_path / TARGET_HOST).rglob("sme2_runner"))


def test_the_cli_reports_a_missing_compiler_as_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    done = subprocess.run([sys.executable, "-m", "pytest_sme2", "build-runner", "--cache-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "pytest-sme2 build-runner: error: $CXX is '/nonexistent/c++'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(platform.machine().lower() in ("aarch64", "arm64"), reason="aarch64 hosts build natively")
def test_a_missing_cross_compiler_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SME2_CROSS_CXX", "nonexistent-aarch64-g++")
    with pytest.raises(BuildError, match=r"no aarch64 cross compiler \(nonexistent-aarch64-g\+\+\) on PATH") as info:
        build_runner(TARGET_LINUX_AARCH64, cache_dir=tmp_path)
    assert "apt-get install g++-aarch64-linux-gnu" in str(info.value) and "SME2_CROSS_CXX" in str(info.value)


@pytest.mark.parametrize("missing", ["include", "lib", "one library"])
def test_an_sdk_without_headers_or_libraries_says_so(missing: str, tmp_path: Path) -> None:
    root = tmp_path / "executorch"
    sdk = Sdk(root=root, version="1.4.1", digest="0" * 64, origin="installed")
    for d in (*sdk.include_dirs, sdk.lib_dir):
        d.mkdir(parents=True, exist_ok=True)
    from pytest_sme2.runners.build import LIBRARIES

    for name in LIBRARIES:
        (sdk.lib_dir / f"lib{name}.so").write_bytes(b"")
    if missing == "include":
        (root / "include" / "executorch" / "runtime" / "core" / "portable_type" / "c10").rmdir()
    elif missing == "lib":
        for f in sdk.lib_dir.iterdir():
            f.unlink()
        sdk.lib_dir.rmdir()
    else:
        (sdk.lib_dir / "libexecutorch_backend_xnnpack.so").unlink()
    with pytest.raises(BuildError) as info:
        _check_sdk(sdk, fix="pip install a newer executorch")
    message = str(info.value)
    assert f"executorch 1.4.1 at {root} (installed) has no C++ SDK" in message
    assert "Wheels before 1.5 (e.g. 1.4) ship only the Python runtime; pip install a newer executorch" in message
    expected = {"include": "portable_type/c10", "lib": str(sdk.lib_dir),
                "one library": "libraries libexecutorch_backend_xnnpack missing"}[missing]
    assert expected in message


def test_a_wheel_without_the_sdk_is_refused_when_unpacked(tmp_path: Path) -> None:
    wheel = tmp_path / AARCH64_WHEEL_NAME.replace(ET_VERSION, "1.4.1")
    with zipfile.ZipFile(wheel, "w") as z:  # what a 1.4 wheel holds: the Python runtime, no include/ or lib/
        z.writestr("executorch/__init__.py", "")
        z.writestr("executorch-1.4.1.dist-info/RECORD", "")
    with pytest.raises(BuildError, match=r"executorch 1\.4\.1 at .* has no C\+\+ SDK: .*include.* missing") as info:
        unpacked_sdk(wheel, "1.4.1", tmp_path / "cache")
    assert "use the manylinux_2_28_aarch64 wheel of executorch 1.5.1 or newer" in str(info.value)


def test_an_unfetchable_wheel_names_the_file_and_wheel_option(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Offline: no index reachable, no find-links, no pip config adding either; nothing cached in tmp_path.
    for name, value in (("PIP_INDEX_URL", "http://127.0.0.1:9/simple"), ("PIP_NO_INDEX", "1"),
                        ("PIP_FIND_LINKS", ""), ("PIP_EXTRA_INDEX_URL", ""), ("PIP_CONFIG_FILE", "/dev/null"),
                        ("PIP_RETRIES", "0"), ("PIP_TIMEOUT", "2")):
        monkeypatch.setenv(name, value)
    with pytest.raises(BuildError) as info:
        aarch64_wheel(ET_VERSION, tmp_path)
    message = str(info.value)
    assert f"could not fetch the aarch64 wheel of executorch {ET_VERSION} with pip" in message
    assert f"download {AARCH64_WHEEL_NAME} on a connected machine" in message
    assert "--wheel FILE" in message and "--sme2-aarch64-wheel FILE" in message
    assert not list((tmp_path / "wheels").glob("*.whl"))


def test_a_given_wheel_that_does_not_exist_names_the_file_to_provide(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=f"does not exist; pass the file {AARCH64_WHEEL_NAME}"):
        aarch64_wheel(ET_VERSION, tmp_path, wheel=tmp_path / "missing.whl")


# ------------------------------------------------------------------------------------------ the tools themselves


def test_a_missing_tool_skips_here_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    import ci

    monkeypatch.setattr(ci, "IN_CI", False)  # as on a developer's machine, whatever this session runs in
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no such tool"):
        tool_missing("no such tool")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"no such tool\. CI must run these tests"):
        tool_missing("no such tool")
    # The fixtures' own checks go through it: a cross compiler that is not there fails in CI.
    monkeypatch.setenv("SME2_CROSS_CXX", "nonexistent-aarch64-g++")
    with pytest.raises(pytest.fail.Exception, match=r"no aarch64 cross compiler \(nonexistent-aarch64-g\+\+\)"):
        require_cross_compiler()
