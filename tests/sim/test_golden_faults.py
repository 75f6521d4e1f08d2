"""Golden simulator: every fault code with its PC, token queues and deadlock, DMA window protection,
and the property that a faulting instruction changes no state."""

from __future__ import annotations

import numpy as np
import pytest
from golden_harness import TINY, Harness, same_state
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolica.asm import asm
from systolica.config import preset
from systolica.faults import Fault
from systolica.isa import encode, make
from systolica.program import ConfigMismatch, Program
from systolica.sim.faults import (
    DeviceTimeoutError,
    DmaAlignError,
    DmaWindowError,
    IllegalFieldError,
    IllegalOpcodeError,
    ProgramOverrunError,
    SimFault,
    SramRangeError,
    TokenDeadlockError,
)
from systolica.sim.golden import GoldenSim

# (program, fault, pc, exception, words of the message)
FAULTS = [
    ("NOP engine=LOAD\n.word 0x1e\nFINISH", Fault.ILLEGAL_OPCODE, 1, IllegalOpcodeError, ["0x1e"]),
    ("NOP\nLOAD buf=3 rows=1 lines=1\nFINISH", Fault.ILLEGAL_FIELD, 1, IllegalFieldError, ["LOAD.buf=3"]),
    ("NOP engine=3\nFINISH", Fault.ILLEGAL_FIELD, 0, IllegalFieldError, ["NOP.engine=3"]),
    ("NOP\nNOP\nLOAD @pop_prev\nFINISH", Fault.ILLEGAL_FIELD, 2, IllegalFieldError, ["@pop_prev", "load"]),
    ("LOAD @push_prev\nFINISH", Fault.ILLEGAL_FIELD, 0, IllegalFieldError, ["@push_prev"]),
    ("STORE @pop_next\nFINISH", Fault.ILLEGAL_FIELD, 0, IllegalFieldError, ["@pop_next", "store"]),
    ("NOP engine=STORE @push_next\nFINISH", Fault.ILLEGAL_FIELD, 0, IllegalFieldError, ["@push_next"]),
    ("ATTN t=5 page_log2=2\nFINISH", Fault.ILLEGAL_FIELD, 0, IllegalFieldError, ["ATTN.t=5"]),
    (f"NOP\n.word {encode(make('GEMM', m=1)) | 1 << 120:#x}\nFINISH", Fault.ILLEGAL_FIELD, 1, IllegalFieldError,
     ["GEMM dst=0", "reserved bits"]),
    ("NOP\nLOAD buf=SPAD dram=0xfffc rows=1 lines=2\nFINISH", Fault.DMA_WINDOW, 1, DmaWindowError,
     ["LOAD.dram=0xfffc", "window"]),
    ("STORE buf=VBUF dram=0 rows=3 lines=1 stride=0x8000\nFINISH", Fault.DMA_WINDOW, 0, DmaWindowError, ["STORE"]),
    ("LOAD buf=ACC dram=8 rows=1 lines=1\nFINISH", Fault.DMA_ALIGN, 0, DmaAlignError, ["LOAD.dram=0x8", "16-byte"]),
    ("LOAD buf=SPAD dram=0 stride=6 rows=2 lines=1\nFINISH", Fault.DMA_ALIGN, 0, DmaAlignError, ["stride=0x6"]),
    ("NOP\nNOP\nGEMM dst=510 m=1 k=1 n=4\nFINISH", Fault.SRAM_RANGE, 2, SramRangeError, ["GEMM.dst=510", "acc"]),
    ("LOAD buf=VBUF sram=1020 rows=5 lines=1\nFINISH", Fault.SRAM_RANGE, 0, SramRangeError, ["LOAD.sram=1020"]),
    ("ATTN kv=4001 nq=1 hd=2 t=1 page_log2=4\nFINISH", Fault.SRAM_RANGE, 0, SramRangeError, ["ATTN.kv=4001"]),
    ("NOP\nGEMM @pop_prev\nFINISH", Fault.TOKEN_DEADLOCK, 1, TokenDeadlockError, ["GEMM", "compute"]),
    ("NOP engine=STORE @pop_prev\nNOP engine=LOAD @pop_next\nFINISH", Fault.TOKEN_DEADLOCK, 0, TokenDeadlockError,
     ["STORE"]),
    ("NOP\nNOP engine=LOAD", Fault.PROGRAM_OVERRUN, 2, ProgramOverrunError, ["FINISH"]),
]


