"""Golden simulator ops == the numerics functions, through real LOAD / compute / STORE programs."""

from __future__ import annotations

import numpy as np
from golden_harness import TINY, Harness, pad_cols, run_program
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolica import numerics as nx
from systolica.asm import asm
from systolica.config import preset
from systolica.isa import make
from systolica.layout import kv_tile
from systolica.program import Program
from systolica.sim.golden import GoldenSim

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
C = TINY.cols
seeds = st.integers(0, 2**32 - 1)


def fx(rng, shape, mag=8.0):
    """Random fixed-point values in +-mag."""
    return rng.integers(-int(mag * 2**16), int(mag * 2**16), shape).astype(np.int32)


def exp_lines(e: np.ndarray, cols: int = C) -> np.ndarray:
    """Exponent lines: one line per row, exponent in lane 0."""
    out = np.zeros((len(e), cols), np.int8)
    out[:, 0] = e
    return out


@SETTINGS
@given(st.sampled_from(["tiny", "default"]), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3),
       st.booleans(), seeds, st.integers(0, 2))
def test_gemm(cfg_name, m, k, n, acc, seed, pad):
    cfg = preset(cfg_name)
    c = cfg.cols
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k * c), dtype=np.int8)
    w = rng.integers(-128, 128, (n * c, k * c), dtype=np.int8)
    c0 = rng.integers(-2**31, 2**31, (m, n * c), dtype=np.int64).astype(np.int32)
    h = Harness(cfg)
    stride = (k + pad) * c  # A's DRAM rows padded: a stride larger than the row
    a_dram = np.zeros((m, stride), np.int8)
    a_dram[:, :k * c] = a
    h.put(0x2000, a_dram)
    h.put(0x3000, w)
    h.put(0x4000, c0)
    res = h.run("\n".join([
        f"LOAD buf=SPAD sram=0 dram=0x2000 rows={m} lines={k} stride={stride}",
        f"LOAD buf=SPAD sram=64 dram=0x3000 rows={n * c} lines={k} stride={k * c}",
        f"LOAD buf=ACC sram=0 dram=0x4000 rows={m} lines={n} stride={n * c * 4} @push_next",
        f"GEMM dst=0 a=0 w=64 m={m} k={k} n={n} acc={int(acc)} @pop_prev @push_next",
        f"STORE buf=ACC sram=0 dram=0x6000 rows={m} lines={n} stride={n * c * 4} @pop_prev",
        "FINISH"]))
    got = h.get(0x6000, np.int32, (m, n * c))
    want = nx.matmul(a, w)
    if acc:
        want = (c0.astype(np.int64) + want).astype(np.int32)  # the accumulator wraps modulo 2**32
    np.testing.assert_array_equal(got, want)
    assert res.counters.macs == m * k * c * n * c
    assert res.counters.dma_read_bytes == m * k * c + n * c * k * c + m * n * c * 4
    assert res.counters.dma_write_bytes == m * n * c * 4


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 40), seeds)
def test_requant(rows, lines, shift, seed):
    rng = np.random.default_rng(seed)
    acc = rng.integers(-2**31, 2**31, (rows, lines * C), dtype=np.int64).astype(np.int32)
    mult = rng.integers(0, 2**24, (1, lines * C)).astype(np.int32)
    e = rng.integers(-20, 6, rows).astype(np.int8)
    (got,) = run_program(Harness(), [("ACC", 8, acc), ("VBUF", 3, mult), ("SPAD", 100, exp_lines(e))],
                         f"REQUANT dst=50 src=8 mult=3 exps=100 rows={rows} lines={lines} shift={shift}",
                         [("VBUF", 50, rows, lines)])
    np.testing.assert_array_equal(got, nx.requant(acc, mult[0], e, shift))


@SETTINGS
@given(st.integers(1, 4), st.integers(0, 3), seeds, st.sampled_from([1e-3, 1.0, 100.0, 30000.0]))
def test_quant(rows, lines, seed, mag):
    rng = np.random.default_rng(seed)
    x = fx(rng, (rows, lines * C), mag)
    x[0] = 0 if rows > 1 else x[0]  # an all-zero row has its own exponent
    h = Harness()
    h.sim.spad[:] = 99  # stale lanes must be overwritten
    q, el = run_program(h, [("VBUF", 10, x)] if lines else [], f"QUANT dst=7 src=10 exps=200 rows={rows} lines={lines}",
                        [("SPAD", 7, rows, lines), ("SPAD", 200, rows, 1)])
    wq, we = nx.quant_rows(x)
    np.testing.assert_array_equal(q.reshape(rows, lines * C), wq)
    np.testing.assert_array_equal(el, exp_lines(we))


