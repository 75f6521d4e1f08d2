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

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data

from systolica.config import AccelConfig
from systolica.numerics import TRIG_FRAC

from .fixed import INT32_MAX, INT32_MIN, bitlen_exceeds, bitlen_parts
from .line_unit import LineUnit, Stages

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

    #: stages from the input register to the output register (both counted)
    LATENCY = 1 + 1 + Stages.mul_latency(32, 32) + 1 + 4

    def elaborate(self, platform):
        m = Module()
        C = self.lanes
        i, o = self.i_stream, self.o_stream
        en = Signal()
        m.d.comb += [en.eq(~o.valid | o.ready), i.ready.eq(en)]
        fire = i.valid & i.ready
        st = Stages(m, en)

        # ---- stage 0: the beat registered, so that the lane operands (muxed by the sequencer from the
        # instruction and the buffer line) and the multipliers are stages of their own ----
        v0 = Signal()
        p = Signal(i.payload.shape(), reset_less=True)  # data: read in the stage after v0
        with m.If(en):
            m.d.sync += [v0.eq(fire), p.eq(i.payload)]

        # ---- stage 1: every op is x = P1 +- P2 of two 32 x 32 products per lane, the sign fixed by the
        # lane's parity (ROPE: lane 2j gives x0*cos - x1*sin, lane 2j+1 x0*sin + x1*cos; MUL / REQUANT:
        # a*b + 0; ADD: a*1 -+ b*(-+1)), so the operands are the only muxes and no product is
        # selected after the multipliers.  The shift k = clamp(s, -33, 63) + 33 of the one right shifter
        # (hw/fixed.py's rshift_round_var with its left shifts folded in) is needed only after the
        # products, so it is decoded over three stages of their way: the op's shift (stage 1), the
        # compares and the add side by side (stage 2), their selection (stage 3); one carry chain a stage.
        is_add, is_rope = p.op == VecOp.ADD, p.op == VecOp.ROPE
        s1 = st.reg(Mux(is_add, 0, Mux(is_rope, TRIG_FRAC, p.shift)), "s1", signed(10))
        # a left shift of 32 or more places saturates any non-zero x: s < -32 shifts as s = -32 (k = 1, so
        # that k >= 1 and the fit test below holds for x = 0 too)
        hi2, lo2 = st.reg(s1 > 63, "s_hi"), st.reg(s1 < -32, "s_lo")
        ks2 = st.reg((s1 + 33)[:7], "s_k", unsigned(7))  # s + 33 in 1..96 where neither flag is set
        k1 = st.reg(Mux(hi2, 0, Mux(lo2, 1, ks2)), "k1", unsigned(7))
        z1 = st.reg(hi2, "z1")  # rshift_round of 64 or more places: 0
        xs = []
        for c in range(C):
            j, x0, xo = c // 2, p.a[c - c % 2], p.a[c - c % 2 + 1]
            cs, sn = p.b[j], p.b[C // 2 + j]
            sign = -1 if c % 2 == 0 else 1
            a1 = st.reg(Mux(is_rope, x0, p.a[c]), f"a1_{c}", signed(32))
            b1 = st.reg(Mux(is_rope, cs if c % 2 == 0 else sn, Mux(is_add, 1, p.b[c])), f"b1_{c}", signed(32))
            a2 = st.reg(Mux(is_rope, xo, Mux(is_add, p.b[c], 0)), f"a2_{c}", signed(32))
            b2 = st.reg(Mux(is_rope, sn if c % 2 == 0 else cs, sign), f"b2_{c}", signed(32))
            # ---- stages 2 ..: the products, pieces for 18 x 18 multipliers summed a carry chain a stage
            p1, p2 = st.mul(a1, b1, f"m1_{c}"), st.mul(a2, b2, f"m2_{c}")
            xs.append(st.reg(p1 - p2 if sign < 0 else p1 + p2, f"x_{c}", signed(64)))
        dm = Stages.mul_latency(32, 32) + 1  # stages from the operand registers to x
        assert dm >= 2, dm  # k1 / z1 are two stages past the operand registers
        k, z = st.delay(k1, dm - 2, "k"), st.delay(z1, dm - 2, "z")
        # ---- then sat32(rshift_round(x, s)) in four stages, no shifter wider than its result: t = x >> (s - 1)
        # = (x << 34) >> k is wanted only as its low 34 bits T (a window of x) and whether t fits 34 bits at
        # all, which is bitlen(x ^ sign) < k (a right shift by r fits W bits iff bitlen <= W - 1 + r, a left
        # shift by -r the same, x = 0 included as k >= 1).  Stage A: the window by 8-place steps (41 bits:
        # what the fine step reads) beside bitlen; B: the remaining 0..7 places and the fit test; C: y = (T +
        # 1) >> 1 and whether it saturates; then the output
        ka = st.reg(k, "ka")
        # k - 1 (signed: k = 0 where the shift is 64 or more), so that the fit test compares the bit length's
        # top index with it and no incrementer follows the bit-length tree (hw/fixed.py bitlen_parts)
        kam1 = st.reg(Cat(k, Const(0, 1)).as_signed() - 1, "ka_m1", signed(8))
        outs = []
        for c in range(C):
            x = xs[c]
            wide = Cat(Const(0, 34), x).as_signed()  # x << 34
            tc = st.reg((wide >> Cat(Const(0, 3), k[3:]))[:41], f"tc_{c}", unsigned(41))
            mag = Signal(63, name=f"vu_mag_{c}")
            m.d.comb += mag.eq(x[:63] ^ x[63].replicate(63))
            blv, blp = bitlen_parts(m, mag, 63, f"vu_bitlen_{c}")
            bl_v, bl_p = st.reg(blv, f"bl_v_{c}"), st.reg(blp, f"bl_p_{c}", unsigned(6))
            neg_a = st.reg(x[63], f"neg_a_{c}")
            t = st.reg((tc >> ka[:3])[:34], f"t_{c}", unsigned(34))
            fits = st.reg(~bitlen_exceeds(bl_v, bl_p, kam1), f"fits_{c}")  # bitlen < k
            neg = st.reg(neg_a, f"neg_{c}")
            # y = (T + 1) >> 1 saturates high when T >= 2**32 - 1, low when T <= -2**32 - 2: flags from T's two
            # top bits and whether its low 32 are all ones (no compare on y's carry chain)
            ones, top = t[:32] == (1 << 32) - 1, t[32:34]
            smax = st.reg(Mux(fits, (top == 0b01) | ((top == 0b00) & ones), ~neg), f"smax_{c}")
            smin = st.reg(Mux(fits, (top == 0b10) & ~ones, neg), f"smin_{c}")
            y = st.reg((t + 1)[1:33], f"y_{c}", signed(32))
            outs.append(Mux(smax, INT32_MAX, Mux(smin, INT32_MIN, y)))
        zo = st.delay(z, 3, "zo")

        # ---- ARGMAX, from stage 0: the line's first maximum among the first n lanes, by a balanced tree
        # (the lower lanes' node wins ties), each level a compare stage then a select stage (a 32-bit
        # compare and the select it drives were 11 ns on ECP5), or both in one stage where the levels
        # would outgrow the stages left before the output; then the running maximum over the row's lines,
        # whose result waits in registers until the others ops' results reach the output ----
        rest = self.LATENCY - 2  # stages from stage 1 to the output register
        levels = (C - 1).bit_length()
        split = 2 * levels - 1 <= rest - 2
        extra = (2 if split else 1) * levels - 1  # stages the tree adds to the one stage of the old scan
        # the lanes' values from a copy of stage 0's `a` of its own (initially all ones, so that Yosys keeps it
        # apart): the tree's first compares sit beside it, not wherever the multipliers pulled `p.a` (ulx3s:
        # `p.a` -> the 32-bit compare -> `am_t0`, 10.8 ns, most of it routing)
        am_a = [Signal(signed(32), name=f"am_a_{c}", init=-1, reset_less=True) for c in range(C)]
        with m.If(en):
            m.d.sync += [am_a[c].eq(i.payload.a[c]) for c in range(C)]
        nodes = [(Const(1, 1) if c == 0 else (c < p.n), am_a[c], Const(c, range(C))) for c in range(C)]
        for lv in range(levels):
            nxt = []
            for j in range(0, len(nodes) - 1, 2):
                (lv_, lx, li), (rv, rx, ri) = nodes[j], nodes[j + 1]
                take = rv & (~lv_ | (rx > lx))
                if split:  # the compare's result and both candidates registered, the select a stage later
                    tk = st.reg(take, f"am_t{lv}_{j}")
                    lv_, lx, li = (st.reg(v, f"am_l{lv}_{j}_{k}") for k, v in enumerate((lv_, lx, li)))
                    rv, rx, ri = (st.reg(v, f"am_r{lv}_{j}_{k}") for k, v in enumerate((rv, rx, ri)))
                    take = tk
                sel = (lv_ | rv, Mux(take, rx, lx), Mux(take, ri, li))
                nxt.append(tuple(st.reg(v, f"am_n{lv}_{j}_{k}", sh)
                                 for k, (v, sh) in enumerate(zip(sel, (1, signed(32), range(C)), strict=False))))
            if len(nodes) % 2:  # the odd node out waits as many stages as a pair
                nxt.append(tuple(st.delay(v, 2 if split else 1, f"am_o{lv}_{k}") for k, v in enumerate(nodes[-1])))
            nodes = nxt
        _, lmax1, llane1 = nodes[0]
        v1, op1, last1, first1 = Signal(), Signal(3), Signal(), Signal()
        any1 = Signal()
        with m.If(en):
            m.d.sync += [v1.eq(v0), op1.eq(p.op), last1.eq(p.last), first1.eq(p.first), any1.eq(p.n != 0)]
        if extra:  # the beat's side values meet its line maximum
            v1 = st.delay(v1, extra, "am_v", control=True)
            op1, last1, first1, any1 = (st.delay(v, extra, f"am_s{k}") for k, v in enumerate((op1, last1, first1, any1)))
        # the running maximum is a loop (each beat compares with the maximum after the one before), so
        # that a stage holds one compare, both compares of a beat are made a stage early, against the
        # beat ahead of it (lmax2) and against run_max from before that beat; the beat ahead's
        # decision then picks one (better2 = whether it became the maximum)
        run_max = Signal(signed(32))
        run_idx = Signal(16)
        line_no = Signal(16)  # beats seen in this row before the current one
        is_amax1 = op1 == VecOp.ARGMAX
        v2, last2, first2, any2 = Signal(), Signal(), Signal(), Signal()
        lmax2, llane2 = Signal(signed(32)), Signal(range(C))
        gt_ahead, gt_run, ahead = Signal(), Signal(), Signal()
        with m.If(en):
            m.d.sync += [v2.eq(v1 & is_amax1), last2.eq(last1), first2.eq(first1), any2.eq(any1),
                         lmax2.eq(lmax1), llane2.eq(llane1),
                         gt_ahead.eq(lmax1 > lmax2), gt_run.eq(lmax1 > run_max), ahead.eq(v2)]
        better2 = Signal()  # the decision of the last ARGMAX beat
        idx = Signal(32)
        m.d.comb += idx.eq(llane2 + Mux(first2, 0, line_no) * C)
        # strict: an equal later maximum keeps the first index; a beat wholly past n (L < cols) counts not
        better = first2 | (any2 & Mux(ahead & better2, gt_ahead, gt_run))
        new_idx = Mux(better, idx, run_idx)
        with m.If(en & v2):
            m.d.sync += [run_max.eq(Mux(better, lmax2, run_max)), run_idx.eq(new_idx), better2.eq(better),
                         line_no.eq(Mux(last2, 0, Mux(first2, 1, line_no + 1)))]
        am_idx = st.delay(new_idx, rest - 2 - extra, "am_idx", signed(32))
        side = data.StructLayout({"valid": 1, "last": 1, "amax": 1})
        sv = Signal(side)
        m.d.comb += [sv.valid.eq(v1 & (~is_amax1 | last1)), sv.last.eq(last1), sv.amax.eq(is_amax1)]
        sv = st.delay(sv, rest - 1 - extra, "side", side, control=True)
        with m.If(en):
            m.d.sync += [o.valid.eq(sv.valid), o.payload.last.eq(sv.last)]
            for c in range(C):
                m.d.sync += o.payload.data[c].eq(Mux(sv.amax, am_idx if c == 0 else 0, Mux(zo, 0, outs[c])))
        return m
