"""Softmax unit: SOFTMAX over fixed-point score rows, bit-exact with numerics.softmax.

Every output of a row needs the row's maximum and the sum of its exponentials, so the row
streams in three times — from the vector buffer, one beat of ``L`` int32 lanes per cycle (:mod:`~systolica.hw.line_unit`) — like
the :class:`~systolica.hw.norm_unit.NormUnit` (rows reach 65535 elements, too long to hold):

1. ``HDR``: ``n`` (elements of the row; the row is ``ceil(n / cols)`` lines, lanes past
   ``n`` in the last line are ignored).  ``n = 0``: no pass follows and nothing is written.
2. MAX pass: ``mx = max(x)``.
3. SUM pass: ``e = exp_fx(sat32(x - mx), 30)`` per lane (``u = rsr(d * LOG2E_Q30, 22)``, the
   256-entry ``EXP_BASE`` / ``EXP_DELTA`` tables with linear interpolation, a rounding
   shift by the integer part: :func:`~systolica.hw.fixed.exp2_lookup`), ``S = sum(e)``
   (``< 2**47``).  Then ``y, k = recip(S)``
   (:class:`~systolica.hw.recip.Reciprocal`, 33 cycles): one reciprocal per row.
4. OUT pass: ``e`` again, and one output line per input line,
   ``p = sat32(rsr(e * y, k - 16))`` (``<= 2**16 + 1``: the shift is 44..60, see ``OSH_MIN``);
   lanes past ``n`` are written as 0 (the golden simulator's padded rows).

The SUM and OUT passes run through a 3-stage pipeline with one multiply per stage
(``d * LOG2E_Q30``; the table interpolation; ``e * y`` into the output register), which
stalls as a whole on output back-pressure.  The SUM pass waits for its last line to leave
the pipeline (2 cycles) before the reciprocal starts; the OUT pass hands over to the next
row's header at once, its last lines drain while the next max pass streams in.

Each pass ends with ``last``.  ``rsr`` is ``numerics.rshift_round``.  Cycles per row of
``L`` lines at full rate: ``3L + 36`` (the reciprocal's 33, the SUM drain 2, the header 1).

Sequencer contract (SOFTMAX ``dst``, ``src``, ``rows``, ``n``): per row ``r``, one header beat,
then the ``L = ceil(n / cols)`` lines of ``src + r*L`` three times, ``last`` on line ``L - 1`` of
each pass; ``i_stream.ready`` is low between passes, so a line read ahead must be held until
taken.  The ``L`` output lines of row ``r`` go to vbuf ``dst + r*L + l`` in order; ``last``
marks the row's final line.  ``n = 0``: send no rows at all (SOFTMAX then writes nothing).
Counted in buffer lines of ``cols`` elements: with ``N = cfg.nonlinear_width < cols`` each line is
``cols / N`` beats (:mod:`~systolica.hw.line_serial`), ``last`` on a pass's final beat,
and the cycle counts above are in beats.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import memory

from systolica.config import AccelConfig
from systolica.numerics import EXP_FRAC, FX_FRAC

from .fixed import INT32_MIN, exp2_lookup, sat32
from .line_unit import HDR, ROW, LineUnit, lane_mask, registered_output, tree
from .recip import Reciprocal

__all__ = ["SoftmaxUnit"]

SUM_BITS = 48  # S <= 65535 * 2**30 < 2**47, signed
# exp_fx(d) = 0 for every d <= -32.0: u <= -46 * 2**24, so the final shift is its cap of 40 and
# (p + 2**39) >> 40 = 0 for p < 2**31.  Clamping d there keeps the bits and narrows the d * log2(e)
# product to 22 x 31 bits (two DSP48s instead of four).
D_MIN = -(32 << FX_FRAC)
# the output shift k - 16: S >= 2**30 (the maximum contributes exactly 2**30) and S < 2**47 give
# 60 <= k <= 76, so p = rsr(e * y, k - 16) shifts by 44..60 and p <= 2**16 + 1 (no saturation)
OSH_MIN, OSH_MAX = 44, 60


class SoftmaxUnit(LineUnit):
    """``N``-lane SOFTMAX (``N = cfg.nonlinear_width``; see the module docstring for the passes and the contract).

    Attributes
    ----------
    i_stream : In(stream)
        ``kind`` (0 header, 1 row beat), ``data`` (L int32, fx scores), ``last``; header field ``n``.
    o_stream : Out(stream)
        ``data`` (L int32, fx probabilities) and ``last``: the row, during the OUT pass.
    error : Out(1)
        Sticky: a beat of the wrong kind arrived (it is consumed and ignored).
    """

    def __init__(self, cfg: AccelConfig):
        lanes = LineUnit.nonlinear_lanes_of(cfg)
        line = LineUnit.line(cfg, lanes=lanes)
        super().__init__(cfg, {"kind": 1, "data": line, "last": 1, "n": unsigned(16)}, {"data": line, "last": 1},
                         error=True, lanes=lanes)

    def elaborate(self, platform):
        from systolica.numerics import EXP_BASE, EXP_DELTA, LOG2E_Q30

        m = Module()
        C = self.lanes
        i, o = self.i_stream, self.o_stream
        p = i.payload
        fire = i.valid & i.ready

        en = registered_output(m, o)

        m.submodules.recip = recip = Reciprocal(SUM_BITS)
        # one table pair, a combinational read port per lane (LUT ROM; the tables are 256 entries)
        # as wide as their largest entry (2**31 > base, 2**23 > delta): smaller ROMs, a 23 x 16-bit interpolation
        m.submodules.exp_base = base = memory.Memory(shape=unsigned(int(EXP_BASE.max()).bit_length()), depth=256,
                                                     init=[int(v) for v in EXP_BASE])
        m.submodules.exp_delta = delta = memory.Memory(shape=unsigned(int(EXP_DELTA.max()).bit_length()), depth=256,
                                                       init=[int(v) for v in EXP_DELTA])

        n = Signal(unsigned(16))
        li = Signal(16)  # beat within the row
        mx = Signal(signed(32))
        ssum = Signal(signed(SUM_BITS))
        ry, rk = Signal(unsigned(31)), Signal(unsigned(7))
        m.d.comb += recip.i_stream.payload.eq(ssum)

        lane_ok = lane_mask(m, li, n, C)

        # ---- the exp pipeline of the SUM and OUT passes: one multiply per stage
        # stage 1: u = rsr(min(sat32(x - mx), 0) * LOG2E_Q30, 22); stage 2: e = exp2(u) (tables, Q30);
        # then SUM adds e into S, OUT registers p = sat32(rsr(e * y, k - 16)) as the output.
        # The whole pipeline advances with the output register (`adv`).
        adv = en
        into_pipe = Signal()
        v1, last1, v2, last2 = Signal(), Signal(), Signal(), Signal()
        out1, out2 = Signal(), Signal()  # the beat belongs to an OUT pass (else to a SUM pass)
        in_out = Signal()
        ok1 = [Signal(name=f"ok1_{c}") for c in range(C)]
        ok2 = [Signal(name=f"ok2_{c}") for c in range(C)]
        u1 = [Signal(signed(42), name=f"u1_{c}") for c in range(C)]
        e2 = [Signal(unsigned(31), name=f"e2_{c}") for c in range(C)]  # <= 2**30
        osh = Signal(range(OSH_MIN, OSH_MAX + 1))
        osh_rel = Signal(range(OSH_MAX - OSH_MIN + 1))
        m.d.comb += [osh.eq(rk - FX_FRAC), osh_rel.eq(osh - OSH_MIN)]
        prob = []
        with m.If(adv):
            m.d.sync += [v1.eq(into_pipe), last1.eq(p.last), v2.eq(v1), last2.eq(last1), out1.eq(in_out),
                         out2.eq(out1)]
        for c in range(C):
            dsat = sat32(m, p.data[c] - mx, f"d_{c}")
            dneg = Signal(signed(23), name=f"dneg_{c}")
            # exp_fx: positive inputs count as 0; below D_MIN every input gives 0
            m.d.comb += dneg.eq(Mux(dsat > 0, 0, Mux(dsat < D_MIN, D_MIN, dsat)))
            prod = Signal(signed(54), name=f"lprod_{c}")
            m.d.comb += prod.eq(dneg * LOG2E_Q30)
            ec = exp2_lookup(m, u1[c], 24, 30 - EXP_FRAC, base.read_port(domain="comb"),
                             delta.read_port(domain="comb"), f"exp_{c}")
            with m.If(adv):
                m.d.sync += [u1[c].eq((prod >> 22) + ((prod >> 21) & 1)), ok1[c].eq(lane_ok[c]),
                             e2[c].eq(ec), ok2[c].eq(ok1[c])]
            # rshift_round by 44..60: add the half, then a 17-position shifter of the 18 result bits
            t = Signal(unsigned(62), name=f"pt_{c}")
            m.d.comb += t.eq(e2[c] * ry + ((Const(1, 1) << osh) >> 1))
            pc = Signal(unsigned(18), name=f"p_{c}")
            m.d.comb += pc.eq((t >> OSH_MIN) >> osh_rel)
            prob.append(pc)

        wrong = Signal()
        with m.If(fire & wrong):
            m.d.sync += self.error.eq(1)
        took_last = Signal()  # the pass's last line is in the pipeline: take no more until it is through

        def row_pass(next_state):
            """Common framing of a pass over the row: the line counter and the hand-over at ``last``."""
            m.d.comb += wrong.eq(p.kind != ROW)
            with m.If(fire & ~wrong):
                m.d.sync += li.eq(li + 1)
                with m.If(p.last):
                    m.d.sync += li.eq(0)
                    if next_state is None:
                        m.d.sync += took_last.eq(1)
                    else:
                        m.next = next_state

        def pipe_pass():
            """Lines of a SUM / OUT pass enter the pipeline while it advances."""
            # while a SUM pass drains, even the next beat waits (it is no stray beat)
            m.d.comb += [i.ready.eq(~took_last & (adv | wrong)), into_pipe.eq(fire & ~wrong)]

        # stage 2's beats: a SUM beat adds into S; an OUT beat becomes an output line (even after the
        # FSM has moved on to the next row's header and max pass, which do not touch the pipeline)
        with m.If(adv & v2 & ~out2):
            m.d.sync += ssum.eq(tree([ssum] + [Mux(ok2[c], e2[c], 0) for c in range(C)], lambda a, b: a + b))
        with m.If(adv & v2 & out2):
            m.d.sync += [o.valid.eq(1), o.payload.last.eq(last2)]
            m.d.sync += [o.payload.data[c].eq(Mux(ok2[c], prob[c], 0)) for c in range(C)]

        with m.FSM(name="softmax"):
            with m.State("HDR"):
                m.d.comb += [i.ready.eq(1), wrong.eq(p.kind != HDR)]
                with m.If(fire & ~wrong):
                    m.d.sync += [n.eq(p.n), li.eq(0), mx.eq(INT32_MIN), ssum.eq(0)]
                    with m.If(p.n != 0):
                        m.next = "MAX"
            with m.State("MAX"):
                m.d.comb += i.ready.eq(1)
                # a balanced tree of comparators; lanes past n count as INT32_MIN
                best = tree([mx] + [Mux(lane_ok[c], p.data[c], INT32_MIN) for c in range(C)],
                             lambda a, b: Mux(a > b, a, b))
                with m.If(fire & ~wrong):
                    m.d.sync += mx.eq(best)
                row_pass("SUM")
            with m.State("SUM"):
                pipe_pass()
                row_pass(None)
                with m.If(adv & v2 & ~out2 & last2):  # S is complete once its last line is through
                    m.d.sync += took_last.eq(0)
                    m.next = "RECIP"
            with m.State("RECIP"):
                m.d.comb += recip.i_stream.valid.eq(1)
                with m.If(recip.i_stream.ready):
                    m.next = "RECIP_WAIT"
            with m.State("RECIP_WAIT"):
                m.d.comb += recip.o_stream.ready.eq(1)
                with m.If(recip.o_stream.valid):
                    m.d.sync += [ry.eq(recip.o_stream.payload.y), rk.eq(recip.o_stream.payload.k)]
                    m.next = "OUT"
            with m.State("OUT"):
                m.d.comb += in_out.eq(1)
                pipe_pass()
                row_pass("HDR")
        return m
