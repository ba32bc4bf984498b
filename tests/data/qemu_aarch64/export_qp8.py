"""Export example_models' toy_cnn with PT2E *dynamic* int8 (XNNPACKQuantizer is_dynamic=True) for XNNPACK.

How ``toy_cnn_int8dyn_xnnpack.pte`` was made (run from the repository root:
``python tests/data/qemu_aarch64/export_qp8.py OUT.pte``). Only the Linear is quantized (QP8 activations).
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from executorch.exir import to_edge_transform_and_lower
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from example_models.models import toy_cnn

model, inputs = toy_cnn()
model.eval()
quantizer = XNNPACKQuantizer()
quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
prepared = prepare_pt2e(torch.export.export(model, inputs).module(), quantizer)
prepared(*inputs)
program = torch.export.export(convert_pt2e(prepared), inputs)
et = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()
Path(sys.argv[1]).write_bytes(et.buffer)
print("wrote", sys.argv[1], len(et.buffer), "bytes; inputs", [tuple(t.shape) for t in inputs])
