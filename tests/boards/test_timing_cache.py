"""Measured Fmax cached per board and config, and the clock bench / dse then use (boards/timing_cache.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from systolica.boards.board import load_board
from systolica.boards.fit_status import clock_basis
from systolica.boards.timing_cache import ecp5_proxy, lookup_timing, store_timing, timing_dir


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    return tmp_path


def test_ecp5_board_is_timed_at_its_measured_fmax(cache):
    b = load_board("ulx3s")
    assert clock_basis(b.config, board=b)["basis"] == "assumed"
    assert "no place and route yet" in clock_basis(b.config, board=b)["label"]
    store_timing(b.config, b, "nextpnr-ecp5", fmax_mhz=43.21, target_mhz=50.0, critical_path="a -> b")
    c = clock_basis(b.config, board=b)
    assert c["basis"] == "measured" and c["mhz"] == pytest.approx(43.21) and c["measured_fmax_mhz"] == 43.21
    assert c["label"].startswith("clock: 43.21 MHz measured") and "nextpnr-ecp5" in c["label"]
    assert c["critical_path"] == "a -> b"
    # above the target: the target is the clock (the board runs what it is given)
    store_timing(b.config, b, "nextpnr-ecp5", fmax_mhz=80.0, target_mhz=50.0)
    c = clock_basis(b.config, board=b)
    assert c["mhz"] == 50.0 and c["measured_fmax_mhz"] == 80.0 and "Fmax above it" in c["label"]
    # another configuration on the same board has no record of its own
    other = dataclasses.replace(b.config, rows=4, cols=4)
    assert clock_basis(other, board=b)["basis"] == "assumed"


def test_xilinx_rows_stay_assumed_with_the_ecp5_proxy_beside(cache):
    kv, ulx = load_board("kv260"), load_board("ulx3s")
    c = clock_basis(kv.config, board=kv)
    assert c["basis"] == "assumed" and c["mhz"] == kv.config.clock_mhz and c["ecp5_proxy"] is None
    assert c["label"] == f"clock: assumed {kv.config.clock_mhz:g} MHz (no Vivado timing)"
    store_timing(ulx.config, ulx, "nextpnr-ecp5", fmax_mhz=41.3, target_mhz=50.0)
    c = clock_basis(kv.config, board=kv)
    assert c["mhz"] == kv.config.clock_mhz and c["basis"] == "assumed"  # a proxy never becomes the clock
    assert c["ecp5_proxy"]["mhz"] == 41.3 and not c["ecp5_proxy"]["same_config"]
    assert "ECP5 proxy 41.3 MHz (same hw at another size" in c["label"]
    # Vivado timing of the config itself makes it measured
    store_timing(kv.config, kv, "vivado", fmax_mhz=187.5, target_mhz=200.0, wns_ns=-0.333)
    c = clock_basis(kv.config, board=kv)
    assert c["basis"] == "measured" and c["mhz"] == 187.5 and c["ecp5_proxy"] is None


def test_stale_and_broken_records_are_never_a_clock(cache):
    b = load_board("ulx3s")
    rec = store_timing(b.config, b, "nextpnr-ecp5", fmax_mhz=43.0, target_mhz=50.0)
    p = timing_dir() / rec.path.split("/")[-1]
    d = json.loads(p.read_text())
    p.write_text(json.dumps(dict(d, hw="0" * 16)))  # measured on other hw/ sources
    assert lookup_timing(b.config, b, "nextpnr-ecp5") is None
    assert lookup_timing(b.config, b, "nextpnr-ecp5", current_only=False).fmax_mhz == 43.0
    assert clock_basis(b.config, board=b)["basis"] == "assumed" and ecp5_proxy(b.config) is None
    for bad in ("{", json.dumps(dict(d, fmax_mhz=-1)), json.dumps(dict(d, schema="x")), json.dumps([1])):
        p.write_text(bad)
        assert lookup_timing(b.config, b, "nextpnr-ecp5", current_only=False) is None
    with pytest.raises(ValueError, match="tool"):
        store_timing(b.config, b, "quartus", fmax_mhz=1.0, target_mhz=1.0)
    # a run of Verilog from other sources (hw/ edited during a half-hour route) is stored as theirs: stale now
    rec = store_timing(b.config, b, "nextpnr-ecp5", fmax_mhz=61.3, target_mhz=50.0, hw="f" * 16)
    assert rec.hw == "f" * 16 and rec.stale and lookup_timing(b.config, b, "nextpnr-ecp5") is None


def test_bench_board_rows_use_the_measured_clock(cache):
    from systolica.bench.accel_model import board_spec, model_on_board
    from systolica.compiler.compile import compile_model
    from systolica.testmodels import random_model

    b = load_board("ulx3s")
    assumed = board_spec("ulx3s")
    assert assumed.clock_mhz == b.config.clock_mhz
    store_timing(b.config, b, "nextpnr-ecp5", fmax_mhz=25.0, target_mhz=50.0)
    measured = board_spec("ulx3s")
    assert measured.clock_mhz == 25.0 and measured.clock["basis"] == "measured"
    model = random_model("llama", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=40, vocab=64, seed=2,
                         max_seq=32)
    art = compile_model(model, b.config, page=16, max_seq=32, prefill_chunk=4)
    slow = model_on_board(art, measured, [1, 2, 3], 3)
    fast = model_on_board(art, assumed, [1, 2, 3], 3)
    assert fast.decode_tokens_per_s / slow.decode_tokens_per_s == pytest.approx(2.0)
    assert slow.ttft_s / fast.ttft_s == pytest.approx(2.0)
    assert slow.extra["clock"]["basis"] == "measured" and slow.extra["clock_mhz"] == 25.0


def test_hw_build_pnr_stores_the_digest_of_the_sources_it_routed(cache, tmp_path, monkeypatch):
    """``hw build --pnr`` caches its Fmax under the hw/ digest stamped beside its Verilog when it was generated,
    not under the sources on disk half an hour later (edited meanwhile: the record is then stale)."""
    from systolica.boards import ecp5
    from systolica.cli.build import Build

    b = load_board("ulx3s")
    out = tmp_path / "out"
    (out / "hdl").mkdir(parents=True)
    (out / "deploy").mkdir()
    verilog = out / "hdl" / "systolica_accel.v"
    verilog.write_text("// routed\n")
    (out / "hdl" / "hw_digest").write_text("0123456789abcdef\n")
    bit = tmp_path / "ulx3s.bit"
    bit.write_bytes(b"bit")
    (tmp_path / "report.json").write_text("{}")
    result = ecp5.Ecp5Result(61.31, 50.0, {"TRELLIS_COMB": (56756, 83640)}, bit, tmp_path / "report.json", 1.0,
                             "a -> b (3 logic stages)", "abc9", "static", 2, "router1")
    monkeypatch.setattr(ecp5, "ecp5_build", lambda *a, **k: result)
    said = []
    assert Build._pnr(b, b.config, verilog, out, said.append) == 0  # 61.31 >= 50: meets its target
    rec = lookup_timing(b.config, b, "nextpnr-ecp5", current_only=False)
    assert rec.fmax_mhz == 61.31 and rec.hw == "0123456789abcdef" and rec.stale
    assert any("ECP5 Fmax [bold]61.3 MHz[/]" in s and "router1" in s and "place and route 1 s" in s for s in said)
