"""Activation unit: SILU and GELU over fixed-point beats of ``L`` lanes, one a cycle, bit-exact with numerics.

Both are ``x * sigmoid(z)`` (``numerics.silu``: ``z = x``; ``numerics.gelu``, GPT-2's tanh
form: ``z = u2``, a cubic of the clipped ``x``), so one deep pipeline per lane serves both:

1. GELU front end: ``xc = clip(x, +-16)``, ``x3 = rsr(rsr(xc*xc, 16)*xc, 16)``,
   ``w = xc + rsr(x3*C1, 30)``, ``u2 = rsr(w*C2, 30)``; SILU passes ``x`` by.  The products by
   the constants ``C1`` and ``C2`` are shift-and-add trees in LUTs (:mod:`~systolica.hw.vec_lut_mul`,
   four stages each): they would take four of ECP5's 18x18 multipliers each; with ``cfg.dsp_muls`` (parts
   with DSPs to spare) they are four multiplier pieces each instead, delayed to the same stage.
2. ``exp_fx(-|z|)`` (4 stages): ``u = rsr(-|z| * LOG2E_Q30, 22)``; its 8 top fraction bits
   address the 256-entry ``EXP_BASE`` / ``EXP_DELTA`` tables (a ROM per lane, read
   synchronously); linear interpolation; the integer part is a rounding right shift.
3. The exact quotient ``floor(2**60 / (2**30 + e))`` of ``numerics.sigmoid_fx``: a restoring
   divider of 31 steps, :data:`DIV_STEPS` steps per pipeline stage (31 stages of a 33-bit subtract and a
   multiplexer); or, with ``cfg.act_newton``, ``numerics.recip_seeded``: a
   256-entry seed ROM and two Newton steps on seven 18 x 18 multiplier pieces, 15 stages (kv260's 4 lanes,
   Yosys xcup: 10,740 -> 3,944 LUT, 100 -> 128 DSP).  Both are exact, so both give the same bits.
4. ``sig = s`` or ``2**30 - s`` by the sign of ``z``; ``sat32(rsr(x * sig, 30))``.

(``rsr`` is ``numerics.rshift_round``.)  The whole pipeline stalls on output
back-pressure (one clock enable), like the array.
"""

from __future__ import annotations

import enum

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory

from systolica.config import AccelConfig

from .line_unit import LineUnit, Stages, Timed
from .vec_lut_mul import const_mul, const_mul_latency

__all__ = ["ActivationUnit", "ActOp", "DIV_STEPS", "activation_latency"]

DIV_STEPS = 1  # restoring-divider steps per pipeline stage: 31 stages for the 31 quotient bits
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _cmul(tl: Timed, tv, k: int, name: str, dsp: bool = False):
    """The registered value ``tv = (value, stage)`` times the constant ``k``: shift-and-add in LUTs, or with ``dsp``
    on multipliers (:meth:`Stages.mul`'s pieces), delayed to the same stage as the LUT tree's."""
    v, t = tv
    if not dsp:
        return const_mul(tl.st, v, k, name), t + const_mul_latency(k)
    prod = tl.mul(tv, (Const(k, signed(k.bit_length() + 1)), 0), name)
    assert prod[1] <= t + const_mul_latency(k), (prod[1], t, k)
    return tl.at(prod, t + const_mul_latency(k)), t + const_mul_latency(k)


def _recip_restoring(tl: Timed, d, n: str):
    """``floor(2**60 / d)`` of the registered ``d`` in ``[2**30, 2**31]``: restoring division, one quotient bit a
    stage, on the partial remainder R = r >> bit (< 2d: 33 bits, not 62): bit set when R >= d, then R = 2 (R - d)."""
    R = tl.reg
    rr, q = (Const(1 << 30, unsigned(32)), d[1]), (Const(0, 1), d[1])
    for bit in range(30, -1, -1):
        # r_ < 2**32, dd <= 2**31: bit 32 of the 33-bit difference is its borrow
        def step(r_, dd):
            trial = (r_ - dd)[:33]
            return (Mux(trial[32], r_, trial[:32]) << 1)[:32]
        qn = R(lambda r_, dd, q_: Cat(~(r_ - dd)[:33][32], q_), rr, d, q,
               name=f"q{bit}" + n, shape=unsigned(31 - bit))
        if bit:
            rr = R(step, rr, d, name=f"r{bit}" + n, shape=unsigned(32))
        q = qn
    return q


