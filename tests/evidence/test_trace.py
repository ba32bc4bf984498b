"""ETDump reader: every recorded trace against executorch's own decoders, and every way a file can be bad.

The reference is executorch itself: ``deserialize_from_etdump_flatcc`` (flatc -> JSON -> objects)
for the raw events, and the ``Inspector`` for per-run ``Method::execute`` times. Our reader walks
the flatbuffer directly, so any disagreement is a bug in one of the two.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from recorded import DATA

from pytest_sme2.errors import TraceError
from pytest_sme2.evidence.trace import (
    KIND_DELEGATE_CALL,
    KIND_E2E,
    KIND_LEAF,
    KIND_LOAD,
    KIND_OPERATOR_CALL,
    parse_etdump,
    read_etdump,
)

pytestmark = pytest.mark.fast

TRACES = sorted(DATA.glob("*.etdump"))
TRACE_IDS = [p.name.removesuffix(".etdump") for p in TRACES]
CONTAINERS = {"Method::execute", "DELEGATE_CALL", "OPERATOR_CALL"}


def _profile_events(etdump: Any) -> list[tuple[int, str, Any]]:
    """(block index, block name, profile event) for every profile event, in file order."""
    return [
        (bi, block.name, ev.profile_event)
        for bi, block in enumerate(etdump.run_data)
        for ev in (block.events or [])
        if ev.profile_event is not None
    ]


def _label(pe: Any) -> str:
    return pe.name or pe.delegate_debug_id_str or ""


def _reference_runs(etdump: Any) -> list[Any]:
    """The blocks holding a Method::execute, in file order (what a "run" is)."""
    return [
        b for b in etdump.run_data
        if any(e.profile_event is not None and e.profile_event.name == "Method::execute" for e in b.events or [])
    ]


def _e2e_ms(block: Any) -> float:
    return sum(
        (e.profile_event.end_time - e.profile_event.start_time) / 1e6
        for e in block.events
        if e.profile_event is not None and e.profile_event.name == "Method::execute"
    )


def _readme_table() -> dict[str, dict[str, Any]]:
    """The per-trace table of TRACES_README.md, parsed (the recorded, documented numbers)."""
    rows = {}
    for line in (DATA / "TRACES_README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not re.fullmatch(r"[a-z][a-z0-9_\-]+", cells[0]) or cells[0] == "trace stem":
            continue
        leaf = re.match(r"(\d+)(?: \((\d+) portable\))?", cells[1])
        run0, median = (c.strip() for c in cells[4].split("/"))
        assert leaf is not None
        rows[cells[0]] = {
            "leaf": int(leaf.group(1)), "portable": int(leaf.group(2) or 0), "delegate_calls": int(cells[2]),
            "run0": run0, "median": median,
        }
    return rows


README = _readme_table()


def _within_print_precision(value: float, printed: str) -> bool:
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return abs(value - float(printed)) <= 0.5 * 10**-decimals + 1e-12


@pytest.fixture(scope="module")
def inspector_e2e() -> Any:
    """``e2e(path)`` -> the Inspector's Method::execute times (ms) of the Execute block, per run."""
    from executorch.devtools import Inspector

    cache: dict[Path, list[float]] = {}

    def e2e(path: Path) -> list[float]:
        if path not in cache:
            inspector = Inspector(etdump_path=str(path))
            found = [
                ev.perf_data.raw for block in inspector.event_blocks for ev in block.events
                if ev.name == "Method::execute"
            ]
            assert len(found) == 1, "identical Execute blocks are merged into one EventBlock by the Inspector"
            cache[path] = list(found[0])
        return cache[path]

    return e2e


# ------------------------------------------------------------------------ against executorch's decoder


