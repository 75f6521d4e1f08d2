"""Design-space exploration: Pareto front on synthetic points, variants, layer extrapolation, parallel runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from systolica.bench.dse import (
    _model,
    _time,
    evaluate,
    front_of,
    make_tasks,
    pareto_front,
    run_tasks,
    variants,
)
from systolica.config import AccelConfig, preset

MODEL = "random:llama:dim=32,n_layers=4,n_heads=4,n_kv_heads=2,vocab=128"


def test_pareto_front_on_hand_made_points():
    obj = (("speed", "max"), ("dsp", "min"))
    pts = [{"speed": 10, "dsp": 100},  # 0: on the front
           {"speed": 5, "dsp": 50},  # 1: on the front (cheaper)
           {"speed": 5, "dsp": 80},  # 2: dominated by 1
           {"speed": 12, "dsp": 200},  # 3: on the front (fastest)
           {"speed": 10, "dsp": 100},  # 4: equal to 0: kept
           {"speed": 9, "dsp": 150}]  # 5: dominated by 0
    assert pareto_front(pts, obj) == [0, 1, 3, 4]
    with pytest.raises(ValueError, match="sense"):
        pareto_front(pts, (("speed", "up"),))
    with pytest.raises(ValueError, match="point 1 has no value for dsp"):
        pareto_front([{"speed": 1, "dsp": 1}, {"speed": 2}], obj)


def test_pareto_front_matches_brute_force_on_random_points():
    rng = np.random.default_rng(0)
    obj = (("a", "max"), ("b", "min"), ("c", "min"))
    for _ in range(20):
        x = rng.integers(0, 6, size=(30, 3))
        pts = [{"a": int(r[0]), "b": int(r[1]), "c": int(r[2])} for r in x]
        s = np.stack([x[:, 0], -x[:, 1], -x[:, 2]], axis=1)  # all "larger is better"
        ge = (s[:, None, :] >= s[None, :, :]).all(-1)  # ge[j, i]: j at least as good as i everywhere
        gt = (s[:, None, :] > s[None, :, :]).any(-1)
        dominated = (ge & gt).any(0)
        assert pareto_front(pts, obj) == [i for i in range(30) if not dominated[i]]


def test_variants_skip_invalid_shapes_and_narrow_lines():
    base = preset("default")
    got = variants(base, [(8, 8), (16, 16), (2, 128), (8, 4)], [64, 128])
    names = [c.name for c in got]
    assert "default-8x8-d64" in names and "default-16x16-d128" in names
    assert "default-8x8-d128" not in names  # an 8-byte scratchpad line is not a whole 16-byte beat
    assert all(c.cols <= 64 for c in got)  # cols=128 is not a valid config


def test_tasks_respect_the_board_port_width():
    tasks = make_tasks([MODEL], ["pynq-z2", "kv260"], [(8, 16)], [64, 128])
    widths = {(t["board"], t["config"]["dma_bits"]) for t in tasks}
    assert widths == {("pynq-z2", 64), ("kv260", 64), ("kv260", 128)}  # Zynq-7000 HP ports are 64-bit


def test_layer_extrapolation_agrees_with_timing_the_whole_model():
    t = make_tasks([MODEL], ["pynq-z2"], [(8, 16)], [64], prompt_len=16)[0]
    r = evaluate(t)
    from systolica.bench.accel_model import board_spec
    from systolica.config import AccelConfig

    dec, pre, _ = _time(_model(MODEL), AccelConfig.from_dict(t["config"]), board_spec("pynq-z2"), 16, "systolic")
    assert r["decode_cycles"] == pytest.approx(dec, rel=0.01)
    assert r["prefill_cycles"] == pytest.approx(pre, rel=0.01)
    assert r["joules_per_token"] == pytest.approx(r["power_w"] / r["decode_tokens_per_s"])
    # 8x16 is not square: the hardware generator refuses it, so it does not fit, whatever it would cost
    assert r["fit"] == "no" and r["fits"] is False and r["fit_tightest"] == "hardware rules"


def _fake_synth(cfg, board_name, **used):
    """A cached 'measured' synthesis of ``cfg`` (current hw/ sources) in the test's cache dir."""
    from systolica.boards.board import Resources, load_board
    from systolica.boards.synth_cache import store

    b = load_board(board_name)
    return store(cfg, b.family, b.family == "xcup" and b.resources.uram > 0, Resources(**used), seconds=12.0,
                 memories=[{"name": "spad_mem", "kind": "bram", "cell": "$__XILINX_BLOCKRAM_SDP_", "bits": None}])


