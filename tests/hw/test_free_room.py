"""hw/word_regs.free_room: the room flag kept from a count of free places equals "a place is free" every cycle."""

from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from systolica.hw.word_regs import free_room


@pytest.mark.parametrize("places", [1, 2, 3, 4])
def test_room_flag_follows_the_free_places_under_random_claims_and_releases(places):
    """Random claims (only while the flag is high, as its users promise) and releases (only of a claimed place):
    the flag is high exactly when fewer than ``places`` are claimed, the cycle after each change, and a full
    queue is reached and left again."""
    m = Module()
    take, give = Signal(), Signal()
    room = free_room(m, "room", places, take, give)
    rng = random.Random(places)
    seen_full = seen_empty = 0

    async def bench(ctx):
        nonlocal seen_full, seen_empty
        claimed = 0
        for _ in range(400):
            r = ctx.get(room)
            assert r == (claimed < places), (claimed, r)
            seen_full += claimed == places
            seen_empty += claimed == 0
            t = int(r and rng.random() < 0.6)
            g = int(claimed > 0 and rng.random() < 0.45)
            ctx.set(take, t)
            ctx.set(give, g)
            await ctx.tick()
            claimed += t - g

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen_full > 5 and seen_empty > 5, (seen_full, seen_empty)


def test_two_releases_in_a_cycle_and_a_claim_with_a_release_while_full():
    """STORE's use: a claim, a line leaving and a lost request given back, possibly all in one cycle, and a lost
    request claimed again while the flag is low (its own release beside it)."""
    places = 4
    m = Module()
    take, give, give2 = Signal(), Signal(), Signal()
    room = free_room(m, "room", places, take, give, give2)
    rng = random.Random(7)
    both = 0

    async def bench(ctx):
        nonlocal both
        claimed = 0
        for _ in range(600):
            r = ctx.get(room)
            assert r == (claimed < places), (claimed, r)
            g = int(claimed > 0 and rng.random() < 0.4)
            g2 = int(claimed - g > 0 and rng.random() < 0.3)
            t = int((r or g2) and rng.random() < 0.7)  # a repeat (g2) may claim while the flag is low
            both += g & g2
            ctx.set(take, t)
            ctx.set(give, g)
            ctx.set(give2, g2)
            await ctx.tick()
            claimed += t - g - g2

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert both > 10, both