def test_every_recorded_trace_is_covered() -> None:
    assert len(TRACES) == 10
    assert set(TRACE_IDS) | {"mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1_n1000"} == set(README)


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_events_match_executorch_decoder(path: Path, reference_etdump: Any) -> None:
    ref = _profile_events(reference_etdump(path))
    table = read_etdump(path).table
    assert len(table) == len(ref)
    assert table["block_index"].tolist() == [bi for bi, _, _ in ref]
    assert table["block_name"].tolist() == [bn for _, bn, _ in ref]
    assert table["event_name"].tolist() == [_label(pe) for _, _, pe in ref]
    assert table["start_ns"].tolist() == [pe.start_time for _, _, pe in ref]
    assert table["end_ns"].tolist() == [pe.end_time for _, _, pe in ref]
    assert table["chain_index"].tolist() == [pe.chain_index for _, _, pe in ref]
    assert table["instruction_id"].tolist() == [pe.instruction_id for _, _, pe in ref]
    # Delegated = carries a delegate debug id (XNNPACK puts its label in the string id).
    assert table["delegated"].tolist() == [
        bool(pe.delegate_debug_id_str) or (pe.delegate_debug_id_int not in (None, -1)) for _, _, pe in ref
    ]
    assert table["duration_ms"].tolist() == pytest.approx(
        [(pe.end_time - pe.start_time) / 1e6 for _, _, pe in ref], rel=1e-12, abs=1e-15
    )


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_run_blocks_and_kinds_match_executorch_decoder(path: Path, reference_etdump: Any) -> None:
    etdump = reference_etdump(path)
    timeline = read_etdump(path)
    table = timeline.table
    runs = _reference_runs(etdump)
    assert timeline.num_runs == len(runs) == 30
    assert [b.name for b in etdump.run_data] == ["Default"] + ["Execute"] * 30
    # Run i is the i-th block holding a Method::execute; the load block is run -1.
    for bi, block in enumerate(etdump.run_data):
        rows = table[table["block_index"] == bi]
        assert len(rows) == len([e for e in block.events if e.profile_event is not None])
        assert set(rows["run_index"]) == ({-1} if block.name == "Default" else {bi - 1})
    expected_kind = {
        "Method::execute": KIND_E2E, "DELEGATE_CALL": KIND_DELEGATE_CALL, "OPERATOR_CALL": KIND_OPERATOR_CALL,
        "Program::load_method": KIND_LOAD, "Method::init": KIND_LOAD,
    }
    assert table["kind"].tolist() == [
        expected_kind.get(_label(pe), KIND_LEAF) for _, _, pe in _profile_events(etdump)
    ]
    # Only leaf operators carry a category.
    assert (table.loc[table["kind"] != KIND_LEAF, "category"] == "").all()
    assert (table.loc[table["kind"] == KIND_LEAF, "category"] != "").all()


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_e2e_per_run_is_method_execute_of_each_execute_block(path: Path, reference_etdump: Any) -> None:
    expected = [_e2e_ms(b) for b in _reference_runs(reference_etdump(path))]
    assert read_etdump(path).e2e_ms_per_run().tolist() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_e2e_per_run_matches_executorch_inspector(path: Path, inspector_e2e: Any) -> None:
    ours = read_etdump(path).e2e_ms_per_run().tolist()
    theirs = inspector_e2e(path)
    assert len(ours) == len(theirs) == 30
    for run, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert abs(a - b) <= 1e-3, f"run {run}: ours {a} ms, Inspector {b} ms"


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_numbers_in_traces_readme(path: Path, reference_etdump: Any) -> None:
    row = README[path.name.removesuffix(".etdump")]
    runs = _reference_runs(reference_etdump(path))
    e2e = [_e2e_ms(b) for b in runs]
    # Computed here from executorch's decoding, then the same from ours.
    assert _within_print_precision(e2e[0], row["run0"]), (e2e[0], row["run0"])
    assert _within_print_precision(statistics.median(e2e[1:]), row["median"])
    ours = read_etdump(path).e2e_ms_per_run()
    assert _within_print_precision(float(ours[0]), row["run0"])
    assert _within_print_precision(statistics.median(ours[1:].tolist()), row["median"])
    # Event counts per run, from the raw events and from our timeline.
    for block in runs:
        labels = [_label(e.profile_event) for e in block.events if e.profile_event is not None]
        leaves = [x for x in labels if x not in CONTAINERS]
        assert len(leaves) == row["leaf"]
        assert sum(x.startswith("native_call_") for x in leaves) == row["portable"]
        assert labels.count("DELEGATE_CALL") == row["delegate_calls"]
    table = read_etdump(path).table
    leaf = table[table["kind"] == KIND_LEAF]
    assert leaf.groupby("run_index").size().tolist() == [row["leaf"]] * 30
    assert (leaf["backend"] == "portable").sum() == 30 * row["portable"]


