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

REPO = Path(__file__).resolve().parents[2]

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
    assert "[sme2: test_a: exporting toy_cnn fp32/xnnpack: lowering for xnnpack (" in raw
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


# ------------------------------------------------------------------------------------------ progress on long work

DATA = REPO / "tests" / "data"
#: a recorded program and trace, replayed by a stand-in runner whose every process takes over a second (a pause
#: before it starts): what an emulated block looks like to the display, at no emulation cost
TOY_PTE, TOY_INPUT = DATA / "toy_cnn_fp32_xnnpack.pte", DATA / "toy_cnn_input_fp32.bin"
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
ON_OFF = textwrap.dedent(f"""
    from pathlib import Path

    class Recorded:
        name, dtype, backend = "toy_cnn", "fp32", "xnnpack"
        pte_path, input_files = Path({str(TOY_PTE)!r}), (Path({str(TOY_INPUT)!r}),)

        def to_dict(self):
            return {{"name": self.name, "dtype": self.dtype, "backend": self.backend}}

    def test_on_off(sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile_on_off(Recorded()))
""")


def test_a_long_block_shows_the_test_arm_block_and_elapsed_time_on_pytests_line(tmp_path: Path) -> None:
    """A long block shows the test, the arm, the block and the elapsed time on pytest's progress line."""
    from standin import make_standin

    project = tmp_path / "project"
    project.mkdir()
    (project / "test_x.py").write_text(ON_OFF)
    on, off = (make_standin(tmp_path / arm, trace=TOY_TRACE, pause_s=2.5) for arm in ("on", "off"))
    argv = [*_argv(tmp_path / "cache"), "--sme2-device=host", f"--sme2-runner={on}", f"--sme2-runner-off={off}",
            "--sme2-blocks=2", "--sme2-runs=3", "--sme2-warmup=1", "--sme2-time-budget=0"]
    raw = _run_on_a_terminal(argv, project)
    # What runs (the test, the pair, the block of how many, the arm) and for how long, rewritten while it runs ...
    for block, arm in ((1, "sme2_off"), (1, "sme2_on"), (2, "sme2_on"), (2, "sme2_off")):
        assert f"[sme2: test_on_off: toy_cnn SME2 off/on: block {block}/2, {arm}]" in raw, raw[-3000:]
        assert re.search(rf"\[sme2: test_on_off: toy_cnn SME2 off/on: block {block}/2, {arm}, 0:0[1-9] elapsed\]",
                         raw), raw[-3000:]
    # ... and gone when it is done: pytest's line is whole.
    screen = _screen(raw)
    progress = [line for line in screen if line.startswith("test_x.py")]
    assert len(progress) == 1 and re.fullmatch(r"test_x\.py \. +\[100%\]", progress[0]), screen
    assert not any("[sme2" in line for line in screen)

    # In a log (no terminal) nothing is written mid-line at all.
    log = subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert "[sme2" not in log.stdout and re.search(r"^test_x\.py \. +\[100%\]$", log.stdout, re.M), log.stdout


def test_the_cli_shows_each_block_and_the_elapsed_time_of_a_long_one(tmp_path: Path) -> None:
    from standin import make_standin

    runner = make_standin(tmp_path / "runner", trace=TOY_TRACE, pause_s=2.5)
    argv = [sys.executable, "-m", "pytest_sme2", "profile", "--device=host", f"--runner={runner}", f"--pte={TOY_PTE}",
            "--inputs", str(TOY_INPUT), "--blocks=2", "--runs=3", "--warmup=1", "--busy-limit=100",
            f"--cache-dir={tmp_path / 'cache'}", f"--out={tmp_path / 'out'}"]
    raw = _run_on_a_terminal(argv, tmp_path)
    assert "[sme2] toy_cnn_fp32_xnnpack: block 1/2\r\n" in raw, raw[-3000:]
    # On a terminal the running block's line is rewritten in place with its elapsed time.
    assert re.search(r"\r\x1b\[K\[sme2\] toy_cnn_fp32_xnnpack: block 2/2, 0:0[1-9] elapsed", raw), raw[-3000:]
    # ... and erased when the measurement ends: the results (on stdout, the same terminal) start on a line of their own.
    assert re.search(r"elapsed\r\x1b\[K(\r\n)*== toy_cnn_fp32_xnnpack on host", raw), raw[-3000:]
    # To a log: the lines, never a carriage return.
    log = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert log.returncode == 0, log.stderr
    assert "[sme2] toy_cnn_fp32_xnnpack: block 1/2\n" in log.stderr and "\r" not in log.stderr
