"""The baseline's own program on a fresh runner: rebuilt from the commit it was recorded at, proven by its hash.

A changed artifact is compared in the same session with the baseline's artifact (``session``) when the artifact
store holds the baseline's ``.pte`` and inputs. A fresh CI runner with baselines committed from another machine
has no store, so before this the comparison fell back to the stored samples (``stored``: margin + drift
allowance, blind below it). Now the missing program is rebuilt:

1. A baseline records its :class:`~pytest_sme2.store.baseline.Recipe`: the registered model, dtype and backend,
   the models file that registered it (relative to the git checkout), and the commit the checkout was at (and
   whether the models file had uncommitted changes then). A baseline written before recipes existed has none: the
   current test's model, dtype and backend stand in, and only the commit that last touched the baseline file is
   tried.
2. The candidate commits are tried in turn: the recorded one (unless the models file was dirty then: that commit
   does not hold the code that was measured), then the commit that last touched the baseline file (the usual
   "record, then commit model and baseline together"). Each is checked out as a detached ``git worktree`` under
   ``<cache dir>/rebuild/`` and the model exported there by an export worker (:mod:`pytest_sme2.program.pool`) whose
   working directory is that worktree, so the user's model code is the commit's.
3. The rebuilt ``.pte`` and input files must hash to the baseline's recorded ones. Then they go into the artifact
   store and the comparison is ``session``. Otherwise :class:`Rebuilt` says why (which commit, which hash, the
   likely cause) and the comparison stays ``stored``, with that reason in the verdict.

The hash is the proof: a guessed commit, another torch, or a factory that reads files outside git can only fail
it, never produce a false reference. Outside a git checkout nothing is tried and the verdict says so.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_sme2.measure.hostlock import heavy_work
from pytest_sme2.store.artifacts import Artifact, ArtifactStore
from pytest_sme2.store.baseline import Recipe
from pytest_sme2.store.files import file_lock, file_sha256
from pytest_sme2.store.gitinfo import git

#: where the worktrees go, under the export cache dir
REBUILD_DIR = "rebuild"
#: pytest-sme2's own runner source, in a checkout of pytest-sme2 (the only project whose git holds it); commits
#: before the package was laid out by concern hold it at the second path
RUNNER_SOURCE = "pytest_sme2/runners/cpp/sme2_runner.cpp"
_RUNNER_SOURCES = (RUNNER_SOURCE, "pytest_sme2/runner_src/sme2_runner.cpp")
_GIT_SECONDS = 60.0
_FETCH_DEPTH = ("the clone may be shallow (actions/checkout fetches one commit unless told fetch-depth: 0): fetch "
                "the history, e.g. fetch-depth: 0")


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild did: ``ok`` when the store now holds the baseline's program and inputs; ``message`` says how
    (the commit) or why not (and that the comparison falls back to the stored samples)."""

    ok: bool
    message: str


def _git(cwd: Path, *args: str) -> str | None:
    """``git args`` in ``cwd``: its stdout stripped, or None when git is missing or the command failed."""
    return git(list(args), cwd, timeout=_GIT_SECONDS)


def git_root(path: Path) -> Path | None:
    """The root of the git checkout holding ``path`` (a file or directory), or None outside one."""
    where = path if path.is_dir() else path.parent
    while not where.exists() and where != where.parent:
        where = where.parent
    top = _git(where, "rev-parse", "--show-toplevel")
    return Path(top).resolve() if top else None


def recipe_for(model: str, dtype: str, backend: str, models_file: Path) -> Recipe:
    """The recipe a baseline of ``model`` records now: the checkout's HEAD and whether ``models_file`` is dirty."""
    path = models_file.resolve()
    root = git_root(path)
    if root is None:
        return Recipe(model, dtype, backend, str(path))
    try:
        relative = path.relative_to(root).as_posix()
    except ValueError:  # the models file lies outside the checkout: no commit holds it
        return Recipe(model, dtype, backend, str(path))
    head = _git(root, "rev-parse", "HEAD") or ""
    status = _git(root, "status", "--porcelain", "--", relative)
    return Recipe(model, dtype, backend, relative, head, dirty=bool(status) or status is None)


