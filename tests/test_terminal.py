"""What a user sees while a session runs: pytest's progress line stays whole, and test ids (so baseline keys)
do not move with where pytest puts its rootdir.

Each test runs a real pytest session in a subprocess of a temp project — on a pseudo-terminal where the
terminal matters — exporting and measuring the real toy_cnn on the local runtime.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]

TEST = textwrap.dedent("""
    import pytest

    @pytest.mark.sme2_model("toy_cnn")
    def test_a(exported_model, sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(exported_model))

    def test_b():
        pass
""")


def _project(root: Path) -> Path:
    (root / "test_x.py").write_text(TEST)
    (root / "pytest.ini").write_text(f"[pytest]\nsme2_models = {REPO / 'example_models' / 'models.py'}\n")
    return root


def _argv(cache: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist",
            "--sme2-runs=3", "--sme2-blocks=4", "--sme2-busy-limit=100", f"--sme2-cache-dir={cache}"]


def _screen(raw: str) -> list[str]:
    """The lines a terminal shows after ``raw``: backspaces move left, later characters overwrite earlier ones."""
    lines: list[str] = []
    line: list[str] = []
    col = 0
    for ch in re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", raw):  # colours are not text
        if ch == "\n":
            lines.append("".join(line).rstrip())
            line, col = [], 0
        elif ch == "\r":
            col = 0
        elif ch == "\b":
            col = max(0, col - 1)
        else:
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
    lines.append("".join(line).rstrip())
    return lines


def _run_on_a_terminal(argv: list[str], cwd: Path, timeout: float = 600) -> str:
    primary, secondary = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "120", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(argv, cwd=cwd, stdin=secondary, stdout=secondary, stderr=secondary, env=env)
    os.close(secondary)
    chunks = []
    deadline = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([primary], [], [], 1.0)
        if ready:
            try:
                data = os.read(primary, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
        assert time.monotonic() < deadline, "pytest did not finish"
    proc.wait(timeout=60)
    os.close(primary)
    return b"".join(chunks).decode("utf-8", errors="replace")


def test_export_progress_keeps_pytests_line_whole(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    _project(project)
    raw = _run_on_a_terminal(_argv(tmp_path / "cache"), project)
    # On the terminal the export said it was alive, at the end of pytest's line ...
    assert "[sme2: exporting toy_cnn fp32/xnnpack: lowering for xnnpack (" in raw
    # ... and left the line as pytest wrote it: the file name once, both results on it.
    screen = _screen(raw)
    progress = [line for line in screen if line.startswith("test_x.py")]
    assert len(progress) == 1 and re.fullmatch(r"test_x\.py \.\. +\[100%\]", progress[0]), screen
    assert not any("[sme2" in line for line in screen)
    assert any(line.startswith("sme2 exports: 1 exported in ") for line in screen)

    # In a log (no terminal) nothing is written mid-line at all.
    log = subprocess.run(_argv(tmp_path / "cache2"), cwd=project, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert "[sme2" not in log.stdout and re.search(r"^test_x\.py \.\. +\[100%\]$", log.stdout, re.M), log.stdout


def test_a_path_option_that_would_move_the_rootdir_is_refused(tmp_path: Path) -> None:
    """Without an ini file, ``--sme2-baseline-dir /abs/dir`` as two arguments moved pytest's rootdir up."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_x.py").write_text(TEST)
    baselines = tmp_path / "baselines"
    baselines.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    models = f"--sme2-models={REPO / 'example_models' / 'models.py'}"
    moved = subprocess.run([*_argv(tmp_path / "cache"), models, "--sme2-baseline-dir", str(baselines), "test_x.py"],
                           cwd=project, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert moved.returncode == pytest.ExitCode.USAGE_ERROR, moved.stdout + moved.stderr
    assert (f"--sme2-baseline-dir {baselines}: pytest took {baselines} for a test path when it chose the rootdir"
            in moved.stderr)
    assert f"moved the rootdir from {project} to {tmp_path}" in moved.stderr
    assert f"--sme2-baseline-dir={baselines}" in moved.stderr
    # Written as one argument, the rootdir stays the project and the baseline is keyed on test_x.py::test_a.
    ok = subprocess.run([*_argv(tmp_path / "cache"), models, f"--sme2-baseline-dir={baselines}", "test_x.py"],
                        cwd=project, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"rootdir: {project}" in ok.stdout
    assert [p.name.startswith("test_x.py_test_a--") for p in baselines.glob("*.json")] == [True]
