"""executorch's Python runtime imported without its compiler (``runners/local.import_runtime``), in fresh processes.

The compiler (``executorch.exir``: torch._dynamo, torch._inductor, torchao) costs a process ~3 s of its import; the
local device needs only the runtime. ``benchmarks/runtime_import.py`` measures the difference.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_INPUT = DATA / "toy_cnn_input_fp32.bin"

_IMPORT_RUNTIME = """
import json, sys
from pathlib import Path
{prepare}
from pytest_sme2.runners.base import RunRequest
from pytest_sme2.runners.local import LocalRunner, import_runtime

import_runtime()
compiler_with_the_runtime = "executorch.exir" in sys.modules
result = LocalRunner().run(RunRequest(pte=Path(sys.argv[1]), runs=2, warmup=0, threads=1, inputs=(Path(sys.argv[2]),),
                                      mode="timing"))
import executorch.exir
import executorch.exir._warnings
from executorch.exir import to_edge_transform_and_lower

print(json.dumps({{"compiler_with_the_runtime": compiler_with_the_runtime, "runs": len(result.e2e_ms),
                  "warnings_module": executorch.exir._warnings.__name__,
                  "compiler": callable(to_edge_transform_and_lower)}}))
"""


@pytest.mark.parametrize("blocked", [False, True], ids=["without-the-compiler", "a-runtime-that-needs-more-of-exir"])
def test_the_runtime_is_imported_without_the_compiler_and_the_compiler_still_imports_after_it(blocked: bool) -> None:
    """In a fresh process (this one has the compiler already): import_runtime() runs a program without importing
    executorch.exir, and a later import of the compiler (an export) gets the real package. A runtime whose import
    needs more of exir than the bare package gives (simulated: exir._warnings cannot be imported while it is bare)
    is imported as it always was, with the compiler."""
    prepare = "sys.modules['executorch.exir._warnings'] = None" if blocked else ""
    done = subprocess.run([sys.executable, "-c", _IMPORT_RUNTIME.format(prepare=prepare), str(TOY_PTE), str(TOY_INPUT)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"compiler_with_the_runtime": blocked, "runs": 2, "warnings_module": "executorch.exir._warnings",
                   "compiler": True}
