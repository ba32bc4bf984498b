"""What a pool cannot take is refused before any device is asked (pytest_sme2.plugin.lab)."""

from __future__ import annotations

import pytest

import pytest_sme2.gate.verdict  # noqa: F401  (numpy loads once per process: before pytester's in-process runs)


@pytest.mark.parametrize(("args", "message"), [
    (["--sme2-needs=sme2,fast"], "*--sme2-needs: 'fast' is not a device need; allowed, comma separated: sme2, no-sme2, "
                                 "svl>=BITS, soc=NAME, device=NAME*"),
    (["--sme2-serial=R5CX123"], "*--sme2-serial R5CX123 chooses one phone, and --sme2-pool gives each pytest-xdist "
                                "worker a device of the pool: drop --sme2-serial*"),
    (["--sme2-pool=ssh", "--sme2-ssh-host=ci@graviton4.lab"],
     "*--sme2-ssh-host ci@graviton4.lab chooses one host, and --sme2-pool gives each pytest-xdist worker a device of "
     "the pool: drop --sme2-ssh-host and list the hosts with --sme2-ssh-hosts*"),
    (["--sme2-pool=usb"], "*--sme2-pool 'usb' is not a device source (adb, ssh)*"),
])
def test_a_pool_option_that_cannot_work_is_a_usage_error(pytester: pytest.Pytester, args: list[str],
                                                         message: str) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    pool = [] if any(a.startswith("--sme2-pool") for a in args) else ["--sme2-pool=adb"]
    result = pytester.runpytest(*pool, *args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_test_no_worker_can_run_any_more_is_reported_not_run(pytester: pytest.Pytester) -> None:
    # What the controller does when a device dropped and no other serves a test (the scheduler decides it:
    # tests/plugin/test_lab_scheduling.py): a skipped report of its own, counted and summed up by pytest's terminal.
    pytester.makeconftest("""
        def pytest_collection_finish(session):
            from pytest_sme2.plugin.lab import LabController

            LabController(session.config, None).not_run(
                "test_gone.py::test_gone@sme2:sme2", "EmuPhone_SME2 dropped before it ran (offline)")
        """)
    pytester.makepyfile(test_here="def test_here():\n    pass\n")
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [1] test_gone.py: not run: EmuPhone_SME2 dropped before it ran (offline)"])