@SETTINGS
@given(st.sampled_from(["ADD", "MUL"]), st.integers(1, 4), st.integers(1, 3), st.booleans(), st.integers(0, 40),
       seeds, st.sampled_from([1.0, 30000.0]))
def test_add_mul(op, rows, lines, bcast, shift, seed, mag):
    rng = np.random.default_rng(seed)
    a = fx(rng, (rows, lines * C), mag)
    b = fx(rng, (1 if bcast else rows, lines * C), mag)
    extra = f" shift={shift}" if op == "MUL" else ""
    (got,) = run_program(Harness(), [("VBUF", 0, a), ("VBUF", 40, b)],
                         f"{op} dst=80 a=0 b=40 rows={rows} lines={lines} bcast={int(bcast)}{extra}",
                         [("VBUF", 80, rows, lines)])
    want = nx.add(a, b) if op == "ADD" else nx.mul(a, b, shift)
    np.testing.assert_array_equal(got, want)


@SETTINGS
@given(st.sampled_from(["SILU", "GELU"]), st.integers(1, 4), st.integers(1, 3), seeds, st.booleans())
def test_silu_gelu_in_place(op, rows, lines, seed, in_place):
    x = fx(np.random.default_rng(seed), (rows, lines * C), 20.0)
    dst = 5 if in_place else 300
    (got,) = run_program(Harness(), [("VBUF", 5, x)], f"{op} dst={dst} src=5 rows={rows} lines={lines}",
                         [("VBUF", dst, rows, lines)])
    np.testing.assert_array_equal(got, nx.silu(x) if op == "SILU" else nx.gelu(x))


@SETTINGS
@given(st.sampled_from(["RMSNORM", "LAYERNORM"]), st.integers(1, 4), st.integers(1, 11), seeds,
       st.integers(1, 2**24 - 1))
def test_norms_padded_rows(op, rows, n, seed, eps):
    rng = np.random.default_rng(seed)
    lines = -(-n // C)
    x = fx(rng, (rows, n), 4.0)
    gamma, beta = fx(rng, (1, n), 2.0), fx(rng, (1, n), 1.0)
    garbage = np.full((rows, lines * C), 12345, np.int32)  # the destination's padding lanes must become 0
    g = np.concatenate([pad_cols(gamma, C), pad_cols(beta, C)], axis=1) if op == "LAYERNORM" else pad_cols(gamma, C)
    src = pad_cols(x, C)
    src[:, n:] = 777  # lanes past n are ignored
    (got,) = run_program(Harness(), [("VBUF", 0, src), ("VBUF", 60, g), ("VBUF", 90, garbage)],
                         f"{op} dst=90 src=0 gamma=60 rows={rows} n={n} eps={eps}", [("VBUF", 90, rows, lines)])
    want = nx.rmsnorm(x, gamma[0], eps) if op == "RMSNORM" else nx.layernorm(x, gamma[0], beta[0], eps)
    np.testing.assert_array_equal(got, pad_cols(want, C))


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 13), seeds)
def test_softmax_and_argmax(rows, n, seed):
    rng = np.random.default_rng(seed)
    lines = -(-n // C)
    x = fx(rng, (rows, n), 10.0)
    x[0, rng.integers(0, n)] = x[0].max()  # ties: ARGMAX takes the first maximum
    src = pad_cols(x, C)
    src[:, n:] = 2**31 - 1  # lanes past n must not win or count
    h = Harness()
    h.sim.vbuf[:] = -5
    p, idx = run_program(h, [("VBUF", 0, src)],
                         f"SOFTMAX dst=100 src=0 rows={rows} n={n}\nARGMAX dst=200 src=0 rows={rows} n={n}",
                         [("VBUF", 100, rows, lines), ("VBUF", 200, rows, 1)])
    np.testing.assert_array_equal(p, pad_cols(nx.softmax(x), C))
    want = np.zeros((rows, C), np.int32)
    want[:, 0] = nx.argmax(x)
    np.testing.assert_array_equal(idx, want)


@SETTINGS
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), seeds)
def test_rope(rows, heads, hd, seed):
    rng = np.random.default_rng(seed)
    head_dim = hd * C
    x = fx(rng, (rows, heads * head_dim), 8.0)
    table = nx.rope_table(rng.integers(0, 4096, rows), head_dim, 10000.0)
    (got,) = run_program(Harness(), [("VBUF", 0, x), ("VBUF", 500, table)],
                         f"ROPE dst=0 src=0 table=500 rows={rows} heads={heads} hd={hd}",
                         [("VBUF", 0, rows, heads * hd)])
    np.testing.assert_array_equal(got, nx.rope(x, table))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.integers(1, 2), st.integers(0, 3), st.lists(st.integers(0, 8), min_size=1, max_size=3),
       st.booleans(), st.integers(-3, 20), seeds)
