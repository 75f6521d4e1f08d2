"""SystolicArray under the Amaranth simulator: random GEMMs tiled onto the array, random idle
cycles and back-pressure, partial sums added over K tiles and compared with numerics.matmul."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest
from hw_gemm_tiles import accumulate, tile_streams
from hw_streams_tb import collect, run, send

from systolica.config import AccelConfig, ConfigError
from systolica.hw.systolic_array import SystolicArray, weight_cols_per_beat
from systolica.numerics import matmul
from systolica.sim.perf_costs import array_latency

# components built only for their layouts, or whose constructor rejected its arguments, are never elaborated
pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]


def check_gemm(cfg: AccelConfig, M: int, K: int, N: int, seed: int, idle=0.3, stall=0.3, values=None,
               out_fifo=None):
    """``values``: draw the operands from these int8 values (default: all of them)."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    R, C = cfg.rows, cfg.cols
    dut = SystolicArray(cfg, out_fifo=out_fifo)
    P = dut.w_cols
    if values is None:
        a = nrng.integers(-128, 128, size=(M, K), dtype=np.int8)
        w = nrng.integers(-128, 128, size=(N, K), dtype=np.int8)
    else:
        a = nrng.choice(np.array(values, dtype=np.int8), size=(M, K))
        w = nrng.choice(np.array(values, dtype=np.int8), size=(N, K))
    wbeats, abeats, order = tile_streams(a, w, R, C, P)
    got = []

    async def bench(ctx):
        await collect(ctx, dut.o_stream, len(abeats), rng, stall=stall, out=got)

    run(dut, [lambda ctx: send(ctx, dut.w_stream, wbeats, random.Random(seed + 1), idle),
              lambda ctx: send(ctx, dut.a_stream, abeats, random.Random(seed + 2), idle),
              bench])
    out = accumulate(got, abeats, order, M, N, C)
    np.testing.assert_array_equal(out, matmul(a, w))


@pytest.mark.parametrize("rows,cols,M,pack", [(4, 4, 5, 1), (4, 8, 3, 1), (8, 4, 1, 1), (2, 2, 2, 1),
                                              (4, 4, 5, 2), (4, 8, 3, 2), (5, 4, 2, 2), (16, 16, 2, 2)])
def test_random_gemm(rows, cols, M, pack):
    """pack = macs_per_dsp: 2 puts the products of two adjacent columns in one multiplier."""
    cfg = AccelConfig(rows=rows, cols=cols, dma_bits=64, macs_per_dsp=pack)
    check_gemm(cfg, M=M, K=2 * rows, N=2 * cols, seed=rows * 100 + cols * 10 + M + pack)


@pytest.mark.parametrize("rows,cols,M,dma_bits", [(4, 4, 5, 64), (8, 8, 3, 32), (4, 8, 9, 128), (8, 4, 2, 128)])
def test_random_gemm_without_fifo(rows, cols, M, dma_bits):
    # the sequencer's array: no output FIFO, a consumer that takes every line (the accumulator), random idle
    # input cycles; P > 1 (dma_bits 128) makes the skewed columns' shadow writes wait
    cfg = AccelConfig(rows=rows, cols=cols, dma_bits=dma_bits)
    check_gemm(cfg, M=M, K=3 * rows, N=2 * cols, seed=rows + cols + M, stall=0.0, out_fifo=0)


def test_small_fifo_back_pressure():
    # a FIFO smaller than the lines in flight: the credits stop the input, never a line lost
    cfg = AccelConfig(rows=4, cols=4, dma_bits=64)
    check_gemm(cfg, M=7, K=8, N=8, seed=3, stall=0.6, out_fifo=2)


def test_decode_consumes_full_dma_beat_per_cycle():
    # 16 bytes per cycle into a 4x4 array: P = 4 columns per beat, a whole tile per beat
    cfg = AccelConfig(rows=4, cols=4, dma_bits=128, spad_kib=16, acc_kib=16, vbuf_kib=16)
    assert weight_cols_per_beat(cfg) == 4
    check_gemm(cfg, M=1, K=8, N=8, seed=7, idle=0.0, stall=0.0)