@dataclass(frozen=True)
class Rebuilder:
    """How this session rebuilds a baseline's missing program: the current test's recipe (what a baseline recorded
    now stores; None with ``why_not`` when its model cannot be rebuilt) and the cache dir the worktrees go in."""

    recipe: Recipe | None
    cache_dir: Path
    why_not: str = ""
    progress: Callable[[str], None] | None = None
    #: the target of pytest-sme2's own runner when the device runs it (``runner_build.TARGETS``), else None
    runner_target: str | None = None
    #: where runner builds are cached, and the aarch64 wheel (offline) for the linux-aarch64 target
    runner_cache: Path | None = None
    aarch64_wheel: Path | None = None
    #: the host's measuring lock (:mod:`measure.hostlock`): a rebuild is heavy work, which waits for measurements
    lock_file: Path | None = None

    def rebuild(self, baseline_recipe: Recipe | None, artifact: Artifact, baseline_file: Path,
                store: ArtifactStore, runtime: Path | None = None) -> Rebuilt:
        """Rebuild the program and inputs of ``artifact`` (the baseline's) into ``store``, or say why not.

        ``runtime``: a folder holding the baseline's executorch (:mod:`measure.runtimes`): its exporter rebuilds it."""
        # A baseline without a recipe (written before they were recorded): the current test's model, dtype and backend,
        # and no recorded commit (HEAD now is not the recording's)
        recipe = baseline_recipe or (replace(self.recipe, commit="", dirty=False) if self.recipe else None)
        fallback = "compared with the stored samples instead"
        if recipe is None:
            return Rebuilt(False, f"the baseline's program cannot be rebuilt ({self.why_not or 'no recipe'}); "
                                  f"{fallback}")
        root = git_root(baseline_file)
        if root is None:
            return Rebuilt(False, f"the baseline's program cannot be rebuilt: {baseline_file.parent} is not in a git "
                                  "checkout (or git is not installed), so there is no commit to rebuild it from; "
                                  f"{fallback} (cache .sme2_artifacts/ between runs, see the README's 'Gating CI')")
        if Path(recipe.models_file).is_absolute():
            return Rebuilt(False, f"the baseline's program cannot be rebuilt: its models file {recipe.models_file} "
                                  f"lies outside the git checkout {root}; {fallback}")
        candidates = _candidates(root, recipe, baseline_file)
        if not candidates:
            return Rebuilt(False, f"the baseline's program cannot be rebuilt: {baseline_file.name} is not committed "
                                  f"in {root}, so no commit is known to hold the code it measured (commit it with the "
                                  f"model); {fallback}")
        refused = []
        mismatched = False
        by = f" by the exporter of the executorch in {runtime}" if runtime is not None else ""
        for commit, which in candidates:
            with heavy_work(self.lock_file, what=f"rebuilding {_label(recipe)}", progress=self.progress):
                made, why = _export_at(root, commit, recipe, self.cache_dir, self.progress, runtime=runtime)
            if made is None:
                refused.append(f"at {commit[:10]} ({which}) {why}")
                continue
            pte, inputs = made
            got = (file_sha256(pte), tuple(file_sha256(p) for p in inputs))
            if got == (artifact.pte_sha256, artifact.inputs_sha256):
                store.put(pte)
                for path in inputs:
                    store.put(path)
                return Rebuilt(True, f"the baseline's program was not in the artifact store: rebuilt {_label(recipe)} "
                                     f"from commit {commit[:10]} ({which}){by}; its .pte and inputs hash to the "
                                     f"baseline's ({artifact.pte_sha256[:10]})")
            what = (f".pte hashes to {got[0][:10]}, not the baseline's {artifact.pte_sha256[:10]}"
                    if got[0] != artifact.pte_sha256 else "input files hash to other values than the baseline's")
            refused.append(f"at {commit[:10]} ({which}) the {what}")
            mismatched = True
        cause = (" (the model's code at that commit is not what was measured, e.g. it was recorded from uncommitted "
                 "changes, or torch/executorch differ from the recording's)") if mismatched else ""
        return Rebuilt(False, (f"the baseline's program was not in the artifact store and rebuilding "
                               f"{_label(recipe)} did not reproduce it: {'; '.join(refused)}{cause}; {fallback}"))


    def rebuild_runner(self, sha256: str, baseline_recipe: Recipe | None,
                       baseline_file: Path) -> tuple[Path | None, str]:
        """pytest-sme2's own runner as the baseline ran it (its sha256 ``sha256``), built from the runner source at the
        baseline's commit: ``(binary, how)``, or ``(None, why not)``. Only a project that holds the runner's source
        (pytest-sme2's own repository) can: elsewhere the source came with the installed pytest-sme2, not from git."""
        from pytest_sme2.errors import Sme2Error
        from pytest_sme2.runners.build import build_runner

        fallback = "compared with the stored samples instead"
        if self.runner_target is None:
            return None, (f"the artifact store does not hold the baseline's runner build ({sha256[:12]}), and only "
                          f"pytest-sme2's own runner can be rebuilt; {fallback}")
        root = git_root(baseline_file)
        if root is None:
            return None, (f"the baseline's runner build ({sha256[:12]}) cannot be rebuilt: {baseline_file.parent} is "
                          f"not in a git checkout; {fallback}")
        refused = []
        for commit, which in _candidates(root, baseline_recipe, baseline_file):
            tree, why = worktree(root, commit, self.cache_dir.resolve() / REBUILD_DIR)
            found = next((s for s in _RUNNER_SOURCES if (tree / s).is_file()), None) if tree is not None else None
            if tree is None or found is None:
                refused.append(f"at {commit[:10]} ({which}) " + (why or f"there is no {RUNNER_SOURCE} (the runner's "
                               "source comes with the installed pytest-sme2, not from this project's git)"))
                continue
            if self.progress is not None:
                self.progress(f"rebuilding the baseline's runner from commit {commit[:10]}")
            try:
                with heavy_work(self.lock_file, what="rebuilding the baseline's runner", progress=self.progress):
                    built = build_runner(self.runner_target, cache_dir=self.runner_cache, wheel=self.aarch64_wheel,
                                         source=(tree / found).read_bytes(), progress=self.progress)
            except Sme2Error as exc:
                refused.append(f"at {commit[:10]} ({which}) the build failed: {str(exc).splitlines()[0]}")
                continue
            got = file_sha256(built.path)
            if got == sha256:
                return built.path, (f"the baseline's runner build was not in the artifact store: rebuilt it from "
                                    f"{found} at commit {commit[:10]} ({which}); its binary hashes to the "
                                    f"baseline's ({sha256[:10]})")
            refused.append(f"at {commit[:10]} ({which}) the runner hashes to {got[:10]}, not the baseline's "
                           f"{sha256[:10]} (another compiler or executorch SDK than the recording's?)")
        if not refused:
            refused.append(f"{baseline_file.name} is not committed, so no commit is known to hold the runner it ran")
        return None, f"the baseline's runner build could not be rebuilt: {'; '.join(refused)}; {fallback}"


