"""What a pool cannot take is refused before any device is asked (pytest_sme2.plugin.lab)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("args", "message"), [
    (["--sme2-needs=sme2,fast"], "*--sme2-needs: 'fast' is not a device need; allowed, comma separated: sme2, no-sme2, "
                                 "svl>=BITS, soc=NAME, device=NAME*"),
    (["--sme2-serial=R5CX123"], "*--sme2-serial R5CX123 chooses one phone, and --sme2-pool gives each pytest-xdist "
                                "worker a device of the pool: drop --sme2-serial*"),
    (["--sme2-pool=usb"], "*--sme2-pool 'usb' is not a device source (adb, ssh)*"),
])
def test_a_pool_option_that_cannot_work_is_a_usage_error(pytester: pytest.Pytester, args: list[str],
                                                         message: str) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    pool = [] if any(a.startswith("--sme2-pool") for a in args) else ["--sme2-pool=adb"]
    result = pytester.runpytest(*pool, *args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
