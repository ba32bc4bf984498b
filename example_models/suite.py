"""Parametrization shared by the per-model suites: one test per (dtype, backend) configuration.

Each configuration becomes a ``pytest.param`` carrying its own ``sme2_model`` marker, so test ids
read ``test_latency[fp32-xnnpack]`` and every configuration has its own baseline file.
"""

from __future__ import annotations

from typing import Any

import pytest

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
