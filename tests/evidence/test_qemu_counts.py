"""The instruction counter: QEMU's ``-d in_asm,exec,nochain`` log -> instructions per counted method execution.

Every log and disassembly line here is cut from real logs of pytest-sme2's runner under qemu-aarch64 11.1.3
(toy_cnn fp32/XNNPACK, ``-cpu max`` and ``-cpu max,sme=off``); the small logs are those lines put together in the
order QEMU writes them (a block's ``in_asm`` lines, then a ``Trace`` line per execution), so each count below is
the number of instruction lines times the executions, counted by hand.
"""

from __future__ import annotations

import io
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_sme2.errors import TraceError
from pytest_sme2.evidence import qemu_counts
from pytest_sme2.evidence.elf import ElfFile, ElfSymbol, LoadSegment
from pytest_sme2.evidence.instructions import INSTRUCTION_KINDS
from pytest_sme2.evidence.qemu_counts import BlockCounter, counts_of, instruction_kind, undecoded_kind

pytestmark = pytest.mark.fast

MAIN_A = """----------------
IN: main
0x7fdb0c2f6428:  aa0003f3  mov      x19, x0
0x7fdb0c2f642c:  9400055a  bl       #0x7fdb0c2f7994

"""
BEGIN = """----------------
IN: sme2_runner_count_begin
0x7fdb0c2f7994:  d65f03c0  ret

"""
MAIN_B = """----------------
IN: main
0x7fdb0c2f6430:  395703e0  ldrb     w0, [sp, #0x5c0]
0x7fdb0c2f6434:  34003360  cbz      w0, #0x7fdb0c2f6aa0

"""
KERNEL = """----------------
IN:
0x7fdb01706954:  c00800ff  zero     {za}
0x7fdb01706964:  808c02c0  fmopa    za0.s, p0/m, p0/m, z22.s, z12.s
0x7fdb01703140:  a540a090  ld1w     {z16.s}, p0/z, [x4]
0x7fdb0170313c:  04b0e3f4  incw     x20

"""
END = """----------------
IN: sme2_runner_count_end
0x7fdb0c2f79a0:  d65f03c0  ret

"""
T_MAIN_A = "Trace 0: 0x7fdb02a7ff00 [80081009331/00007fdb0c2f6428/00000001/00008200] main\n"
T_BEGIN = "Trace 0: 0x7fdb02a80040 [80081009331/00007fdb0c2f7994/00000001/00008200] sme2_runner_count_begin\n"
T_MAIN_B = "Trace 0: 0x7fdb02a80180 [80081009331/00007fdb0c2f6430/00000001/00008200] main\n"
T_KERNEL = "Trace 0: 0x7fdb02a80300 [80081009331/00007fdb01706954/00000001/00008200] \n"
T_END = "Trace 0: 0x7fdb02a80440 [80081009331/00007fdb0c2f79a0/00000001/00008200] sme2_runner_count_end\n"


#: The ways a log reaches the counter: line by line (``feed``), or read from a stream (``feed_stream``: runs of Trace
#: lines in bulk, the rest line by line) in its usual chunks or in chunks of 7 bytes, which cut nearly every line.
FEEDS = ("lines", "stream", "stream cut every 7 bytes")


def feed(text: str, how: str, monkeypatch: pytest.MonkeyPatch) -> BlockCounter:
    counter = BlockCounter("test log")
    if how == "lines":
        counter.feed(line.encode() for line in text.splitlines(keepends=True))
    else:
        if how == "stream cut every 7 bytes":
            monkeypatch.setattr(qemu_counts, "CHUNK", 7)
        counter.feed_stream(io.BytesIO(text.encode()))
    assert counter.lines == len(text.splitlines())
    return counter


Count = Callable[[str], BlockCounter]