def test_xnnpack_labels_and_backends(data_dir: Path) -> None:
    table = read_etdump(data_dir / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump").table
    run1 = table[table["run_index"] == 1]
    leaf = run1[run1["kind"] == KIND_LEAF]
    assert "Convolution (NHWC, F32) IGEMM #3" in leaf["event_name"].tolist()
    conv = leaf[leaf["event_name"] == "Convolution (NHWC, F32) IGEMM #3"].iloc[0]
    assert conv["op_type"] == "Convolution (NHWC, F32) IGEMM"
    assert conv["category"] == "Convolution"
    assert conv["backend"] == "XNNPACK"
    assert bool(conv["delegated"])
    portable = read_etdump(data_dir / "toy_cnn_fp32_portable_simd-on_t1.etdump").operators()
    assert set(portable["backend"]) == {"portable"}
    assert not portable["delegated"].any()


def test_parse_bytes_equals_read_file(data_dir: Path) -> None:
    path = data_dir / "toy_cnn_int8_xnnpack_simd-on_t1.etdump"
    from_bytes = parse_etdump(path.read_bytes(), source="mem")
    assert from_bytes.table.equals(read_etdump(path).table)
    assert from_bytes.source == "mem"


# ------------------------------------------------------------------------------------ bad inputs


def _assert_trace_error(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        read_etdump(path)
    message = str(info.value)
    assert str(path) in message
    assert "\n" not in message
    return message


def test_missing_file(tmp_path: Path) -> None:
    assert "does not exist" in _assert_trace_error(tmp_path / "nope.etdump")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    assert "directory" in _assert_trace_error(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.etdump"
    path.write_bytes(b"")
    assert "empty" in _assert_trace_error(path)


@pytest.mark.parametrize("seed", range(20))
def test_random_bytes(tmp_path: Path, seed: int) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    path = tmp_path / "random.etdump"
    path.write_bytes(rng.integers(0, 256, size=int(rng.integers(1, 5000)), dtype=np.uint8).tobytes())
    _assert_trace_error(path)


def test_pte_passed_as_trace(tmp_path: Path, data_dir: Path) -> None:
    message = _assert_trace_error(data_dir / "toy_cnn_fp32_xnnpack.pte")
    assert "not an ETDump" in message
    assert ".pte" in message


@pytest.mark.parametrize("cut", ["0", "5", "11", "12", "100", "50%", "len-4", "len-1"])
def test_truncated_trace(tmp_path: Path, data_dir: Path, cut: str) -> None:
    data = (data_dir / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1.etdump").read_bytes()
    n = {"50%": len(data) // 2, "len-4": len(data) - 4, "len-1": len(data) - 1}.get(cut) or int(cut)
    path = tmp_path / "cut.etdump"
    path.write_bytes(data[:n])
    _assert_trace_error(path)


def test_trailing_bytes_after_declared_size_are_ignored(tmp_path: Path, data_dir: Path) -> None:
    src = data_dir / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
    path = tmp_path / "padded.etdump"
    path.write_bytes(src.read_bytes() + b"\0" * 64)
    assert read_etdump(path).table.equals(read_etdump(src).table)


def _run_data_length_offset(data: bytes) -> int:
    """Where the run_data vector's length lives, found by walking the flatbuffer here by hand."""
    import struct

    root = 4 + struct.unpack_from("<I", data, 4)[0]
    vtable = root - struct.unpack_from("<i", data, root)[0]
    field = struct.unpack_from("<H", data, vtable + 4 + 2 * 1)[0]  # field 1 of ETDump = run_data
    assert field
    return root + field + struct.unpack_from("<I", data, root + field)[0]


# Corrupt lengths once made the reader allocate gigabytes (MemoryError, or the OOM killer): these
# run in a child capped at 2 GB of address space so a regression fails the test, not the session.
_CAPPED_CHILD = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    from pytest_sme2.errors import TraceError
    from pytest_sme2.evidence.trace import parse_etdump, read_etdump
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "read":
        try:
            read_etdump(path)
            print("parsed")
        except TraceError as exc:
            print("TraceError:", exc)
        sys.exit(0)
    data = open(path, "rb").read()
    rng = np.random.default_rng(7)
    bad = []
    for i in range(400):
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 8))):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        try:
            parse_etdump(bytes(b), source="x")
        except TraceError:
            pass
        except BaseException as exc:
            bad.append(f"{i}: {type(exc).__name__}: {exc}"[:200])
    print("\\n".join(bad) or "ok")
    """
)


def _capped_child(mode: str, path: Path) -> str:
    proc = subprocess.run([sys.executable, "-c", _CAPPED_CHILD, mode, str(path)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_corrupt_vector_length_is_a_trace_error_not_a_huge_allocation(tmp_path: Path, data_dir: Path) -> None:
    import struct

    data = bytearray((data_dir / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump").read_bytes())
    at = _run_data_length_offset(bytes(data))
    assert struct.unpack_from("<I", data, at)[0] == 31  # Default + 30 Execute blocks
    struct.pack_into("<I", data, at, 0x7FFF_FFFF)
    path = tmp_path / "corrupt.etdump"
    path.write_bytes(bytes(data))
    out = _capped_child("read", path)
    assert out.startswith("TraceError:")
    assert str(path) in out
    assert "corrupt" in out


def test_byte_flips_only_ever_raise_trace_error(data_dir: Path) -> None:
    """400 seeded corruptions (1-7 random bytes each) of a real trace: parsed, or TraceError."""
    assert _capped_child("fuzz", data_dir / "toy_cnn_fp32_portable_simd-on_t1.etdump") == "ok"


# ------------------------------------------------------------------------ schema-valid synthetic traces


def _serialize(etdump: Any) -> bytes:
    """Serialize with executorch and size-prefix it the way the runtime writes files."""
    from executorch.devtools.etdump.serialize import serialize_to_etdump_flatcc

    body = serialize_to_etdump_flatcc(etdump)
    return len(body).to_bytes(4, "little") + body


def test_real_files_are_size_prefixed(data_dir: Path) -> None:
    for path in TRACES:
        data = path.read_bytes()
        assert int.from_bytes(data[:4], "little") == len(data) - 4
        assert data[8:12] == b"ED00"


def test_trace_without_execute_events(tmp_path: Path) -> None:
    from executorch.devtools.etdump import schema_flatcc as s

    def event(name: str, start: int, end: int) -> Any:
        pe = s.ProfileEvent(name=name, chain_index=-1, instruction_id=0, delegate_debug_id_int=-1,
                            delegate_debug_id_str=None, delegate_debug_metadata=None, start_time=start,
                            end_time=end)
        return s.Event(profile_event=pe, allocation_event=None, debug_event=None)

    block = s.RunData(name="Default", bundled_input_index=-1, allocators=[],
                      events=[event("Method::init", 10, 20), event("Program::load_method", 5, 25)])
    data = _serialize(s.ETDumpFlatCC(version=0, run_data=[block]))
    assert data[8:12] == b"ED00"
    path = tmp_path / "load_only.etdump"
    path.write_bytes(data)
    message = _assert_trace_error(path)
    assert "Method::execute" in message
    assert "EXECUTORCH_ENABLE_EVENT_TRACER" in message
    # The events are there; only a run is missing.
    timeline = read_etdump(path, require_runs=False)
    assert timeline.num_runs == 0
    assert timeline.table["event_name"].tolist() == ["Method::init", "Program::load_method"]


@pytest.mark.parametrize("block_name", ["forward", "encode", "Run 1", ""])
def test_block_names_do_not_matter_method_execute_does(
    tmp_path: Path, data_dir: Path, reference_etdump: Any, block_name: str
) -> None:
    from pytest_sme2.analysis.run import analyze

    src = data_dir / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
    original = reference_etdump(src)
    renamed = dataclasses.replace(
        original,
        run_data=[dataclasses.replace(b, name=block_name if b.name == "Execute" else b.name)
                  for b in original.run_data],
    )
    path = tmp_path / "renamed.etdump"
    path.write_bytes(_serialize(renamed))
    timeline = read_etdump(path)
    assert set(timeline.table.loc[timeline.table["run_index"] >= 0, "block_name"]) == {block_name}
    assert timeline.num_runs == 30
    expected = analyze(read_etdump(src)).to_dict()
    got = analyze(timeline).to_dict()
    for key in ("e2e_ms", "category_totals_ms", "operator_details", "runs"):
        assert got[key] == expected[key]


def test_single_run_of_another_method_analyzes(tmp_path: Path, data_dir: Path, reference_etdump: Any) -> None:
    """One block only, named for a non-forward method: it is a run because it holds Method::execute."""
    from pytest_sme2.analysis.run import analyze

    original = reference_etdump(data_dir / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump")
    run5 = original.run_data[6]
    data = _serialize(dataclasses.replace(original, run_data=[dataclasses.replace(run5, name="decode_step")]))
    path = tmp_path / "one.etdump"
    path.write_bytes(data)
    timeline = read_etdump(path)
    assert timeline.num_runs == 1
    analysis = analyze(timeline, warmup=0)
    assert analysis.e2e.median == pytest.approx(_e2e_ms(run5), rel=1e-12)
    assert sum(analysis.category_totals_ms.values()) == pytest.approx(_e2e_ms(run5), rel=1e-12)
