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


@pytest.fixture(params=["int8", "float32"])
def stream_kernel(request, monkeypatch):
    """Read-only GEMM_STREAMs through the compiled int8 kernel (when numba is installed) or float32 BLAS."""
    from systolica.sim import golden_closures as gc

    if request.param == "int8":
        if gc.int8_kernel() is None:
            pytest.skip("numba is not installed: no int8 kernel")
    else:
        monkeypatch.setattr(gc, "_kernel", [None])
    return request.param


@pytest.mark.parametrize("acc", [False, True])
@pytest.mark.parametrize("weights", ["extreme", "small"])
def test_readonly_stream_long_k(weights, acc, stream_kernel):
    """Read-only weights with K = 1600: ``extreme`` rows of -128 (sums past 2**24: float32 sums chunks) and
    ``small`` ones (|w| <= 7: one float32 matmul, exact by the weights' L1 bound), fast == reference, also
    for a second run with other activations and a prefill-shaped m; through either kernel."""
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


def _pair(cfg, seed: int):
    """Two simulators, fast and reference, over equal random DRAM and equal random buffers."""
    rng = np.random.default_rng(seed)
    dram = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    sims = [GoldenSim(cfg, dram.copy(), fast=f) for f in (True, False)]
    for name in ("spad", "acc", "vbuf"):
        a = getattr(sims[0], name)
        a[...] = rng.integers(np.iinfo(a.dtype).min, np.iinfo(a.dtype).max, a.shape, dtype=a.dtype, endpoint=True)
        getattr(sims[1], name)[...] = a
    return sims


def _run_same(sims, text: str):
    from systolica.asm import asm

    res = [s.run(asm(text), raise_on_fault=False) for s in sims]
    assert (res[0].status, res[0].pc, res[0].message) == (res[1].status, res[1].pc, res[1].message)
    assert res[0].counters.to_dict() == res[1].counters.to_dict()
    for name in ("dram", "spad", "acc", "vbuf"):
        assert np.array_equal(getattr(sims[0], name), getattr(sims[1], name)), f"{name} differs"


@pytest.mark.parametrize("kind", ["random", "residual", "small", "mixed", "zero", "extreme"])
@pytest.mark.parametrize("eps", [0, 1, 42950, (1 << 24) - 1])
def test_rmsnorm_fast_path(kind, eps):
    """RMSNORM's closure (per-row scalars as Python integers) == numerics on rows that take every branch:
    shift 0 (|x| < 0.5) and positive, mixed within one instruction, all-zero rows, int32 extremes."""
    cfg = preset("tiny")
    c = cfg.cols
    sims = _pair(cfg, len(kind) * 7 + eps % 97)
    rng = np.random.default_rng(eps % 1000 + len(kind))
    rows, n = 5, 3 * c + 3  # a padded row: lanes past n are written 0
    lines = -(-n // c)
    x = {"random": lambda: rng.integers(-2**31, 2**31, (rows, lines * c)),
         "residual": lambda: rng.integers(-5 << 16, 5 << 16, (rows, lines * c)),
         "small": lambda: rng.integers(-2**14, 2**14, (rows, lines * c)),
         "mixed": lambda: rng.integers(-2**14, 2**14, (rows, lines * c)) << (rng.integers(0, 12, (rows, 1))),
         "zero": lambda: np.zeros((rows, lines * c), np.int64),
         "extreme": lambda: rng.choice([-2**31, 2**31 - 1, -1, 0, 1], (rows, lines * c))}[kind]()
    gamma = rng.integers(-2**31, 2**31, (lines * c,)) if kind == "extreme" else rng.integers(-3 << 16, 3 << 16,
                                                                                               (lines * c,))
    for s in sims:
        s.vbuf[100:100 + rows * lines] = x.reshape(-1, c).astype(np.int32)
        s.vbuf[90:90 + lines] = gamma.reshape(-1, c).astype(np.int32)
    _run_same(sims, f"RMSNORM dst=200 src=100 gamma=90 rows={rows} n={n} eps={eps}\n"
                    f"RMSNORM dst=300 src=100 gamma=90 rows=1 n={n} eps={eps}\nFINISH")


@pytest.mark.parametrize("seed", range(6))
def test_attn_out_fast_path(seed):
    """ATTN_OUT's closure == numerics.attn_finish on random states, rows with l <= 0 included."""
    cfg = preset("tiny")
    c = cfg.cols
    sims = _pair(cfg, 300 + seed)
    rng = np.random.default_rng(seed)
    nq, hd = 3, 2
    ml = np.zeros((nq, c), np.int64)
    ml[:, 1] = rng.choice([0, -5, 1, 2**20, 2**21, 2**31 - 1, int(rng.integers(1, 2**31))], nq)
    o = rng.integers(-2**31, 2**31, (nq * hd, c)) if seed % 2 else rng.integers(-2**22, 2**22, (nq * hd, c))
    for s in sims:
        s.vbuf[40:40 + nq] = ml.astype(np.int32)
        s.vbuf[40 + nq:40 + nq + nq * hd] = o.astype(np.int32)
    _run_same(sims, f"ATTN_OUT dst=80 state=40 nq={nq} hd={hd}\nFINISH")
