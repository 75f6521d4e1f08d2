"""Vector unit: the element-wise and row-reduction ops of numerics, one beat of ``L`` lanes per cycle.

``L = cfg.line_width`` (:mod:`~systolica.hw.line_unit`); "line" below is one such beat, and
``C`` is ``L`` (the sequencer re-packs ROPE's cos/sin per beat, see
:mod:`~systolica.hw.vector_sequencer`).

Implemented ops (bit-exact with :mod:`systolica.numerics`):

* ``ADD``: ``sat32(a + b)`` (``numerics.add``);
* ``MUL``: ``sat32(rshift_round(a * b, shift))`` (``numerics.mul``);
* ``REQUANT``: ``sat32(rshift_round(acc * mult, shift))`` with ``a = acc`` line, ``b = mult``
  line and the beat's ``shift = S - exps[row]`` (may be negative: a saturating left
  shift) (``numerics.requant``);
* ``ROPE``: adjacent lane pairs ``(x[2j], x[2j+1])`` of the ``a`` line rotate by the angle
  whose cos is ``b[j]`` and sin ``b[C/2 + j]`` (Q14): ``y0 = rsr(x0*c - x1*s, 14)``,
  ``y1 = rsr(x0*s + x1*c, 14)``, saturated (``numerics.rope``; a head of ``hd = C`` lanes
  takes its table row as ``b`` unchanged, a longer head takes the matching halves of its
  cos and sin parts);
* ``ARGMAX``: over the beats of a row (``first`` .. ``last``), the index of the first
  maximum of the first ``n`` lanes of each line; one output line per row, the index in
  lane 0 (``numerics.argmax``).

ADD, MUL, REQUANT and ROPE share one datapath per lane: a 32 x 32 -> 64-bit product (or
a sum, or ROPE's difference / sum of two products), then a round-half-up arithmetic shifter and an int32 saturator — exactly the
scalar form of ``numerics.rshift_round`` followed by ``sat32``.  Three pipeline stages
(input register, product, shift/saturate), stalled as a whole by output back-pressure like the
array.  The input register keeps the sequencer's operand muxes out of the multiplier's stage
(the line-op sequencer's slowest ECP5 path was instruction word -> lane operands -> 32 x 32
product, 38.5 MHz).

SILU / GELU live in :mod:`~systolica.hw.activation` (a deeper pipeline), RMSNorm /
LayerNorm in :mod:`~systolica.hw.norm_unit` (several passes over a row); SOFTMAX (the
ISA op) in :mod:`~systolica.hw.softmax_unit`.
"""

from __future__ import annotations

import enum

from amaranth import Const, Module, Mux, Signal, signed

from systolica.config import AccelConfig
from systolica.numerics import TRIG_FRAC

from .fixed import rshift_round_sat32
from .line_unit import LineUnit

__all__ = ["VectorUnit", "VecOp"]

class VecOp(enum.IntEnum):
    ADD = 0
    MUL = 1
    REQUANT = 2
    ARGMAX = 3
    ROPE = 4


