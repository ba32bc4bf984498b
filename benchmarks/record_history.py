"""Record real per-session series for the history change-point benchmark (``benchmarks/changepoints.py``).

    python benchmarks/record_history.py --plan probe --sizes 32,33,34,35,36   # which sizes are +10 / +20 %
    python benchmarks/record_history.py --plan unchanged --sessions 50
    python benchmarks/record_history.py --plan changed --sizes 32,34,36 --sessions 12

Each point is one real pytest session of a small project (a fresh process, as a CI run per commit is): the
example suite's ``toy_cnn`` (``example_models/models.py``, fp32, XNNPACK, local runtime, 15 blocks x 10 runs)
exported for a ``SME2_HISTORY_SIZE`` square input (32 is the example suite's). A size change is a real change of
the project: another ``.pte``, really slower (35: +12 %, 36: +20 % in one probe session each). A *width*
change was tried first and is useless here: XNNPACK pads channels to the vector width, so 16 -> 17 channels made
it 2x slower (0.080 -> 0.158 ms on a Zen 4), not 10 %. Between-session noise is what a history sees, so every
point is its own process, with its own program load and the machine as it was then.

The sessions' ``--sme2-json`` documents are kept in ``--keep`` (not committed: ~80 kB each); ``--out`` gets the
history records built from them by :func:`pytest_sme2.history.records.records_from_results` - the same function the
plugin's session-end hook uses - one JSON line each, with the size and plan added under ``"bench"``.

``--plan light`` is the affordable version (a pytest session costs ~10 s of CPU, mostly importing torch; under the
shared machine's load average 6-7 one took 110 s): one fresh process per *round* measures the already exported
``.pte`` of every size once (from the project's export cache, made by the sessions above), in turn, the way the
plugin's local runtime does: 15 blocks (program loads) x 10 traced runs after 3 warm-ups, the point's value the
median of the 150 runs (the gate's ``median_ms``), with the block medians. So every point of a series is still from
its own process (its own program loads, memory layout and machine state), and the sizes share each round.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / "benchmarks" / "data" / "history_toy_cnn_sessions.jsonl"

MODELS = '''
import os

import torch

from example_models.models import ToyCNN, _example_input, _seeded
from pytest_sme2.models import register_model


@register_model("toy_cnn_w")
def toy_cnn_w():
    """The example suite's toy CNN on a SME2_HISTORY_SIZE x SME2_HISTORY_SIZE input (32 = the example's)."""
    size = int(os.environ.get("SME2_HISTORY_SIZE", "32"))
    return _seeded(ToyCNN).eval(), (_example_input(1, 3, size, size),)
'''

TESTS = '''
import pytest


@pytest.mark.sme2_model("toy_cnn_w", dtype="fp32", backend="xnnpack")
@pytest.mark.sme2_threshold(latency_pct=10)
def test_latency(exported_model, sme2_runner, sme2_baseline):
    sme2_baseline.check(sme2_runner.profile(exported_model))
'''

PYPROJECT = '''
[tool.pytest.ini_options]
sme2_models = ["models.py"]
'''


def project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in {"models.py": MODELS, "test_perf.py": TESTS, "pyproject.toml": PYPROJECT}.items():
        (root / name).write_text(textwrap.dedent(text))
    return root


def session(root: Path, size: int, json_out: Path) -> dict[str, object]:
    """One pytest session at ``size``; its results document is written to ``json_out``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "CI"}
    env.update(PYTHONPATH=str(ROOT), SME2_HISTORY_SIZE=str(size))
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_perf.py",
                           f"--sme2-json={json_out}", "--sme2-history=none"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    if not json_out.is_file():
        raise SystemExit(f"session at size {size} wrote no results ({proc.returncode}):\n{proc.stdout[-3000:]}"
                         f"\n{proc.stderr[-3000:]}")
    return {"size": size, "seconds": round(time.time() - started, 1), "loadavg": os.getloadavg()[0]}


