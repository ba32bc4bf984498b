"""Noise of the local runtime: runtime threads (1 vs 2) x pinning (``taskset -c 0`` vs none).

Each configuration runs in its own fresh process (pinning must apply to the whole process, the
runtime's thread pool included, which is what ``taskset`` does). Processes of the different
configurations alternate, round after round, so the machine's background load is shared fairly.
Per configuration we report the median latency, the CV of the pooled measured runs, the CV of the
block medians (block = one program load, as in the plugin), and the precision the gate would reach:
the 95 % CI half-width of the ratio of medians between the even and the odd blocks (an A/A split).

Child usage (the parent calls it): ``python -m benchmarks.noise PTE THREADS BLOCKS WARMUP RUNS [INPUT]``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = (("t1", 1, False), ("t1-pinned", 1, True), ("t2", 2, False), ("t2-pinned", 2, True))


def _child(pte: str, threads: int, *, blocks: int, warmup: int, runs: int, inputs: list[str]) -> dict[str, Any]:
    from pytest_sme2.runners.base import RunRequest
    from pytest_sme2.runners.local import LocalRunner

    runner = LocalRunner()
    request = RunRequest(pte=Path(pte), runs=runs, warmup=warmup, threads=threads, out_dir=Path(),
                         inputs=tuple(Path(p) for p in inputs) or None, label="noise", mode="timing")
    out = []
    for _ in range(blocks):
        result = runner.run(request)
        out.append(list(result.e2e_ms[warmup:]))
    return {"blocks": out}


def _run(pte: Path, inputs: tuple[Path, ...], *, threads: int, pinned: bool, blocks: int, warmup: int,
         runs: int) -> list[list[float]]:
    cmd = [sys.executable, "-W", "ignore", "-m", "benchmarks.noise", str(pte), str(threads), str(blocks),
           str(warmup), str(runs), *map(str, inputs)]
    if pinned:
        cmd = ["taskset", "-c", "0", *cmd]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"noise child failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["blocks"]


def measure(exported: Any, *, rounds: int, blocks: int, warmup: int, runs: int,
            configs: tuple[tuple[str, int, bool], ...] = CONFIGS) -> dict[str, dict[str, float]]:
    from benchmarks.former_stats import ratio_of_medians_ci

    configs = tuple(c for c in configs if not c[2] or shutil.which("taskset"))
    collected: dict[str, list[list[float]]] = {name: [] for name, _, _ in configs}
    for _ in range(rounds):
        for name, threads, pinned in configs:
            collected[name] += _run(exported.pte_path, tuple(exported.input_files), threads=threads, pinned=pinned,
                                    blocks=blocks, warmup=warmup, runs=runs)
    out = {}
    for name, _, _ in configs:
        blocks_ms = collected[name]
        pooled = np.concatenate([np.asarray(b) for b in blocks_ms])
        medians = np.asarray([np.median(b) for b in blocks_ms])
        even = np.concatenate([np.asarray(b) for b in blocks_ms[0::2]])
        odd = np.concatenate([np.asarray(b) for b in blocks_ms[1::2]])
        iv = ratio_of_medians_ci(even, odd)
        out[name] = {
            "median_ms": float(np.median(pooled)),
            "cv": float(pooled.std(ddof=1) / pooled.mean()),
            # CV is ruled by rare multi-millisecond stalls (another process took the core); the robust
            # CV (1.4826 MAD / median, = CV for normal data) describes the typical run-to-run spread.
            "robust_cv": float(1.4826 * np.median(np.abs(pooled - np.median(pooled))) / np.median(pooled)),
            "block_median_cv": float(medians.std(ddof=1) / medians.mean()) if medians.size > 1 else 0.0,
            "p90_over_p50": float(np.percentile(pooled, 90) / np.median(pooled)),
            "aa_ci_half_width": iv.half_width_rel,
            "aa_ratio": iv.estimate,
            "blocks": len(blocks_ms),
            "runs": int(pooled.size),
        }
    return out


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(_child(a[0], int(a[1]), blocks=int(a[2]), warmup=int(a[3]), runs=int(a[4]), inputs=a[5:])))
