"""Quant unit: QUANT (``split`` 0 and 1) over fixed-point rows, bit-exact with numerics.quant_rows(_split).

A row's power-of-two scale depends on its largest magnitude, so, like the
:class:`~systolica.hw.norm_unit.NormUnit`, the row streams in more than once — from the
vector buffer, one beat of ``L`` int32 lanes per cycle (:mod:`~systolica.hw.line_unit`) — instead of being held here:

1. ``HDR``: ``split``; ``empty`` = 1 when the row has no lines (QUANT ``lines = 0``: no
   pass follows, the unit still writes the zero-row exponent(s)).
2. MAX pass: the row -> ``hi = max(0, max x)``, ``lo = min(0, min x)`` (clamping at 0 changes
   neither ``A = max(hi, -lo)`` nor the overflow test, and makes an empty row ``A = 0``).
3. ``s0 = bitlen(A) - 7``, then ``s = s0 + (rsr(hi, s0) > 127 | rsr(lo, s0) < -127)``,
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

Every pass's beats go through a pipeline of five stages (the beat; q and the residual's low bits;
r; the first compares of the beat's lanes and the residual's q, into the output register; the
beat's max / min over its lanes), so a pass's statistics are complete 5 cycles after its last
beat; the scale then takes 5 states (``max(hi, -lo)``, its bit length, a wait for the carry
test's decode, the carry test, the exponent line).

Input passes per row: 2 (``split = 0``) or 3 (``split = 1``); each ends with ``last``.
``rsr`` is ``numerics.rshift_round``.  Cycles per row of ``L`` lines at full rate:
``2L + 11`` (``split = 0``), ``3L + 21`` (``split = 1``); the output register overlaps the next row.

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
from amaranth.lib import data

from systolica.config import AccelConfig
from systolica.numerics import FX_FRAC

from .attn_fsm import OneHotFSM
from .fixed import bitlen_tree
from .line_unit import HDR, ROW, LineUnit, registered_output, tree

__all__ = ["QuantUnit"]

MAX_LEFT = 7  # s >= bitlen(0) - 7: q = x << 7 at most (then |x| < 1, q exact)

#: the quant unit's states, in a one-hot machine (hw/attn_fsm.py): the first is the reset state
_STATES = ("HDR", "MAX", "SCALE0", "SCALE1", "EXP0", "EXP0B", "EXP1", "QPASS", "RPASS")


def _round_shift8(m: Module, x, sh, name: str):
    """Low 8 bits of ``numerics.rshift_round(x, s)`` for int32 ``x``, ``-7 <= s <= 26`` and ``sh = s + 7``.

    With ``t = x << 8``, the 9 bits of ``t >> sh`` are ``x >> s`` above the rounding bit
    ``(x >> (s - 1)) & 1`` (0 for ``s <= 0``, where ``x << -s`` is exact): one 34-position shifter
    of 9 output bits and an 8-bit increment per lane.  Callers use it where the result is known to
    fit int8, and keep ``sh`` in a register of its own (no add in front of the shifter).
    """
    out = Signal(signed(8), name=name)
    m.d.comb += out.eq(_round9(_shift9(m, x, sh, name)))
    return out


def _shift9(m: Module, x, sh, name: str):
    """The shifter of :func:`_round_shift8`: ``x >> s`` and the rounding bit below it (9 bits)."""
    w = Signal(9, name=f"{name}_w")
    m.d.comb += w.eq((x << (MAX_LEFT + 1)) >> sh)
    return w


def _round9(w):
    """The increment of :func:`_round_shift8`: the 9 bits of :func:`_shift9`, rounded to 8."""
    return (w[1:9] + w[0])[:8].as_signed()


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
        nlo, nrlo = Signal(signed(34)), Signal(signed(34))  # -lo and -rlo, folded beside them (no negation in SCALE0)
        s0 = Signal(signed(7))
        s0sh = Signal(range(MAX_LEFT + 27))  # s0 + 7
        a_r = Signal(unsigned(33))
        over = Signal()
        sq, sr = Signal(signed(7)), Signal(signed(7))  # s of block 0 (int8 part) and block 1 (residual)
        sq_sh, sr_sh = Signal(range(MAX_LEFT + 27)), Signal(range(MAX_LEFT + 27))  # s + 7 of each
        sq_pos = Signal()  # sq > 0
        sq25, sq26 = Signal(), Signal()  # sq == 25, sq == 26
        spos = Signal(range(26), name="sq_m1")  # max(sq - 1, 0)
        keep = Signal(32)  # thermometer code of sq: bit j < sq

        # ---- the beat pipeline of the max, Q and R passes (every stage moves with the output register, `en`):
        # 0 the beat;  1 x, q = rsr(x, sq) (8 bits), and the low sq bits of x with the sign of bit sq - 1;
        # 2 r = sat32(x - sat32(q << sq)) (0 for sq <= 0);  3 the compares of the beat's lanes in pairs (of x in
        # the max pass, of r in the Q pass) and lo = rsr(r, sr) (R pass);  then the output register takes q or
        # lo;  4 the beat's max / min over its lanes, and hi / lo (max pass) or rhi / rlo (Q pass) take them.
        # x - (q << s) with q = rsr(x, s) is the low s bits of x read as a signed number, so r needs no shifter
        # or subtractor: bit j is x[j] below s and x[s - 1] from s up.  The inner sat32 bites only when q << s =
        # 2**31 exactly (q = 64, s = 25 or q = 32, s = 26; q << s never rounds below -2**31), and then makes r
        # one larger.
        # the states are flags of a one-hot machine (hw/attn_fsm.py), the three passes one more (`in_pass`): `ready`,
        # `take` and the transitions at a pass's last beat are a LUT or two after the beat's valid / kind / last
        # (the binary state's decode and next-state logic behind them were the quant unit's slowest paths, ulx3s)
        fsm = OneHotFSM(m, _STATES, "quant")
        in_pass = fsm.group("pass", ("MAX", "QPASS", "RPASS"))
        wrong = Signal()
        m.d.comb += [wrong.eq(Mux(fsm["HDR"], p.kind != HDR, p.kind != ROW)),
                     i.ready.eq(fsm["HDR"] | (in_pass & (en | wrong)))]
        take = Signal()  # a beat enters (the pass is its stage-0 control's mx / q / r: the state's flag)
        m.d.comb += take.eq(in_pass & i.valid & en & ~wrong)
        mxp, qp, rp = fsm["MAX"], fsm["QPASS"], fsm["RPASS"]
        ctl_l = data.StructLayout({"v": 1, "mx": 1, "q": 1, "r": 1, "last": 1, "split": 1})  # the row's split
        c0, c1, c2, c3, c4 = (Signal(ctl_l, name=f"quant_c{j}") for j in (0, 1, 2, 3, 4))
        with m.If(en):
            m.d.sync += [c0.v.eq(take), c0.mx.eq(mxp), c0.q.eq(qp), c0.r.eq(rp), c0.last.eq(p.last), c0.split.eq(split),
                         c1.eq(c0), c2.eq(c1), c3.eq(c2), c4.eq(c3)]
        x1, q1, low1, x2, q2, r2, q3, ql3 = [], [], [], [], [], [], [], []
        for c in range(C):
            def reg(shape, name, value, c=c):
                r = Signal(shape, name=f"{name}_{c}", reset_less=True)
                with m.If(en):
                    m.d.sync += r.eq(value)
                return r
            # stage 0 registers the beat as it came: the row-pass sequencer's slot select and stage 1's shifter
            # in one cycle were the ulx3s top level's largest group of late paths (qh1 / low1, 10.8 ns)
            x = reg(signed(32), "qx0", p.data[c])
            sign = x.bit_select(spos, 1)
            x1.append(reg(signed(32), "qx1", x))
            q1.append(reg(9, "qh1", _shift9(m, x, sq_sh, f"qh_{c}")))  # rounded in stage 2
            low1.append(reg(signed(32), "low1", Cat(*[Mux(keep[j], x[j], sign) for j in range(32)])))
            x2.append(reg(signed(32), "qx2", x1[c]))
            q2.append(reg(signed(8), "qh2", _round9(q1[c])))
            # q == 64 (32): the 9 shifted bits are 128 or 127 (64 or 63)
            sat_fix = ((sq25 & ((q1[c] == 128) | (q1[c] == 127))) | (sq26 & ((q1[c] == 64) | (q1[c] == 63))))
            r2.append(reg(signed(32), "res2", Mux(sq_pos, low1[c] + sat_fix, 0)))
            q3.append(reg(signed(8), "qh3", q2[c]))
            ql3.append(reg(9, "ql3", _shift9(m, r2[c], sr_sh, f"ql_{c}")))  # rounded into the output register
        # one pair of comparator trees serves both the max pass (over x) and the Q pass (over the residuals): the
        # first level's compares in stage 3 (their flags and the lanes registered), its selects and the rest in
        # stage 4 (the pass's select, the compare and the select in one stage were the quant unit's slowest path
        # on ECP5, 10.5 ns); the block's statistics take the beat's in stage 4, its output leaves from stage 3
        vals = [Mux(c2.q, r2[c], x2[c]) for c in range(C)]
        v3 = [Signal(signed(32), name=f"bval3_{c}", reset_less=True) for c in range(C)]
        gt3 = [Signal(name=f"bgt3_{j}", reset_less=True) for j in range(0, C - 1, 2)]  # lane j > lane j + 1
        lt3 = [Signal(name=f"blt3_{j}", reset_less=True) for j in range(0, C - 1, 2)]
        with m.If(en):
            m.d.sync += [v3[c].eq(vals[c]) for c in range(C)]
            m.d.sync += [g.eq(vals[2 * k] > vals[2 * k + 1]) for k, g in enumerate(gt3)]
            m.d.sync += [lt.eq(vals[2 * k] < vals[2 * k + 1]) for k, lt in enumerate(lt3)]
        # stage 4: the first level's selects by those flags, then the rest of the trees
        mx3 = [Mux(gt3[k], v3[2 * k], v3[2 * k + 1]) for k in range(len(gt3))] + v3[C - C % 2:]
        mn3 = [Mux(lt3[k], v3[2 * k], v3[2 * k + 1]) for k in range(len(lt3))] + v3[C - C % 2:]
        bmx, bmn = Signal(signed(33), reset_less=True), Signal(signed(33), reset_less=True)
        with m.If(en):
            m.d.sync += [bmx.eq(tree(mx3, lambda a, b: Mux(a > b, a, b))),
                         bmn.eq(tree(mn3, lambda a, b: Mux(a < b, a, b)))]
        # the pipeline holds no beat: a flip-flop computed a cycle ahead from the stages' valid bits as they move,
        # read only in SCALE0 (where no beat enters), so `take` stays out of it: after a pass's cycle (the one that
        # took its last beat) it reads 0, as the pipeline then is not empty
        pipe_empty = Signal(init=1, name="quant_pipe_empty")
        m.d.sync += pipe_empty.eq(~in_pass & Mux(en, ~c0.v & ~c1.v & ~c2.v & ~c3.v,
                                                 ~c0.v & ~c1.v & ~c2.v & ~c3.v & ~c4.v))
        with m.If(en & c3.v & (c3.q | c3.r)):
            m.d.comb += load.eq(1)
        with m.If(en & c4.v):
            with m.If(c4.mx):
                m.d.sync += [hi.eq(Mux(bmx > hi, bmx, hi)), lo.eq(Mux(bmn < lo, bmn, lo)),
                             nlo.eq(Mux(bmn < lo, -bmn, nlo))]
            with m.If(c4.q):
                m.d.sync += [rhi.eq(Mux(bmx > rhi, bmx, rhi)), rlo.eq(Mux(bmn < rlo, bmn, rlo)),
                             nrlo.eq(Mux(bmn < rlo, -bmn, nrlo))]
                with m.If(c4.last & c4.split):  # the residual's statistics become block 1's
                    m.d.sync += [hi.eq(Mux(bmx > rhi, bmx, rhi)), lo.eq(Mux(bmn < rlo, bmn, rlo)),
                                 nlo.eq(Mux(bmn < rlo, -bmn, nrlo))]
        with m.If(c3.q):
            m.d.comb += [ob.data[c].eq(q3[c]) for c in range(C)]
            m.d.comb += [ob.blk.eq(0), ob.last.eq(c3.last & ~c3.split)]
        with m.Elif(c3.r):
            m.d.comb += [ob.data[c].eq(_round9(ql3[c])) for c in range(C)]
            m.d.comb += [ob.blk.eq(1), ob.last.eq(c3.last)]

        with m.If(fire & wrong):
            m.d.sync += self.error.eq(1)
        # max(hi, -lo) and s0 = s0sh - 7, every cycle (no state in their enables): hi / nlo are final in SCALE0's
        # last cycle (the pipeline is empty), and s0sh from SCALE1 on (s0 is read from EXP0B on)
        m.d.sync += [a_r.eq(Mux(hi > nlo, hi, nlo)), s0.eq(s0sh - MAX_LEFT)]

        # what EXP1 derives from s = s0 + over, for both values of over: registered every cycle from s0
        # (final since SCALE1), so EXP1 only selects (no adder or comparison behind the carry test)
        t0 = Signal(33, reset_less=True)  # t0[j + 1] = s0 > j, j = -1..31
        s0p = [Signal(signed(7), name="s0_p1", reset_less=True), Signal(signed(8), name="e_p1", reset_less=True),
               Signal(signed(8), name="e_p0", reset_less=True), Signal(range(MAX_LEFT + 28), name="s0sh_p1",
                                                                      reset_less=True),
               *[Signal(name=f"s0_eq{v}", reset_less=True) for v in (24, 25, 26)],
               Signal(range(27), name="spos_p1", reset_less=True), Signal(range(27), name="spos_p0",
                                                                       reset_less=True)]
        m.d.sync += [t0.eq(Cat(*[s0 > j for j in range(-1, 32)])),
                     s0p[0].eq(s0 + 1), s0p[1].eq(s0 + 1 - FX_FRAC), s0p[2].eq(s0 - FX_FRAC), s0p[3].eq(s0sh + 1),
                     s0p[4].eq(s0 == 24), s0p[5].eq(s0 == 25), s0p[6].eq(s0 == 26),
                     s0p[7].eq(Mux(s0 >= 0, s0, 0)), s0p[8].eq(Mux(s0 > 0, s0 - 1, 0))]

        over_t = Signal(34, name="over_t", reset_less=True)  # T of EXP0B (below), a decode of s0sh
        over_8 = Signal(name="over_8", reset_less=True)
        m.d.sync += [over_t.eq(Cat(*[(s0sh >= k + 1) & (s0sh <= k + 8) for k in range(34)])), over_8.eq(s0sh >= 8)]

        with fsm.state("HDR"):
            # split and empty follow the header's fields through HDR (nothing reads them there): their enable is
            # the state's flag, not the beat's handshake
            m.d.sync += [split.eq(p.split), empty.eq(p.empty), blk.eq(0)]
            with m.If(i.valid & (p.kind == HDR)):  # fire & ~wrong: ready is high in HDR
                with m.If(p.empty):
                    fsm.goto("SCALE0")
                with m.Else():
                    fsm.goto("MAX")
        with fsm.state("MAX"), m.If(take & p.last):
            fsm.goto("SCALE0")
        with fsm.state("SCALE0"), m.If(pipe_empty):  # the block's max and min are in hi / lo, a_r follows them
            fsm.goto("SCALE1")
        with fsm.state("SCALE1"):
            m.d.sync += s0sh.eq(bitlen_tree(m, a_r, 33, "a_bitlen"))  # s0 = s0sh - 7 follows a cycle later
            fsm.goto("EXP0")
        with fsm.state("EXP0"):  # over_t and over_8 follow the s0sh of SCALE1 (registered every cycle)
            fsm.goto("EXP0B")
        with fsm.state("EXP0B"):
            # rounding at s0 may carry the maximum to 128 (or the minimum to -128): one more bit.
            # With bl = s0sh = bitlen(max(hi, -lo)) and s0 = bl - 7 >= 1, rsr(hi, s0) == 128 exactly when
            # hi >= T = 2**bl - 2**(bl - 8) (the eight bits below bl), and rsr(lo, s0) == -128 exactly when
            # -lo > T; for bl <= 7 the shift is an exact left shift and stays within -127..127.  T is a
            # decode of the register bl, registered a state before the two compares (the decode and a
            # compare in one cycle were the row-pass sequencer's slowest path on ECP5)
            m.d.sync += over.eq(over_8 & ((hi >= over_t) | (nlo > over_t)))
            fsm.goto("EXP1")
        with fsm.state("EXP1"):
            s = Signal(signed(7))
            m.d.comb += s.eq(Mux(over, s0p[0], s0))
            m.d.comb += [ob.exp.eq(1), ob.blk.eq(blk), ob.data[0].eq(Mux(over, s0p[1], s0p[2])),
                         ob.last.eq(empty & (blk | ~split))]
            with m.If(en):
                m.d.comb += load.eq(1)
                # the first row of the next pass uses s: hi / lo are free again for the next block
                m.d.sync += [hi.eq(0), lo.eq(0), rhi.eq(0), rlo.eq(0), nlo.eq(0), nrlo.eq(0)]
                with m.If(blk):
                    m.d.sync += [sr.eq(s), sr_sh.eq(Mux(over, s0p[3], s0sh))]
                with m.Else():
                    m.d.sync += [sq.eq(s), sq_sh.eq(Mux(over, s0p[3], s0sh)),
                                 sq_pos.eq(Mux(over, t0[0], t0[1])), sq25.eq(Mux(over, s0p[4], s0p[5])),
                                 sq26.eq(Mux(over, s0p[5], s0p[6])), spos.eq(Mux(over, s0p[7], s0p[8])),
                                 keep.eq(Cat(*[t0[j + 1] | (over & t0[j]) for j in range(32)]))]
                with m.If(empty):
                    with m.If(split & ~blk):  # the residual of an empty row: empty too
                        m.d.sync += blk.eq(1)
                        fsm.goto("SCALE0")
                    with m.Else():
                        fsm.goto("HDR")
                with m.Elif(blk):
                    fsm.goto("RPASS")
                with m.Else():
                    fsm.goto("QPASS")
        with fsm.state("QPASS"), m.If(take & p.last):
            with m.If(split):
                m.d.sync += blk.eq(1)
                fsm.goto("SCALE0")
            with m.Else():
                fsm.goto("HDR")
        with fsm.state("RPASS"), m.If(take & p.last):
            fsm.goto("HDR")
        return m
