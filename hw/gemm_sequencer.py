"""GEMM on the hardware core's systolic array: walks one GEMM instruction into its operand streams.

The array (:class:`~systolica.hw.systolic_array.SystolicArray`, weight-stationary,
shadow and active weight registers) takes one weight tile ``W[j*C : j*C+C, kk*R : kk*R+R]`` and
then the ``m`` activation slices ``A[i, kk*R : kk*R+R]`` that use it; its
:class:`~systolica.hw.accumulator.Accumulator` adds each partial line into
``acc[dst + i*n + j]`` (overwriting for the first K tile unless the instruction
says ``acc=1``).  With ``rows == cols`` a K tile is exactly one scratchpad line, so
tile ``(j, kk)`` is: weight lines ``w + (j*C + c)*k + kk`` for ``c < C`` and
activation lines ``a + i*k + kk`` for ``i < m``.  Two independent walkers feed
the two streams in the same tile order; the array's shadow scoreboard pairs them,
so the weights of the next tile stream in while the current one computes
(decode, ``m = 1``, runs at one weight line per cycle).

``k = 0`` has no tiles: the result is zero (``acc=0``: lines written with 0).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import fifo, memory, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig

from .accumulator import Accumulator
from .systolic_array import SystolicArray

__all__ = ["GemmSequencer"]


def _prefetch(m, name: str, width: int, want, rdata, depth: int = 4):
    """Sync-read prefetch into a small FIFO: returns (issue, fifo); ``issue`` enables the read."""
    q = fifo.SyncFIFO(width=width, depth=depth)
    m.submodules[f"{name}_q"] = q
    pending = Signal(name=f"{name}_pending")
    issue = Signal(name=f"{name}_issue")
    m.d.comb += issue.eq(want & (q.level + pending < depth))
    m.d.sync += pending.eq(issue)
    m.d.comb += [q.w_en.eq(pending), q.w_data.eq(rdata)]
    return issue, q


class GemmSequencer(wiring.Component):
    """Feeds the systolic array for one GEMM at a time; ``busy`` until every result line is written."""

    def __init__(self, cfg: AccelConfig):
        if cfg.rows != cfg.cols:
            raise ValueError(f"the accelerator's GEMM needs a square array (a K tile = one scratchpad line); "
                             f"config {cfg.name!r} has rows={cfg.rows}, cols={cfg.cols}")
        self.cfg = cfg
        self.P = cfg.dma_ports  # weight lines per array beat: GEMM_STREAM's ports deliver one each a cycle
        self.array = SystolicArray(cfg, w_cols=self.P, out_fifo=0)  # the accumulator takes every line
        self.accum = Accumulator(cfg, self.array.o_layout)
        sbits = (cfg.spad_lines - 1).bit_length()
        abits = self.accum.abits
        super().__init__({
            "start": In(1), "a": In(16), "w": In(16), "dst": In(16), "m": In(16), "k": In(16), "n": In(16),
            "acc": In(1), "stream": In(1), "busy": Out(1), "fire": Out(1),
            "ws_valid": In(1), "ws_ready": Out(1), "ws_data": In(self.P * cfg.cols * 8),
            "a_addr": Out(sbits), "a_en": Out(1), "a_rdata": In(cfg.cols * 8),
            "w_addr": Out(sbits), "w_en": Out(1), "w_rdata": In(cfg.cols * 8),
            "acc_rd": In(memory.ReadPort.Signature(addr_width=abits, shape=self.accum.line)),
            "acc_wr": In(memory.WritePort.Signature(addr_width=abits, shape=self.accum.line)),
            "zero_addr": Out(abits), "zero_en": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        C = cfg.cols
        m.submodules.array, m.submodules.accum = arr, acc = self.array, self.accum
        wiring.connect(m, array=arr.o_stream, accum=acc.i_stream)
        wiring.connect(m, wiring.flipped(self.acc_rd), acc.rd)
        wiring.connect(m, wiring.flipped(self.acc_wr), acc.wr)

        # Every count below is a nest of small counters over the instruction's fields, never a product
        # of them: m*n*k and friends would each cost DSP48s for a once-per-instruction number.
        zeros = Signal()  # k = 0: lines still to zero (m*n lines from dst, walked as z_i < m, z_j < n)
        z_i = Signal(16)
        z_j = Signal(16)
        zptr = Signal(16)
        # weight walker: tile (j, kk), column c -> line w + (j*C + c)*k + kk
        w_more = Signal()  # weight lines left to read (n*k*C of them)
        w_base = Signal(32)  # w + j*C*k
        w_ptr = Signal(32)
        w_c = Signal(range(C))
        w_kk = Signal(16)
        w_j = Signal(16)
        # activation walker: tile (j, kk), row i -> line a + i*k + kk, tag dst + i*n + j
        a_more = Signal()  # activation lines left to read (m*n*k of them)
        a_ptr = Signal(32)
        t_ptr = Signal(32)
        a_i = Signal(16)
        a_kk = Signal(16)
        a_j = Signal(16)
        # partial lines read but not yet written by the accumulator (prefetch FIFO + array + accumulator)
        inflight = Signal(16)

        streaming = Signal()  # this GEMM's weights come from the weight ports (GEMM_STREAM), not the scratchpad
        # the walkers' last indices, registered at start (no subtract before their comparisons)
        m1, k1, n1 = Signal(16), Signal(16), Signal(16)
        with m.If(self.start):
            m.d.sync += [m1.eq(self.m - 1), k1.eq(self.k - 1), n1.eq(self.n - 1)]
        with m.If(self.start):
            nonempty = (self.m != 0) & (self.n != 0)
            m.d.sync += [
                streaming.eq(self.stream),
                w_more.eq((self.n != 0) & (self.k != 0) & ~self.stream), a_more.eq(nonempty & (self.k != 0)),
                zeros.eq((self.k == 0) & ~self.acc & nonempty), z_i.eq(0), z_j.eq(0), zptr.eq(self.dst),
                w_base.eq(self.w), w_ptr.eq(self.w), w_c.eq(0), w_kk.eq(0), w_j.eq(0),
                a_ptr.eq(self.a), t_ptr.eq(self.dst), a_i.eq(0), a_kk.eq(0), a_j.eq(0),
            ]
        m.d.comb += self.busy.eq((inflight != 0) | zeros | w_more | a_more)

        # ---- weights
        w_issue, wq = _prefetch(m, "wq", C * 8, w_more & ~self.start, self.w_rdata)
        m.d.comb += [self.w_addr.eq(w_ptr), self.w_en.eq(w_issue)]
        with m.If(w_issue):
            with m.If(w_c == C - 1):
                m.d.sync += w_c.eq(0)
                with m.If(w_kk == k1):  # next output tile j: W rows j*C ..
                    nb = w_base + C * self.k
                    m.d.sync += [w_kk.eq(0), w_j.eq(w_j + 1), w_base.eq(nb), w_ptr.eq(nb)]
                    with m.If(w_j == n1):
                        m.d.sync += w_more.eq(0)
                with m.Else():
                    m.d.sync += [w_kk.eq(w_kk + 1), w_ptr.eq(w_base + w_kk + 1)]
            with m.Else():
                m.d.sync += [w_c.eq(w_c + 1), w_ptr.eq(w_ptr + self.k)]
        # P scratchpad lines make one array beat: the first P - 1 wait in a gather register (one line a cycle,
        # as before: a tile still takes C cycles from the scratchpad)
        P = self.P
        beat = Signal(P * C * 8)
        beat_valid = Signal()
        if P == 1:
            m.d.comb += [beat.eq(wq.r_data), beat_valid.eq(wq.r_rdy), wq.r_en.eq(arr.w_stream.ready & ~streaming)]
        else:
            held = Signal((P - 1) * C * 8)
            have = Signal(range(P))
            full = have == P - 1
            m.d.comb += [beat.eq(Cat(held, wq.r_data)), beat_valid.eq(wq.r_rdy & full),
                         wq.r_en.eq(Mux(full, arr.w_stream.ready & ~streaming, 1))]
            with m.If(wq.r_rdy & wq.r_en):
                m.d.sync += have.eq(Mux(full, 0, have + 1))
                with m.If(~full):
                    m.d.sync += held.eq(Cat(held[C * 8:], wq.r_data) if P > 2 else wq.r_data)
        src = Mux(streaming, self.ws_data, beat)
        m.d.comb += [arr.w_stream.valid.eq(Mux(streaming, self.ws_valid, beat_valid)),
                     self.ws_ready.eq(streaming & arr.w_stream.ready)]
        m.d.comb += [arr.w_stream.payload[j][r].eq(src[(j * C + r) * 8:(j * C + r) * 8 + 8])
                     for j in range(P) for r in range(C)]

        # ---- activations (tag: accumulator line, accumulate flag; last row of the tile)
        side = 16 + 1 + 1
        side_now = Signal(side)  # describes the line read this cycle; registered to meet its data
        side_d = Signal(side)
        m.d.comb += side_now.eq(t_ptr[:16] | ((self.acc | (a_kk != 0)) << 16) | ((a_i == m1) << 17))
        m.d.sync += side_d.eq(side_now)
        a_issue, aq = _prefetch(m, "aq", C * 8 + side, a_more & ~self.start,
                                self.a_rdata | (side_d << (C * 8)))
        m.d.comb += [self.a_addr.eq(a_ptr), self.a_en.eq(a_issue)]
        with m.If(a_issue):
            with m.If(a_i == m1):
                m.d.sync += a_i.eq(0)
                with m.If(a_kk == k1):
                    m.d.sync += [a_kk.eq(0), a_j.eq(a_j + 1), a_ptr.eq(self.a), t_ptr.eq(self.dst + a_j + 1)]
                    with m.If(a_j == n1):
                        m.d.sync += a_more.eq(0)
                with m.Else():
                    m.d.sync += [a_kk.eq(a_kk + 1), a_ptr.eq(self.a + a_kk + 1), t_ptr.eq(self.dst + a_j)]
            with m.Else():
                m.d.sync += [a_i.eq(a_i + 1), a_ptr.eq(a_ptr + self.k), t_ptr.eq(t_ptr + self.n)]
        ap = arr.a_stream.payload
        m.d.comb += [arr.a_stream.valid.eq(aq.r_rdy), aq.r_en.eq(arr.a_stream.ready),
                     ap.tag.eq(aq.r_data[C * 8:C * 8 + 17]), ap.last.eq(aq.r_data[C * 8 + 17])]
        m.d.comb += [ap.data[r].eq(aq.r_data[8 * r:8 * r + 8]) for r in range(C)]
        m.d.comb += self.fire.eq(arr.a_stream.valid & arr.a_stream.ready)

        # ---- completion: every partial line written by the accumulator; k = 0 zero fill
        # (every line read is one accumulator write; a write with none in flight is not counted)
        written = acc.wr.en & (inflight != 0)
        m.d.sync += inflight.eq(inflight + a_issue - written)
        m.d.comb += [self.zero_addr.eq(zptr), self.zero_en.eq(zeros)]
        with m.If(zeros):
            m.d.sync += zptr.eq(zptr + 1)
            with m.If(z_j == n1):
                m.d.sync += [z_j.eq(0), z_i.eq(z_i + 1)]
                with m.If(z_i == m1):
                    m.d.sync += zeros.eq(0)
            with m.Else():
                m.d.sync += z_j.eq(z_j + 1)
        return m
