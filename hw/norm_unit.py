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
share one registered multiplier, one product a cycle; each lane's ``ds * ds`` (pass 4) and
``ds * y`` (pass 5) share one multiplier.  Fixed cycles per row beyond the passes' beats: 43
(RMSNorm), 45 (LayerNorm): header 1, reciprocal 33, scale 1, rsqrt 8 [, mean 2].

Every pass ends with ``last``; lanes past ``n`` (in the row's last beats) are ignored (rows are
padded to whole lines).  ``rsr`` is ``numerics.rshift_round``.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import memory

from systolica.config import AccelConfig

from .fixed import bitlen_u, rshift_round_var, sat32
from .line_unit import HDR, ROW, LineUnit, lane_mask
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
        newton = Signal()  # Newton step 0 or 1
        m.d.comb += recip.i_stream.payload.eq(n)

        # The scalar products of a row (the mean, n * eps, the rsqrt argument, three per Newton step)
        # come one after another, so they take turns on one registered multiplier (4 DSP48s).  The
        # operands are bounded (each state says why): a = int32 or < 2**31, b < 2**32, |a * b| < 2**63.
        ma, mb = Signal(signed(32)), Signal(signed(33))
        prod = Signal(signed(64), reset_less=True)

        def multiply(a, b):
            m.d.comb += [ma.eq(a), mb.eq(b)]
            m.d.sync += prod.eq(ma * mb)

        lane_ok = lane_mask(m, li, n, C)
        # per-lane d = (x << 8) - mean and ds = rsr(d, s), shared by passes 3..5
        d = [Signal(signed(42), name=f"d_{c}") for c in range(C)]  # |d| < 2**39 + |mean| < 2**41
        ds = [Signal(signed(25), name=f"ds_{c}") for c in range(C)]
        for c in range(C):
            m.d.comb += d[c].eq((p.a[c] << GUARD) - mean)
            # rsr(d, s) = ((d >> (s - 1)) + 1) >> 1 = (((d << 1) >> s) + 1) >> 1, also for s = 0: one
            # shifter.  |ds| <= 2**23 by the choice of s (numerics), so 25 bits hold it.
            m.d.comb += ds[c].eq((((d[c] << 1) >> s) + 1) >> 1)
        # Each lane's one multiplier: ds * ds in the sum-of-squares pass, ds * y in the output pass.
        # ds is 25 bits and y < 2**31 (at most 2**30 in numerics): 25 x 32 bits, 2 DSP48s per lane.
        is_out = Signal()
        yo = Signal(unsigned(31))
        lane_p = []
        for c in range(C):
            pb = Signal(signed(32), name=f"pb_{c}")
            m.d.comb += pb.eq(Mux(is_out, yo, ds[c]))
            pp = Signal(signed(57), name=f"pp_{c}")
            m.d.comb += pp.eq(ds[c] * pb)
            lane_p.append(pp)

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

        with m.FSM(name="norm"):
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
            with m.State("RECIP_WAIT"):
                m.d.comb += recip.o_stream.ready.eq(1)
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
                cc = Signal(range(64))
                m.d.comb += cc.eq(Mux(bl > 31, bl - 31, 0))
                st = Signal(signed(32))
                m.d.comb += st.eq(acc >> cc)
                multiply(st, ry)
                m.d.sync += e.eq(rk - cc - GUARD)  # the mean's shift, held in e until MEAN1
                m.next = "MEAN1"
            with m.State("MEAN1"):
                mterm = rshift_round_var(m, prod, e, 64, "mean_term", max_left=8)
                m.d.sync += [mean.eq(mterm), acc.eq(0)]
                m.next = "MAXD"
            with m.State("MAXD"):
                m.d.comb += i.ready.eq(1)
                mx = maxd
                for c in range(C):
                    a_ = Signal(unsigned(42), name=f"absd_{c}")
                    m.d.comb += a_.eq(Mux(lane_ok[c], Mux(d[c] < 0, -d[c], d[c]), 0))
                    mx = Mux(a_ > mx, a_, mx)
                with m.If(fire & ~wrong):
                    m.d.sync += maxd.eq(mx)
                row_pass("SCALE")
            with m.State("SCALE"):
                bl = bitlen_u(m, maxd, 42, "maxd_bitlen")
                m.d.sync += [s.eq(Mux(bl > 23, bl - 23, 0)), acc.eq(0)]
                multiply(n, eps)  # < 2**40, held in prod through the next pass
                m.next = "SSQ"
            with m.State("SSQ"):
                m.d.comb += i.ready.eq(1)
                with m.If(fire & ~wrong):
                    m.d.sync += acc.eq(acc + sum(Mux(lane_ok[c], lane_p[c], 0) for c in range(C)))
                row_pass("RSQ0")
            with m.State("RSQ0"):
                # ss = sum + rsr(n * eps, 2s - 16); st, c = trunc31(max(ss, 1)); v = st * ry
                ne = Signal(signed(41))
                m.d.comb += ne.eq(prod[:40])
                esh = Signal(signed(8))
                m.d.comb += esh.eq((s << 1) - 2 * GUARD)
                eterm = rshift_round_var(m, ne, esh, 64, "eps_term", max_left=16)
                ss = Signal(signed(64))
                m.d.comb += ss.eq(acc + eterm)
                ssp = Signal(unsigned(64))
                m.d.comb += ssp.eq(Mux(ss < 1, 1, ss))
                bl = bitlen_u(m, ssp, 64, "ss_bitlen")
                cc = Signal(range(64))
                m.d.comb += cc.eq(Mux(bl > 31, bl - 31, 0))
                sst = Signal(unsigned(31))  # ssp >> cc < 2**31 by the choice of cc
                m.d.comb += sst.eq(ssp >> cc)
                multiply(sst, ry)
                m.d.sync += e.eq(cc + (s << 1) - 2 * (16 + GUARD) - rk)
                m.next = "RSQ1"
            with m.State("RSQ1"):
                # rsqrt_fx(v, e): t = bitlen(v) - 1 + e; K = t >> 1; sh = 29 + e - 2K; m = v << sh or v >> -sh
                v = Signal(unsigned(61))  # < 2**31 * 2**30
                m.d.comb += v.eq(prod[:61])
                vb = bitlen_u(m, v, 61, "v_bitlen")
                t = Signal(signed(10))
                m.d.comb += t.eq(vb - 1 + e)
                kk = Signal(signed(10))
                m.d.comb += kk.eq(t >> 1)
                sh = Signal(signed(10))
                m.d.comb += sh.eq(29 + e - (kk << 1))
                nsh = Signal(range(64))
                m.d.comb += nsh.eq(Mux(sh < 0, -sh, 0))
                psh = Signal(range(32))
                m.d.comb += psh.eq(Mux(sh > 0, sh, 0))
                mc = Signal(unsigned(31))
                m.d.comb += [mc.eq(Mux(sh >= 0, v << psh, v >> nsh)), seed_r.addr.eq((mc >> 23) - 64)]
                m.d.sync += [mant.eq(mc), k.eq(30 + kk), y.eq(seed_r.data), newton.eq(0)]
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
                m.next = "NEWTON_B"
            with m.State("NEWTON_B"):
                multiply(mant, prod[30:61])
                m.next = "NEWTON_C"
            with m.State("NEWTON_C"):
                multiply(y, Const(3 << 30, signed(34)) - prod[29:61])
                m.d.sync += newton.eq(1)
                m.next = "NEWTON_A"
                with m.If(newton):
                    m.next = "OUT"
            with m.State("OUT"):
                m.d.comb += [i.ready.eq(o.ready | wrong), o.valid.eq(i.valid & ~wrong), o.payload.last.eq(p.last),
                             is_out.eq(1), yo.eq(prod[31:62])]  # the last Newton step's y, held in prod
                tsh = Signal(signed(10))
                m.d.comb += tsh.eq(k + 16 + GUARD - 20 - s)
                for c in range(C):
                    # t = (x - mu) / rms in Q20: |t| <= sqrt(n) * 2**20 * (1 + 2**-5) < 2**29 (n < 2**16;
                    # y * sqrt(M) <= 1.016 * 2**30 over the seed intervals), so 30 bits hold it
                    t_ = rshift_round_var(m, lane_p[c], tsh, 30, f"t_{c}", max_left=8)
                    g = Signal(signed(62), name=f"tg_{c}")
                    m.d.comb += g.eq(t_ * p.b[c])
                    yv = Signal(signed(44), name=f"yv_{c}")
                    m.d.comb += yv.eq(((g >> 20) + ((g >> 19) & 1)) + Mux(center, p.c[c], 0))
                    m.d.comb += o.payload.data[c].eq(sat32(m, yv, f"norm_out_{c}"))
                row_pass("HDR")
        return m
