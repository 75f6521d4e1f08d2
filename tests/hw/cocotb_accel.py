"""cocotb tests of the accelerator top level against the golden simulator (run by test_accel_rtl.py).

Parameters arrive as JSON in $SYSTOLICA_TB; results (counts, mismatches, DMA utilization)
go to $SYSTOLICA_TB_METRICS as JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from systolica.config import AccelConfig
from systolica.csr import ID_MAGIC, STATUS_BUSY
from systolica.faults import Fault
from systolica.isa import encode, make
from systolica.sim.accel_programs import (
    FAULT_KINDS,
    concurrent_program,
    load_store_program,
    random_program,
    weight_stream_program,
)
from systolica.sim.golden import GoldenSim
from systolica.sim.tb_accel import AccelTB

MEM = 1 << 18  # DRAM model: 256 KiB of physical addresses
WIN_BASE = 0x1_0000  # the window the accelerator is given; everything else must stay untouched
WIN_SIZE = 0x2_0000
DATA_LO, DATA_HI = 0x1000, 0x9000  # DMA data region inside the window (the program sits below DATA_LO)


def params() -> dict:
    return json.loads(os.environ.get("SYSTOLICA_TB", "{}"))


def write_metrics(new: dict) -> None:
    path = os.environ.get("SYSTOLICA_TB_METRICS")
    if not path:
        return
    old = json.loads(Path(path).read_text()) if os.path.exists(path) else {}
    old.update(new)
    with open(path, "w") as f:
        json.dump(old, f)


async def make_tb(dut) -> tuple[AccelTB, AccelConfig]:
    cfg = AccelConfig(**params()["cfg"])
    tb = AccelTB(dut, cfg, mem_size=MEM)
    await tb.reset()
    await tb.set_window(WIN_BASE, WIN_SIZE)
    return tb, cfg


class Mirror:
    """The golden simulator over a copy of the testbench's DRAM; both get the same writes."""

    def __init__(self, tb: AccelTB, cfg: AccelConfig):
        self.tb = tb
        self.dram = np.zeros(MEM, np.uint8)
        self.sim = GoldenSim(cfg, self.dram, window_base=WIN_BASE, window_size=WIN_SIZE)

    def write(self, window_offset: int, data: bytes) -> None:
        self.tb.ram.write(WIN_BASE + window_offset, data)
        self.dram[WIN_BASE + window_offset:WIN_BASE + window_offset + len(data)] = np.frombuffer(data, np.uint8)

    async def run(self, words: list[int], timeout_cycles: int = 100_000):
        self.write(0, b"".join(int(w).to_bytes(16, "little") for w in words))
        res = await self.tb.run(words, prog_base=0, timeout_cycles=timeout_cycles)
        gold = self.sim.run(list(words), raise_on_fault=False)
        return res, gold

    def diff(self, res, gold) -> list[str]:
        """Every way the RTL disagrees with the golden simulator (empty when bit-exact)."""
        out = []
        if res.timed_out:
            out.append("RTL did not finish (no interrupt)")
        if not res.done or res.error != (res.code != Fault.NONE) or res.status & STATUS_BUSY:
            out.append(f"STATUS={res.status:#x} with ERROR_CODE={res.code.name}")
        if res.code != gold.status:
            out.append(f"fault: RTL {res.code.name} golden {gold.status.name} ({gold.message})")
        elif gold.status != Fault.NONE and res.pc != gold.pc:
            out.append(f"faulting pc: RTL {res.pc} golden {gold.pc} ({gold.message})")
        rtl = np.frombuffer(self.tb.dram(), np.uint8)
        bad = np.flatnonzero(rtl != self.dram)
        if bad.size:
            out.append(f"DRAM differs at {bad.size} bytes, first at {int(bad[0]):#x}: "
                       f"RTL {rtl[bad[0]]:#04x} golden {self.dram[bad[0]]:#04x}")
        if res.counters["INSTRS"] != gold.counters.instructions:
            out.append(f"INSTRS {res.counters['INSTRS']} golden {gold.counters.instructions}")
        if res.counters["DMA_WR_BYTES"] != gold.counters.dma_write_bytes:
            out.append(f"DMA_WR_BYTES {res.counters['DMA_WR_BYTES']} golden {gold.counters.dma_write_bytes}")
        if self.tb.violations:
            out.append(f"{len(self.tb.violations)} accesses outside the window: {self.tb.violations[:3]}")
            self.tb.violations.clear()
        return out


