"""hw/line_serial: one shift register cutting a line into beats at two rates (the vector and activation units)."""

from __future__ import annotations

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from systolica.hw.line_serial import serialize_two_rates

LANE = 8


def _lanes(v: int, n: int) -> list[int]:
    return [(v >> (LANE * i)) & 0xFF for i in range(n)]


@pytest.mark.parametrize("lanes,w,n", [(8, 2, 1), (8, 4, 2), (4, 2, 1), (4, 4, 1)])
def test_a_line_comes_out_in_wide_or_narrow_beats_from_one_register(lanes, w, n):
    m = Module()
    line = Signal(lanes * LANE)
    load_w, load_n = Signal(), Signal()
    (bw, aw, fw, lw), (bn, an, ln) = serialize_two_rates(m, load_w, load_n, line, w * LANE, n * LANE, "s")
    got = {"w": [], "n": []}
    values = [int.from_bytes(bytes(range(0x10 * k + 1, 0x10 * k + 1 + lanes)), "little") for k in (1, 2, 3)]

    async def bench(ctx):
        for load, tag, beats, value in ((load_w, "w", lanes // w, values[0]), (load_n, "n", lanes // n, values[1]),
                                        (load_w, "w", lanes // w, values[2])):
            ctx.set(line, value)
            ctx.set(load, 1)
            seen = []
            for k in range(beats):
                if k == 1:
                    ctx.set(load, 0)
                    ctx.set(line, 0xDEAD)  # the port's data are gone after the load cycle
                beat, act = (bw, aw) if tag == "w" else (bn, an)
                assert ctx.get(act) == 1
                last = lw if tag == "w" else ln
                assert ctx.get(last) == (1 if (k == beats - 1 and beats > 1) or (tag == "w" and beats == 1) else 0)
                seen.append(ctx.get(beat))
                await ctx.tick()
            ctx.set(load, 0)
            assert ctx.get(aw) == 0 and ctx.get(an) == 0
            got[tag].append((value, seen))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    for tag, width in (("w", w), ("n", n)):
        for value, seen in got[tag]:
            want = [int.from_bytes(bytes(_lanes(value, lanes)[k * width:(k + 1) * width]), "little")
                    for k in range(lanes // width)]
            assert seen == want, (tag, [hex(x) for x in seen], [hex(x) for x in want])

