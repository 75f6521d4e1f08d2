"""cocotb tests of the RtlUnits Verilog (run by test_rtl_units.py through sim.rtl_build).

$SYSTOLICA_TB (JSON) says which test does what; measured cycle counts go to $SYSTOLICA_TB_METRICS.
Every stream gets random idle cycles (sources) and back-pressure (sinks) in at least one run.
"""

from __future__ import annotations

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge
from hw_gemm_tiles import accumulate, tile_streams
from hw_rtl_units import ATTN_PARAMS, SHAPES, UNIT_CFG
from test_activation import activation_cases
from test_attention_unit import attention_cases
from test_norm_unit import norm_cases
from test_softmax_unit import softmax_cases
from test_vector_unit import vector_cases

from systolica.hw.activation import ActivationUnit
from systolica.hw.attention_unit import AttentionUnit
from systolica.hw.norm_unit import NormUnit
from systolica.hw.softmax_unit import SoftmaxUnit
from systolica.hw.systolic_array import SystolicArray
from systolica.hw.vector_unit import VectorUnit
from systolica.numerics import matmul
from systolica.sim.cocotb_streams import Sink, Source, StreamBench, reset


def _params() -> dict:
    return json.loads(os.environ["SYSTOLICA_TB"])


def _write_metrics(metrics: dict) -> None:
    with open(os.environ["SYSTOLICA_TB_METRICS"], "w") as f:
        json.dump(metrics, f, indent=1)


def _rate(fired: list[int]) -> float:
    """Handshakes per cycle between the first and the last one."""
    return (len(fired) - 1) / max(1, fired[-1] - fired[0])


async def _gemm(dut, unit: str, arr: SystolicArray, case: dict):
    M, K, N = case["m"], case["k"], case["n"]
    rng = np.random.default_rng(case["seed"])
    a = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
    w = rng.integers(-128, 128, size=(N, K), dtype=np.int8)
    wbeats, abeats, order = tile_streams(a, w, arr.rows, arr.cols, arr.w_cols)
    ws = Source(f"{unit}_w_stream", arr.w_layout, wbeats, case["idle"])
    as_ = Source(f"{unit}_a_stream", arr.a_layout, abeats, case["idle"])
    out = Sink(f"{unit}_o_stream", arr.o_layout, len(abeats), case["stall"])
    await StreamBench(dut, [ws, as_], [out], seed=case["seed"]).run(max_cycles=50 * (len(wbeats) + len(abeats)) + 1000)
    got = accumulate(out.beats, abeats, order, M, N, arr.cols)
    want = matmul(a, w)
    if not np.array_equal(got, want):
        raise AssertionError(f"{unit} GEMM {M}x{K}x{N} seed {case['seed']}: mismatch at "
                             f"{np.argwhere(got != want)[:5].tolist()}")
    return ws, as_, out


