"""Whether the test session runs in CI, read once when the tests are collected.

Each test runs without ``CI`` in its environment (``tests/conftest.py``): the plugin fails closed where ``CI`` is
set, and its tests (and the pytest runs they start) must behave the same on a developer's machine and in CI,
except the tests of that behaviour, which set ``CI`` themselves. Tests that must not skip in CI (a missing tool is
a failure there) ask :data:`IN_CI`.
"""

from __future__ import annotations

import os

from pytest_sme2.options import ci_environment

#: Set for the test session (and the xdist workers it starts) when it began in CI; ``CI`` itself is removed.
MARK = "SME2_TESTS_IN_CI"

IN_CI = ci_environment(os.environ) or os.environ.get(MARK) == "1"
