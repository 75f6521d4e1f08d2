"""hw/accumulator.Accumulator alone: lines every cycle to a few addresses, so a line's sum is often one to three
lines behind an earlier one of its address (the sums forwarded from the accumulator's registers; a read of the line
written in the same cycle answers junk, as a block RAM may), and LOAD's lines beside them, taken when stage 1 is
empty, to the same addresses or to others."""

from __future__ import annotations

import random

import pytest
from amaranth import Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory
from amaranth.sim import Simulator

from systolica.config import AccelConfig
from systolica.hw.accumulator import Accumulator

pytestmark = [pytest.mark.amaranth]


@pytest.mark.parametrize("addrs,p_idle", [(1, 0.0), (2, 0.0), (1, 0.3), (3, 0.2), (5, 0.4)])
def test_back_to_back_lines_sum_into_their_addresses(addrs, p_idle):
    """Random lines (int32 wrap included), random add-or-overwrite flags and zero fills, on one to five lines,
    and LOAD lines waiting for their turn on three others: the buffer ends with what adding them in order gives,
    every LOAD line is written, and ``lines`` counts the array's lines alone."""
    cfg = AccelConfig(rows=4, cols=4, dma_bits=32)
    o_layout = data.StructLayout({"data": data.ArrayLayout(signed(32), cfg.cols), "last": 1, "tag": 17})
    m = Module()
    m.submodules.acc = acc = Accumulator(cfg, o_layout)
    m.submodules.mem = mem = memory.Memory(shape=acc.line, depth=16, init=[])
    wp = mem.write_port()
    rp = mem.read_port()
    # a read of the line written in the same cycle answers junk (a block RAM's two ports promise neither word):
    # the accumulator must not use it
    hit = Signal()
    m.d.sync += hit.eq(rp.en & wp.en & (rp.addr == wp.addr))
    junk = Const(0x5A5A5A5A_A5A5A5A5_3C3C3C3C_C3C3C3C3, 128)
    m.d.comb += [rp.addr.eq(acc.rd.addr), rp.en.eq(acc.rd.en), acc.rd.data.eq(Mux(hit, junk, rp.data.as_value())),
                 wp.addr.eq(acc.wr.addr), wp.data.eq(acc.wr.data), wp.en.eq(acc.wr.en)]
    rng = random.Random(addrs * 10 + int(p_idle * 10))
    model = [[0] * cfg.cols for _ in range(16)]
    wrap = lambda v: (v + (1 << 31)) % (1 << 32) - (1 << 31)  # noqa: E731
    sent = 0
    checks = {"fwd": 0, "loads": 0, "waited": 0}

    async def bench(ctx):
        nonlocal sent
        last_addr = [None, None]
        ld = None  # the LOAD line waiting: (address, data)
        expect = []  # (cycle it enters stage 2, address, line): the writes, in that order
        written = 0

        def check_write():  # each write as it happens: the model's line when it entered stage 2
            nonlocal written
            if ctx.get(acc.wr.en):
                _, a, want = min(expect)
                expect.remove(min(expect))
                assert (ctx.get(acc.wr.addr), list(ctx.get(acc.wr.data))) == (a, want), written
                written += 1

        for cyc in range(300):
            if ld is None and rng.random() < 0.3:
                ld = (rng.choice([*range(addrs), 8, 9, 10]), [rng.randrange(-(1 << 31), 1 << 31) for _ in range(cfg.cols)])
            ctx.set(acc.ld_en, ld is not None)
            if ld is not None:
                ctx.set(acc.ld_addr, ld[0])
                ctx.set(acc.ld_data, ld[1])
                if ctx.get(acc.ld_ready):
                    model[ld[0]] = list(ld[1])
                    expect.append((cyc + 1, ld[0], list(ld[1])))
                    checks["loads"] += 1
                    ld = None
                else:
                    checks["waited"] += 1
            ctx.set(acc.zero_en, 0)
            ctx.set(acc.i_stream.valid, 0)
            r = rng.random()
            if r < p_idle:
                pass
            elif r < p_idle + 0.05:  # a zero fill (k = 0): the line cleared
                a = rng.randrange(addrs)
                ctx.set(acc.zero_en, 1)
                ctx.set(acc.zero_addr, a)
                model[a] = [0] * cfg.cols
                expect.append((cyc + 2, a, [0] * cfg.cols))
                last_addr = [a, last_addr[0]]
            else:
                a = rng.randrange(addrs)
                add = rng.random() < 0.8
                line = [rng.randrange(-(1 << 31), 1 << 31) for _ in range(cfg.cols)]
                ctx.set(acc.i_stream.valid, 1)
                ctx.set(acc.i_stream.payload, {"data": line, "last": 0, "tag": a | (int(add) << 16)})
                model[a] = [wrap(o + v) if add else v for o, v in zip(model[a], line, strict=True)]
                expect.append((cyc + 2, a, list(model[a])))
                checks["fwd"] += add and last_addr[0] == a
                last_addr = [a, last_addr[0]]
                sent += 1
            check_write()
            await ctx.tick()
        ctx.set(acc.i_stream.valid, 0)
        ctx.set(acc.zero_en, 0)
        ctx.set(acc.ld_en, 0)
        for _ in range(4):
            check_write()
            await ctx.tick()
        assert not expect, f"{len(expect)} lines never written"
        assert ctx.get(acc.lines) == sent
        for a in [*range(addrs), 8, 9, 10]:
            got = list(ctx.get(mem.data[a]))
            assert got == model[a], (a, got, model[a])

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert checks["fwd"] > 20 and checks["waited"] > 5, checks
    assert checks["loads"] > 20 or p_idle == 0, checks  # (a line every cycle: LOAD waits, as it does in the top)
