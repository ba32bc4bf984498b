"""The rebuilt-reference path (issue 28 item 1) end to end, in separate real sessions: A/A false alarms and power.

    python benchmarks/gate_rebuild.py --sessions 20     # 20 sessions per change: results/gate_rebuild.{txt,json}
    python benchmarks/gate_rebuild.py --quick           # A/A and +20 %, one short session each (a test runs it)

What a CI owner's fresh runner does. A small project in git (``net``: LAYERS dense 384x384 layers and ReLUs, batch 32,
fp32/XNNPACK on the local runtime, margin 5 %) records its baseline once and commits it. Then every session is:

1. a fresh ``git clone`` of that project: the committed baseline, no ``.sme2_artifacts/``, no export cache;
2. a real change to the model's code, committed in the clone: ``aa`` re-seeds the weights (another program, the same
   cost: every session another seed), ``slow10`` / ``slow20`` add one / two layers to the baseline's ten (about
   +10 % / +20 % of the cost; the interleaved measurement's estimate says how much exactly);
3. a new ``pytest`` process with ``CI=1`` and the plugin's defaults (``--busy-limit`` sets the busy check's): the
   candidate is exported, the baseline's ``.pte`` rebuilt from its commit in a git worktree and proven by its sha256,
   both measured interleaved (``session``), the verdict written to ``--sme2-json``.

Per session the results hold the comparison used (``session`` expected; anything else is counted, not hidden), the
verdict and exit status, the E2E estimate and interval, the rebuild time (from the rebuild's worktree being checked
out to the rebuilt ``.pte`` entering the artifact store: the worktree's ``.git`` file and the stored file's mtimes),
the session's wall time and the host's load average before and after it. Changes are interleaved (a round runs each
once, in a rotating order), so a change in the machine's load spreads over all three.

The machine's load is part of the result: on a shared 2-core VM a loaded session can be ``invalid`` (the busy check),
which is counted as not decided, never as a pass or a false alarm.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

BASE_LAYERS = 10
#: change -> the edit of the model's code (a seed of None: re-seeded with the session's number)
CHANGES: dict[str, dict[str, int | None]] = {"aa": {"WEIGHT_SEED": None}, "slow10": {"LAYERS": BASE_LAYERS + 1},
                                             "slow20": {"LAYERS": BASE_LAYERS + 2}}

#: LAYERS identical dense layers: the cost scales with LAYERS (~0.09 ms per layer per run here)
MODELS = '''
import torch
from torch import nn

from pytest_sme2.models import register_model

LAYERS = {layers}
WEIGHT_SEED = 0


class Net(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.body = nn.Sequential(*[nn.Sequential(nn.Linear(384, 384), nn.ReLU()) for _ in range(layers)])

    def forward(self, x):
        return self.body(x)


@register_model("net")
def net():
    torch.manual_seed(WEIGHT_SEED)
    model = Net(LAYERS)
    return model.eval(), (torch.randn(32, 384, generator=torch.Generator().manual_seed(1)),)
'''

TEST = '''
import pytest


@pytest.mark.sme2_model("net")
@pytest.mark.sme2_threshold(latency_pct={margin_pct})
def test_net(exported_model, sme2_runner, sme2_baseline):
    sme2_baseline.check(sme2_runner.profile(exported_model))
'''


def project_files(layers: int = BASE_LAYERS, margin_pct: int = 5) -> dict[str, str]:
    """The small project a CI owner has (also the rebuild tests'): its models file, test, ini and .gitignore."""
    return {"my_models.py": MODELS.format(layers=layers), "test_net.py": TEST.format(margin_pct=margin_pct),
            "pytest.ini": INI, ".gitignore": GITIGNORE}


INI = "[pytest]\nsme2_models = my_models.py\n"
GITIGNORE = ".sme2_cache/\n.sme2_artifacts/\n.sme2_history/\nr.json\n__pycache__/\n"
#: the quick mode's settings: few short blocks (counts, not rates)
QUICK = ["--sme2-runs", "4", "--sme2-warmup", "1", "--sme2-blocks", "8", "--sme2-busy-limit=100"]
#: the quick run's changes: an A/A and the +20 % model (one session each: what must hold on any machine)
QUICK_CHANGES = ("aa", "slow20")
#: the session's settings are the plugin's defaults; --busy-limit 100 turns the busy check off, for a loaded machine
#: whose every session it would call ``invalid`` (the load average per session is then in the results)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONHASHSEED", "CI"))}
    env.update(PYTHONPATH=str(ROOT), GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.com",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.com", **extra)
    return env


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=_env(), capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _pytest(project: Path, args: list[str], ci: bool) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    (project / "r.json").unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--sme2-json=r.json", *args], cwd=project, env=_env(**({"CI": "1"} if ci else {})),
                          capture_output=True, text=True, timeout=1800, check=False)
    if not (project / "r.json").is_file():
        raise RuntimeError(f"the session in {project} wrote no results:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done, json.loads((project / "r.json").read_text())["tests"][0]


def _edit(project: Path, values: dict[str, int]) -> None:
    path = project / "my_models.py"
    text = path.read_text()
    for name, value in values.items():
        text, n = re.subn(rf"^{name} = \d+$", f"{name} = {value}", text, flags=re.M)
        assert n == 1, name
    path.write_text(text)


def record(origin: Path, settings: list[str]) -> dict[str, Any]:
    """The project with its baseline recorded (not in CI) and committed: what the CI owner's repository holds."""
    origin.mkdir(parents=True)
    for name, text in project_files().items():
        (origin / name).write_text(text)
    _git(origin, "init", "-q", "-b", "main")
    _git(origin, "add", ".")
    _git(origin, "commit", "-q", "-m", "model")
    done, result = _pytest(origin, [*settings, "--sme2-update-baseline"], ci=False)
    if done.returncode != 0:
        raise RuntimeError(f"recording the baseline failed:\n{done.stdout[-3000:]}")
    _git(origin, "add", ".sme2_baselines")
    _git(origin, "commit", "-q", "-m", "baselines")
    (baseline,) = (origin / ".sme2_baselines").glob("*.json")
    data = json.loads(baseline.read_text())
    return {"commit": _git(origin, "rev-parse", "HEAD"), "pte_sha256": data["artifact"]["pte_sha256"],
            "median_ms": result.get("median_ms")}


def _rebuild_seconds(clone: Path, pte_sha256: str) -> float | None:
    """From the rebuild's worktree being checked out to the rebuilt program entering the artifact store."""
    trees = list((clone / ".sme2_cache" / "rebuild").glob("*/.git"))
    stored = [p for p in (clone / ".sme2_artifacts").rglob(f"{pte_sha256}*") if p.is_file()]
    if len(trees) != 1 or not stored:
        return None
    return stored[0].stat().st_mtime - trees[0].stat().st_mtime


def session(origin: Path, work: Path, change: str, number: int, *, settings: list[str],
            pte_sha256: str) -> dict[str, Any]:
    """One CI session on a fresh clone with ``change`` committed: what it decided and what it cost."""
    clone = work / f"s{number:03d}-{change}"
    _git(work, "clone", "-q", str(origin), str(clone))
    assert not (clone / ".sme2_artifacts").exists() and not (clone / ".sme2_cache").exists()
    edit = {name: (number + 1 if value is None else value) for name, value in CHANGES[change].items()}
    _edit(clone, edit)
    _git(clone, "commit", "-q", "-am", f"{change}: {edit}")
    load_before = os.getloadavg()
    start = time.monotonic()
    done, result = _pytest(clone, settings, ci=True)
    wall = time.monotonic() - start
    load_after = os.getloadavg()
    verdict = result.get("verdict") or {}
    e2e = next((c for c in verdict.get("checks", []) if c.get("interval")), None)
    notes = [str(n) for n in verdict.get("notes", [])]
    rebuilt = next((n for n in notes if "rebuil" in n), "")
    row = {"session": number, "change": change, "edit": edit, "comparison": verdict.get("comparison"),
           "status": verdict.get("status"), "exit": done.returncode,
           "estimate": e2e["interval"]["estimate"] if e2e else None,
           "low": e2e["interval"]["low"] if e2e else None, "high": e2e["interval"]["high"] if e2e else None,
           "check": e2e["name"] if e2e else None, "proven_by_hash": "hash to the baseline's" in rebuilt,
           "rebuild_s": _rebuild_seconds(clone, pte_sha256), "wall_s": round(wall, 1),
           "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
           "rebuilt": rebuilt, "notes": notes if verdict.get("comparison") != "session" else []}
    shutil.rmtree(clone, ignore_errors=True)  # its worktree is registered in the clone's own .git: gone with it
    return row


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import numpy as np

    out = []
    for change in CHANGES:
        rs = [r for r in rows if r["change"] == change]
        if not rs:
            continue
        est = [r["estimate"] for r in rs if r["comparison"] == "session" and r["estimate"] is not None]
        rebuild = [r["rebuild_s"] for r in rs if r["rebuild_s"] is not None]
        loads = [r["load_before"][0] for r in rs] + [r["load_after"][0] for r in rs]
        out.append({"change": change, "n": len(rs), "comparison": dict(Counter(str(r["comparison"]) for r in rs)),
                    "status": dict(Counter(str(r["status"]) for r in rs)),
                    "session_status": dict(Counter(str(r["status"]) for r in rs if r["comparison"] == "session")),
                    "failed_ci": sum(r["exit"] != 0 for r in rs),
                    "proven_by_hash": sum(r["proven_by_hash"] for r in rs),
                    "estimate_median": float(np.median(est)) if est else None,
                    "estimate_range": [min(est), max(est)] if est else None,
                    "rebuild_s_median": float(np.median(rebuild)) if rebuild else None,
                    "rebuild_s_range": [min(rebuild), max(rebuild)] if rebuild else None,
                    "wall_s_median": float(np.median([r["wall_s"] for r in rs])),
                    "load_1min_range": [min(loads), max(loads)]})
    return out


def render(result: dict[str, Any]) -> str:
    lines = [f"The rebuilt reference end to end: {result['mode']} run, {result['started']} - {result.get('ended', '')}",
             f"host: {result['host']}; baseline {BASE_LAYERS} layers, {result['baseline']['median_ms']} ms per run at "
             "recording; margin 5 %, CI=1, " + (" ".join(result["settings"]) or "the plugin's defaults"),
             f"{'change':7s} {'n':>3s} {'session':>8s} {'hash ok':>7s} {'regression/pass/other':>22s} "
             f"{'CI failed':>9s} {'estimate median [range]':>28s} {'rebuild s median [range]':>25s} "
             f"{'wall s':>6s} {'load 1-min':>11s}"]
    for e in result["summary"]:
        st = e["session_status"]
        other = e["n"] - st.get("regression", 0) - st.get("pass", 0) - st.get("improvement", 0)
        rng = e["estimate_range"]
        est = (f"{e['estimate_median'] - 1:+.1%} [{rng[0] - 1:+.1%}..{rng[1] - 1:+.1%}]" if rng else "-")
        rb = e["rebuild_s_range"]
        rebuild = f"{e['rebuild_s_median']:.0f} [{rb[0]:.0f}-{rb[1]:.0f}]" if rb else "-"
        lines.append(f"{e['change']:7s} {e['n']:3d} {e['comparison'].get('session', 0):8d} {e['proven_by_hash']:7d} "
                     f"{st.get('regression', 0):>9d}/{st.get('pass', 0) + st.get('improvement', 0)}/{other:<6d}"
                     f"{e['failed_ci']:>15d} {est:>28s} {rebuild:>25s} {e['wall_s_median']:6.0f} "
                     f"{e['load_1min_range'][0]:5.1f}-{e['load_1min_range'][1]:<5.1f}")
    odd = [r for r in result["rows"] if r["comparison"] != "session" or r["status"] not in ("pass", "regression")]
    for r in odd:
        lines.append(f"  session {r['session']} {r['change']}: {r['comparison']} {r['status']} (exit {r['exit']}, "
                     f"load {r['load_before'][0]}); {'; '.join(r['notes'])[:300]}")
    return "\n".join(lines)


def _host() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    return f"{cpu}, {os.cpu_count()} CPUs"


def _write(result: dict[str, Any], stem: Path) -> None:
    from pytest_sme2.store.files import replace_atomically

    result["summary"] = summarize(result["rows"])
    text = render(result)
    replace_atomically(stem.with_suffix(".json"), lambda f: f.write(json.dumps(result, indent=1).encode() + b"\n"))
    replace_atomically(stem.with_suffix(".txt"), lambda f: f.write(text.encode() + b"\n"))


def study(sessions: int, quick: bool, out: Path | None, work: Path, busy_limit: float | None = None) -> dict[str, Any]:
    settings = [*(QUICK if quick else []), *([f"--sme2-busy-limit={busy_limit:g}"] if busy_limit is not None else [])]
    result: dict[str, Any] = {"mode": "quick" if quick else "full", "host": _host(), "settings": settings,
                              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "rows": []}
    origin = work / "origin"
    result["baseline"] = record(origin, settings)
    changes = [c for c in CHANGES if not quick or c in QUICK_CHANGES]
    number = 0
    for round_ in range(sessions):
        for change in changes[round_ % len(changes):] + changes[:round_ % len(changes)]:
            number += 1
            row = session(origin, work, change, number, settings=settings, pte_sha256=result["baseline"]["pte_sha256"])
            result["rows"].append(row)
            print(f"[{number}] {change}: {row['comparison']} {row['status']} exit {row['exit']} est "
                  f"{row['estimate']} rebuild {row['rebuild_s']} s wall {row['wall_s']} s load {row['load_before']}",
                  flush=True)
            result["ended"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            if out is not None:
                _write(result, out)
    result["summary"] = summarize(result["rows"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10, help="sessions per change (default 10)")
    parser.add_argument("--quick", action="store_true", help="one short session of the A/A and of the +20 %% model "
                        "(counts, not rates)")
    parser.add_argument("--busy-limit", type=float, help="the plugin's --sme2-busy-limit (default: the plugin's; 100 = "
                        "off, for a loaded machine: the load average per session is recorded)")
    parser.add_argument("--out", type=Path, help="results stem (default benchmarks/results/gate_rebuild; "
                                                 "quick: printed only)")
    args = parser.parse_args(argv)
    out = args.out or (None if args.quick else RESULTS / "gate_rebuild")
    with tempfile.TemporaryDirectory(prefix="gate_rebuild_") as tmp:
        result = study(1 if args.quick else args.sessions, args.quick, out, Path(tmp), args.busy_limit)
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
