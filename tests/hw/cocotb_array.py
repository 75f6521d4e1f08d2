"""cocotb tests of the generated SystolicArray Verilog (run by test_rtl_array.py through sim.rtl_build).

Parameters arrive as JSON in $SYSTOLICA_TB: {"cfg": AccelConfig dict, "cases": [...]}.
Measured cycle counts go to $SYSTOLICA_TB_METRICS.
"""

from __future__ import annotations

import json
import os

import cocotb
import numpy as np
from hw_gemm_tiles import accumulate, tile_streams

from systolica.config import AccelConfig
from systolica.hw.systolic_array import SystolicArray
from systolica.sim.cocotb_streams import Sink, Source, StreamBench, reset

from systolica.numerics import matmul


async def run_gemm(dut, arr: SystolicArray, M: int, K: int, N: int, idle: float, stall: float, seed: int):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
    w = rng.integers(-128, 128, size=(N, K), dtype=np.int8)
    wbeats, abeats, order = tile_streams(a, w, arr.rows, arr.cols, arr.w_cols)
    ws = Source("w_stream", arr.w_layout, wbeats, idle)
    as_ = Source("a_stream", arr.a_layout, abeats, idle)
    out = Sink("o_stream", arr.o_layout, len(abeats), stall)
    bench = StreamBench(dut, [ws, as_], [out], seed=seed)
    await bench.run(max_cycles=50 * (len(wbeats) + len(abeats)) + 1000)
    got = accumulate(out.beats, abeats, order, M, N, arr.cols)
    want = matmul(a, w)
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)[:5].tolist()
        raise AssertionError(f"GEMM {M}x{K}x{N} seed {seed}: mismatch at {bad}")
    return ws, as_, out


@cocotb.test()
async def gemm(dut):
    p = json.loads(os.environ["SYSTOLICA_TB"])
    cfg = AccelConfig(**p["cfg"])
    arr = SystolicArray(cfg)  # for its stream layouts; not elaborated here
    await reset(dut)
    metrics = {}
    R, C, P = arr.rows, arr.cols, arr.w_cols
    for case in p["cases"]:
        M, K, N = case["m"], case["k"], case["n"]
        ws, as_, out = await run_gemm(dut, arr, M, K, N, case["idle"], case["stall"], case["seed"])
        if case.get("measure"):
            start = min(ws.fired[0], as_.fired[0])
            cycles = out.fired[-1] - start + 1
            # steady state: output lines per cycle over the middle half of the run
            f = out.fired
            mid = f[len(f) // 4: 3 * len(f) // 4 + 1]
            steady = (len(mid) - 1) / max(1, mid[-1] - mid[0])
            wf = ws.fired
            wrate = (len(wf) - 1) / max(1, wf[-1] - wf[0])  # weight beats per cycle
            metrics[case["measure"]] = {
                "m": M, "k": K, "n": N, "cycles": cycles,
                "utilization": M * K * N / (R * C * cycles),
                "steady_out_lines_per_cycle": steady,
                "steady_macs_per_cycle": steady * R * C,
                "weight_bytes_per_cycle": wrate * P * R,
                "dma_bytes_per_cycle": cfg.dma_bytes * cfg.dma_ports,
            }
    with open(os.environ["SYSTOLICA_TB_METRICS"], "w") as f:
        json.dump(metrics, f, indent=1)
