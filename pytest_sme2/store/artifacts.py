"""What is under test, and a store that keeps it: the ``.pte``, its inputs, and the runtime or runner build.

A baseline belongs to a test on a device (see ``device``); the *artifact* is what a change to the project
changes: the exported program, the input files, the runtime (the executorch pybindings library) or the
``executor_runner`` build. Each baseline records the :class:`Artifact` it measured, so the gate can tell

- an **unchanged** artifact (same program, inputs and build): a slower median is the machine drifting;
- a **changed** artifact: compared, in the same session, with the baseline's own artifact re-measured in
  interleaved blocks, when the :class:`ArtifactStore` still holds it; else with the stored samples.

The store is content-addressed (``<root>/<sha256[:2]>/<sha256>``): a file is written once, atomically,
whatever its name was, so several workers and sessions share it safely. Baselines are small and meant to
be committed; the store holds ``.pte`` files and runner binaries (megabytes) and is meant to be cached
(e.g. a CI cache keyed on the baseline directory), see the README.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from pytest_sme2.device.identity import LATENCY_UNTRACED
from pytest_sme2.errors import BaselineError
from pytest_sme2.store.files import TMP_PREFIX, file_sha256, replace_atomically


@dataclass(frozen=True)
class Artifact:
    """The program, inputs, build and measuring recipe of one measurement: what decides its number.

    ``build`` is the runner's ``build_identity(variant)``: for the local runtime the executorch version and
    the sha256 of its extension module and libraries (``runtime_*``), for ``executor_runner`` builds the
    binary's sha256 (``runner_sha256``) and, for a runner that names them (pytest-sme2's own), the non-system
    shared libraries it loaded (``libraries``: file name -> sha256). ``recipe`` is how it was measured
    (``Measurement.recipe()``: the measuring code's version, runs and warm-up per block; for the measured arm of
    an SME2 on/off pair, the SME2-off arm's program and build). Two artifacts are the same when all four parts are;
    a baseline written before ``recipe`` existed records none, and its recipe is then not compared (see
    :meth:`differences`).

    What else picks the code that runs (:mod:`device.codepaths`): ``shared_objects``, every shared object the
    runner's process mapped (``{name: sha256}``, from its memory map), and ``environment``, the code-path variables
    set (``LD_PRELOAD``, ``LD_LIBRARY_PATH``, ...); and ``executions``, the warm-up and runs per block the
    measurement ran after block sizing (``{"warmup": n, "runs": n}``). Each is None where it was not recorded (a
    baseline of an earlier pytest-sme2, a runner whose process cannot be read): unknown, not compared, and said
    (:meth:`unrecorded`).
    """

    pte_sha256: str
    inputs_sha256: tuple[str, ...] = ()
    build: Mapping[str, Any] = field(default_factory=dict)
    recipe: Mapping[str, Any] = field(default_factory=dict)
    shared_objects: Mapping[str, str] | None = None
    environment: Mapping[str, str] | None = None
    executions: Mapping[str, int] | None = None

    @classmethod
    def of(cls, pte: Path, inputs: Sequence[Path], build: Mapping[str, Any],
           recipe: Mapping[str, Any] | None = None) -> Artifact:
        return cls(file_sha256(pte), tuple(file_sha256(p) for p in inputs), dict(build), dict(recipe or {}))

    def differences(self, other: Artifact) -> list[str]:
        """What changed from ``self`` (the baseline's) to ``other`` (the candidate's), in words.

        A baseline without a recipe (written before pytest-sme2 recorded one) is compared on its program, inputs
        and build only: its runs, warm-up, measuring code and SME2-off arm are unknown, not "changed" (re-record it
        with ``--sme2-update-baseline`` to compare them too).
        """
        out = []
        if self.pte_sha256 != other.pte_sha256:
            out.append(f"model program changed (.pte {self.pte_sha256[:10]} -> {other.pte_sha256[:10]})")
        if self.inputs_sha256 != other.inputs_sha256:
            out.append("input files changed")
        mine, theirs = comparable_builds(self.build, other.build)
        if mine != theirs:
            what = "runtime" if is_runtime(self.build) or is_runtime(other.build) else "runner build"
            out.append(f"{what} changed ({'; '.join(_changed(mine, theirs)) or 'path only'})")
        if self.recipe and dict(self.recipe) != dict(other.recipe):
            out.append(f"measurement changed ({'; '.join(_changed(self.recipe, other.recipe))})")
        return out + self.code_path_differences(other)

    def code_path_differences(self, other: Artifact) -> list[str]:
        """What changed in the shared objects, the code-path environment and the effective executions; each only
        where both record it."""
        from pytest_sme2.device.codepaths import changed_objects

        out = []
        if self.shared_objects is not None and other.shared_objects is not None:
            objects = changed_objects(self.shared_objects, other.shared_objects)
            if objects:
                out.append(f"shared objects changed ({', '.join(objects)})")
        if self.environment is not None and other.environment is not None and self.environment != other.environment:
            env = [f"{k} {self.environment.get(k, '(unset)')} -> {other.environment.get(k, '(unset)')}"
                   for k in sorted({*self.environment, *other.environment})
                   if self.environment.get(k) != other.environment.get(k)]
            out.append(f"environment changed ({'; '.join(env)})")
        if self.executions is not None and other.executions is not None:
            out += _executions_changed(self.executions, other.executions)
        return out

    def unrecorded(self) -> list[str]:
        """What this (baseline's) artifact does not record, so is not compared: ``[]`` for a recent one."""
        return [what for what, value in (("the shared objects its runner mapped", self.shared_objects),
                                          ("the code-path environment", self.environment),
                                          ("the effective warm-up and runs", self.executions)) if value is None]

    def to_dict(self) -> dict[str, Any]:
        out = {"pte_sha256": self.pte_sha256, "inputs_sha256": list(self.inputs_sha256), "build": dict(self.build),
               "recipe": dict(self.recipe)}
        for key, value in (("shared_objects", self.shared_objects), ("environment", self.environment),
                           ("executions", self.executions)):
            if value is not None:
                out[key] = dict(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Artifact:
        def opt(key: str) -> dict[str, Any] | None:
            value = data.get(key)
            return dict(value) if isinstance(value, Mapping) else None

        return cls(str(data["pte_sha256"]), tuple(str(x) for x in data.get("inputs_sha256", ())),
                   dict(data.get("build", {})), dict(data.get("recipe", {})), shared_objects=opt("shared_objects"),
                   environment=opt("environment"), executions=opt("executions"))


#: Runs per block are sized to the machine's speed (``profile._size_blocks``: a few percent apart between sessions on
#: one machine, so a run or two more or fewer): only a factor beyond this, another sizing regime, is a change.
RUNS_CHANGE_FACTOR = 1.5


def _executions_changed(old: Mapping[str, int], new: Mapping[str, int]) -> list[str]:
    """The effective warm-up when it differs at all (cold executions counted or not), the runs per block beyond
    :data:`RUNS_CHANGE_FACTOR`."""
    out = []
    if old.get("warmup") != new.get("warmup"):
        out.append(f"effective warm-up changed ({old.get('warmup')} -> {new.get('warmup')} per block, after block "
                   "sizing)")
    a, b = old.get("runs") or 0, new.get("runs") or 0
    if a > 0 and b > 0 and max(a, b) / min(a, b) > RUNS_CHANGE_FACTOR:
        out.append(f"effective runs changed ({a} -> {b} per block, after block sizing)")
    return out


def _changed(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``key old -> new`` for every key whose value differs (nested mappings by their own keys)."""
    parts = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a == b or k == "path":
            continue
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            parts += _changed(a, b, f"{prefix}{k}.")
        else:
            parts.append(f"{prefix}{k} {_short(a)} -> {_short(b)}")
    return parts


class BuildsRunner(Protocol):
    """What :func:`artifact_of` reads of a runner (every :class:`~pytest_sme2.runners.base.Runner` has it): a
    Protocol here, so that ``store/`` does not import ``runners/``, which stands above it."""

    def build_identity(self, variant: str | None) -> Mapping[str, Any]: ...


class MeasuredArtifact(Protocol):
    """What :func:`artifact_of` reads of a measurement (a :class:`~pytest_sme2.measure.recipe.Measurement`): a
    Protocol here, so that ``store/`` does not import ``measure/``, which stands above it."""

    @property
    def pte(self) -> Path: ...

    @property
    def inputs(self) -> tuple[Path, ...]: ...

    @property
    def variant(self) -> str | None: ...

    @property
    def build(self) -> Path | None: ...

    @property
    def timing_build(self) -> Path | None: ...

    @property
    def latency(self) -> str: ...

    def recipe(self) -> dict[str, Any]: ...


def artifact_of(runner: BuildsRunner, measurement: MeasuredArtifact, *,
                libraries: Mapping[str, str] | None = None, shared_objects: Mapping[str, str] | None = None,
                environment: Mapping[str, str] | None = None,
                executions: Mapping[str, int] | None = None) -> Artifact:
    """The program, inputs, builds and recipe ``measurement`` runs: the traced build, the timing build when the
    latency comes from it (the builds whose runs give numbers), and ``libraries`` (``{path: sha256}``, the
    non-system shared libraries its runs mapped) by file name — where they lie is not what they are; with the
    ``shared_objects``, ``environment`` and ``executions`` of :class:`Artifact` as given."""
    build = dict(runner.build_identity(measurement.variant))
    if libraries:
        build["libraries"] = {Path(path).name: sha for path, sha in sorted(libraries.items())}
    if measurement.build is not None:
        build["runner_sha256"] = file_sha256(measurement.build)
    if measurement.latency != LATENCY_UNTRACED:
        build.pop("timing_runner_sha256", None)
    elif measurement.timing_build is not None:
        build["timing_runner_sha256"] = file_sha256(measurement.timing_build)
    artifact = Artifact.of(measurement.pte, measurement.inputs, build, measurement.recipe())
    return replace(artifact, shared_objects=shared_objects, environment=environment, executions=executions)


def is_runtime(build: Mapping[str, Any]) -> bool:
    """Is this the build identity of an in-process runtime (the pybindings), not of a runner binary?"""
    return "runtime_module" in build


def comparable_builds(baseline: Mapping[str, Any], candidate: Mapping[str, Any]
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two builds as they compare: without where the binaries lie, and without the loaded ``libraries`` when
    the baseline does not record them (written before they were recorded: unknown, not changed)."""
    mine, theirs = _without_path(baseline), _without_path(candidate)
    if "libraries" not in mine:
        theirs.pop("libraries", None)
    return mine, theirs


def _without_path(build: Mapping[str, Any]) -> dict[str, Any]:
    # Where a runner binary lies is not what it is: the same build checked out elsewhere is unchanged.
    return {k: v for k, v in build.items() if k != "path"}


def _short(value: Any) -> str:
    text = str(value)
    return text[:12] if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text


#: where :meth:`ArtifactStore.put_runner` keeps runnable copies of runner binaries, beside their ``lib/``
RUNNERS_DIR = "runners"


def _link(source: Path, target: Path) -> None:
    """``target`` as a hard link of ``source`` (the same content, no second copy), or a copy where links fail."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


class ArtifactStore:
    """Files by content under ``root``: programs, input files and runner binaries of recorded baselines."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        #: sha256 -> what was wrong with the stored copy this store removed (said by whoever asked for it)
        self.damaged: dict[str, str] = {}

    def path_of(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def get(self, sha256: str) -> Path | None:
        """The stored file with this content, or None when the store does not hold it, or held a damaged copy (its
        content no longer hashes to its name: cut off, overwritten), which is removed and never served."""
        path = self.path_of(sha256)
        if not path.is_file():
            return None
        return path if self._intact(path, sha256) else None

    def put_runner(self, binary: str | Path) -> str:
        """Store a runner binary (as :meth:`put`) and, when it loads its libraries from a ``lib/`` beside it (our own
        runner's RUNPATH ``$ORIGIN/lib``, :data:`pytest_sme2.runners.build.RPATH`), a runnable copy with them:
        ``<root>/runners/<sha256>/<name>`` and its ``lib/`` (each library stored by content too, linked, not copied
        twice). A bare copy in the store could not start: its ``$ORIGIN/lib`` would be the store's. Returns the
        sha256; :meth:`runner` gives the copy to run."""
        src = Path(binary)
        digest = self.put(src, mode=0o755)
        lib = src.parent / "lib"
        home = self.root / RUNNERS_DIR / digest
        if not lib.is_dir() or (home / src.name).is_file():
            return digest
        try:
            libraries = sorted(p for p in lib.resolve().iterdir() if ".so" in p.name and p.is_file())
            tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}runner-", dir=self.root))
            (tmp / "lib").mkdir()
            for library in libraries:
                _link(self.get(self.put(library, mode=0o755)) or library, tmp / "lib" / library.name)
            _link(self.path_of(digest), tmp / src.name)
            home.parent.mkdir(exist_ok=True)
            try:
                tmp.replace(home)
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
                if not (home / src.name).is_file():  # else another process stored it first: the same content
                    raise
        except OSError as exc:
            raise BaselineError(
                f"cannot store the runner {src} with its libraries in the artifact store {self.root}: "
                f"{exc.strerror or exc}; point --sme2-artifact-dir at a writable directory") from None
        return digest

    def runner(self, sha256: str) -> Path | None:
        """The stored runner binary with this content, as it can run: the copy beside its libraries
        (:meth:`put_runner`) when there is one and it is intact, else the plain stored copy (a self-contained runner,
        or one stored by an earlier pytest-sme2), else None."""
        home = self.root / RUNNERS_DIR / sha256
        binaries = [p for p in home.iterdir() if p.is_file()] if home.is_dir() else []
        if len(binaries) == 1 and file_sha256(binaries[0]) == sha256:
            return binaries[0]
        return self.get(sha256)

    def _intact(self, path: Path, sha256: str) -> bool:
        """Whether ``path`` holds the content named ``sha256``; a damaged copy is removed (see :attr:`damaged`).

        Content-addressed: a concurrent ``put`` of the good file renames it over the damaged one, so the copy is
        moved aside first and checked again there; a good file found there (that ``put`` won) is put back."""
        with contextlib.suppress(OSError):
            if file_sha256(path) == sha256:
                return True
        try:
            size = path.stat().st_size
            fd, aside = tempfile.mkstemp(prefix=f"{TMP_PREFIX}damaged-", dir=path.parent)
            os.close(fd)
            path.replace(aside)
            if file_sha256(aside) == sha256:
                Path(aside).replace(path)
                return True
            Path(aside).unlink()
        except OSError:
            return path.is_file() and file_sha256(path) == sha256
        self.damaged[sha256] = (f"the stored copy {path} was damaged ({size} bytes that do not hash to its name, "
                                "e.g. cut off while written or restored): removed; it is stored again the next time "
                                "a baseline records this artifact")
        return False

    def put(self, source: str | Path, *, mode: int = 0o644) -> str:
        """Store ``source`` under its sha256 (once; atomically) and return the sha256; a damaged stored copy of the
        same content is replaced."""
        src = Path(source)
        digest = file_sha256(src)
        target = self.path_of(digest)
        if target.is_file() and self._intact(target, digest):
            return digest
        try:
            # same content under the same name: a concurrent writer is harmless
            with src.open("rb") as inp:
                replace_atomically(target, lambda out: shutil.copyfileobj(inp, out, 1 << 20), mode=mode)
        except OSError as exc:
            raise BaselineError(
                f"cannot store {src} in the artifact store {self.root}: {exc.strerror or exc}; point "
                "--sme2-artifact-dir at a writable directory"
            ) from None
        return digest
