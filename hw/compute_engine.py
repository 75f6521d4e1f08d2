"""The compute engine: NOP, FINISH and GEMM.

GEMM here is a stopgap datapath until the hardware core's systolic array is
integrated: one ``cols``-lane dot product per cycle (one scratchpad line of A
against one line of W), so a GEMM of m x k lines by n*cols rows takes
``m * n * cols * k`` cycles.  For decode (m = 1) that is one weight line per
cycle -- exactly the rate at which the load engine brings weight lines in
when a scratchpad line is one DMA beat, so weight streaming is not slowed by it.

Operands follow systolica/layout.py: A is m rows of k lines at ``a``, W is
n*cols rows of k lines at ``w``, the result m rows of n lines at ``dst``; sums
wrap modulo 2^32 like numerics.matmul.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import enum as aenum, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.isa import OP_BY_NAME

from .engines import buffer_ports, engine_members, token_fsm

__all__ = ["ComputeEngine"]


class _G(aenum.Enum, shape=3):
    OFF = 0
    RUN = 1
    DRAIN = 2
    READ_ACC = 3
    WAIT_ACC = 4
    WRITE = 5


class ComputeEngine(wiring.Component):
    """Executes the compute instructions of the command stream."""

    def __init__(self, cfg: AccelConfig):
        self.cfg = cfg
        p = buffer_ports(cfg)
        members = engine_members(cfg) | {
            "a_addr": Out(p["spad"][0]), "a_en": Out(1), "a_rdata": In(p["spad"][1]),
            "w_addr": Out(p["spad"][0]), "w_en": Out(1), "w_rdata": In(p["spad"][1]),
            "acc_raddr": Out(p["acc"][0]), "acc_ren": Out(1), "acc_rdata": In(p["acc"][1]),
            "acc_waddr": Out(p["acc"][0]), "acc_wen": Out(1), "acc_wdata": Out(p["acc"][1]),
            "mac_active": Out(1),
        }
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        cols = cfg.cols
        ins, exec_start, exec_done, _ = token_fsm(m, self, cfg)
        op = ins.nop.h.opcode
        g = ins.gemm
        is_gemm = op == OP_BY_NAME["GEMM"].code

        gs = Signal(_G)
        i = Signal(16)  # output row
        j = Signal(16)  # output line within the row
        c = Signal(range(cols))  # lane of the output line (= row of W within the tile)
        kk = Signal(16)  # reduction line
        a_row = Signal(32)  # a + i*k
        w_tile = Signal(32)  # w + j*cols*k
        w_ptr = Signal(32)
        out_ptr = Signal(32)
        sums = [Signal(32, name=f"sum{lane}") for lane in range(cols)]
        p_valid = Signal()  # data of last cycle's reads arrive now
        p_lane = Signal(range(cols))

        with m.If(exec_start):
            with m.If(is_gemm & (g.m != 0) & (g.n != 0)):
                m.d.sync += [gs.eq(_G.RUN), i.eq(0), j.eq(0), c.eq(0), kk.eq(0), a_row.eq(g.a), w_tile.eq(g.w),
                             w_ptr.eq(g.w), out_ptr.eq(g.dst)] + [s.eq(0) for s in sums]
        m.d.comb += exec_done.eq(self.executing & ~exec_start & (gs == _G.OFF))

        # ---- MAC: sums[lane] += dot(A line, W line) for the reads issued last cycle
        a_lanes = [self.a_rdata[8 * x:8 * x + 8].as_signed() for x in range(cols)]
        w_lanes = [self.w_rdata[8 * x:8 * x + 8].as_signed() for x in range(cols)]
        dot = Signal(signed(32))
        m.d.comb += dot.eq(sum(a * b for a, b in zip(a_lanes, w_lanes)))
        m.d.comb += self.mac_active.eq(p_valid)
        with m.If(p_valid):
            with m.Switch(p_lane):
                for lane, s in enumerate(sums):
                    with m.Case(lane):
                        m.d.sync += s.eq(s + dot)

        issue = Signal()
        m.d.comb += [self.a_addr.eq(a_row + kk), self.w_addr.eq(w_ptr), self.a_en.eq(issue), self.w_en.eq(issue)]
        m.d.sync += [p_valid.eq(issue), p_lane.eq(c)]
        old = Signal(cols * 32)
        with m.Switch(gs):
            with m.Case(_G.RUN):
                with m.If(g.k == 0):
                    m.d.sync += gs.eq(_G.DRAIN)
                with m.Else():
                    m.d.comb += issue.eq(1)
                    m.d.sync += w_ptr.eq(w_ptr + 1)
                    with m.If(kk == g.k - 1):
                        m.d.sync += kk.eq(0)
                        with m.If(c == cols - 1):
                            m.d.sync += [c.eq(0), gs.eq(_G.DRAIN)]
                        with m.Else():
                            m.d.sync += c.eq(c + 1)
                    with m.Else():
                        m.d.sync += kk.eq(kk + 1)
            with m.Case(_G.DRAIN):  # the last product lands in `sums` this cycle
                m.d.sync += gs.eq(Mux(g.acc, _G.READ_ACC, _G.WRITE))  # only acc=1 needs the old value
            with m.Case(_G.READ_ACC):
                m.d.comb += [self.acc_raddr.eq(out_ptr), self.acc_ren.eq(1)]
                m.d.sync += gs.eq(_G.WAIT_ACC)
            with m.Case(_G.WAIT_ACC):
                m.d.sync += [old.eq(self.acc_rdata), gs.eq(_G.WRITE)]
            with m.Case(_G.WRITE):
                added = Cat(*[(s + old[32 * x:32 * x + 32])[:32] for x, s in enumerate(sums)])
                m.d.comb += [self.acc_waddr.eq(out_ptr), self.acc_wen.eq(1),
                             self.acc_wdata.eq(Mux(g.acc, added, Cat(*sums)))]
                m.d.sync += [out_ptr.eq(out_ptr + 1), gs.eq(_G.RUN)] + [s.eq(0) for s in sums]
                with m.If(j == g.n - 1):
                    m.d.sync += [j.eq(0), w_tile.eq(g.w), w_ptr.eq(g.w), i.eq(i + 1), a_row.eq(a_row + g.k)]
                    with m.If(i == g.m - 1):
                        m.d.sync += gs.eq(_G.OFF)
                with m.Else():
                    nxt = w_tile + cols * g.k
                    m.d.sync += [j.eq(j + 1), w_tile.eq(nxt), w_ptr.eq(nxt)]
        return m
