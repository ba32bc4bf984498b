"""Plain-torch example models, registered for pytest-sme2: a toy CNN, MobileNetV3-Small, a tiny transformer.

No torchvision or other model zoo: each model is written out here with random weights from a fixed
seed, so a given version of this file always builds the same weights and exports the same ``.pte``.
The seed is applied inside :func:`torch.random.fork_rng`, so building a model never disturbs the
caller's random state. Example inputs come from their own ``torch.Generator`` seeded 1234, the same
recipe as the input files of the recorded traces in ``tests/data``.

The shapes follow the recorded traces (``tests/data/TRACES_README.md``) so that an export of these
models produces the same operator structure as the recordings:

- ``toy_cnn``: 3 convolutions (two with BatchNorm), ReLU, a residual add, max-pool, global average
  pool, a 10-way linear layer; 1x3x32x32 example input, any spatial size accepted.
- ``mobilenet_v3_small``: MobileNetV3-Small as published (Howard et al. 2019, table 2), 1000 classes,
  1x3x224x224 input.
- ``tiny_transformer``: a 2-layer pre-norm encoder (no embedding) on a 1x128x256 float sequence.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from pytest_sme2.models import register_model

#: Seed of every model's weights.
WEIGHT_SEED = 0
#: Seed of every example input (matches the input files of the recorded traces).
INPUT_SEED = 1234


def _example_input(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(INPUT_SEED))


def _seeded(build: Callable[[], nn.Module]) -> nn.Module:
    """Build a module with weights drawn from ``WEIGHT_SEED``, leaving the global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(WEIGHT_SEED)
        return build()


def _calibrate_batchnorm(model: nn.Module, shape: tuple[int, ...], batches: int = 2) -> nn.Module:
    """Set every BatchNorm's running statistics from a few seeded random batches, then return to eval.

    Freshly initialized BatchNorm layers hold mean 0 / variance 1, so in eval mode they normalize
    nothing; through MobileNet's 50+ layers of random weights the activations then shrink to ~1e-9,
    which fp16 cannot represent (it flushes them to subnormals or zero) and which would make fp16 and
    int8 timings and error checks meaningless. Real statistics keep activations O(1), as in a trained
    network.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the calibration batches
    generator = torch.Generator().manual_seed(WEIGHT_SEED + 1)
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(*shape, generator=generator))
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
    return model.eval()


# --- toy_cnn -----------------------------------------------------------------------------------------


class ToyCNN(nn.Module):
    """Conv-BN-ReLU twice with a residual add, max-pool, conv-ReLU, global average pool, linear."""

    def __init__(self, width: int = 16, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(width)
        self.pool = nn.MaxPool2d(2)
        self.conv3 = nn.Conv2d(width, 2 * width, 3, padding=1)
        # Adaptive pooling to 1x1 is what lets the model take any input size.
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        z = torch.relu(self.bn2(self.conv2(y)))
        x = self.pool(y + z)
        x = torch.relu(self.conv3(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


@register_model("toy_cnn")
def toy_cnn() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The toy CNN of the recorded traces, on a 1x3x32x32 input."""
    return _seeded(ToyCNN).eval(), (_example_input(1, 3, 32, 32),)


# --- mobilenet_v3_small ------------------------------------------------------------------------------