class VectorUnit(LineUnit):
    """``L``-lane fixed-point vector unit (``L = cfg.line_width``; see the module docstring for the ops).

    Attributes
    ----------
    i_stream : In(stream)
        ``op`` (:class:`VecOp`), ``a`` and ``b`` (L int32 each), ``shift`` (signed 10
        bits), ``first`` / ``last`` (row framing, used by ARGMAX), ``n`` (valid lanes of
        this beat for ARGMAX, 0..L; 0 only after the row's first beat).
    o_stream : Out(stream)
        ``data`` (L int32) and ``last``; one beat per input beat, except ARGMAX: one
        beat per row (at its ``last`` beat) with the row's index in lane 0.
    """

    def __init__(self, cfg: AccelConfig):
        L = LineUnit.lanes_of(cfg)
        if L % 2:
            raise ValueError(f"line width {L} (cols={cfg.cols}, line_lanes={cfg.line_lanes}) must be even: "
                             f"ROPE rotates pairs of lanes")
        line = LineUnit.line(cfg)
        super().__init__(cfg, {"op": 3, "a": line, "b": line, "shift": signed(10), "first": 1, "last": 1,
                               "n": range(L + 1)},
                         {"data": line, "last": 1})

    def elaborate(self, platform):
        m = Module()
        C = self.lanes
        i, o = self.i_stream, self.o_stream
        en = Signal()
        m.d.comb += [en.eq(~o.valid | o.ready), i.ready.eq(en)]
        fire = i.valid & i.ready

        # ---- stage 0: the beat registered, so that the lane operands (muxed by the sequencer from the
        # instruction and the buffer line) and the multipliers are stages of their own ----
        v0 = Signal()
        p = Signal(i.payload.shape())
        with m.If(en):
            m.d.sync += [v0.eq(fire), p.eq(i.payload)]

        # ---- stage 1: product or sum per lane; the line's first maximum for ARGMAX ----
        v1, op1, last1, first1 = Signal(), Signal(3), Signal(), Signal()
        s1 = Signal(signed(10))
        x1 = [Signal(signed(64), name=f"x1_{c}") for c in range(C)]
        with m.If(en):
            m.d.sync += [v1.eq(v0), op1.eq(p.op), last1.eq(p.last), first1.eq(p.first),
                         s1.eq(Mux(p.op == VecOp.ADD, 0, Mux(p.op == VecOp.ROPE, TRIG_FRAC, p.shift)))]
            for c in range(C):
                # ROPE: lane 2j gives x0*cos - x1*sin, lane 2j+1 x0*sin + x1*cos (cos/sin of pair j)
                j, x0, xo = c // 2, p.a[c - c % 2], p.a[c - c % 2 + 1]
                cs, sn = p.b[j], p.b[C // 2 + j]
                rot = (x0 * cs - xo * sn) if c % 2 == 0 else (x0 * sn + xo * cs)
                m.d.sync += x1[c].eq(Mux(p.op == VecOp.ADD, p.a[c] + p.b[c],
                                         Mux(p.op == VecOp.ROPE, rot, p.a[c] * p.b[c])))
        # first maximum among the first n lanes: a left-to-right scan keeps the earliest on ties
        best, lane = p.a[0], Const(0, range(C))
        for c in range(1, C):
            take = (c < p.n) & (p.a[c] > best)
            nb, nl = Signal(signed(32), name=f"amax_v{c}"), Signal(range(C), name=f"amax_l{c}")
            m.d.comb += [nb.eq(Mux(take, p.a[c], best)), nl.eq(Mux(take, c, lane))]
            best, lane = nb, nl
        lmax1, llane1, any1 = Signal(signed(32)), Signal(range(C)), Signal()
        with m.If(en):
            m.d.sync += [lmax1.eq(best), llane1.eq(lane), any1.eq(p.n != 0)]

        # ---- stage 2: shift / saturate; ARGMAX running maximum over the row's lines ----
        outs = [rshift_round_sat32(m, x1[c], s1, f"sat_{c}") for c in range(C)]
        run_max = Signal(signed(32))
        run_idx = Signal(16)
        line_no = Signal(16)  # beats seen in this row before the current one
        idx = Signal(32)
        m.d.comb += idx.eq(llane1 + Mux(first1, 0, line_no) * C)
        # strict: an equal later maximum keeps the first index; a beat wholly past n (L < cols) counts not
        better = first1 | (any1 & (lmax1 > run_max))
        new_max = Mux(better, lmax1, run_max)
        new_idx = Mux(better, idx, run_idx)
        is_amax = op1 == VecOp.ARGMAX
        v2 = Signal()
        with m.If(en):
            m.d.sync += v2.eq(v1 & (~is_amax | last1))
            m.d.sync += o.payload.last.eq(last1)
            with m.If(v1 & is_amax):
                m.d.sync += [run_max.eq(new_max), run_idx.eq(new_idx),
                             line_no.eq(Mux(last1, 0, Mux(first1, 1, line_no + 1)))]
                m.d.sync += o.payload.data[0].eq(new_idx)
                m.d.sync += [o.payload.data[c].eq(0) for c in range(1, C)]
            with m.Else():
                m.d.sync += [o.payload.data[c].eq(outs[c]) for c in range(C)]
        m.d.comb += o.valid.eq(v2)
        return m
