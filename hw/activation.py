"""Activation unit: SILU and GELU over fixed-point beats of ``L`` lanes, one a cycle, bit-exact with numerics.

Both are ``x * sigmoid(z)`` (``numerics.silu``: ``z = x``; ``numerics.gelu``, GPT-2's tanh
form: ``z = u2``, a cubic of the clipped ``x``), so one deep pipeline per lane serves both:

1. GELU front end (5 stages): ``xc = clip(x, +-16)``, ``x3 = rsr(rsr(xc*xc, 16)*xc, 16)``,
   ``w = xc + rsr(x3*C1, 30)``, ``u2 = rsr(w*C2, 30)``; SILU passes ``x`` by.
2. ``exp_fx(-|z|)`` (4 stages): ``u = rsr(-|z| * LOG2E_Q30, 22)``; its 8 top fraction bits
   address the 256-entry ``EXP_BASE`` / ``EXP_DELTA`` tables (a ROM per lane, read
   synchronously); linear interpolation; the integer part is a rounding right shift.
3. The exact quotient ``floor(2**60 / (2**30 + e))`` of ``numerics.sigmoid_fx``: a restoring
   divider of 31 steps, :data:`DIV_STEPS` steps per pipeline stage.
4. ``sig = s`` or ``2**30 - s`` by the sign of ``z``; ``sat32(rsr(x * sig, 30))``.

(``rsr`` is ``numerics.rshift_round``.)  The whole pipeline stalls on output
back-pressure (one clock enable), like the array.
"""

from __future__ import annotations

import enum

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory

from systolica.config import AccelConfig

from .line_unit import LineUnit

__all__ = ["ActivationUnit", "ActOp", "DIV_STEPS"]