@pytest.mark.parametrize("text, fault, pc, exc, words", FAULTS, ids=[f"{f[1].name}-{i}" for i, f in enumerate(FAULTS)])
def test_every_fault_with_its_pc(text, fault, pc, exc, words):
    h = Harness()
    with pytest.raises(exc) as ei:
        h.run(text)
    e = ei.value
    assert isinstance(e, SimFault) and e.fault == fault and e.pc == pc
    for w in words:
        assert w in str(e)
    res = Harness().run(text, raise_on_fault=False)  # the CSR view: status, code, pc
    assert (res.status, res.pc, res.ok) == (fault, pc, False)
    assert res.to_dict()["code"] == int(fault)


def test_timeout_after_max_instructions():
    h = Harness()
    with pytest.raises(DeviceTimeoutError) as ei:
        h.run("NOP\nNOP\nNOP\nFINISH", max_instructions=2)
    assert ei.value.fault == Fault.TIMEOUT and ei.value.pc == 2
    assert h.sim.counters.instructions == 2


def test_decode_fault_drains_earlier_instructions():
    h = Harness()
    h.put(0, np.arange(16, dtype=np.int32))
    res = h.run("LOAD buf=VBUF sram=0 dram=0 rows=1 lines=1\n.word 0x1e\nFINISH", raise_on_fault=False)
    assert res.status == Fault.ILLEGAL_OPCODE and res.pc == 1
    assert list(h.sim.vbuf[0]) == [0, 1, 2, 3]  # the LOAD before the bad word ran


def test_tokens_order_producer_and_consumer():
    """The store must wait for the compute's token: without it the STORE would write zeros."""
    h = Harness()
    h.put(0, np.array([5, 6, 7, 8, 1, 1, 1, 1], np.int32))
    res = h.run("""
        LOAD buf=VBUF sram=0 dram=0 rows=2 lines=1 stride=16 @push_next
        STORE buf=VBUF sram=8 dram=0x100 rows=1 lines=1 @pop_prev
        ADD dst=8 a=0 b=1 rows=1 lines=1 @pop_prev @push_next
        FINISH""")
    assert res.ok and res.counters.per_engine == {"LOAD": 1, "STORE": 1, "COMPUTE": 2}
    assert list(h.get(0x100, np.int32, 4)) == [6, 7, 8, 9]


def test_queue_depth_blocks_then_drains():
    """More pushes than the queue holds: the producer waits for the consumer, no deadlock."""
    n = TINY.queue_depth + 3
    text = "\n".join(["NOP engine=LOAD @push_next"] * n + ["NOP engine=COMPUTE @pop_prev"] * n + ["FINISH"])
    res = Harness().run(text)
    assert res.ok and res.counters.instructions == 2 * n + 1 and res.tokens_left == (0, 0, 0, 0)


def test_full_instruction_queue_stalls_fetch_into_deadlock():
    """cmd_depth+1 loads wait on compute tokens; the compute that would send them is never fetched."""
    k = TINY.cmd_depth
    ok = "\n".join(["NOP engine=LOAD @pop_next"] * k + ["NOP engine=COMPUTE @push_prev"] * k + ["FINISH"])
    assert Harness(TINY.replace(queue_depth=TINY.cmd_depth)).run(ok).ok
    bad = "\n".join(["NOP engine=LOAD @pop_next"] * (k + 1) + ["NOP engine=COMPUTE @push_prev"] * (k + 1) + ["FINISH"])
    with pytest.raises(TokenDeadlockError) as ei:
        Harness(TINY.replace(queue_depth=TINY.cmd_depth)).run(bad)
    assert ei.value.pc == 0


