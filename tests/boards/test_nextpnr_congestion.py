"""router2's per-net congestion heatmap summed by unit, and a stopped route that names where it was stuck."""

from __future__ import annotations

import pytest

from systolica.boards import ecp5
from systolica.boards.board import load_board
from systolica.boards.nextpnr_congestion import congestion_by_unit, latest_heatmap, main

ROWS = ["$PACKER_GND_NET,374", "dut.compute.aseq.unit.kp_TRELLIS_FF_Q_1_DI,60", "dut.compute.aseq.q.r_data[3],40",
        "dut.compute.is_attn,30", "dut.load.lines.storage.0.1_DO_3_LUT4_A_1_Z[2],20", "dut.core_rst_LUT4_D_1_Z[0],10",
        "sr_in[7],5", "malformed line without a count", "dut.store.x,notanumber"]


def _write(d, n, rows=ROWS):
    (d / f"route_congestion_by_net_{n}.csv").write_text("\n".join(rows) + "\n")


def test_units_and_nets_by_overused_wires(tmp_path):
    _write(tmp_path, 1)
    units, nets = congestion_by_unit(tmp_path / "route_congestion_by_net_1.csv")
    assert units == [("dut.compute.aseq", 100), ("dut.compute.is_attn", 30), ("dut.load", 20),
                     ("dut.core_rst", 10), ("sr_in", 5)]
    assert nets[0] == ("dut.compute.aseq.unit.kp_TRELLIS_FF_Q_1_DI", 60) and all(not n.startswith("$") for n, _ in nets)
    assert congestion_by_unit(tmp_path / "route_congestion_by_net_1.csv", depth=4)[0][0] == ("dut.compute.aseq.unit", 60)


def test_the_latest_complete_iteration_is_read(tmp_path):
    assert latest_heatmap(tmp_path / "route") is None
    _write(tmp_path, 1)
    assert latest_heatmap(tmp_path / "route").name == "route_congestion_by_net_1.csv"
    for n in (2, 10, 9):
        _write(tmp_path, n)
    assert latest_heatmap(tmp_path / "route").name == "route_congestion_by_net_9.csv"  # 10 may be half written


def test_the_command_line(tmp_path, capsys):
    _write(tmp_path, 3)
    assert main([str(tmp_path / "route"), "--nets", "2"]) == 0
    out = capsys.readouterr().out
    assert "route_congestion_by_net_3.csv: 165 overused wires" in out and "60.6%  dut.compute.aseq" in out
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nothing")])


def test_a_stopped_route_names_the_congested_units(tmp_path, monkeypatch):
    (tmp_path / "heat").mkdir()
    _write(tmp_path / "heat", 4)

    def stuck(cmd, cwd, timeout, what, progress=None, **kw):
        assert "--router2-heatmap" in cmd and cmd[cmd.index("--router2-heatmap") + 1] == "heat/route"
        raise ecp5.Ecp5Error("nextpnr did not finish in 5 s: nextpnr: routing")

    monkeypatch.setattr(ecp5, "_run", stuck)
    with pytest.raises(ecp5.Ecp5Error) as e:
        ecp5._nextpnr(load_board("ulx3s"), tmp_path, 50.0, 1, 5, None,
                      ["--router", "router2", "--router2-heatmap", "heat/route"])
    assert str(e.value) == ("nextpnr did not finish in 5 s: nextpnr: routing; congested (router2, "
                            "route_congestion_by_net_4.csv): dut.compute.aseq 61%, dut.compute.is_attn 18%, "
                            "dut.load 12%, dut.core_rst 6%")


# ---- where on the die (router2's congestion_by_coordinate map, boards/congestion_map.py)

def _write_map(d, n, grid):
    """nextpnr's layout: one line per tile column x, one value per row y, each followed by a comma."""
    (d / f"route_congestion_by_coordinate_{n}.csv").write_text("".join(",".join(map(str, col)) + ",\n" for col in grid))


