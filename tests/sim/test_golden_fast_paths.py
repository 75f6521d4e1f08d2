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


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request, monkeypatch):
    """The closures with their compiled kernels (numba, when installed) or with the numpy formulas only."""
    from systolica.sim import golden_kernels as gc

    if request.param == "compiled":
        if gc.int8_kernel() is None:
            pytest.skip("no compiled kernels (numba is not installed, or SYSTOLICA_GOLDEN_NUMBA=0)")
    else:
        monkeypatch.setenv("SYSTOLICA_GOLDEN_NUMBA", "0")
        monkeypatch.setattr(gc, "_jitted", {})
    return request.param


@pytest.mark.parametrize("ports", [1, 2, 4])
@pytest.mark.parametrize("acc", [False, True])
@pytest.mark.parametrize("weights", ["extreme", "small"])
def test_readonly_stream_long_k(weights, acc, ports, kernels):
    """Read-only weights with K = 1600: ``extreme`` rows of -128 (sums past 2**24: float32 sums chunks) and
    ``small`` ones (|w| <= 7: one float32 matmul, exact by the weights' L1 bound), fast == reference, also
    for a second run with other activations and a prefill-shaped m; through either kernel, over 1, 2 or 4 ports
    (one port: the stream is read in place)."""
    cfg = preset("tiny").replace(name=f"tiny{ports}", dma_ports=ports)
    c = cfg.cols
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


