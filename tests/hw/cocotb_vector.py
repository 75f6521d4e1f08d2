"""cocotb test of the generated VectorUnit Verilog (run by test_rtl_vector.py): the op mix of
test_vector_unit.vector_cases with idle cycles and back-pressure, bit-exact with numerics."""

from __future__ import annotations

import json
import os

import cocotb
from test_vector_unit import vector_cases

from systolica.config import AccelConfig
from systolica.hw.vector_unit import VectorUnit
from systolica.sim.cocotb_streams import Sink, Source, StreamBench, reset


@cocotb.test()
async def vector_ops(dut):
    p = json.loads(os.environ["SYSTOLICA_TB"])
    cfg = AccelConfig(**p["cfg"])
    vu = VectorUnit(cfg)  # for its layouts
    await reset(dut)
    metrics = {}
    for seed, idle, stall in p["runs"]:
        beats, want = vector_cases(cfg.cols, seed)
        src = Source("i_stream", vu.i_layout, beats, idle)
        snk = Sink("o_stream", vu.o_layout, len(want), stall)
        await StreamBench(dut, [src], [snk], seed=seed).run(max_cycles=100 * len(beats) + 100)
        for k, (g, w) in enumerate(zip(snk.beats, want, strict=True)):
            got = [int(g.data[c]) for c in range(cfg.cols)]
            assert got == [int(v) for v in w], f"seed {seed} line {k}: {got} != {list(w)}"
        if idle == 0 and stall == 0:
            metrics["lines_per_cycle"] = (len(src.fired) - 1) / max(1, src.fired[-1] - src.fired[0])
    with open(os.environ["SYSTOLICA_TB_METRICS"], "w") as f:
        json.dump(metrics, f)
