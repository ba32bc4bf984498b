"""A runner build kept in the artifact store runs from there.

pytest-sme2's own runner finds executorch's libraries through RUNPATH ``$ORIGIN/lib`` (``runners/build.RPATH``): a
plain copy in the content-addressed store (``<root>/<sha[:2]>/<sha>``) looks for ``<root>/<sha[:2]>/lib`` and cannot
start, so a baseline's stored runner could never be re-measured once its build cache was gone (a fresh CI runner
that restored ``.sme2_artifacts/``). ``ArtifactStore.put_runner`` keeps a runnable copy beside its libraries.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_sme2.store.artifacts import RUNNERS_DIR, Artifact, ArtifactStore
from pytest_sme2.store.files import file_sha256


@pytest.mark.slow
def test_our_own_runner_stored_in_the_artifact_store_runs_from_there_after_its_build_is_gone(tmp_path: Path) -> None:
    """A real g++ build of the runner, stored, its build directory deleted: the stored runner starts and probes."""
    from toolchain import require_host_compiler

    from pytest_sme2.runners.build import TARGET_HOST, build_runner

    require_host_compiler()
    built = build_runner(TARGET_HOST, cache_dir=tmp_path / "build")
    sha = file_sha256(built.path)
    store = ArtifactStore(tmp_path / "store")
    assert store.put_runner(built.path) == sha
    shutil.rmtree(tmp_path / "build")  # the build cache is gone (another runner, a cleaned cache)

    runnable = store.runner(sha)
    assert runnable is not None and runnable.parent == store.root / RUNNERS_DIR / sha
    assert file_sha256(runnable) == sha  # the same binary the baseline recorded
    done = subprocess.run([str(runnable), "--probe"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "sme2_runner probe:" in done.stdout
    # The plain content-addressed copy is the same bytes, and cannot start: what the store served before.
    plain = store.get(sha)
    assert plain is not None and plain != runnable
    done = subprocess.run([str(plain), "--probe"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "error while loading shared libraries" in done.stderr


def test_a_runner_is_stored_beside_its_libraries_and_the_reference_measurement_runs_that_copy(
        tmp_path: Path) -> None:
    """Each library is stored once by content and linked into the runner's ``lib/``; a second put changes nothing;
    a runner without ``lib/`` (a self-contained executor_runner) is served as the plain copy; the judge's reference
    measurement takes the runnable copy of the baseline's build."""
    from stored_candidate import stored_candidate

    from pytest_sme2.judge import reference_measurement

    build = tmp_path / "build"
    (build / "sdk").mkdir(parents=True)
    (build / "sdk" / "libexecutorch.so").write_bytes(b"library")
    (build / "sdk" / "notes.txt").write_text("not a library")
    (build / "lib").symlink_to(build / "sdk", target_is_directory=True)
    (build / "sme2_runner").write_bytes(b"runner")
    store = ArtifactStore(tmp_path / "store")
    sha = store.put_runner(build / "sme2_runner")
    home = store.root / RUNNERS_DIR / sha
    assert store.runner(sha) == home / "sme2_runner"
    assert [p.name for p in (home / "lib").iterdir()] == ["libexecutorch.so"]
    assert (home / "lib" / "libexecutorch.so").read_bytes() == b"library"
    assert store.get(file_sha256(build / "sdk" / "libexecutorch.so")) is not None  # stored by content too
    assert store.put_runner(build / "sme2_runner") == sha and store.runner(sha) == home / "sme2_runner"

    alone = tmp_path / "executor_runner"
    alone.write_bytes(b"static runner")
    other = store.put_runner(alone)
    assert store.runner(other) == store.path_of(other) and not (store.root / RUNNERS_DIR / other).exists()
    (home / "sme2_runner").unlink()  # a runnable copy that no longer hashes is not served (a link: replaced)
    (home / "sme2_runner").write_bytes(b"damaged")
    assert store.runner(sha) == store.path_of(sha)
    shutil.rmtree(home)
    store.put_runner(build / "sme2_runner")

    class Runner:
        def build_identity(self, variant: str | None) -> dict[str, str]:
            return {"runner_sha256": "c" * 64}  # the candidate runs another build

    pte, inputs, candidate = stored_candidate(tmp_path, store)
    ref = reference_measurement(Artifact(pte, inputs, {"runner_sha256": sha}), candidate, Runner(),  # type: ignore[arg-type]
                                store)
    assert ref.measurement is not None and ref.measurement.build == home / "sme2_runner"
