"""`systolica hw generate`: port names parsed back from the Verilog, register map from csr.py."""

from __future__ import annotations

import json

from systolica.cli import main as cli_main
from systolica.config import preset
from systolica.csr import REGISTERS
from systolica.hw.axi import AXI4_NAMES, AXI_LITE_NAMES
from systolica.hw.generate import TOP_NAME, generate, verilog_ports


def _contract(cfg) -> dict[str, str]:
    """Port name -> direction, written out from the contract (not from the generator)."""
    ports = {"ap_clk": "input", "ap_rst_n": "input", "interrupt": "output"}
    lite_in = {"awaddr", "awvalid", "wdata", "wstrb", "wvalid", "bready", "araddr", "arvalid", "rready"}
    for n in AXI_LITE_NAMES:
        ports[f"s_axi_control_{n}"] = "input" if n in lite_in else "output"
    master_in = {"awready", "wready", "bid", "bresp", "bvalid", "arready", "rid", "rdata", "rresp", "rlast", "rvalid"}
    for p in range(cfg.dma_ports):
        for n in AXI4_NAMES:
            ports[f"m_axi_gmem{p}_{n}"] = "input" if n in master_in else "output"
    return ports


def _check_ports(cfg, verilog_text: str) -> None:
    got = verilog_ports(verilog_text, TOP_NAME)
    assert {k: d for k, (d, _) in got.items()} == _contract(cfg)
    assert got["m_axi_gmem0_araddr"][1] == 64 and got["m_axi_gmem0_rdata"][1] == cfg.dma_bits
    assert got["s_axi_control_wdata"][1] == 32 and got["s_axi_control_awaddr"][1] == 8
    assert not any("__" in name for name in got), "Amaranth's nested names leaked into the top level"


def test_two_port_config_has_gmem1(tmp_path):
    cfg = preset("tiny").replace(name="tiny2", dma_ports=2)  # fetch, LOAD, weight port 0 on gmem0; weight port 1 reads gmem1, STORE writes it
    _check_ports(cfg, generate(cfg, tmp_path)["verilog"].read_text())


def test_register_map_comes_from_csr_table(tmp_path, capsys):
    assert cli_main(["hw", "generate", "--config", "tiny", "-o", str(tmp_path)]) == 0
    assert "regmap.json" in capsys.readouterr().out
    d = json.loads((tmp_path / "regmap.json").read_text())
    assert [(r["name"], r["offset"], r["access"]) for r in d["registers"]] == \
        [(r.name, r.offset, r.access) for r in REGISTERS]
    assert d["config_hash"] == f"{preset('tiny').hash32():08x}"
    md = (tmp_path / "regmap.md").read_text()
    for r in REGISTERS:
        assert f"| {r.name} |" in md
    assert (tmp_path / "config.toml").read_text() == preset("tiny").to_toml()
    _check_ports(preset("tiny"), (tmp_path / "systolica_accel.v").read_text())


def test_rtlil_and_verilog_come_from_one_netlist():
    """Synthesis reads the RTLIL, users get the Verilog: one elaboration gives both, and the Verilog is
    exactly what ``amaranth.back.verilog`` writes from that design."""
    from amaranth.back import verilog

    from systolica.hw.generate import convert
    from systolica.hw.systolic_array import SystolicArray

    cfg = preset("tiny")
    il, text = convert(SystolicArray(cfg), "arr")
    assert text == verilog.convert(SystolicArray(cfg), name="arr", emit_src=False)
    assert "module \\arr" in il and "attribute \\top 1" in il
