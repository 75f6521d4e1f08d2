"""systolica bench --batches: points from the batched decode program, projections, crossovers."""

from __future__ import annotations

import pytest

from systolica.bench.batch_sweep import crossovers, gpu_projection_points, systolica_batch_points, with_costs
from systolica.testmodels import random_model


def test_crossovers_on_hand_made_lines():
    sweep = {"fpga": [{"batch": b, "decode_tokens_per_s": v} for b, v in ((1, 100), (4, 300), (16, 400))],
             "gpu": [{"batch": b, "decode_tokens_per_s": v} for b, v in ((1, 50), (4, 200), (16, 800))]}
    assert crossovers(sweep) == [{"metric": "decode_tokens_per_s", "batch": 16, "ahead": "gpu", "behind": "fpga"}]
    with_costs(sweep["fpga"], 10.0, 1.0)
    with_costs(sweep["gpu"], 700.0, 2.69)
    cost = crossovers(sweep, "usd_per_mtok")  # lower wins: the FPGA is cheaper per token throughout
    assert cost == []
    assert sweep["fpga"][0]["tokens_per_joule"] == pytest.approx(10.0)
    assert sweep["gpu"][2]["usd_per_mtok"] == pytest.approx(2.69 / (800 * 3600) * 1e6)


def test_a_batch_that_does_not_fit_is_served_in_the_largest_that_does():
    from systolica.bench.batch_sweep import served_in_smaller_batches

    pts = served_in_smaller_batches([{"batch": 1, "decode_tokens_per_s": 10.0, "fits": True},
                                     {"batch": 4, "decode_tokens_per_s": 30.0, "fits": True},
                                     {"batch": 16, "decode_tokens_per_s": None, "fits": False, "why": "vbuf"}])
    assert pts[2]["decode_tokens_per_s"] == 30.0 and pts[2]["served_as"] == 4
    none_fit = served_in_smaller_batches([{"batch": 8, "decode_tokens_per_s": None, "fits": False}])
    assert none_fit[0]["decode_tokens_per_s"] is None and "served_as" not in none_fit[0]


def test_gpu_projection_is_bandwidth_bound_then_compute_bound():
    m = random_model("llama", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128, vocab=256, seed=1)
    pts = gpu_projection_points(m, "H100", [1, 2, 1 << 20])["points"]
    assert pts[1]["decode_tokens_per_s"] == pytest.approx(2 * pts[0]["decode_tokens_per_s"])
    assert pts[2]["decode_tokens_per_s"] < (1 << 20) * pts[0]["decode_tokens_per_s"]  # the compute roof
    assert all("projected" in p["source"] for p in pts)


def test_systolica_batch_points_time_the_batched_program():
    from systolica.bench.accel_model import board_spec

    m = random_model("llama", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128, vocab=256, seed=1)
    spec = board_spec("pynq-z2")
    pts = systolica_batch_points(m, spec, [1, 2, 3, 4, 5], [1, 2, 4, 64], page=16, max_seq=32)
    tps = [p["decode_tokens_per_s"] for p in pts]
    assert tps[0] < tps[1] < tps[2]  # one weight read serves more rows
    assert tps[2] < 4 * tps[0]  # ...but not for free: the array and the attention take longer
    assert pts[3]["fits"] is False and "fit" in pts[3]["why"]
    assert pts[3]["served_as"] == 4 and tps[3] == tps[2]  # 64 sequences served 4 at a time
    assert pts[1]["cycles_per_step"] > 0 and "batched program" in pts[1]["source"]