def test_attn_tiles_and_out(nq, hd, page_log2, ts, causal, offset, seed):
    """ATTN over several tiles then ATTN_OUT == attn_tile chained from None, then attn_finish."""
    rng = np.random.default_rng(seed)
    p = 1 << page_log2
    ts = [min(t, p) for t in ts]
    head_dim = hd * C
    q = rng.integers(-127, 128, (nq, head_dim), dtype=np.int8)
    qe = rng.integers(-9, -3, nq).astype(np.int8)
    lay = kv_tile(page_log2, hd)
    h = Harness()
    state, tiles = None, []
    for i, t in enumerate(ts):
        k = rng.integers(-127, 128, (p, head_dim), dtype=np.int8)
        v = rng.integers(-127, 128, (p, head_dim), dtype=np.int8)
        ke, ve = rng.integers(-9, -3, p).astype(np.int8), rng.integers(-9, 1, p).astype(np.int8)
        tile = np.zeros((lay.lines, C), np.int8)
        tile[lay.k:lay.v] = k.reshape(-1, C)
        tile[lay.v:lay.kexp] = v.reshape(-1, C)
        tile[lay.kexp:lay.vexp] = exp_lines(ke)
        tile[lay.vexp:] = exp_lines(ve)
        tiles.append(("SPAD", 200 + i * lay.lines, tile))
        off = offset - i * p
        state = nx.attn_tile(q, qe, k[:t], ke[:t], v[:t], ve[:t], state, off, causal)
    body = [f"ATTN q=0 qexp=100 kv={200 + i * lay.lines} state=40 nq={nq} hd={hd} t={t} page_log2={page_log2} "
            f"offset={offset - i * p} causal={int(causal)} init={int(i == 0)}" for i, t in enumerate(ts)]
    body.append(f"ATTN_OUT dst=700 state=40 nq={nq} hd={hd}")
    h.sim.vbuf[40:40 + nq * (1 + hd)] = 4242  # init=1 must ignore what is there
    ml, o, out = run_program(h, [("SPAD", 0, q), ("SPAD", 100, exp_lines(qe))] + tiles, "\n".join(body),
                             [("VBUF", 40, nq, 1), ("VBUF", 40 + nq, nq, hd), ("VBUF", 700, nq, hd)])
    np.testing.assert_array_equal(ml[:, 0], state.m)
    np.testing.assert_array_equal(ml[:, 1], state.l)
    assert not ml[:, 2:].any()
    np.testing.assert_array_equal(o, state.o)
    np.testing.assert_array_equal(out, nx.attn_finish(state))
    assert h.sim.counters.attn_macs == 2 * nq * sum(ts) * head_dim


def test_buffers_persist_between_runs_and_counters_reset():
    h = Harness()
    h.put(0, np.arange(8, dtype=np.int32))
    r1 = h.run("LOAD buf=VBUF sram=0 dram=0 rows=2 lines=1 stride=16\nFINISH")
    r2 = h.run("ADD dst=2 a=0 b=1 rows=1 lines=1 @push_next\nSTORE buf=VBUF sram=2 dram=0x80 rows=1 lines=1 "
               "@pop_prev\nFINISH")
    assert list(h.get(0x80, np.int32, 4)) == [4, 6, 8, 10]
    assert r1.counters.dma_read_bytes == 32 and r2.counters.dma_read_bytes == 0
    assert r2.counters.per_op == {"ADD": 1, "STORE": 1, "FINISH": 1}


