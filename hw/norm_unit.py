"""Norm unit: RMSNorm and LayerNorm over fixed-point rows, bit-exact with numerics.rmsnorm / layernorm.

A norm needs statistics of the whole row before it can scale any element, and the
integer algorithm of :func:`systolica.numerics.rmsnorm` needs them in sequence (the mean,
then the largest centred magnitude, then the sum of squares), so the row streams in
several times — from the vector buffer, one beat of ``L = cfg.line_width`` lanes per cycle
(:mod:`~systolica.hw.line_unit`) — instead of being held here (a row may be 65535 elements):

1. ``HDR``: ``n`` (elements), ``eps`` (``eps_q32``), ``center`` (1: LayerNorm).
   ``recip(n)`` starts (:class:`~systolica.hw.recip.Reciprocal`, 33 cycles).
2. LayerNorm only: the row (``a``) -> ``sum(x)``; ``mean = rsr(trunc31(sum) * ry, rk - c - 8)``.
3. the row -> ``max |d|`` with ``d = (x << 8) - mean`` (Q24); ``s = max(0, bitlen - 23)``.
4. the row -> ``ss = sum(rsr(d, s)**2) + rsr(n * eps, 2s - 16)``; then
   ``rsqrt_fx(trunc31(ss) * ry, c + 2s - 48 - rk)`` (seed table + two Newton steps, 8 cycles).
5. the row with ``gamma`` (``b``) and, for LayerNorm, ``beta`` (``c``) -> one output beat per
   input beat: ``sat32(rsr(rsr(ds * y, k + 4 - s) * gamma, 20) [+ beta])``.

The per-row scalar products (the mean, ``n * eps``, the rsqrt argument, three per Newton step)
share one two-stage multiplier (operands registered, then the product); each lane's ``ds * ds``
(pass 4) and ``ds * y`` (pass 5) share one multiplier.  Passes 3..5 run through a pipeline of one
operation a stage (A: ``d`` and ``ds``; B: the lane product and ``|d|``; C: the lanes' maximum or
sum into the row's register, or the output's first rounding shift; D: the product with
``gamma``; E: the output register, rounding, ``beta``, saturation), and the scalar states do one
step each (a shift, an add, a priority encoder, a product), so no cycle chains a subtract, a
shifter and two wide products as the output pass did, or an add, a priority encoder, a shifter
and a product as the rsqrt argument did.  Passes 3 and 4 wait for their last beat to reach the
row's register (3 cycles each); the output pass's last beats drain under the next row's
reciprocal.  Fixed cycles per row beyond the passes' beats: 61 (RMSNorm), 65 (LayerNorm):
header 1, reciprocal 33, the two drains 6, scale 1, the rsqrt argument 6 and rsqrt 3, the two
Newton steps 12 [, mean 4].

Every pass ends with ``last``; lanes past ``n`` (in the row's last beats) are ignored (rows are
padded to whole lines).  ``rsr`` is ``numerics.rshift_round``.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory

from systolica.config import AccelConfig

from .fixed import bitlen_u, rshift_round_var, sat32
from .line_unit import HDR, ROW, LineUnit, lane_mask, registered_output, tree
from .recip import Reciprocal

__all__ = ["NormUnit"]

GUARD = 8  # numerics.NORM_GUARD


class NormUnit(LineUnit):
    """``L``-lane RMSNorm / LayerNorm (``L = cfg.line_width``; see the module docstring for the beat sequence).

    Attributes
    ----------
    i_stream : In(stream)
        ``kind`` (0 header, 1 row beat), ``a`` (x), ``b`` (gamma), ``c`` (beta): L int32 each;
        ``last``; header fields ``n``, ``eps``, ``center``.
    o_stream : Out(stream)
        ``data`` (L int32) and ``last``: the normalized row, during the final pass.
    error : Out(1)
        Sticky: a beat of the wrong kind arrived.
    """

    def __init__(self, cfg: AccelConfig):
        lanes = LineUnit.nonlinear_lanes_of(cfg)
        line = LineUnit.line(cfg, lanes=lanes)
        super().__init__(cfg, {"kind": 1, "a": line, "b": line, "c": line, "last": 1, "n": unsigned(16),
                               "eps": unsigned(24), "center": 1},
                         {"data": line, "last": 1}, error=True, lanes=lanes)

    def elaborate(self, platform):
        from systolica.numerics import RSQRT_SEED

        m = Module()
        C = self.lanes
        i, o = self.i_stream, self.o_stream
        p = i.payload
        fire = i.valid & i.ready

        m.submodules.recip = recip = Reciprocal(17)
        m.submodules.seed = seed = memory.Memory(shape=unsigned(31), depth=len(RSQRT_SEED),
                                                 init=[int(v) for v in RSQRT_SEED])
        seed_r = seed.read_port(domain="comb")

        n, eps, center = Signal(unsigned(16)), Signal(unsigned(24)), Signal()
        ry, rk = Signal(unsigned(31)), Signal(unsigned(7))
        li = Signal(16)  # beat within the row
        acc = Signal(signed(64))  # sum(x), then sum(ds**2)
        # Q24 mean of int32 values: |mean| <= (2**31 + 2**c / n) * 2**8 + 1 < 2**40 (2**c <= 2n)
        mean = Signal(signed(42))
        maxd = Signal(unsigned(42))
        s = Signal(range(24))
        e = Signal(signed(10))  # rsqrt_fx's exponent e
        y, k = Signal(unsigned(31)), Signal(signed(9))
        mant = Signal(unsigned(31))  # rsqrt_fx's m: 2**29 <= m < 2**31
        # the scalar states' intermediate values, one operation a state
        cc_r = Signal(range(64))
        eterm_r, ssp_r = Signal(signed(64)), Signal(unsigned(64))
        sh_r = Signal(signed(10))
        newton = Signal()  # Newton step 0 or 1
        newton_done = Signal()  # the step just multiplied was step 1
        m.d.comb += recip.i_stream.payload.eq(n)

        # The scalar products of a row (the mean, n * eps, the rsqrt argument, three per Newton step)
        # come one after another, so they take turns on one registered multiplier (4 DSP48s).  The
        # operands are bounded (each state says why): a = int32 or < 2**31, b < 2**32, |a * b| < 2**63.
        # Two stages: the operands are registered (in the state that calls multiply), the product a cycle
        # later, so a state reading prod comes two after the one that multiplied (`WAIT` states below).
        ma, mb = Signal(signed(32), reset_less=True), Signal(signed(33), reset_less=True)
        mul_v = Signal()
        prod = Signal(signed(64), reset_less=True)
        m.d.sync += mul_v.eq(0)
        with m.If(mul_v):
            m.d.sync += prod.eq(ma * mb)

        def multiply(a, b):
            m.d.sync += [ma.eq(a), mb.eq(b), mul_v.eq(1)]

        lane_ok = lane_mask(m, li, n, C)
        # ---- the beat pipeline of passes 3..5 (one operation a stage; every stage moves when the output
        # register may load, `adv`): A d = (x << 8) - mean and ds = rsr(d, s); B each lane's one multiplier,
        # ds * ds (pass 4) or ds * y (pass 5), and |d| (pass 3); C the row's max |d| or sum of squares, or
        # the output's t = rsr(ds * y, k + 4 - s); D t * gamma; E (the output register) rsr(., 20) [+ beta],
        # saturated.  A pass ends when its last beat has left the stages it uses; the output pass's last beats
        # drain under the next row's reciprocal (`drained`: it waits for them).
        adv = registered_output(m, o)
        beat = data.StructLayout({"v": 1, "out": 1, "last": 1, "ok": data.ArrayLayout(1, C),
                                  "b": data.ArrayLayout(signed(32), C), "c": data.ArrayLayout(signed(32), C)})
        sa, sb, sc, sd = (Signal(beat, name=f"norm_s{x}") for x in "abcd")
        ds_a = [Signal(signed(25), name=f"ds_a_{c}") for c in range(C)]  # |ds| <= 2**23 (numerics)
        d_a = [Signal(signed(42), name=f"d_a_{c}") for c in range(C)]  # |d| < 2**39 + |mean| < 2**41
        pp_b = [Signal(signed(57), name=f"pp_b_{c}") for c in range(C)]
        absd_b = [Signal(unsigned(42), name=f"absd_b_{c}") for c in range(C)]
        t_c = [Signal(signed(30), name=f"t_c_{c}") for c in range(C)]
        g_d = [Signal(signed(62), name=f"tg_d_{c}") for c in range(C)]
        is_out = Signal()  # the FSM is in pass 5 (the multipliers take y)
        yo = Signal(unsigned(31))  # the last Newton step's y, held in prod from pass 5 until the pipeline drained
        m.d.comb += yo.eq(prod[31:62])
        take = Signal()  # a row beat of passes 3..5 enters stage A this cycle
        with m.If(adv):
            m.d.sync += [sa.v.eq(take), sb.eq(sa), sc.eq(sb), sd.eq(sc)]
            with m.If(take):
                m.d.sync += [sa.out.eq(is_out), sa.last.eq(p.last), sa.b.eq(p.b)]
                m.d.sync += [sa.c[c].eq(Mux(center, p.c[c], 0)) for c in range(C)]  # beta, LayerNorm only
                m.d.sync += [sa.ok[c].eq(lane_ok[c]) for c in range(C)]
            for c in range(C):
                d = Signal(signed(42), name=f"d_{c}")
                m.d.comb += d.eq((p.a[c] << GUARD) - mean)
                # rsr(d, s) = ((d >> (s - 1)) + 1) >> 1 = (((d << 1) >> s) + 1) >> 1, also for s = 0: one shifter
                m.d.sync += [d_a[c].eq(d), ds_a[c].eq((((d << 1) >> s) + 1) >> 1)]
                # ds is 25 bits and y < 2**31 (at most 2**30 in numerics): 25 x 32 bits, 2 DSP48s per lane
                pb = Signal(signed(32), name=f"pb_{c}")
                m.d.comb += pb.eq(Mux(sa.out, yo, ds_a[c]))
                m.d.sync += [pp_b[c].eq(ds_a[c] * pb),
                             absd_b[c].eq(Mux(sa.ok[c], Mux(d_a[c] < 0, -d_a[c], d_a[c]), 0))]
        drained = ~sa.v & ~sb.v & ~sc.v & ~sd.v
        wrong = Signal()
        with m.If(fire & wrong):
            m.d.sync += self.error.eq(1)

        def row_pass(next_state):
            """Common framing of a pass over the row: the line counter and the hand-over at `last`."""
            m.d.comb += [wrong.eq(p.kind != ROW)]
            with m.If(fire & ~wrong):
                m.d.sync += li.eq(li + 1)
                with m.If(p.last):
                    m.d.sync += li.eq(0)
                    m.next = next_state

        with m.FSM(name="norm") as fsm:
            def fsm_in(*names):
                return Cat(*[fsm.ongoing(nm) for nm in names]).any()

            with m.State("HDR"):
                m.d.comb += [i.ready.eq(1), wrong.eq(p.kind != HDR)]
                with m.If(fire & ~wrong):
                    m.d.sync += [n.eq(p.n), eps.eq(p.eps), center.eq(p.center), li.eq(0), acc.eq(0),
                                 mean.eq(0), maxd.eq(0)]
                    m.next = "RECIP"
            with m.State("RECIP"):
                m.d.comb += recip.i_stream.valid.eq(1)
                with m.If(recip.i_stream.ready):
                    m.next = "RECIP_WAIT"
            with m.State("RECIP_WAIT"):  # the last row's output beats have left the pipeline, too
                m.d.comb += recip.o_stream.ready.eq(drained)
                with m.If(recip.o_stream.valid):
                    m.d.sync += [ry.eq(recip.o_stream.payload.y), rk.eq(recip.o_stream.payload.k)]
                    m.next = "SUM"
                    with m.If(~center):
                        m.next = "MAXD"
            with m.State("SUM"):
                m.d.comb += i.ready.eq(1)
                with m.If(fire & ~wrong):
                    m.d.sync += acc.eq(acc + sum(Mux(lane_ok[c], p.a[c], 0) for c in range(C)))
                row_pass("MEAN0")
            with m.State("MEAN0"):
                # _trunc31(sum): c = max(0, bitlen(|sum|) - 31), st = sum >> c: int32
                mag = Signal(unsigned(64))
                m.d.comb += mag.eq(Mux(acc < 0, -acc, acc))
                bl = bitlen_u(m, mag, 64, "sum_bitlen")
                m.d.sync += cc_r.eq(Mux(bl > 31, bl - 31, 0))
                m.next = "MEAN1"
            with m.State("MEAN1"):
                st = Signal(signed(32))
                m.d.comb += st.eq(acc >> cc_r)
                multiply(st, ry)
                m.d.sync += e.eq(rk - cc_r - GUARD)  # the mean's shift, held in e until MEAN2
                m.next = "MEAN_WAIT"
            with m.State("MEAN_WAIT"):
                m.next = "MEAN2"
            with m.State("MEAN2"):
                mterm = rshift_round_var(m, prod, e, 64, "mean_term", max_left=8)
                m.d.sync += [mean.eq(mterm), acc.eq(0)]
                m.next = "MAXD"
            with m.State("MAXD"):
                m.d.comb += [i.ready.eq(adv), take.eq(fire & ~wrong)]
                row_pass("MAXD_DRAIN")
            with m.State("MAXD_DRAIN"), m.If(~sa.v & ~sb.v):  # the last |d| is in maxd
                m.next = "SCALE"
            with m.State("SCALE"):
                bl = bitlen_u(m, maxd, 42, "maxd_bitlen")
                m.d.sync += [s.eq(Mux(bl > 23, bl - 23, 0)), acc.eq(0)]
                multiply(n, eps)  # < 2**40, held in prod through the next pass
                m.next = "SSQ"
            with m.State("SSQ"):
                m.d.comb += [i.ready.eq(adv), take.eq(fire & ~wrong)]
                row_pass("SSQ_DRAIN")
            with m.State("SSQ_DRAIN"), m.If(~sa.v & ~sb.v):  # the last squares are in acc
                m.next = "RSQ0"
            with m.State("RSQ0"):
                # ss = sum + rsr(n * eps, 2s - 16); st, c = trunc31(max(ss, 1)); v = st * ry: one step a state
                ne = Signal(signed(41))
                m.d.comb += ne.eq(prod[:40])
                esh = Signal(signed(8))
                m.d.comb += esh.eq((s << 1) - 2 * GUARD)
                m.d.sync += eterm_r.eq(rshift_round_var(m, ne, esh, 64, "eps_term", max_left=16))
                m.next = "RSQ1"
            with m.State("RSQ1"):
                ss = Signal(signed(64))
                m.d.comb += ss.eq(acc + eterm_r)
                m.d.sync += ssp_r.eq(Mux(ss < 1, 1, ss))
                m.next = "RSQ2"
            with m.State("RSQ2"):
                bl = bitlen_u(m, ssp_r, 64, "ss_bitlen")
                m.d.sync += cc_r.eq(Mux(bl > 31, bl - 31, 0))
                m.next = "RSQ3"
            with m.State("RSQ3"):
                sst = Signal(unsigned(31))  # ssp >> cc < 2**31 by the choice of cc
                m.d.comb += sst.eq(ssp_r >> cc_r)
                multiply(sst, ry)
                m.d.sync += e.eq(cc_r + (s << 1) - 2 * (16 + GUARD) - rk)
                m.next = "RSQ_WAIT"
            with m.State("RSQ_WAIT"):
                m.next = "RSQ4"
            with m.State("RSQ4"):
                # rsqrt_fx(v, e): t = bitlen(v) - 1 + e; K = t >> 1; sh = 29 + e - 2K; m = v << sh or v >> -sh
                v = Signal(unsigned(61))  # < 2**31 * 2**30
                m.d.comb += v.eq(prod[:61])
                vb = bitlen_u(m, v, 61, "v_bitlen")
                t = Signal(signed(10))
                m.d.comb += t.eq(vb - 1 + e)
                kk = Signal(signed(10))
                m.d.comb += kk.eq(t >> 1)
                m.d.sync += [sh_r.eq(29 + e - (kk << 1)), k.eq(30 + kk)]
                m.next = "RSQ5"
            with m.State("RSQ5"):
                v = Signal(unsigned(61))
                m.d.comb += v.eq(prod[:61])
                nsh = Signal(range(64))
                m.d.comb += nsh.eq(Mux(sh_r < 0, -sh_r, 0))
                psh = Signal(range(32))
                m.d.comb += psh.eq(Mux(sh_r > 0, sh_r, 0))
                m.d.sync += mant.eq(Mux(sh_r >= 0, v << psh, v >> nsh))
                m.next = "RSQ6"
            with m.State("RSQ6"):
                m.d.comb += seed_r.addr.eq((mant >> 23) - 64)
                m.d.sync += [y.eq(seed_r.data), newton.eq(0)]
                m.next = "NEWTON_A"
            # Newton: y2 = (y * y) >> 30; tt = (m * y2) >> 29; y = (y * (3 * 2**30 - tt)) >> 31, twice.
            # Bounds over every seed interval (interval arithmetic on the 192 entries of RSQRT_SEED):
            # y, y2 < 2**30 before a step and y < 2**31 after it, tt < 2**31, 2**30.98 < 3 * 2**30 - tt
            # < 2**31.02: all products are non-negative, so the shifts are bit slices of prod.
            with m.State("NEWTON_A"):
                ycur = Signal(unsigned(31))
                m.d.comb += ycur.eq(Mux(newton, prod[31:62], y))
                m.d.sync += y.eq(ycur)
                multiply(ycur, ycur)
                m.next = "NEWTON_AW"
            with m.State("NEWTON_AW"):
                m.next = "NEWTON_B"
            with m.State("NEWTON_B"):
                multiply(mant, prod[30:61])
                m.next = "NEWTON_BW"
            with m.State("NEWTON_BW"):
                m.next = "NEWTON_C"
            with m.State("NEWTON_C"):
                multiply(y, Const(3 << 30, signed(34)) - prod[29:61])
                m.d.sync += [newton.eq(1), newton_done.eq(newton)]
                m.next = "NEWTON_CW"
            with m.State("NEWTON_CW"):
                m.next = "NEWTON_A"
                with m.If(newton_done):  # that was the second step
                    m.next = "OUT"
            with m.State("OUT"):
                m.d.comb += [i.ready.eq(adv | wrong), take.eq(fire & ~wrong), is_out.eq(1)]
                row_pass("HDR")  # the last beats drain during the next row's header and reciprocal

        # ---- stage C: the pass's reduction over the lanes (3, 4), or the output's t (5); D and E: pass 5
        in_maxd = Signal()
        in_ssq = Signal()
        m.d.comb += [in_maxd.eq(fsm_in("MAXD", "MAXD_DRAIN")), in_ssq.eq(fsm_in("SSQ", "SSQ_DRAIN"))]
        tsh = Signal(signed(10))
        m.d.comb += tsh.eq(k + 16 + GUARD - 20 - s)
        with m.If(adv):
            with m.If(sb.v & in_maxd):
                mx = tree(absd_b, lambda x, y_: Mux(x > y_, x, y_))
                m.d.sync += maxd.eq(Mux(mx > maxd, mx, maxd))
            with m.If(sb.v & in_ssq):
                m.d.sync += acc.eq(acc + tree([Mux(sb.ok[c], pp_b[c], 0) for c in range(C)], lambda x, y_: x + y_))
            for c in range(C):
                # t = (x - mu) / rms in Q20: |t| <= sqrt(n) * 2**20 * (1 + 2**-5) < 2**29 (n < 2**16;
                # y * sqrt(M) <= 1.016 * 2**30 over the seed intervals), so 30 bits hold it
                m.d.sync += [t_c[c].eq(rshift_round_var(m, pp_b[c], tsh, 30, f"t_{c}", max_left=8)),
                             g_d[c].eq(t_c[c] * sc.b[c])]
                yv = Signal(signed(44), name=f"yv_{c}")
                m.d.comb += yv.eq(((g_d[c] >> 20) + ((g_d[c] >> 19) & 1)) + sd.c[c])
                m.d.sync += o.payload.data[c].eq(sat32(m, yv, f"norm_out_{c}"))
            with m.If(sd.v & sd.out):
                m.d.sync += [o.valid.eq(1), o.payload.last.eq(sd.last)]
        return m
