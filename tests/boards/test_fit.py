"""Fit check, resource model and the largest-array sweep (on monkeypatched resource models)."""

from __future__ import annotations

import json
import math

import pytest

from systolica.boards.board import Resources, load_board
from systolica.boards.fit import FitError, ResourceModel, bram_tiles, candidate_shapes, fit_check, largest_fit
from systolica.boards.yosys import YosysError, resources_from_cells, synth_script


def test_fit_check_margin_and_verdict():
    b = load_board("pynq-z2")  # 53200 LUT, 106400 FF, 220 DSP, 140 BRAM, no URAM
    ok = fit_check(b, Resources(lut=42560, ff=1000, dsp=176, bram=112), config="c")
    assert ok.fits and [r.kind for r in ok.rows] == ["lut", "ff", "dsp", "bram"]  # no URAM row on a 7-series
    over = fit_check(b, Resources(lut=42561, ff=1000, dsp=10, bram=1), config="c")
    assert not over.fits and over.worst.kind == "lut" and "does NOT fit" in over.summary()
    assert fit_check(b, Resources(dsp=200), margin=1.0).fits and not fit_check(b, Resources(dsp=200)).fits
    uram = fit_check(b, Resources(uram=1))
    assert not uram.fits and uram.worst.kind == "uram"  # any URAM on a part without it cannot fit
    with pytest.raises(FitError, match="margin=0"):
        fit_check(b, Resources(), margin=0)


def test_candidate_shapes_order():
    s = candidate_shapes((4, 8, 16), max_aspect=2)
    assert s[0] == (16, 16) and (4, 16) not in s
    sizes = [r * c for r, c in s]
    assert sizes == sorted(sizes, reverse=True)
    assert s.index((8, 16)) < s.index((16, 8))  # equal size: more columns first


def test_largest_fit_follows_the_resource_model():
    b = load_board("kv260")  # 1248 DSP: limit 998 at 80%
    base = b.config

    def dsp_only(cfg):  # one DSP per PE, nothing else
        return Resources(dsp=cfg.rows * cfg.cols)

    cfg, rep = largest_fit(b, base, dsp_only)
    assert (cfg.rows, cfg.cols) == (16, 16) and rep.fits  # 32x32 = 1024 > 998; the top level needs square
    cfg, _ = largest_fit(b, base, dsp_only, margin=0.9)  # limit 1123: 32x32 fits
    assert (cfg.rows, cfg.cols) == (32, 32)

    def lut_heavy(cfg):  # LUT-limited instead: 300 LUT per PE
        return Resources(lut=300 * cfg.rows * cfg.cols, dsp=cfg.rows * cfg.cols)

    cfg, rep = largest_fit(b, base, lut_heavy)
    assert cfg.rows * cfg.cols * 300 <= 0.8 * b.resources.lut and rep.worst.kind == "lut"
    assert largest_fit(b, base, lambda c: Resources(lut=10**9)) is None


def test_largest_fit_skips_shapes_the_buffers_cannot_hold():
    b = load_board("kv260")
    base = b.config.reshaped(8, 32, acc_kib=4)  # 4 KiB of accumulator lines
    cfg, _ = largest_fit(b, base, lambda c: Resources(dsp=c.rows * c.cols))
    # 64x64 .. 16x32 leave fewer than 4 x rows accumulator lines; 16x16 has 64 = 4 x 16
    assert cfg.acc_lines >= 4 * cfg.rows and (cfg.rows, cfg.cols) == (16, 16)


def test_largest_fit_respects_the_hardware_rules():
    b = load_board("u250")  # 128-bit DMA: a line of cols int8 must be a multiple of 16 bytes
    base = b.config.reshaped(8, 8, spad_kib=256, acc_kib=512, vbuf_kib=512)
    shapes = [(64, 32), (8, 8), (16, 16)]
    cfg, _ = largest_fit(b, base, lambda c: Resources(dsp=c.rows * c.cols), shapes=shapes)
    assert (cfg.rows, cfg.cols) == (16, 16)  # 64x32 is not square, 8-byte lines of 8x8 are < one 16-byte beat


