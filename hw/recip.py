"""Reciprocal: ``numerics.recip`` — ``1/d ≈ y * 2**-k`` — by a restoring divider, one bit per cycle.

``n = bitlen(d)``; ``m`` = the top 31 bits of ``d`` (``2**30 <= m < 2**31``);
``y = floor(2**60 / m)``, ``k = n + 29``; ``d <= 0`` counts as 1.  The quotient is exact
(31 subtract-and-compare steps), so any exact method gives the same bits; one step per
cycle is enough because the units need one reciprocal per row (attention output,
norms), not per element.  Latency 33 cycles from the request to the result, or 35 with
``registered=True`` (the operand, its bit length and the normalizing shift a cycle each).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .fixed import bitlen_tree

__all__ = ["Reciprocal"]


class Reciprocal(wiring.Component):
    """Iterative exact reciprocal of a ``d_bits``-bit signed value.

    Attributes
    ----------
    i_stream : In(stream)
        ``d`` (signed ``d_bits``).
    o_stream : Out(stream)
        ``y`` (31 bits, ``2**29 < y <= 2**30``) and ``k`` (``bitlen(d) + 29``).

    ``registered=True``: the operand, its bit length and the normalized mantissa are registered one
    after another (latency 35); otherwise the normalization is combinational from the request (33).
    """

    def __init__(self, d_bits: int = 64, *, registered: bool = False):
        if not (isinstance(d_bits, int) and 2 <= d_bits <= 64):
            raise ValueError(f"d_bits={d_bits!r} must be an int in 2..64")
        self.d_bits = d_bits
        self.registered = registered
        self.o_layout = data.StructLayout({"y": unsigned(31), "k": unsigned(7)})
        super().__init__({
            "i_stream": In(stream.Signature(signed(d_bits))),
            "o_stream": Out(stream.Signature(self.o_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        i, o = self.i_stream, self.o_stream
        W = self.d_bits
        # one step a cycle: the operand is registered (IDLE), its bit length found (LEN), the mantissa
        # normalized (NORM), then 31 compare-and-subtract steps of long division, the partial remainder
        # shifted left a place a step against the fixed divisor m: 2**60's bits 60..31 only shift it up to
        # 2**29 (< m), so it starts there, and stays below m < 2**31, a 33-bit subtractor (the divisor
        # shifted right against a 61-bit remainder was the row-pass sequencer's slowest path on ECP5)
        R = self.registered
        dreq = Signal(unsigned(W))
        m.d.comb += dreq.eq(Mux(i.payload <= 0, 1, i.payload))
        dpos = Signal(unsigned(W), reset_less=True) if R else dreq
        nb = bitlen_tree(m, dpos, W, "nb")
        n = Signal(range(W + 1), reset_less=True) if R else nb
        left = Signal(range(32))
        m.d.comb += left.eq(Mux(n <= 31, 31 - n, 0))
        right = Signal(range(W))
        m.d.comb += right.eq(Mux(n > 31, n - 31, 0))
        mant = Signal(unsigned(31))
        m.d.comb += mant.eq(Mux(n <= 31, dpos << left, dpos >> right))

        dm = Signal(unsigned(31), reset_less=True)  # m
        rem = Signal(unsigned(31), reset_less=True)  # the partial remainder, < m
        quo = Signal(unsigned(31), reset_less=True)
        bit = Signal(range(32))
        last = Signal(name="recip_last")  # bit == 0: a flip-flop set by the step before (bit == 1), no compare of bit
        # in front of the state's enable
        k = Signal(unsigned(7), reset_less=True)
        with m.FSM(name="recip"):
            start = [dm.eq(mant), rem.eq(1 << 29), quo.eq(0), bit.eq(30), last.eq(0), k.eq(n + 29)]
            with m.State("IDLE"):
                m.d.comb += i.ready.eq(1)
                with m.If(i.valid):
                    if R:
                        m.d.sync += dpos.eq(dreq)
                        m.next = "LEN"
                    else:
                        m.d.sync += start
                        m.next = "DIV"
            if R:
                with m.State("LEN"):
                    m.d.sync += n.eq(nb)
                    m.next = "NORM"
                with m.State("NORM"):
                    m.d.sync += start
                    m.next = "DIV"
            with m.State("DIV"):
                trial = Signal(unsigned(33))
                m.d.comb += trial.eq((rem << 1) - dm)
                # no borrow: 2 rem >= m, the quotient bit is 1; the remainder stays below m either way
                m.d.sync += [rem.eq(Mux(trial[32], rem << 1, trial)), quo.eq(Cat(~trial[32], quo)), bit.eq(bit - 1),
                             last.eq(bit == 1)]
                with m.If(last):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += [o.valid.eq(1), o.payload.y.eq(quo), o.payload.k.eq(k)]
                with m.If(o.ready):
                    m.next = "IDLE"
        return m
