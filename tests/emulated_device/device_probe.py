"""Report, as JSON, what a Python program sees when it runs on the emulated phone.

Pushed to (or run from tests/ on) the device to prove a Python stand-in for `executor_runner` can
run there: who it runs as, which interpreter, its arguments, and the device files it can read.
Standard library only, since it runs inside the sandbox.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Print one JSON object and exit with the status given as `--exit N` (default 0)."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    features = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("Features")), [])
    report = {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "prefix": sys.prefix,
        "executable": sys.executable,
        "argv": argv,
        "cwd": str(Path.cwd()),
        "sme2": "sme2" in features,
        "tmp_writable": os.access("/data/local/tmp", os.W_OK),
    }
    print(json.dumps(report))
    print("device_probe: done", file=sys.stderr)
    return int(argv[argv.index("--exit") + 1]) if "--exit" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
