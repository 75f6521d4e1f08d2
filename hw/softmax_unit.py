"""Softmax unit: SOFTMAX over fixed-point score rows, bit-exact with numerics.softmax.

Every output of a row needs the row's maximum and the sum of its exponentials, so the row
streams in three times — from the vector buffer, one line of ``cols`` int32 per cycle — like
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
   ``p = sat32(rsr(e * y, k - 16))``; lanes past ``n`` are written as 0 (the golden
   simulator's padded rows).

Each pass ends with ``last``.  ``rsr`` is ``numerics.rshift_round``.  Cycles per row of
``L`` lines at full rate: ``3L + 34`` (the reciprocal's 33 + 1 of framing).

Sequencer contract (SOFTMAX ``dst``, ``src``, ``rows``, ``n``): per row ``r``, one header beat,
then the ``L = ceil(n / cols)`` lines of ``src + r*L`` three times, ``last`` on line ``L - 1`` of
each pass; ``i_stream.ready`` is low between passes, so a line read ahead must be held until
taken.  The ``L`` output lines of row ``r`` go to vbuf ``dst + r*L + l`` in order; ``last``
marks the row's final line.  ``n = 0``: send no rows at all (SOFTMAX then writes nothing).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.numerics import EXP_FRAC, FX_FRAC

from .fixed import INT32_MIN, exp2_lookup, rshift_round_var, sat32
from .recip import Reciprocal

__all__ = ["SoftmaxUnit"]

HDR, ROW = 0, 1  # beat kinds
SUM_BITS = 48  # S <= 65535 * 2**30 < 2**47, signed


def _tree(xs, op):
    """Reduce ``xs`` pairwise with ``op``: a balanced tree, log2 deep rather than a chain across the lanes."""
    xs = list(xs)
    while len(xs) > 1:
        xs = [op(xs[k], xs[k + 1]) for k in range(0, len(xs) - 1, 2)] + xs[len(xs) - len(xs) % 2:]
    return xs[0]


class SoftmaxUnit(wiring.Component):
    """``cols``-lane SOFTMAX (see the module docstring for the passes and the sequencer contract).

    Attributes
    ----------
    i_stream : In(stream)
        ``kind`` (0 header, 1 row line), ``data`` (C int32, fx scores), ``last``; header field ``n``.
    o_stream : Out(stream)
        ``data`` (C int32, fx probabilities) and ``last``: the row, during the OUT pass.
    error : Out(1)
        Sticky: a beat of the wrong kind arrived (it is consumed and ignored).
    """

    def __init__(self, cfg: AccelConfig):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
        self.cfg = cfg
        line = data.ArrayLayout(signed(32), cfg.cols)
        self.i_layout = data.StructLayout({"kind": 1, "data": line, "last": 1, "n": unsigned(16)})
        self.o_layout = data.StructLayout({"data": line, "last": 1})
        super().__init__({
            "i_stream": In(stream.Signature(self.i_layout)),
            "o_stream": Out(stream.Signature(self.o_layout)),
            "error": Out(1),
        })

    def elaborate(self, platform):
        from systolica.numerics import EXP_BASE, EXP_DELTA, LOG2E_Q30

        m = Module()
        C = self.cfg.cols
        i, o = self.i_stream, self.o_stream
        p = i.payload
        fire = i.valid & i.ready

        # output register: the sink's write port sees no combinational path from the input
        en = Signal()
        m.d.comb += en.eq(~o.valid | o.ready)
        with m.If(o.ready):
            m.d.sync += o.valid.eq(0)

        m.submodules.recip = recip = Reciprocal(SUM_BITS)
        # one table pair, a combinational read port per lane (LUT ROM; the tables are 256 entries)
        m.submodules.exp_base = base = memory.Memory(shape=unsigned(32), depth=256, init=[int(v) for v in EXP_BASE])
        m.submodules.exp_delta = delta = memory.Memory(shape=unsigned(32), depth=256,
                                                       init=[int(v) for v in EXP_DELTA])

        n = Signal(unsigned(16))
        li = Signal(16)  # line within the row
        mx = Signal(signed(32))
        ssum = Signal(signed(SUM_BITS))
        ry, rk = Signal(unsigned(31)), Signal(unsigned(7))
        m.d.comb += recip.i_stream.payload.eq(ssum)

        lane_ok = [Signal(name=f"lane_ok_{c}") for c in range(C)]
        m.d.comb += [lane_ok[c].eq(li * C + c < n) for c in range(C)]
        # per lane: e = exp_fx(sat32(x - mx), 30) and p = sat32(rsr(e * y, k - 16))
        e, prob = [], []
        osh = Signal(signed(8))
        m.d.comb += osh.eq(rk - FX_FRAC)
        for c in range(C):
            dsat = sat32(m, p.data[c] - mx, f"d_{c}")
            dneg = Signal(signed(32), name=f"dneg_{c}")
            m.d.comb += dneg.eq(Mux(dsat > 0, 0, dsat))  # exp_fx: positive inputs count as 0
            prod = Signal(signed(64), name=f"lprod_{c}")
            m.d.comb += prod.eq(dneg * LOG2E_Q30)
            u = Signal(signed(42), name=f"u_{c}")
            m.d.comb += u.eq((prod >> 22) + ((prod >> 21) & 1))
            ec = exp2_lookup(m, u, 24, 30 - EXP_FRAC, base.read_port(domain="comb"),
                             delta.read_port(domain="comb"), f"exp_{c}")
            e.append(ec)
            pr = rshift_round_var(m, ec * ry, osh, 64, f"pr_{c}")
            prob.append(sat32(m, pr, f"p_{c}"))

        wrong = Signal()
        with m.If(fire & wrong):
            m.d.sync += self.error.eq(1)

        def row_pass(next_state):
            """Common framing of a pass over the row: the line counter and the hand-over at ``last``."""
            m.d.comb += wrong.eq(p.kind != ROW)
            with m.If(fire & ~wrong):
                m.d.sync += li.eq(li + 1)
                with m.If(p.last):
                    m.d.sync += li.eq(0)
                    m.next = next_state

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
                best = _tree([mx] + [Mux(lane_ok[c], p.data[c], INT32_MIN) for c in range(C)],
                             lambda a, b: Mux(a > b, a, b))
                with m.If(fire & ~wrong):
                    m.d.sync += mx.eq(best)
                row_pass("SUM")
            with m.State("SUM"):
                m.d.comb += i.ready.eq(1)
                with m.If(fire & ~wrong):
                    m.d.sync += ssum.eq(_tree([ssum] + [Mux(lane_ok[c], e[c], 0) for c in range(C)],
                                              lambda a, b: a + b))
                row_pass("RECIP")
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
                m.d.comb += i.ready.eq(en | wrong)
                with m.If(fire & ~wrong):
                    m.d.sync += [o.valid.eq(1), o.payload.last.eq(p.last)]
                    m.d.sync += [o.payload.data[c].eq(Mux(lane_ok[c], prob[c], 0)) for c in range(C)]
                row_pass("HDR")
        return m
