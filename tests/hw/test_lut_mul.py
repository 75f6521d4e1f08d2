"""hw/lut_mul.py: the logic multiplier against Python's product, every operand pair of narrow widths,
one pair a cycle through the pipeline (with the enable held low now and then)."""

from __future__ import annotations

import itertools

import pytest
from amaranth import Module, Signal, signed, unsigned
from amaranth.back import rtlil
from amaranth.sim import Simulator

from systolica.hw.lut_mul import lut_mul

pytestmark = [pytest.mark.amaranth]


def _values(width: int, sgn: bool):
    return range(-(1 << (width - 1)), 1 << (width - 1)) if sgn else range(1 << width)


@pytest.mark.parametrize("wa,sa,wb,sb", [
    (5, False, 4, True), (5, True, 4, True), (5, True, 4, False), (5, False, 4, False),
    (6, False, 3, True), (4, True, 1, True), (4, False, 1, False), (3, True, 5, True), (7, False, 8, True)])
@pytest.mark.parametrize("own", [False, True], ids=["shared", "own-multiples"])
def test_lut_mul_exhaustive(wa, sa, wb, sb, own):
    """``own``: 3a and -a come from registers loaded beside a (the attention unit's p.v lanes), not from adders."""
    m = Module()
    a = Signal((signed if sa else unsigned)(wa), reset_less=True)
    b = Signal((signed if sb else unsigned)(wb), reset_less=True)
    a3 = Signal((signed if sa else unsigned)(wa + 2), reset_less=True)
    na = Signal(signed(wa + 1), reset_less=True)
    en = Signal()
    prod, lat = lut_mul(m, en, a, b, "t", **({"a3": a3, "na": na} if own else {}))
    assert len(prod) == wa + wb and prod.shape().signed == (sa or sb)
    assert lat == max(1, (wb - 1).bit_length())
    pairs = list(itertools.product(_values(wa, sa), _values(wb, sb)))
    sim = Simulator(m)
    sim.add_clock(1e-6)

    async def bench(ctx):
        pending = []  # (pair) in flight, one per enabled cycle
        k = 0
        got = []
        cyc = 0
        while len(got) < len(pairs):
            cyc += 1
            step = (cyc % 7) != 3  # the pipeline holds one cycle in seven
            if step and k < len(pairs):
                ctx.set(a, pairs[k][0])
                ctx.set(b, pairs[k][1])
                ctx.set(a3, 3 * pairs[k][0])
                ctx.set(na, -pairs[k][0])
            ctx.set(en, step)
            await ctx.tick()
            if step:
                pending.append(pairs[k] if k < len(pairs) else None)
                k += 1
                if len(pending) >= lat:  # the pair registered `lat` enabled cycles ago is out
                    x = pending.pop(0)
                    if x is not None:
                        got.append((x, ctx.get(prod)))
        for (x, y), p in got:
            assert p == x * y, (x, y, p)

    sim.add_testbench(bench)
    sim.run()


def test_lut_mul_has_no_multiplier():
    m = Module()
    a, b = Signal(signed(29), reset_less=True), Signal(signed(8), reset_less=True)
    prod, _ = lut_mul(m, Signal(), a, b, "t")
    out = Signal(signed(37))
    m.d.comb += out.eq(prod)
    text = rtlil.convert(m, ports=[a, b, out])
    assert "$mul" not in text
