"""A runtime upgrade measured in the session: the baseline's executorch installed beside the current one.

When the baseline ran on another executorch than the session's (an upgrade of the local runtime), its artifact
cannot run in this process, which has imported the current executorch. Before this, such a change was judged against
the stored samples with the calibrated drift allowance (``runtime``): a comparison with another session. Now:

1. The baseline's executorch version (its artifact's build identity) is installed once into
   ``<cache dir>/runtimes/executorch-<version>`` (``pip install --no-deps --target``: the same Python, the session's
   torch and the rest of executorch's dependencies), under a lock, into a temporary folder renamed into place.
2. A worker process whose ``sys.path`` puts that folder first (:mod:`pytest_sme2.runners.worker`) reports the build
   identity of the runtime it imported: it must be the baseline's (the extension module's and libraries' sha256), so
   a PyPI wheel that is not what the baseline ran (a custom build of the same version) can only fail the proof.
3. The baseline's program (from the artifact store, or rebuilt from its commit by that runtime's exporter,
   :mod:`pytest_sme2.measure.rebuild`) is measured by that worker in blocks interleaved with the change measured by a
   worker of the installed runtime (:class:`~pytest_sme2.runners.worker.RuntimePair`): the verdict's comparison is
   ``runtime-session``, a same-session comparison labelled as a runtime change.

Where any step fails (no network, no such wheel, an import that fails with this torch, another build) the reason is
one line of the verdict and the comparison stays ``runtime``, as before. ``--sme2-runtimes=none`` turns it off.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.errors import Sme2Error
from pytest_sme2.measure.hostlock import heavy_work
from pytest_sme2.runners.worker import RuntimePair, WorkerRuntime
from pytest_sme2.store.artifacts import comparable_builds, is_runtime
from pytest_sme2.store.files import TMP_PREFIX, file_lock, file_sha256

#: where the runtimes go, under the cache dir
RUNTIMES_DIR = "runtimes"
#: seconds pip may take to download and unpack one executorch wheel (~60 MB)
INSTALL_SECONDS = 600.0
#: a version pip can be asked for as it is: a release on PyPI (a local version, ``1.5.0+cpu``, is a build of one's own)
_RELEASE = re.compile(r"^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?$")
#: written last into an installed runtime's folder: one without it is not used
_COMPLETE = ".complete"
#: what a verdict says when the baseline's runtime cannot be had
FALLBACK = "compared with the stored samples instead"


@dataclass(frozen=True)
class Reference:
    """The baseline's runtime beside the current one, or why not (:attr:`ok` False): for the local runtime, ``runner``
    measures both; for pytest-sme2's own runner, ``binary`` is the runner the baseline ran, built again against the
    baseline's executorch SDK."""

    runner: RuntimePair | None
    #: how it was had ("installed executorch 1.5.0 into ... ; its runtime hashes to the baseline's"), or why not
    message: str
    #: the folder the baseline's executorch is installed in (put first on the path of its export worker too)
    folder: Path | None = None
    #: the two runtimes' versions, ``(baseline's, current)``
    versions: tuple[str, str] = ("", "")
    #: pytest-sme2's own runner built against the baseline's SDK (it loads that SDK's libraries)
    binary: Path | None = None
    #: where the baseline's runtime libraries are (the two runtimes differ in these by design)
    lib_dir: Path | None = None

    @property
    def ok(self) -> bool:
        return self.runner is not None or self.binary is not None


