"""Benchmarks of pytest-sme2 (issue #6): ``python benchmarks/run.py [--quick]``."""
