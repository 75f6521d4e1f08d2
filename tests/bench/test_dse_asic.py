"""ASIC points of the design-space sweep (``systolica dse --asic``, bench/dse_asic.py, boards/asic_cache.py).

The cached ASIC reports here are inputs written by the test (the shape ``asic_estimate`` returns), so that what the
sweep does with a measured estimate is checked without a synthesis; the synthesis itself is tests/boards/test_asic.py.
"""

import json

import pytest

from systolica.bench.dse_asic import ASIC_DRAM_GBPS, asic_front, asic_point, asic_tasks, power_at
from systolica.boards import asic_cache
from systolica.config import preset

MODEL = "random:llama:dim=32,n_layers=2,n_heads=4,n_kv_heads=2,vocab=128"


def _report(cfg, fmax=250.0, area=0.5, clock=100.0, total=40.0, leak=4.0):
    return {"schema": "systolica-asic/1", "unit": "top", "config": cfg.name, "config_hash": cfg.hash_hex(),
            "area": {"total_mm2": area, "logic_um2": area * 4e5, "sram_um2": area * 6e5,
                     "logic_source": "measured synthesis", "sram_source": "SRAM-macro estimate"},
            "units": {"array": {"area_um2": area * 1e5}, "buffers": {"area_um2": area * 6e5}},
            "timing": {"target_period_ns": 1000.0 / clock, "fmax_mhz": fmax},
            "power": {"total": total, "leakage": leak, "clock_mhz": clock, "source": "OpenSTA"}}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    return tmp_path


def test_power_scales_its_dynamic_part_with_the_clock():
    p = {"total": 40.0, "leakage": 4.0, "clock_mhz": 100.0}
    assert power_at(p, 100.0) == pytest.approx(0.040)
    assert power_at(p, 200.0) == pytest.approx((4.0 + 2 * 36.0) * 1e-3)
    assert power_at({"leakage_mw_liberty": 1.0}, 100.0) is None  # no OpenSTA power: none made up


def test_cache_keeps_the_best_current_report(cache, monkeypatch):
    cfg = preset("tiny")
    asic_cache.store(_report(cfg, fmax=300.0, clock=100.0), cfg)
    asic_cache.store(_report(cfg, fmax=420.0, clock=400.0), cfg)
    assert asic_cache.lookup(cfg)["timing"]["fmax_mhz"] == 420.0
    assert asic_cache.lookup(preset("default")) is None
    # a report of other RTL is stale: not looked up
    monkeypatch.setattr(asic_cache.synth_cache, "hw_digest", lambda: "other-rtl")
    assert asic_cache.lookup(cfg) is None


def test_points_use_the_measured_estimate_and_rank_only_measured(cache):
    tiny = preset("tiny")
    asic_cache.store(_report(tiny, fmax=250.0, area=0.5), tiny)
    tasks = asic_tasks([MODEL], "tiny", [(4, 4), (8, 8)])
    assert [t["config"]["rows"] for t in tasks] == [4, 8]
    pts = [asic_point(t) for t in tasks]
    meas, other = pts
    assert meas["asic"] == "measured" and meas["area_mm2"] == 0.5 and meas["fmax_mhz"] == 250.0
    assert meas["clock"]["mhz"] == 250.0 and meas["clock"]["met"] is True  # an ASIC point runs at its Fmax
    assert meas["dram_gbps"] == ASIC_DRAM_GBPS and "assumed" in meas["dram_source"]
    assert meas["power_w"] == pytest.approx(power_at(_report(tiny)["power"], 250.0))
    assert meas["joules_per_token"] == pytest.approx(meas["power_w"] / meas["decode_tokens_per_s"])
    assert meas["decode_tokens_per_s"] == pytest.approx(250e6 / meas["decode_cycles"])
    assert other["asic"] == "not measured" and other["area_mm2"] is None and other["joules_per_token"] is None
    assert "assumed" in other["clock"]["basis"]
    assert asic_front(pts) == {0}


def test_a_swept_clock_above_fmax_is_not_met_and_not_ranked(cache):
    tiny = preset("tiny")
    asic_cache.store(_report(tiny, fmax=250.0), tiny)
    pts = [asic_point(t) for t in asic_tasks([MODEL], "tiny", [(4, 4)], clocks=[200.0, 300.0], dram_gbps=[6.4])]
    assert [p["clock"]["met"] for p in pts] == [True, False]
    assert all(p["dram_gbps"] == 6.4 and p["dram_source"] == "swept" for p in pts)
    assert pts[1]["decode_tokens_per_s"] > pts[0]["decode_tokens_per_s"]  # faster, but not buildable
    assert asic_front(pts) == {0}


def test_cli_asic_sweep_json(cache, capsys):
    from systolica.cli import main

    tiny = preset("tiny")
    asic_cache.store(_report(tiny), tiny)
    rc = main(["dse", "--asic", "--config", "tiny", "--shapes", "4x4,8x8", "--models", MODEL, "--json",
               "--plots", str(cache / "plots")])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["asic"] for p in doc["points"]] == ["measured", "not measured"] and doc["pareto"] == [0]
    png = (cache / "plots" / "dse_asic.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_cli_config_needs_asic(capsys):
    from systolica.cli import main

    assert main(["dse", "--config", "tiny", "--boards", "pynq-z2"]) == 2
    assert "--config goes with --asic" in capsys.readouterr().err
