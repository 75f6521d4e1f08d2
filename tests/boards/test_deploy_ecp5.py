"""Deploy folder layout, and the ECP5 flow's wrapper / report handling (the real run is slow)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from systolica.boards.board import load_board
from systolica.boards.deploy import DeployError, check_deploy, deploy_files, write_deploy
from systolica.boards.ecp5 import Ecp5Error, critical_path, lpf_text, parse_report, timing_wrapper, tools_available
from systolica.boards.ports import parse_ports
from systolica.config import AccelConfig


def test_deploy_layout_pynq(tmp_path):
    b = load_board("kv260")
    paths = write_deploy(b, b.config, tmp_path / "deploy")
    d = tmp_path / "deploy"
    assert deploy_files(b)["bitstream"] == "kv260.bit" and deploy_files(b)["hwh"] == "kv260.hwh"
    assert AccelConfig.load(d / "config.toml") == b.config
    assert (d / "model").is_dir() and os.access(d / "run.sh", os.X_OK)
    run = (d / "run.sh").read_text()
    assert "systolica run --backend pynq --bitstream kv260.bit --config config.toml" in run
    assert "vivado -mode batch -source build.tcl" in (d / "README.md").read_text()
    # before Vivado: bitstream and handoff missing, nothing else
    assert sorted(check_deploy(b, d, b.config)) == ["kv260.bit", "kv260.hwh", "regmap.md"]
    assert set(paths) == set(deploy_files(b))
    with pytest.raises(DeployError, match="rebuild the deploy folder"):
        check_deploy(b, d, b.config.replace(rows=8))


def test_deploy_run_script_is_valid_bash(tmp_path):
    b = load_board("pynq-z2")
    write_deploy(b, b.config, tmp_path)
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    subprocess.run(["bash", "-n", str(tmp_path / "run.sh")], check=True)


def test_deploy_rejects_hwh_with_wrong_registers(tmp_path):
    b = load_board("pynq-z2")
    write_deploy(b, b.config, tmp_path)
    (tmp_path / "pynq-z2.hwh").write_text("<EDKSYSTEM><MODULES/></EDKSYSTEM>")
    with pytest.raises(DeployError, match="expected one module"):
        check_deploy(b, tmp_path, b.config)


def test_alveo_deploy_has_xclbin_and_no_hwh(tmp_path):
    b = load_board("u250")
    write_deploy(b, b.config, tmp_path)
    assert deploy_files(b)["bitstream"] == "u250.xclbin" and "hwh" not in deploy_files(b)
    assert "PYNQ <= 3.0" in (tmp_path / "README.md").read_text()


def test_ecp5_deploy_has_no_pynq_run_script(tmp_path):
    b = load_board("ulx3s")
    write_deploy(b, b.config, tmp_path)
    assert not (tmp_path / "run.sh").exists() and "not a working board design" in (tmp_path / "README.md").read_text()
    assert check_deploy(b, tmp_path, b.config) == ["ulx3s.bit", "regmap.md"]


def test_timing_wrapper_covers_every_port(fake_top):
    cfg = load_board("ulx3s").config
    ports = parse_ports(fake_top(cfg, top="acc"))
    w = timing_wrapper(ports, "acc")
    wp = parse_ports(w, "systolica_ecp5_top")
    assert list(wp) == ["clk", "sin", "cap", "sout"]
    for name in ports:
        assert f".{name}(" in w
    n_in = sum(p.width for p in ports.values() if p.direction == "input") - 1  # without ap_clk
    assert f"reg [{n_in}:0] sr_in" in w
    with pytest.raises(Ecp5Error, match="no ap_clk"):
        timing_wrapper({k: v for k, v in ports.items() if k != "ap_clk"}, "acc")


def test_lpf_and_report_parsing():
    b = load_board("orangecrab")
    assert 'LOCATE COMP "clk" SITE "A9";' in lpf_text(b)
    rep = {"fmax": {"clk$TRELLIS_IO_IN": {"achieved": 81.5, "constraint": 50.0},
                    "other": {"achieved": 120.0, "constraint": 50.0}},
           "utilization": {"TRELLIS_COMB": {"used": 900, "available": 24288}}}
    fmax, constraint, util = parse_report(rep)
    assert (fmax, constraint, util["TRELLIS_COMB"]) == (81.5, 50.0, (900, 24288))
    with pytest.raises(Ecp5Error, match="no fmax"):
        parse_report({"utilization": {}})
    path = [{"type": "clk-to-q", "from": {"cell": "a"}, "to": {"cell": "a"}},
            {"type": "routing", "from": {"cell": "a"}, "to": {"cell": "m"}},
            {"type": "logic", "from": {"cell": "m"}, "to": {"cell": "m"}},
            {"type": "setup", "from": {"cell": "z"}, "to": {"cell": "z"}}]
    assert critical_path({"critical_paths": [{"path": path}]}) == "a -> z (1 logic stages)"
    assert critical_path({}) == ""


@pytest.mark.slow
def test_ecp5_real_flow(tmp_path):
    """synth_ecp5 + nextpnr-ecp5 + ecppack on a small config: a real bitstream and an Fmax.

    Took 48 min wall (21 min CPU) on 2 shared cores with the heap placer and router2: Yosys 4 min, nextpnr the
    rest.  On 2026-12-07 the static placer hung on this design (strict legalisation, 20 minutes without output):
    the flow now stops a silent placement after ``PLACE_STALL`` and places with HeAP, which then said why: the
    configuration (AccelConfig's defaults at 4x4) had 229 MULT18X18D for 156 sites.  It now starts from the ulx3s
    preset's options."""
    missing = tools_available()
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (pip install -e .[ecp5])")
    from systolica.boards.ecp5 import ecp5_build
    from systolica.boards.hdl import top_name, write_verilog

    # the ulx3s preset's options (its line units' products in LUTs, ...) at 4x4: with AccelConfig's defaults the
    # netlist had 229 multipliers for the 85F's 156 (check_hard_blocks now says so before placing)
    cfg = load_board("ulx3s").config.replace(name="ecp5-small", rows=4, cols=4, spad_kib=4, acc_kib=1, vbuf_kib=4,
                                              dma_bits=32, dma_ports=1, queue_depth=4, cmd_depth=8, clock_mhz=50.0,
                                              dram_bytes=1 << 24)
    paths, _ = write_verilog(cfg, tmp_path / "hdl")
    r = ecp5_build(paths["verilog"], top_name(), load_board("ulx3s"), tmp_path / "ulx3s", target_mhz=50)
    assert r.bitstream.stat().st_size > 100_000 and r.fmax_mhz > 0
    assert r.utilization["TRELLIS_FF"][0] > 1000


UNIT_V = """module systolica_u(clk, rst, a, \\end , q);
  input clk;
  input rst;
  input [3:0] a;
  output \\end ;
  output [1:0] q;
endmodule
"""


def test_timing_wrapper_wraps_a_unit_with_escaped_port_names():
    """A unit of ``hw build --pnr --unit`` has Amaranth's ``clk`` and ``rst``, and keywords as escaped names."""
    ports = parse_ports(UNIT_V, "systolica_u")
    assert list(ports) == ["clk", "rst", "a", "\\end", "q"]
    w = timing_wrapper(ports, "systolica_u")
    assert ".clk(clk)" in w and ".rst(sr_in[0:0])" in w and ".a(sr_in[4:1])" in w
    assert ".\\end (\\end )" in w and "wire [0:0] \\end ;" in w and "{q, \\end }" in w
    assert list(parse_ports(w, "systolica_ecp5_top")) == ["clk", "sin", "cap", "sout"]


def test_pnr_of_one_unit(tmp_path, capsys):
    """``systolica hw build --board ulx3s --pnr --unit store``: the unit alone placed and routed, its Fmax and
    slowest path printed and written to pnr.json (about a minute)."""
    missing = tools_available()
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (pip install -e .[ecp5])")
    import json

    from systolica.cli import main

    rc = main(["hw", "build", "--board", "ulx3s", "--pnr", "--unit", "store", "--period", "10", "-o", str(tmp_path)])
    doc = json.loads((tmp_path / "ecp5-store" / "pnr.json").read_text())
    assert doc["unit"] == "store" and doc["target_mhz"] == 100.0 and doc["fmax_mhz"] > 20
    assert rc == (0 if doc["fmax_mhz"] >= 100 else 3)
    assert doc["utilization"]["TRELLIS_FF"][0] > 100 and "->" in doc["critical_path"]
    assert "ECP5 Fmax of store" in capsys.readouterr().out


def test_pnr_unit_needs_an_ecp5_board():
    from systolica.cli import main

    assert main(["hw", "build", "--board", "pynq-z2", "--pnr", "--unit", "store"]) == 2


def test_a_netlist_with_more_multipliers_than_the_board_stops_before_placement(tmp_path):
    """synth_ecp5's cell counts against the board's MULT18X18D and DP16KD sites: over them the flow says which and
    places nothing (the static placer hung on such a netlist instead of failing)."""
    import json

    from systolica.boards.ecp5 import Ecp5Error, check_hard_blocks

    board = load_board("ulx3s")
    stat = tmp_path / "stat.json"
    stat.write_text(json.dumps({"design": {"num_cells_by_type": {"MULT18X18D": 229, "DP16KD": 43, "LUT4": 9}}}))
    with pytest.raises(Ecp5Error, match=r"does not fit ulx3s: MULT18X18D 229 of 156"):
        check_hard_blocks(stat, board)
    stat.write_text(json.dumps({"design": {"num_cells_by_type": {"MULT18X18D": 156, "DP16KD": 208}}}))
    check_hard_blocks(stat, board)  # exactly full fits
