"""Quant unit: QUANT (``split`` 0 and 1) over fixed-point rows, bit-exact with numerics.quant_rows(_split).

A row's power-of-two scale depends on its largest magnitude, so, like the
:class:`~systolica.hw.norm_unit.NormUnit`, the row streams in more than once — from the
vector buffer, one beat of ``L`` int32 lanes per cycle (:mod:`~systolica.hw.line_unit`) — instead of being held here:

1. ``HDR``: ``split``; ``empty`` = 1 when the row has no lines (QUANT ``lines = 0``: no
   pass follows, the unit still writes the zero-row exponent(s)).
2. MAX pass: the row -> ``hi = max(0, max x)``, ``lo = min(0, min x)`` (clamping at 0 changes
   neither ``A = max(hi, -lo)`` nor the overflow test, and makes an empty row ``A = 0``).
3. one cycle: ``s0 = bitlen(A) - 7``; one cycle: ``s = s0 + (rsr(hi, s0) > 127 | rsr(lo, s0) < -127)``,
   and the **exponent line** of block 0 goes out (lane 0 = ``e = s - 16``, other lanes 0).
   An all-zero row gives ``s = -7``, ``e = QUANT_ZERO_EXP`` with no special case.
4. Q pass: the row -> one int8 line per input line, ``q = rsr(x, s)``.  With ``split = 1``
   the same pass also tracks ``max`` / ``min`` of the residual
   ``r = sat32(x - dequant(q, e))`` (``dequant = sat32(q << s)`` for ``s > 0``; ``r = 0``
   for ``s <= 0``, where ``q = x << -s`` is exact) — which is the low ``s`` bits of ``x`` read
   as a signed number (plus one where ``q << s`` saturates), a bit-select rather than arithmetic.
5. ``split = 1`` only: steps 3 and 4 again for the residual — its exponent line (block 1),
   then an R pass where the row streams a third time and ``q_lo = rsr(r, s_lo)`` goes out,
   ``r`` recomputed from ``x`` and the stored ``s`` of block 0 (no row buffer).

Input passes per row: 2 (``split = 0``) or 3 (``split = 1``); each ends with ``last``.
``rsr`` is ``numerics.rshift_round``.  Cycles per row of ``L`` lines at full rate:
``2L + 3`` (``split = 0``), ``3L + 5`` (``split = 1``); the output register overlaps the next row.

Sequencer contract (QUANT ``dst``, ``src``, ``exps``, ``rows``, ``lines``, ``split``), per row
``r`` in order: one header beat, then the ``L = lines`` lines of ``src + r*L`` (the max pass), the
same lines again (the Q pass) and, with ``split``, a third time (the R pass), ``last`` on each
pass's line ``L - 1`` (``lines = 0``: the header alone); ``i_stream.ready`` is low between passes
(step 3), so a line read ahead must be held until it is taken.  Outputs per row, in order: exponent line of block 0 (``exp = 1``,
``blk = 0``) -> spad ``exps + r``; ``L`` q lines (``exp = 0``, ``blk = 0``) -> spad
``dst + r*L + l``; with ``split``: exponent line (``blk = 1``) -> spad ``exps + rows + r``, then
``L`` lo lines (``blk = 1``) -> spad ``dst + (rows + r)*L + l``.  ``last`` marks the row's final
output beat.  An empty row (``lines = 0``) gives only the exponent line(s).
Counted in buffer lines of ``cols`` elements: with ``cfg.line_width < cols`` each line is
``cols / line_width`` beats (:mod:`~systolica.hw.line_serial`), ``last`` on a pass's final beat,
and the cycle counts above are in beats.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed, unsigned

from systolica.config import AccelConfig
from systolica.numerics import FX_FRAC

from .fixed import bitlen_u
from .line_unit import HDR, ROW, LineUnit, registered_output, tree

__all__ = ["QuantUnit"]

MAX_LEFT = 7  # s >= bitlen(0) - 7: q = x << 7 at most (then |x| < 1, q exact)


def _round_shift8(m: Module, x, s, name: str):
    """Low 8 bits of ``numerics.rshift_round(x, s)`` for int32 ``x`` and ``-7 <= s <= 26``.

    With ``t = x << 8`` and ``sh = s + 7``, the 9 bits of ``t >> sh`` are ``x >> s`` above the
    rounding bit ``(x >> (s - 1)) & 1`` (0 for ``s <= 0``, where ``x << -s`` is exact): one
    34-position shifter of 9 output bits and an 8-bit increment per lane.  Callers use it
    where the result is known to fit int8.
    """
    sh = Signal(range(MAX_LEFT + 27), name=f"{name}_sh")  # s + 7: 0..33
    m.d.comb += sh.eq(s + MAX_LEFT)
    w = Signal(9, name=f"{name}_w")
    m.d.comb += w.eq((x << (MAX_LEFT + 1)) >> sh)
    out = Signal(signed(8), name=name)
    m.d.comb += out.eq(w[1:9] + w[0])
    return out


class QuantUnit(LineUnit):
    """``L``-lane QUANT (``L = cfg.line_width``; see the module docstring for the passes and the contract).

    Attributes
    ----------
    i_stream : In(stream)
        ``kind`` (0 header, 1 row beat), ``data`` (L int32, fx), ``last``; header fields
        ``split`` and ``empty``.
    o_stream : Out(stream)
        ``data`` (L int8), ``exp`` (1: an exponent line), ``blk`` (0: the int8 part, 1: the
        residual), ``last`` (the row's final output).
    error : Out(1)
        Sticky: a beat of the wrong kind arrived (it is consumed and ignored).
    """

    def __init__(self, cfg: AccelConfig):
        super().__init__(cfg, {"kind": 1, "data": LineUnit.line(cfg), "last": 1, "split": 1, "empty": 1},
                         {"data": LineUnit.line(cfg, signed(8)), "exp": 1, "blk": 1, "last": 1}, error=True)

    def elaborate(self, platform):
        m = Module()
        C = self.lanes
        i, o = self.i_stream, self.o_stream
        p = i.payload
        fire = i.valid & i.ready

        en = registered_output(m, o)
        load = Signal()
        ob = Signal(self.o_layout)
        with m.If(load):
            m.d.sync += [o.valid.eq(1), o.payload.eq(ob)]

        split, empty, blk = Signal(), Signal(), Signal()
        hi, lo = Signal(signed(33)), Signal(signed(33))  # running max(0, x) / min(0, x) of the block's values
        rhi, rlo = Signal(signed(33)), Signal(signed(33))  # the same for the residual, during the Q pass
        s0 = Signal(signed(7))
        sq, sr = Signal(signed(7)), Signal(signed(7))  # s of block 0 (int8 part) and block 1 (residual)

        # ---- per lane: q = rsr(x, sq); r = sat32(x - sat32(q << sq)) (0 for sq <= 0); lo = rsr(r, sr).
        # x - (q << s) with q = rsr(x, s) is the low s bits of x read as a signed s-bit number, so r
        # needs no shifter or subtractor: bit j is x[j] below s and x[s - 1] from s up.  The inner
        # sat32 bites only when q << s = 2**31 exactly (q = 64, s = 25 or q = 32, s = 26; q << s
        # never rounds below -2**31), and then makes r one larger.
        spos = Signal(range(26), name="sq_m1")
        m.d.comb += spos.eq(Mux(sq > 0, sq - 1, 0))
        keep = [Signal(name=f"keep_{j}") for j in range(32)]  # thermometer code of sq: bit j < sq
        m.d.comb += [keep[j].eq(sq > j) for j in range(32)]
        q_hi, q_lo, res = [], [], []
        for c in range(C):
            x = p.data[c]
            qh = _round_shift8(m, x, sq, f"qh_{c}")
            sign = x.bit_select(spos, 1)
            low = Signal(signed(32), name=f"low_{c}")
            m.d.comb += low.eq(Cat(*[Mux(keep[j], x[j], sign) for j in range(32)]))
            sat_fix = ((sq == 25) & (qh == 64)) | ((sq == 26) & (qh == 32))
            r = Signal(signed(32), name=f"res_{c}")
            m.d.comb += r.eq(Mux(sq > 0, low + sat_fix, 0))
            q_hi.append(qh)
            q_lo.append(_round_shift8(m, r, sr, f"ql_{c}"))
            res.append(r)

        # one pair of comparator trees serves both the max pass (over x, into hi / lo) and the Q
        # pass (over the residuals, into rhi / rlo): the two never run at once
        in_q = Signal()
        vals = [Mux(in_q, res[c], p.data[c]) for c in range(C)]
        mx = tree([Mux(in_q, rhi, hi), *vals], lambda a, b: Mux(a > b, a, b))
        mn = tree([Mux(in_q, rlo, lo), *vals], lambda a, b: Mux(a < b, a, b))

        wrong = Signal()
        with m.If(fire & wrong):
            m.d.sync += self.error.eq(1)

        with m.FSM(name="quant"):
            with m.State("HDR"):
                m.d.comb += [i.ready.eq(1), wrong.eq(p.kind != HDR)]
                with m.If(fire & ~wrong):
                    m.d.sync += [split.eq(p.split), empty.eq(p.empty), blk.eq(0), hi.eq(0), lo.eq(0), rhi.eq(0),
                                 rlo.eq(0)]
                    m.next = "MAX"
                    with m.If(p.empty):
                        m.next = "SCALE"
            with m.State("MAX"):
                m.d.comb += [i.ready.eq(1), wrong.eq(p.kind != ROW)]
                with m.If(fire & ~wrong):
                    m.d.sync += [hi.eq(mx), lo.eq(mn)]
                    with m.If(p.last):
                        m.next = "SCALE"
            with m.State("SCALE"):
                a = Signal(unsigned(33))
                m.d.comb += a.eq(Mux(hi > -lo, hi, -lo))
                m.d.sync += s0.eq(bitlen_u(m, a, 33, "a_bitlen") - 7)
                m.next = "EXP"
            with m.State("EXP"):
                # rounding at s0 may carry the maximum to 128 (or the minimum to -128): one more bit
                # |x| < 2**(s0 + 7) keeps rsr(x, s0) within -128..128, so the 8-bit shifter's
                # -128 (0x80) flags exactly a 128 from hi or a -128 from lo
                over = ((_round_shift8(m, hi, s0, "hi_r") == -128) | (_round_shift8(m, lo, s0, "lo_r") == -128))
                s = Signal(signed(7))
                m.d.comb += s.eq(s0 + over)
                m.d.comb += [ob.exp.eq(1), ob.blk.eq(blk), ob.data[0].eq(s - FX_FRAC),
                             ob.last.eq(empty & (blk | ~split))]
                with m.If(en):
                    m.d.comb += load.eq(1)
                    with m.If(blk):
                        m.d.sync += sr.eq(s)
                    with m.Else():
                        m.d.sync += sq.eq(s)
                    with m.If(empty):
                        m.next = "HDR"
                        with m.If(split & ~blk):  # the residual of an empty row: empty too
                            m.d.sync += blk.eq(1)
                            m.next = "SCALE"
                    with m.Elif(blk):
                        m.next = "RPASS"
                    with m.Else():
                        m.next = "QPASS"
            with m.State("QPASS"):
                m.d.comb += [i.ready.eq(en | wrong), wrong.eq(p.kind != ROW)]
                m.d.comb += [ob.data[c].eq(q_hi[c]) for c in range(C)]
                m.d.comb += [ob.blk.eq(0), ob.last.eq(p.last & ~split)]
                m.d.comb += in_q.eq(1)
                with m.If(fire & ~wrong):
                    m.d.comb += load.eq(1)
                    m.d.sync += [rhi.eq(mx), rlo.eq(mn)]
                    with m.If(p.last):
                        m.next = "HDR"
                        with m.If(split):
                            m.d.sync += [blk.eq(1), hi.eq(mx), lo.eq(mn)]
                            m.next = "SCALE"
            with m.State("RPASS"):
                m.d.comb += [i.ready.eq(en | wrong), wrong.eq(p.kind != ROW)]
                m.d.comb += [ob.data[c].eq(q_lo[c]) for c in range(C)]
                m.d.comb += [ob.blk.eq(1), ob.last.eq(p.last)]
                with m.If(fire & ~wrong):
                    m.d.comb += load.eq(1)
                    with m.If(p.last):
                        m.next = "HDR"
        return m
