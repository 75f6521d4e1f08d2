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
