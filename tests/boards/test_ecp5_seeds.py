"""Several placements at once, the one nextpnr estimates fastest routed (boards/ecp5_seeds.py), with nextpnr faked."""

from __future__ import annotations

import json
import threading

import pytest

from systolica.boards import ecp5
from systolica.boards.board import load_board
from systolica.boards.ecp5_seeds import place_best

#: the post-placement estimate each seed's fake placement prints
ESTIMATES = {1: 51.11, 2: 60.34, 3: 58.0}


def _fake_nextpnr(calls, lock):
    def fake_run(cmd, cwd, timeout, what, progress=None, **kw):
        if what != "nextpnr":  # ecppack
            (cwd / "ulx3s.bit").write_bytes(b"bit")
            return
        seed = int(cmd[cmd.index("--seed") + 1])
        with lock:
            calls.append((cmd, cwd, seed))
        assert (cwd / "top.lpf").exists()
        if "--write" in cmd:  # a placement: its own folder, the netlist beside it
            assert (cwd / "top.json").read_text() == "netlist"
            (cwd / "placed.json").write_text(json.dumps({"seed": seed, "modules": {"top": {"settings": {}}}}))
            (cwd / "nextpnr.log").write_text(f"Info: Max frequency for clock 'clk': {ESTIMATES[seed]:.2f} MHz "
                                             "(FAIL at 100.00 MHz)\n")
        else:  # the route reads the placement in the work folder
            assert json.loads((cwd / "placed.json").read_text())["seed"] == seed
            (cwd / "report.json").write_text(json.dumps({"fmax": {"clk": {"achieved": 90.0 + seed,
                                                                          "constraint": 100.0}}}))
    return fake_run


@pytest.fixture
def nextpnr_calls(tmp_path, monkeypatch):
    """A work folder with a netlist and constraints, synthesis skipped, nextpnr faked: the calls it got."""
    calls, lock = [], threading.Lock()
    (tmp_path / "top.json").write_text("netlist")
    (tmp_path / "top.lpf").write_text("LOCATE")
    monkeypatch.setattr(ecp5, "_synthesize", lambda *a: (tmp_path, 100.0, "abc9", 0.0))
    monkeypatch.setattr(ecp5, "_run", _fake_nextpnr(calls, lock))
    return calls


def test_the_route_takes_the_placement_estimated_fastest(tmp_path, nextpnr_calls):
    calls = nextpnr_calls
    r = ecp5.ecp5_build("top.v", "top", load_board("ulx3s"), tmp_path, seed=1, placements=3)
    places = [c for c in calls if "--write" in c[0]]
    assert sorted(s for _, _, s in places) == [1, 2, 3]
    assert {cwd.name for _, cwd, _ in places} == {"place_seed1", "place_seed2", "place_seed3"}
    route = [c for c in calls if "--no-place" in c[0]]
    assert len(route) == 1 and route[0][1] == tmp_path and route[0][2] == 2  # seed 2: 60.34 MHz, the highest
    assert r.seed == 2 and r.fmax_mhz == 92.0
    assert [(t.seed, t.estimate_mhz) for t in r.placements] == [(1, 51.11), (2, 60.34), (3, 58.0)]
    assert "60.34 MHz" in (tmp_path / "nextpnr.log").read_text()  # the chosen placement's log, the route's after it
    assert not (tmp_path / "place_seed1" / "top.json").exists()  # the netlist copies are gone, the placements kept
    assert (tmp_path / "place_seed1" / "placed.json").exists()


def test_one_placement_places_in_the_work_folder(tmp_path, nextpnr_calls):
    calls = nextpnr_calls
    r = ecp5.ecp5_build("top.v", "top", load_board("ulx3s"), tmp_path, seed=3)
    assert [cwd for cmd, cwd, _ in calls if "--write" in cmd] == [tmp_path] and r.seed == 3 and r.placements == ()
    assert not list(tmp_path.glob("place_seed*"))


def test_a_tie_or_a_missing_estimate_keeps_the_lower_seed(tmp_path):
    (tmp_path / "top.json").write_text("netlist")
    (tmp_path / "top.lpf").write_text("LOCATE")

    def place(sub, seed, said):
        (sub / "placed.json").write_text(str(seed))
        (sub / "nextpnr.log").write_text("" if seed == 6 else "Info: Max frequency for clock 'c': 40.00 MHz "
                                         "(FAIL at 50.00 MHz)\n")
        return "static"

    best, tries = place_best(tmp_path, 4, 3, place)
    assert best.seed == 4 and [t.estimate_mhz for t in tries] == [40.0, 40.0, None]
    assert (tmp_path / "placed.json").read_text() == "4" and "seed 6 no estimate" in tries[2].describe()
    with pytest.raises(ValueError, match="at least 1"):
        place_best(tmp_path, 1, 0, place)
