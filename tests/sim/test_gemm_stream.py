"""GEMM_STREAM in the golden simulator: weights gathered from the striped DRAM pages == numerics.matmul."""

from __future__ import annotations

import numpy as np
import pytest
from golden_harness import Harness
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolica import numerics as nx
from systolica import wstream
from systolica.config import preset
from systolica.faults import Fault
from systolica.layout import WPAGE, wstream_end
from systolica.sim.faults import SimFault

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _program(cfg, m, k, n, w, acc):
    c = cfg.cols
    return "\n".join([
        f"LOAD buf=SPAD sram=0 dram=0x0 rows={m} lines={k} stride={k * c}",
        f"LOAD buf=ACC sram=0 dram=0x1000 rows={m} lines={n} stride={n * c * 4} @push_next",
        f"GEMM_STREAM dst=0 a=0 w={w:#x} m={m} k={k} n={n} acc={int(acc)} @pop_prev @push_next",
        f"STORE buf=ACC sram=0 dram=0x3000 rows={m} lines={n} stride={n * c * 4} @pop_prev",
        "FINISH"])


@SETTINGS
@given(st.sampled_from([1, 2, 4]), st.integers(1, 3), st.integers(1, 5), st.integers(1, 4), st.booleans(),
       st.integers(0, 2**32 - 1), st.integers(0, 300), st.booleans())
def test_gemm_stream_matches_matmul(ports, m, k, n, acc, seed, line0, fast):
    """Any port count, any start line within a page (streams that cross pages), fast and reference paths."""
    cfg = preset("tiny").replace(name=f"tiny{ports}", dma_ports=ports)
    c = cfg.cols
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k * c), dtype=np.int8)
    w = rng.integers(-128, 128, (n * c, k * c), dtype=np.int8)
    c0 = rng.integers(-2**31, 2**31, (m, n * c), dtype=np.int64).astype(np.int32)
    h = Harness(cfg, dram_bytes=1 << 17, fast=fast)
    h.put(0, a)
    h.put(0x1000, c0)
    wa = 0x8000 + line0 * c  # port 0's first byte, anywhere in a page
    wstream.scatter(h.sim.window, wa, wstream.port_streams(w, cfg), cfg)
    h.run(_program(cfg, m, k, n, wa, acc))
    got = h.get(0x3000, np.int32, (m, n * c))
    want = nx.matmul(a, w)
    if acc:
        want = (want.astype(np.int64) + c0).astype(np.int32)
    assert np.array_equal(got, want)


def test_stream_layout_interleaves_pages():
    """Each port reads its own pages: no byte of the window is read by two ports, and the end formula is exact."""
    cfg = preset("tiny").replace(name="tiny4", dma_ports=4)
    c = cfg.cols
    n, k = 6, 40  # 6 * 40 tiles of 1 line x 4 bytes per port: 960 bytes, crossing a page from offset 3900
    w = 3900 - 3900 % c
    owner = np.full(1 << 16, -1)
    nb = wstream.port_bytes(n, k, cfg)
    for p in range(4):
        for x in range(nb):
            a = w + p * WPAGE + x + 3 * WPAGE * ((w % WPAGE + x) // WPAGE)
            assert owner[a] == -1
            owner[a] = p
            assert a // WPAGE % 4 == p  # port p owns every 4th page
    assert wstream_end({"w": w, "n": n, "k": k}, cfg) == np.nonzero(owner >= 0)[0].max() + 1


@pytest.mark.parametrize("fields, fault", [
    ({"w": 3}, Fault.DMA_ALIGN),  # not a line multiple
    ({"w": (1 << 16) - 4096}, Fault.DMA_WINDOW),  # port 1's pages run past the 64 KiB window
    ({"a": 4095}, Fault.SRAM_RANGE),  # m*k = 2 lines from the last of 4096
])
def test_gemm_stream_faults(fields, fault):
    cfg = preset("tiny").replace(name="tiny2", dma_ports=2)
    h = Harness(cfg)
    f = {"dst": 0, "a": 0, "w": 0x8000, "m": 1, "k": 2, "n": 2} | fields
    with pytest.raises(SimFault) as e:
        h.run(f"GEMM_STREAM dst={f['dst']} a={f['a']} w={f['w']} m={f['m']} k={f['k']} n={f['n']} acc=0\nFINISH")
    assert e.value.fault == fault


def test_readonly_weights_are_converted_once_and_stay_exact():
    """Weights declared read-only: every run still equals numerics.matmul (A changes between runs), and a
    STORE into the range is refused with ReadOnlyStore instead of silently leaving stale weights behind."""
    from systolica.sim.golden import GoldenSim
    from systolica.sim.golden_ops import ReadOnlyStore

    cfg = preset("tiny").replace(name="tiny2", dma_ports=2)
    c, m, k, n = cfg.cols, 1, 6, 3
    rng = np.random.default_rng(5)
    w = rng.integers(-128, 128, (n * c, k * c), dtype=np.int8)
    dram = np.zeros(1 << 17, np.uint8)
    wa = 0x8000 + 12 * c
    wstream.scatter(dram, wa, wstream.port_streams(w, cfg), cfg)
    end = wstream_end({"w": wa, "n": n, "k": k}, cfg)
    sim = GoldenSim(cfg, dram, fast=True, readonly=[(0x8000, end - 0x8000)])
    h = Harness(cfg)
    h.sim = sim
    for _ in range(3):
        a = rng.integers(-128, 128, (m, k * c), dtype=np.int8)
        h.put(0, a)
        h.run(_program(cfg, m, k, n, wa, False))
        assert np.array_equal(h.get(0x3000, np.int32, (m, n * c)), nx.matmul(a, w))
    with pytest.raises(ReadOnlyStore, match="read-only"):
        h.run(f"STORE buf=SPAD sram=0 dram={0x8000 + 64:#x} rows=1 lines=1 stride={c}\nFINISH")


@pytest.mark.parametrize("fast", [True, False])
def test_long_k_is_exact_past_float32(fast):
    """K = 1200 elements of -128 x -128: sums of 19.7 M, past float32's 2**24 (the fast path sums chunks of
    1024 exactly); with acc=1 the int32 addition wraps like the adder."""
    cfg = preset("tiny").replace(name="tiny2", dma_ports=2)
    c, m, k, n = cfg.cols, 2, 300, 2
    rng = np.random.default_rng(9)
    a = np.full((m, k * c), -128, np.int8)
    a[1] = rng.integers(-128, 128, k * c)
    w = np.full((n * c, k * c), -128, np.int8)
    w[1::2] = rng.integers(-128, 128, (n * c // 2, k * c))
    c0 = np.full((m, n * c), 2**31 - 1000, np.int32)
    h = Harness(cfg, dram_bytes=1 << 17, fast=fast)
    h.put(0, a)
    h.put(0x1000, c0)
    wa = 0x8000
    wstream.scatter(h.sim.window, wa, wstream.port_streams(w, cfg), cfg)
    h.run(_program(cfg, m, k, n, wa, True))
    want = (nx.matmul(a, w).astype(np.int64) + c0).astype(np.int32)  # wraps modulo 2**32
    assert np.array_equal(h.get(0x3000, np.int32, (m, n * c)), want)