@pytest.fixture(params=FEEDS)
def count(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Count:
    """Count a log, one way of :data:`FEEDS` per test."""
    return lambda text: feed(text, request.param, monkeypatch)


def executed(counter: BlockCounter, execution: int = -1) -> list[tuple[int, int]]:
    """(instructions in the block, times executed) per block of one counted execution."""
    blocks = counter.executions[execution].blocks
    return sorted((sum(1 for ln in counter.blocks[b] if ln.startswith(b"0x")), n) for b, n in blocks.items())


# One execution: main's block before the marker is start-up, main's block after it and the kernel (3 times) count.
ONE = (MAIN_A + T_MAIN_A + BEGIN + T_BEGIN + MAIN_B + T_MAIN_B + KERNEL + T_KERNEL + T_KERNEL + T_KERNEL
       + END + T_END + T_MAIN_A)


def test_only_blocks_between_the_markers_count_each_time_they_execute(count: Count) -> None:
    counter = count(ONE)
    assert len(counter.executions) == 1
    assert executed(counter) == [(2, 1), (4, 3)]  # main's 2 after the marker once, the kernel's 4 three times


def test_a_second_execution_counts_blocks_translated_in_the_first(count: Count) -> None:
    counter = count(ONE + T_BEGIN + T_KERNEL + T_END)
    assert len(counter.executions) == 2
    assert executed(counter, 1) == [(4, 1)]


def test_a_code_pointer_reused_after_a_flush_counts_its_new_translation(count: Count) -> None:
    # QEMU flushed its code cache: main's block after the marker is translated again, to the kernel's old pointer.
    reused = MAIN_B + T_KERNEL.replace("00007fdb01706954", "00007fdb0c2f6430")
    counter = count(ONE + T_BEGIN + reused + T_END)
    assert executed(counter, 1) == [(2, 1)]


def test_a_code_pointer_reused_inside_an_execution_counts_each_translation_its_own_executions(count: Count) -> None:
    # the kernel runs twice, then QEMU flushes its code cache and puts main's block at the kernel's old pointer
    reused = MAIN_B + T_KERNEL.replace("00007fdb01706954", "00007fdb0c2f6430")
    counter = count(ONE.replace(T_KERNEL + T_KERNEL + T_KERNEL, T_KERNEL + T_KERNEL + reused + reused[-len(T_KERNEL):]))
    # main's block before the flush once, the kernel twice, main's block translated again twice
    assert executed(counter) == [(2, 1), (2, 2), (4, 2)]


def test_a_block_translated_again_at_its_own_pointer_counts_each_translation_its_own_executions(count: Count) -> None:
    # the same guest code translated again to the same host pointer: the same Trace line, another block
    counter = count(ONE.replace(T_KERNEL + T_KERNEL + T_KERNEL, T_KERNEL + T_KERNEL + KERNEL + T_KERNEL))
    assert executed(counter) == [(2, 1), (4, 1), (4, 2)]
    assert len(counter.blocks) == 6


def test_a_log_cut_inside_an_execution_counts_up_to_its_last_line(count: Count) -> None:
    counter = count(ONE.split(END)[0].rstrip("\n"))  # no end marker, no newline after the last Trace line
    assert executed(counter) == [(2, 1), (4, 3)]


def test_a_block_logged_then_not_executed_is_taken_back(count: Count) -> None:
    stopped = "Stopped execution of TB chain before 0x7fdb02a80300 [00007fdb01706954] \n"
    counter = count(ONE.replace(T_KERNEL + T_KERNEL + T_KERNEL, T_KERNEL + T_KERNEL + stopped))
    assert executed(counter) == [(2, 1), (4, 1)]


def test_another_thread_inside_a_counted_execution_is_refused(count: Count) -> None:
    with pytest.raises(TraceError, match="second guest thread"):
        count(ONE.replace(T_KERNEL, T_KERNEL.replace("Trace 0:", "Trace 1:"), 1))


def test_code_whose_translation_the_log_lacks_is_refused(count: Count) -> None:
    with pytest.raises(TraceError, match="whose translation the log does not show"):
        count(ONE.replace(KERNEL, "", 1))


def test_another_threads_lines_between_a_translation_and_its_execution_do_not_lose_it(count: Count) -> None:
    # start-up on two threads: the kernel is translated by one while the other's blocks are logged
    other = "Trace 1: 0x7fdb02a7ff00 [80081009331/00007fdb0c2f6428/00000001/00008200] main\n"
    counter = count(KERNEL + other + T_KERNEL + MAIN_A + T_MAIN_A + BEGIN + T_BEGIN + T_KERNEL + END + T_END)
    assert executed(counter) == [(4, 1)]


@pytest.mark.parametrize(("line", "kind"), [
    ("c00800ff  zero     {za}", "sme"),
    ("808c02c0  fmopa    za0.s, p0/m, p0/m, z22.s, z12.s", "sme"),
    ("e0960f60  ld1w     {za0h.s[w12, 0]}, p3/z, [x27, x22, lsl #2]", "sme"),  # an SME load is SME
    ("e0bfa060  st1w     {za0v.s[w13, 0]}, p0, [x3]", "sme"),
    ("d503477f  smstart  ", "sme"),
    ("a540a090  ld1w     {z16.s}, p0/z, [x4]", "load_store"),
    ("3dc0f000  ldr      q0, [x0, #0x3c0]", "load_store"),
    ("4c407020  ld1      {v0.16b}, [x1]", "load_store"),
    ("ad000060  stp      q0, q0, [x3]", "load_store"),
    ("04b0e3f4  incw     x20", "sve"),
    ("25a017e0  whilelt  p0.s, xzr, x0", "sve"),
    ("25306163  psel     p3, p8, p11.s[w12, 0]", "sve"),
    ("4f801214  fmla     v20.4s, v16.4s, v0.s[0]", "neon"),
    ("4e010c20  dup      v0.16b, w1", "neon"),
    ("aa0003f3  mov      x19, x0", "scalar"),
    ("34003360  cbz      w0, #0x7fdb0c2f6aa0", "scalar"),
    # QEMU 11.1's disassembler does not know these SME2 forms: the encoding group places them
    ("a040c764  .byte    0x64, 0xc7, 0x40, 0xa0", "load_store"),  # SME2 multi-vector ld1w {z..}, pn
    ("04bf5820  .byte    0x20, 0x58, 0xbf, 0x04", "sme"),  # rdsvl x0, #1
    ("25207811  .byte    0x11, 0x78, 0x20, 0x25", "sve"),  # ptrue pn (predicate-as-counter)
])
def test_every_instruction_is_one_kind(line, kind):
    word, rest = line.split(None, 1)
    mnemonic, _, operands = rest.partition(" ")
    assert instruction_kind(mnemonic, operands.strip(), int(word, 16)) == kind


def test_a_word_outside_the_sme_and_sve_groups_stays_undecoded():
    assert undecoded_kind(0x0B000000) == "undecoded"  # a data-processing group word QEMU would have named


def _library(path: str, vaddr: int, functions: tuple[ElfSymbol, ...]) -> ElfFile:
    return ElfFile(path, "aarch64", (LoadSegment(0, vaddr, 1 << 24, 1 << 24, True),), functions)


def test_counts_split_by_kind_library_and_exported_function(count: Count) -> None:
    xnnpack = "/sdk/lib/libexecutorch_backend_xnnpack.so"
    runner = "/cache/linux-aarch64/key/sme2_runner"
    maps = [f"7fdb01700000-7fdb01800000 r-xp 00000000 fe:00 1 {xnnpack}",
            f"7fdb0c2f0000-7fdb0c300000 r-xp 00000000 fe:00 2 {runner}"]
    sme2 = "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa"
    libraries = {xnnpack: _library(xnnpack, 0, (ElfSymbol(sme2, 0x6950, 0x20),)), runner: _library(runner, 0, ())}
    counts = counts_of(count(ONE), maps, libraries, cpu="max", qemu_version="11.1.3")
    assert counts.total == 2 + 4 * 3
    assert sum(counts.by_kind.values()) == counts.total and set(counts.by_kind) == set(INSTRUCTION_KINDS)
    assert counts.by_kind == {"sme": 6, "sve": 3, "neon": 0, "load_store": 4, "scalar": 1, "undecoded": 0}
    assert counts.by_library == {"libexecutorch_backend_xnnpack.so": 12, "sme2_runner": 2}
    # zero and fmopa lie in the exported SME2 kernel; the ld1w and incw beside them in no exported function
    assert counts.by_symbol == {f"libexecutorch_backend_xnnpack.so!{sme2}": 6}
    assert counts.sme2_symbols == (f"libexecutorch_backend_xnnpack.so!{sme2}",)
    assert counts.by_mnemonic == {"fmopa za": 3}
    assert (counts.cpu, counts.qemu_version, counts.executions) == ("max", "11.1.3", 1)


def test_no_counted_execution_says_why(count: Count) -> None:
    with pytest.raises(TraceError, match="no block of sme2_runner_count_begin executed"):
        counts_of(count(MAIN_A + T_MAIN_A), ["7fdb0c2f0000-7fdb0c300000 r-xp 00000000 fe:00 2 /x/sme2_runner"], {})


def test_no_code_map_says_why(count: Count) -> None:
    with pytest.raises(TraceError, match="code-map"):
        counts_of(count(ONE), ["sme2_runner map: something else"], {})


def test_reading_a_stream_ticks_while_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from pytest_sme2.evidence import qemu_counts

    monkeypatch.setattr(qemu_counts, "TICK_S", 0.0)
    ticks: list[int] = []
    counter = BlockCounter("test log")
    counter.feed_stream(io.BytesIO(ONE.encode()), tick=lambda: ticks.append(1))
    assert executed(counter) == [(2, 1), (4, 3)] and ticks == [1]


def test_reading_a_pipe_raises_its_size_and_lets_it_fill_after_a_short_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """QEMU writes its log a line at a time: a reader waiting on the pipe would be woken for each line."""
    waits: list[float] = []
    monkeypatch.setattr(qemu_counts.time, "sleep", waits.append)
    read_end, write_end = os.pipe()
    text = (ONE + T_BEGIN + T_KERNEL + T_END).encode()

    def qemu_writing() -> None:
        with os.fdopen(write_end, "wb", buffering=0) as out:
            for line in io.BytesIO(text):
                out.write(line)

    writer = threading.Thread(target=qemu_writing)
    counter = BlockCounter("test log")
    with os.fdopen(read_end, "rb", buffering=1 << 20) as log:
        writer.start()
        counter.feed_stream(log)
        if hasattr(qemu_counts.fcntl, "F_GETPIPE_SZ"):
            assert qemu_counts.fcntl.fcntl(log.fileno(), qemu_counts.fcntl.F_GETPIPE_SZ) == qemu_counts.PIPE_SIZE
    writer.join()
    assert waits and set(waits) == {qemu_counts.PIPE_WAIT_S}
    assert executed(counter, 0) == [(2, 1), (4, 3)] and executed(counter, 1) == [(4, 1)]


def test_a_pipe_the_system_will_not_raise_is_read_as_the_log_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(qemu_counts.time, "sleep", waits.append)
    if hasattr(qemu_counts.fcntl, "F_SETPIPE_SZ"):
        def refuse(fd: int, cmd: int, arg: int = 0) -> int:
            raise PermissionError(1, "Operation not permitted")  # over /proc/sys/fs/pipe-user-pages-soft

        monkeypatch.setattr(qemu_counts.fcntl, "fcntl", refuse)
    read_end, write_end = os.pipe()
    os.write(write_end, ONE.encode())
    os.close(write_end)
    counter = BlockCounter("test log")
    with os.fdopen(read_end, "rb") as log:
        counter.feed_stream(log)
    assert waits == [] and executed(counter) == [(2, 1), (4, 3)]


def test_reading_a_file_never_waits(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    waits: list[float] = []
    monkeypatch.setattr(qemu_counts.time, "sleep", waits.append)
    log = tmp_path / "qemu.log"
    log.write_text(ONE)
    counter = BlockCounter("test log")
    with log.open("rb") as stream:
        counter.feed_stream(stream)
    assert waits == [] and executed(counter) == [(2, 1), (4, 3)]


def _random_log(rng: random.Random) -> tuple[str, list[dict[int, int]]]:
    """A log of start-up and 3 counted executions, with what it executed by construction: blocks translated (and
    translated again, to pointers in use) as they first run, loops, other threads' lines outside the executions, and
    executions taken back by a ``Stopped execution`` line right after they were logged."""
    def trace(ptr: str, pc: int, thread: int = 0, symbol: str = "") -> str:
        return f"Trace {thread}: {ptr} [80081009331/{pc:016x}/00000001/00008200] {symbol}\n"

    def translation(pc: int, size: int) -> str:
        return ("----------------\nIN: \n" + "".join(f"0x{pc + 4 * i:x}:  d503201f  nop\n" for i in range(size))
                + "\n")

    begin, end = 0x7FDB0C2F7994, 0x7FDB0C2F79A0
    out = [translation(begin, 1), trace("0x7fdb02a80040", begin, symbol="sme2_runner_count_begin")]
    bound: dict[str, int] = {}  # host pointer -> block (the counter numbers blocks in translation order)
    lines: dict[str, str] = {}  # host pointer -> its Trace line
    blocks = 1
    expected: list[dict[int, int]] = []
    for execution in range(3):
        if execution:
            out.append(trace("0x7fdb02a80040", begin, symbol="sme2_runner_count_begin"))
        counts: dict[int, int] = {}
        for _ in range(rng.randrange(5, 40)):
            ptr = f"0x7fdb02a8{rng.randrange(1, 8):x}00"
            pc = 0x7FDB01706000 + 0x40 * rng.randrange(12)
            if ptr not in bound or rng.random() < 0.15:
                out.append(translation(pc, rng.randrange(1, 5)))
                bound[ptr], blocks, lines[ptr] = blocks, blocks + 1, trace(ptr, pc)
                out.append(lines[ptr])
                counts[bound[ptr]] = counts.get(bound[ptr], 0) + 1
            line = lines[ptr]
            times = rng.choice((1, 2, 3, 50))
            out.append(line * times)
            counts[bound[ptr]] = counts.get(bound[ptr], 0) + times
            if rng.random() < 0.1:
                out.append(f"Stopped execution of TB chain before {ptr} [{line.split('/')[1]}] \n")
                counts[bound[ptr]] -= 1
        if execution == 0:
            out.append(translation(end, 1))
            blocks += 1
        out.append(trace("0x7fdb02a80440", end, symbol="sme2_runner_count_end"))
        out.append(trace("0x7fdb02a7ff00", 0x7FDB0C2F6428, thread=1, symbol="main") * rng.randrange(1, 30))
        expected.append(counts)
    return "".join(out), expected


@pytest.mark.parametrize("seed", range(40))
def test_random_logs_count_what_they_executed_read_any_way(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    text, expected = _random_log(rng)
    monkeypatch.setattr(qemu_counts, "CHUNK", rng.choice((7, 64, 500, 1 << 20)))
    for how in FEEDS:
        counter = feed(text, how, monkeypatch)
        assert [{b: n for b, n in e.blocks.items() if n} for e in counter.executions] == [
            {b: n for b, n in e.items() if n} for e in expected], how