@cocotb.test()
async def gemm(dut):
    """Random GEMMs on one array shape; full-rate runs measure prefill and decode."""
    p = _params()
    cfg = SHAPES[p["shape"]]
    arr = SystolicArray(cfg)  # for its stream layouts; not elaborated here
    unit = f"arr{p['shape']}"
    await reset(dut)
    metrics = {}
    R, C, P = arr.rows, arr.cols, arr.w_cols
    for case in p["cases"]:
        ws, as_, out = await _gemm(dut, unit, arr, case)
        if case.get("measure"):
            f = out.fired
            mid = f[len(f) // 4: 3 * len(f) // 4 + 1]  # steady state: the middle half of the run
            cycles = f[-1] - min(ws.fired[0], as_.fired[0]) + 1
            metrics[case["measure"]] = {
                "m": case["m"], "k": case["k"], "n": case["n"], "cycles": cycles,
                "utilization": case["m"] * case["k"] * case["n"] / (R * C * cycles),
                "steady_out_lines_per_cycle": _rate(mid),
                "steady_macs_per_cycle": _rate(mid) * R * C,
                "weight_bytes_per_cycle": _rate(ws.fired) * P * R,
                "dma_bytes_per_cycle": cfg.dma_bytes * cfg.dma_ports,
            }
    _write_metrics(metrics)


async def _lines(dut, unit: str, i_layout, o_layout, beats, want, idle, stall, seed):
    src = Source(f"{unit}_i_stream", i_layout, beats, idle)
    snk = Sink(f"{unit}_o_stream", o_layout, len(want), stall)
    await StreamBench(dut, [src], [snk], seed=seed).run(max_cycles=100 * len(beats) + 200)
    for k, (g, w) in enumerate(zip(snk.beats, want, strict=True)):
        # None in the expected line: a lane past the end of a padded row, not compared
        got = [int(g.data[c]) if w[c] is not None else None for c in range(UNIT_CFG.cols)]
        assert got == [None if v is None else int(v) for v in w], f"{unit} seed {seed} line {k}: {got} != {list(w)}"
    return src, snk


@cocotb.test()
async def vector_ops(dut):
    """VectorUnit: ADD, MUL, REQUANT, ARGMAX, bit-exact with numerics."""
    p = _params()
    vu = VectorUnit(UNIT_CFG)
    await reset(dut)
    metrics = {}
    for seed, idle, stall in p["runs"]:
        beats, want = vector_cases(UNIT_CFG.cols, seed)
        src, _ = await _lines(dut, "vec", vu.i_layout, vu.o_layout, beats, want, idle, stall, seed)
        if idle == 0 and stall == 0:
            metrics["lines_per_cycle"] = _rate(src.fired)
    _write_metrics(metrics)


@cocotb.test()
async def activation(dut):
    """ActivationUnit: SILU and GELU, bit-exact with numerics."""
    p = _params()
    au = ActivationUnit(UNIT_CFG)
    await reset(dut)
    metrics = {}
    for seed, idle, stall in p["runs"]:
        beats, want = activation_cases(UNIT_CFG.cols, seed, lines=p.get("lines", 48))
        src, snk = await _lines(dut, "act", au.i_layout, au.o_layout, beats, want, idle, stall, seed)
        if idle == 0 and stall == 0:
            metrics["lines_per_cycle"] = _rate(src.fired)
            metrics["latency"] = snk.fired[0] - src.fired[0]
    _write_metrics(metrics)


@cocotb.test()
async def attention(dut):
    """AttentionUnit: chains of KV tiles for a GQA group, bit-exact with numerics.attn_tile."""
    p = _params()
    au = AttentionUnit(UNIT_CFG, **ATTN_PARAMS)
    await reset(dut)
    metrics = {}
    C = UNIT_CFG.cols
    for run in p["runs"]:
        beats, want = attention_cases(C, run["seed"], hd=run["hd"], nq=run["nq"], tiles=tuple(run["tiles"]),
                                      causal=run["causal"])
        src, snk = await _lines(dut, "attn", au.i_layout, au.o_layout, beats, want, run["idle"], run["stall"],
                                run["seed"])
        assert int(dut.attn_error.value) == 0, "attention unit flagged a beat of the wrong kind"
        if run["idle"] == 0 and run["stall"] == 0:
            hdl = run["hd"] // C
            kv_tokens = sum(run["tiles"]) * run["nq"]  # (token, query row) pairs
            cycles = snk.fired[-1] - src.fired[0] + 1
            metrics.update(cycles=cycles, kv_token_rows=kv_tokens, hd=run["hd"], lanes=C,
                           cycles_per_kv_token_row=cycles / kv_tokens,
                           cycles_per_kv_element=cycles / (kv_tokens * run["hd"]),
                           ideal_cycles_per_kv_token_row=2 * hdl,
                           input_lines_per_cycle=len(src.fired) / cycles)
    _write_metrics(metrics)


@cocotb.test()
async def norms(dut):
    """NormUnit: RMSNorm and LayerNorm rows (multi-pass), bit-exact with numerics."""
    p = _params()
    nu = NormUnit(UNIT_CFG)
    await reset(dut)
    for seed, idle, stall in p["runs"]:
        beats, want = norm_cases(UNIT_CFG.cols, seed)
        await _lines(dut, "norm", nu.i_layout, nu.o_layout, beats, want, idle, stall, seed)
        assert int(dut.norm_error.value) == 0, "norm unit flagged a beat of the wrong kind"
    _write_metrics({})


@cocotb.test()
async def softmax(dut):
    """SoftmaxUnit: rows of scores (three passes), bit-exact with numerics.softmax."""
    p = _params()
    su = SoftmaxUnit(UNIT_CFG)
    await reset(dut)
    for seed, idle, stall in p["runs"]:
        beats, want = softmax_cases(UNIT_CFG.cols, seed)
        await _lines(dut, "smax", su.i_layout, su.o_layout, beats, want, idle, stall, seed)
        assert int(dut.smax_error.value) == 0, "softmax unit flagged a beat of the wrong kind"
    _write_metrics({})


@cocotb.test()
async def gemm_core(dut):
    """GemmCore: K tiles outer, N tiles inner (decode order: an accumulator line recurs every N/C
    tiles), results read back from the accumulator buffer, bit-exact with numerics.matmul."""
    p = _params()
    arr = SystolicArray(UNIT_CFG)
    arr._MustUse__silence = True
    R, C, P = arr.rows, arr.cols, arr.w_cols
    await reset(dut)
    dut.gemm_acc_rd__en.value = 1
    total = 0
    for case in p["cases"]:
        M, K, N = case["m"], case["k"], case["n"]
        rng = np.random.default_rng(case["seed"])
        a = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
        w = rng.integers(-128, 128, size=(N, K), dtype=np.int8)
        base = case["base"]
        wbeats, abeats = [], []
        for kt in range(K // R):
            for nt in range(N // C):
                tile = w[nt * C:(nt + 1) * C, kt * R:(kt + 1) * R]
                wbeats += [[[int(v) for v in tile[g * P + j]] for j in range(P)] for g in range(C // P)]
                abeats += [{"data": [int(v) for v in a[i, kt * R:(kt + 1) * R]], "last": int(i == M - 1),
                            "tag": (base + nt * M + i) | (int(kt > 0) << 16)} for i in range(M)]
        ws = Source("gemm_w_stream", arr.w_layout, wbeats, case["idle"])
        as_ = Source("gemm_a_stream", arr.a_layout, abeats, case["idle"])
        await StreamBench(dut, [ws, as_], [], seed=case["seed"]).run(max_cycles=50 * (len(wbeats) + len(abeats)))
        total += len(abeats)
        while int(dut.gemm_lines.value) < total:  # the last lines are still in the array
            await RisingEdge(dut.clk)
        got = np.zeros((M, N), np.int64)
        for nt in range(N // C):
            for i in range(M):
                dut.gemm_acc_rd__addr.value = base + nt * M + i
                await RisingEdge(dut.clk)
                await ReadOnly()
                line = arr.o_layout["data"].shape.from_bits(int(dut.gemm_acc_rd__data.value))
                got[i, nt * C:(nt + 1) * C] = [int(line[c]) for c in range(C)]
                await RisingEdge(dut.clk)
        want = matmul(a, w)
        assert np.array_equal(got, want), f"GemmCore {M}x{K}x{N}: mismatch at {np.argwhere(got != want)[:5].tolist()}"
    _write_metrics({})
