"""hw/token_queue.TokenQueue: the count and its two flags under random pushes and pops, against a model."""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from systolica.hw.token_queue import TokenQueue


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_flags_follow_the_count_under_random_pushes_and_pops(depth):
    """Pushes and pops asked for at random, also while the queue is full or empty (the queue takes only what
    its flags allow): every cycle ``available`` is count != 0 and ``space`` count != depth, and the count is the
    model's; a full and an empty queue are both reached, and a push with a pop in one cycle leaves the count."""
    dut = TokenQueue(depth)
    rng = random.Random(depth)
    seen = {"full": 0, "empty": 0, "both": 0}

    async def bench(ctx):
        count = 0
        for _ in range(500):
            assert ctx.get(dut.count) == count
            assert ctx.get(dut.available) == (count != 0), count
            assert ctx.get(dut.space) == (count != depth), count
            seen["full"] += count == depth
            seen["empty"] += count == 0
            push, pop = int(rng.random() < 0.5), int(rng.random() < 0.5)
            ctx.set(dut.push, push)
            ctx.set(dut.pop, pop)
            await ctx.tick()
            do_push, do_pop = push and count != depth, pop and count != 0
            seen["both"] += do_push and do_pop
            count += do_push - do_pop

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen["full"] > 5 and seen["empty"] > 5, seen
    assert seen["both"] > 5 or depth == 1, seen  # (one token: a push and a pop never meet)


def test_depth_below_one_is_refused():
    with pytest.raises(ValueError, match="depth must be >= 1"):
        TokenQueue(0)
