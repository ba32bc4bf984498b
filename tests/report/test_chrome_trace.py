"""The Chrome trace (``pytest_sme2.report.chrome_trace``) of recorded ETDump files."""

from __future__ import annotations

import json

import pytest

from pytest_sme2.evidence.categories import CATEGORIES
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.report.chrome_trace import etdump_to_chrome_trace, etdumps_to_chrome_trace
from report.builders import DATA, TT, e2e_by_hand

pytestmark = pytest.mark.fast

def test_chrome_trace_has_every_event_nested_in_its_parent() -> None:
    timeline = read_etdump(DATA / f"{TT}_simd-on_t1.etdump")
    doc = json.loads(json.dumps(etdump_to_chrome_trace(timeline)))
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len(timeline.table)
    t = timeline.table
    by_kind: dict[str, int] = {}
    for e in events:
        by_kind[e["cat"]] = by_kind.get(e["cat"], 0) + 1
    assert by_kind == t["kind"].value_counts().to_dict()
    names = {e["name"] for e in events}
    assert {"Method::execute", "DELEGATE_CALL", "OPERATOR_CALL", "native_call_native_layer_norm.out"} <= names
    execs = {e["tid"]: e for e in events if e["name"] == "Method::execute"}
    assert len(execs) == timeline.num_runs
    calls = {(e["tid"], e["args"]["instruction_id"]): e for e in events
             if e["cat"] in ("delegate_call", "operator_call")}
    eps = 1e-6
    for e in events:
        if e["cat"] == "load":
            assert e["tid"] == 0
            continue
        parent = execs[e["tid"]]
        assert parent["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + eps
        if e["cat"] == "operator":
            call = calls[(e["tid"], e["args"]["instruction_id"])]
            assert call["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= call["ts"] + call["dur"] + eps
            assert e["args"]["category"] in CATEGORIES
    e2e = e2e_by_hand(f"{TT}_simd-on_t1")
    assert [execs[r + 1]["dur"] / 1000 for r in range(e2e.size)] == pytest.approx(e2e.tolist(), abs=1e-6)
    threads = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert threads[0] == "load / init" and threads[1] == "run 0 (cold)" and threads[2] == "run 1"



def test_chrome_trace_two_builds_in_one_file() -> None:
    off = read_etdump(DATA / f"{TT}_simd-off_t1.etdump")
    on = read_etdump(DATA / f"{TT}_simd-on_t1.etdump")
    doc = etdumps_to_chrome_trace([("SME2 off", off), ("SME2 on", on)])
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in x} == {1, 2}
    assert sum(e["pid"] == 1 for e in x) == len(off.table) and sum(e["pid"] == 2 for e in x) == len(on.table)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {1: "SME2 off", 2: "SME2 on"}
