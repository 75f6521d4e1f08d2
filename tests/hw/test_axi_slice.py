"""The AXI register slice under the Amaranth simulator: every beat through, in order, at one a cycle,
with random stalls on both sides; the far side's valid/payload and the near side's ready are flip-flops."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from amaranth.hdl import Fragment
from hw_streams_tb import run, send

from systolica.hw.axi import axi4_read_signature, axi4_signature
from systolica.hw.axi_slice import AxiSlice, SkidBuffer, channel_of

pytestmark = pytest.mark.amaranth


def _beats_through(n: int, in_idle: float, out_stall: float, seed: int) -> tuple[list[int], int]:
    dut = SkidBuffer(16)
    rng = random.Random(seed)
    beats = [rng.randrange(1 << 16) for _ in range(n)]
    got: list[int] = []
    cycles = [0]

    port = SimpleNamespace(valid=dut.i_valid, payload=dut.i_data, ready=dut.i_ready)  # the stream helper's names

    async def source(ctx):
        await send(ctx, port, beats, rng, idle=in_idle)

    async def sink(ctx):
        while len(got) < n:
            ready = rng.random() >= out_stall
            ctx.set(dut.o_ready, ready)
            valid, data = ctx.get(dut.o_valid), ctx.get(dut.o_data)
            await ctx.tick()
            cycles[0] += 1
            if ready and valid:
                got.append(data)

    run(dut, [source, sink])
    return got, cycles[0]


@pytest.mark.parametrize("in_idle,out_stall", [(0.0, 0.0), (0.3, 0.0), (0.0, 0.4), (0.3, 0.4)])
def test_skid_buffer_passes_every_beat_in_order(in_idle, out_stall):
    got, _ = _beats_through(300, in_idle, out_stall, seed=int(in_idle * 10 + out_stall * 100))
    rng = random.Random(int(in_idle * 10 + out_stall * 100))
    assert got == [rng.randrange(1 << 16) for _ in range(300)]


def test_skid_buffer_keeps_one_beat_a_cycle():
    got, cycles = _beats_through(200, 0.0, 0.0, seed=7)
    assert len(got) == 200 and cycles <= 200 + 2  # one cycle of latency, no bubbles


def test_slice_outputs_come_from_flip_flops():
    """No combinational path through the slice: its outputs do not change when only its inputs do."""
    dut = SkidBuffer(8)

    async def bench(ctx):
        ctx.set(dut.o_ready, 0)
        ctx.set(dut.i_valid, 1)
        ctx.set(dut.i_data, 0x5A)
        await ctx.delay(1e-9)  # inputs changed, no clock edge yet
        assert (ctx.get(dut.o_valid), ctx.get(dut.i_ready)) == (0, 1)
        await ctx.tick()
        assert (ctx.get(dut.o_valid), ctx.get(dut.o_data)) == (1, 0x5A)
        ctx.set(dut.i_data, 0x11)  # held output: the next beat goes to the spare entry
        await ctx.tick()
        assert ctx.get(dut.i_ready) == 0 and ctx.get(dut.o_data) == 0x5A
        ctx.set(dut.i_valid, 0)
        ctx.set(dut.o_ready, 1)
        await ctx.tick()
        assert (ctx.get(dut.o_valid), ctx.get(dut.o_data), ctx.get(dut.i_ready)) == (1, 0x11, 1)

    run(dut, [bench])


def test_axi_slice_has_one_buffer_per_channel():
    assert [channel_of(n) for n in ("araddr", "arvalid", "rdata", "rlast", "awlen", "wstrb", "bresp")] == \
        ["ar", "ar", "r", "r", "aw", "w", "b"]
    full = Fragment.get(AxiSlice(axi4_signature(40, 64)), None)
    assert sorted(name for _, name, _ in full.subfragments) == ["ar_slice", "aw_slice", "b_slice", "r_slice",
                                                                "w_slice"]
    rd = Fragment.get(AxiSlice(axi4_read_signature(40, 64)), None)
    assert sorted(name for _, name, _ in rd.subfragments) == ["ar_slice", "r_slice"]