def test_resource_model_calibration():
    b = load_board("zcu104")
    c1, c2 = b.config.reshaped(8, 8), b.config.reshaped(16, 16)
    r1 = Resources(lut=5000 + 64 * 50, ff=6000 + 64 * 90, dsp=64, bram=30)
    r2 = Resources(lut=5000 + 256 * 50, ff=6000 + 256 * 90, dsp=256, bram=30)
    m = ResourceModel.calibrate("xcup", [(c1, r1), (c2, r2)])
    assert m.fixed.lut == pytest.approx(5000) and m.per_pe.ff == pytest.approx(90)
    p = m.predict(b.config)  # 32x32
    assert p.lut == pytest.approx(5000 + 1024 * 50) and p.dsp == 1024
    one = ResourceModel.calibrate("xcup", [(c2, r2)])  # proportional: over-estimates growth
    assert one.predict(b.config).lut > p.lut
    with pytest.raises(FitError, match="at least one"):
        ResourceModel.calibrate("xcup", [])


def test_bram_tiles_per_copy_by_aspect_ratio():
    b = load_board("kv260").config
    narrow = b.reshaped(b.rows, 4, spad_kib=64, acc_kib=64, vbuf_kib=64)
    # spad: 16384 x 32 bit = 16 RAMB36 (1K x 36) per copy, 2 copies (3 with attn_beside, as the preset);
    # acc: 4096 x 128 bit = 15 (4K x 9); vbuf: 2 copies of 15
    spad = 3 if b.attn_beside else 2
    assert bram_tiles(narrow, "xcup") == spad * 16 + 15 + 2 * 15
    assert bram_tiles(narrow.replace(attn_beside=0), "xcup") == 2 * 16 + 15 + 2 * 15
    wide = b.reshaped(b.rows, 64, spad_kib=4, acc_kib=16, vbuf_kib=16)
    # acc line = 64 x 32 bit = 2048 bits: 29 tiles of 72 bits, though 16 KiB needs only 4
    assert bram_tiles(wide, "xcup") == spad * 8 + 29 + 2 * 29
    assert bram_tiles(narrow, "ecp5") > bram_tiles(narrow, "xcup")


def test_resources_from_yosys_cells():
    cells = {"LUT6": 10, "LUT2": 5, "CARRY4": 3, "FDRE": 20, "FDSE": 1, "DSP48E1": 4, "RAMB36E1": 2,
             "RAMB18E1": 3, "RAM64M": 2, "SRLC32E": 1, "BUFG": 1}
    r = resources_from_cells(cells, "xc7")
    assert (r.lut, r.ff, r.dsp, r.bram, r.uram) == (10 + 5 + 8 + 1, 21, 4, 3.5, 0)
    e = resources_from_cells({"LUT4": 7, "CCU2C": 2, "TRELLIS_FF": 9, "MULT18X18D": 3, "DP16KD": 4}, "ecp5")
    assert (e.lut, e.ff, e.dsp, e.bram) == (11, 9, 3, 4)
    assert resources_from_cells({"URAM288": 2}, "xcup").uram == 2
    with pytest.raises(YosysError, match="unknown synthesis family 'ice40'"):
        resources_from_cells({}, "ice40")
    s = synth_script(["a.v"], "top", "xcup", uram=True)
    assert "synth_xilinx -family xcup -top top -flatten -noiopad -uram -run :map_dsp" in s and "stat -json" in s
    # UltraScale+: the DSP step maps to the DSP48E1 model (Yosys packs registers and adders only there)
    assert "xilinx_dsp -family xc7" in s and s.index(":map_dsp") < s.index("xc7_dsp_map") < s.index("-run coarse:")
    assert "-run" not in synth_script(["a.v"], "top", "xc7")
    assert s.startswith("read_verilog -sv a.v\n")
    assert synth_script(["a.il"], "top", "xc7").startswith("read_rtlil a.il\n")  # RTLIL: read in seconds


def test_synthesis_reads_current_rtlil_beside_the_verilog(tmp_path):
    import os

    from systolica.boards.yosys import synthesis_source

    v = tmp_path / "top.v"
    v.write_text("module top; endmodule\n")
    assert synthesis_source(v) == v  # no RTLIL: the Verilog
    il = tmp_path / "top.il"
    il.write_text("module \\top\nend\n")
    assert synthesis_source(v) == il
    os.utime(il, (1, 1))  # older than the Verilog (left from an earlier generation): not used
    assert synthesis_source(v) == v


