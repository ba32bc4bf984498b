"""What a process pays to load executorch's Python runtime: the plain import against :func:`import_runtime`.

    python benchmarks/runtime_import.py              # 5 rounds, alternating: medians and the ratio
    python benchmarks/runtime_import.py --rounds 9

Each round starts two fresh interpreters, in alternating order: one imports the runtime as executorch's own modules
do (``import executorch.kernels.quantized`` and ``from executorch.runtime import Runtime``: the pybindings import
``executorch.exir``, so the whole compiler comes with them), the other calls
:func:`pytest_sme2.runners.local.import_runtime` (the runtime without the compiler). Each then loads and executes a
recorded program once (``tests/data/toy_cnn_fp32_xnnpack.pte``), so both are seen to work. Reported: the median wall
seconds of the import (inside the process, from before the first import to after the program ran) and of the whole
process, per kind, their ratio, and whether the compiler (``executorch.exir``) was imported. Every pytest session and
CLI command that measures on the local device (the default) pays the import once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PTE = ROOT / "tests" / "data" / "toy_cnn_fp32_xnnpack.pte"

_CHILD = """
import json, sys, time
started = time.perf_counter()
if sys.argv[1] == "plain":
    import executorch.kernels.quantized
    from executorch.runtime import Runtime
else:
    from pytest_sme2.runners.local import import_runtime
    import_runtime()
    from executorch.runtime import Runtime
method = Runtime.get().load_program(sys.argv[2]).load_method("forward")
import torch
method.execute([torch.ones(1, 3, 32, 32)])
print(json.dumps({"import_s": time.perf_counter() - started, "compiler": "executorch.exir" in sys.modules}))
"""


def one(kind: str) -> dict[str, float | bool]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD, kind, str(PTE)], capture_output=True, text=True, check=True,
                          cwd=ROOT)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - started
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of one process per kind (default 5)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    runs: dict[str, list[dict[str, float | bool]]] = {"plain": [], "light": []}
    for r in range(args.rounds):
        for kind in (("plain", "light") if r % 2 == 0 else ("light", "plain")):
            runs[kind].append(one(kind))
    print(f"executorch's Python runtime imported in a fresh process, {args.rounds} alternating rounds (medians)")
    medians = {}
    for kind, label in (("plain", "plain import (the compiler with it)"), ("light", "import_runtime()")):
        imp = statistics.median(float(x["import_s"]) for x in runs[kind])
        proc = statistics.median(float(x["process_s"]) for x in runs[kind])
        compiler = {bool(x["compiler"]) for x in runs[kind]}
        medians[kind] = (imp, proc)
        print(f"  {label:38s} import + one execution {imp:5.2f} s, whole process {proc:5.2f} s, "
              f"executorch.exir imported: {'yes' if compiler == {True} else 'no' if compiler == {False} else 'mixed'}")
    print(f"  ratio import_runtime / plain: import {medians['light'][0] / medians['plain'][0]:.2f}, "
          f"process {medians['light'][1] / medians['plain'][1]:.2f}")
    print(f"  load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