def test_the_map_is_read_by_x_then_y_and_the_hot_region_holds_the_share(tmp_path):
    from systolica.boards.congestion_map import congestion_grid, hot_region, latest_coordinate_heatmap

    grid = [[0] * 6 for _ in range(8)]  # 8 columns (x) of 6 rows (y)
    grid[5][1] = 40  # x = 5, y = 1: the hot spot
    grid[4][1] = 30
    grid[0][5] = 20
    grid[7][0] = 10
    _write_map(tmp_path, 2, grid)
    _write_map(tmp_path, 3, grid)
    path = latest_coordinate_heatmap(tmp_path / "route")
    assert path.name == "route_congestion_by_coordinate_2.csv"  # 3 may be half written
    g = congestion_grid(path)
    assert g.shape == (8, 6) and g[5, 1] == 40 and g[0, 5] == 20 and g.sum() == 100
    # the fewest tiles with half the overuse: (5, 1) and (4, 1); the cells placed there by unit
    cells = {"dut.compute.vseq.a_TRELLIS_FF_Q": (5, 1), "dut.compute.vseq.b": (0, 0), "dut.load.lines.x": (4, 1),
             "dut.load.y": (4, 1), "dut.store.z": (7, 0)}
    r = hot_region(g, 0.5, cells)
    assert r.tiles == 2 and r.die_tiles == 48
    assert r.units == [("dut.load", 2, 1.0), ("dut.compute.vseq", 1, 0.5)]
    assert r.x == (0, 5) and r.y == (0, 5)  # 10th..90th percentile of the overuse along each axis (10% at y = 0)
    assert "in 2 of 48 tiles" in r.describe() and "dut.load 67% (100% of its cells)" in r.describe()
    kinds = {"dut.compute.vseq.a_TRELLIS_FF_Q": "FF", "dut.compute.vseq.b": "FF", "dut.load.lines.x": "LUT-RAM",
             "dut.load.y": "block RAM", "dut.store.z": "block RAM"}
    r = hot_region(g, 0.5, cells, kinds)  # of each kind, the share in the region: 1 of 2 FFs, 1 of 2 block RAMs
    assert sorted(r.kinds) == [("FF", 1, 0.5), ("LUT-RAM", 1, 1.0), ("block RAM", 1, 0.5)]
    assert "share of each kind of cell there: LUT-RAM 100%" in r.describe()
    assert hot_region(g * 0).tiles == 0
    with pytest.raises(ValueError, match="share"):
        hot_region(g, 0)


def test_a_malformed_map_is_refused_by_name(tmp_path):
    from systolica.boards.congestion_map import congestion_grid

    bad = tmp_path / "route_congestion_by_coordinate_1.csv"
    bad.write_text("1,2,x,\n")
    with pytest.raises(ValueError, match="not a router2 congestion_by_coordinate file"):
        congestion_grid(bad)
    bad.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        congestion_grid(bad)


