"""LineBuffer and Accumulator under the Amaranth simulator; a whole tiled GEMM through
SystolicArray -> Accumulator -> accumulator buffer, compared with numerics.matmul."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest
from amaranth import signed
from hw_streams_tb import run, send

from systolica.config import AccelConfig
from systolica.hw.gemm_core import GemmCore
from systolica.hw.scratchpad import LineBuffer, accumulator_buffer, scratchpad
from systolica.numerics import matmul

# components built only for their layouts, or whose constructor rejected its arguments, are never elaborated
pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]


def test_line_buffer_write_read_and_transparency():
    buf = LineBuffer(depth=16, lanes=4, elem=signed(8), read_ports=2)
    rng = np.random.default_rng(0)
    lines = rng.integers(-128, 128, size=(16, 4))

    async def bench(ctx):
        for a in range(16):
            ctx.set(buf.w.addr, a)
            ctx.set(buf.w.data, [int(v) for v in lines[a]])
            ctx.set(buf.w.en, 1)
            await ctx.tick()
        ctx.set(buf.w.en, 0)
        for a in range(16):
            ctx.set(buf.r0.addr, a)
            ctx.set(buf.r1.addr, 15 - a)
            await ctx.tick()
            assert list(ctx.get(buf.r0.data)) == list(lines[a])
            assert list(ctx.get(buf.r1.data)) == list(lines[15 - a])
        # a read of the line being written in the same cycle returns the new data
        ctx.set(buf.w.addr, 3)
        ctx.set(buf.w.data, [1, 2, 3, 4])
        ctx.set(buf.w.en, 1)
        ctx.set(buf.r0.addr, 3)
        await ctx.tick()
        ctx.set(buf.w.en, 0)
        assert list(ctx.get(buf.r0.data)) == [1, 2, 3, 4]

    run(buf, [bench])


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_line_buffer_bad_parameters():
    with pytest.raises(ValueError, match="read_ports=5"):
        LineBuffer(depth=16, lanes=4, elem=signed(8), read_ports=5)
    with pytest.raises(ValueError, match="depth=1"):
        LineBuffer(depth=1, lanes=4, elem=signed(8))
    gc.collect()  # the half-built components go now, while this test's warning filter holds


def test_buffer_sizes_follow_config():
    cfg = AccelConfig(rows=4, cols=8, spad_kib=16, acc_kib=8, vbuf_kib=8)
    assert scratchpad(cfg).depth == 16 * 1024 // 8
    assert accumulator_buffer(cfg).depth == 8 * 1024 // 32


@pytest.mark.parametrize("rows,cols,M", [(4, 4, 3), (4, 8, 1)])
def test_gemm_through_accumulator(rows, cols, M):
    cfg = AccelConfig(rows=rows, cols=cols, dma_bits=32)
    R, C = rows, cols
    K, N = 3 * R, 2 * C
    nrng = np.random.default_rng(rows + cols + M)
    a = nrng.integers(-128, 128, size=(M, K), dtype=np.int8)
    w = nrng.integers(-128, 128, size=(N, K), dtype=np.int8)
    dut = GemmCore(cfg)
    P = dut.array.w_cols
    wbeats, abeats = [], []
    # K tiles outer, N tiles inner (decode order): the same accumulator line recurs every N/C tiles
    for kt in range(K // R):
        for nt in range(N // C):
            tile = w[nt * C:(nt + 1) * C, kt * R:(kt + 1) * R]
            wbeats += [[[int(v) for v in tile[g * P + j]] for j in range(P)] for g in range(C // P)]
            abeats += [{"data": [int(v) for v in a[i, kt * R:(kt + 1) * R]], "last": int(i == M - 1),
                        "tag": (nt * M + i) | (int(kt > 0) << 16)} for i in range(M)]
    got = np.zeros((M, N), np.int64)

    async def reader(ctx):
        while ctx.get(dut.lines) < len(abeats):
            await ctx.tick()
        await ctx.tick()
        for nt in range(N // C):
            for i in range(M):
                ctx.set(dut.acc_rd.addr, nt * M + i)
                await ctx.tick()
                got[i, nt * C:(nt + 1) * C] = list(ctx.get(dut.acc_rd.data))

    run(dut, [lambda ctx: send(ctx, dut.w_stream, wbeats, random.Random(1), 0.2),
              lambda ctx: send(ctx, dut.a_stream, abeats, random.Random(2), 0.2), reader])
    np.testing.assert_array_equal(got, matmul(a, w))
