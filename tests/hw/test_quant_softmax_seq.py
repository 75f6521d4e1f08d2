"""QUANT and SOFTMAX instructions end to end in the Amaranth simulator: buffer memories, a line feeder that
follows the sequencer contract of QuantUnit / SoftmaxUnit, and the units; the buffers afterwards must hold
what the golden simulator's semantics give (systolica/layout.py conventions).

``RowFeeder`` is the reference for wiring the units into the compute engine: one synchronous
vector-buffer read port, reads issued only when the line in flight is taken (a read port keeps
its data while ``en`` is low, so the unit's ``ready`` may fall between passes at no cost), and
every output beat written to its buffer the cycle it appears (``o_stream.ready = 1``).
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator
from test_quant_unit import quant_row
from test_softmax_unit import softmax_row

from systolica import numerics
from systolica.config import AccelConfig
from systolica.hw.quant_unit import QuantUnit
from systolica.hw.softmax_unit import SoftmaxUnit

pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]

C = 4
DEPTH = 256  # lines of each buffer in the harness


class RowFeeder(wiring.Component):
    """Runs one QUANT (``quant=True``) or SOFTMAX instruction from ``start`` until ``busy`` falls.

    Fields arrive as plain signals; ``lines`` is QUANT's ``lines`` or SOFTMAX's ``ceil(n / cols)``.
    """

    def __init__(self, cfg: AccelConfig, quant: bool):
        self.cfg, self.quant = cfg, quant
        self.unit = QuantUnit(cfg) if quant else SoftmaxUnit(cfg)
        ab = (DEPTH - 1).bit_length()
        super().__init__({
            "start": In(1), "src": In(ab), "dst": In(ab), "exps": In(ab), "rows": In(16), "lines": In(16),
            "split": In(1), "n": In(16), "busy": Out(1),
            "rd_addr": Out(ab), "rd_en": Out(1), "rd_data": In(data.ArrayLayout(signed(32), cfg.cols)),
            "wr_addr": Out(ab), "wr_en": Out(1),
            "wr_data": Out(data.ArrayLayout(signed(8) if quant else signed(32), cfg.cols)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = u = self.unit
        i, o = u.i_stream, u.o_stream
        L = self.lines
        passes = (2 + self.split) if self.quant else 3
        rows_left = Signal(16)  # rows whose beats are still to be issued
        beat = Signal(20)  # beat of the row: 0 the header, then passes * L lines
        ln = Signal(16)  # line of the current pass
        rbase = Signal(16)  # src + r * L
        pending, pend_hdr, pend_last = Signal(), Signal(), Signal()
        outs_left = Signal(16)  # rows whose last output has not appeared yet
        nothing = Signal()  # SOFTMAX n = 0 writes nothing: no rows are sent at all
        m.d.comb += nothing.eq(0 if self.quant else self.n == 0)
        with m.If(self.start):
            m.d.sync += [rows_left.eq(self.rows), beat.eq(0), ln.eq(0), rbase.eq(self.src),
                         outs_left.eq(self.rows)]
            with m.If(nothing):
                m.d.sync += [rows_left.eq(0), outs_left.eq(0)]

        # ---- input: one beat in flight; a new one is issued when that one is taken
        fire = Signal()
        m.d.comb += fire.eq(pending & i.ready)
        issue = Signal()
        m.d.comb += issue.eq((rows_left != 0) & ~self.start & (~pending | fire))
        is_hdr = beat == 0
        row_beats = 1 + passes * L
        m.d.comb += [self.rd_addr.eq(rbase + ln), self.rd_en.eq(issue & ~is_hdr)]
        with m.If(issue):
            m.d.sync += [pend_hdr.eq(is_hdr), pend_last.eq(~is_hdr & (ln == L - 1)), beat.eq(beat + 1)]
            with m.If(~is_hdr):
                m.d.sync += ln.eq(ln + 1)
                with m.If(ln == L - 1):
                    m.d.sync += ln.eq(0)
            with m.If(beat == row_beats - 1):
                m.d.sync += [beat.eq(0), rows_left.eq(rows_left - 1), rbase.eq(rbase + L)]
        with m.If(issue):
            m.d.sync += pending.eq(1)
        with m.Elif(fire):
            m.d.sync += pending.eq(0)
        p = i.payload
        m.d.comb += [i.valid.eq(pending), p.kind.eq(~pend_hdr), p.last.eq(pend_last), p.data.eq(self.rd_data)]
        if self.quant:
            m.d.comb += [p.split.eq(self.split), p.empty.eq(L == 0)]
        else:
            m.d.comb += p.n.eq(self.n)

        # ---- output: every beat is written where it belongs, at once
        m.d.comb += o.ready.eq(1)
        take = o.valid
        with m.If(take & o.payload.last):
            m.d.sync += outs_left.eq(outs_left - 1)
        m.d.comb += self.wr_en.eq(take)
        if self.quant:
            # row r of block b (b = 1: the residual, split = 1) goes to dst + (b*rows + r)*L, its exponent
            # line to exps + b*rows + r
            qbase, ebase, wq, blk_lines = Signal(16), Signal(16), Signal(16), Signal(32)
            with m.If(self.start):
                m.d.sync += [qbase.eq(self.dst), ebase.eq(self.exps), blk_lines.eq(self.rows * L)]
            blk = o.payload.blk
            m.d.comb += [self.wr_data.eq(o.payload.data), self.wr_addr.eq(wq)]
            with m.If(o.payload.exp):
                m.d.comb += self.wr_addr.eq(ebase + Mux(blk, self.rows, 0))
            with m.If(take & o.payload.exp):
                m.d.sync += wq.eq(qbase + Mux(blk, blk_lines, 0))
            with m.If(take & ~o.payload.exp):
                m.d.sync += wq.eq(wq + 1)
            with m.If(take & o.payload.last):
                m.d.sync += [qbase.eq(qbase + L), ebase.eq(ebase + 1)]
        else:
            optr = Signal(16)
            with m.If(self.start):
                m.d.sync += optr.eq(self.dst)
            m.d.comb += [self.wr_addr.eq(optr), self.wr_data.eq(o.payload.data)]
            with m.If(take):
                m.d.sync += optr.eq(optr + 1)
        m.d.comb += self.busy.eq((rows_left != 0) | (outs_left != 0) | pending)
        return m


class Harness(wiring.Component):
    """The vector buffer (int32 lines), the output buffer (spad int8 lines for QUANT, vbuf for SOFTMAX), the feeder."""

    def __init__(self, quant: bool, vbuf_init):
        self.quant = quant
        self.vbuf_init = vbuf_init
        self.feeder = RowFeeder(AccelConfig(rows=4, cols=C), quant)
        self.out_shape = data.ArrayLayout(signed(8) if quant else signed(32), C)
        super().__init__({"start": In(1), "busy": Out(1)} | {
            k: In(len(getattr(self.feeder, k))) for k in ("src", "dst", "exps", "rows", "lines", "split", "n")})

    def elaborate(self, platform):
        m = Module()
        f = self.feeder
        m.submodules.feeder = f
        m.submodules.vbuf = self.vbuf = vbuf = memory.Memory(
            shape=data.ArrayLayout(signed(32), C), depth=DEPTH, init=self.vbuf_init)
        m.submodules.out = self.out = out = memory.Memory(shape=self.out_shape, depth=DEPTH, init=[])
        rp, wp = vbuf.read_port(), out.write_port()
        m.d.comb += [rp.addr.eq(f.rd_addr), rp.en.eq(f.rd_en), f.rd_data.eq(rp.data),
                     wp.addr.eq(f.wr_addr), wp.en.eq(f.wr_en), wp.data.eq(f.wr_data), self.busy.eq(f.busy)]
        for k in ("start", "src", "dst", "exps", "rows", "lines", "split", "n"):
            m.d.comb += getattr(f, k).eq(getattr(self, k))
        return m


def run_instr(quant: bool, vbuf: np.ndarray, fields: dict, fill: int) -> tuple[np.ndarray, int]:
    """Run one instruction; returns the output buffer (DEPTH x C) and the cycles from start to not busy."""
    dut = Harness(quant, [[int(v) for v in line] for line in vbuf])
    res = {}

    async def bench(ctx):
        for k, v in fields.items():
            ctx.set(getattr(dut, k), v)
        for a in range(DEPTH):  # junk everywhere: every line the instruction writes must be written
            ctx.set(dut.out.data[a], [fill] * C)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        cycles = 1
        while ctx.get(dut.busy):
            await ctx.tick()
            cycles += 1
            assert cycles < 50_000, "instruction did not finish"
        await ctx.tick()  # the last write lands
        res["out"] = np.array([[int(v) for v in ctx.get(dut.out.data[a])] for a in range(DEPTH)], np.int64)
        res["cycles"] = cycles

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return res["out"], res["cycles"]


def _vbuf_with(rows_x: np.ndarray, src: int) -> np.ndarray:
    vb = np.random.default_rng(0).integers(-(1 << 31), 1 << 31, size=(DEPTH, C))  # junk around the operand
    lines = rows_x.reshape(-1, C)
    vb[src:src + lines.shape[0]] = lines
    return vb


@pytest.mark.parametrize("split,lines,rows", [(0, 3, 5), (1, 3, 5), (1, 1, 3), (0, 0, 2), (1, 0, 2)])
def test_quant_instruction(split, lines, rows):
    """QUANT rows x lines (split 0/1, also lines = 0): spad dst / exps hold numerics.quant_rows(_split)."""
    rng = np.random.default_rng(10 * split + lines)
    kinds = ("mixed", "zero", "carry", "negative", "extremes")
    x = np.stack([quant_row(rng, kinds[r % len(kinds)], lines * C) for r in range(rows)]).reshape(rows, lines * C)
    src, dst, exps, fill = 7, 60, 150, -99
    out, cycles = run_instr(True, _vbuf_with(x, src), {"src": src, "dst": dst, "exps": exps, "rows": rows,
                                                      "lines": lines, "split": split}, fill)
    q, e = numerics.quant_rows_split(x) if split else numerics.quant_rows(x)
    want = np.full((DEPTH, C), fill, np.int64)
    k = 1 + split
    want[dst:dst + k * rows * lines] = q.reshape(-1, C) if lines else want[dst:dst]
    want[exps:exps + k * rows] = 0
    want[exps:exps + k * rows, 0] = e
    bad = np.argwhere((out != want).any(axis=1)).ravel()
    assert bad.size == 0, f"lines {bad.tolist()[:8]}: got {out[bad[:3]].tolist()}, want {want[bad[:3]].tolist()}"
    per_row = (2 + split) * lines + (11 if not split else 21)
    assert cycles <= rows * per_row + 9, (cycles, per_row)  # one line per cycle: no bubbles but the framing


@pytest.mark.parametrize("n,rows", [(7, 4), (1, 2), (8, 2), (0, 3)])
def test_softmax_instruction(n, rows):
    """SOFTMAX rows x n: vbuf dst holds numerics.softmax per row, lanes past n 0; n = 0 writes nothing."""
    rng = np.random.default_rng(n)
    L = -(-n // C)
    x = np.zeros((rows, L * C), np.int64)
    for r in range(rows):
        x[r, :n] = softmax_row(rng, ("scores", "peaked", "equal")[r % 3], n) if n else []
        x[r, n:] = 12345  # padded lanes: ignored
    src, dst, fill = 3, 90, -7
    out, cycles = run_instr(False, _vbuf_with(x, src), {"src": src, "dst": dst, "rows": rows, "lines": L, "n": n},
                            fill)
    want = np.full((DEPTH, C), fill, np.int64)
    if n:
        y = np.zeros((rows, L * C), np.int64)
        y[:, :n] = numerics.softmax(x[:, :n])
        want[dst:dst + rows * L] = y.reshape(-1, C)
    bad = np.argwhere((out != want).any(axis=1)).ravel()
    assert bad.size == 0, f"lines {bad.tolist()[:8]}: got {out[bad[:3]].tolist()}, want {want[bad[:3]].tolist()}"
    assert cycles <= rows * (3 * L + 51) + 24, cycles