def test_the_command_line_draws_the_map_and_names_who_is_placed_there(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import json

    _write(tmp_path, 4)
    grid = [[0] * 5 for _ in range(5)]
    grid[2][3] = 9
    _write_map(tmp_path, 4, grid)
    placed = {"modules": {"top": {"cells": {"dut.compute.aseq.unit.k": {"attributes": {"NEXTPNR_BEL": "X2/Y3/SLICEA"}},
                                            "dut.load.q": {"attributes": {"NEXTPNR_BEL": "X0/Y0/SLICEB"}}}}}}
    (tmp_path / "placed.json").write_text(json.dumps(placed))
    png = tmp_path / "map.png"
    assert main([str(tmp_path / "route"), "--plot", str(png), "--placed", str(tmp_path / "placed.json")]) == 0
    out = capsys.readouterr().out
    assert "50% of the overuse in 1 of 25 tiles" in out and "placed there: dut.compute.aseq 100%" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
    (tmp_path / "route_congestion_by_coordinate_4.csv").unlink()
    with pytest.raises(SystemExit):
        main([str(tmp_path / "route"), "--plot", str(png)])


def test_a_stopped_route_also_says_where_and_draws_the_map(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    (tmp_path / "heat").mkdir()
    _write(tmp_path / "heat", 4)
    grid = [[0] * 4 for _ in range(4)]
    grid[1][2] = 7
    _write_map(tmp_path / "heat", 4, grid)

    def stuck(cmd, cwd, timeout, what, progress=None, **kw):
        raise ecp5.Ecp5Error("nextpnr's router stopped")

    monkeypatch.setattr(ecp5, "_run", stuck)
    with pytest.raises(ecp5.Ecp5Error) as e:
        ecp5._nextpnr(load_board("ulx3s"), tmp_path, 50.0, 1, 5, None, ["--router2-heatmap", "heat/route"])
    msg = str(e.value)
    assert "dut.compute.aseq 61%" in msg and "50% of the overuse in 1 of 16 tiles" in msg
    assert msg.endswith(f"map {tmp_path / 'congestion.png'}") and (tmp_path / "congestion.png").stat().st_size > 2000


def test_the_top_level_routes_with_router1_a_unit_with_router2_and_each_says_so(tmp_path, monkeypatch):
    """The whole top level is routed by router1 (the only router that has routed the ulx3s top level) without
    router2's heatmaps; a unit alone by router2 with its heatmaps; router2's alternate weights pass through; the
    placed netlist's own router setting (which wins over ``--router``) is rewritten; the result names what ran."""
    import json

    cmds = []

    def fake_run(cmd, cwd, timeout, what, progress=None, **kw):
        cmds.append((cmd, kw))
        if "--write" in cmd:  # the placement: nextpnr keeps its own settings in the netlist it writes
            (cwd / "placed.json").write_text(json.dumps({"modules": {"top": {"settings": {"router": "router2"}}}}))
        if what == "nextpnr":
            (cwd / "report.json").write_text(json.dumps({"fmax": {"clk": {"achieved": 42.0, "constraint": 50.0}}}))
        else:
            (cwd / "ulx3s.bit").write_bytes(b"bit")

    def router_of(cmd):
        return cmd[cmd.index("--router") + 1]

    def placed_router():
        return json.loads((tmp_path / "placed.json").read_text())["modules"]["top"]["settings"]["router"]

    monkeypatch.setattr(ecp5, "_synthesize", lambda *a: (tmp_path, 50.0, "abc9", 0.0))
    monkeypatch.setattr(ecp5, "_run", fake_run)
    r = ecp5.ecp5_build("top.v", "top", load_board("ulx3s"), tmp_path)
    (place, pkw), (route, rkw) = cmds[0], cmds[1]
    # placed and written out first (no route, no patience), then routed from that placement into the same log
    assert "--no-route" in place and "--router" not in place and pkw["patience"] is None
    assert route[route.index("--json") + 1] == "placed.json" and "--no-place" in route and rkw["append"]
    assert router_of(route) == "router1" and placed_router() == "router1"
    assert not any(a.startswith("--router2") for a in route) and r.router == "router1" and r.fmax_mhz == 42.0
    cmds.clear()
    r = ecp5.ecp5_build("top.v", "top", load_board("ulx3s"), tmp_path, placer="heap", router=ecp5.ROUTER_UNIT)
    route = cmds[1][0]
    assert router_of(route) == "router2" and placed_router() == "router2" and "--router2-alt-weights" not in route
    assert route[route.index("--router2-heatmap") + 1] == "heat/route" and (tmp_path / "heat").is_dir()
    assert r.router == "router2" and r.placer == "heap" and cmds[1][1]["patience"] == ecp5.ROUTER_PATIENCE
    assert cmds[0][0][cmds[0][0].index("--placer") + 1] == "heap"
    cmds.clear()
    r = ecp5.ecp5_build("top.v", "top", load_board("ulx3s"), tmp_path, router=ecp5.ROUTER2_ALT)
    assert "--router2-alt-weights" in cmds[1][0] and r.router == "router2 --router2-alt-weights"
    with pytest.raises(ecp5.Ecp5Error, match="no router 'router3'"):
        ecp5.ecp5_build("top.v", "top", load_board("ulx3s"), tmp_path, router=("router3",))


def test_a_static_placement_that_hangs_is_placed_again_by_heap(tmp_path, monkeypatch):
    """The static placer hung on a 4x4 top level (strict legalisation, no output for 20 minutes): the flow stops it
    (PLACE_STALL) and places with HeAP into the same log; the result says so.  Any other failure is not retried."""
    import json

    cmds = []

    def fake_run(cmd, cwd, timeout, what, progress=None, **kw):
        cmds.append((cmd, kw))
        (cwd / f"{what}.log").touch()
        if "--no-route" in cmd and cmd[cmd.index("--placer") + 1] == "static":
            assert kw["stall"] == ecp5.PLACE_STALL
            raise ecp5.Ecp5Stalled("nextpnr printed nothing for 300 s (nextpnr: placing (static)): stopped as hung")
        if "--write" in cmd:
            (cwd / "placed.json").write_text(json.dumps({"modules": {"top": {"settings": {"router": "router1"}}}}))
        if what == "nextpnr":
            (cwd / "report.json").write_text(json.dumps({"fmax": {"clk": {"achieved": 42.0, "constraint": 50.0}}}))
        else:
            (cwd / "ulx3s.bit").write_bytes(b"bit")

    monkeypatch.setattr(ecp5, "_synthesize", lambda *a: (tmp_path, 50.0, "abc9", 0.0))
    monkeypatch.setattr(ecp5, "_run", fake_run)
    said = []
    r = ecp5.ecp5_build("top.v", "top", load_board("ulx3s"), tmp_path, progress=said.append)
    placers = [c[c.index("--placer") + 1] for c, _ in cmds if "--placer" in c]
    assert placers == ["static", "heap"] and cmds[1][1]["append"] and cmds[2][1]["stall"] is None  # the route
    assert r.placer == "heap (the static placer hung)" and r.fmax_mhz == 42.0
    assert any("static placer hung" in s and "placing with heap" in s for s in said)
    p = ecp5.ecp5_place("top.v", "top", load_board("ulx3s"), tmp_path)
    assert p.placer == "heap (the static placer hung)"

    def failing(cmd, cwd, timeout, what, progress=None, **kw):
        raise ecp5.Ecp5Error("nextpnr failed (exit 1)")

    monkeypatch.setattr(ecp5, "_run", failing)
    with pytest.raises(ecp5.Ecp5Error, match="exit 1"):
        ecp5.ecp5_build("top.v", "top", load_board("ulx3s"), tmp_path)
