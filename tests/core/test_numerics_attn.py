"""Streaming attention of systolica.numerics (ATTN / ATTN_OUT) against float softmax attention.

The bound asserted here is in the "Measured errors" table of docs/quantization.md.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolica import numerics as nx

LSB = 2.0 ** -nx.FX_FRAC


# ------------------------------------------------------------------ streaming attention
def _qkv(rng, nq, hd, t, qs=1.0, ks=1.0, vs=1.0):
    q = nx.quant_rows(nx.to_fx(rng.normal(size=(nq, hd)) * qs))
    k = nx.quant_rows(nx.to_fx(rng.normal(size=(t, hd)) * ks))
    v = nx.quant_rows(nx.to_fx(rng.normal(size=(t, hd)) * vs))
    return q, k, v


def _attend(q, k, v, page, pos, causal=True):
    (qq, qe), (kq, ke), (vq, ve) = q, k, v
    state = None
    for s0 in range(0, kq.shape[0], page):
        sl = slice(s0, s0 + page)
        state = nx.attn_tile(qq, qe, kq[sl], ke[sl], vq[sl], ve[sl], state, pos - s0, causal)
    return state


def _float_attention(q, k, v, n):
    deq = [a.astype(np.float64) * np.exp2(e.astype(np.float64))[:, None] for a, e in (q, k, v)]
    sc = deq[0] @ deq[1][:n].T
    w = np.exp(sc - sc.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)) @ deq[2][:n], np.abs(deq[2][:n]).max()


@pytest.mark.parametrize("nq,hd,t,page", [(3, 64, 300, 64), (1, 32, 50, 16), (2, 128, 600, 128),
                                          (4, 64, 1000, 1000), (3, 16, 70, 1)])
@pytest.mark.parametrize("qs,vs", [(0.3, 0.1), (1.0, 1.0), (2.0, 10.0), (0.05, 15.0)])
def test_attention_matches_float(nq, hd, t, page, qs, vs):
    rng = np.random.default_rng(nq * 1000 + t + int(qs * 10) + int(vs))
    q, k, v = _qkv(rng, nq, hd, t, qs, qs, vs)
    pos = t - 1 - int(rng.integers(0, t // 3 + 1))
    st = _attend(q, k, v, page, pos)
    assert np.all(st.l >= 2**20) and np.all(st.l <= 2**21)
    out = nx.attn_finish(st)
    ref, vmax = _float_attention(q, k, v, pos + 1)
    # documented: |error| <= 1 lsb + 1e-5 * max|v|
    assert np.abs(nx.from_fx(out) - ref).max() <= LSB + 1e-5 * vmax


def test_attention_causal_mask_and_all_masked_tile():
    rng = np.random.default_rng(11)
    q, k, v = _qkv(rng, 2, 32, 40)
    st = _attend(q, k, v, 16, 20)
    k2 = (k[0].copy(), k[1])
    v2 = (v[0].copy(), v[1])
    k2[0][21:] = 127
    v2[0][21:] = -127  # tokens after the query position must not matter
    st2 = _attend(q, k2, v2, 16, 20)
    for a, b in zip(st, st2, strict=True):
        np.testing.assert_array_equal(a, b)
    (qq, qe), (kq, ke), (vq, ve) = q, k, v
    same = nx.attn_tile(qq, qe, kq[:8], ke[:8], vq[:8], ve[:8], st, -1, True)  # every token masked
    for a, b in zip(same, st, strict=True):
        np.testing.assert_array_equal(a, b)
    empty = nx.attn_tile(qq, qe, kq[:8], ke[:8], vq[:8], ve[:8], None, -3, True)
    assert empty.m.tolist() == [nx.INT32_MIN] * 2 and not empty.l.any() and not empty.o.any()
    np.testing.assert_array_equal(nx.attn_finish(empty), 0)
    # non-causal ignores the offset
    a = nx.attn_tile(qq, qe, kq, ke, vq, ve, None, -5, False)
    b = nx.attn_tile(qq, qe, kq, ke, vq, ve, None, 100, True)
    np.testing.assert_array_equal(nx.attn_finish(a), nx.attn_finish(b))


def test_attention_rows_are_independent():
    rng = np.random.default_rng(12)
    q, k, v = _qkv(rng, 5, 64, 200, 1.5, 1.5, 2.0)
    full = nx.attn_finish(_attend(q, k, v, 64, 150))
    for r in range(5):
        one = nx.attn_finish(_attend((q[0][r:r + 1], q[1][r:r + 1]), k, v, 64, 150))
        np.testing.assert_array_equal(one[0], full[r])


def test_attention_long_uniform_context_does_not_overflow():
    t, page, hd = 65535, 4095, 8  # every score equal: l would reach 65535 without renormalisation
    kq = np.zeros((t, hd), np.int8)
    vq = np.full((t, hd), 127, np.int8)
    vq[:, 1] = -127
    zeros = np.zeros(t, np.int8)
    q = (np.zeros((2, hd), np.int8), np.zeros(2, np.int8))
    st = _attend(q, (kq, zeros), (vq, np.full(t, -1, np.int8)), page, t)
    assert np.all(st.l <= 2**21) and np.all(np.abs(st.o.astype(np.int64)) < 2**31)
    out = nx.from_fx(nx.attn_finish(st))
    np.testing.assert_allclose(out[:, :2], [[63.5, -63.5]] * 2, atol=LSB)


def test_attention_extreme_scores_saturate():
    q = (np.full((1, 4), 127, np.int8), np.array([20], np.int8))
    k = (np.array([[127] * 4, [-127] * 4], np.int8), np.array([20, 20], np.int8))
    v = (np.array([[1, 2, 3, 4], [-4, -3, -2, -1]], np.int8), np.array([0, 0], np.int8))
    out = nx.attn_finish(nx.attn_tile(*q, *k, *v, None, 5, True))
    np.testing.assert_array_equal(out, [[65536, 131072, 196608, 262144]])


def test_attention_rejects_bad_shapes():
    q = (np.zeros((2, 8), np.int8), np.zeros(2, np.int8))
    with pytest.raises(ValueError, match="q\\[nq,hd\\]"):
        nx.attn_tile(*q, np.zeros((3, 4), np.int8), np.zeros(3), np.zeros((3, 4), np.int8), np.zeros(3),
                     None, 0, False)
    with pytest.raises(ValueError, match="4095"):
        nx.attn_tile(*q, np.zeros((4096, 8), np.int8), np.zeros(4096), np.zeros((4096, 8), np.int8),
                     np.zeros(4096), None, 0, False)


@settings(max_examples=40, deadline=None)
@given(nq=st.integers(1, 4), hd=st.integers(1, 20), t=st.integers(1, 90), page=st.integers(1, 40),
       seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([0.01, 0.5, 2.0, 6.0]))
def test_attention_property(nq, hd, t, page, seed, scale):
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, nq, hd, t, scale, scale, scale)
    pos = int(rng.integers(0, t))
    st = _attend(q, k, v, page, pos)
    assert np.all(st.l >= 2**20) and np.all(st.l <= 2**21)
    ref, vmax = _float_attention(q, k, v, pos + 1)
    assert np.abs(nx.from_fx(nx.attn_finish(st)) - ref).max() <= LSB + 1e-5 * vmax


def test_attention_large_values_and_long_context():
    rng = np.random.default_rng(13)
    q, k, v = _qkv(rng, 2, 64, 16384, 1.0, 1.0, 150.0)  # |v| up to ~700: vexp up to 3
    assert v[1].max() >= 1
    st = _attend(q, k, v, 256, 16383)
    assert np.all(st.l >= 2**20) and np.all(st.l <= 2**21)
    ref, vmax = _float_attention(q, k, v, 16384)
    assert np.abs(nx.from_fx(nx.attn_finish(st)) - ref).max() <= LSB + 1e-5 * vmax
    # exponents beyond ATTN_VEXP_MAX are clamped (|v| >= 1024 is outside the format)
    (qq, qe), (kq, ke), (vq, _) = q, k, v
    big = nx.attn_tile(qq, qe, kq[:4], ke[:4], vq[:4], np.full(4, 9), None, 10, True)
    at3 = nx.attn_tile(qq, qe, kq[:4], ke[:4], vq[:4], np.full(4, nx.ATTN_VEXP_MAX), None, 10, True)
    np.testing.assert_array_equal(big.o, at3.o)