def _make_divisible(value: float, divisor: int = 8) -> int:
    """Round channel counts to a multiple of ``divisor`` without losing more than 10 % (as published)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


class ConvBNActivation(nn.Sequential):
    """Conv2d (no bias) + BatchNorm + optional activation, "same" padding."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        *,
        stride: int = 1,
        groups: int = 1,
        activation: type[nn.Module] | None = nn.Hardswish,
    ) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(
                in_channels, out_channels, kernel_size, stride, (kernel_size - 1) // 2,
                groups=groups, bias=False,
            ),
            # eps/momentum of the reference implementation (TF-style BatchNorm)
            nn.BatchNorm2d(out_channels, eps=0.001, momentum=0.01),
        ]
        if activation is not None:
            layers.append(activation())
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """Global pool -> 1x1 conv -> ReLU -> 1x1 conv -> hardsigmoid, scaling the input channels."""

    def __init__(self, channels: int, squeeze_channels: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.activation(self.fc1(self.avgpool(x)))
        scale = self.scale_activation(self.fc2(scale))
        return scale * x


class BlockConfig(NamedTuple):
    """One row of the MobileNetV3 bottleneck table."""

    in_channels: int
    kernel: int
    expanded: int
    out_channels: int
    use_se: bool
    activation: type[nn.Module]
    stride: int


class InvertedResidual(nn.Module):
    """MobileNetV3 bottleneck: 1x1 expand, depthwise kxk, optional SE, 1x1 project, residual if shapes match."""

    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        self.use_residual = cfg.stride == 1 and cfg.in_channels == cfg.out_channels
        layers: list[nn.Module] = []
        if cfg.expanded != cfg.in_channels:
            layers.append(ConvBNActivation(cfg.in_channels, cfg.expanded, 1, activation=cfg.activation))
        layers.append(
            ConvBNActivation(
                cfg.expanded, cfg.expanded, cfg.kernel, stride=cfg.stride, groups=cfg.expanded,
                activation=cfg.activation,
            )
        )
        if cfg.use_se:
            layers.append(SqueezeExcitation(cfg.expanded, _make_divisible(cfg.expanded // 4)))
        layers.append(ConvBNActivation(cfg.expanded, cfg.out_channels, 1, activation=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_residual else y


#: The MobileNetV3-Small bottleneck table: (in, kernel, expanded, out, SE, activation, stride).
MOBILENET_V3_SMALL_BLOCKS: tuple[BlockConfig, ...] = tuple(BlockConfig(*row) for row in (
    (16, 3, 16, 16, True, nn.ReLU, 2),
    (16, 3, 72, 24, False, nn.ReLU, 2),
    (24, 3, 88, 24, False, nn.ReLU, 1),
    (24, 5, 96, 40, True, nn.Hardswish, 2),
    (40, 5, 240, 40, True, nn.Hardswish, 1),
    (40, 5, 240, 40, True, nn.Hardswish, 1),
    (40, 5, 120, 48, True, nn.Hardswish, 1),
    (48, 5, 144, 48, True, nn.Hardswish, 1),
    (48, 5, 288, 96, True, nn.Hardswish, 2),
    (96, 5, 576, 96, True, nn.Hardswish, 1),
    (96, 5, 576, 96, True, nn.Hardswish, 1),
))


class MobileNetV3Small(nn.Module):
    """MobileNetV3-Small: stem, 11 bottlenecks, 1x1 conv to 576, pool, 1024-wide classifier head."""

    def __init__(self, num_classes: int = 1000, last_channels: int = 1024) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNActivation(3, 16, 3, stride=2, activation=nn.Hardswish)]
        layers += [InvertedResidual(cfg) for cfg in MOBILENET_V3_SMALL_BLOCKS]
        final_in = MOBILENET_V3_SMALL_BLOCKS[-1].out_channels
        layers.append(ConvBNActivation(final_in, 6 * final_in, 1, activation=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(6 * final_in, last_channels),
            nn.Hardswish(),
            nn.Dropout(p=0.2),
            nn.Linear(last_channels, num_classes),
        )
        self._init_weights()

    def _init_weights(self) -> None:
        # The reference initialization; it keeps activations in a sane range through 50+ layers of
        # random weights, which keeps fp16/int8 comparisons against fp32 meaningful.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = torch.flatten(self.avgpool(x), 1)
        return self.classifier(x)


@register_model("mobilenet_v3_small")
def mobilenet_v3_small() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """MobileNetV3-Small with random weights (BatchNorm statistics calibrated) on a 1x3x224x224 input."""
    # Calibrate inside the seeded scope: Dropout draws from the global RNG in train mode.
    model = _seeded(lambda: _calibrate_batchnorm(MobileNetV3Small(), (8, 3, 224, 224)))
    return model.eval(), (_example_input(1, 3, 224, 224),)


# --- tiny_transformer --------------------------------------------------------------------------------


class SelfAttention(nn.Module):
    """Multi-head self-attention written out with matmul and softmax (no fused SDPA kernel)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        attn = torch.softmax(scores, dim=-1)
        y = torch.matmul(attn, v).transpose(1, 2).reshape(batch, seq, dim)
        return self.out(y)


class EncoderLayer(nn.Module):
    """Pre-norm encoder layer: x + attn(LN(x)), then x + MLP(LN(x)) with a GELU MLP."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    """A stack of encoder layers and a final LayerNorm over a (batch, sequence, dim) float input."""

    def __init__(self, dim: int = 256, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


@register_model("tiny_transformer")
def tiny_transformer() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A 2-layer, 4-head, 256-wide encoder on a 1x128x256 input (the recorded trace's shape)."""
    return _seeded(TinyTransformer).eval(), (_example_input(1, 128, 256),)