DIV_STEPS = 4  # restoring-divider steps per pipeline stage: 8 stages for the 31 quotient bits
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


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
        self.latency = 1 + 5 + 4 + -(-31 // DIV_STEPS) + 2
        super().__init__(cfg, {"op": 1, "data": line, "last": 1}, {"data": line, "last": 1},
                         lanes=lanes)

    def elaborate(self, platform):
        # the numerics module defines the constants; the hardware reads them at generation time
        from systolica.numerics import EXP_BASE, EXP_DELTA, LOG2E_Q30
        from systolica.numerics_nonlinear import _GELU_C1, _GELU_C2, _GELU_CLAMP

        m = Module()
        i, o = self.i_stream, self.o_stream
        en = Signal()
        m.d.comb += [en.eq(~o.valid | o.ready), i.ready.eq(en)]

        def reg(value, shape, name):
            s = Signal(shape, name=name)
            with m.If(en):
                m.d.sync += s.eq(value)
            return s

        # valid / last / op travel beside the lanes for the whole depth
        side = data.StructLayout({"valid": 1, "last": 1})
        sv = Signal(side)
        m.d.comb += [sv.valid.eq(i.valid & i.ready), sv.last.eq(i.payload.last)]
        for d in range(self.latency):
            sv = reg(sv, side, f"side_{d}")
        m.d.comb += [o.valid.eq(sv.valid), o.payload.last.eq(sv.last)]
        gelu0 = reg(i.payload.op == ActOp.GELU, 1, "gelu0")

        for c in range(self.lanes):
            x = reg(i.payload.data[c], signed(32), f"x0_{c}")
            xs = [x]  # x delayed stage by stage: the final product needs it

            def carry(v, shape, name, _c=c):
                return reg(v, shape, f"{name}_{_c}")

            # --- GELU front end ------------------------------------------------------
            xc = Signal(signed(22), name=f"xc_{c}")
            m.d.comb += xc.eq(Mux(x > _GELU_CLAMP, _GELU_CLAMP, Mux(x < -_GELU_CLAMP, -_GELU_CLAMP, x)))
            sq = carry(xc * xc, signed(44), "sq")
            xc1 = carry(xc, signed(22), "xc1")
            t = carry(_rsr(sq, 16) * xc1, signed(48), "t")
            xc2 = carry(xc1, signed(22), "xc2")
            t2 = carry(_rsr(t, 16) * _GELU_C1, signed(60), "t2")
            xc3 = carry(xc2, signed(22), "xc3")
            t3 = carry((xc3 + _rsr(t2, 30)) * _GELU_C2, signed(62), "t3")
            u2 = carry(_rsr(t3, 30), signed(34), "u2")
            g = gelu0
            for k in range(5):
                xs.append(carry(xs[-1], signed(32), f"xd{k}"))
                g = carry(g, 1, f"g{k}")
            z = Signal(signed(34), name=f"z_{c}")
            m.d.comb += z.eq(Mux(g, u2, xs[-1]))

            # --- exp_fx(-|z|): u, LUT address, interpolation, integer-part shift -------
            zpos = [carry(z >= 0, 1, "zpos0")]
            nabs = Mux(z < 0, z, -z)
            prod = carry(nabs * LOG2E_Q30, signed(66), "eprod")
            xs.append(carry(xs[-1], signed(32), "xe0"))
            u = Signal(signed(44), name=f"u_{c}")
            m.d.comb += u.eq(_rsr(prod, 22))
            base_rom = memory.Memory(shape=unsigned(32), depth=256, init=[int(v) for v in EXP_BASE])
            delta_rom = memory.Memory(shape=unsigned(32), depth=256, init=[int(v) for v in EXP_DELTA])
            m.submodules[f"exp_base_{c}"], m.submodules[f"exp_delta_{c}"] = base_rom, delta_rom
            rb, rd = base_rom.read_port(), delta_rom.read_port()
            hi = u[16:24]  # f = u & 0xFFFFFF; hi = f >> 16
            m.d.comb += [rb.addr.eq(hi), rd.addr.eq(hi), rb.en.eq(en), rd.en.eq(en)]
            lo = carry(u[0:16], unsigned(16), "lo")
            ip = u >> 24  # <= 0
            sh = carry(Mux(ip < -40, 40, -ip), unsigned(6), "sh")
            zpos.append(carry(zpos[-1], 1, "zpos1"))
            xs.append(carry(xs[-1], signed(32), "xe1"))
            p = carry(rb.data + _rsr(rd.data * lo, 16), unsigned(33), "p")
            sh2 = carry(sh, unsigned(6), "sh2")
            zpos.append(carry(zpos[-1], 1, "zpos2"))
            xs.append(carry(xs[-1], signed(32), "xe2"))
            e = (p + ((Const(1, 1) << sh2) >> 1)) >> sh2
            dv = carry((1 << 30) + e, unsigned(32), "d")
            zpos.append(carry(zpos[-1], 1, "zpos3"))
            xs.append(carry(xs[-1], signed(32), "xe3"))

            # --- restoring division floor(2**60 / d): quotient bits 30..0 -------------------
            r = Signal(unsigned(62), name=f"r0_{c}")
            m.d.comb += r.eq(1 << 60)
            q = Signal(unsigned(31), name=f"q0_{c}")
            m.d.comb += q.eq(0)
            dd = dv
            bit = 30
            stage = 0
            while bit >= 0:
                for _ in range(DIV_STEPS):
                    if bit < 0:
                        break
                    trial = Signal(unsigned(63), name=f"trial_{c}_{bit}")
                    m.d.comb += trial.eq(r - (dd << bit))
                    ok = ~trial[62]  # no borrow: r >= d << bit
                    nr = Signal(unsigned(62), name=f"r_{c}_{bit}")
                    nq = Signal(unsigned(31), name=f"q_{c}_{bit}")
                    m.d.comb += [nr.eq(Mux(ok, trial, r)), nq.eq(q | (ok << bit))]
                    r, q = nr, nq
                    bit -= 1
                r = carry(r, unsigned(62), f"dr{stage}")
                q = carry(q, unsigned(31), f"dq{stage}")
                dd = carry(dd, unsigned(32), f"dd{stage}")
                zpos.append(carry(zpos[-1], 1, f"zposd{stage}"))
                xs.append(carry(xs[-1], signed(32), f"xdv{stage}"))
                stage += 1

            # --- sigmoid by the sign of z, then x * sig, round, saturate -------------------
            sig = Mux(zpos[-1], q, (1 << 30) - q)
            prod2 = carry(xs[-1] * sig, signed(64), "fprod")
            y = _rsr(prod2, 30)
            out = Mux(y > INT32_MAX, INT32_MAX, Mux(y < INT32_MIN, INT32_MIN, y))
            with m.If(en):
                m.d.sync += o.payload.data[c].eq(out)
        return m
