"""The docstring algorithms of systolica.numerics, transcribed literally in scalar Python integers.

These are what the RTL engineer follows.  Each scalar version here is written
from the docstring alone (Python ints, no numpy arithmetic) and must give the
same bits as the vectorised implementation, so the docstrings cannot drift
from the code.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from systolica import numerics as nx

I32 = st.integers(nx.INT32_MIN, nx.INT32_MAX)
BASE = [int(v) for v in nx.EXP_BASE]
DELTA = [int(v) for v in nx.EXP_DELTA]
SEED = [int(v) for v in nx.RSQRT_SEED]


def rr(x: int, s: int) -> int:
    return (x + (1 << (s - 1))) >> s if s > 0 else x << -s


def sat32(x: int) -> int:
    return max(nx.INT32_MIN, min(nx.INT32_MAX, x))


def recip(d: int) -> tuple[int, int]:
    d = max(d, 1)
    n = d.bit_length()
    m = d << (31 - n) if n <= 31 else d >> (n - 31)
    return (1 << 60) // m, n + 29


def rsqrt(v: int, e: int) -> tuple[int, int]:
    v = max(v, 1)
    K = (v.bit_length() - 1 + e) >> 1
    sh = 29 + e - 2 * K
    m = v << sh if sh >= 0 else v >> -sh
    y = SEED[(m >> 23) - 64]
    for _ in range(2):
        y2 = (y * y) >> 30
        t = (m * y2) >> 29
        y = (y * (3 * 2**30 - t)) >> 31
    return y, 30 + K


def exp2(u: int, ufrac: int, frac: int, down: int = 0) -> int:
    u = min(u, 0)
    ip, f = u >> ufrac, u & ((1 << ufrac) - 1)
    hi, lo = f >> (ufrac - 8), f & ((1 << (ufrac - 8)) - 1)
    p = BASE[hi] + rr(DELTA[hi] * lo, ufrac - 8)
    return rr(p, 30 - frac - ip + down)


def exp(x: int, frac: int) -> int:
    return exp2(rr(min(x, 0) * nx.LOG2E_Q30, 22), 24, frac)


def sigmoid(x: int) -> int:
    s = (1 << 60) // ((1 << 30) + exp(-abs(x), 30))
    return s if x >= 0 else (1 << 30) - s


def silu(x: int) -> int:
    return sat32(rr(x * sigmoid(x), 30))


def gelu(x: int) -> int:
    xc = max(-16 << 16, min(16 << 16, x))
    x3 = rr(rr(xc * xc, 16) * xc, 16)
    w = xc + rr(x3 * 48012366, 30)
    u2 = rr(w * 1713444047, 30)
    return sat32(rr(x * sigmoid(u2), 30))


def norm(x: list[int], gamma: list[int], beta: list[int] | None, eps_q32: int) -> list[int]:
    n = len(x)
    d = [xi << 8 for xi in x]
    if beta is not None:
        ry, rk = recip(n)
        sx = sum(x)
        c = max(0, sx.bit_length() - 31) if sx >= 0 else max(0, (-sx).bit_length() - 31)
        mu = rr((sx >> c) * ry, rk - c - 8)
        d = [di - mu for di in d]
    s = max(0, max(abs(di) for di in d).bit_length() - 23)
    ds = [rr(di, s) for di in d]
    ss = max(sum(v * v for v in ds) + rr(n * eps_q32, 2 * s - 16), 1)
    ry, rk = recip(n)
    c = max(0, ss.bit_length() - 31)
    y, k = rsqrt((ss >> c) * ry, c + 2 * s - 48 - rk)
    out = []
    for i, v in enumerate(ds):
        t = rr(v * y, k + 4 - s)
        o = rr(t * gamma[i], 20) + (beta[i] if beta is not None else 0)
        out.append(sat32(o))
    return out


def softmax(x: list[int]) -> list[int]:
    mx = max(x)
    e = [exp(sat32(v - mx), 30) for v in x]
    y, k = recip(sum(e))
    return [sat32(rr(v * y, k - 16)) for v in e]


def attn_tile(q, qexp, k, kexp, v, vexp, state, offset, causal):
    """One query row: q list[int], k/v lists of lists, state (m, l, o) or None."""
    m, lsum, o = state if state is not None else (nx.INT32_MIN, 0, [0] * len(q))
    valid = [not (causal and j > offset) for j in range(len(k))]
    if not any(valid):
        return m, lsum, o
    u = [sat32(rr(sum(a * b for a, b in zip(q, kj, strict=True)) * nx.LOG2E_Q30, 10 - qexp - kexp[j]))
         for j, kj in enumerate(k)]
    m1 = max([m] + [u[j] for j in range(len(k)) if valid[j]])
    a = exp2(sat32(m - m1), 20, 30)
    p = [exp2(u[j] - m1, 20, 28) if valid[j] else 0 for j in range(len(k))]
    # the weights with V's exponent applied, rounded once
    d = [exp2(u[j] - m1, 20, 28, max(-min(vexp[j], 3), 0)) if valid[j] else 0 for j in range(len(k))]
    big_l = rr(lsum * a, 30) + rr(sum(p), 8)
    big_o = []
    for i in range(len(q)):
        pv = sum((d[j] * v[j][i]) << max(min(vexp[j], 3), 0) for j in range(len(k)))
        big_o.append(rr(o[i] * a, 30) + rr(pv, 8))
    r = max(0, big_l.bit_length() - 21)
    return sat32(m1 + (r << 20)), rr(big_l, r), [sat32(rr(x, r)) for x in big_o]


def attn_finish(state):
    _, lsum, o = state
    if lsum <= 0:
        return [0] * len(o)
    y, k = recip(lsum)
    return [sat32(rr(x * y, k - 16)) for x in o]


# ------------------------------------------------------------------ the comparisons
@settings(max_examples=150, deadline=None)
@given(x=I32)
def test_scalar_activations(x):
    assert int(nx.silu(np.array([x]))[0]) == silu(x)
    assert int(nx.gelu(np.array([x]))[0]) == gelu(x)
    assert int(nx.sigmoid_fx(np.array([x]))[0]) == sigmoid(x)
    for frac in (16, 30):
        assert int(nx.exp_fx(np.array([x]), frac)[0]) == exp(x, frac)


@settings(max_examples=150, deadline=None)
@given(v=st.integers(1, 2**62), e=st.integers(-80, 80))
def test_scalar_recip_rsqrt(v, e):
    y, k = nx.recip(np.array([v]))
    assert (int(y[0]), int(k[0])) == recip(v)
    y, k = nx.rsqrt_fx(np.array([v]), np.array([e]))
    assert (int(y[0]), int(k[0])) == rsqrt(v, e)


@settings(max_examples=60, deadline=None)
@given(x=st.lists(I32, min_size=1, max_size=24), shift=st.integers(0, 31), eps=st.integers(0, 2**24 - 1),
       data=st.data())
def test_scalar_norms_and_softmax(x, shift, eps, data):
    x = [v >> shift for v in x]  # rows of every magnitude
    n = len(x)
    gamma = data.draw(st.lists(st.integers(-(2**20), 2**20), min_size=n, max_size=n))
    beta = data.draw(st.lists(st.integers(-(2**24), 2**24), min_size=n, max_size=n))
    xa = np.array([x], np.int64)
    assert nx.rmsnorm(xa, np.array(gamma), eps)[0].tolist() == norm(x, gamma, None, eps)
    assert nx.layernorm(xa, np.array(gamma), np.array(beta), eps)[0].tolist() == norm(x, gamma, beta, eps)
    assert nx.softmax(xa)[0].tolist() == softmax(x)


@settings(max_examples=40, deadline=None)
@given(hd=st.integers(1, 6), t=st.integers(1, 12), seed=st.integers(0, 2**32 - 1), offset=st.integers(-2, 14),
       causal=st.booleans(), tiles=st.integers(1, 3))
def test_scalar_attention(hd, t, seed, offset, causal, tiles):
    rng = np.random.default_rng(seed)
    q = rng.integers(-127, 128, (1, hd), dtype=np.int8)
    qe = rng.integers(-12, 0, 1, dtype=np.int8)
    state, sstate = None, None
    for _ in range(tiles):
        k = rng.integers(-127, 128, (t, hd), dtype=np.int8)
        v = rng.integers(-127, 128, (t, hd), dtype=np.int8)
        ke = rng.integers(-12, 0, t, dtype=np.int8)
        ve = rng.integers(-14, 5, t, dtype=np.int8)
        state = nx.attn_tile(q, qe, k, ke, v, ve, state, offset, causal)
        sstate = attn_tile(q[0].tolist(), int(qe[0]), k.tolist(), ke.tolist(), v.tolist(), ve.tolist(),
                           sstate, offset, causal)
        assert (int(state.m[0]), int(state.l[0]), state.o[0].tolist()) == (sstate[0], sstate[1], sstate[2])
    assert nx.attn_finish(state)[0].tolist() == attn_finish(sstate)
