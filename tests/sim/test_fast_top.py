"""The fast harness's Verilog top: the accelerator behind a registered reset, every other port passed through.

Cheap (text only); the harness runs themselves are in tests/hw/test_accel_fast.py (random programs
against the golden simulator, through this top) and tests/hw/test_fast_bench.py.
"""

from __future__ import annotations

import re

import pytest

from systolica.config import preset
from systolica.sim.fast_harness import FAST_TOP, TOP, FastHarnessError, FastRtl, fast_top_verilog

# the shape of Amaranth's output: a port list, then one declaration per port (ordered by name)
ACCEL = f"""module {TOP}(ap_rst_n, m_axi_gmem0_rdata, m_axi_gmem0_rready, interrupt, ap_clk);
  input ap_clk;
  wire ap_clk;
  input ap_rst_n;
  wire ap_rst_n;
  output interrupt;
  reg interrupt = 1'h0;
  input [31:0] m_axi_gmem0_rdata;
  wire [31:0] m_axi_gmem0_rdata;
  output m_axi_gmem0_rready;
  wire m_axi_gmem0_rready;
  wire rst;
  assign rst = ~ ap_rst_n;
endmodule
module \\{TOP}.inner (clk, rst, x);
  input clk;
  input rst;
  output [7:0] x;
endmodule
"""


def _ports(text: str, module: str) -> dict[str, str]:
    head = text[text.index(f"module {module}("):]
    head = head[:head.index("endmodule")]
    return {n: f"{d} {w.strip()}".strip() for d, w, n in
            re.findall(r"^\s*(input|output)\s+(\[[^\]]+\]\s*)?(\w+)\s*;", head, re.M)}


def test_fast_top_passes_every_port_but_the_reset_through():
    text = fast_top_verilog(ACCEL)
    # the same ports, directions and widths as the accelerator, and none of the submodule's
    assert _ports(text, FAST_TOP) == _ports(ACCEL, TOP) == {
        "ap_clk": "input", "ap_rst_n": "input", "interrupt": "output", "m_axi_gmem0_rdata": "input [31:0]",
        "m_axi_gmem0_rready": "output"}
    conns = dict(re.findall(r"^\s*\.(\w+)\((\w+)\)", text, re.M))
    assert conns == {"ap_clk": "ap_clk", "ap_rst_n": "rst_n_q", "interrupt": "interrupt",
                     "m_axi_gmem0_rdata": "m_axi_gmem0_rdata", "m_axi_gmem0_rready": "m_axi_gmem0_rready"}
    # the reset the accelerator sees is a register on ap_clk, held in reset from the start
    assert "reg rst_n_q = 1'h0;" in text
    assert re.search(r"always @\(posedge ap_clk\) rst_n_q <= ap_rst_n;", text)
    assert re.search(rf"^\s*{TOP} core \(", text, re.M)


def test_fast_top_needs_clock_and_reset_ports():
    with pytest.raises(FastHarnessError, match="ap_rst_n"):
        fast_top_verilog(ACCEL.replace("input ap_rst_n;", "wire ap_rst_n;"))


def test_pgo_and_waves_do_not_mix(tmp_path):
    with pytest.raises(ValueError, match="pgo"):
        FastRtl(preset("tiny"), tmp_path, waves="vcd", pgo=True)
