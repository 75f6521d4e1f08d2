"""Softmax unit: SOFTMAX over fixed-point score rows, bit-exact with numerics.softmax.

Every output of a row needs the row's maximum and the sum of its exponentials, so the row
streams in three times — from the vector buffer, one beat of ``L`` int32 lanes per cycle (:mod:`~systolica.hw.line_unit`) — like
the :class:`~systolica.hw.norm_unit.NormUnit` (rows reach 65535 elements, too long to hold):

1. ``HDR``: ``n`` (elements of the row; the row is ``ceil(n / cols)`` lines, lanes past
   ``n`` in the last line are ignored).  ``n = 0``: no pass follows and nothing is written.
2. MAX pass: ``mx = max(x)``.
3. SUM pass: ``e = exp_fx(sat32(x - mx), 30)`` per lane (``u = rsr(d * LOG2E_Q30, 22)``, the
   256-entry ``EXP_BASE`` / ``EXP_DELTA`` tables with linear interpolation, a rounding
   shift by the integer part, as :func:`~systolica.hw.fixed.exp2_lookup`), ``S = sum(e)``
   (``< 2**47``).  Then ``y, k = recip(S)``
   (:class:`~systolica.hw.recip.Reciprocal`, 35 cycles): one reciprocal per row.
4. OUT pass: ``e`` again, and one output line per input line,
   ``p = sat32(rsr(e * y, k - 16))`` (``<= 2**16 + 1``: the shift is 44..60, see ``OSH_MIN``);
   lanes past ``n`` are written as 0 (the golden simulator's padded rows).

The max pass registers each beat's lanes before its comparator tree (one drain cycle). The SUM
and OUT passes run through a pipeline of one operation a stage, which stalls as a whole on output
back-pressure: the clamped difference; ``d * LOG2E_Q30`` (its 18 x 18 pieces, then two adds:
``fixed.mul_pipe``); ``u``'s rounding; the table read (a block RAM, and a register after it);
``delta * lo`` (pieces, then their add); the interpolation's rounding; ``+ base``; ``+ half``; the
shift by the integer part: ``e`` after 13 stages; then ``e * y`` (3 stages), its rounding half, and
the output register takes the 17-position shift.  The SUM pass waits for its last line to reach
``S`` (13 cycles) before the reciprocal starts; the output's shift and half are registered from
``k`` (1 cycle); the OUT pass hands over to the next row's header at once, its last lines drain
while the next max pass streams in.

Each pass ends with ``last``.  ``rsr`` is ``numerics.rshift_round``.  Cycles per row of
``L`` lines at full rate: ``3L + 51`` (the reciprocal's 35, the SUM drain 13, the max drain 1,
the output shift 1, the header 1).

Sequencer contract (SOFTMAX ``dst``, ``src``, ``rows``, ``n``): per row ``r``, one header beat,
then the ``L = ceil(n / cols)`` lines of ``src + r*L`` three times, ``last`` on line ``L - 1`` of
each pass; ``i_stream.ready`` is low between passes, so a line read ahead must be held until
taken.  The ``L`` output lines of row ``r`` go to vbuf ``dst + r*L + l`` in order; ``last``
marks the row's final line.  ``n = 0``: send no rows at all (SOFTMAX then writes nothing).
Counted in buffer lines of ``cols`` elements: with ``N = cfg.rowpass_width < cols`` each line is
``cols / N`` beats (:mod:`~systolica.hw.line_serial`), ``last`` on a pass's final beat,
and the cycle counts above are in beats.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory

from systolica.config import AccelConfig
from systolica.numerics import EXP_FRAC, FX_FRAC

from .fixed import INT32_MIN, delay_line, mul_pipe
from .line_unit import HDR, ROW, LineUnit, lane_mask, registered_output, tree
from .recip import Reciprocal

__all__ = ["SoftmaxUnit"]

SUM_BITS = 48  # S <= 65535 * 2**30 < 2**47, signed
assert EXP_FRAC == 30  # exp_fx at Q30: the final shift is -ip (no frac offset)
# exp_fx(d) = 0 for every d <= -32.0: u <= -46 * 2**24, so the final shift is its cap of 40 and
# (p + 2**39) >> 40 = 0 for p < 2**31.  Clamping d there keeps the bits and narrows the d * log2(e)
# product to 22 x 31 bits (two DSP48s instead of four).
D_MIN = -(32 << FX_FRAC)
# the output shift k - 16: S >= 2**30 (the maximum contributes exactly 2**30) and S < 2**47 give
# 60 <= k <= 76, so p = rsr(e * y, k - 16) shifts by 44..60 and p <= 2**16 + 1 (no saturation)
OSH_MIN, OSH_MAX = 44, 60


class SoftmaxUnit(LineUnit):
    """``N``-lane SOFTMAX (``N = cfg.rowpass_width``; see the module docstring for the passes and the contract).

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
        lanes = LineUnit.rowpass_lanes_of(cfg)
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

        m.submodules.recip = recip = Reciprocal(SUM_BITS, registered=True)
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
        ry, rk = Signal(unsigned(31), reset_less=True), Signal(unsigned(7))
        m.d.comb += recip.i_stream.payload.eq(ssum)

        lane_ok = lane_mask(m, li, n, C)

        # ---- the exp pipeline of the SUM and OUT passes, one operation a stage (every stage moves with the
        # output register, `adv`; a product takes its operands from registers and adds its 18 x 18 pieces in
        # stages of their own, hw/fixed.py mul_pipe):
        #   d = min(max(x - mx, D_MIN), 0) (the sat32 cannot bite inside the clamp);  l = d * LOG2E_Q30;
        #   u = (l + 2**21) >> 22 (= rsr(l, 22), <= 0);  the tables at u's bits 16..23, sh = min(-(u >> 24), 40);
        #   dl = delta * lo;  r = (dl + 2**15) >> 16;  p = base + r;  t = p + half(sh);  e = t >> sh (<= 2**30)
        # then a SUM beat adds e into S, an OUT beat goes on: e * y;  + half(k - 16);  the output register
        # takes the 18-bit result of the 17-position shift (`osh_rel`).
        adv = en
        into_pipe = Signal()
        in_out = Signal()
        ctl_l = data.StructLayout({"v": 1, "last": 1, "out": 1, "ok": data.ArrayLayout(1, C)})
        ctl = []  # ctl[j]: the control of the beat in stage j + 1

        def stage(name):
            c_ = Signal(ctl_l, name=f"sm_c{len(ctl) + 1}_{name}")
            with m.If(adv):
                if not ctl:
                    m.d.sync += [c_.v.eq(into_pipe), c_.last.eq(p.last), c_.out.eq(in_out)]
                    m.d.sync += [c_.ok[c].eq(lane_ok[c]) for c in range(C)]
                else:
                    m.d.sync += c_.eq(ctl[-1])
            ctl.append(c_)

        def delay(x, stages, name):
            return delay_line(m, adv, x, stages, name)

        thr = Signal(signed(34))  # mx + D_MIN, folded beside mx
        osh = Signal(range(OSH_MIN, OSH_MAX + 1))
        osh_rel = Signal(range(OSH_MAX - OSH_MIN + 1), reset_less=True)
        ohalf = Signal(unsigned(OSH_MAX), reset_less=True)  # 2**(osh - 1): rsr's rounding half
        m.d.comb += osh.eq(rk - FX_FRAC)
        e_lanes, prob = [], []
        for c in range(C):
            base_rd, delta_rd = base.read_port(domain="comb"), delta.read_port(domain="comb")
            dneg = Signal(signed(23), name=f"dneg_{c}", reset_less=True)
            dd = Signal(signed(33), name=f"d_{c}")
            m.d.comb += dd.eq(p.data[c] - mx)
            # exp_fx: positive inputs count as 0; below D_MIN every input gives 0.  Both tests compare x with a
            # register (x > mx; x < thr = mx + D_MIN), beside the subtractor rather than after it
            with m.If(adv):
                m.d.sync += dneg.eq(Mux(p.data[c] > mx, 0, Mux(p.data[c] < thr, D_MIN, dd)))
            lprod, lat = mul_pipe(m, adv, dneg, Const(LOG2E_Q30, unsigned(31)), f"lprod_{c}")
            u = Signal(signed(33), name=f"u_{c}", reset_less=True)  # -47 * 2**24 <= u <= 0
            with m.If(adv):
                m.d.sync += u.eq((lprod + (1 << 21)) >> 22)
            m.d.comb += [base_rd.addr.eq(u[16:24]), delta_rd.addr.eq(u[16:24])]
            b6 = Signal(unsigned(31), name=f"ebase_{c}", reset_less=True)
            d6 = Signal(unsigned(23), name=f"edelta_{c}", reset_less=True)
            lo6 = Signal(unsigned(16), name=f"elo_{c}", reset_less=True)
            sh6 = Signal(range(41), name=f"esh_{c}", reset_less=True)
            ip = u[24:].as_signed()
            with m.If(adv):
                m.d.sync += [b6.eq(base_rd.data), d6.eq(delta_rd.data), lo6.eq(u[:16]),
                             sh6.eq(Mux(ip < -40, 40, -ip))]
            # the table read is a block RAM's registered read (slow out of the RAM): one more register
            b6, d6, lo6, sh6 = (delay(x, 1, f"{x.name}_q") for x in (b6, d6, lo6, sh6))
            dl, dlat = mul_pipe(m, adv, d6, lo6, f"edl_{c}")
            b8, sh8 = delay(b6, dlat, f"ebase_d{c}"), delay(sh6, dlat, f"esh_d{c}")
            r9 = Signal(unsigned(24), name=f"er_{c}", reset_less=True)
            with m.If(adv):
                m.d.sync += r9.eq((dl + (1 << 15)) >> 16)
            b9, sh9 = delay(b8, 1, f"ebase_e{c}"), delay(sh8, 1, f"esh_e{c}")
            p10 = Signal(unsigned(32), name=f"ep_{c}", reset_less=True)
            with m.If(adv):
                m.d.sync += p10.eq(b9 + r9)
            sh10 = delay(sh9, 1, f"esh_f{c}")
            t11 = Signal(unsigned(33), name=f"et_{c}", reset_less=True)
            with m.If(adv):
                m.d.sync += t11.eq(p10 + ((Const(1, 1) << sh10) >> 1))
            sh11 = delay(sh10, 1, f"esh_g{c}")
            e12 = Signal(unsigned(31), name=f"e_{c}", reset_less=True)  # <= 2**30
            with m.If(adv):
                m.d.sync += e12.eq(t11 >> sh11)
            e_lanes.append(e12)
            # OUT: rsr(e * y, osh) for osh in 44..60: add the half, then a 17-position shifter of 18 result bits
            pr, plat = mul_pipe(m, adv, e12, ry, f"pr_{c}")
            t16 = Signal(unsigned(62), name=f"pt_{c}", reset_less=True)
            with m.If(adv):
                m.d.sync += t16.eq(pr + ohalf)
            pc = Signal(unsigned(18), name=f"p_{c}")
            m.d.comb += pc.eq((t16 >> OSH_MIN) >> osh_rel)
            prob.append(pc)
        for name in ["d", *[f"l{j}" for j in range(lat)], "u", "tab", "tab_q", *[f"dl{j}" for j in range(dlat)], "r", "p",
                     "t", "e"]:
            stage(name)
        c_e = ctl[-1]  # the beat whose e is in e12
        for j in range(plat):
            stage(f"pr{j}")
        stage("pt")
        c_o = ctl[-1]  # the beat whose rounded product is in t16

        # the max pass: the beat's lanes (past n: INT32_MIN) are registered, then a balanced comparator tree
        # folds them into mx
        into_max, mv = Signal(), Signal()
        xm = [Signal(signed(32), name=f"xm_{c}", reset_less=True) for c in range(C)]
        xmd = [Signal(signed(34), name=f"xmd_{c}", reset_less=True) for c in range(C)]  # xm + D_MIN
        m.d.sync += [mv.eq(into_max), *[xm[c].eq(Mux(lane_ok[c], p.data[c], INT32_MIN)) for c in range(C)],
                     *[xmd[c].eq(Mux(lane_ok[c], p.data[c], INT32_MIN) + D_MIN) for c in range(C)]]
        with m.If(mv):
            m.d.sync += [mx.eq(tree([mx, *xm], lambda a, b: Mux(a > b, a, b))),
                         thr.eq(tree([thr, *xmd], lambda a, b: Mux(a > b, a, b)))]

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
        with m.If(adv & c_e.v & ~c_e.out):
            m.d.sync += ssum.eq(tree([ssum] + [Mux(c_e.ok[c], e_lanes[c], 0) for c in range(C)], lambda a, b: a + b))
        with m.If(adv & c_o.v & c_o.out):
            m.d.sync += [o.valid.eq(1), o.payload.last.eq(c_o.last)]
            m.d.sync += [o.payload.data[c].eq(Mux(c_o.ok[c], prob[c], 0)) for c in range(C)]

        with m.FSM(name="softmax"):
            with m.State("HDR"):
                m.d.comb += [i.ready.eq(1), wrong.eq(p.kind != HDR)]
                # mx and S restart in every HDR cycle (no input in their multiplexers' select): the last OUT
                # beat has left stage 1, the only one to read mx, and S is read before OUT
                m.d.sync += [mx.eq(INT32_MIN), thr.eq(INT32_MIN + D_MIN), ssum.eq(0)]
                with m.If(fire & ~wrong):
                    m.d.sync += [n.eq(p.n), li.eq(0)]
                    with m.If(p.n != 0):
                        m.next = "MAX"
            with m.State("MAX"):
                m.d.comb += [i.ready.eq(1), into_max.eq(fire & ~wrong)]
                row_pass("MAX_DRAIN")
            with m.State("MAX_DRAIN"):  # the last beat's maximum is in mx
                m.next = "SUM"
            with m.State("SUM"):
                pipe_pass()
                row_pass(None)
                with m.If(adv & c_e.v & ~c_e.out & c_e.last):  # S is complete once its last line is through
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
                    m.next = "OSH"
            with m.State("OSH"):  # the output's shift and rounding half, from k (registered)
                m.d.sync += [osh_rel.eq(osh - OSH_MIN), ohalf.eq((Const(1, 1) << osh) >> 1)]
                m.next = "OUT"
            with m.State("OUT"):
                m.d.comb += in_out.eq(1)
                pipe_pass()
                row_pass("HDR")
        return m