@dataclass(frozen=True)
class Runtimes:
    """Where this session installs the baselines' runtimes (``root`` None: it does not, ``why_off`` says why)."""

    root: Path | None
    why_off: str = ""
    progress: Callable[[str], None] | None = None
    #: the host's measuring lock: an install is heavy work, which waits for measurements
    lock_file: Path | None = None
    #: where the workers' logs go
    log_dir: Path | None = None

    def reference(self, baseline: Mapping[str, Any], current: Mapping[str, Any]) -> Reference:
        """The baseline's runtime (build identity ``baseline``) beside the current one (``current``), started and
        proven by its build identity; or why not, ending with what the comparison falls back to."""
        old = str(baseline.get("executorch_version", ""))
        new = str(current.get("executorch_version", ""))
        versions = (old, new)
        if not (is_runtime(baseline) and is_runtime(current)):
            return Reference(None, "", versions=versions)
        if self.root is None:
            return Reference(None, f"the baseline's runtime (executorch {old}) is not installed beside this one "
                                   f"({self.why_off or '--sme2-runtimes=none'}); {FALLBACK}", versions=versions)
        if old == new:
            return Reference(None, f"the baseline ran another build of executorch {old} than this one, which no "
                                   f"install of {old} from the package index reproduces; {FALLBACK}",
                             versions=versions)
        folder, why = self.install(old)
        if folder is None:
            return Reference(None, f"the baseline's runtime (executorch {old}) could not be installed beside this "
                                   f"one: {why}; {FALLBACK}", versions=versions)
        logs = self.log_dir or folder.parent
        pair = RuntimePair(WorkerRuntime(folder, log_dir=logs), WorkerRuntime(None, log_dir=logs))
        try:
            with heavy_work(self.lock_file, what=f"starting executorch {old} and {new}", progress=self.progress):
                if self.progress is not None:
                    self.progress(f"starting executorch {old} (the baseline's) and {new} in worker processes")
                pair.reference.start()
                pair.candidate.start()
            theirs = pair.reference.build_identity()
        except Sme2Error as exc:
            pair.close()
            return Reference(None, f"the baseline's runtime (executorch {old}, installed in {folder}) does not start "
                                   f"with this Python and torch: {str(exc).splitlines()[0]}; {FALLBACK}",
                             versions=versions)
        mine, got = comparable_builds(baseline, theirs)
        if mine != got:
            pair.close()
            differ = sorted(k for k in {*mine, *got} if mine.get(k) != got.get(k))
            return Reference(None, f"executorch {old} from the package index is not the runtime the baseline ran "
                                   f"({', '.join(differ)} differ: a build of one's own?); {FALLBACK}",
                             versions=versions)
        return Reference(pair, f"the baseline's runtime, executorch {old}, installed in {folder} and proven by its "
                               f"sha256 ({str(theirs.get('runtime_sha256', ''))[:10]}), measured in a worker process "
                               f"beside executorch {new}, in interleaved blocks", folder, versions,
                         lib_dir=folder / "executorch" / "lib")

    def runner_reference(self, target: str, baseline: Mapping[str, Any], current: Mapping[str, Any], *,
                         cache: Path | None, wheel: Path | None = None) -> Reference:
        """pytest-sme2's own runner for ``target`` as the baseline ran it (build identity ``baseline``, another
        executorch than ``current``'s): built again against that release's SDK (its wheel: installed here for the
        host, the aarch64 wheel fetched for the emulator, ``wheel`` when given) and proven by the binary's sha256
        and its libraries'; or why not."""
        from pytest_sme2.runners.build import (
            TARGET_HOST,
            aarch64_wheel,
            build_runner,
            host_is_aarch64,
            installed_sdk,
            unpacked_sdk,
        )

        old = str(baseline.get("executorch_version", ""))
        new = str(current.get("executorch_version", ""))
        versions = (old, new)
        if not old or not new or old == new:
            return Reference(None, "", versions=versions)
        if self.root is None:
            return Reference(None, f"pytest-sme2's runner on the baseline's executorch {old} is not built "
                                   f"({self.why_off or '--sme2-runtimes=none'}); {FALLBACK}", versions=versions)
        folder: Path | None = None
        try:
            with heavy_work(self.lock_file, what=f"building the runner against executorch {old}",
                            progress=self.progress):
                if target == TARGET_HOST or host_is_aarch64():
                    folder, why = self.install(old)
                    if folder is None:
                        return Reference(None, f"the baseline's executorch {old} could not be installed for its C++ "
                                               f"SDK: {why}; {FALLBACK}", versions=versions)
                    sdk = installed_sdk(folder)
                else:
                    sdk = unpacked_sdk(aarch64_wheel(old, cache or self.root, wheel=wheel, progress=self.progress),
                                       old, cache or self.root)
                built = build_runner(target, cache_dir=cache, sdk=sdk, progress=self.progress)
        except Sme2Error as exc:
            return Reference(None, f"pytest-sme2's runner could not be built against executorch {old}'s SDK: "
                                   f"{str(exc).splitlines()[0]}; {FALLBACK}", versions=versions)
        sha = str(baseline.get("runner_sha256", ""))
        got = file_sha256(built.path)
        if got != sha:
            return Reference(None, f"pytest-sme2's runner built against executorch {old}'s SDK hashes to {got[:10]}, "
                                   f"not the baseline's {sha[:10]} (its source or the compiler changed since); "
                                   f"{FALLBACK}", folder, versions)
        libraries = dict(baseline.get("libraries") or {})
        differ = sorted(name for name, digest in libraries.items()
                        if not (sdk.lib_dir / name).is_file() or file_sha256(sdk.lib_dir / name) != digest)
        if differ:
            return Reference(None, f"executorch {old}'s SDK does not hold the libraries the baseline's runner loaded "
                                   f"({', '.join(differ)}); {FALLBACK}", folder, versions)
        return Reference(None, f"the baseline's runner, pytest-sme2's own built against executorch {old}'s SDK "
                               f"({sdk.origin}) and proven by its sha256 ({sha[:10]}) and its libraries', measured "
                               f"beside the runner on executorch {new}, in interleaved blocks", folder, versions,
                         binary=built.path, lib_dir=sdk.lib_dir)

    def install(self, version: str) -> tuple[Path | None, str]:
        """``executorch==version`` installed under :attr:`root` (once; reused by later sessions): ``(folder, "")``,
        or ``(None, why)``."""
        assert self.root is not None
        if not _RELEASE.match(version):
            return None, f"{version!r} is not a release on the package index (a build of one's own?)"
        folder = self.root / f"executorch-{version}"
        if (folder / _COMPLETE).is_file():
            return folder, ""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return None, f"cannot create {self.root}: {exc.strerror or exc}"
        with file_lock(self.root / f".executorch-{version}.lock"):
            if (folder / _COMPLETE).is_file():  # another session installed it meanwhile
                return folder, ""
            if self.progress is not None:
                self.progress(f"installing executorch {version} (the baseline's runtime) into {self.root}")
            staging = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=self.root))
            try:
                with heavy_work(self.lock_file, what=f"installing executorch {version}", progress=self.progress):
                    why = _pip_install(version, staging)
                if why:
                    return None, why
                (staging / _COMPLETE).write_text(f"executorch {version}\n")
                if folder.exists():  # an interrupted install's leftovers
                    shutil.rmtree(folder)
                staging.rename(folder)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return folder, ""


def _pip_install(version: str, target: Path) -> str:
    """``pip install --no-deps --target target executorch==version``: "" when it did, else why not, in one line."""
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--disable-pip-version-check",
               "--quiet", "--target", str(target), f"executorch=={version}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return f"pip did not finish within {INSTALL_SECONDS:.0f} s"
    except OSError as exc:
        return f"pip could not be run ({exc.strerror or exc})"
    if done.returncode == 0:
        return ""
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()
             and not line.lstrip().startswith("WARNING: Location")]
    errors = [line for line in lines if line.startswith("ERROR")] or lines
    return f"pip exited with status {done.returncode} ({errors[-1] if errors else 'no output'})"


def runtime_library_names(*lib_dirs: Path | None) -> set[str]:
    """The file names of the shared libraries of executorch's runtime, in ``lib_dirs`` (another executorch's) and in
    the installed one: what two runtimes measured side by side differ in by design."""
    from pytest_sme2.runners.local import runtime_files

    names = {p.name for d in lib_dirs if d is not None for p in d.glob("*")}
    with contextlib.suppress(Sme2Error):
        names |= {p.name for p in runtime_files()[2]}
    return names