def _recip_seeded(tl: Timed, m: Module, d, n: str, dry: bool):
    """``floor(2**60 / d)`` of the registered ``d`` in ``[2**30, 2**31]`` by :func:`numerics.recip_seeded` (``2**31``,
    outside its range, gives ``2**29``): the seed from a 256-entry ROM (read synchronously, as the exp tables), then
    seven 18 x 18 multiplier pieces, each product and each sum a stage of its own."""
    from systolica.numerics_nonlinear import RECIP_SEED16

    R = tl.reg
    mm = (d[0][:31], d[1])  # the mantissa: d itself below 2**31
    rom = memory.Memory(shape=unsigned(16), depth=256, init=[int(v) for v in RECIP_SEED16],
                        attrs={"ram_style": "block"})
    m.submodules["recip_seed" + n] = rom
    rom._MustUse__silence = dry
    rp = rom.read_port()
    m.d.comb += [rp.addr.eq(d[0][22:30]), rp.en.eq(tl.st.en)]
    y0 = R(lambda v: v, (rp.data, d[1] + 1), name="y0" + n, shape=unsigned(16))
    p1 = tl.mul((d[0][14:31], d[1]), y0, "rp1" + n)
    e1 = R(lambda p: ((1 << 32) - p) >> 7, p1, name="re1" + n, shape=signed(18))  # |e1| <= 2**16
    t1 = tl.mul(y0, e1, "rt1" + n)
    y1 = R(lambda y, t: (y << 1) + (t >> 24), y0, t1, name="ry1" + n, shape=unsigned(17))
    p2 = tl.mul(mm, y1, "rp2" + n)
    e2 = R(lambda p: (1 << 47) - p, p2, name="re2" + n, shape=signed(34))  # |e2| < 2**32
    t2 = tl.mul(y1, (e2[0][15:33].as_signed(), e2[1]), "rt2" + n)  # e2 >> 15: |.| < 2**17
    dd = R(lambda t: t >> 19, t2, name="rd" + n, shape=signed(16))  # |d| < 2**14
    y = R(lambda y_, dv: (y_ << 13) + dv, y1, dd, name="ry" + n, shape=unsigned(31))
    md = tl.mul(mm, dd, "rmd" + n)
    r = R(lambda e, p: ((e << 13) - p)[:33], e2, md, name="rr" + n, shape=unsigned(33))  # in [0, 2m)
    # the fix-up's compare a stage before its add (the two carry chains in one stage: ulx3s 11.2 ns)
    ge = R(lambda r_, m_: r_ >= m_, r, mm, name="rge" + n)
    return R(lambda y_, g_, big: Mux(big, 1 << 29, y_ + g_), y, ge, (d[0][31], d[1]), name="rq" + n,
             shape=unsigned(31))


def activation_latency(cfg: AccelConfig) -> int:
    """:attr:`ActivationUnit.latency` of ``cfg`` (pipeline depth in enabled cycles), without building the unit."""
    return ActivationUnit._lane(None, None, newton=bool(cfg.act_newton))[1] + 1


class ActOp(enum.IntEnum):
    SILU = 0
    GELU = 1


def _rsr(x, s: int):
    """``rshift_round`` by a constant ``s > 0``: ``(x >> s) + ((x >> (s-1)) & 1)``."""
    return (x >> s) + ((x >> (s - 1)) & 1)


