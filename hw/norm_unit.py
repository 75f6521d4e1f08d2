"""Norm unit: RMSNorm and LayerNorm over fixed-point rows, bit-exact with numerics.rmsnorm / layernorm.

A norm needs statistics of the whole row before it can scale any element, and the
integer algorithm of :func:`systolica.numerics.rmsnorm` needs them in sequence (the mean,
then the largest centred magnitude, then the sum of squares), so the row streams in
several times — from the vector buffer, one beat of ``L = cfg.line_width`` lanes per cycle
(:mod:`~systolica.hw.line_unit`) — instead of being held here (a row may be 65535 elements):

1. ``HDR``: ``n`` (elements), ``eps`` (``eps_q32``), ``center`` (1: LayerNorm).
   ``recip(n)`` starts (:class:`~systolica.hw.recip.Reciprocal`, 35 cycles).
2. LayerNorm only: the row (``a``) -> ``sum(x)``; ``mean = rsr(trunc31(sum) * ry, rk - c - 8)``.
3. the row -> ``max |d|`` with ``d = (x << 8) - mean`` (Q24); ``s = max(0, bitlen - 23)``.
4. the row -> ``ss = sum(rsr(d, s)**2) + rsr(n * eps, 2s - 16)``; then
   ``rsqrt_fx(trunc31(ss) * ry, c + 2s - 48 - rk)`` (seed table + two Newton steps, 8 cycles).
5. the row with ``gamma`` (``b``) and, for LayerNorm, ``beta`` (``c``) -> one output beat per
   input beat: ``sat32(rsr(rsr(ds * y, k + 4 - s) * gamma, 20) [+ beta])``.

The per-row scalar products (the mean, ``n * eps``, the rsqrt argument, three per Newton step)
share one multiplier; each lane's ``ds * ds`` (pass 4) and ``ds * y`` (pass 5) share one, and
``t * gamma`` has its own.  Every product takes registered operands, registers its 18 x 18 pieces
(one ECP5 MULT18X18D each) and adds them in two stages of one add each (``fixed.mul_pipe``), so no
cycle holds a multiplier and a wide adder together.  Passes 3..5 run through a pipeline of 13
stages and the output register, one operation a stage: 1 ``d``; 2 ``(d << 1) >> s`` and ``|d|``;
3 ``ds`` and the multiplier's second operand, the row's ``max |d|``; 4..6 the lane product; 7 the
row's sum of squares, or the output's shift by ``k + 4 - s``; 8 its rounding; 9..11 ``t * gamma``;
12 ``rsr(., 20)``; 13 ``+ beta``; the output register saturates.  The scalar states do one step each
(a shift, an add, a priority encoder (a balanced tree, ``fixed.bitlen_tree``), a clamp, the
rounding of a shifted value), and a state reading the shared product comes four after the one that
multiplied.  Pass 3 waits for its last beat to reach ``maxd`` (3 cycles), pass 4 for its last
square to reach the sum (7); the output pass's last beats drain under the next row's reciprocal.
Fixed cycles per row beyond the passes' beats: 87 (RMSNorm), 98 (LayerNorm): header 1,
reciprocal 35, the two drains 10, scale 1, the rsqrt argument and rsqrt 16, the two Newton steps
24 [, the mean 11].

Every pass ends with ``last``; lanes past ``n`` (in the row's last beats) are ignored (rows are
padded to whole lines).  ``rsr`` is ``numerics.rshift_round``.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory

from systolica.config import AccelConfig

from .attn_fsm import OneHotFSM
from .fixed import bitlen_parts, bitlen_tree, delay_line, mul_pipe, sat32
from .line_unit import HDR, ROW, LineUnit, registered_output, tree
from .recip import Reciprocal

__all__ = ["NormUnit"]

GUARD = 8  # numerics.NORM_GUARD


#: the norm unit's states, in a one-hot machine (hw/attn_fsm.py): the first is the reset state
_STATES = ("HDR", "RECIP", "RECIP_WAIT", "SUM", "SUM_DRAIN", "MEAN0", "MEAN1", "MEAN1B", "MEAN2",
           *(f"MEAN_W{j}" for j in range(4)), "MEAN3", "MEAN4", "MAXD", "MAXD_DRAIN", "SCALE", "SSQ", "SSQ_DRAIN",
           *(f"RSQ{j}" for j in range(5)), "RSQ4B", "RSQ5", "RSQ_W0", "RSQ_W1", "RSQ_W2", "RSQ6", "RSQ7", "RSQ7B", "RSQ8", "RSQ9", "RSQ10",
           *(f"NEWTON_{x}{w}" for x in "ABC" for w in ("", "W0", "W1", "W2")), "OUT")


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
        lanes = LineUnit.rowpass_lanes_of(cfg)
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

        m.submodules.recip = recip = Reciprocal(17, registered=True)
        m.submodules.seed = seed = memory.Memory(shape=unsigned(31), depth=len(RSQRT_SEED),
                                                 init=[int(v) for v in RSQRT_SEED])
        seed_r = seed.read_port(domain="comb")
        seed_q = Signal(unsigned(31), reset_less=True)  # the table read, registered every cycle (no state in it)

        n, eps, center = Signal(unsigned(16)), Signal(unsigned(24)), Signal()
        ry, rk = Signal(unsigned(31)), Signal(unsigned(7))
        # the row's scalar datapath: no reset (the header clears acc, mean and maxd; each state loads the others
        # before the next reads them), so the engines' reset reaches only the control flip-flops.  sum(x) and
        # sum(ds**2) have an accumulator each (cleared in HDR and SCALE): no select between the two adds and
        # the clears in front of one register (the shared one's D input was on ulx3s's late list)
        acc = Signal(signed(64), reset_less=True, name="acc_sum")  # sum(x)
        acc_sq = Signal(signed(64), reset_less=True, name="acc_sq")  # sum(ds**2)
        # Q24 mean of int32 values: |mean| <= (2**31 + 2**c / n) * 2**8 + 1 < 2**40 (2**c <= 2n)
        mean = Signal(signed(42), reset_less=True)
        maxd = Signal(unsigned(42), reset_less=True)
        s = Signal(range(24))
        e = Signal(signed(10))  # rsqrt_fx's exponent e
        eps_sel = Signal()  # the row's shared rounding shifter serves the eps term (not the mean): below
        y, k = Signal(unsigned(31)), Signal(signed(9))
        mant = Signal(unsigned(31))  # rsqrt_fx's m: 2**29 <= m < 2**31
        # the scalar states' intermediate values, one operation a state
        cc_r = Signal(range(64))
        mag_r = Signal(unsigned(64), reset_less=True)
        eterm_r, ss_r, ssp_r = (Signal(signed(64), reset_less=True), Signal(signed(64), reset_less=True),
                                Signal(unsigned(64), reset_less=True))
        sh_r = Signal(signed(10))
        vb_m1 = Signal(signed(8), name="vb_m1")  # bitlen(v) - 1: the top set bit's index, -1 for v = 0
        tsh_r = Signal(signed(10))  # the output's first shift, k + 4 - s
        newton = Signal()  # Newton step 0 or 1
        newton_done = Signal()  # the step just multiplied was step 1
        m.d.comb += recip.i_stream.payload.eq(n)

        # The scalar products of a row (the mean, n * eps, the rsqrt argument, three per Newton step)
        # come one after another, so they take turns on one multiplier (4 MULT18X18D / DSP48s).  The
        # operands are bounded (each state says why): a = int32 or < 2**31, b < 2**32, |a * b| < 2**63.
        # The operands are registered (in the state that calls multiply), then the pieces' products, their
        # sums by piece of a, and the product (hw/fixed.py mul_pipe): a state reading prod comes four after the
        # one that multiplied (three `W` states below).  prod follows ma * mb, which hold until the next multiply.
        ma, mb = Signal(signed(32), reset_less=True), Signal(signed(33), reset_less=True)
        prod, mlat = mul_pipe(m, Const(1, 1), ma, mb, "norm_prod")
        assert mlat == 3

        # each multiplying state's operands, chosen by its one-hot flag (an AND-OR, no priority chain between
        # the states), loaded only in those states: ma and mb hold otherwise
        mul_ops = []

        def multiply(a, b):
            mul_ops.append((fsm.current, a, b))

        def rsr_split(x, sh, width, max_left, name):
            """``rsr(x, sh)`` (hw/fixed.py rshift_round_var) in two steps: the shift's amounts and case follow
            ``sh`` in registers of their own (``sh`` holds still for cycles before), `load` registers the
            shifted value, and the returned value rounds it (a state later)."""
            sr1 = Signal(range(63), name=f"{name}_sr1")
            sl = Signal(range(max_left + 1), name=f"{name}_sl")
            zero, right = Signal(name=f"{name}_zero"), Signal(name=f"{name}_right")
            m.d.sync += [sr1.eq(Mux(sh > 63, 62, Mux(sh < 1, 0, sh - 1))),
                         sl.eq(Mux(sh < -max_left, max_left, Mux(sh > 0, 0, -sh))), zero.eq(sh > 63), right.eq(sh > 0)]
            t = Signal(signed(width + 1), name=f"{name}_t", reset_less=True)
            load = [t.eq(Mux(right, x >> sr1, x << sl))]
            out = Signal(signed(width), name=name)
            m.d.comb += out.eq(Mux(zero, 0, Mux(right, (t + 1) >> 1, t)))
            return load, out

        # lane_ok[c] = (li * C + c < n) for beat li of the row, as flip-flops: it gates the SUM pass's add into the
        # 64-bit acc, and as a compare of li and n in front of that add it was the unit's slowest path (ECP5);
        # `left` = n - li * C and `left_m` = left - C follow the beat, loaded from registers (no subtraction after
        # the beat's handshake), and each flag from a compare of left_m (or of n, `n_gt`) with a constant
        left = Signal(signed(18), name="norm_left")
        left_m = Signal(signed(18), name="norm_left_m")
        n_m = Signal(signed(18), name="norm_n_m")  # n - C
        lane_ok = [Signal(name=f"norm_lane_ok_{c}") for c in range(C)]
        n_gt = [Signal(name=f"norm_n_gt_{c}") for c in range(C)]  # n > c
        # ---- the beat pipeline of passes 3..5, one operation a stage (every stage moves when the output
        # register may load, `adv`):
        #   1 d = (x << 8) - mean;  2 (d << 1) >> s, and |d| (pass 3);  3 ds = (. + 1) >> 1 = rsr(d, s) and the
        #   multiplier's second operand, ds (pass 4) or y (pass 5), and the row's max |d| (pass 3);
        #   4..6 ds * ds or ds * y (pieces, their sums, the product);  7 the row's sum of squares (pass 4), or the
        #   output's t = rsr(ds * y, k + 4 - s) shifted;  8 t rounded, gamma registered;  9..11 t * gamma;
        #   12 rsr(., 20);  13 + beta;  the output register: saturated.
        # A pass ends when its last beat has left the stages it uses; the output pass's last beats drain under
        # the next row's reciprocal (`drained`: it waits for them).
        adv = registered_output(m, o)
        ctl_l = data.StructLayout({"v": 1, "mx": 1, "sq": 1, "out": 1, "last": 1, "ok": data.ArrayLayout(1, C)})
        ctl = []  # ctl[j]: the control of the beat in stage j + 1
        take = Signal()  # a row beat of passes 3..5 enters stage 1 this cycle
        # the states that take beats, each a flag register of its own (set and cleared with the FSM's
        # transitions, `goto`), so `ready` and the beat's enables decode no state register
        fsm = OneHotFSM(m, _STATES, "norm")
        st_hdr, st_sum = fsm["HDR"], fsm["SUM"]
        pass_mx, pass_sq, pass_out = fsm["MAXD"], fsm["SSQ"], fsm["OUT"]  # the pass the FSM is in
        row_st = fsm.group("rows", ("MAXD", "SSQ", "OUT"))  # one of them

        def stage():
            c_ = Signal(ctl_l, name=f"norm_c{len(ctl) + 1}")
            with m.If(adv):
                if not ctl:
                    m.d.sync += [c_.v.eq(take), c_.mx.eq(pass_mx), c_.sq.eq(pass_sq), c_.out.eq(pass_out),
                                 c_.last.eq(p.last)]
                    m.d.sync += [c_.ok[c].eq(lane_ok[c]) for c in range(C)]
                else:
                    m.d.sync += c_.eq(ctl[-1])
            ctl.append(c_)
            return c_

        def delay(x, stages, name):
            return delay_line(m, adv, x, stages, name)

        def reg(shape, name, value):
            r = Signal(shape, name=name, reset_less=True)
            with m.If(adv):
                m.d.sync += r.eq(value)
            return r

        yo = Signal(unsigned(31))  # the last Newton step's y, held in prod from pass 5 until the pipeline drained
        m.d.comb += yo.eq(prod[31:62])
        c1, c2, _ = stage(), stage(), stage()
        pp_s, absd2, outs = [], [], []
        t_zero, t_right = Signal(), Signal()
        t_sr1, t_sl = Signal(range(63)), Signal(range(9))
        for c in range(C):
            d1 = reg(signed(42), f"d1_{c}", (p.a[c] << GUARD) - mean)  # |d| < 2**39 + |mean| < 2**41
            # rsr(d, s) = ((d >> (s - 1)) + 1) >> 1 = (((d << 1) >> s) + 1) >> 1, also for s = 0: one shifter
            h2 = reg(signed(26), f"dsh2_{c}", (d1 << 1) >> s)  # |ds| <= 2**23 (numerics) on the row's lanes
            absd2.append(reg(unsigned(42), f"absd2_{c}", Mux(c1.ok[c], Mux(d1 < 0, -d1, d1), 0)))
            ds_n = Signal(signed(25), name=f"ds_{c}")
            m.d.comb += ds_n.eq((h2 + 1) >> 1)
            ds3 = reg(signed(25), f"ds3_{c}", ds_n)
            # ds is 25 bits and y < 2**31 (at most 2**30 in numerics): 25 x 32 bits
            pb3 = reg(signed(32), f"pb3_{c}", Mux(c2.out, yo, ds_n))
            pp, plat = mul_pipe(m, adv, ds3, pb3, f"pp_{c}")
            pp_s.append(pp)
            b1 = reg(signed(32), f"g1_{c}", p.b[c])
            cb1 = reg(signed(32), f"be1_{c}", Mux(center, p.c[c], 0))  # beta, LayerNorm only
            # 7, 8: t = rsr(ds * y, k + 4 - s) = (x - mu) / rms in Q20: |t| <= sqrt(n) * 2**20 * (1 + 2**-5)
            # < 2**29 (n < 2**16; y * sqrt(M) <= 1.016 * 2**30 over the seed intervals), so 30 bits hold it
            t7 = reg(signed(31), f"t7_{c}", Mux(t_right, pp >> t_sr1, pp << t_sl))
            t8 = reg(signed(30), f"t8_{c}", Mux(t_zero, 0, Mux(t_right, (t7 + 1) >> 1, t7)))
            g8 = delay(b1, 3 + plat + 2 - 1, f"gam_{c}")
            tg, glat = mul_pipe(m, adv, t8, g8, f"tg_{c}")
            y12 = reg(signed(42), f"y12_{c}", (tg + (1 << (20 - 1))) >> 20)  # rsr(t * gamma, 20)
            be12 = delay(cb1, 3 + plat + 2 + glat + 1 - 1, f"beta_{c}")
            y13 = reg(signed(44), f"y13_{c}", y12 + be12)
            outs.append(sat32(m, y13, f"norm_out_{c}"))
        for _ in range(plat):
            stage()
        c6 = ctl[-1]  # the beat whose lane products are in pp
        for _ in range(2 + glat + 2):
            stage()
        c_o = ctl[-1]  # the beat in stage 13: into the output register
        # the pipeline's drain conditions, each a flip-flop computed a cycle ahead from the stages' valid bits as
        # they move (the valid bits' OR behind the waiting state's flag was on ulx3s's late list): read only in
        # states no beat enters (RECIP_WAIT, MAXD_DRAIN, SSQ_DRAIN), so the next beat is left out; after a pass's
        # cycle (the one that took its last beat) they read 0, as the pipeline then is not empty
        def drain_flag(stages, name):
            f = Signal(name=name, init=1)
            m.d.sync += f.eq(~row_st & Mux(adv, ~Cat(*[x.v for x in ctl[:stages - 1]]).any(),
                                           ~Cat(*[x.v for x in ctl[:stages]]).any()))
            return f
        drained = drain_flag(len(ctl), "norm_drained")
        squares_in = drain_flag(3 + plat, "norm_squares_in")  # no beat before the sum of squares
        maxd_in = drain_flag(2, "norm_maxd_in")  # the last |d| is in maxd
        with m.If(adv):
            with m.If(c2.v & c2.mx):  # stage 3: the row's max |d|
                mx = tree(absd2, lambda x, y_: Mux(x > y_, x, y_))
                m.d.sync += maxd.eq(Mux(mx > maxd, mx, maxd))
            with m.If(c6.v & c6.sq):  # stage 7: the row's sum of squares
                m.d.sync += acc_sq.eq(acc_sq + tree([Mux(c6.ok[c], pp_s[c], 0) for c in range(C)],
                                                    lambda x, y_: x + y_))
            m.d.sync += [o.payload.data[c].eq(outs[c]) for c in range(C)]
            with m.If(c_o.v & c_o.out):
                m.d.sync += [o.valid.eq(1), o.payload.last.eq(c_o.last)]
        # bitlen(maxd), registered every cycle (no state in its path): maxd is final a cycle before SCALE
        maxd_bl = Signal(range(43))
        m.d.sync += maxd_bl.eq(bitlen_tree(m, maxd, 42, "maxd_bitlen"))
        m.d.comb += seed_r.addr.eq((mant >> 23) - 64)
        m.d.sync += seed_q.eq(seed_r.data)
        wrong = Signal()
        with m.If(fire & wrong):
            m.d.sync += self.error.eq(1)
        m.d.comb += [i.ready.eq(st_hdr | st_sum | (row_st & adv) | (pass_out & wrong)),
                     wrong.eq(Mux(st_hdr, p.kind != HDR, p.kind != ROW))]
        # a row beat taken, in any pass (fire & ~wrong outside HDR), and the header taken in HDR: from the state
        # flags, not from ready
        beat, hdr_in = Signal(name="norm_beat"), Signal(name="norm_hdr_in")
        m.d.comb += hdr_in.eq(st_hdr & i.valid & (p.kind == HDR))
        m.d.comb += [beat.eq(i.valid & (p.kind == ROW) & (st_sum | (row_st & adv))), take.eq(beat & row_st)]
        with m.If(beat):  # the beat counter of every pass
            m.d.sync += [left.eq(Mux(p.last, n, left_m)), left_m.eq(Mux(p.last, n_m, left_m - C))]
            m.d.sync += [lane_ok[c].eq(Mux(p.last, n_gt[c], left_m > c)) for c in range(C)]
        with m.If(st_hdr):
            # nothing reads these in HDR (the last row's beats have left stage 1): the header's fields are loaded
            # through the state (the last cycle's, the header's, stays), not by its handshake
            m.d.sync += [acc.eq(0), mean.eq(0), maxd.eq(0), eps_sel.eq(0)]
            m.d.sync += [n.eq(p.n), eps.eq(p.eps), left.eq(p.n), left_m.eq(p.n - C), n_m.eq(p.n - C)]
            with m.If(hdr_in):  # (center selects beta in stage 1 every cycle: the header's alone)
                m.d.sync += center.eq(p.center)
            m.d.sync += [x.eq(p.n > c) for c, x in enumerate(lane_ok)] + [x.eq(p.n > c) for c, x in enumerate(n_gt)]
        # the SUM pass's beat sum is registered before it is added to acc (the beat comes straight from the row-pass
        # sequencer's slot multiplexer, and that with a 64-bit add behind it was its slowest path on ECP5):
        # the last beat's sum is added in SUM_DRAIN
        sum_in = Signal(signed(32 + C.bit_length()), name="sum_in", reset_less=True)
        sum_v = Signal(name="sum_v")
        m.d.sync += sum_v.eq(beat & st_sum)
        # every cycle (read only after a beat of the pass: sum_v), so its enable is no beat's handshake, and with
        # one lane the lane's flag is its clear
        m.d.sync += sum_in.eq(sum(Mux(lane_ok[c], p.a[c], 0) for c in range(C)))
        with m.If(sum_v):
            m.d.sync += acc.eq(acc + sum_in)

        def goto(state):
            fsm.goto(state)

        def row_pass(next_state):
            """The hand-over at a pass's `last`."""
            with m.If(beat & p.last):
                goto(next_state)

        def wait(name, next_state, cycles=3):
            """``cycles`` states that only wait (for the multiplier), then ``next_state``."""
            for j in range(cycles):
                with fsm.state(f"{name}{j}"):
                    goto(f"{name}{j + 1}" if j + 1 < cycles else next_state)

        with fsm.state("HDR"), m.If(hdr_in):
            goto("RECIP")
        with fsm.state("RECIP"):
            m.d.comb += recip.i_stream.valid.eq(1)
            with m.If(recip.i_stream.ready):
                goto("RECIP_WAIT")
        with fsm.state("RECIP_WAIT"):  # the last row's output beats have left the pipeline, too
            m.d.comb += recip.o_stream.ready.eq(drained)
            with m.If(recip.o_stream.valid & drained):
                m.d.sync += [ry.eq(recip.o_stream.payload.y), rk.eq(recip.o_stream.payload.k)]
                with m.If(center):
                    goto("SUM")
                with m.Else():
                    goto("MAXD")
        with fsm.state("SUM"):
            row_pass("SUM_DRAIN")
        with fsm.state("SUM_DRAIN"):  # the last beat's sum goes into acc
            goto("MEAN0")
        with fsm.state("MEAN0"):
            m.d.sync += mag_r.eq(Mux(acc < 0, -acc, acc))
            goto("MEAN1")
        # _trunc31 of the sum (MEAN1, MEAN2) and of the sum of squares (RSQ4, RSQ5): c = max(0, bitlen(|v|) -
        # 31) = bitlen(|v| >> 31) (a 33-bit encoder, no subtraction behind it), then v >> c; the two take turns
        # on one encoder and one shifter (eps_sel: 0 for the sum, 1 for the sum of squares).  The shift is
        # registered (every cycle; a state after cc_r's, MEAN1B / RSQ4B) before it becomes the multiplier's
        # operand: the 64-bit shifter and the operand select in one cycle were the unit's slowest path on ECP5
        t31_bl = bitlen_tree(m, Mux(eps_sel, ssp_r, mag_r) >> 31, 33, "t31_bitlen")
        t31_sh = Signal(signed(32), name="t31_sh", reset_less=True)
        m.d.sync += t31_sh.eq(Mux(eps_sel, ssp_r, acc) >> cc_r)
        with fsm.state("MEAN1"):
            m.d.sync += cc_r.eq(t31_bl)
            goto("MEAN1B")
        with fsm.state("MEAN1B"):
            goto("MEAN2")
        with fsm.state("MEAN2"):
            multiply(t31_sh, ry)
            m.d.sync += e.eq(rk - cc_r - GUARD)  # the mean's shift, held in e until MEAN3
            goto("MEAN_W0")
        wait("MEAN_W", "MEAN3", 4)  # and a state for term_x's register (below)
        # the mean's rsr(prod, e) (left shifts of at most 8) and, a pass later, the eps term's rsr(n * eps,
        # 2s - 16) (at most 16) take turns on one shifter: `eps_sel` (set in SCALE, cleared in HDR) picks
        # the operands, which hold still from the state that sets them to the one that loads
        ne = Signal(signed(41))
        m.d.comb += ne.eq(prod[:40])
        esh = Signal(signed(8))
        m.d.comb += esh.eq((s << 1) - 2 * GUARD)
        # the shifter's operand is registered every cycle (eps_sel's select and the 64-bit shifter in one cycle were
        # the row-pass sequencer's slowest path on ECP5): prod is final a state before MEAN3 (MEAN_W3), n * eps
        # since SCALE
        term_x, term_sh = Signal(signed(65), name="term_x", reset_less=True), Signal(signed(10))
        m.d.sync += term_x.eq(Mux(eps_sel, ne, prod))
        m.d.comb += term_sh.eq(Mux(eps_sel, esh, e))
        term_ld, term = rsr_split(term_x, term_sh, 64, 16, "row_term")
        with fsm.state("MEAN3"):
            m.d.sync += term_ld
            goto("MEAN4")
        with fsm.state("MEAN4"):
            m.d.sync += mean.eq(term)
            goto("MAXD")
        with fsm.state("MAXD"):
            row_pass("MAXD_DRAIN")
        with fsm.state("MAXD_DRAIN"), m.If(maxd_in):
            goto("SCALE")
        with fsm.state("SCALE"):
            m.d.sync += [s.eq(Mux(maxd_bl > 23, maxd_bl - 23, 0)), acc_sq.eq(0), eps_sel.eq(1)]
            multiply(n, eps)  # < 2**40, held in prod through the next pass
            goto("SSQ")
        with fsm.state("SSQ"):
            row_pass("SSQ_DRAIN")
        with fsm.state("SSQ_DRAIN"), m.If(squares_in):  # the last squares are in acc (and n * eps in prod)
            goto("RSQ0")
        # ss = sum + rsr(n * eps, 2s - 16); st, c = trunc31(max(ss, 1)); v = st * ry: one step a state
        with fsm.state("RSQ0"):
            m.d.sync += term_ld
            goto("RSQ1")
        with fsm.state("RSQ1"):
            m.d.sync += eterm_r.eq(term)
            goto("RSQ2")
        with fsm.state("RSQ2"):
            m.d.sync += ss_r.eq(acc_sq + eterm_r)
            goto("RSQ3")
        with fsm.state("RSQ3"):
            # max(ss, 1): ss < 1 as its sign or all-zero (logic, no 64-bit compare chain in front of the select)
            m.d.sync += ssp_r.eq(Mux(ss_r[-1] | (ss_r == 0), 1, ss_r))
            goto("RSQ4")
        with fsm.state("RSQ4"):
            m.d.sync += cc_r.eq(t31_bl)
            goto("RSQ4B")
        with fsm.state("RSQ4B"):
            goto("RSQ5")
        with fsm.state("RSQ5"):
            multiply(t31_sh[:31], ry)  # ssp >> cc < 2**31 by the choice of cc
            m.d.sync += e.eq(cc_r + (s << 1) - 2 * (16 + GUARD) - rk)
            goto("RSQ_W0")
        wait("RSQ_W", "RSQ6")
        # rsqrt_fx(v, e): t = bitlen(v) - 1 + e; K = t >> 1; sh = 29 + e - 2K; m = v << sh or v >> -sh
        v = Signal(unsigned(61))  # < 2**31 * 2**30
        m.d.comb += v.eq(prod[:61])
        with fsm.state("RSQ6"):
            # the tree's index and flag, not bitlen's increment after it (its carry chain was on ulx3s's late list)
            v_any, v_pos = bitlen_parts(m, v, 61, "v_bitlen")
            m.d.sync += vb_m1.eq(Mux(v_any, v_pos, -1))
            goto("RSQ7")
        with fsm.state("RSQ7"):
            t = Signal(signed(10))
            m.d.comb += t.eq(vb_m1 + e)
            kk = Signal(signed(10))
            m.d.comb += kk.eq(t >> 1)
            m.d.sync += [sh_r.eq(29 + e - (kk << 1)), k.eq(30 + kk)]
            goto("RSQ7B")
        nsh, psh, sh_pos = Signal(range(64)), Signal(range(32)), Signal()
        with fsm.state("RSQ7B"):
            m.d.sync += [nsh.eq(Mux(sh_r < 0, -sh_r, 0)), psh.eq(Mux(sh_r > 0, sh_r, 0)), sh_pos.eq(sh_r >= 0)]
            goto("RSQ8")
        with fsm.state("RSQ8"):
            m.d.sync += [mant.eq(Mux(sh_pos, v << psh, v >> nsh)), tsh_r.eq(k + 16 + GUARD - 20 - s)]
            goto("RSQ9")
        with fsm.state("RSQ9"):  # the seed table's entry for mant is registered at the end of this state
            goto("RSQ10")
        with fsm.state("RSQ10"):
            m.d.sync += [y.eq(seed_q), newton.eq(0)]
            # the output's t = rsr(ds * y, tsh) (max_left 8), its shifts registered for the whole pass
            m.d.sync += [t_sr1.eq(Mux(tsh_r > 63, 62, Mux(tsh_r < 1, 0, tsh_r - 1))),
                         t_sl.eq(Mux(tsh_r < -8, 8, Mux(tsh_r > 0, 0, -tsh_r))),
                         t_zero.eq(tsh_r > 63), t_right.eq(tsh_r > 0)]
            goto("NEWTON_A")
        # Newton: y2 = (y * y) >> 30; tt = (m * y2) >> 29; y = (y * (3 * 2**30 - tt)) >> 31, twice.
        # Bounds over every seed interval (interval arithmetic on the 192 entries of RSQRT_SEED):
        # y, y2 < 2**30 before a step and y < 2**31 after it, tt < 2**31, 2**30.98 < 3 * 2**30 - tt
        # < 2**31.02: all products are non-negative, so the shifts are bit slices of prod.
        with fsm.state("NEWTON_A"):
            ycur = Signal(unsigned(31))
            m.d.comb += ycur.eq(Mux(newton, prod[31:62], y))
            m.d.sync += y.eq(ycur)
            multiply(ycur, ycur)
            goto("NEWTON_AW0")
        wait("NEWTON_AW", "NEWTON_B")
        with fsm.state("NEWTON_B"):
            multiply(mant, prod[30:61])
            goto("NEWTON_BW0")
        wait("NEWTON_BW", "NEWTON_C")
        with fsm.state("NEWTON_C"):
            multiply(y, Const(3 << 30, signed(34)) - prod[29:61])
            m.d.sync += [newton.eq(1), newton_done.eq(newton)]
            goto("NEWTON_CW0")
        for j in range(3):
            with fsm.state(f"NEWTON_CW{j}"):
                if j < 2:
                    goto(f"NEWTON_CW{j + 1}")
                else:
                    with m.If(newton_done):  # that was the second step
                        goto("OUT")
                    with m.Else():
                        goto("NEWTON_A")
        with fsm.state("OUT"):
            row_pass("HDR")  # the last beats drain during the next row's header and reciprocal
        a_terms, b_terms = [], []
        for flag, a_, b_ in mul_ops:
            ac, bc = Signal.like(ma, name="mul_a_in"), Signal.like(mb, name="mul_b_in")
            m.d.comb += [ac.eq(a_), bc.eq(b_)]
            a_terms.append(Mux(flag, ac.as_unsigned(), 0))
            b_terms.append(Mux(flag, bc.as_unsigned(), 0))
        with m.If(Cat(*[f for f, _, _ in mul_ops]).any()):
            m.d.sync += [ma.eq(tree(a_terms, lambda x, y: x | y)), mb.eq(tree(b_terms, lambda x, y: x | y))]
        return m