@cocotb.test()
async def csr_map(dut):
    """ID/VERSION constants, register read-back, and an empty program (overrun at pc 0)."""
    tb, cfg = await make_tb(dut)
    assert await tb.read_reg("ID") == cfg.hash32()
    assert await tb.read_reg("VERSION") == ID_MAGIC
    await tb.write_reg("PROG_BASE", 0x1230)
    assert await tb.read_reg("PROG_BASE") == 0x1230
    assert await tb.read_reg("WIN_SIZE") == WIN_SIZE
    res = await tb.run([], prog_base=0x40)
    assert res.done and res.error and res.code == Fault.PROGRAM_OVERRUN and res.pc == 0, res
    assert int(dut.interrupt.value) == 0  # acknowledged by the write to IRQ_STATUS
    res = await tb.run([encode(make("FINISH"))], prog_base=0x48)  # PROG_BASE not 16-byte aligned
    assert res.code == Fault.DMA_ALIGN and res.pc == 0, res
    res = await tb.run([encode(make("NOP", engine=1))] * 3 + [encode(make("FINISH"))], prog_base=WIN_SIZE - 32)
    assert res.code == Fault.DMA_WINDOW and res.pc == 2, res  # the third word lies past the window
    assert not tb.violations, tb.violations


@cocotb.test()
async def random_vs_golden(dut):
    """Random programs (with injected faults) on RTL and golden: DRAM, status, code and PC bit for bit."""
    p = params()
    tb, cfg = await make_tb(dut)
    mirror = Mirror(tb, cfg)
    rng = np.random.default_rng(p.get("seed", 1))
    n, programs, instrs, retired = p.get("programs", 40), 0, 0, 0
    mismatches, faults = [], {}
    for i in range(n):
        tb.set_pauses(p.get("pause", 0.2) if i % 2 else 0.0, seed=i)
        kind = None if rng.random() < 0.4 else str(rng.choice(FAULT_KINDS))
        prog = random_program(cfg, rng, n_ops=int(rng.integers(3, p.get("max_ops", 14))), data_lo=DATA_LO,
                              data_hi=DATA_HI, win_size=WIN_SIZE, fault=kind, dump_at=DATA_HI)
        mirror.write(DATA_LO, rng.integers(0, 256, DATA_HI - DATA_LO, dtype=np.uint8).tobytes())
        res, gold = await mirror.run(prog.words)
        programs += 1
        instrs += len(prog.words)
        retired += gold.counters.instructions
        faults[gold.status.name] = faults.get(gold.status.name, 0) + 1
        diff = mirror.diff(res, gold)
        if diff:
            mismatches.append({"program": i, "fault": kind, "diff": diff})
            cocotb.log.error(f"program {i} ({kind}): " + "; ".join(diff))
    write_metrics({"random": {"programs": programs, "words": instrs, "retired": retired,
                              "mismatches": len(mismatches), "faults": faults, "first": mismatches[:3]}})
    assert not mismatches, mismatches[:3]


@cocotb.test()
async def concurrent_engines(dut):
    """LOAD, compute and STORE on the same buffers at once: every port shared by priority, bit-exact with golden.

    Counts the cycles the R channel was held (``rvalid`` without ``rready``): a LOAD line waiting for a
    buffer's write port while compute writes it.
    """
    p = params()
    tb, cfg = await make_tb(dut)
    mirror = Mirror(tb, cfg)
    rng = np.random.default_rng(p.get("seed", 3))
    held = {"cycles": 0}

    async def watch():
        while True:
            await RisingEdge(dut.ap_clk)
            if int(dut.m_axi_gmem0_rvalid.value) and not int(dut.m_axi_gmem0_rready.value):
                held["cycles"] += 1

    watcher = cocotb.start_soon(watch())
    out = []
    for i in range(p.get("runs", 2)):
        tb.set_pauses(0.25 if i % 2 else 0.0, seed=i)
        mirror.write(DATA_LO, rng.integers(0, 256, DATA_HI - DATA_LO, dtype=np.uint8).tobytes())
        res, gold = await mirror.run([encode(x) for x in concurrent_program(cfg, data_lo=DATA_LO, out_at=DATA_HI)])
        assert gold.status == Fault.NONE, gold.message
        out += mirror.diff(res, gold)
    watcher.cancel()
    write_metrics({"concurrent": {"r_held_cycles": held["cycles"], "mismatches": out}})
    assert not out, out


