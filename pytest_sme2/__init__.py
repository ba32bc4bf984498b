"""pytest-sme2: performance-regression testing of ExecuTorch models on Arm CPUs, SME2 on and off.

The package is a plain library (export, runners, trace, analysis, stats, gate, baseline, report)
with two thin front ends: the ``pytest-sme2`` CLI (``cli``) and the pytest plugin (``plugin``).
Importing it imports neither torch, executorch nor pytest.
"""

from pytest_sme2.version import __version__

__all__ = ["__version__"]
