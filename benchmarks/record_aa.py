"""Record real interleaved A/A blocks with the local runtime, for checking interval coverage offline.

    python benchmarks/record_aa.py                      # 1000 blocks per arm, ~1-2 min here
    python benchmarks/record_aa.py --blocks 200 --out /tmp/aa.json

Both arms run the *same* recorded ``.pte`` (``tests/data/toy_cnn_fp32_xnnpack.pte`` on
``tests/data/toy_cnn_input_fp32.bin``), so the true ratio between them is exactly 1. A block is one
``LocalRunner().run(...)``: a program load, ``warmup`` + ``runs`` executions, one thread, as the
plugin measures. Arms alternate A B B A A B ... (each pair reverses the order of the one before), so
neither arm always runs first. Every execution time is kept (warm-ups included, in microseconds
rounded to 10 ns) with each block's start time and arm, plus the machine's load average.

``benchmarks/coverage.py`` (and ``tests/gate/test_intervals.py``) read the file this writes.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.console import shown_path  # noqa: E402

PTE = ROOT / "tests" / "data" / "toy_cnn_fp32_xnnpack.pte"
INPUT = ROOT / "tests" / "data" / "toy_cnn_input_fp32.bin"
DEFAULT_OUT = ROOT / "benchmarks" / "data" / "aa_toy_cnn_fp32_xnnpack.json"
SCHEMA_VERSION = 1


def record(blocks_per_arm: int, *, runs: int = 30, warmup: int = 3, threads: int = 1, pte: Path = PTE,
           input_file: Path = INPUT) -> dict[str, Any]:
    """``blocks_per_arm`` blocks of each arm, interleaved A B B A ..., every execution time kept."""
    from benchmarks.run import machine
    from pytest_sme2.runners.base import RunRequest
    from pytest_sme2.runners.local import LocalRunner

    runner = LocalRunner()
    load_start = [round(x, 2) for x in os.getloadavg()]
    blocks: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        request = RunRequest(pte=pte, runs=runs, warmup=warmup, threads=threads, out_dir=Path(tmp),
                             inputs=(input_file,), label="aa")
        started = time.perf_counter()
        for pair in range(blocks_per_arm):
            for arm in ("AB" if pair % 2 == 0 else "BA"):
                at = time.perf_counter() - started
                result = runner.run(request)
                blocks.append({"arm": arm, "start_s": round(at, 4),
                               "e2e_us": [round(t * 1e3, 2) for t in result.e2e_ms]})
        elapsed = time.perf_counter() - started
    return {
        "schema_version": SCHEMA_VERSION,
        "what": "interleaved A/A blocks of one .pte (true ratio 1); e2e_us holds warm-ups then runs",
        "pte": shown_path(pte),
        "pte_sha256": hashlib.sha256(pte.read_bytes()).hexdigest(),
        "input": shown_path(input_file),
        "runner": runner.build,
        "threads": threads, "warmup": warmup, "runs": runs, "unit": "us",
        "recorded_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "elapsed_s": round(elapsed, 1),
        "loadavg_start": load_start,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "machine": machine(),
        "blocks": blocks,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=1000, help="blocks per arm (default 1000)")
    parser.add_argument("--runs", type=int, default=30, help="measured executions per block (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up executions per block (default 3)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT.relative_to(ROOT)}")
    parser.add_argument("--pte", type=Path, default=PTE,
                        help=f"default {PTE.relative_to(ROOT)} (a file inside this repository)")
    parser.add_argument("--input", type=Path, default=INPUT, help=f"default {INPUT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    data = record(args.blocks, runs=args.runs, warmup=args.warmup, pte=args.pte, input_file=args.input)
    args.out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"{len(data['blocks'])} blocks in {data['elapsed_s']} s, load average {data['loadavg_start']} -> "
          f"{data['loadavg_end']}; wrote {args.out} ({args.out.stat().st_size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
