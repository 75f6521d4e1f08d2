"""The RTL harness leaves a waveform when a cocotb test fails: a deliberately failing test on a small
counter, its FST (VCD where Verilator cannot build its FST writer) opened with a waveform reader from PyPI,
the top-level clock found toggling in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from systolica.sim.rtl_build import FAST_BUILD, WAVES_FILE, build, waves_format

pytestmark = pytest.mark.rtl
HERE = Path(__file__).parent


class Counter(wiring.Component):
    def __init__(self):
        super().__init__({"count": Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.count.eq(self.count + 1)
        return m


def test_a_failing_rtl_test_names_its_waveform(build_dir, monkeypatch):
    pywellen = pytest.importorskip("pywellen", reason="pip install pywellen (the test extra) to read FST files")
    monkeypatch.delenv("SYSTOLICA_WAVES", raising=False)
    b = build("waves_counter", Counter, {"width": 8}, build_dir, deps=(), make_flags=FAST_BUILD)
    res = b.run("cocotb_broken", HERE, testcase="deliberately_wrong")
    assert (res.tests, res.failed, res.waves) == (1, 1, None)  # the plain build does not trace
    with pytest.raises(AssertionError, match=r"1 of 1 cocotb test\(s\) failed") as err:
        res.check()
    found = re.search(r"waveform.*: (\S+)$", str(err.value))
    assert found, str(err.value)
    path = Path(found.group(1))
    # FST where Verilator's FST writer builds (liblz4 headers), VCD elsewhere; from the tracing build
    assert path.name == WAVES_FILE[waves_format()] and path.is_file() and path.parent.parent != b.build_dir
    wave = pywellen.Waveform(str(path))
    clocks = [v for v in wave.all_vars() if v.name == "clk"]
    assert clocks, [v.full_name for v in wave.all_vars()]
    edges = []
    wave.stream_changes(lambda t, sig, value: edges.append((t, value)), clocks)
    assert len(edges) >= 2 * 20, edges  # the test ran 22 cycles: the clock toggles in the file
    assert {v for _, v in edges} == {0, 1}


def test_waves_can_be_turned_off(build_dir, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_WAVES", "0")
    b = build("waves_counter", Counter, {"width": 8}, build_dir, deps=(), make_flags=FAST_BUILD)
    res = b.run("cocotb_broken", HERE, testcase="deliberately_wrong")
    with pytest.raises(AssertionError) as err:
        res.check()
    assert "waveform" not in str(err.value)
