"""The host runner (``pytest_sme2.runners.host``) checks what ran: the executions asked for, and its log's success line.

The runner is the ``executor_runner`` stand-in replaying the real recorded toy_cnn trace (``tests/standin``); the
log is a real ``executor_runner`` log from ``tests/data``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from recorded import DATA, TOY_INPUT, TOY_PTE, TOY_TRACE
from standin import make_standin

from pytest_sme2.errors import RunnerError
from pytest_sme2.runners.base import RunRequest
from pytest_sme2.runners.host import HostRunner, check_what_ran

#: a real executor_runner log (30 executions, its success line 'Model executed successfully 30 time(s)')
RECORDED_LOG = DATA / "toy_cnn_fp16_xnnpack_simd-on_t1.log"



def _five(tmp_path: Path) -> RunRequest:
    return RunRequest(pte=TOY_PTE, runs=4, warmup=1, out_dir=tmp_path / "out", inputs=(TOY_INPUT,), timeout_s=120.0)



def test_host_runner_refuses_a_runner_that_ignores_num_executions(tmp_path: Path) -> None:
    """Asked for 5 executions, a runner that replays all 30 recorded runs is an error, not 30 samples."""
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE, fault="ignore_count"))
    with pytest.raises(RunnerError, match=r"asked for 5 executions \(--num_executions=5\), the trace holds 30") as info:
        runner.run(_five(tmp_path))
    assert "honours --num_executions" in str(info.value) and ".log" in str(info.value)
    # The honest stand-in, asked the same, gives exactly 5.
    assert len(HostRunner(make_standin(tmp_path / "ok", trace=TOY_TRACE)).run(_five(tmp_path)).e2e_ms) == 5



@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda log: log.replace("Model executed successfully 30 time(s)", "Model executed"),
         r"its log has no 'Model executed successfully 30 time\(s\)' line"),
        (lambda log: log.replace("Model executed successfully 30 time(s)", "Model executed successfully 29 time(s)"),
         r"asked for 30 executions \(--num_executions=30\), its log says 'Model executed successfully 29 time\(s\)'"),
    ],
    ids=["no-success-line", "other-count"],
)
def test_a_runner_log_without_its_success_line_is_an_error(tmp_path: Path, edit: Callable[[str], str],
                                                           match: str) -> None:
    """A log in executor_runner's format must end with the success line for the executions asked."""
    request = RunRequest(pte=TOY_PTE, runs=29, warmup=1)
    log = RECORDED_LOG.read_text()
    check_what_ran("executor_runner x", request, 30, log, cmd=["x"], log_path=RECORDED_LOG, log_tail="")  # as recorded
    with pytest.raises(RunnerError, match=match):
        check_what_ran("executor_runner x", request, 30, edit(log), cmd=["x"], log_path=RECORDED_LOG, log_tail="")
    # A build with logging off prints nothing: then the trace's count is all there is to check.
    check_what_ran("executor_runner x", request, 30, "", cmd=["x"], log_path=RECORDED_LOG, log_tail="")
