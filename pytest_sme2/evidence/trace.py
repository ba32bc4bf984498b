"""ETDump file -> timeline table, read straight from the flatbuffer.

The executorch Inspector decodes an ETDump by shelling out to ``flatc``, turning the binary into
JSON and the JSON into Python objects: seconds for a 1000-run trace. The schema
(``etdump_schema_flatcc.fbs``) is small and stable, so this module walks the flatbuffer tables
directly with vectorised numpy gathers. The result is one row per profile event, with the run
structure, nesting class, delegation and category already attached.

Layout reminders (flatbuffers): a table starts with an int32 offset back to its vtable; the vtable
holds uint16 field offsets (0 = field absent, use the default); references (strings, vectors,
sub-tables) are uint32 offsets relative to where they are stored. An ETDump written by the runtime
is *size-prefixed*: a uint32 length, then the root offset, then the identifier ``ED00``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pytest_sme2.errors import TraceError, unreadable
from pytest_sme2.evidence.categories import DEFAULT, CategoryRules, op_type_of

ETDUMP_IDENTIFIER = b"ED00"

#: Framework events: containers or one-time setup, never categorized as operators.
E2E_EVENT = "Method::execute"
DELEGATE_CALL = "DELEGATE_CALL"
OPERATOR_CALL = "OPERATOR_CALL"
LOAD_EVENTS = frozenset({"Program::load_method", "Method::init"})
FRAMEWORK_EVENTS = frozenset({E2E_EVENT, DELEGATE_CALL, OPERATOR_CALL, *LOAD_EVENTS})

#: Values of the ``kind`` column.
KIND_E2E = "e2e"
KIND_DELEGATE_CALL = "delegate_call"
KIND_OPERATOR_CALL = "operator_call"
KIND_LOAD = "load"
KIND_LEAF = "operator"

#: Column order of the timeline table (and of the ``*_timeline.csv`` files).
TIMELINE_COLUMNS = (
    "run_index", "block_index", "block_name", "event_name", "op_type", "kind", "category",
    "delegated", "backend", "chain_index", "instruction_id", "start_ns", "end_ns", "duration_ms",
)

# XNNPACK's profiler labels every operator "<type>[ <ukernel>] #<k>"; a delegated event labelled
# that way is XNNPACK's even without an ETRecord to name the backend.
_XNNPACK_LABEL = re.compile(r" #\d+$")

_U8 = np.dtype("u1")
_U16 = np.dtype("<u2")
_I32 = np.dtype("<i4")
_U32 = np.dtype("<u4")
_I64 = np.dtype("<i8")
_U64 = np.dtype("<u8")


@dataclass(frozen=True)
class Timeline:
    """Every profile event of one ETDump, one row each (see ``TIMELINE_COLUMNS``).

    ``run_index`` numbers the executions (blocks holding a ``Method::execute``) from 0 in file
    order; load/init blocks get -1. ``kind`` separates end-to-end, container, load and leaf
    operator events; only leaf operators carry a ``category``.
    """

    source: str
    table: pd.DataFrame
    etdump_version: int

    @property
    def num_runs(self) -> int:
        runs = self.table["run_index"]
        return int(runs.max()) + 1 if len(runs) and runs.max() >= 0 else 0

    def e2e_ms_per_run(self) -> np.ndarray:
        """End-to-end latency of each run: the sum of that run's ``Method::execute`` durations."""
        e2e = self.table[self.table["kind"] == KIND_E2E]
        sums = e2e.groupby("run_index", sort=True)["duration_ms"].sum()
        out: np.ndarray = sums.reindex(range(self.num_runs), fill_value=0.0).to_numpy(dtype=float)
        return out

    def run(self, index: int) -> pd.DataFrame:
        return self.table[self.table["run_index"] == index]

    def operators(self) -> pd.DataFrame:
        """Leaf operator events only (no execute, delegate/operator call or load events)."""
        return self.table[self.table["kind"] == KIND_LEAF]