@cocotb.test()
async def gemm_by_hand(dut):
    """LOAD A and W, GEMM (overwrite, then accumulate), STORE: against numpy and golden."""
    tb, cfg = await make_tb(dut)
    mirror = Mirror(tb, cfg)
    rng = np.random.default_rng(7)
    c = cfg.cols
    m, k, n = 3, 2, 2  # A: 3 x (2 lines), W: (2*cols) x (2 lines)
    a = rng.integers(-128, 128, (m, k * c), dtype=np.int8)
    w = rng.integers(-128, 128, (n * c, k * c), dtype=np.int8)
    mirror.write(DATA_LO, a.tobytes())
    mirror.write(DATA_LO + 0x400, w.tobytes())
    prog = [make("LOAD", buf=0, sram=0, dram=DATA_LO, rows=m, lines=k, stride=k * c),
            make("LOAD", buf=0, sram=100, dram=DATA_LO + 0x400, rows=n * c, lines=k, stride=k * c, push_next=True),
            make("GEMM", dst=8, a=0, w=100, m=m, k=k, n=n, acc=0, pop_prev=True),
            make("GEMM", dst=8, a=0, w=100, m=m, k=k, n=n, acc=1, push_next=True),
            make("STORE", buf=1, sram=8, dram=DATA_LO + 0x800, rows=m, lines=n, stride=n * c * 4, pop_prev=True),
            make("FINISH")]
    res, gold = await mirror.run([encode(i) for i in prog])
    assert not mirror.diff(res, gold), mirror.diff(res, gold)
    got = np.frombuffer(tb.dram(WIN_BASE + DATA_LO + 0x800, m * n * c * 4), "<i4").reshape(m, n * c)
    want = 2 * (a.astype(np.int64) @ w.astype(np.int64).T)
    assert np.array_equal(got, want.astype(np.int32)), (got, want)
    assert res.counters["INSTRS"] == len(prog) and res.counters["ARRAY_BUSY"] > 0, res.counters


@cocotb.test()
async def soft_reset_midrun(dut):
    """SOFT_RESET during a long transfer: no hang, STATUS clears, the next run is correct."""
    tb, cfg = await make_tb(dut)
    tb.set_pauses(0.3, seed=3)
    mirror = Mirror(tb, cfg)
    big = [make("LOAD", buf=1, sram=0, dram=DATA_LO, rows=8, lines=32, stride=32 * cfg.cols * 4, push_next=True),
           make("NOP", engine=1, pop_prev=True, push_next=True),
           make("STORE", buf=1, sram=0, dram=DATA_LO + 0x2000, rows=8, lines=32, stride=32 * cfg.cols * 4,
                pop_prev=True),
           make("FINISH")]
    words = [encode(i) for i in big]
    mirror.write(0, b"".join(w.to_bytes(16, "little") for w in words))
    for delay in (150, 700, 1500):
        await tb.start(0, len(words))
        await ClockCycles(dut.ap_clk, delay)
        await tb.soft_reset()
        for _ in range(200):
            await ClockCycles(dut.ap_clk, 20)
            if not (await tb.read_reg("STATUS")) & STATUS_BUSY:
                break
        assert await tb.read_reg("STATUS") == 0, "soft reset left status set"
        assert await tb.read_reg("ERROR_CODE") == 0
    tb.set_pauses(0.0)
    # the golden model never saw the aborted runs: bring it to the same DRAM, then compare a clean run
    mirror.dram[:] = np.frombuffer(tb.dram(), np.uint8)
    res, gold = await mirror.run(words)
    assert not mirror.diff(res, gold), mirror.diff(res, gold)
    assert not tb.violations, tb.violations


