"""The model registry (``pytest_sme2.models``): a factory builds the same weights and inputs every time."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.fast


def test_a_readme_style_factory_builds_the_same_weights_and_inputs_every_time() -> None:
    """Random weights and ``torch.randn`` inputs in a factory are the same on every build.

    The README's factory (``MyNet().eval(), (torch.randn(...),)``) is built under a fixed seed, so its weights and
    inputs (the artifact, the export cache's key) do not change between sessions. The caller's RNG is left alone.
    """
    import torch

    from pytest_sme2.models import ModelSpec

    def readme_factory() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
        return torch.nn.Conv2d(3, 8, 3).eval(), (torch.randn(1, 3, 32, 32),)

    spec = ModelSpec("readme_net", readme_factory, "tests/gate/test_decide.py:readme_factory")
    torch.manual_seed(123)
    (m1, (x1,)), after_first = spec.build(), torch.rand(3)
    torch.manual_seed(456)
    m2, (x2,) = spec.build()
    assert torch.equal(x1, x2)
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values(), strict=True))
    torch.manual_seed(123)
    assert torch.equal(torch.rand(3), after_first)  # building drew nothing from the caller's RNG