def test_points_are_fits_only_when_synthesis_measured_them(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    t8, t16 = make_tasks([MODEL], ["pynq-z2"], [(8, 8), (16, 16)], [64])
    # nothing cached: not measured, no resource counts, no per-PE guess
    p = evaluate(t16)
    assert p["fit"] == "not measured" and p["fits"] is None and p["dsp"] is None and "no synthesis" in p["fit_reason"]
    assert p["clock"]["basis"] == "assumed" and p["clock"]["measured_fmax_mhz"] is None
    assert p["power"]["basis"] == "assumed" and "pynq-z2.toml" in p["power"]["source"]  # [?] in the board file
    # a measured synthesis that overflows the LUTs: does not fit, tightest LUT
    _fake_synth(AccelConfig.from_dict(t16["config"]), "pynq-z2", lut=120000, ff=9000, dsp=300, bram=40)
    p = evaluate(t16)
    assert p["fit"] == "no" and p["fit_tightest"] == "LUT 226%" and p["dsp"] == 300
    _fake_synth(AccelConfig.from_dict(t8["config"]), "pynq-z2", lut=20000, ff=30000, dsp=80, bram=60)
    assert evaluate(t8)["fit"] == "yes"


def test_front_is_chosen_among_measured_fits_only():
    pts = [{"model": "m", "fit": "yes", "decode_tokens_per_s": 10, "dsp": 100, "bram": 10, "joules_per_token": 1},
           {"model": "m", "fit": "no", "decode_tokens_per_s": 99, "dsp": 1, "bram": 1, "joules_per_token": 0.1},
           {"model": "m", "fit": "not measured", "decode_tokens_per_s": 50, "dsp": None, "bram": None,
            "joules_per_token": 0.2},
           {"model": "m", "fit": "yes", "decode_tokens_per_s": 5, "dsp": 200, "bram": 20, "joules_per_token": 2}]
    assert front_of(pts) == {0}  # 1 and 2 would dominate everything, but nobody can build them


def test_parallel_run_equals_serial():
    tasks = make_tasks([MODEL], ["pynq-z2"], [(4, 8), (8, 8)], [64])
    serial = run_tasks(tasks, workers=1)
    parallel = run_tasks(tasks, workers=2)
    assert [p["decode_cycles"] for p in serial] == [p["decode_cycles"] for p in parallel]


def test_ray_local_mode():
    ray = pytest.importorskip("ray", reason="Ray is not installed (optional extra: pip install -e .[ray])")
    tasks = make_tasks([MODEL], ["pynq-z2"], [(8, 8)], [64])
    try:
        got = run_tasks(tasks, ray_address="local")
    finally:
        ray.shutdown()
    assert got[0]["decode_cycles"] == run_tasks(tasks, workers=1)[0]["decode_cycles"]


def test_dse_command_line(tmp_path, monkeypatch):
    from systolica.cli import main

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    t8, t16, t32 = make_tasks([MODEL], ["pynq-z2"], [(8, 8), (16, 16), (32, 32)], [64])
    _fake_synth(AccelConfig.from_dict(t8["config"]), "pynq-z2", lut=20000, ff=30000, dsp=80, bram=60)
    _fake_synth(AccelConfig.from_dict(t16["config"]), "pynq-z2", lut=120000, ff=9000, dsp=300, bram=40)
    out, png = tmp_path / "dse.json", tmp_path / "plots" / "dse_pareto.png"
    rc = main(["dse", "--models", MODEL, "--boards", "pynq-z2", "--shapes", "8x16,8x8,16x16,32x32", "--dma-bits",
               "64", "-j", "1", "--json", str(out), "--plots", str(png.parent)])
    assert rc == 0
    doc = json.loads(out.read_text())
    fit = {p["config"]: p["fit"] for p in doc["points"]}
    assert fit == {"pynq-z2-8x16-d64": "no", "pynq-z2-8x8-d64": "yes", "pynq-z2-16x16-d64": "no",
                   "pynq-z2-32x32-d64": "not measured"}
    # the front holds only the measured fit, though the others decode faster
    assert [doc["points"][i]["config"] for i in doc["pareto"]] == ["pynq-z2-8x8-d64"]
    assert png.stat().st_size > 1000
    assert main(["dse", "--models", MODEL, "--shapes", "8by8"]) == 2


def test_synth_runs_yosys_only_for_what_is_missing(tmp_path, monkeypatch):
    """dse --synth: one (stubbed) Yosys run per uncached configuration the hardware accepts."""
    from systolica.bench.dse import synthesize_missing
    from systolica.boards import synth_cache
    from systolica.boards.board import Resources

    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    tasks = make_tasks([MODEL, MODEL], ["pynq-z2"], [(8, 16), (8, 8), (16, 16)], [64])
    _fake_synth(AccelConfig.from_dict(tasks[2]["config"]), "pynq-z2", lut=1, ff=1, dsp=1, bram=1)  # 8x8 cached
    ran = []

    def fake(cfg, board, **k):
        ran.append(cfg.name)
        return synth_cache.store(cfg, board.family, False, Resources(lut=2), seconds=3.0)

    monkeypatch.setattr(synth_cache, "synthesize", fake)
    out = synthesize_missing(tasks)
    assert ran == ["pynq-z2-16x16-d64"]  # 8x16 is refused by the hardware rules, 8x8 is cached, one run per config
    assert out == [{"board": "pynq-z2", "config": "pynq-z2-16x16-d64", "seconds": 3.0,
                    "cache": str(synth_cache.record_path(AccelConfig.from_dict(tasks[4]["config"]), "xc7", False))}]
