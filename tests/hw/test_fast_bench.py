"""``python -m systolica.sim.fast_harness --bench`` on a short program: both paths run it and agree.

No timing is asserted (that is the benchmark's output, docs/performance.md); the builds are the
ones tests/hw/test_accel_fast.py and tests/hw/test_accel_rtl.py use for the tiny preset.
"""

from __future__ import annotations

import pytest

from systolica.config import preset
from systolica.sim.fast_harness import FAST_TOP, TOP, bench, format_bench

pytestmark = pytest.mark.rtl


def test_bench_runs_both_paths_and_names_their_builds(build_dir):
    r = bench(preset("tiny"), build_dir, tiles=2, repeats=2)
    f, c = r["fast"], r["cocotb"]
    assert r["same_dram"] and f["code"] == c["code"] == "NONE" and not f["violations"], r
    # the cocotb figure starts at the START write (the C++ one at its handshake), and its AxiRam has its own timing
    assert 0 <= c["sim_cycles"] - f["sim_cycles"] < 64, (f["sim_cycles"], c["sim_cycles"])
    assert len(f["runs_cycles_per_s"]) == 2 and f["cycles_per_s"] == max(f["runs_cycles_per_s"])
    for p in (f, c):
        assert p["cpu_s"] > 0 and 0 < p["cycles_per_s"] < float("inf"), p
    assert f["flags"]["top"] == FAST_TOP and c["flags"]["top"] == TOP
    assert "--x-assign" in f["flags"]["verilator"] and "--no-public-flat-rw" in c["flags"]["verilator"]
    text = format_bench(r)
    assert "fast path (C++ harness)" in text and "cocotb path" in text and "cycles / CPU s" in text
    assert f"{f['sim_cycles']:,}" in text and f"{c['sim_cycles']:,}" in text