class ActivationUnit(LineUnit):
    """``N``-lane SILU / GELU (``N = cfg.nonlinear_width``).

    Attributes
    ----------
    i_stream : In(stream)
        ``op`` (:class:`ActOp`), ``data`` (L int32, fx), ``last`` (passed through).
    o_stream : Out(stream)
        ``data`` (L int32, fx) and ``last``; one beat per input beat, in order.
    latency : int
        Pipeline depth in enabled cycles.
    """

    def __init__(self, cfg: AccelConfig):
        lanes = LineUnit.nonlinear_lanes_of(cfg)
        line = LineUnit.line(cfg, lanes=lanes)
        self.latency = activation_latency(cfg)
        super().__init__(cfg, {"op": 1, "data": line, "last": 1}, {"data": line, "last": 1},
                         lanes=lanes)

    @staticmethod
    def _lane(tl: Timed | None, x, g=None, c: int = 0, dsp: bool = False, newton: bool = False):
        """One lane from its input register ``x`` (stage 1) and the GELU flag ``g``: ``(result, stage)``,
        the result combinational at that stage (the output register is the stage after).  With
        ``tl=None`` it only counts the stages (a dry run, for :attr:`latency`)."""
        from systolica.numerics import EXP_BASE, EXP_DELTA, LOG2E_Q30
        from systolica.numerics_nonlinear import _GELU_C1, _GELU_C2, _GELU_CLAMP

        if tl is None:  # count the stages on a throw-away module
            m = Module()
            m._MustUse__silence = True  # built only to count its stages
            x = Signal(signed(32))
            tl = Timed(Stages(m, Const(1)))
            return ActivationUnit._build(tl, m, (x, 1), (Signal(), 1), 0, EXP_BASE, EXP_DELTA, LOG2E_Q30,
                                         _GELU_C1, _GELU_C2, _GELU_CLAMP, dry=True, newton=newton)
        return ActivationUnit._build(tl, tl.st.m, x, g, c, EXP_BASE, EXP_DELTA, LOG2E_Q30,
                                     _GELU_C1, _GELU_C2, _GELU_CLAMP, dsp=dsp, newton=newton)

    @staticmethod
    def _build(tl: Timed, m: Module, x, g, c, EXP_BASE, EXP_DELTA, LOG2E_Q30, C1, C2, CLAMP, dry=False, dsp=False,
               newton=False):
        n = f"_{c}"
        R = tl.reg
        # --- GELU front end: xc = clip(x), x3 = rsr(rsr(xc*xc, 16)*xc, 16), w = xc + rsr(x3*C1, 30),
        # u2 = rsr(w*C2, 30); each product on registered operands, each rounding add a stage
        # the clip in two stages: the compares (two 32-bit carry chains) into flags, then the select (the one-stage
        # clip was the ulx3s top level's critical path: x0 -> compares -> xc's set/reset, 12.5 ns)
        hi = R(lambda v: v > CLAMP, x, name="xhi" + n)
        lo = R(lambda v: v < -CLAMP, x, name="xlo" + n)
        xv = R(lambda v: v, x, name="xv" + n, shape=signed(22))  # |x| <= CLAMP < 2**21 wherever it is selected
        xc = R(lambda h, l_, v: Mux(h, CLAMP, Mux(l_, -CLAMP, v)), hi, lo, xv, name="xc" + n, shape=signed(22))
        sq = tl.mul(xc, xc, "sq" + n)
        a = R(lambda v: _rsr(v, 16), sq, name="sq16" + n, shape=signed(26))  # <= 2**24 + 1
        t = tl.mul(a, xc, "cube" + n)
        b = R(lambda v: _rsr(v, 16), t, name="x3" + n, shape=signed(30))  # |x3| < 2**28 + 2**5
        t2 = _cmul(tl, b, C1, "c1" + n, dsp)  # in LUTs (hw/vec_lut_mul.py): four MULT18X18D fewer (or dsp_muls)
        w = R(lambda v: _rsr(v, 30), t2, name="c1r" + n, shape=signed(27))  # |x3 * C1| < 2**54
        w = R(lambda v, k: v + k, w, xc, name="w" + n, shape=signed(28))
        t3 = _cmul(tl, w, C2, "c2" + n, dsp)  # in LUTs, as x3 * C1
        u2 = R(lambda v: _rsr(v, 30), t3, name="u2" + n, shape=signed(34))
        # --- exp_fx(-|z|), z = u2 (GELU) or x (SILU): u = rsr(-|z| * LOG2E_Q30, 22), its top fraction bits
        # address the tables (synchronous ROM reads, their data registered before the multiplier)
        nabs = R(lambda gg, uu, xx: Mux(gg, Mux(uu < 0, uu, -uu), Mux(xx < 0, xx, -xx)), g, u2, x,
                 name="nabs" + n, shape=signed(33))  # -2**31 .. 0
        zpos = R(lambda gg, uu, xx: Mux(gg, uu >= 0, xx >= 0), g, u2, x, name="zpos" + n)
        prod = tl.mul(nabs, (Const(LOG2E_Q30, signed(32)), 0), "eprod" + n)
        u = R(lambda v: _rsr(v, 22), prod, name="u" + n, shape=signed(44))
        dbits = max(int(v) for v in EXP_DELTA).bit_length()
        # in block RAM (the reads are synchronous already): as logic the two tables were ~320 LUT a lane (kv260's
        # 4 lanes: 12,006 -> 10,740 LUT and 4 RAMB36, Yosys xcup)
        rom = {"ram_style": "block"}
        base_rom = memory.Memory(shape=unsigned(31), depth=256, init=[int(v) for v in EXP_BASE], attrs=rom)
        delta_rom = memory.Memory(shape=unsigned(dbits), depth=256, init=[int(v) for v in EXP_DELTA], attrs=rom)
        m.submodules["exp_base" + n], m.submodules["exp_delta" + n] = base_rom, delta_rom
        base_rom._MustUse__silence = delta_rom._MustUse__silence = dry  # the dry run's module is dropped
        rb, rd = base_rom.read_port(), delta_rom.read_port()
        uu = tl.at(u, u[1])
        m.d.comb += [rb.addr.eq(uu[16:24]), rd.addr.eq(uu[16:24]), rb.en.eq(tl.st.en), rd.en.eq(tl.st.en)]
        ip = uu >> 24  # <= 0
        sh = R(lambda v: Mux(v < -40, 40, -v), (ip, u[1]), name="sh" + n, shape=unsigned(6))
        lo = R(lambda v: v[0:16], u, name="lo" + n, shape=unsigned(16))
        rom_t = u[1] + 1  # the ROM's data, a stage after the address
        base = R(lambda v: v, (rb.data, rom_t), name="base" + n)
        delta = R(lambda v: v, (rd.data, rom_t), name="delta" + n)
        dl = tl.mul(delta, lo, "dlo" + n)
        dl = R(lambda v: _rsr(v, 16), dl, name="dlo16" + n, shape=unsigned(dbits + 1))
        pp = R(lambda bb, v: bb + v, base, dl, name="p" + n, shape=unsigned(33))
        # e = (p + ((1 << sh) >> 1)) >> sh: the rounding add, then the shift by 8-place steps and the rest
        pr = R(lambda v, s_: v + ((Const(1, 1) << s_) >> 1), pp, sh, name="pr" + n, shape=unsigned(41))
        pc = R(lambda v, s_: v >> Cat(Const(0, 3), s_[3:]), pr, sh, name="pc" + n, shape=unsigned(41))
        e = R(lambda v, s_: v >> s_[:3], pc, sh, name="e" + n, shape=unsigned(31))  # <= 2**30
        d = R(lambda v: (1 << 30) + v, e, name="d" + n, shape=unsigned(32))
        # --- floor(2**60 / d), d in [2**30, 2**31]
        q = _recip_seeded(tl, m, d, n, dry) if newton else _recip_restoring(tl, d, n)
        # --- sigmoid by the sign of z, then sat32(rsr(x * sig, 30))
        sig = R(lambda zz, v: Mux(zz, v, (1 << 30) - v), zpos, q, name="sig" + n, shape=signed(32))
        prod2 = tl.mul(x, sig, "fprod" + n)
        y = R(lambda v: _rsr(v, 30), prod2, name="y" + n, shape=signed(34))  # |x * sig| <= 2**61
        yv, ty = y
        return Mux(yv > INT32_MAX, INT32_MAX, Mux(yv < INT32_MIN, INT32_MIN, yv)), ty

    def elaborate(self, platform):
        m = Module()
        i, o = self.i_stream, self.o_stream
        en = Signal()
        m.d.comb += [en.eq(~o.valid | o.ready), i.ready.eq(en)]
        tl = Timed(Stages(m, en))

        gelu0 = tl.st.reg(i.payload.op == ActOp.GELU, "gelu0")
        outs = []
        for c in range(self.lanes):
            x = tl.st.reg(i.payload.data[c], f"x0_{c}", signed(32))
            out, t_out = self._lane(tl, (x, 1), (gelu0, 1), c, dsp=bool(self.cfg.dsp_muls),
                                    newton=bool(self.cfg.act_newton))
            assert t_out + 1 == self.latency, (t_out, self.latency)
            outs.append(out)
        # valid / last travel beside the lanes for the whole depth; the output register is the last stage
        side = data.StructLayout({"valid": 1, "last": 1})
        sv = Signal(side)
        m.d.comb += [sv.valid.eq(i.valid & i.ready), sv.last.eq(i.payload.last)]
        sv = tl.st.delay(sv, self.latency - 1, "side", side, control=True)
        with m.If(en):
            m.d.sync += [o.valid.eq(sv.valid), o.payload.last.eq(sv.last)]
            m.d.sync += [o.payload.data[c].eq(outs[c]) for c in range(self.lanes)]
        return m
