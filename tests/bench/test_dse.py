"""Design-space exploration: Pareto front on synthetic points, variants, layer extrapolation, parallel runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from systolica.bench.dse import (
    _model,
    _time,
    estimate_resources,
    evaluate,
    make_tasks,
    pareto_front,
    run_tasks,
    variants,
)

from systolica.config import preset

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
    r = estimate_resources(got[0], "xcup")
    assert r["dsp"] == got[0].rows * got[0].cols and r["bram"] > 0


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
    assert r["fits"] is True


def test_points_that_do_not_fit_are_marked():
    t = make_tasks([MODEL], ["pynq-z2"], [(16, 16)], [64])[0]  # 256 DSPs > 80% of 220
    assert evaluate(t)["fits"] is False


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


def test_dse_command_line(tmp_path):
    from systolica.cli import main

    out, png = tmp_path / "dse.json", tmp_path / "dse.png"
    rc = main(["dse", "--models", MODEL, "--boards", "pynq-z2", "--shapes", "4x8,8x16,16x16", "--dma-bits", "64",
               "--workers", "1", "--json", str(out), "--plot", str(png)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert len(doc["points"]) == 3 and doc["pareto"]
    assert {p["fits"] for p in doc["points"]} == {True, False}
    assert all(doc["points"][i]["fits"] for i in doc["pareto"])  # the front is chosen among buildable points
    assert png.stat().st_size > 1000
    assert main(["dse", "--models", MODEL, "--shapes", "8by8"]) == 2