def measure(pte: Path, inputs: Path) -> dict[str, object]:
    """One point in this process: 15 blocks x 10 traced runs after 3 warm-ups, as the plugin's local runtime."""
    import tempfile

    import numpy as np

    from pytest_sme2.history.records import block_medians
    from pytest_sme2.runners.base import RunRequest
    from pytest_sme2.runners.local import LocalRunner

    runner = LocalRunner()
    samples: list[float] = []
    sizes: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(15):
            result = runner.run(RunRequest(pte=pte, runs=10, warmup=3, threads=1, out_dir=Path(tmp),
                                           inputs=(inputs,), label="history"))
            runs = list(result.e2e_ms[3:])
            samples += runs
            sizes.append(len(runs))
    return {"median_ms": round(float(np.median(samples)), 6), "block_medians_ms": list(block_medians(samples, sizes))}


def light(args: argparse.Namespace) -> int:
    cache = args.project / ".sme2_cache" / "toy_cnn_w"
    by_size: dict[int, Path] = {}
    for meta in sorted(cache.glob("*/meta.json")):
        data = json.loads(meta.read_text())
        # width 16 (the example suite's toy_cnn): the probe of widths 17-20 left other 32x32 exports here
        if data.get("cache_key", "").startswith(("37be6225", "a204c79b", "b6d1f7b7", "baa5b3ff", "eaa7a9e6")):
            by_size[int(data["input_shapes"][0][-1])] = meta.parent
    sizes = [int(w) for w in args.sizes.split(",")]
    missing = [w for w in sizes if w not in by_size]
    if missing:
        raise SystemExit(f"no export of sizes {missing} in {cache}: run --plan probe --sizes {args.sizes} first")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(ROOT)
    with args.out.open("a") as f:
        for rnd in range(args.sessions):
            started = time.time()
            pairs = [str(x) for w in sizes for x in (by_size[w] / "model.pte", by_size[w] / "input_0.bin")]
            proc = subprocess.run([sys.executable, __file__, "--measure", *pairs], env=env, capture_output=True,
                                  text=True, timeout=900, check=True)
            points = json.loads(proc.stdout.strip().splitlines()[-1])
            for size, point in zip(sizes, points, strict=True):
                row = {"test_id": "toy_cnn_w", "median_ms": point["median_ms"],
                       "block_medians_ms": point["block_medians_ms"],
                       "bench": {"plan": "light", "round": rnd, "size": size,
                                 "seconds": round(time.time() - started, 1), "loadavg": os.getloadavg()[0],
                                 "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
                print(f"light round {rnd} size {size}: median {point['median_ms']:.4f} ms "
                      f"({row['bench']['seconds']} s, load {row['bench']['loadavg']:.2f})", flush=True)
            f.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", choices=("probe", "unchanged", "changed", "light"), required=True)
    parser.add_argument("--measure", nargs="+", metavar="PTE INPUT", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="32,34,36", help="comma list (probe, changed)")
    parser.add_argument("--sessions", type=int, default=1, help="sessions per size")
    parser.add_argument("--project", type=Path, default=Path("/tmp/sme2_history_project"))
    parser.add_argument("--keep", type=Path, default=Path("/tmp/sme2_history_sessions"))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.plan == "light":
        return light(args)
    from pytest_sme2.history.records import records_from_results

    root = project(args.project)
    args.keep.mkdir(parents=True, exist_ok=True)
    sizes = [32] if args.plan == "unchanged" else [int(w) for w in args.sizes.split(",")]
    order = [w for _ in range(args.sessions) for w in sizes]  # rounds: every size once per round, interleaved
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for i, size in enumerate(order):
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        json_out = args.keep / f"{args.plan}-{stamp}-{i:03d}-w{size}.json"
        info = session(root, size, json_out)
        results = json.loads(json_out.read_text())
        with args.out.open("a") as f:
            for rec in records_from_results(results, commit=None):
                d = rec.to_dict()
                d["bench"] = {"plan": args.plan, "index": i, **info}
                f.write(json.dumps(d, separators=(",", ":")) + "\n")
                print(f"{args.plan} {i} size {size}: median {rec.median_ms:.4f} ms ({info['seconds']} s, "
                      f"load {info['loadavg']:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    if "--measure" in sys.argv:
        rest = sys.argv[sys.argv.index("--measure") + 1:]
        print(json.dumps([measure(Path(rest[i]), Path(rest[i + 1])) for i in range(0, len(rest), 2)]))
        raise SystemExit(0)
    raise SystemExit(main())