def rebuild_baseline(path: Path, store: ArtifactStore, cache_dir: Path, *,
                     progress: Callable[[str], None] | None = None, lock_file: Path | None = None) -> Rebuilt:
    """Put the program, inputs and (pytest-sme2's own) runner build that the baseline file ``path`` measured into
    ``store``, rebuilding what it lacks from the baseline's commit, each proven by its sha256 (``pytest-sme2
    rebuild``: what the plugin does for a changed test, done ahead, e.g. in a CI step before the tests). ``ok`` when
    the store holds them all afterwards; ``message`` says what was there, what was rebuilt from which commit, or why
    not. Only a baseline that records its recipe can be rebuilt here: for an older one the plugin takes the model
    from the test itself."""
    from pytest_sme2.errors import Sme2Error
    from pytest_sme2.runners.registry import device
    from pytest_sme2.store.baseline import BaselineStore

    baseline = BaselineStore(path.parent).read(path)
    artifact = baseline.artifact
    if artifact is None:
        return Rebuilt(False, "the baseline records no artifact (written by an earlier pytest-sme2): nothing to "
                              "rebuild; re-record it with --sme2-update-baseline")
    try:  # the device that ran it; its own runner's target, when it builds one
        target = device(str(baseline.identity.get("runner", ""))).own_runner
    except Sme2Error:
        target = None
    rebuilder = Rebuilder(None, cache_dir, why_not="the baseline records no recipe (written before pytest-sme2 "
                          "recorded one); the plugin rebuilds it from the test's own model in the session, or "
                          "re-record it with --sme2-update-baseline", progress=progress, runner_target=target,
                          runner_cache=cache_dir / "runners", lock_file=lock_file)
    held = all(store.get(sha) is not None for sha in (artifact.pte_sha256, *artifact.inputs_sha256))
    said = [f"its program and inputs are in the store ({artifact.pte_sha256[:10]})"] if held else []
    if not held:
        made = rebuilder.rebuild(baseline.rebuild, artifact, path, store)
        if not made.ok:
            return made
        said.append(made.message)
    for key in ("runner_sha256", "timing_runner_sha256"):
        sha = str(artifact.build.get(key, ""))
        if not sha or store.runner(sha) is not None:
            continue
        binary, how = rebuilder.rebuild_runner(sha, baseline.rebuild, path)
        if binary is None:
            return Rebuilt(False, "; ".join([*said, how]))
        store.put_runner(binary)
        said.append(how)
    return Rebuilt(True, "; ".join(said))


