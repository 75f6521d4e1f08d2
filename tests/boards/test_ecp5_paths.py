"""The pre-place-and-route path estimate on hand-built synth_ecp5 netlists (no tools needed)."""

from __future__ import annotations

import json

import pytest

from systolica.boards.ecp5_paths import CARRY_NS, CELL_NS, START_NS, _wire_ns, longest_paths, main, unit_route


def _netlist(cells: dict, nets: dict) -> dict:
    return {"modules": {"top": {"attributes": {"top": 1}, "cells": cells,
                                "netnames": {n: {"bits": [b]} for n, b in nets.items()}}}}


def _ff(d: int, q: int) -> dict:
    return {"type": "TRELLIS_FF", "port_directions": {"CLK": "input", "DI": "input", "Q": "output"},
            "connections": {"CLK": [1], "DI": [d], "Q": [q]}}


def _lut(a: int, z: int, b: int | None = None) -> dict:
    return {"type": "LUT4", "port_directions": {"A": "input", "B": "input", "Z": "output"},
            "connections": {"A": [a], "B": [b if b is not None else "0"], "Z": [z]}}


def _design() -> dict:
    # dut.a.r (FF) -> three LUTs -> dut.b.r (FF); dut.c.r -> one LUT -> dut.d.r; a LUT feeding itself hangs off
    # the long path's first net and ends in a flip-flop of its own
    cells = {"ra": _ff(20, 10), "l1": _lut(10, 11), "l2": _lut(11, 12), "l3": _lut(12, 13), "rb": _ff(13, 20),
             "rc": _ff(21, 30), "l4": _lut(30, 31), "rd": _ff(31, 21),
             "loop": _lut(15, 15, 11), "rl": _ff(15, 22)}
    nets = {"dut.a.r": 10, "dut.a.x": 11, "dut.b.y": 12, "dut.b.z": 13, "dut.c.r": 30, "dut.d.w": 31,
            "dut.b.r": 20, "dut.d.r": 21, "dut.b.loop": 15, "dut.l.r": 22}
    return _netlist(cells, nets)


def test_the_deeper_path_comes_first_with_its_nets_and_units():
    ends, paths = longest_paths(_design())
    assert ends == 5  # DI of the five flip-flops
    first = paths[0]
    assert first.end == "rb.DI" and first.nets == ("dut.a.r", "dut.a.x", "dut.b.y", "dut.b.z")
    assert unit_route(first) == "dut.a.r > dut.a.x > dut.b.y > dut.b.z"
    assert unit_route(first, depth=2) == "dut.a > dut.b"
    w = _wire_ns(1)
    lut = CELL_NS["LUT4"]
    assert first.ns == pytest.approx(START_NS["TRELLIS_FF"] + 2 * (w + lut) + _wire_ns(2) + lut + w, abs=0.01)
    by_end = {p.end: p for p in paths}
    assert by_end["rd.DI"].ns < first.ns
    # the loop is walked once, not forever: its path ends where it closes
    assert by_end["rl.DI"].nets.count("dut.b.loop") == 1


def test_a_cut_net_starts_a_path_as_a_register_would():
    _, paths = longest_paths(_design(), cut=r"dut\.b\.y")
    by_end = {p.end: p for p in paths}
    assert by_end["rb.DI"].nets == ("dut.b.y", "dut.b.z")


def test_a_carry_chain_rides_its_dedicated_wire():
    cells = {"r0": _ff(9, 10), "r1": _ff(14, 9)}
    for i in range(4):  # four CCU2C in a chain: CIN from the previous COUT
        cells[f"c{i}"] = {"type": "CCU2C", "port_directions": {"A0": "input", "CIN": "input", "COUT": "output"},
                          "connections": {"A0": [10], "CIN": [10 + i] if i else ["0"], "COUT": [11 + i]}}
    ends, paths = longest_paths(_netlist(cells, {"dut.cnt": 10, "dut.co": 14}))
    fan_a = 4  # dut.cnt feeds the four A0 inputs
    assert paths[0].end == "r1.DI"
    expect = START_NS["TRELLIS_FF"] + _wire_ns(fan_a) + CELL_NS["CCU2C"] + 3 * CARRY_NS + _wire_ns(1)
    assert paths[0].ns == pytest.approx(expect, abs=0.02)


def test_a_netlist_without_one_top_is_refused():
    with pytest.raises(ValueError, match="one top module"):
        longest_paths({"modules": {"a": {"cells": {}, "netnames": {}}}})


def test_the_command_lists_the_paths(tmp_path, capsys):
    f = tmp_path / "top.json"
    f.write_text(json.dumps(_design()))
    assert main([str(f), "--paths", "1", "--nets"]) == 0
    out = capsys.readouterr().out
    assert "not a timing analysis" in out and "-> rb.DI" in out and "dut.b.z" in out and "rd.DI" not in out


def test_placed_distances_rank_a_long_wire_over_deeper_logic():
    from systolica.boards.ecp5_paths import bel_locations, placed_wire_ns

    assert placed_wire_ns((3, 4), (3, 4)) == pytest.approx(0.72)  # same tile: nextpnr's 6 units of 120 ps
    assert placed_wire_ns((0, 0), (5, 0)) == pytest.approx(0.12 * 16)
    assert placed_wire_ns((0, 0), (45, 0)) == pytest.approx(0.12 * (6 + 40 + 10))
    placed = {"modules": {"top": {"cells": {
        name: {"attributes": {"NEXTPNR_BEL": f"X{x}/Y{y}/SLICEA"}} for name, (x, y) in {
            "ra": (10, 10), "l1": (10, 10), "l2": (10, 10), "l3": (10, 10), "rb": (10, 10),
            "rc": (10, 10), "l4": (70, 60), "rd": (70, 60)}.items()} | {"io": {"attributes": {}}}}}}
    locs = bel_locations(placed)
    assert locs["l4"] == (70, 60) and "io" not in locs and "loop" not in locs
    _, before = longest_paths(_design())
    assert before[0].end == "rb.DI"  # unplaced: the deeper path is the slowest
    _, after = longest_paths(_design(), locations=locs)
    assert after[0].end == "rd.DI"  # placed: rc's one LUT is far away, its wire costs more than two LUTs
    by_end = {p.end: p for p in after}
    far = placed_wire_ns((10, 10), (70, 60))
    assert by_end["rd.DI"].ns == pytest.approx(START_NS["TRELLIS_FF"] + far + CELL_NS["LUT4"] + 0.72, abs=0.01)


def test_cell_kinds_name_what_each_placed_cell_is():
    from systolica.boards.ecp5_paths import cell_kinds

    cells = {"a": {"type": "TRELLIS_COMB", "parameters": {}}, "b": {"type": "TRELLIS_COMB", "parameters": {"MODE": "CCU2"}},
             "c": {"type": "TRELLIS_COMB", "parameters": {"MODE": "DPRAM"}}, "d": {"type": "TRELLIS_FF"},
             "e": {"type": "DP16KD"}, "f": {"type": "TRELLIS_IO"}}
    kinds = cell_kinds({"modules": {"top": {"cells": cells}}})
    assert kinds == {"a": "LUT", "b": "carry", "c": "LUT-RAM", "d": "FF", "e": "block RAM", "f": "TRELLIS_IO"}
