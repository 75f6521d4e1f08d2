"""cocotb tests of the QuantSoftmaxUnits Verilog (run by test_rtl_quant_softmax.py through sim.rtl_build).

$SYSTOLICA_TB (JSON) gives the runs; measured cycle counts go to $SYSTOLICA_TB_METRICS.
Every run but the volume / full-rate ones has random idle cycles on the input and
back-pressure on the output.
"""

from __future__ import annotations

import json
import os

import cocotb
import numpy as np
from test_quant_unit import quant_cases, quant_row, quant_row_beats
from test_rtl_quant_softmax import UNIT_CFG
from test_softmax_unit import expected_lasts, softmax_cases, softmax_row, softmax_row_beats

from systolica.hw.quant_unit import QuantUnit
from systolica.hw.softmax_unit import SoftmaxUnit
from systolica.sim.cocotb_streams import Sink, Source, StreamBench, reset

C = UNIT_CFG.cols


def _params() -> dict:
    return json.loads(os.environ["SYSTOLICA_TB"])


def _write_metrics(metrics: dict) -> None:
    with open(os.environ["SYSTOLICA_TB_METRICS"], "w") as f:
        json.dump(metrics, f, indent=1)


async def _stream(dut, unit: str, comp, beats, want, idle: float, stall: float, seed: int, plain):
    """Drive ``beats`` into ``<unit>_i_stream``, take ``len(want)`` beats and compare them; returns (src, snk)."""
    src = Source(f"{unit}_i_stream", comp.i_layout, beats, idle)
    snk = Sink(f"{unit}_o_stream", comp.o_layout, len(want), stall)
    await StreamBench(dut, [src], [snk], seed=seed).run(max_cycles=60 * len(beats) + 2000)
    for k, (g, w) in enumerate(zip(snk.beats, want, strict=True)):
        assert plain(g) == w, f"{unit} seed {seed} output beat {k}: {plain(g)} != {w}"
    assert int(getattr(dut, f"{unit}_error").value) == 0, f"{unit} flagged a beat of the wrong kind"
    return src, snk


def _quant_plain(b) -> dict:
    return {"data": [int(v) for v in b.data], "exp": int(b.exp), "blk": int(b.blk), "last": int(b.last)}


def _soft_plain(b) -> list[int]:
    return [int(v) for v in b.data]


def _per_row(src: Source, snk: Sink, rows: int) -> float:
    """Cycles per row in the steady state: from the first input of row 1 to the last output of the last row."""
    outs = [k for k, b in enumerate(snk.beats) if int(b.last)]
    return (snk.fired[outs[-1]] - snk.fired[outs[0]]) / (rows - 1)


@cocotb.test()
async def quant(dut):
    """QuantUnit: random rows (every edge-case flavour, split 0/1, empty rows), then full-rate rows."""
    p = _params()
    qu = QuantUnit(UNIT_CFG)
    await reset(dut)
    metrics = {"carry_rows": 0, "rows": 0}
    for run in p["runs"]:
        beats, want, stats = quant_cases(C, run["seed"], rows=run["rows"], max_lines=6)
        await _stream(dut, "quant", qu, beats, want, run["idle"], run["stall"], run["seed"], _quant_plain)
        metrics["carry_rows"] += stats["carry_rows"]
        metrics["rows"] += stats["rows"]
    L, rows = p["lines"], 8
    rng = np.random.default_rng(99)
    for split in (0, 1):
        beats, want = [], []
        for _ in range(rows):
            b, w = quant_row_beats(quant_row(rng, "mixed", L * C).reshape(1, -1), C, split)
            beats += b
            want += w
        src, snk = await _stream(dut, "quant", qu, beats, want, 0.0, 0.0, 7 + split, _quant_plain)
        cpr = _per_row(src, snk, rows)
        metrics[f"cycles_per_row_split{split}"] = cpr
        metrics[f"input_lines_per_cycle_split{split}"] = (2 + split) * L / cpr
        metrics[f"output_lines_per_cycle_split{split}"] = (1 + split) * (L + 1) / cpr
    metrics["lines_per_row"] = L
    _write_metrics(metrics)


@cocotb.test()
async def softmax(dut):
    """SoftmaxUnit: random rows (1..max_n elements, padded lanes holding junk), then full-rate rows."""
    p = _params()
    su = SoftmaxUnit(UNIT_CFG)
    await reset(dut)
    elements = 0
    for run in p["runs"]:
        beats, want = softmax_cases(C, run["seed"], rows=run["rows"], max_n=run["max_n"])
        _, snk = await _stream(dut, "softmax", su, beats, want, run["idle"], run["stall"], run["seed"], _soft_plain)
        assert [int(b.last) for b in snk.beats] == expected_lasts(beats, C), f"softmax seed {run['seed']}: last flags"
        elements += sum(b["n"] for b in beats if b["kind"] == 0)
    L, rows = p["lines"], 8
    rng = np.random.default_rng(98)
    beats, want = [], []
    for _ in range(rows):
        b, w = softmax_row_beats(softmax_row(rng, "scores", L * C).reshape(1, -1), C)
        beats += b
        want += w
    src, snk = await _stream(dut, "softmax", su, beats, want, 0.0, 0.0, 5, _soft_plain)
    cpr = _per_row(src, snk, rows)
    _write_metrics({"elements": elements, "lines_per_row": L, "cycles_per_row": cpr,
                    "input_lines_per_cycle": 3 * L / cpr, "output_lines_per_cycle": L / cpr})
