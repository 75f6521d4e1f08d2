"""The golden simulator's faster closures against its per-instruction path, bit for bit.

Each test runs one program twice on the same DRAM image: through the plans (fast closures, fusion) and
through the reference ops (``fast=False``), on inputs chosen where the fast formula could differ (sums past
float32's 2**24, rounding ties, saturation, shifts at the ends of their range).
"""

from __future__ import annotations

import numpy as np
import pytest
from golden_harness import Harness

from systolica import wstream
from systolica.config import preset
from systolica.layout import wstream_end
from systolica.sim.golden import GoldenSim

CFG2 = preset("tiny").replace(name="tiny2", dma_ports=2)


def _both(cfg, dram: np.ndarray, text: str, readonly=(), runs: int = 1, between=None):
    """Run ``text`` on a fast and a reference simulator over copies of ``dram``; return both final states."""
    out = []
    for fast in (True, False):
        h = Harness(cfg, dram_bytes=dram.size)
        h.sim = GoldenSim(cfg, dram.copy(), fast=fast, readonly=readonly)
        for i in range(runs):
            if between is not None:
                between(h, i)
            h.run(text)
        out.append(h.snapshot())
    return out


def _assert_same(a, b):
    for x, y, name in zip(a, b, ("dram", "spad", "acc", "vbuf"), strict=True):
        assert np.array_equal(x, y), f"{name} differs"


def _stream_program(cfg, m, k, n, w, acc):
    c = cfg.cols
    return "\n".join([
        f"LOAD buf=SPAD sram=0 dram=0x0 rows={m} lines={k} stride={k * c}",
        f"LOAD buf=ACC sram=0 dram=0x1000 rows={m} lines={n} stride={n * c * 4} @push_next",
        f"GEMM_STREAM dst=0 a=0 w={w:#x} m={m} k={k} n={n} acc={int(acc)} @pop_prev @push_next",
        f"STORE buf=ACC sram=0 dram=0x3000 rows={m} lines={n} stride={n * c * 4} @pop_prev",
        "FINISH"])


@pytest.mark.parametrize("acc", [False, True])
@pytest.mark.parametrize("weights", ["extreme", "small"])
def test_readonly_stream_long_k(weights, acc):
    """Read-only weights with K = 1600: ``extreme`` rows of -128 (sums past 2**24: the chunked path) and
    ``small`` ones (|w| <= 7: one float32 matmul, exact by the weights' L1 bound), fast == reference, also
    for a second run with other activations and a prefill-shaped m."""
    cfg, c = CFG2, CFG2.cols
    k, n = 1600 // c, 3
    rng = np.random.default_rng(11)
    if weights == "extreme":
        w = np.full((n * c, k * c), -128, np.int8)
        w[1::2] = rng.integers(-128, 128, (n * c // 2, k * c))
    else:
        w = rng.integers(-7, 8, (n * c, k * c), dtype=np.int8)
    dram = np.zeros(1 << 17, np.uint8)
    wa = 0x8000 + 5 * c
    wstream.scatter(dram, wa, wstream.port_streams(w, cfg), cfg)
    end = wstream_end({"w": wa, "n": n, "k": k}, cfg)
    dram[0x1000:0x3000] = rng.integers(0, 256, 0x2000, dtype=np.uint8)  # accumulator starting values

    def activations(h, i):
        a = np.full((3, k * c), -128, np.int8)
        if i:
            a[:] = np.random.default_rng(i).integers(-128, 128, a.shape)
        h.put(0, a)

    for m in (1, 3):
        fast, ref = _both(cfg, dram, _stream_program(cfg, m, k, n, wa, acc), readonly=[(0x8000, end - 0x8000)],
                          runs=2, between=activations)
        _assert_same(fast, ref)