def test_one_port_tiles_of_other_shapes_share_converted_bands(kernels):
    """One port's read-only weights read as tiles of 2, 6 and 3 bands (prefill's and decode's tilings of one matrix
    share the converted bands), then the same bytes as tiles of half the K (bands of another shape: converted
    apart), and the first tiling again: after every GEMM_STREAM, fast == reference."""
    cfg = preset("tiny")
    c = cfg.cols
    k, n = 6, 6
    rng = np.random.default_rng(5)
    w = rng.integers(-128, 128, (n * c, k * c), dtype=np.int8)
    dram = np.zeros(1 << 17, np.uint8)
    wa = 0x8000
    wstream.scatter(dram, wa, wstream.port_streams(w, cfg), cfg)
    end = wstream_end({"w": wa, "n": n, "k": k}, cfg)
    dram[:2 * k * c] = rng.integers(0, 256, 2 * k * c, dtype=np.uint8)  # the activations A (2 rows)
    band = k * c * c
    tiles = [(0, 2, k), (2, 2, k), (4, 2, k), (0, n, k), (1, 3, k), (0, 2, k // 2), (3, 2, k // 2), (2, 2, k)]
    texts = [_stream_program(cfg, 2, kt, nt, wa + j * band, False) for j, nt, kt in tiles]
    sims = []
    for fast in (True, False):
        h = Harness(cfg, dram_bytes=dram.size)
        h.sim = GoldenSim(cfg, dram.copy(), fast=fast, readonly=[(wa, end - wa)])
        sims.append(h)
    for text in texts:
        for h in sims:
            h.run(text)
        _assert_same(sims[0].snapshot(), sims[1].snapshot())
    if kernels == "compiled":
        assert sims[0].sim._nmajor, "the one-port tiles were not read through the shared converted bands"


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
def test_rmsnorm_fast_path(kind, eps, kernels):
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
def test_attn_out_fast_path(seed, kernels):
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
    _run_same(sims, f"ATTN_OUT dst=42 state=40 nq={nq} hd={hd}\nFINISH")  # the result overlaps the state


@pytest.mark.parametrize("seed", range(10))
def test_attn_tiles_fast_path(seed, kernels):
    """ATTN tiles (init, continuations, empty and causal ones) and ATTN_OUT through the compiled tile and
    through the numpy formulas == the reference, on realistic exponents (seeds 0-5) and on any int8
    exponents (6-9: shifts out of every fast range, V exponents below -63)."""
    cfg = preset("tiny")
    c = cfg.cols
    sims = _pair(cfg, 500 + seed)
    rng = np.random.default_rng(seed)
    nq, hd, page_log2 = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(0, 4))
    p = 1 << page_log2
    tile_lines = (2 * hd + 2) * p
    wild = seed >= 6
    body = []
    for j in range(4):
        kv = 300 + j % 2 * tile_lines
        kvals = rng.integers(-128, 128, (tile_lines, c)).astype(np.int8)
        if not wild:
            kvals[2 * hd * p:(2 * hd + 1) * p, 0] = rng.integers(-12, -2, p)  # k exponents
            kvals[(2 * hd + 1) * p:, 0] = rng.integers(*[(-8, 0), (0, 4), (-3, 4)][seed % 3], p)  # v exponents
        qv = rng.integers(-128, 128, (nq * hd, c)).astype(np.int8)
        qe = rng.integers(-128, 128, (nq, c)).astype(np.int8)
        if not wild:
            qe[:, 0] = rng.integers(-12, -2, nq)
        for s in sims:
            s.spad[kv:kv + tile_lines] = kvals
            s.spad[200:200 + nq * hd] = qv
            s.spad[260:260 + nq] = qe
        t = int(rng.integers(0, p + 1))
        body.append(f"ATTN q=200 qexp=260 kv={kv} state=4 nq={nq} hd={hd} t={t} page_log2={page_log2} "
                    f"offset={int(rng.integers(-2, p + 2))} causal={int(rng.integers(0, 2))} init={int(j == 0)}")
        _run_same(sims, body[-1] + "\nFINISH")  # each tile on its own: the state is compared tile by tile
    _run_same(sims, "\n".join(body + [f"ATTN_OUT dst=100 state=4 nq={nq} hd={hd}", "FINISH"]))


_ROWS = {
    "random": lambda rng, shape: rng.integers(-2**31, 2**31, shape),
    "small": lambda rng, shape: rng.integers(-200, 200, shape),
    "extreme": lambda rng, shape: rng.choice([-2**31, 2**31 - 1, -1, 0, 1, 2**30], shape),
    "zero_row": lambda rng, shape: np.vstack([rng.integers(-2**20, 2**20, (shape[0] - 1, shape[1])),
                                              np.zeros((1, shape[1]), np.int64)]),
    "ties": lambda rng, shape: (rng.integers(-127, 128, shape) << 12) + (1 << 11),
}


@pytest.mark.parametrize("split", [0, 1])
@pytest.mark.parametrize("kind", sorted(_ROWS))
def test_quant_fast_path(split, kind, kernels):
    """QUANT (compiled or numpy) == numerics on rows chosen to hit its edges; the last instruction's exponent
    lines overlap its result lines (written in the reference's order)."""
    cfg = preset("tiny")
    c = cfg.cols
    sims = _pair(cfg, split * 10 + len(kind))
    rng = np.random.default_rng(split * 10 + len(kind))
    rows, lines = 3, 4
    x = _ROWS[kind](rng, (rows, lines * c))
    for s in sims:
        s.vbuf[8:8 + rows * lines] = x.reshape(rows * lines, c).astype(np.int32)
    _run_same(sims, f"QUANT dst=0 src=8 exps=100 rows={rows} lines={lines} split={split}\n"
                    f"QUANT dst=40 src=8 exps=120 rows=1 lines={lines} split={split}\n"
                    f"QUANT dst=60 src=8 exps=62 rows={rows} lines={lines} split={split}\nFINISH")


@pytest.mark.parametrize("kind", sorted(_ROWS))
@pytest.mark.parametrize("shift", [0, 1, 20, 40, 63, 64, 100])
def test_requant_fast_path(kind, shift, kernels):
    """REQUANT (compiled or numpy) == numerics: any exponents (shifts below 1 and past 63 included), int32
    extremes; the last instruction's result overlaps its multipliers."""
    cfg = preset("tiny")
    c = cfg.cols
    sims = _pair(cfg, shift + len(kind))
    rng = np.random.default_rng(shift * 3 + len(kind))
    rows, lines = 3, 4
    acc = _ROWS[kind](rng, (rows, lines * c))
    mult = _ROWS[kind](rng, (1, lines * c))
    exps = np.zeros((rows, c), np.int8)
    exps[:, 0] = rng.integers(-128, 128, rows) if kind == "random" else rng.integers(-12, 12, rows)
    for s in sims:
        s.acc[8:8 + rows * lines] = acc.reshape(-1, c).astype(np.int32)
        s.vbuf[300:300 + lines] = mult.reshape(-1, c).astype(np.int32)
        s.spad[50:50 + rows] = exps
    _run_same(sims, f"REQUANT dst=100 src=8 mult=300 exps=50 rows={rows} lines={lines} shift={shift}\n"
                    f"REQUANT dst=200 src=8 mult=300 exps=50 rows=1 lines={lines} shift={shift}\n"
                    f"REQUANT dst=298 src=8 mult=300 exps=50 rows={rows} lines={lines} shift={shift}\nFINISH")


@pytest.mark.parametrize("kind", sorted(_ROWS))
def test_elementwise_fast_paths(kind, kernels):
    """SILU, ROPE, ADD and MUL (compiled or numpy) == the reference: in place, apart, and overlapping by a line
    (where a kernel writing as it reads would differ: those take the reference order)."""
    cfg = preset("tiny")
    c = cfg.cols
    sims = _pair(cfg, 900 + len(kind))
    rng = np.random.default_rng(len(kind))
    x = _ROWS[kind](rng, (12, 4 * c))
    table = rng.integers(-(1 << 14), 1 << 14, (3, 4 * c))
    for s in sims:
        s.vbuf[100:148] = x.reshape(-1, c).astype(np.int32)
        s.vbuf[160:172] = table.reshape(-1, c).astype(np.int32)
    body = []
    for dst in (100, 101, 300):
        body += [f"SILU dst={dst} src=100 rows=3 lines=4",
                 f"ROPE dst={dst} src=104 table=160 rows=3 heads=2 hd=2",
                 f"ADD dst={dst} a=100 b=120 rows=2 lines=4 bcast=0",
                 f"ADD dst={dst} a=100 b=101 rows=2 lines=4 bcast=1",
                 f"MUL dst={dst} a=120 b=100 rows=3 lines=4 shift=17 bcast=0",
                 f"MUL dst={dst} a=100 b=100 rows=3 lines=4 shift=0 bcast=1"]
    for line in body:
        _run_same(sims, line + "\nFINISH")


@pytest.mark.parametrize("target", ["moved", "misaligned", "past_window", "read_only"])
def test_patched_dma_address(target):
    """A run of a program whose LOAD and STORE addresses the host patched (as the KV-cache writes of a decode
    step are), after a run of the original: the retargeted closures == the reference, and an address that
    faults reports the same fault, PC and state (or the same ReadOnlyStore refusal)."""
    from systolica.asm import asm
    from systolica.isa import decode, encode
    from systolica.sim.golden_ops import ReadOnlyStore

    cfg = preset("tiny")
    c = cfg.cols
    rng = np.random.default_rng(3)
    dram = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    text = "\n".join(["LOAD buf=VBUF sram=10 dram=0x1000 rows=2 lines=3 stride=0x100 @push_next",
                      "ADD dst=40 a=10 b=13 rows=1 lines=3 bcast=0 @pop_prev @push_next",
                      f"STORE buf=VBUF sram=40 dram=0x2000 rows=1 lines=3 stride={12 * c} @pop_prev",
                      f"STORE buf=SPAD sram=0 dram=0x3000 rows=2 lines=2 stride={4 * c}", "FINISH"])
    words = asm(text)
    new = {"moved": 0x2400, "misaligned": 0x2002, "past_window": 0xFFF0, "read_only": 0x8040}[target]
    patched = list(words)
    for pc, value in ((0, 0x1200), (2, new), (3, 0x3100)):
        ins = decode(words[pc])
        patched[pc] = encode(type(ins)(ins.op, {**ins.fields, "dram": value}, **ins.flags()))
    out = []
    for fast in (True, False):
        sim = GoldenSim(cfg, dram.copy(), fast=fast, readonly=[(0x8000, 0x1000)])
        sim.run(words)
        try:
            res = sim.run(patched, raise_on_fault=False)
            got = (res.status, res.pc, res.message, res.counters.to_dict())
        except ReadOnlyStore as e:
            got = ("ReadOnlyStore", str(e))
        out.append((got, sim.dram.copy(), sim.spad.copy(), sim.acc.copy(), sim.vbuf.copy()))
    assert out[0][0] == out[1][0]
    for x, y in zip(out[0][1:], out[1][1:], strict=True):
        assert np.array_equal(x, y)
