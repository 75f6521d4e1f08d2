"""The performance model's int4 GEMM_STREAM (the RTL's 4-bit datapath, hw/group_scaler.py): the same bytes a
cycle carry two weights a byte plus the group scales, so a stream-bound decode GEMM takes that share of the time."""

from __future__ import annotations

import pytest

from systolica import wstream, wstream4
from systolica.config import preset
from systolica.isa import WFmt, make
from systolica.sim.perf_costs import PerfParams, op_cost


@pytest.mark.parametrize("name", ["default", "large"])
@pytest.mark.parametrize("fmt", [WFmt.Q4_0, WFmt.Q4_1])
def test_stream_bound_int4_gemm_costs_its_share_of_the_bytes(name, fmt):
    cfg = preset(name)
    k, n = 1536 // cfg.cols, 576 // cfg.cols  # SmolLM2's ffn_down, decode (m = 1): bound by the stream
    p = PerfParams()
    c8 = op_cost(cfg, p, make("GEMM_STREAM", m=1, k=k, n=n))
    c4 = op_cost(cfg, p, make("GEMM_STREAM", m=1, k=k, n=n, wfmt=int(fmt), gshift=6))
    share = wstream4.port_row_bytes(k, fmt, cfg) / wstream.port_row_bytes(k, cfg)
    assert share < 0.63
    assert c4.exec_cycles == pytest.approx(c8.exec_cycles * share, rel=0.02)
    assert c4.rd_beats == pytest.approx(c8.rd_beats * share, abs=1)
    assert c4.macs == c8.macs  # the same work, fewer bytes
