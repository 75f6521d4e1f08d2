"""Reciprocal: ``numerics.recip`` — ``1/d ≈ y * 2**-k`` — by a restoring divider, one bit per cycle.

``n = bitlen(d)``; ``m`` = the top 31 bits of ``d`` (``2**30 <= m < 2**31``);
``y = floor(2**60 / m)``, ``k = n + 29``; ``d <= 0`` counts as 1.  The quotient is exact
(31 subtract-and-compare steps), so any exact method gives the same bits; one step per
cycle is enough because the units need one reciprocal per row (attention output,
norms), not per element.  Latency 33 cycles from the request to the result.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .fixed import bitlen_u

__all__ = ["Reciprocal"]


class Reciprocal(wiring.Component):
    """Iterative exact reciprocal of a ``d_bits``-bit signed value.

    Attributes
    ----------
    i_stream : In(stream)
        ``d`` (signed ``d_bits``).
    o_stream : Out(stream)
        ``y`` (31 bits, ``2**29 < y <= 2**30``) and ``k`` (``bitlen(d) + 29``).
    """

    def __init__(self, d_bits: int = 64):
        if not (isinstance(d_bits, int) and 2 <= d_bits <= 64):
            raise ValueError(f"d_bits={d_bits!r} must be an int in 2..64")
        self.d_bits = d_bits
        self.o_layout = data.StructLayout({"y": unsigned(31), "k": unsigned(7)})
        super().__init__({
            "i_stream": In(stream.Signature(signed(d_bits))),
            "o_stream": Out(stream.Signature(self.o_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        i, o = self.i_stream, self.o_stream
        W = self.d_bits
        dpos = Signal(unsigned(W))
        m.d.comb += dpos.eq(Mux(i.payload <= 0, 1, i.payload))
        n = bitlen_u(m, dpos, W, "n")
        mant = Signal(unsigned(31))
        left = Signal(range(32))
        m.d.comb += left.eq(Mux(n <= 31, 31 - n, 0))
        right = Signal(range(W))
        m.d.comb += right.eq(Mux(n > 31, n - 31, 0))
        m.d.comb += mant.eq(Mux(n <= 31, dpos << left, dpos >> right))

        div = Signal(unsigned(31))  # the divisor m
        rem = Signal(unsigned(62))
        quo = Signal(unsigned(31))
        bit = Signal(range(32))
        k = Signal(unsigned(7))
        with m.FSM(name="recip"):
            with m.State("IDLE"):
                m.d.comb += i.ready.eq(1)
                with m.If(i.valid):
                    m.d.sync += [div.eq(mant), rem.eq(1 << 60), quo.eq(0), bit.eq(30), k.eq(n + 29)]
                    m.next = "DIV"
            with m.State("DIV"):
                trial = Signal(unsigned(63))
                m.d.comb += trial.eq(rem - (div << bit))
                with m.If(~trial[62]):  # no borrow: rem >= m << bit
                    m.d.sync += [rem.eq(trial), quo.eq(quo | (Const(1, 1) << bit))]
                m.d.sync += bit.eq(bit - 1)
                with m.If(bit == 0):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += [o.valid.eq(1), o.payload.y.eq(quo), o.payload.k.eq(k)]
                with m.If(o.ready):
                    m.next = "IDLE"
        return m
