"""The instruction counter: QEMU's ``-d in_asm,exec,nochain`` log -> instructions per counted method execution.

Every log and disassembly line here is cut from real logs of pytest-sme2's runner under qemu-aarch64 11.1.3
(toy_cnn fp32/XNNPACK, ``-cpu max`` and ``-cpu max,sme=off``); the small logs are those lines put together in the
order QEMU writes them (a block's ``in_asm`` lines, then a ``Trace`` line per execution), so each count below is
the number of instruction lines times the executions, counted by hand.
"""

from __future__ import annotations

import pytest

from pytest_sme2.errors import TraceError
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


def count(text: str) -> BlockCounter:
    counter = BlockCounter("test log")
    counter.feed(line.encode() for line in text.splitlines(keepends=True))
    return counter


def executed(counter: BlockCounter, execution: int = -1) -> list[tuple[int, int]]:
    """(instructions in the block, times executed) per block of one counted execution."""
    blocks = counter.executions[execution].blocks
    return sorted((sum(1 for ln in counter.blocks[b] if ln.startswith(b"0x")), n) for b, n in blocks.items())


# One execution: main's block before the marker is start-up, main's block after it and the kernel (3 times) count.
ONE = (MAIN_A + T_MAIN_A + BEGIN + T_BEGIN + MAIN_B + T_MAIN_B + KERNEL + T_KERNEL + T_KERNEL + T_KERNEL
       + END + T_END + T_MAIN_A)


def test_only_blocks_between_the_markers_count_each_time_they_execute():
    counter = count(ONE)
    assert len(counter.executions) == 1
    assert executed(counter) == [(2, 1), (4, 3)]  # main's 2 after the marker once, the kernel's 4 three times


def test_a_second_execution_counts_blocks_translated_in_the_first():
    counter = count(ONE + T_BEGIN + T_KERNEL + T_END)
    assert len(counter.executions) == 2
    assert executed(counter, 1) == [(4, 1)]


def test_a_code_pointer_reused_after_a_flush_counts_its_new_translation():
    # QEMU flushed its code cache: main's block after the marker is translated again, to the kernel's old pointer.
    reused = MAIN_B + T_KERNEL.replace("00007fdb01706954", "00007fdb0c2f6430")
    counter = count(ONE + T_BEGIN + reused + T_END)
    assert executed(counter, 1) == [(2, 1)]


def test_a_block_logged_then_not_executed_is_taken_back():
    stopped = "Stopped execution of TB chain before 0x7fdb02a80300 [00007fdb01706954] \n"
    counter = count(ONE.replace(T_KERNEL + T_KERNEL + T_KERNEL, T_KERNEL + T_KERNEL + stopped))
    assert executed(counter) == [(2, 1), (4, 1)]


def test_another_thread_inside_a_counted_execution_is_refused():
    with pytest.raises(TraceError, match="second guest thread"):
        count(ONE.replace(T_KERNEL, T_KERNEL.replace("Trace 0:", "Trace 1:"), 1))


def test_code_whose_translation_the_log_lacks_is_refused():
    with pytest.raises(TraceError, match="whose translation the log does not show"):
        count(ONE.replace(KERNEL, "", 1))


def test_another_threads_lines_between_a_translation_and_its_execution_do_not_lose_it():
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


def test_counts_split_by_kind_library_and_exported_function():
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


def test_no_counted_execution_says_why():
    with pytest.raises(TraceError, match="no block of sme2_runner_count_begin executed"):
        counts_of(count(MAIN_A + T_MAIN_A), ["7fdb0c2f0000-7fdb0c300000 r-xp 00000000 fe:00 2 /x/sme2_runner"], {})


def test_no_code_map_says_why():
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
