"""Amaranth-simulator helpers shared by the hw unit tests: stream drivers with idle cycles
and a sink with random back-pressure."""

from __future__ import annotations

import random

from amaranth.sim import Simulator


async def send(ctx, port, beats, rng: random.Random, idle: float = 0.3):
    """Drive ``beats`` into a stream, inserting idle cycles with probability ``idle``."""
    for beat in beats:
        while rng.random() < idle:
            ctx.set(port.valid, 0)
            await ctx.tick()
        ctx.set(port.payload, beat)
        ctx.set(port.valid, 1)
        await ctx.tick().until(port.ready)
    ctx.set(port.valid, 0)


async def collect(ctx, port, n: int, rng: random.Random, stall: float = 0.3, out: list | None = None,
                  cycles: list | None = None):
    """Take ``n`` beats from a stream, holding ``ready`` low with probability ``stall``.

    Returns the beats as plain Python values (lists / dicts of ints).
    """
    out = [] if out is None else out
    t = 0
    while len(out) < n:
        rdy = rng.random() >= stall
        ctx.set(port.ready, rdy)
        _, _, valid, payload = await ctx.tick().sample(port.valid, port.payload)
        t += 1
        if valid and rdy:
            out.append(payload)
            if cycles is not None:
                cycles.append(t)
    ctx.set(port.ready, 0)
    return out


def run(dut, benches, *, deadline: int = 200_000):
    """Run testbenches (async functions of ctx) on ``dut`` with a clock; fail after ``deadline`` cycles."""
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for bench in benches:
        async def wrapped(ctx, bench=bench):  # accepts lambdas returning coroutines too
            await bench(ctx)
        sim.add_testbench(wrapped)

    async def watchdog(ctx):
        for _ in range(deadline):
            await ctx.tick()
        raise AssertionError(f"testbenches did not finish within {deadline} cycles (deadlock?)")

    sim.add_testbench(watchdog, background=True)
    sim.run()