async def stream_once(tb, mirror, cfg, rng, k_lines, n_lines, n_tiles) -> dict:
    c = cfg.cols
    w_dram, a_dram, out_dram = DATA_LO + 0x1000, DATA_LO, DATA_LO + 0x800
    w_bytes = n_tiles * n_lines * c * k_lines * c
    mirror.write(a_dram, rng.integers(0, 256, k_lines * c, dtype=np.uint8).tobytes())
    mirror.write(w_dram, rng.integers(0, 256, w_bytes, dtype=np.uint8).tobytes())
    prog = weight_stream_program(cfg, k_lines=k_lines, n_tiles=n_tiles, n_lines=n_lines, w_dram=w_dram,
                                 a_dram=a_dram, out_dram=out_dram)
    res, gold = await mirror.run([encode(i) for i in prog], timeout_cycles=400_000)
    assert not mirror.diff(res, gold), mirror.diff(res, gold)
    return {"tiles": n_tiles, "cycles": res.counters["CYCLES"], "dma_beats": res.counters["DMA_BEATS"],
            "weight_beats": w_bytes // cfg.dma_bytes, "array_busy": res.counters["ARRAY_BUSY"],
            "load_busy": res.counters["LOAD_BUSY"], "compute_busy": res.counters["COMPUTE_BUSY"]}


@cocotb.test()
async def weight_streaming(dut):
    """Decode GEMV with double-buffered weight tiles: DMA utilization from DMA_BEATS / CYCLES.

    Two runs of n and 2n tiles: the whole-program ratio of each, and the steady-state ratio
    (extra beats / extra cycles), which is what the DMA does while weights stream.
    """
    p = params()
    tb, cfg = await make_tb(dut)
    tb.set_pauses(0.0)
    mirror = Mirror(tb, cfg)
    rng = np.random.default_rng(11)
    k_lines, n_lines, n_tiles = p.get("k_lines", 32), p.get("n_lines", 2), p.get("n_tiles", 8)
    a = await stream_once(tb, mirror, cfg, rng, k_lines, n_lines, n_tiles)
    b = await stream_once(tb, mirror, cfg, rng, k_lines, n_lines, 2 * n_tiles)
    steady = (b["dma_beats"] - a["dma_beats"]) / (b["cycles"] - a["cycles"])
    steady_w = (b["weight_beats"] - a["weight_beats"]) / (b["cycles"] - a["cycles"])
    write_metrics({"stream": {"short": a, "long": b, "whole_program": b["dma_beats"] / b["cycles"],
                              "steady_state": steady, "steady_state_weights_only": steady_w, "peak_beats_per_cycle": 1}})


