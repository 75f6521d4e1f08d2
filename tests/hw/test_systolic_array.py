"""SystolicArray under the Amaranth simulator: random GEMMs tiled onto the array, random idle
cycles and back-pressure, partial sums added over K tiles and compared with numerics.matmul."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest
from hw_gemm_tiles import accumulate, tile_streams
from hw_streams_tb import collect, run, send

from systolica.config import AccelConfig
from systolica.hw.systolic_array import SystolicArray, weight_cols_per_beat
from systolica.numerics import matmul

# components built only for their layouts, or whose constructor rejected its arguments, are never elaborated
pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]


def check_gemm(cfg: AccelConfig, M: int, K: int, N: int, seed: int, idle=0.3, stall=0.3):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    R, C = cfg.rows, cfg.cols
    dut = SystolicArray(cfg)
    P = dut.w_cols
    a = nrng.integers(-128, 128, size=(M, K), dtype=np.int8)
    w = nrng.integers(-128, 128, size=(N, K), dtype=np.int8)
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
                                              (4, 4, 5, 2), (4, 8, 3, 2), (16, 16, 2, 2)])
def test_random_gemm(rows, cols, M, pack):
    """pack = macs_per_dsp: 2 puts the products of two adjacent columns in one multiplier."""
    cfg = AccelConfig(rows=rows, cols=cols, dma_bits=64, macs_per_dsp=pack)
    check_gemm(cfg, M=M, K=2 * rows, N=2 * cols, seed=rows * 100 + cols * 10 + M + pack)


def test_decode_consumes_full_dma_beat_per_cycle():
    # 16 bytes per cycle into a 4x4 array: P = 4 columns per beat, a whole tile per beat
    cfg = AccelConfig(rows=4, cols=4, dma_bits=128, spad_kib=16, acc_kib=16, vbuf_kib=16)
    assert weight_cols_per_beat(cfg) == 4
    check_gemm(cfg, M=1, K=8, N=8, seed=7, idle=0.0, stall=0.0)


@pytest.mark.parametrize("pack", [1, 2])
def test_extremes_no_overflow_of_products(pack):
    # -128 * -128 on every PE is the largest product: the column sum must still be exact; with two MACs a
    # multiplier the packed low field's extremes (+16384, and -128 * 127 borrowing from the high one) too
    cfg = AccelConfig(rows=4, cols=4, macs_per_dsp=pack)
    for wv, av in ((-128, -128), (-128, 127), (127, -128), (127, 127)):
        dut = SystolicArray(cfg)
        wbeats = [[[wv] * 4] * dut.w_cols for _ in range(4 // dut.w_cols)]
        abeats = [{"data": [av] * 4, "last": 1, "tag": 0}]
        got = []
        run(dut, [lambda ctx: send(ctx, dut.w_stream, wbeats, random.Random(1), 0),
                  lambda ctx: send(ctx, dut.a_stream, abeats, random.Random(2), 0),
                  lambda ctx: collect(ctx, dut.o_stream, 1, random.Random(3), 0, out=got)])
        assert [got[0].data[c] for c in range(4)] == [4 * wv * av] * 4, (wv, av)


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_bad_parameters():
    cfg = AccelConfig(rows=4, cols=8)
    with pytest.raises(ValueError, match="w_cols=3"):
        SystolicArray(cfg, w_cols=3)
    with pytest.raises(TypeError, match="AccelConfig"):
        SystolicArray({"rows": 4})
    gc.collect()  # the half-built components go now, while this test's warning filter holds