def test_leftover_tokens_are_reported():
    res = Harness().run("NOP engine=LOAD @push_next\nFINISH @push_next")
    assert res.ok and res.tokens_left == (1, 0, 1, 0) and res.pc == 1


def test_dma_window_protects_outside_memory():
    base, size = 0x1000, 0x1000
    h = Harness(dram_bytes=0x3000, window_base=base, window_size=size)
    h.sim.dram[:] = 0xAB
    h.sim.vbuf[:4] = 7
    before = h.snapshot()
    for text in ("STORE buf=VBUF sram=0 dram=0xff0 rows=2 lines=1 stride=16",  # row 1 crosses the end
                 "STORE buf=VBUF sram=0 dram=0x1000 rows=1 lines=1",  # starts at the end
                 "STORE buf=SPAD sram=0 dram=0 rows=2 lines=1 stride=0xfffffffc",  # huge stride, no wrap-around
                 "LOAD buf=VBUF sram=0 dram=0xffffff00 rows=1 lines=1"):
        with pytest.raises(DmaWindowError):
            h.run(text + "\nFINISH")
        assert same_state(before, h.snapshot())
    h.run("STORE buf=VBUF sram=0 dram=0xff0 rows=1 lines=1\nFINISH")  # the last line of the window is fine
    assert (h.sim.dram[base + 0xff0:base + size].view(np.int32) == 7).all()
    assert (h.sim.dram[:base] == 0xAB).all() and (h.sim.dram[base + size:] == 0xAB).all()
    assert (h.sim.dram[base:base + 0xff0] == 0xAB).all()


def test_program_config_must_match():
    prog = Program.from_instrs([make("FINISH")], preset("default"))
    with pytest.raises(ConfigMismatch, match="recompile"):
        GoldenSim(TINY, 1 << 16).run(prog)
    assert GoldenSim(TINY, 1 << 16).run(Program(prog.words, TINY)).ok


def test_constructor_checks():
    with pytest.raises(TypeError, match="uint8"):
        GoldenSim(TINY, np.zeros(16, np.int32))
    with pytest.raises(ValueError, match="window"):
        GoldenSim(TINY, np.zeros(1 << 16, np.uint8), window_base=0x100, window_size=1 << 16)
    sim = GoldenSim(TINY, 1 << 16)
    assert sim.spad.shape == (TINY.spad_lines, TINY.cols) and sim.acc.dtype == np.int32


# ---------------------------------------------------------------- state unchanged by a faulting instruction
_GOOD = [
    "LOAD buf=VBUF sram={a} dram={d} rows=2 lines=1 stride=16",
    "LOAD buf=SPAD sram={a} dram={d} rows=2 lines=2 stride=8",
    "ADD dst={a} a={b} b={a} rows=2 lines=1",
    "GEMM dst={a} a={b} w={a} m=1 k=1 n=1 acc=1",
    "STORE buf=VBUF sram={a} dram={d} rows=1 lines=2",
    "STORE buf=ACC sram={b} dram={d} rows=2 lines=1 stride=32",
]
_BAD = [
    "LOAD buf=VBUF sram={a} dram=0xfff0 rows=2 lines=1 stride=16",  # DMA_WINDOW
    "STORE buf=SPAD sram={a} dram=0xfffc rows=1 lines=2",  # DMA_WINDOW
    "STORE buf=ACC sram={a} dram=4 rows=1 lines=1",  # DMA_ALIGN
    "ADD dst=1023 a={a} b={b} rows=2 lines=1",  # SRAM_RANGE (dst)
    "GEMM dst={a} a={b} w=4090 m=1 k=2 n=1 acc=1",  # SRAM_RANGE (w)
    "QUANT dst={a} src={b} exps=4095 rows=2 lines=1",  # SRAM_RANGE (exps)
    "LOAD buf=SPAD sram=4095 dram={d} rows=1 lines=2",  # SRAM_RANGE
    "NOP engine=3",  # ILLEGAL_FIELD
    ".word 0x1e",  # ILLEGAL_OPCODE
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(_GOOD), st.integers(0, 60), st.integers(0, 60), st.integers(0, 200)),
                max_size=6),
       st.sampled_from(_BAD), st.integers(0, 60), st.integers(0, 60), st.binary(min_size=256, max_size=256),
       st.lists(st.tuples(st.sampled_from(_GOOD), st.integers(0, 60), st.integers(0, 60), st.integers(0, 200)),
                max_size=3))