def _one_line(cfg, wv, av):
    """The output line of a 4x4 array holding ``wv`` everywhere for one activation line of ``av``."""
    dut = SystolicArray(cfg)
    wbeats = [[[wv] * 4] * dut.w_cols for _ in range(4 // dut.w_cols)]
    abeats = [{"data": [av] * 4, "last": 1, "tag": 0}]
    got = []
    run(dut, [lambda ctx: send(ctx, dut.w_stream, wbeats, random.Random(1), 0),
              lambda ctx: send(ctx, dut.a_stream, abeats, random.Random(2), 0),
              lambda ctx: collect(ctx, dut.o_stream, 1, random.Random(3), 0, out=got)])
    return [got[0].data[c] for c in range(4)]


@pytest.mark.parametrize("pack", [1, 2])
def test_extremes_no_overflow_of_products(pack):
    # -128 * -128 on every PE is the largest product: the column sum must still be exact; with two MACs a
    # multiplier the packed low field's extremes (+16384, and -128 * 127 borrowing from the high one) too
    cfg = AccelConfig(rows=4, cols=4, macs_per_dsp=pack)
    for wv, av in ((-128, -128), (-128, 127), (127, -128), (127, 127)):
        assert _one_line(cfg, wv, av) == [4 * wv * av] * 4, (wv, av)


@pytest.mark.parametrize("rows,cols,M", [(4, 4, 5), (8, 8, 3)])
def test_random_gemm_with_products_in_logic(rows, cols, M):
    """array_lut_muls: each PE's int8 product as shift-and-add, the same integers as the multipliers."""
    cfg = AccelConfig(rows=rows, cols=cols, dma_bits=64, array_lut_muls=1)
    check_gemm(cfg, M=M, K=2 * rows, N=2 * cols, seed=rows * 7 + M)


def test_products_in_logic_at_the_int8_extremes():
    cfg = AccelConfig(rows=4, cols=4, array_lut_muls=1)
    for wv, av in ((-128, -128), (-128, 127), (127, -128), (127, 127), (-1, -128), (1, -1)):
        assert _one_line(cfg, wv, av) == [4 * wv * av] * 4, (wv, av)
    with pytest.raises(ConfigError, match="array_lut_muls"):
        AccelConfig(rows=4, cols=4, array_lut_muls=1, macs_per_dsp=2)


def test_radix4_product_in_logic_every_int8_pair():
    """The logic product of ``array_lut_muls`` (x's 2-bit digits select 0, w, 2w, 3w, the top digit 0, w, -2w, -w)
    against Python's, for all 65,536 int8 pairs, with 3w as the array registers it."""
    from amaranth import Module, Signal, signed
    from amaranth.sim import Simulator

    from systolica.hw.systolic_array import _lut_product

    m = Module()
    x, w, w3, prod = Signal(signed(8)), Signal(signed(8)), Signal(signed(10)), Signal(signed(16))
    m.d.comb += prod.eq(_lut_product(x, w, w3))
    bad = []

    async def tb(ctx):
        for a in range(-128, 128):
            ctx.set(x, a)
            for b in range(-128, 128):
                ctx.set(w, b)
                ctx.set(w3, 3 * b)
                if ctx.get(prod) != a * b:
                    bad.append((a, b, ctx.get(prod)))

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    assert not bad, bad[:4]


@pytest.mark.parametrize("rows", [3, 4, 16])
def test_packed_chains_at_the_field_edges(rows):
    # two MACs a multiplier sum two rows in one DSP chain: the biased low field of a chain must hold every mix
    # of the extreme products (+16384 from -128 * -128, -16256 from -128 * 127) and a zero high field under it
    cfg = AccelConfig(rows=rows, cols=4, dma_bits=64, macs_per_dsp=2)
    check_gemm(cfg, M=6, K=2 * rows, N=8, seed=rows, values=(-128, -127, -1, 0, 1, 127))


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_bad_parameters():
    cfg = AccelConfig(rows=4, cols=8)
    with pytest.raises(ValueError, match="w_cols=3"):
        SystolicArray(cfg, w_cols=3)
    with pytest.raises(TypeError, match="AccelConfig"):
        SystolicArray({"rows": 4})
    gc.collect()  # the half-built components go now, while this test's warning filter holds


@pytest.mark.parametrize("fifo", [None, 0])
@pytest.mark.parametrize("rows,cols,dma_bits,pack", [(4, 4, 128, 1), (4, 8, 64, 1), (4, 8, 64, 2), (8, 8, 64, 2),
                                                     (8, 8, 32, 1)])
def test_decode_rate_and_latency(rows, cols, dma_bits, pack, fifo):
    # decode: one activation row per tile, every tile back to back: the weights stream in at a tile per C / P
    # beats without a gap (the shadow refills in the cycle its tile moves to the active registers), and the
    # first output leaves the array_latency of the performance model after its activation entered (the
    # sequencer's array, without an output FIFO; the FIFO costs a cycle more)
    cfg = AccelConfig(rows=rows, cols=cols, dma_bits=dma_bits, macs_per_dsp=pack)
    dut = SystolicArray(cfg, out_fifo=fifo)
    assert dut.latency == array_latency(cfg) + (fifo is None)
    beats, ntiles = cols // dut.w_cols, 6
    nrng = np.random.default_rng(rows + cols + pack)
    a = nrng.integers(-128, 128, size=(1, rows), dtype=np.int8)
    w = nrng.integers(-128, 128, size=(ntiles * cols, rows), dtype=np.int8)
    wbeats, abeats, order = tile_streams(a, w, rows, cols, dut.w_cols)
    got, cycles = [], []

    async def feed(ctx):
        for beat in abeats:  # ready from the cycle the tile is in the shadow registers
            ctx.set(dut.a_stream.payload, beat)
            ctx.set(dut.a_stream.valid, 1)
            while True:
                _, _, rdy = await ctx.tick().sample(dut.a_stream.ready)
                if rdy:
                    break
        ctx.set(dut.a_stream.valid, 0)

    run(dut, [lambda ctx: send(ctx, dut.w_stream, wbeats, random.Random(1), 0), feed,
              lambda ctx: collect(ctx, dut.o_stream, len(abeats), random.Random(2), 0, out=got, cycles=cycles)])
    np.testing.assert_array_equal(accumulate(got, abeats, order, 1, ntiles * cols, cols), matmul(a, w))
    assert np.diff(cycles).tolist() == [beats] * (ntiles - 1)
    assert cycles[0] == beats + dut.latency + 1  # the tile's C / P weight beats, then a cycle to the shadow flag
