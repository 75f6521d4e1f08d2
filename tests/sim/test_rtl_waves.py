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


PROG = """
LOAD buf=VBUF sram=0 dram=0 rows=2 lines=1 stride=16 @push_next
ADD dst=4 a=0 b=1 rows=1 lines=1 @pop_prev @push_next
STORE buf=VBUF sram=4 dram=0x40 rows=1 lines=1 @pop_prev
FINISH
"""


def test_sim_rtl_compares_with_golden_and_writes_waves(build_dir, tmp_path, monkeypatch, capsys):
    # `systolica sim --rtl --waves`: the program on the tiny top level's Verilog, fault / pc / DRAM compared with
    # the golden simulator, the run's waveform written where asked (ap_clk toggling in it)
    import json

    import numpy as np

    from systolica import cli
    from systolica.asm import assemble
    from systolica.config import preset

    pywellen = pytest.importorskip("pywellen", reason="pip install pywellen (the test extra) to read FST files")
    monkeypatch.setenv("SYSTOLICA_BUILD_DIR", str(build_dir))
    cfg = preset("tiny")
    prog = tmp_path / "p.bin"
    assemble(PROG, cfg).save(prog)
    data = np.arange(16, dtype=np.int32)
    (tmp_path / "d.bin").write_bytes(data.tobytes())
    waves = tmp_path / f"run.{waves_format()}"
    rc = cli.main(["sim", str(prog), "--config", "tiny", "--dram", str(tmp_path / "d.bin"), "--rtl",
                   "--waves", str(waves), "--window", str(1 << 16), "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["status"] == "NONE", res
    rtl = res["rtl"]
    assert rtl["agree"] and rtl["same_dram"] and rtl["fault"] == "NONE" and rtl["cycles"] > 0, rtl
    wave = pywellen.Waveform(str(waves))
    clk = [v for v in wave.all_vars() if v.name == "ap_clk"]
    assert clk, [v.full_name for v in wave.all_vars()][:20]
    edges = []
    wave.stream_changes(lambda t, sig, value: edges.append(value), clk)
    assert len(edges) >= 2 * rtl["cycles"]
    # a DMA outside the window: both stop with DMA_WINDOW at pc 1, exit 1, and they agree
    assemble("NOP engine=LOAD\nLOAD buf=ACC sram=0 dram=0x100000 rows=1 lines=1\nFINISH", cfg).save(prog)
    rc = cli.main(["sim", str(prog), "--config", "tiny", "--rtl", "--window", str(1 << 16), "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 1 and res["status"] == "DMA_WINDOW" and res["pc"] == 1
    assert res["rtl"]["agree"] and (res["rtl"]["fault"], res["rtl"]["pc"]) == ("DMA_WINDOW", 1), res["rtl"]
    # --waves without --rtl is bad input
    assert cli.main(["sim", str(prog), "--config", "tiny", "--waves", str(waves)]) == cli.EXIT_ERROR
