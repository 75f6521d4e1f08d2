"""Fixed-point building blocks shared by the vector, activation and attention units.

Each function adds combinational logic to a module and returns the result signal;
each is the hardware form of one :mod:`systolica.numerics` primitive, bit for bit.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed, unsigned

__all__ = ["INT32_MIN", "INT32_MAX", "sat32", "rshift_round_var", "rshift_round_sat32", "bitlen_u", "exp2_lookup"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def sat32(m: Module, x, name: str):
    """``numerics.sat32``: clamp a signed value to int32."""
    out = Signal(signed(32), name=name)
    m.d.comb += out.eq(Mux(x > INT32_MAX, INT32_MAX, Mux(x < INT32_MIN, INT32_MIN, x)))
    return out


def rshift_round_var(m: Module, x, s, width: int, name: str, max_left: int = 0):
    """``numerics.rshift_round(x, s)`` for a signed ``x`` and a signed shift signal ``s``.

    ``s > 0``: ``(x >> s) + ((x >> (s - 1)) & 1)``, 0 for ``s >= 64`` (as numerics);
    ``s <= 0``: ``x << -s``, with ``-s`` capped at ``max_left`` (the caller knows how far a left
    shift can matter).  The result is ``width`` bits, signed.
    """
    # One barrel shifter, not two: with t = x >> (s - 1) = 2 * (x >> s) + bit, the rounded
    # (x >> s) + bit is (t + 1) >> 1 (floor((2q + b + 1) / 2) = q + b for b in {0, 1}).
    sr1 = Signal(range(63), name=f"{name}_sr1")
    m.d.comb += sr1.eq(Mux(s > 63, 62, Mux(s < 1, 0, s - 1)))
    right = Signal(signed(width), name=f"{name}_r")
    m.d.comb += right.eq(((x >> sr1) + 1) >> 1)
    out = Signal(signed(width), name=name)
    if max_left > 0:
        sl = Signal(range(max_left + 1), name=f"{name}_sl")
        m.d.comb += sl.eq(Mux(s < -max_left, max_left, Mux(s > 0, 0, -s)))
        left = x << sl
    else:
        left = x
    m.d.comb += out.eq(Mux(s > 63, 0, Mux(s > 0, right, left)))
    return out


def rshift_round_sat32(m: Module, x, s, name: str):
    """``sat32(rshift_round(x, s))`` for a signed 64-bit ``x`` and a signed shift ``s``.

    Left shifts of 33 or more places saturate any non-zero ``x``, so they are capped there.
    """
    wide = rshift_round_var(m, x, s, 98, f"{name}_w", max_left=33)
    return sat32(m, wide, name)


def bitlen_u(m: Module, x, width: int, name: str):
    """``numerics.bitlen`` of a non-negative ``width``-bit value: a priority encoder."""
    out = Signal(range(width + 1), name=name)
    m.d.comb += out.eq(0)
    for b in range(width):  # the highest set bit wins: later assignments take priority
        with m.If(x[b]):
            m.d.comb += out.eq(b + 1)
    return out


def exp2_lookup(m: Module, u, ufrac: int, frac_off, base_port, delta_port, name: str):
    """``numerics.exp2_fx(u, ufrac, 30 - frac_off)`` with combinational table ports.

    ``u`` is signed and ``<= 0`` (positive values count as 0, as numerics); ``frac_off`` is
    ``30 - frac`` (a constant or a small signal).  ``base_port`` / ``delta_port`` are
    read ports (``domain="comb"``) of the 256-entry ``EXP_BASE`` / ``EXP_DELTA`` tables.
    """
    uc = Signal(signed(len(u)), name=f"{name}_u")
    m.d.comb += uc.eq(Mux(u > 0, 0, u))
    lob = ufrac - 8
    hi = uc[lob:ufrac]
    lo = uc[0:lob]
    m.d.comb += [base_port.addr.eq(hi), delta_port.addr.eq(hi)]
    p = Signal(unsigned(33), name=f"{name}_p")
    m.d.comb += p.eq(base_port.data + ((delta_port.data * lo) >> lob) + (((delta_port.data * lo) >> (lob - 1)) & 1))
    ip = uc >> ufrac  # <= 0
    sh = Signal(range(41), name=f"{name}_sh")
    m.d.comb += sh.eq(Mux(frac_off - ip > 40, 40, frac_off - ip))
    out = Signal(unsigned(33), name=name)
    m.d.comb += out.eq((p + ((Const(1, 1) << sh) >> 1)) >> sh)
    return out