def test_faults_are_precise(prefix, bad, a, b, seed_bytes, tail):
    """State after a fault == state after running only the instructions before it (none after it runs,
    whichever engine it is on)."""
    before = [g.format(a=x, b=y, d=16 * z) for g, x, y, z in prefix]
    after = [g.format(a=x, b=y, d=16 * z) for g, x, y, z in tail]
    ref, dut = Harness(), Harness()
    for h in (ref, dut):
        h.sim.window[:4096] = np.resize(np.frombuffer(seed_bytes, np.uint8), 4096)
    ref.run("\n".join(before + ["FINISH"]))
    res = dut.run("\n".join(before + [bad.format(a=a, b=b, d=16), *after, "FINISH"]), raise_on_fault=False)
    assert res.status not in (Fault.NONE, Fault.TIMEOUT, Fault.TOKEN_DEADLOCK) and res.pc == len(before)
    assert res.counters.instructions == len(before)
    assert same_state(ref.snapshot(), dut.snapshot())


def test_fault_stops_later_instructions_on_other_engines():
    """A compute fault at pc 1: the LOAD after it (another engine, free to run ahead) must not run."""
    h = Harness()
    h.put(0, np.full(4, 9, np.int32))
    res = h.run("NOP engine=LOAD\nADD dst=1023 rows=2 lines=1\nLOAD buf=VBUF sram=0 dram=0 rows=1 lines=1\nFINISH",
                raise_on_fault=False)
    assert res.status == Fault.SRAM_RANGE and res.pc == 1
    assert not h.sim.vbuf.any() and res.counters.per_op == {"NOP": 1}


def test_asm_words_and_program_run_alike():
    text = "NOP engine=LOAD\nNOP engine=STORE\nFINISH"
    r1 = Harness().run(text)
    r2 = GoldenSim(TINY, 1 << 16).run(Program(asm(text), TINY))
    assert r1.counters.to_dict() == r2.counters.to_dict() and r1.pc == r2.pc == 2


def test_attn_head_longer_than_the_config_takes():
    """``attn_head_lines`` bounds ATTN's and ATTN_OUT's ``hd``: one line more is ILLEGAL_FIELD, naming the limit,
    and changes no state; the limit itself runs.  The default config takes the ISA's whole field (63)."""
    cfg = TINY.replace(name="tiny_hd2", attn_head_lines=2)
    assert TINY.attn_max_lines == 63 and cfg.attn_max_lines == 2
    assert cfg.hash_hex() != TINY.hash_hex() == TINY.replace(attn_head_lines=63).hash_hex()
    for text in ("NOP\nATTN q=0 qexp=8 kv=16 state=0 nq=1 hd=3 t=0 page_log2=0\nFINISH",
                 "NOP\nATTN_OUT dst=64 state=0 nq=1 hd=3\nFINISH"):
        h = Harness(cfg)
        before = h.sim.vbuf.copy()
        with pytest.raises(IllegalFieldError) as ei:
            h.run(text)
        assert ei.value.pc == 1 and "hd=3" in str(ei.value) and "attn_head_lines" in str(ei.value), str(ei.value)
        assert np.array_equal(h.sim.vbuf, before)
        assert Harness(cfg).run(text.replace("hd=3", "hd=2"), raise_on_fault=False).status == Fault.NONE
        assert Harness().run(text, raise_on_fault=False).status == Fault.NONE