def _label(recipe: Recipe) -> str:
    return f"{recipe.model} {recipe.dtype}/{recipe.backend}"


def _candidates(root: Path, recipe: Recipe | None, baseline_file: Path) -> list[tuple[str, str]]:
    """The commits to try, in order, each with why it is a candidate: the recorded one (when the models file was
    clean then), then the one that last touched the baseline file."""
    out: list[tuple[str, str]] = []
    if recipe is not None and recipe.commit and not recipe.dirty:
        out.append((recipe.commit, "the commit the baseline was recorded at"))
    touched = _git(root, "log", "-1", "--format=%H", "--", str(baseline_file.resolve()))
    if touched and touched not in (c for c, _ in out):
        out.append((touched, f"the commit that last touched {baseline_file.name}"))
    return out


#: (checkout root, commit, model, dtype, backend, runtime) -> what the export gave there, once per process
_EXPORTS: dict[tuple[str, str, str, str, str, str], tuple[tuple[Path, tuple[Path, ...]] | None, str]] = {}


def _export_at(root: Path, commit: str, recipe: Recipe, cache_dir: Path, progress: Callable[[str], None] | None, *,
               runtime: Path | None = None) -> tuple[tuple[Path, tuple[Path, ...]] | None, str]:
    """Export ``recipe``'s model as the code was at ``commit`` (by the exporter of the executorch in ``runtime``, else
    the installed one): ``((pte, inputs), "")`` or ``(None, why)``."""
    key = (str(root), commit, recipe.model, recipe.dtype, recipe.backend, str(runtime or ""))
    if key not in _EXPORTS:
        _EXPORTS[key] = _export_in_worktree(root, commit, recipe, cache_dir, progress, runtime=runtime)
    return _EXPORTS[key]


def _export_in_worktree(root: Path, commit: str, recipe: Recipe, cache_dir: Path,
                        progress: Callable[[str], None] | None, *,
                        runtime: Path | None = None) -> tuple[tuple[Path, tuple[Path, ...]] | None, str]:
    from pytest_sme2.program.pool import ExportJob, export_all

    tree, why = worktree(root, commit, cache_dir.resolve() / REBUILD_DIR)
    if tree is None:
        return None, why
    models = tree / recipe.models_file
    if not models.is_file():
        return None, f"the commit has no {recipe.models_file}"
    job = ExportJob(recipe.model, recipe.dtype, recipe.backend, key="", source=str(models))
    if progress is not None:
        progress(f"rebuilding the baseline's {_label(recipe)} from commit {commit[:10]}")
    report = export_all([job], cache_dir=cache_dir.resolve(), processes=1, model_sources=(str(models),),
                        progress=progress, cwd=tree, runtime=runtime)
    if report.failed:
        return None, f"the export failed: {report.failed[0][1]}"
    made = report.outputs.get(job)
    if made is None:
        return None, "the export worker returned no program"
    return made, ""


def worktree(root: Path, commit: str, under: Path) -> tuple[Path | None, str]:
    """A detached ``git worktree`` of ``root`` at ``commit`` under ``under`` (made once, reused): ``(path, "")``,
    or ``(None, why)``. Several processes asking at once take turns on a lock."""
    full = _git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if not full:
        return None, f"the commit is not in this clone; {_FETCH_DEPTH}"
    path = under / full[:16]
    try:
        under.mkdir(parents=True, exist_ok=True)
        with file_lock(under / ".lock"):
            if (path / ".git").exists() and _git(path, "rev-parse", "HEAD") == full:
                return path, ""
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
            _git(root, "worktree", "prune")  # a worktree whose directory was deleted blocks adding it again
            added = subprocess.run(["git", "worktree", "add", "--detach", "--force", str(path), full], cwd=root,
                                   capture_output=True, text=True, timeout=_GIT_SECONDS * 5, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"checking it out under {under} failed: {exc}"
    if added.returncode != 0:
        last = (added.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"git worktree add {path} failed: {last}"
    return path, ""


__all__ = ["REBUILD_DIR", "Rebuilder", "Rebuilt", "git_root", "rebuild_baseline", "recipe_for", "worktree"]