def test_build_command_estimate(tmp_path, monkeypatch, fake_top):
    """`systolica build --estimate` writes TCL, deploy folder and fit.json; Verilog generation is stubbed."""
    from systolica.boards import hdl
    from systolica.boards.ports import parse_ports
    from systolica.cli import main

    def fake_write(cfg, out_dir, **kw):
        out_dir.mkdir(parents=True, exist_ok=True)
        v = out_dir / "systolica_accel.v"
        v.write_text(fake_top(cfg, top="systolica_accel"))
        md = out_dir / "regmap.md"
        md.write_text("# regmap\n")
        return {"verilog": v, "markdown": md}, parse_ports(v.read_text())

    monkeypatch.setattr(hdl, "write_verilog", fake_write)
    out = tmp_path / "b"
    rc = main(["hw", "build", "--board", "ultra96v2", "--estimate", "-o", str(out)])
    assert rc == 0
    fit = json.loads((out / "fit.json").read_text())
    assert fit["fits"] is None and fit["estimate_within_limits"] and not fit["measured"]  # an estimate is no fit
    assert "uncalibrated" in fit["source"] and fit["verdict"].startswith("estimate only")
    assert fit["largest_fit"]["rows"] * fit["largest_fit"]["cols"] >= 256
    assert "zynq_ultra_ps_e" in (out / "build.tcl").read_text()
    assert (out / "deploy" / "run.sh").exists() and (out / "deploy" / "regmap.md").exists()
    # a config far too big for the board: exit 3 (a check failed) and fits false
    big = tmp_path / "big.toml"
    big.write_text(load_board("ultra96v2").config.reshaped(64, 64).to_toml())
    assert main(["hw", "build", "--board", "ultra96v2", "--config", str(big), "--estimate", "-o", str(out)]) == 3
    assert json.loads((out / "fit.json").read_text())["estimate_within_limits"] is False
    assert main(["hw", "build", "--board", "nosuchboard", "--estimate", "-o", str(out)]) == 2
    assert main(["hw", "build", "--board", "ultra96v2", "--estimate", "--margin", "0", "-o", str(out)]) == 2


def test_build_falls_back_to_the_model_when_yosys_fails(tmp_path, monkeypatch, fake_top):
    from systolica.boards import estimate, hdl
    from systolica.boards.ports import parse_ports
    from systolica.boards.yosys import YosysError
    from systolica.cli import main

    def fake_write(cfg, out_dir, **kw):
        out_dir.mkdir(parents=True, exist_ok=True)
        v = out_dir / "systolica_accel.v"
        v.write_text(fake_top(cfg, top="systolica_accel"))
        return {"verilog": v, "markdown": v}, parse_ports(v.read_text())

    def slow(*a, **k):
        raise YosysError("Yosys did not finish in 1 s")

    monkeypatch.setattr(hdl, "write_verilog", fake_write)
    monkeypatch.setattr(estimate, "estimate_resources", slow)
    out = tmp_path / "b"
    assert main(["hw", "build", "--board", "pynq-z2", "-o", str(out)]) == 0
    fit = json.loads((out / "fit.json").read_text())
    assert fit["source"].startswith("estimate (Yosys failed") and fit["fits"] is None and not fit["measured"]


def test_estimate_puts_large_buffers_in_uram_on_ultrascale_plus():
    """kv260: spad 2 copies x (128 bit x 16K lines) = 2 x 2 x 4 URAM288 (3 copies with attn_beside, as the
    preset), acc and the 2 vbuf copies (512 bit x 2K lines) 8 each: 40 URAM (48) and no RAMB36 (a measured
    synthesis had 41 URAM, 0 BRAM: the attention score buffer joins them); without URAM the same buffers take
    block RAM."""
    from systolica.boards.board import board_config
    from systolica.boards.fit import buffer_tiles

    kv = board_config("kv260")
    spad = 3 if kv.attn_beside else 2  # scratchpad copies of 8 URAM
    assert buffer_tiles(kv, "xcup", uram=True) == (0, 8 * spad + 8 + 16)
    assert buffer_tiles(kv.replace(attn_beside=0), "xcup", uram=True) == (0, 16 + 8 + 16)
    bram, ultra = buffer_tiles(kv, "xcup")
    assert ultra == 0 and bram > 100
    model = ResourceModel.calibrate("xcup", [(kv, Resources(lut=68000, ff=34000, dsp=446, bram=0, uram=41))], uram=True)
    got = model.predict(kv)
    assert (got.bram, got.uram) == (0, 41)
    half = kv.replace(name="half", spad_kib=128)  # half the scratchpad: 4 URAM fewer a copy, scaled as measured
    total = 8 * spad + 24
    assert model.predict(half).uram == math.ceil(41 / total * (total - 4 * spad))
