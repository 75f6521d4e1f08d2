"""nextpnr's progress read from its log, and a place and route stopped at its limit that says where it was."""

from __future__ import annotations

import sys
import time

import pytest

from systolica.boards.ecp5 import Ecp5Error, _run
from systolica.boards.nextpnr_log import pnr_status

PLACED = """Info: Packing IOs..
Info: Packing LUTs...
Info: Creating initial analytic placement for 53234 cells, random placement wirelen = 6477622.
Info: Running simulated annealing placer for refinement.
Info: SA placement time 469.70s

Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 40.76 MHz (FAIL at 50.00 MHz)

Info: Routing globals...
Info: Running router2...
Info: Running main router loop...
"""
STUCK = [88692, 60844, 44433, 35560, 31435, 29557, 28794, 28648, 29603, 30353, 31657]
FALLING = [299, 51, 11, 1, 1, 0]
ROUTED = """Info: Router2 time 6.63s
Info: Running router1 to check that route is legal...
Info: Critical path report for clock '$glbnet$clk$TRELLIS_IO_IN' (posedge -> posedge):

Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 48.25 MHz (FAIL at 50.00 MHz)
Info: Program finished normally.
"""


def _iters(counts):
    return "".join(f"Info:     iter={i} wires={1000 + i} overused={c} overuse={c + 3} archfail=NA\n"
                   for i, c in enumerate(counts, 1))


def test_phases_in_order():
    assert pnr_status("").phase == "starting"
    assert pnr_status("Info: Packing IOs..\n").phase == "packing"
    assert pnr_status("Info: Packing IOs..\nInfo: Running Static placer...\n").phase == "placing (static)"
    s = pnr_status(PLACED.split("Info: Routing globals")[0])
    assert s.phase == "placing (annealing)" and s.placed_fmax_mhz == 40.76 and s.target_mhz == 50.0
    assert s.routed_fmax_mhz is None and s.iterations == ()
    assert pnr_status(PLACED + _iters(FALLING) + ROUTED).phase == "done"


def test_the_post_placement_estimate_is_not_the_routed_fmax():
    s = pnr_status(PLACED + _iters(FALLING) + ROUTED)
    assert (s.placed_fmax_mhz, s.routed_fmax_mhz) == (40.76, 48.25)
    assert s.iterations[-1] == (6, 0) and s.converging is True
    assert "routed Fmax 48.25 MHz" in s.describe() and "not converging" not in s.describe()


ROUTER1 = """Info: Routing globals...
Info: Setting up routing queue.
Info: Routing 245521 arcs.
Info:            |   (re-)routed arcs  |   delta    | remaining|       time spent     |
Info:    IterCnt |  w/ripup   wo/ripup |  w/r  wo/r |      arcs| batch(sec) total(sec)|
Info:       1000 |      299        700 |  299   700 |    245122|       3.68       3.68|
Info:     351000 |    56670     281215 |  418   582 |     27496|       5.45     566.31|
"""
ROUTER1_DONE = """Info:     436930 |    85538     336101 |  286   603 |         0|       3.51     894.59|
Info: Routing complete.
Info: Router1 time 894.59s
Info: Critical path report for clock '$glbnet$clk$TRELLIS_IO_IN' (posedge -> posedge):
Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 61.13 MHz (PASS at 50.00 MHz)
Info: Program finished normally.
"""


def test_router1s_progress_is_the_arcs_it_has_left():
    s = pnr_status(PLACED.split("Info: Routing globals")[0] + ROUTER1)
    assert s.phase == "routing" and (s.arcs, s.arcs_left, s.arcs_routed) == (245521, 27496, 351000)
    assert "router1: 27,496 of 245,521 arcs left (351,000 routed so far)" in s.describe()
    assert s.iterations == () and not s.diverged(1)  # router1 has no router2 iterations: never stopped as diverged
    done = pnr_status(PLACED.split("Info: Routing globals")[0] + ROUTER1 + ROUTER1_DONE)
    assert done.phase == "done" and done.arcs_left == 0 and done.routed_fmax_mhz == 61.13
    # router2's legality check runs router1 on no arcs: no router1 progress in a router2 log
    r2 = pnr_status(PLACED + _iters(FALLING) + ROUTED.replace("legal...\n", "legal...\nInfo: Routing 0 arcs.\n"))
    assert r2.arcs_left is None and "router1" not in r2.describe()


def _stuck_nextpnr(tmp_path):
    """A stand-in nextpnr: it places, routes 11 iterations without converging (STUCK), then hangs."""
    script = tmp_path / "fake_nextpnr.py"
    script.write_text(
        "import sys, time\n"
        f"sys.stdout.write({PLACED!r}); sys.stdout.flush()\n"
        f"for line in {_iters(STUCK).splitlines()!r}:\n"
        "    print(line, flush=True); time.sleep(0.02)\n"
        "time.sleep(600)\n")
    return script


