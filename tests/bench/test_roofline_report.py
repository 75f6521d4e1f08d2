"""The per-board roofline report: the board's roof, the design's bounds, tokens/s, fractions, and sources."""

from __future__ import annotations

import pytest

from systolica.bench.roofline_report import board_roofline, figure_basis, render_roofline, roofline_sources
from systolica.boards.board import load_board
from systolica.boards.fit_status import clock_basis
from systolica.sim.roofline import ModelWork

WORK = ModelWork("m", weight_bytes=100_000_000, kv_bytes_per_position=10_000, attn_macs_per_position=5_000,
                 matmul_macs=100_000_000)


def _report(name: str, clock: dict | None = None, **kw):
    b = load_board(name)
    args = dict(decode_context=100, prompt_tokens=40, prefill_rows=16, decode_tps=None, prefill_tps=None) | kw
    return b, board_roofline(b, b.config, WORK, clock=clock or clock_basis(b.config, board=b), **args)


@pytest.mark.parametrize("name, roof, load, gmacs", [("kv260", 12.8, 3.2, 51.2), ("pynq-z2", 1.575, 0.8, 6.4)])
def test_roofs_and_the_tokens_per_second_they_imply(name, roof, load, gmacs):
    b, r = _report(name, decode_tps=20.0, prefill_tps=150.0)
    c = b.config
    stream = c.dma_ports * c.dma_bits / 8 * c.clock_mhz / 1e3  # GB/s: kv260 4 x 16 B, pynq-z2 2 x 8 B a cycle
    fg, dec, pre = r["figures"], r["decode"], r["prefill"]
    # kv260: min(19.2 x 0.8, 4 x 128/8 x 200 MHz) = 12.8 GB/s; pynq-z2: min(2.1 x 0.75, 4 x 64/8 x 100 MHz) = 1.575
    assert fg["board_roof"]["value"] == pytest.approx(roof)
    assert fg["dram"]["value"] == pytest.approx(b.dram_peak_gbps * b.dram_efficiency)
    assert fg["pl_ports"]["value"] == pytest.approx(b.pl_ports * b.pl_port_bits / 8 * b.config.clock_mhz / 1e3)
    assert r["board_limit"] == ("pl ports" if name == "kv260" else "dram")
    assert fg["design_stream"]["value"] == pytest.approx(stream)  # dma_ports x dma_bits / 8 x clock
    assert fg["design_load"]["value"] == pytest.approx(load)  # gmem0 alone
    assert fg["design_peak"]["value"] == pytest.approx(gmacs)  # rows x cols x clock
    nbytes = WORK.weight_bytes + 100 * WORK.kv_bytes_per_position
    assert dec["bytes_per_token"]["value"] == nbytes
    assert dec["board_tps"]["value"] == pytest.approx(roof * 1e9 / nbytes)
    assert dec["design_tps"]["value"] == pytest.approx(stream * 1e9 / nbytes)
    assert dec["load_path_tps"]["value"] == pytest.approx(min(roof, load) * 1e9 / nbytes)
    bound = min(roof, stream) * 1e9 / nbytes
    assert dec["bound_tps"]["value"] == pytest.approx(bound)
    assert dec["bound"] == ("board roof" if roof <= stream else "design stream bound")
    assert dec["fraction"] == pytest.approx(20.0 / bound)
    assert dec["fraction_of_load_path"] == pytest.approx(20.0 / dec["load_path_tps"]["value"])
    # prefill: 40 tokens = 2 chunks of 16 + 8 single steps: 10 weight passes, 4 tokens per pass
    assert pre["weight_reuse"]["value"] == pytest.approx(4.0)
    compute = gmacs * 1e9 / WORK.macs_per_token(20)
    assert pre["compute_tps"]["value"] == pytest.approx(compute)
    assert pre["board_tps"]["value"] == pytest.approx(roof * 1e9 * 4 / WORK.weight_bytes)
    assert pre["design_tps"]["value"] == pytest.approx(stream * 1e9 * 4 / WORK.weight_bytes)
    tight = min(compute, roof * 4e9 / WORK.weight_bytes, stream * 4e9 / WORK.weight_bytes)
    assert pre["bound_tps"]["value"] == pytest.approx(tight) and pre["fraction"] == pytest.approx(150.0 / tight)


def test_every_figure_names_its_source():
    b, r = _report("kv260", decode_tps=20.0)
    src = {k: v["source"] for k, v in r["figures"].items()}
    assert "dram_efficiency = 0.8 (assumption" in src["dram"]  # [?] in the board file
    assert "dram_mtps = 2400 (datasheet" in src["dram"]  # the peak is bus bits x transfer rate, each [S: DS987]
    assert "pl_ports = 4 (datasheet" in src["pl_ports"] and "200 MHz (assumed clock)" in src["pl_ports"]
    assert f"dma_ports = {b.config.dma_ports}" in src["design_stream"] and "rows x cols = 16 x 16" in src["design_peak"]
    assert "performance model" in r["decode"]["modelled_tps"]["source"]
    assert "compiled artifact" in r["decode"]["bytes_per_token"]["source"]
    assert r["prefill"]["fraction"] is None  # not modelled: no fraction made up
    assert figure_basis(load_board("pynq-z2"), "dram_efficiency").startswith(
        "pynq-z2.toml dram_efficiency = 0.75 (datasheet: ")
    lines = roofline_sources([r])
    assert lines[0].startswith("kv260 (clock: assumed 200 MHz") and any("GEMM_STREAM" in x for x in lines)
    assert render_roofline([r, _report("pynq-z2")[1]]).row_count == 4


def test_a_measured_clock_moves_the_port_roofs():
    """At a measured 100 MHz the kv260's four HP ports carry 6.4 GB/s: below its DDR4, so they are the roof."""
    b = load_board("kv260")
    clock = {"mhz": 100.0, "basis": "measured", "label": "clock: 100 MHz measured"}
    _, r = _report("kv260", clock=clock)
    assert r["figures"]["pl_ports"]["value"] == pytest.approx(6.4) == r["figures"]["board_roof"]["value"]
    assert r["figures"]["design_stream"]["value"] == pytest.approx(b.config.dma_ports * 16 * 100e6 / 1e9)
    assert "100 MHz (measured clock)" in r["figures"]["design_stream"]["source"]
    assert r["clock_mhz"] == 100.0 and b.config.clock_mhz == 200.0