@cocotb.test()
async def bus_errors(dut):
    """SLVERR on a LOAD read, a STORE write and an instruction fetch: BUS_ERROR at the right PC, then a clean run.

    LOAD -> NOP -> STORE, chained by tokens: a failing LOAD must stop the run before its STORE
    writes anything; a failing STORE reports its own pc; a word of the program that cannot be
    fetched is where the program stops, after the instructions before it have finished.
    """
    tb, cfg = await make_tb(dut)
    mirror = Mirror(tb, cfg)
    rng = np.random.default_rng(13)
    line = 4 * cfg.cols  # bytes of an accumulator line
    src, dst = DATA_LO, DATA_LO + 0x2000
    chain = [make("LOAD", buf=1, sram=0, dram=src, rows=8, lines=4, stride=4 * line, push_next=True),
             make("NOP", engine=1, pop_prev=True, push_next=True),
             make("STORE", buf=1, sram=0, dram=dst, rows=8, lines=4, stride=4 * line, pop_prev=True),
             make("FINISH")]
    words = [encode(i) for i in chain]
    nbytes = 8 * 4 * line
    cases = [("LOAD read", "read", WIN_BASE + src + 3 * line, 0, 0.0),
             ("LOAD read, back-pressure", "read", WIN_BASE + src + nbytes - 16, 0, 0.3),
             ("STORE write", "write", WIN_BASE + dst + 5 * line, 2, 0.0),
             ("STORE write, back-pressure", "write", WIN_BASE + dst, 2, 0.3),
             ("fetch of the FINISH word", "read", WIN_BASE + 3 * 16, 3, 0.2)]
    for what, kind, at, want_pc, pause in cases:
        tb.set_pauses(pause, seed=len(what))
        mirror.write(src, rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes())
        mirror.write(dst, bytes(nbytes))
        tb.poison(kind, at, 4)
        res = await tb.run(words, prog_base=0, timeout_cycles=50_000)
        tb.clear_poison()
        assert not res.timed_out, f"{what}: no interrupt after a bus error"
        assert res.done and res.error and not res.status & STATUS_BUSY, (what, res)
        assert res.code == Fault.BUS_ERROR and res.pc == want_pc, (what, res.code.name, res.pc)
        out = tb.dram(WIN_BASE + dst, nbytes)
        if want_pc == 0:  # the LOAD failed: its STORE never ran
            assert out == bytes(nbytes), f"{what}: the STORE after a failed LOAD wrote DRAM"
        if want_pc == 3:  # fetch failed after the chain: the STORE finished first
            assert out == tb.dram(WIN_BASE + src, nbytes), f"{what}: the instructions before the bad word did not finish"
        # the accelerator is usable again: a clean run agrees with golden bit for bit
        tb.set_pauses(0.0)
        mirror.dram[:] = np.frombuffer(tb.dram(), np.uint8)
        res, gold = await mirror.run(words)
        assert not mirror.diff(res, gold), (what, mirror.diff(res, gold))
    # GEMM_STREAM: an error on the last weight port's first page stops the run at the GEMM_STREAM (pc 1);
    # the STORE behind it never runs
    k, n, w_at = 4, 2, DATA_LO + 0x4000
    stream = [make("LOAD", buf=0, sram=0, dram=src, rows=1, lines=k, stride=k * cfg.cols, push_next=True),
              make("GEMM_STREAM", dst=0, a=0, w=w_at, m=1, k=k, n=n, acc=0, pop_prev=True, push_next=True),
              make("STORE", buf=1, sram=0, dram=dst, rows=1, lines=n, stride=n * line, pop_prev=True),
              make("FINISH")]
    words = [encode(i) for i in stream]
    for pause in (0.0, 0.3):
        tb.set_pauses(pause, seed=7)
        mirror.write(dst, bytes(n * line))
        tb.poison("read", WIN_BASE + w_at + (cfg.dma_ports - 1) * 4096 + cfg.cols, 4)
        res = await tb.run(words, prog_base=0, timeout_cycles=50_000)
        tb.clear_poison()
        assert not res.timed_out and res.done and res.error, ("GEMM_STREAM weight read", res)
        assert res.code == Fault.BUS_ERROR and res.pc == 1, ("GEMM_STREAM weight read", res.code.name, res.pc)
        assert tb.dram(WIN_BASE + dst, n * line) == bytes(n * line), "the STORE after a failed GEMM_STREAM wrote DRAM"
        tb.set_pauses(0.0)
        mirror.dram[:] = np.frombuffer(tb.dram(), np.uint8)
        res, gold = await mirror.run(words)
        assert not mirror.diff(res, gold), ("GEMM_STREAM after a bus error", mirror.diff(res, gold))
    assert not tb.violations, tb.violations


@cocotb.test()
async def dram_latency(dut):
    """Long LOADs and a STORE with AxiRam's own timing, then behind a fixed DRAM latency: the same bytes as
    the golden simulator both times; CYCLES of each go to the metrics (the pytest side sets them beside
    the fast harness at the same latencies)."""
    p = params()
    tb, cfg = await make_tb(dut)
    tb.set_pauses(0.0)
    mirror = Mirror(tb, cfg)
    rng = np.random.default_rng(7)
    words = [encode(i) for i in load_store_program(cfg, data=DATA_LO, out=p["out"], chunk=p["chunk"],
                                                   loads=p["loads"])]
    cycles = {}
    for lat in (0, p["latency"]):
        mirror.write(DATA_LO, rng.integers(0, 256, p["loads"] * p["chunk"], dtype=np.uint8).tobytes())
        tb.set_dram_latency(lat)
        res, gold = await mirror.run(words, timeout_cycles=400_000)
        assert not mirror.diff(res, gold), (lat, mirror.diff(res, gold))
        cycles[lat] = res.counters["CYCLES"]
    tb.set_dram_latency(0)
    write_metrics({"latency": {"cycles": cycles, "words": len(words)}})