class _Reader:
    """Bounds-checked vectorised reads from one flatbuffer."""

    def __init__(self, data: bytes, source: str) -> None:
        self.data = data
        self.buf = np.frombuffer(data, dtype=_U8)
        self.source = source
        #: whole-buffer views per dtype, for reads whose positions are all aligned to the dtype
        self._views: dict[np.dtype, np.ndarray] = {}

    def _check(self, pos: np.ndarray, size: int) -> None:
        if pos.size and (int(pos.min()) < 0 or int(pos.max()) + size > self.buf.size):
            raise TraceError(
                f"{self.source} is truncated or corrupt: an offset points past the end of its "
                f"{self.buf.size} bytes. The runner probably stopped before it finished writing the "
                "trace; run it again and let it exit normally."
            )

    def read(self, pos: np.ndarray, dtype: np.dtype) -> np.ndarray:
        pos = np.asarray(pos, dtype=np.int64)
        size = dtype.itemsize
        self._check(pos, size)
        if size == 1:
            out: np.ndarray = self.buf[pos]
            return out
        # Flatbuffers align scalars to their size, so reads are nearly always aligned: then one
        # gather from a typed view of the whole buffer does it, without a byte-index matrix.
        if not (pos & (size - 1)).any():
            view = self._views.get(dtype)
            if view is None:
                view = self._views[dtype] = np.frombuffer(self.data, dtype=dtype, count=len(self.data) // size)
            gathered: np.ndarray = view[pos // size]
            return gathered
        idx = pos[:, None] + np.arange(size, dtype=np.int64)
        return np.ascontiguousarray(self.buf[idx]).view(dtype).reshape(-1)

    def field_offsets(self, tables: np.ndarray, field: int) -> np.ndarray:
        """Offset of ``field`` inside each table (0 where the field is absent)."""
        vtables = tables - self.read(tables, _I32).astype(np.int64)
        vt_size = self.read(vtables, _U16).astype(np.int64)
        present = vt_size > 4 + 2 * field
        out = np.zeros(tables.shape, dtype=np.int64)
        if present.any():
            out[present] = self.read(vtables[present] + 4 + 2 * field, _U16)
        return out

    def scalar(self, tables: np.ndarray, field: int, dtype: np.dtype, default: int) -> np.ndarray:
        fo = self.field_offsets(tables, field)
        out = np.full(tables.shape, default, dtype=np.int64)
        has = fo > 0
        if has.any():
            out[has] = self.read(tables[has] + fo[has], dtype).astype(np.int64)
        return out

    def ref(self, tables: np.ndarray, field: int) -> np.ndarray:
        """Absolute position of a referenced object (string/vector/table), -1 where absent."""
        fo = self.field_offsets(tables, field)
        out = np.full(tables.shape, -1, dtype=np.int64)
        has = fo > 0
        if has.any():
            at = tables[has] + fo[has]
            out[has] = at + self.read(at, _U32).astype(np.int64)
        return out

    def vectors_of_tables(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flatten several vectors of tables: (table positions, index of the owning vector)."""
        has = vectors >= 0
        lengths = np.zeros(vectors.shape, dtype=np.int64)
        lengths[has] = self.read(vectors[has], _U32)
        # A corrupt length must fail here, before the gathers below allocate 8 bytes per claimed slot.
        self._check(vectors[has] + 4 * lengths[has], 4)
        total = int(lengths.sum())
        owner = np.repeat(np.arange(vectors.size, dtype=np.int64), lengths)
        starts = np.cumsum(lengths) - lengths
        within = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
        slots = np.repeat(vectors, lengths) + 4 + 4 * within
        return slots + self.read(slots, _U32).astype(np.int64), owner

    def strings(self, positions: np.ndarray) -> list[str]:
        """Decode strings at ``positions`` ('' where -1); repeated names decode once."""
        out = [""] * positions.size
        has = np.flatnonzero(positions >= 0)
        if has.size == 0:
            return out
        pos = positions[has]
        lengths = self.read(pos, _U32).astype(np.int64)
        self._check(pos + 4 + lengths - 1, 1)
        data = self.data
        cache: dict[bytes, str] = {}
        for i, p, n in zip(has.tolist(), (pos + 4).tolist(), lengths.tolist(), strict=True):
            raw = data[p : p + n]
            text = cache.get(raw)
            if text is None:
                text = cache[raw] = raw.decode("utf-8", errors="replace")
            out[i] = text
        return out


def _open_root(data: bytes, source: str) -> tuple[_Reader, int]:
    if len(data) == 0:
        raise TraceError(f"{source} is empty (0 bytes); expected an ETDump written by a tracer-enabled runner.")
    if len(data) < 12:
        raise TraceError(
            f"{source} is {len(data)} bytes, too short to be an ETDump (a size-prefixed flatbuffer with "
            f"identifier {ETDUMP_IDENTIFIER.decode()}); it was probably cut off. Record the trace again."
        )
    if data[8:12] == ETDUMP_IDENTIFIER:
        prefixed = True
    elif data[4:8] == ETDUMP_IDENTIFIER:
        prefixed = False
    else:
        hint = ""
        if data[4:8] == b"ET12" or b"ET1" in data[4:8]:
            hint = " It looks like an ExecuTorch program (.pte), not a trace."
        raise TraceError(
            f"{source} is not an ETDump: no {ETDUMP_IDENTIFIER.decode()!r} file identifier at byte 8.{hint} "
            "Pass the file written by executor_runner --etdump_path (a tracer-enabled build)."
        )
    base = 4 if prefixed else 0
    if prefixed:
        declared = int.from_bytes(data[0:4], "little")
        if declared + 4 > len(data):
            raise TraceError(
                f"{source} is truncated: its header declares {declared + 4} bytes but the file has "
                f"{len(data)}. The runner was probably killed while writing it; record the trace again."
            )
        data = data[: declared + 4]
    reader = _Reader(data, source)
    root = base + int(reader.read(np.array([base]), _U32)[0])
    return reader, root


def parse_etdump(
    data: bytes,
    *,
    source: str = "<etdump bytes>",
    rules: CategoryRules = DEFAULT,
    delegate_backend: str | None = None,
) -> Timeline:
    """Parse ETDump bytes into a :class:`Timeline`.

    ``delegate_backend`` names the backend of delegated events when known (from an ETRecord);
    otherwise XNNPACK-style labels are attributed to ``XNNPACK`` and others to ``delegate``.
    """
    reader, root = _open_root(data, source)
    roots = np.array([root], dtype=np.int64)
    version = int(reader.scalar(roots, 0, _U32, 0)[0])
    run_data_vec = reader.ref(roots, 1)
    if run_data_vec[0] < 0:
        raise TraceError(f"{source} holds no run data: the runner recorded nothing. {_NO_EVENTS_FIX}")
    blocks, _ = reader.vectors_of_tables(run_data_vec)
    block_names = reader.strings(reader.ref(blocks, 0))
    events, block_of_event = reader.vectors_of_tables(reader.ref(blocks, 3))
    profile = reader.ref(events, 0)
    keep = profile >= 0
    profile, block_of_event = profile[keep], block_of_event[keep]

    names = reader.strings(reader.ref(profile, 0))
    chain = reader.scalar(profile, 1, _I32, 0)
    instruction = reader.scalar(profile, 2, _I32, -1)
    dbg_int = reader.scalar(profile, 3, _I32, -1)
    dbg_str = reader.strings(reader.ref(profile, 4))
    start = reader.scalar(profile, 6, _U64, 0)
    end = reader.scalar(profile, 7, _U64, 0)

    return _build_timeline(
        source=source, version=version, block_names=block_names, block_of_event=block_of_event,
        names=names, dbg_str=dbg_str, dbg_int=dbg_int, chain=chain, instruction=instruction,
        start=start, end=end, rules=rules, delegate_backend=delegate_backend,
    )


_NO_EVENTS_FIX = (
    "Per-operator traces need an executor_runner built with -DEXECUTORCH_BUILD_DEVTOOLS=ON "
    "-DEXECUTORCH_ENABLE_EVENT_TRACER=ON (or executorch>=1.5.1's Python runtime, which records one)."
)


def _build_timeline(
    *, source: str, version: int, block_names: list[str], block_of_event: np.ndarray,
    names: list[str], dbg_str: list[str], dbg_int: np.ndarray, chain: np.ndarray,
    instruction: np.ndarray, start: np.ndarray, end: np.ndarray, rules: CategoryRules,
    delegate_backend: str | None,
) -> Timeline:
    n = len(names)
    name_arr = np.asarray(names, dtype=object).reshape(n)
    dbg_arr = np.asarray(dbg_str, dtype=object).reshape(n)
    has_dbg_str = dbg_arr != ""
    delegated = (dbg_int != -1) | has_dbg_str
    # A delegated event's label lives in delegate_debug_id_str (XNNPACK) or, failing that, its int id.
    labels = np.where(name_arr != "", name_arr, dbg_arr)
    unnamed = np.flatnonzero(labels == "")
    for i in unnamed.tolist():
        di = int(dbg_int[i])
        labels[i] = f"delegate_op_{di}" if di != -1 else "<unnamed>"

    # A trace repeats a few hundred distinct labels over every run: everything derived from the
    # label (kind, op type, category, XNNPACK-ness) is computed once per distinct label, then
    # spread to the events through the factorized codes.
    codes, uniq = pd.factorize(labels)
    uniq_list = [str(u) for u in uniq]
    kind_of = np.array([_kind_of_label(u) for u in uniq_list], dtype=object)
    op_type_of_u = np.array([op_type_of(u) for u in uniq_list], dtype=object)
    category_of = np.array([rules.categorize(t) for t in op_type_of_u.tolist()], dtype=object)
    xnn_of = np.array([bool(_XNNPACK_LABEL.search(u)) for u in uniq_list], dtype=bool)

    kind = kind_of[codes] if n else np.array([], dtype=object)
    leaf = kind == KIND_LEAF
    table = pd.DataFrame(
        {
            "block_index": block_of_event,
            "event_name": pd.Series(labels, dtype=object),
            "chain_index": chain,
            "instruction_id": instruction,
            "start_ns": start,
            "end_ns": end,
            "delegated": delegated,
        }
    )
    table["block_name"] = pd.Series(block_names, dtype=object).to_numpy()[block_of_event] if n else []
    table["duration_ms"] = (end.astype(np.float64) - start.astype(np.float64)) / 1e6
    table["kind"] = kind

    # Runs are the blocks that hold a Method::execute, numbered in file order.
    exec_blocks = np.unique(block_of_event[kind == KIND_E2E])
    run_of_block = np.full(len(block_names), -1, dtype=np.int64)
    run_of_block[exec_blocks] = np.arange(exec_blocks.size)
    table["run_index"] = run_of_block[block_of_event] if n else np.array([], dtype=np.int64)

    table["op_type"] = op_type_of_u[codes] if n else np.array([], dtype=object)
    table["category"] = np.where(leaf, category_of[codes], "") if n else np.array([], dtype=object)

    backend = np.full(n, "", dtype=object)
    backend[leaf & ~delegated] = "portable"
    if delegate_backend:
        backend[leaf & delegated] = delegate_backend
    else:
        xnn = xnn_of[codes] if n else np.zeros(0, dtype=bool)
        backend[leaf & delegated & xnn] = "XNNPACK"
        backend[leaf & delegated & ~xnn] = "delegate"
    table["backend"] = backend
    table = table.loc[:, list(TIMELINE_COLUMNS)]
    return Timeline(source=source, table=table, etdump_version=version)


def _kind_of_label(label: str) -> str:
    if label == E2E_EVENT:
        return KIND_E2E
    if label == DELEGATE_CALL:
        return KIND_DELEGATE_CALL
    if label == OPERATOR_CALL:
        return KIND_OPERATOR_CALL
    if label in LOAD_EVENTS:
        return KIND_LOAD
    return KIND_LEAF


def read_etdump(
    path: str | Path,
    *,
    rules: CategoryRules = DEFAULT,
    delegate_backend: str | None = None,
    require_runs: bool = True,
) -> Timeline:
    """Read an ETDump file into a :class:`Timeline`.

    With ``require_runs`` (the default) a trace that holds no ``Method::execute`` event is an
    error: it cannot give an end-to-end latency, usually because the runtime had no event tracer.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise unreadable(p, exc, what="trace file", fix="pass the path of an .etdump file", inside=".etdump",
                         error=TraceError) from None
    timeline = parse_etdump(data, source=str(p), rules=rules, delegate_backend=delegate_backend)
    if require_runs and timeline.num_runs == 0:
        raise TraceError(
            f"{p} holds no execute events (no {E2E_EVENT!r}), so it has no latency to analyze. "
            + _NO_EVENTS_FIX
        )
    return timeline


def etrecord_backend(path: str | Path) -> str | None:
    """The delegate backend named in an ETRecord (``XnnpackBackend`` -> ``XNNPACK``), if any.

    XNNPACK's per-operator events cannot be linked back to graph nodes through an ETRecord (its
    debug map is empty), so the backend name is what an ETRecord adds for delegated events.
    """
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"ETRecord {p} does not exist; pass the .etrecord written beside the .pte, or omit it")
    try:
        from executorch.devtools import parse_etrecord

        record = parse_etrecord(str(p))
    except Exception as exc:
        raise TraceError(
            f"{p} is not a readable ETRecord ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            "re-export the model to regenerate it, or analyze without --etrecord"
        ) from None
    programs = [getattr(record, "edge_dialect_program", None), getattr(record, "exported_program", None)]
    names: list[str] = []
    for program in programs:
        module = getattr(program, "graph_module", None)
        if module is None:
            continue
        for _, sub in module.named_modules():
            backend_id = getattr(sub, "backend_id", None)
            if backend_id:
                names.append(str(backend_id))
    if not names:
        return None
    name = names[0]
    return "XNNPACK" if name.lower().startswith("xnnpack") else name.removesuffix("Backend")
