"""The performance model against the RTL top level's CYCLES counter (Verilator; slow: builds the top level).

Run with ``pytest -m slow tests/sim/test_perf_rtl.py -s`` to see the per-program table; the same suite
is ``python -m systolica.sim.perf_validate``.
"""

from __future__ import annotations

import pytest

from systolica.config import preset
from systolica.sim.perf_validate import compare, run_rtl, suite, summarize

pytestmark = [pytest.mark.rtl, pytest.mark.slow]


# full-width line units; 2 lanes (2 beats per 4-lane line); 2 lanes with one-lane activation, norm and
# softmax units (4 beats a line on those); the same with two MACs a DSP (the array's longer pipeline); three query
# rows through each KV tile together (attn_rows: a GQA group of 3 as on the kv260 preset) with p * v on multipliers,
# with a copy of the p * v lanes per row, with one set the rows take turns on (attn_pv_shared), with two
# (attn_pv_sets = 2) and with three (a set a row, each a slot of its own, and the sigmoid's quotient by the seeded
# Newton pipeline, config.act_newton, ATTN beside a GEMM_STREAM that runs on, config.attn_beside, and full-width
# line units beside a one-lane activation unit and a two-lane norm unit, config.rowpass_lanes, and the weights read
# ahead of each GEMM_STREAM, config.wstream_ahead: as the kv260 preset)
@pytest.mark.parametrize("lanes,nonlinear,pack,attn_rows,shared", [
    (0, 0, 1, 1, 0), (2, 0, 1, 1, 0), (2, 1, 1, 1, 0), (2, 1, 2, 1, 0), (0, 0, 1, 3, 0), (0, 0, 1, 3, 1),
    (0, 0, 1, 3, 2), (0, 1, 1, 3, 3)])
def test_model_within_5_percent_of_rtl_cycles(build_dir, lanes, nonlinear, pack, attn_rows, shared):
    name = (f"tiny_l{lanes}_n{nonlinear}" + ("_p2" if pack == 2 else "") + (f"_r{attn_rows}" if attn_rows > 1 else "")
            + ("_s" if shared else "") + (f"{shared}" if shared > 1 else "") + ("_rp2_ah" if shared == 3 else ""))
    cfg = preset("tiny").replace(name=name, line_lanes=lanes, nonlinear_lanes=nonlinear, macs_per_dsp=pack,
                                 attn_rows=attn_rows, dsp_muls=int(attn_rows > 1), attn_pv_shared=int(shared > 0),
                                 attn_pv_sets=max(shared, 1), act_newton=int(shared == 3),
                                 attn_beside=int(shared == 3), rowpass_lanes=2 if shared == 3 else 0,
                                 wstream_ahead=32 if shared == 3 else 0)
    progs = suite(cfg, n_random=8, seed=11)
    rows = compare(cfg, progs, run_rtl(cfg, progs, build_dir))
    for r in rows:
        print(f"{r['name']:24s} RTL {r['rtl_cycles']:7d} model {r['model_cycles']:7d} {100 * r['error']:+.2f}%")
    s = summarize(rows)
    print(s)
    bad = [(r["name"], round(100 * r["error"], 2)) for r in rows if abs(r["error"]) > 0.05]
    assert not bad, f"programs off by more than 5%: {bad}"
    for r in rows:  # the counters the model derives exactly from the instructions
        assert r["model"]["ARRAY_BUSY"] == r["rtl"]["ARRAY_BUSY"], r["name"]
        assert r["model"]["DMA_BEATS"] == r["rtl"]["DMA_BEATS"], r["name"]


def test_compiled_decode_and_prefill_within_5_percent_of_rtl_cycles(build_dir):
    """A compiled one-block llama on the fast harness (Verilator + C++ DRAM model, the artifact's image): decode
    steps with one and two KV tiles, a prefill chunk and a batched decode step of three sequences."""
    from systolica.compiler.compile import compile_model
    from systolica.sim.perf_validate import compiled_programs, run_fast
    from systolica.testmodels import random_model

    cfg = preset("tiny")
    model = random_model("llama", dim=32, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=48, vocab=64, seed=2,
                         max_seq=32)
    progs = compiled_programs(compile_model(model, cfg, page=16, max_seq=32, prefill_chunk=4, batch=3))
    assert any("batch" in p["name"] for p in progs)
    runs = run_fast(cfg, progs, build_dir)
    assert all(r["code"] == 0 and not r["timed_out"] for r in runs), runs
    rows = compare(cfg, progs, runs)
    for r in rows:
        print(f"{r['name']:24s} RTL {r['rtl_cycles']:7d} model {r['model_cycles']:7d} {100 * r['error']:+.2f}%")
    bad = [(r["name"], round(100 * r["error"], 2)) for r in rows if abs(r["error"]) > 0.05]
    assert not bad, f"programs off by more than 5%: {bad}"
    for r in rows:
        assert r["model"]["ARRAY_BUSY"] == r["rtl"]["ARRAY_BUSY"], r["name"]
        assert r["model"]["DMA_BEATS"] == r["rtl"]["DMA_BEATS"], r["name"]
