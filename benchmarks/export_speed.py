"""Export speed: a cold export into a fresh cache directory, then the same export again from the cache.

Both are timed in one fresh process around ``export_model(...)`` alone, after ``torch`` and the
example models are imported (a pytest session pays those imports anyway, cache or not):

- ``export_cold_s``: the cache is empty, so this lowers the model — including executorch's one-time
  lazy initialization of the first lowering in a process, which a fresh session also pays;
- ``export_cached_s``: the cache hit: build the module, hash its code, weights and inputs into the
  cache key, and read the entry's metadata back.

Child usage (the parent calls it): ``python -m benchmarks.export_speed MODEL``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _child(model: str) -> dict[str, object]:
    import torch  # noqa: F401 - imported before the clock starts, as in any session

    import example_models  # noqa: F401 - registers the example models
    from pytest_sme2.program.export import export_model

    with tempfile.TemporaryDirectory(prefix="sme2_export_bench_") as cache:
        t0 = time.perf_counter()
        cold = export_model(model, cache_dir=cache, progress=None)
        t1 = time.perf_counter()
        cached = export_model(model, cache_dir=cache, progress=None)
        t2 = time.perf_counter()
        if cold.cached or not cached.cached or cold.pte_path != cached.pte_path:
            raise RuntimeError("the second export was not served from the cache")
        size = cold.pte_path.stat().st_size
    return {"model": model, "export_cold_s": t1 - t0, "export_cached_s": t2 - t1, "pte_bytes": size}


def measure(model: str = "toy_cnn") -> dict[str, object]:
    cmd = [sys.executable, "-W", "ignore", "-m", "benchmarks.export_speed", model]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"export child failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["export_cache_speedup"] = result["export_cold_s"] / result["export_cached_s"]
    return result


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1])))
