"""One state lane of the attention unit (hw/attn_lane.py) under the Amaranth simulator: its nine stages give
``sat32(rsr(x * y, s))`` bit for bit, at the edges where the narrow shifters' overflow flag must decide
(left shifts of 31..33 places, right shifts whose result just fits 33 bits, 0 and -1)."""

from __future__ import annotations

import random

import pytest
from amaranth import Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from systolica.hw.attn_lane import state_lane

pytestmark = pytest.mark.amaranth

STAGES = 9  # S0 .. S8: the operands entering S0 leave S8's register nine cycles later


def reference(x: int, y: int, s: int) -> int:
    """numerics' sat32(rshift_round(v, s)) for the lane's raw value v: x * y's low 64 bits, signed."""
    v = (x * y) & (2**64 - 1)
    v -= (v >> 63) << 64
    if s <= 0:
        r = v << -s
    elif s >= 64:
        r = 0
    else:
        r = (v >> s) + ((v >> (s - 1)) & 1)
    return max(-2**31, min(2**31 - 1, r))


def cases(n: int, seed: int) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    edge_x = [0, 1, -1, 2**31 - 1, -2**31, 2**15, -(2**15) - 1]
    edge_y = [0, 1, 2, 2**16, 2**32, 2**33 - 1]
    out = [(x, y, s) for x in edge_x for y in edge_y for s in (-34, -33, -32, -31, -30, -1, 0, 1, 2, 31, 32, 33, 63, 64, 70)]
    for _ in range(n):
        bx, by = rng.randint(0, 31), rng.randint(0, 33)
        x = rng.randint(-(2**bx), 2**bx - 1)
        y = rng.randint(0, 2**by - 1)
        s = rng.randint(-40, 70)
        out.append((x, y, s))
    return out


def test_state_lane_saturating_rounding_shift_is_exact():
    m = Module()
    adv, raw = Signal(init=1), Signal(init=1)
    ox, oy = Signal(signed(32)), Signal(unsigned(33))
    opv, osh = Signal(signed(50)), Signal(signed(10))
    out8, _ = state_lane(m, adv, ox, oy, opv, osh, raw, 0, 50)
    todo = cases(600, seed=5)
    got = []

    async def bench(ctx):
        for i in range(len(todo) + STAGES):
            if i < len(todo):
                x, y, s = todo[i]
                ctx.set(ox, x)
                ctx.set(oy, y)
                ctx.set(osh, s)
            await ctx.tick()
            if i >= STAGES - 1:
                got.append(ctx.get(out8))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    want = [reference(*c) for c in todo]
    assert len(got) > len(todo)
    bad = [(c, g, w) for c, g, w in zip(todo, got[:len(todo)], want, strict=True) if g != w]
    assert not bad, bad[:5]