def test_a_patched_program_checks_only_its_new_words(monkeypatch):
    # the runtime patches a few words of the decode program per token: the rest is not decoded again (a LOAD
    # whose DRAM address alone changed is checked from the old word's entry, its window checks only), and a
    # patched word that faults still faults at its own pc
    import systolica.sim.golden as golden

    seen = []
    real = golden._check_word
    monkeypatch.setattr(golden, "_check_word", lambda sim, w: seen.append(w) or real(sim, w))
    h = Harness()
    prog = "LOAD buf=VBUF sram=0 dram={} rows=1 lines=1\nLOAD buf=VBUF sram=1 dram=0x40 rows=1 lines=1\nFINISH"
    first = asm(prog.format("0x0"))
    h.run(prog.format("0x0"))
    assert len(seen) == 3
    h.run(prog.format("0x20"))
    assert not set(seen[3:]) & set(first) and np.array_equal(h.sim.vbuf[0], h.get(0x20, np.int32, h.cols))
    r = h.run(prog.format("0x7"), raise_on_fault=False)  # a misaligned DMA address
    assert not set(seen[3:]) & set(first) and not r.ok and r.pc == 0 and r.status.name == "DMA_ALIGN"


def test_overlapping_store_rows_write_in_order():
    h = Harness()
    h.sim.spad[0:2] = [[1, 2, 3, 4], [5, 6, 7, 8]]
    h.run("STORE buf=SPAD sram=0 dram=0x100 rows=2 lines=1 stride=0\nFINISH")
    assert list(h.get(0x100, np.int8, 4)) == [5, 6, 7, 8]


def test_double_buffered_pipeline():
    """The VTA pattern: load tile i+1 while tile i computes; buffers handed back with tokens."""
    h = Harness()
    rng = np.random.default_rng(1)
    xs = fx(rng, (6, C), 3.0)
    h.put(0, xs)
    lines = []
    for i in range(6):
        slot = (i % 2) * 4
        wait = "@pop_next" if i >= 2 else ""  # the slot is free once compute used it two tiles ago
        lines += [f"LOAD buf=VBUF sram={slot} dram={16 * i} rows=1 lines=1 {wait} @push_next",
                  f"SILU dst={100 + i} src={slot} rows=1 lines=1 @pop_prev @push_prev" + (" @push_next" if i == 5 else "")]
    lines += ["STORE buf=VBUF sram=100 dram=0x400 rows=6 lines=1 stride=16 @pop_prev",
              "NOP engine=LOAD @pop_next", "NOP engine=LOAD @pop_next", "FINISH"]
    res = h.run("\n".join(lines))
    assert res.ok and res.tokens_left == (0, 0, 0, 0)
    np.testing.assert_array_equal(h.get(0x400, np.int32, (6, C)), nx.silu(xs))


def test_streamed_decode_gemm_at_model_scale():
    """A decode-style matrix-vector product as the compiler emits it for a 576 x 6144 weight: W streamed
    tile by tile (double-buffered, token-synchronized) through the scratchpad, GEMM m=1 per tile."""
    cfg = preset("default")
    c, k, n, tiles = cfg.cols, 576 // cfg.cols, 4, 192  # n lines = 32 output rows (18 KiB) per tile
    rng = np.random.default_rng(7)
    x = rng.integers(-127, 128, (1, k * c), dtype=np.int8)
    w = rng.integers(-127, 128, (tiles * n * c, k * c), dtype=np.int8)
    sim = GoldenSim(cfg, 1 << 22)
    sim.window[:x.size] = x.view(np.uint8).ravel()
    sim.window[4096:4096 + w.size] = w.view(np.uint8).ravel()
    tile_bytes, tile_lines = n * c * k * c, n * c * k
    ins = [make("LOAD", buf=0, sram=0, dram=0, rows=1, lines=k)]
    for t in range(tiles):
        slot = k + (t % 2) * tile_lines
        ins.append(make("LOAD", buf=0, sram=slot, dram=4096 + t * tile_bytes, rows=n * c, lines=k, stride=k * c,
                        pop_next=t >= 2, push_next=True))
        ins.append(make("GEMM", dst=t * n, a=0, w=slot, m=1, k=k, n=n, pop_prev=True, push_prev=t + 2 < tiles,
                        push_next=t == tiles - 1))
    ins += [make("STORE", buf=1, sram=0, dram=1 << 21, rows=1, lines=tiles * n, pop_prev=True), make("FINISH")]
    res = sim.run(Program.from_instrs(ins, cfg))
    got = sim.window[1 << 21:(1 << 21) + 4 * tiles * n * c].view(np.int32)
    np.testing.assert_array_equal(got, nx.matmul(x, w)[0])
    assert res.counters.macs == w.size and res.tokens_left == (0, 0, 0, 0)
