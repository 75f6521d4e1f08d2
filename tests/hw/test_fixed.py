"""hw/fixed.py: the shared round-shift and saturate blocks, bit-exact with numerics on edge cases."""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth import Elaboratable, Module, Signal, signed
from amaranth.sim import Simulator

from systolica import numerics
from systolica.hw.fixed import bitlen_exceeds, bitlen_parts, bitlen_tree, rshift_round_sat32, rshift_round_var

pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]


class _Shifts(Elaboratable):
    def __init__(self):
        self.x, self.s = Signal(signed(64)), Signal(signed(10))
        self.wide, self.sat = Signal(signed(98)), Signal(signed(32))

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.wide.eq(rshift_round_var(m, self.x, self.s, 98, "w", max_left=33)),
                     self.sat.eq(rshift_round_sat32(m, self.x, self.s, "sat"))]
        return m


def test_rshift_round_matches_numerics_on_edges():
    """One barrel shifter ((x >> (s-1)) + 1) >> 1 gives numerics.rshift_round at every edge:
    the int64 ends, ties (x = k * 2**s + 2**(s-1)), s = 0, 1, 63, 64 and left shifts."""
    rng = random.Random(3)
    xs = [0, 1, -1, 2, -2, 3, -3, (1 << 63) - 1, -(1 << 63), -(1 << 63) + 1, (1 << 31) - 1, -(1 << 31)]
    cases = [(x, s) for x in xs for s in (-40, -33, -32, -3, -1, 0, 1, 2, 31, 32, 62, 63, 64, 65, 200, -200)]
    for _ in range(300):
        s = rng.randint(1, 62)
        k = rng.randint(-(1 << (62 - s)), (1 << (62 - s)) - 1)
        cases.append(((k << s) + (1 << (s - 1)), s))  # a tie: rounds up
        cases.append((rng.randint(-(1 << 63), (1 << 63) - 1), rng.randint(-40, 70)))
    dut = _Shifts()
    got = []

    async def bench(ctx):
        for x, s in cases:
            ctx.set(dut.x, x)
            ctx.set(dut.s, s)
            got.append((ctx.get(dut.wide), ctx.get(dut.sat)))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    for (x, s), (wide, sat) in zip(cases, got, strict=True):
        if s >= 0:  # left shifts of numerics saturate at int64; the hardware's 98 bits do not
            assert wide == int(numerics.rshift_round(np.int64(x), s)), (x, s)
        want = int(numerics.sat32(numerics.rshift_round(np.int64(x), s)))
        assert sat == want, (x, s)


class _Bitlen(Elaboratable):
    def __init__(self, width: int):
        self.width = width
        self.x, self.thr = Signal(width), Signal(signed(8))
        self.bl, self.exceeds = Signal(range(width + 1)), Signal()

    def elaborate(self, platform):
        m = Module()
        v, pos = bitlen_parts(m, self.x, self.width, "p")
        m.d.comb += [self.bl.eq(bitlen_tree(m, self.x, self.width, "t")),
                     self.exceeds.eq(bitlen_exceeds(v, pos, self.thr))]
        return m


@pytest.mark.parametrize("width", [6, 7])
def test_bitlen_parts_compare_as_the_bit_length(width):
    """Every value of a 6- and 7-bit word (7: the tree pads to 8) against thresholds below, inside and above the
    bit length's range: bitlen_tree is numerics.bitlen, and bitlen_exceeds(parts, thr) is bitlen > thr, negative
    thresholds included (the attention lane's left-shift threshold 31 - s goes down to -2)."""
    dut = _Bitlen(width)
    got = []
    thrs = range(-3, width + 3)

    async def bench(ctx):
        for x in range(1 << width):
            ctx.set(dut.x, x)
            for t in thrs:
                ctx.set(dut.thr, t)
                got.append((x, t, ctx.get(dut.bl), ctx.get(dut.exceeds)))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    for x, t, bl, ex in got:
        assert bl == x.bit_length(), (x, bl)
        assert ex == (x.bit_length() > t), (x, t, ex)
