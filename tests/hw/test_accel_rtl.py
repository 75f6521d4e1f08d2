"""The accelerator top level under Verilator + cocotb, bit-exact with the golden simulator.

One cached build of the ``tiny`` preset serves every test here.  The figures
(random programs and instructions run, mismatches, DMA utilization while
weights stream) are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from systolica.config import preset
from systolica.sim.fast_harness import cocotb_build

pytestmark = pytest.mark.rtl
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def tiny(build_dir):
    cfg = preset("tiny")
    return cfg, cocotb_build(cfg, build_dir)


@pytest.fixture(scope="module")
def tiny_d2(build_dir):
    """tiny with two DMA ports (fetch, LOAD and weight port 0 on gmem0, weight port 1 and STORE on gmem1) and
    two query rows a KV pass in the attention unit."""
    cfg = preset("tiny").replace(name="tiny_d2", dma_ports=2, attn_rows=2)
    return cfg, cocotb_build(cfg, build_dir)


def _run(tiny, testcase, **params):
    cfg, b = tiny
    return b.run("cocotb_accel", HERE, params={"cfg": cfg.to_dict(), **params}, testcase=testcase).check()


def test_csr_map_and_fetch_faults(tiny):
    _run(tiny, "csr_map")


def test_gemm_by_hand(tiny):
    _run(tiny, "gemm_by_hand")


@pytest.mark.parametrize("which", ["tiny", "tiny_d2"])
def test_random_programs_match_golden(which, request):
    tiny = request.getfixturevalue(which)
    res = _run(tiny, "random_vs_golden", programs=60, seed=1, pause=0.25)
    r = res.metrics["random"]
    print(f"\nrandom programs: {r['programs']}, words: {r['words']}, instructions retired (golden): "
          f"{r['retired']}, mismatches: {r['mismatches']}, outcomes: {r['faults']}")
    assert r["mismatches"] == 0, r["first"]
    assert r["programs"] == 60
    assert len(r["faults"]) >= 6, f"too few kinds of outcome were exercised: {r['faults']}"


def test_concurrent_engines_share_buffer_ports(tiny):
    res = _run(tiny, "concurrent_engines", runs=2)
    c = res.metrics["concurrent"]
    print(f"\nconcurrent engines: R channel held for {c['r_held_cycles']} cycles (LOAD lines waiting for a port)")
    assert c["r_held_cycles"] > 0, "no LOAD line ever waited: the test did not exercise the write-port arbitration"


def test_soft_reset_midrun(tiny):
    _run(tiny, "soft_reset_midrun")


def test_weight_streaming_overlap(tiny):
    res = _run(tiny, "weight_streaming", k_lines=32, n_lines=2, n_tiles=8)
    s = res.metrics["stream"]
    print(f"\nweight streaming (DMA beats per cycle, peak 1): steady state {s['steady_state']:.3f}, "
          f"whole program of {s['long']['tiles']} tiles {s['whole_program']:.3f}; {s}")
    assert s["steady_state"] >= 0.85, s


@pytest.mark.parametrize("which", ["tiny", "tiny_d2"])
def test_axi_error_responses_stop_with_bus_error(which, request):
    _run(request.getfixturevalue(which), "bus_errors")


def test_dram_latency_in_the_cocotb_testbench(tiny, build_dir):
    """AccelTB.set_dram_latency: the same bytes at latency 0 and 100, and the cycles of the fast harness's
    DRAM model at the same latency (the two models differ in AxiRam's own 2-cycle timing only)."""
    import numpy as np

    from systolica.isa import encode
    from systolica.sim.accel_programs import load_store_program
    from systolica.sim.fast_harness import FastRtl

    cfg, lat, chunk, loads, out = tiny[0], 100, 0x1000, 3, 0x8000
    res = _run(tiny, "dram_latency", latency=lat, chunk=chunk, loads=loads, out=out)
    cyc = {int(k): v for k, v in res.metrics["latency"]["cycles"].items()}
    words = [encode(i) for i in load_store_program(cfg, data=0x1000, out=out, chunk=chunk, loads=loads)]
    fast = FastRtl(cfg, build_dir)
    fcyc = {}
    for latency in (0, lat):
        dram = np.zeros(0x4_0000, np.uint8)
        raw = np.frombuffer(b"".join(int(w).to_bytes(16, "little") for w in words), np.uint8)
        dram[0x1_0000:0x1_0000 + len(raw)] = raw
        r = fast.run(dram, window_base=0x1_0000, window_size=0x2_0000, prog_base=0, prog_len=len(words),
                     dram_latency=latency)
        fcyc[latency] = r.counters["CYCLES"]
    print(f"\nCYCLES at DRAM latency 0 / {lat}: cocotb {cyc[0]} / {cyc[lat]}, fast harness {fcyc[0]} / {fcyc[lat]}")
    assert cyc[lat] - cyc[0] > lat * loads  # the latency is there
    assert abs(cyc[lat] - fcyc[lat]) <= 0.03 * fcyc[lat], (cyc, fcyc)  # and is the same latency
