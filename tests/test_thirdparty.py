"""third_party_output: torch/executorch/torchao noise goes to a log; the user's warnings, logs and prints do not.

The warnings and log records below are raised the way the real ones are (attributed to a file inside
the installed torch or executorch package, on the ``torchao`` logger, written to fd 2 by C code); the
end-to-end check with a real export and a real runtime is in ``plugin/test_user_project.py``.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.thirdparty import is_third_party, third_party_output

REPO = Path(__file__).resolve().parent.parent


def _inside(package: str) -> str:
    """A file name inside an installed package, where its own warnings are attributed."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations
    return str(Path(next(iter(spec.submodule_search_locations))) / "jit" / "_script.py")


def test_c_level_output_goes_to_the_log_and_python_output_does_not(tmp_path: Path,
                                                                   capfd: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "third_party.log"
    libc = ctypes.CDLL(None)
    with third_party_output(log, label="load_method"):
        os.write(2, b"[cpuinfo_utils.cpp:71] Reading file /sys/devices/soc0/image_version\n")
        libc.printf(b"[threadpool.cpp:66] Resetting threadpool to 1 threads.\n")  # C stdio, buffered
        print("the user's print")
        sys.stderr.write("a progress line\n")
    os.write(2, b"after the block\n")
    out, err = capfd.readouterr()
    assert "cpuinfo" not in err and "threadpool" not in out
    assert "the user's print" in out and "a progress line" in err and "after the block" in err
    text = log.read_text()
    assert text.startswith("==== load_method (")
    assert "[cpuinfo_utils.cpp:71] Reading file" in text and "[threadpool.cpp:66] Resetting" in text
    assert "the user's print" not in text


def test_python_output_diverts_sys_streams_for_runtime_calls(tmp_path: Path,
                                                              capfd: pytest.CaptureFixture[str]) -> None:
    """executorch's pybindings write the runtime's C++ log through Python's sys.stderr (pybind11's stream
    redirect), so for runtime calls the Python streams are diverted too; a stream picked up inside the
    block (torch's logging handler on a first import) still works afterwards."""
    log = tmp_path / "third_party.log"
    with third_party_output(log, python_output=True):
        sys.stderr.write("[cpuinfo_utils.cpp:125] CPU info and manual query on # of cpus dont match.\n")
        print("[threadpool.cpp:66] Resetting threadpool to 1 threads.")
        picked_up = sys.stderr
    picked_up.write("written after the block\n")
    out, err = capfd.readouterr()
    assert "cpuinfo" not in err and "threadpool" not in out
    assert err == "written after the block\n"
    assert "[cpuinfo_utils.cpp:125]" in log.read_text() and "[threadpool.cpp:66]" in log.read_text()


def test_outside_pytest_python_output_still_reaches_the_terminal(tmp_path: Path) -> None:
    """Without pytest's capture (the CLI, ``pytest -s``) sys.stdout/sys.stderr are fds 1 and 2 themselves."""
    script = textwrap.dedent("""
        import os, sys
        from pytest_sme2.thirdparty import third_party_output
        with third_party_output(sys.argv[1]):
            os.write(2, b"[cpuinfo_utils.cpp:87] Failed to open midr file\\n")
            print("result line")
            print("progress line", file=sys.stderr)
        print("after")
    """)
    log = tmp_path / "tp.log"
    proc = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "result line\nafter\n"
    assert proc.stderr == "progress line\n"
    assert "[cpuinfo_utils.cpp:87] Failed to open midr file" in log.read_text()


def test_third_party_warnings_are_logged_and_the_users_reach_pytest(tmp_path: Path) -> None:
    # executorch.exir._warnings.ExperimentalWarning, without the seconds of importing executorch.exir
    experimental = type("ExperimentalWarning", (DeprecationWarning,), {"__module__": "executorch.exir._warnings"})
    log = tmp_path / "third_party.log"
    torch_file = _inside("torch")
    with pytest.warns(DeprecationWarning) as seen, third_party_output(log) as diverted:
        warnings.warn_explicit("`torch.jit.script_method` is deprecated", DeprecationWarning, torch_file, 365,
                               module="torch.jit._script")
        warnings.warn_explicit("This API is experimental", experimental, "portable_lib.py", 23,
                               module="executorch.extension.pybindings.portable_lib")
        # Attributed to the standard library, caused by executorch (the quirks in pyproject.toml):
        warnings.warn_explicit("open_text is deprecated. Use files() instead.", DeprecationWarning,
                               str(Path("/usr/lib/python3.11/importlib/resources/_legacy.py")), 80,
                               module="importlib.resources._legacy")
        warnings.warn_explicit("`isinstance(treespec, LeafSpec)` is deprecated", FutureWarning,
                               "/usr/lib/python3.11/copyreg.py", 105, module="copyreg")
        warnings.warn("MyNet.forward: old_api is deprecated", DeprecationWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["MyNet.forward: old_api is deprecated"]
    assert seen[0].filename == __file__
    assert diverted is not None and diverted.warnings == 4
    text = log.read_text()
    for logged in ("script_method", "experimental", "open_text", "LeafSpec"):
        assert logged in text
    assert "old_api" not in text


def test_error_filters_still_raise_for_the_users_warnings_not_for_third_party_ones(tmp_path: Path) -> None:
    """With ``-W error`` a torch deprecation inside the plugin's export must not fail the user's test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with third_party_output(tmp_path / "tp.log"):
            warnings.warn_explicit("deprecated inside torch", DeprecationWarning, _inside("torch"), 1,
                                   module="torch.jit._script")
            with pytest.raises(DeprecationWarning, match="the user's"):
                warnings.warn("the user's deprecation", DeprecationWarning, stacklevel=1)
        with pytest.raises(DeprecationWarning):  # and the filters are back after the block
            warnings.warn_explicit("deprecated inside torch", DeprecationWarning, _inside("torch"), 1,
                                   module="torch.jit._script")


def test_third_party_log_records_are_logged_and_the_users_are_captured(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "third_party.log"
    torchao = logging.getLogger("torchao")
    handlers, propagate = list(torchao.handlers), torchao.propagate
    with third_party_output(log) as diverted:
        torchao.warning("Failed to load /site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so")
        logging.getLogger("torch.utils._pytree").warning("register_constant() on Enum subclasses is deprecated")
        logging.getLogger("my_models").warning("the user's log record")
    assert [r.getMessage() for r in caplog.records] == ["the user's log record"]
    assert diverted is not None and diverted.log_records == 2
    assert "WARNING torchao: Failed to load" in log.read_text()
    assert torchao.handlers == handlers and torchao.propagate is propagate
    torchao.warning("after the block")
    assert caplog.records[-1].getMessage() == "after the block"


def test_blocks_nest_and_none_diverts_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    outer, inner = tmp_path / "outer.log", tmp_path / "inner.log"
    with third_party_output(outer, label="profile"):
        os.write(2, b"outer 1\n")
        with third_party_output(inner, label="export"):
            os.write(2, b"inner\n")
        os.write(2, b"outer 2\n")
        with third_party_output(None) as nothing:
            assert nothing is None
            os.write(2, b"still outer\n")
    assert capfd.readouterr().err == ""
    assert "outer 1\nouter 2\nstill outer\n" in outer.read_text() and "inner" not in outer.read_text()
    assert "inner\n" in inner.read_text()


def test_attribution_by_file_and_category() -> None:
    assert is_third_party("x", DeprecationWarning, _inside("torch"))
    assert is_third_party("x", DeprecationWarning, _inside("executorch"))
    assert not is_third_party("x", DeprecationWarning, str(REPO / "example_models" / "models.py"))
    # "torchvision" or a user's "torch_utils.py" beside the package is not torch
    assert not is_third_party("x", DeprecationWarning, _inside("torch").replace("/torch/", "/torch_utils/"))
    assert not is_third_party("open_text is deprecated", DeprecationWarning, "/home/me/my_models.py")


def test_a_log_that_cannot_be_written_never_fails_the_caller(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The block still keeps the noise out of the user's output; the reason is on the Diverted record."""
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the log's directory should be")
    with third_party_output(blocker / "third_party.log", python_output=True) as diverted:
        os.write(2, b"[cpuinfo_utils.cpp:71] Reading file\n")
        print("[threadpool.cpp:66] Resetting threadpool")
        warnings.warn_explicit("deprecated inside torch", DeprecationWarning, _inside("torch"), 1,
                               module="torch.jit._script")
        logging.getLogger("torchao").warning("Failed to load _C_mxfp8.so")
    assert diverted is not None and diverted.error and diverted.warnings == 1
    out, err = capfd.readouterr()
    assert out == "" and err == ""


@pytest.mark.slow
def test_analyze_with_an_etrecord_keeps_torch_and_torchao_output_in_the_log(example_export: Any,
                                                                             tmp_path: Path) -> None:
    """``analyze --etrecord`` imports executorch's devtools, torch and torchao outside any block; their load
    messages (torchao's "Failed to load ..._C_mxfp8...so", torch's _pytree notice) go to the log, not the terminal."""
    exported = example_export("fp32", "xnnpack")
    trace = Path(__file__).parent / "data" / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "pytest_sme2", "analyze", str(trace), "--etrecord",
                           str(exported.etrecord_path), "--json", str(out / "summary.json")],
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # a fresh interpreter: the imports happen in this command, and say nothing here
    assert f"torch's and executorch's output: {out / 'third_party.log'}" in proc.stdout
    assert (out / "third_party.log").read_text().startswith(f"==== analyze --etrecord {exported.etrecord_path}")
