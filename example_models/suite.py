"""Parametrization shared by the per-model suites: one test per (dtype, backend) configuration.

Each configuration becomes a ``pytest.param`` carrying its own ``sme2_model`` marker, so test ids
read ``test_latency[fp32-xnnpack]`` and every configuration has its own baseline file.
"""

from __future__ import annotations

from typing import Any

import pytest

#: The latency margin (percent) the example suites gate at. It holds on the shared 2-core VM that runs them in
#: CI because a margin only decides where drift cannot enter:
#: - an unchanged artifact (same .pte, inputs and runtime as its baseline) is never failed — on this VM the same
#:   .pte ran up to +53 % / -28 % against its own baseline between sessions, which is reported as drift;
#: - a changed artifact is measured in the same session, in interleaved blocks, against the baseline's own
#:   artifact kept in the artifact store, where the VM's drift hits both arms (benchmarks/README.md, "Sessions");
#: - only a changed artifact whose reference is gone (a fresh clone without the artifact cache) is compared with
#:   stored samples, and then ``sme2_drift_allowance`` (pyproject.toml) widens this margin by the measured drift.
LATENCY_PCT = 10
#: The margin of the categories each suite gates (the ones that dominate its model's time): per-category
#: times come from XNNPACK's whole-microsecond operator timings, so they are noisier than the end-to-end time.
CATEGORY_PCT = 15

#: (dtype, backend) pairs every example model is measured in.
CONFIGS = (("fp32", "xnnpack"), ("int8", "xnnpack"), ("fp32", "portable"), ("int8", "portable"))


def model_configs(name: str, configs: tuple[tuple[str, str], ...] = CONFIGS, **marks: Any) -> list[Any]:
    """``pytest.param`` objects for ``name`` in each configuration (extra marks per backend allowed)."""
    params = []
    for dtype, backend in configs:
        extra = marks.get(backend, ())
        params.append(pytest.param(
            dtype, backend, id=f"{dtype}-{backend}",
            marks=(pytest.mark.sme2_model(name, dtype=dtype, backend=backend), *extra),
        ))
    return params