def test_a_router_that_stopped_converging_says_so():
    s = pnr_status(PLACED + _iters(STUCK))
    assert s.phase == "routing" and s.converging is False
    line = s.describe()
    assert "router iteration 11: 31,657 wires overused" in line
    assert "not converging: 28,794 four iterations ago, 28,648 at best" in line
    assert "post-placement estimate 40.76 MHz (target 50)" in line
    assert pnr_status(PLACED + _iters(STUCK[:4])).converging is None  # too few iterations to tell


def test_a_stopped_run_reports_where_it_was(tmp_path):
    """A stand-in nextpnr that places, then routes without converging, stopped at its time limit."""
    script = _stuck_nextpnr(tmp_path)
    seen = []
    t0 = time.monotonic()
    with pytest.raises(Ecp5Error) as e:
        _run([sys.executable, str(script)], tmp_path, timeout=3, what="nextpnr", progress=seen.append, poll=0.2)
    assert time.monotonic() - t0 < 30  # killed at its limit, not left running
    msg = str(e.value)
    assert "nextpnr did not finish in 3 s" in msg and "router iteration 11" in msg and "not converging" in msg
    assert "post-placement estimate 40.76 MHz" in msg and str(tmp_path / "nextpnr.log") in msg
    assert seen and seen[-1] in msg and len(set(seen)) == len(seen)  # each status once, as it changed


def test_a_router_past_its_fewest_overused_wires_has_diverged():
    stuck = pnr_status(PLACED + _iters(STUCK))  # fewest (28,648) at iteration 8 of 11
    assert stuck.diverged(3) and not stuck.diverged(4)
    assert not pnr_status(PLACED + _iters(FALLING)).diverged(1)  # still falling: the last is the fewest
    assert not pnr_status(PLACED + _iters(STUCK) + ROUTED).diverged(1)  # finished: nothing to stop
    assert not pnr_status(PLACED).diverged(1)  # no router iteration yet
    # the last few wires: a route sitting at one overused wire is let run (the STORE engine alone did, then routed)
    last_wire = pnr_status(PLACED + _iters([299, 51, 11] + [1] * 10))
    assert not last_wire.diverged(8) and last_wire.diverged(8, floor=1)
    assert pnr_status(PLACED + _iters([5000, 300] + [400] * 9)).diverged(8)  # stuck above the floor: stopped


def test_a_diverging_route_is_stopped_before_its_time_limit(tmp_path):
    """The same stand-in nextpnr, with patience: stopped once 3 iterations passed without a new fewest."""
    script = _stuck_nextpnr(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(Ecp5Error) as e:
        _run([sys.executable, str(script)], tmp_path, timeout=120, what="nextpnr", poll=0.2, patience=3)
    assert time.monotonic() - t0 < 60  # not left to its 120 s limit
    msg = str(e.value)
    assert "router stopped: 3 iterations without fewer overused wires" in msg and "28,648 at best" in msg
    assert str(tmp_path / "nextpnr.log") in msg


def test_a_failing_tool_gives_its_log_tail(tmp_path):
    with pytest.raises(Ecp5Error, match=r"ecppack failed \(exit 3\).*\n.*bad bitstream"):
        _run([sys.executable, "-c", "print('bad bitstream'); raise SystemExit(3)"], tmp_path, timeout=30,
             what="ecppack")


def test_a_silent_tool_is_stopped_as_hung(tmp_path):
    """A tool that prints, then nothing (the static placer's strict legaliser on a 4x4 top level: 20 minutes
    silent), is stopped once its log has not grown for ``stall`` seconds, long before its time limit."""
    from systolica.boards.ecp5 import Ecp5Stalled

    script = tmp_path / "silent.py"
    script.write_text("import sys, time\n"
                      "sys.stdout.write('Info: Running Static placer...\\nInfo: Strict legalising 277 cells...\\n')\n"
                      "sys.stdout.flush()\ntime.sleep(600)\n")
    t0 = time.monotonic()
    with pytest.raises(Ecp5Stalled) as e:
        _run([sys.executable, str(script)], tmp_path, timeout=120, what="nextpnr", poll=0.2, stall=1.5)
    assert time.monotonic() - t0 < 30
    assert "nextpnr printed nothing for" in str(e.value) and "stopped as hung" in str(e.value)
    assert "placing (static)" in str(e.value) and str(tmp_path / "nextpnr.log") in str(e.value)
    # a tool that keeps printing is not stalled, however long it runs
    busy = tmp_path / "busy.py"
    busy.write_text("import time\nfor i in range(12):\n    print('Info: iter', i, flush=True); time.sleep(0.25)\n")
    _run([sys.executable, str(busy)], tmp_path, timeout=60, what="nextpnr", poll=0.2, stall=1.5)
