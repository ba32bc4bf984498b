"""A QEMU whose ``-cpu max`` has no SME2 is refused by probing, never by its version: one usage error, with the fix.

Debian 12's QEMU 7.2 emulates SME but not SME2. ``.ci/run`` unpacks it (``qemu-user-static`` from bookworm) and
names it in ``SME2_TEST_QEMU_WITHOUT_SME2``; elsewhere the test skips, and in CI a missing one fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ci import IN_CI

from pytest_sme2.errors import ConfigError

OLD_QEMU = os.environ.get("SME2_TEST_QEMU_WITHOUT_SME2", "")


def _old_qemu() -> Path:
    path = Path(OLD_QEMU) if OLD_QEMU else None
    if path is None or not path.is_file():
        if IN_CI:
            pytest.fail("CI must provide a QEMU without SME2 (SME2_TEST_QEMU_WITHOUT_SME2, set by .ci/run)")
        pytest.skip("no QEMU without SME2 given (set SME2_TEST_QEMU_WITHOUT_SME2 to Debian 12's qemu-aarch64-static)")
    return path


def _cross_ready() -> None:
    if shutil.which("aarch64-linux-gnu-g++") is None:
        if IN_CI:
            pytest.fail("CI must have the aarch64 cross compiler (g++-aarch64-linux-gnu)")
        pytest.skip("no aarch64 cross compiler (apt-get install g++-aarch64-linux-gnu)")


def test_a_qemu_without_sme2_is_refused_with_what_the_probe_saw(tmp_path: Path) -> None:
    qemu = _old_qemu()
    _cross_ready()
    from pytest_sme2.runners import make_runner

    version = subprocess.run([str(qemu), "--version"], capture_output=True, text=True, check=True).stdout
    with pytest.raises(ConfigError) as info:
        make_runner("qemu", qemu=qemu, runner_cache=tmp_path / "runners")
    message = str(info.value)
    # What was found (its version, read independently here, and the hwcaps the runner saw) and how to fix it.
    assert re.search(r"version (\d+\.\d+)", version).group(1) in message  # type: ignore[union-attr]
    assert "does not emulate SME2" in message and "SME yes, SME2 no" in message
    assert "trixie-backports" in message and "--sme2-qemu" in message


def test_the_plugin_stops_the_session_with_one_line(pytester: pytest.Pytester) -> None:
    qemu = _old_qemu()
    _cross_ready()
    pytester.makepyfile(test_x="""
        import pytest
        @pytest.mark.sme2_model("toy_cnn")
        def test_on_off(exported_model, sme2_runner):
            sme2_runner.profile_on_off(exported_model)
    """)
    root = Path(__file__).resolve().parents[2]
    result = pytester.runpytest_subprocess(
        "--sme2-device=qemu", f"--sme2-qemu={qemu}", f"--sme2-models={root / 'example_models' / 'models.py'}",
        f"--sme2-cache-dir={root / '.sme2_cache'}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    out = result.stdout.str() + result.stderr.str()
    assert "does not emulate SME2" in out
    assert "Traceback" not in out
