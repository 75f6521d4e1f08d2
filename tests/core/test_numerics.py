"""The integer semantics of systolica.numerics: exactness, edge cases, and documented error bounds.

Error bounds asserted here are the "Measured errors" table of docs/quantization.md
(the measured maximum, rounded up a little so a new random draw does not trip them).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from systolica import numerics as nx

I64 = st.integers(nx.INT64_MIN, nx.INT64_MAX)
I32 = st.integers(nx.INT32_MIN, nx.INT32_MAX)
LSB = 2.0 ** -nx.FX_FRAC


def _py_rshift_round(x: int, s: int) -> int:
    if s > 0:
        return (x + (1 << (s - 1))) >> s
    return max(nx.INT64_MIN, min(nx.INT64_MAX, x << -s))


# ------------------------------------------------------------------ formats, rounding, saturation
def test_constants_and_fx_round_trip():
    assert (nx.FX_FRAC, nx.TRIG_FRAC, nx.EPS_FRAC) == (16, 14, 32)
    assert (nx.INT32_MIN, nx.INT32_MAX) == (-(2**31), 2**31 - 1)
    x = np.array([0.0, 1.0, -1.5, 2.0**-17, -(2.0**-17), 1e9, -1e9])
    fx = nx.to_fx(x)
    assert fx.dtype == np.int32
    assert fx.tolist() == [0, 65536, -98304, 1, 0, nx.INT32_MAX, nx.INT32_MIN]  # half up, saturated
    assert nx.from_fx(fx)[:3].tolist() == [0.0, 1.0, -1.5]


@settings(max_examples=300, deadline=None)
@given(x=I64, s=st.integers(-70, 70))
def test_rshift_round_matches_python_ints(x, s):
    assert int(nx.rshift_round(np.int64(x), s)) == _py_rshift_round(x, s)
    # the array path (per-element shifts) gives the same bits
    arr = nx.rshift_round(np.array([x, x], np.int64), np.array([s, 0]))
    assert arr.tolist() == [_py_rshift_round(x, s), x]


def test_rshift_round_edges():
    assert nx.rshift_round(np.array([5, -5, 6, -6, 1, -1]), 1).tolist() == [3, -2, 3, -3, 1, 0]
    assert nx.rshift_round(np.array([nx.INT64_MIN, nx.INT64_MAX]), 64).tolist() == [0, 0]
    assert nx.rshift_round(np.array([nx.INT64_MIN, nx.INT64_MAX]), 63).tolist() == [-1, 1]
    assert nx.rshift_round(np.array([7, -7, 0]), 0).tolist() == [7, -7, 0]
    assert nx.rshift_round(np.array([3, -3, 0]), -62).tolist() == [nx.INT64_MAX, nx.INT64_MIN, 0]


def test_sat32_and_add_mul_saturate():
    assert nx.sat32(np.array([2**40, -(2**40), 5])).tolist() == [nx.INT32_MAX, nx.INT32_MIN, 5]
    a = np.array([nx.INT32_MAX, nx.INT32_MIN, 3], np.int32)
    assert nx.add(a, np.array([1, -1, 4], np.int32)).tolist() == [nx.INT32_MAX, nx.INT32_MIN, 7]
    assert nx.mul(a, a, 0).tolist() == [nx.INT32_MAX, nx.INT32_MAX, 9]
    assert nx.mul(np.array([3]), np.array([1]), 1).tolist() == [2]  # 1.5 rounds half up
    assert nx.mul(np.array([-3]), np.array([1]), 1).tolist() == [-1]
    assert nx.mul(np.array([3]), np.array([5]), -2).tolist() == [60]
    with pytest.raises(TypeError, match="integer array"):
        nx.add(np.array([1.0]), np.array([1]))


@settings(max_examples=200, deadline=None)
@given(x=st.integers(0, nx.INT64_MAX))
def test_bitlen_and_clz(x):
    assert int(nx.bitlen(np.int64(x))) == x.bit_length()
    assert int(nx.bitlen(np.int64(-x))) == x.bit_length()
    if x < 2**32:
        assert int(nx.clz(np.int64(x))) == 32 - x.bit_length()


def test_bitlen_near_powers_of_two():
    v = np.array([(1 << k) + d for k in range(1, 63) for d in (-1, 0, 1)], np.int64)
    assert nx.bitlen(v).tolist() == [int(x).bit_length() for x in v]


# ------------------------------------------------------------------ GEMM and requantization
@settings(max_examples=50, deadline=None)
@given(m=st.integers(1, 5), n=st.integers(1, 5), k=st.integers(1, 3000), seed=st.integers(0, 2**32 - 1))
def test_matmul_exact(m, n, k, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    out = nx.matmul(a, w)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a.astype(np.int64) @ w.astype(np.int64).T)


def test_matmul_wraps_mod_2_32():
    k = 140_000  # (-128)*(-128)*k = 2293760000 > INT32_MAX: the int32 adder wraps
    a = np.full((1, k), -128, np.int8)
    w = np.stack([np.full(k, -128, np.int8), np.full(k, 127, np.int8)])
    exact = a.astype(np.int64) @ w.astype(np.int64).T
    wrapped = ((exact + 2**31) % 2**32) - 2**31
    np.testing.assert_array_equal(nx.matmul(a, w), wrapped)
    assert int(nx.matmul(a, w)[0, 0]) < 0


def test_matmul_rejects_bad_input():
    with pytest.raises(ValueError, match="int8 values"):
        nx.matmul(np.array([[200]]), np.array([[1]]))
    with pytest.raises(ValueError, match=r"a\[M,K\]"):
        nx.matmul(np.zeros((2, 3), np.int8), np.zeros((2, 4), np.int8))


@settings(max_examples=200, deadline=None)
@given(acc=hnp.arrays(np.int32, (3, 4), elements=I32), mult=hnp.arrays(np.int32, 4, elements=I32),
       exps=hnp.arrays(np.int8, 3), shift=st.integers(0, 255))
def test_requant_matches_python_ints(acc, mult, exps, shift):
    out = nx.requant(acc, mult, exps, shift)
    assert out.dtype == np.int32
    for i in range(3):
        for j in range(4):
            v = _py_rshift_round(int(acc[i, j]) * int(mult[j]), shift - int(exps[i]))
            assert int(out[i, j]) == max(nx.INT32_MIN, min(nx.INT32_MAX, v))


# ------------------------------------------------------------------ row quantization
def _check_quant(x):
    q, e = nx.quant_rows(x)
    assert q.dtype == np.int8 and e.dtype == np.int8
    assert q.min(initial=0) >= -127 and q.max(initial=0) <= 127  # -128 never appears
    x64 = x.astype(np.int64)
    for r in range(x.shape[0]):
        if not x64[r].any():
            assert e[r] == nx.QUANT_ZERO_EXP and not q[r].any()
            continue
        s = int(e[r]) + nx.FX_FRAC
        for qv, xv in zip(q[r].tolist(), x64[r].tolist(), strict=True):  # round trip within half an lsb of 2**e
            if s >= 0:
                assert 2 * abs(qv * 2**s - xv) <= 2**s
            else:
                assert qv == xv * 2**-s  # small values are exact
        # the exponent is the smallest that fits: one less overflows
        smaller = nx.rshift_round(x64[r], s - 1)
        assert smaller.max() > 127 or smaller.min() < -127


@settings(max_examples=150, deadline=None)
@given(x=hnp.arrays(np.int32, st.tuples(st.integers(1, 4), st.integers(1, 40)), elements=I32))
def test_quant_rows_properties(x):
    _check_quant(x)


def test_quant_rows_edges():
    x = np.array([[0, 0, 0], [1, -1, 0], [nx.INT32_MAX, nx.INT32_MIN, 0], [-255, 0, 0], [254, 0, 0],
                  [127, -127, 0], [-128, 0, 0]], np.int32)
    _check_quant(x)
    q, e = nx.quant_rows(x)
    assert q[1].tolist() == [64, -64, 0] and e[1] == -22  # small rows are exact
    assert q[5].tolist() == [127, -127, 0] and e[5] == -16
    assert q[6].tolist() == [-64, 0, 0] and e[6] == -15  # -128 needs the next exponent
    np.testing.assert_array_equal(nx.dequant_rows(q[:2], e[:2]), x[:2])


def test_dequant_rows_inverts_quant():
    rng = np.random.default_rng(1)
    q = rng.integers(-127, 128, (5, 16)).astype(np.int8)
    e = np.array([-20, -16, -9, 0, 5], np.int8)
    q2, e2 = nx.quant_rows(nx.dequant_rows(q, e))
    np.testing.assert_array_equal(nx.dequant_rows(q2, e2), nx.dequant_rows(q, e))


def test_quant_weight():
    rng = np.random.default_rng(2)
    w = rng.normal(size=(16, 64)) * rng.uniform(0.001, 0.3, (16, 1))
    w[3] = 0.0
    wq, mult, S = nx.quant_weight(w)
    assert wq.dtype == np.int8 and mult.dtype == np.int32
    assert nx.FX_FRAC <= S <= 62 and mult.max() < 2**24 and mult.max() >= 2**23
    assert np.abs(wq).max() <= 127 and mult[3] == 0 and not wq[3].any()
    scale = mult * 2.0**-S
    err = np.abs(wq * scale[:, None] - w)
    assert np.all(err <= scale[:, None] * 0.5 + 1e-12)
    assert np.all(np.abs(scale - np.abs(w).max(axis=1) / 127) <= 2.0 ** -(S + 1))  # mult rounded once
    with pytest.raises(ValueError, match="non-finite"):
        nx.quant_weight(np.array([[np.nan]]))
    with pytest.raises(ValueError, match="too large"):
        nx.quant_weight(np.array([[1e6]]))


def test_argmax_first_max():
    x = np.array([[1, 5, 5, 2], [-3, -3, -9, -3], [nx.INT32_MIN] * 4], np.int32)
    assert nx.argmax(x).tolist() == [1, 0, 0]


# ------------------------------------------------------------------ reciprocal, rsqrt, exp
def test_recip_is_the_exact_normalised_quotient():
    rng = np.random.default_rng(3)
    d = np.concatenate([rng.integers(1, 2**62, 20000), np.arange(1, 5000), 2 ** np.arange(0, 62),
                        2 ** np.arange(1, 62) - 1])
    y, k = nx.recip(d)
    for dv, yv, kv in zip(d[::97].tolist(), y[::97].tolist(), k[::97].tolist(), strict=True):
        n = dv.bit_length()
        m = dv << (31 - n) if n <= 31 else dv >> (n - 31)
        assert yv == (1 << 60) // m and kv == n + 29
    rel = np.abs(y * np.exp2(-k.astype(float)) * d - 1)
    assert rel.max() < 2**-29
    assert nx.recip(np.array([0]))[0][0] == 2**30  # d <= 0 counts as 1


def test_recip_newton_equals_the_quotient():
    rng = np.random.default_rng(4)
    m = np.concatenate([rng.integers(2**30, 2**31, 300_000), np.arange(2**30, 2**30 + 20_000),
                        np.arange(2**31 - 20_000, 2**31), (np.arange(256) << 22) + 2**30,
                        (np.arange(1, 257) << 22) + 2**30 - 1])
    np.testing.assert_array_equal(nx.recip_newton(m), (1 << 60) // m)
    assert nx.RECIP_SEED.size <= 256
    with pytest.raises(ValueError, match="2\\*\\*30 <= m"):
        nx.recip_newton(np.array([5]))


def _seed_edges():
    """Both ends of the range and of every seed's interval, where the seed is worst."""
    starts = (np.arange(256) << 22) + 2**30
    return np.concatenate([np.arange(2**30, 2**30 + 20_000), np.arange(2**31 - 20_000, 2**31), starts, (starts - 1)[1:],
                           starts + (1 << 22) - 1, starts + (1 << 21)])  # starts[0] - 1 is below the range


def test_recip_seeded_equals_the_quotient():
    m = np.concatenate([np.random.default_rng(5).integers(2**30, 2**31, 1 << 20), _seed_edges()])
    np.testing.assert_array_equal(nx.recip_seeded(m), (1 << 60) // m)
    with pytest.raises(ValueError, match="2\\*\\*30 <= m"):
        nx.recip_seeded(np.array([2**31]))


@pytest.mark.slow
def test_recip_seeded_equals_the_quotient_everywhere():
    """Every m in [2**30, 2**31): the activation unit's quotient has no other check of its rare corners."""
    step = 1 << 24
    for lo in range(2**30, 2**31, step):
        m = np.arange(lo, lo + step, dtype=np.int64)
        bad = np.flatnonzero(nx.recip_seeded(m) != (1 << 60) // m)
        assert bad.size == 0, f"recip_seeded wrong at m = {m[bad[:5]].tolist()}"


def test_rsqrt_fx_relative_error():
    rng = np.random.default_rng(5)
    v = np.concatenate([rng.integers(1, 2**62, 50000), 2 ** rng.integers(0, 62, 2000),
                        2 ** rng.integers(1, 62, 2000) - 1, np.arange(1, 5000)])
    e = rng.integers(-80, 80, v.size)
    y, k = nx.rsqrt_fx(v, e)
    assert y.max() <= 2**30
    ref = v.astype(float) ** -0.5 * np.exp2(-e / 2)
    rel = np.abs(y * np.exp2(-k.astype(float)) / ref - 1)
    assert rel.max() < 2**-28  # measured 2**-28.6
    assert nx.RSQRT_SEED.size <= 256


def test_exp2_fx_down_is_one_rounding_of_fewer_fraction_bits():
    """``down`` joins exp2_fx's final shift: ``down = k`` is ``frac - k`` fraction bits (one rounding), and a shift past
    the value's bits gives 0."""
    u = np.arange(-40 << 20, 1, 4099, dtype=np.int64)
    for k in (0, 1, 5, 17, 28):
        assert np.array_equal(nx.exp2_fx(u, 20, 28, down=k), nx.exp2_fx(u, 20, 28 - k))
    down = np.arange(u.size) % 70  # per element, as ATTN's V exponents
    want = [int(nx.exp2_fx(np.array([x]), 20, 28 - d)[0]) if d <= 28 else None for x, d in zip(u, down, strict=True)]
    got = nx.exp2_fx(u, 20, 28, down=down)
    assert all(w is None or g == w for g, w in zip(got.tolist(), want, strict=True))
    assert np.all(got[down >= 40] == 0)
    with pytest.raises(ValueError, match="down"):
        nx.exp2_fx(u, 20, 28, down=-1)


def test_exp_fx_accuracy_and_shape():
    x = np.arange(-30 * 65536, 1, 7, dtype=np.int64)
    ref = np.exp(x / 65536.0)
    for frac in (30, 22, 16):
        e = nx.exp_fx(x, frac)
        err = np.abs(e - ref * 2**frac)
        assert np.all(err <= 0.5 + 1e-6 * ref * 2**frac)  # measured: 1e-6 relative plus the output rounding
    e30 = nx.exp_fx(x, 30)
    assert np.all(np.diff(e30) >= 0)  # monotone
    assert int(nx.exp_fx(np.array([0]), 30)[0]) == 2**30  # exp(0) is exactly one
    assert nx.exp_fx(np.array([5 << 16]), 16).tolist() == [65536]  # positive inputs count as 0
    assert nx.exp_fx(np.array([nx.INT32_MIN]), 30).tolist() == [0]
    assert nx.EXP_BASE.size == nx.EXP_DELTA.size == 256
    with pytest.raises(ValueError, match="frac"):
        nx.exp_fx(np.array([0]), 31)


# ------------------------------------------------------------------ activations
_XS = np.arange(-24 * 65536, 24 * 65536, 37, dtype=np.int64)


def test_sigmoid_symmetric_and_accurate():
    s = nx.sigmoid_fx(_XS)
    np.testing.assert_array_equal(s + nx.sigmoid_fx(-_XS), 2**30)
    ref = 1 / (1 + np.exp(-_XS / 65536.0))
    assert np.abs(s - ref * 2**30).max() < 300  # measured 252 (2.3e-7)
    assert np.all(np.diff(s) >= 0)


def test_silu_error():
    y = nx.silu(_XS)
    xr = nx.from_fx(_XS)
    err = np.abs(nx.from_fx(y) - xr / (1 + np.exp(-xr))) / LSB
    assert err.max() <= 0.55  # measured 0.513 lsb
    big = np.array([nx.INT32_MIN, -(2**30), 2**30, nx.INT32_MAX, 30 << 16])
    assert nx.silu(big).tolist() == [0, 0, 2**30, nx.INT32_MAX, 30 << 16]


def test_gelu_error():
    y = nx.gelu(_XS)
    xr = nx.from_fx(_XS)
    ref = 0.5 * xr * (1 + np.tanh(math.sqrt(2 / math.pi) * (xr + 0.044715 * xr**3)))
    err = np.abs(nx.from_fx(y) - ref) / LSB
    assert err.max() <= 0.7  # measured 0.668 lsb
    big = np.array([nx.INT32_MIN, -(2**30), 2**30, nx.INT32_MAX])
    assert nx.gelu(big).tolist() == [0, 0, 2**30, nx.INT32_MAX]


@settings(max_examples=100, deadline=None)
@given(x=hnp.arrays(np.int32, 8, elements=I32))
def test_activations_stay_in_range(x):
    for f in (nx.silu, nx.gelu):
        y = f(x).astype(np.int64)
        assert y.dtype == np.int64
        xs = x.astype(np.int64)
        assert np.all(np.abs(y) <= np.abs(xs) + 1)  # |act(x)| <= |x|: no overflow anywhere


# ------------------------------------------------------------------ norms and softmax
def _norm_cases():
    rng = np.random.default_rng(6)
    for n in (1, 2, 7, 64, 576, 1536):
        for scale in (1e-3, 1e-2, 0.1, 1.0, 30.0, 1000.0):
            x = rng.normal(size=(4, n)) * scale
            if n > 4:
                x[0, 3] *= 8  # an outlier
                x[1] = 0.0
                x[1, 2] = scale  # one non-zero element
            g = nx.to_fx(rng.uniform(0.2, 3.0, n))
            b = nx.to_fx(rng.normal(size=n))
            for eps in (1e-5, 1e-6):
                yield nx.to_fx(x), g, b, round(eps * 2**32)


def test_rmsnorm_error():
    worst = 0.0
    for x, g, _, eq in _norm_cases():
        xr, gr = nx.from_fx(x), nx.from_fx(g)
        ref = xr / np.sqrt((xr**2).mean(axis=1, keepdims=True) + eq * 2.0**-32) * gr
        err = np.abs(nx.from_fx(nx.rmsnorm(x, g, eq)) - ref) / LSB
        bound = 0.65 + 2.0**-22 * np.abs(ref).max(axis=1, keepdims=True) / LSB  # measured 0.637 lsb
        assert np.all(err <= bound), (err.max(), x.shape)
        worst = max(worst, err.max())
    assert worst > 0.3  # the comparison is live


def test_layernorm_error():
    for x, g, b, eq in _norm_cases():
        x = nx.add(x, nx.to_fx(0.37 * np.abs(nx.from_fx(x)).max()))  # a row mean to remove
        xr, gr, br = nx.from_fx(x), nx.from_fx(g), nx.from_fx(b)
        xm = xr - xr.mean(axis=1, keepdims=True)
        sd = np.sqrt((xm**2).mean(axis=1, keepdims=True) + eq * 2.0**-32)
        ref0 = xm / sd * gr
        err = np.abs(nx.from_fx(nx.layernorm(x, g, b, eq)) - (ref0 + br)) / LSB
        # the mean is kept to 2**-24: its rounding moves every output by up to gamma * 2**-25 / sd
        bound = 0.65 + 2.0**-22 * np.abs(ref0).max(axis=1, keepdims=True) / LSB + gr * 2.0**-25 / sd / LSB
        assert np.all(err <= bound), (err.max(), x.shape)


def test_norm_edges():
    z = np.zeros((2, 8), np.int32)
    g = nx.to_fx(np.ones(8))
    np.testing.assert_array_equal(nx.rmsnorm(z, g, 0), 0)  # zero rows, eps 0: no division by zero
    np.testing.assert_array_equal(nx.layernorm(z, g, nx.to_fx(np.full(8, 0.5)), 0), nx.to_fx(np.full((2, 8), 0.5)))
    x = np.full((1, 4), nx.INT32_MAX, np.int32)
    np.testing.assert_array_equal(nx.rmsnorm(x, g[:4], 0), 65536)  # extremes: exactly 1
    with pytest.raises(ValueError, match="eps_q32"):
        nx.rmsnorm(x, g[:4], 2**24)
    with pytest.raises(ValueError, match="2-D"):
        nx.layernorm(np.zeros(4, np.int32), g[:4], g[:4], 0)


def test_softmax_error():
    rng = np.random.default_rng(7)
    for n in (1, 2, 10, 300, 49152):
        for scale in (0.01, 1.0, 5.0, 30.0, 1000.0):
            x = nx.to_fx(rng.normal(size=(3, n)) * scale)
            xr = nx.from_fx(x)
            ref = np.exp(xr - xr.max(axis=1, keepdims=True))
            ref /= ref.sum(axis=1, keepdims=True)
            p = nx.softmax(x)
            assert np.abs(nx.from_fx(p) - ref).max() <= 0.55 * LSB  # measured 0.500 lsb
            assert np.all(np.abs(p.sum(axis=1, dtype=np.int64) - 65536) <= max(1, n // 2))
    ext = np.array([[nx.INT32_MIN, nx.INT32_MAX, nx.INT32_MAX]], np.int32)
    assert nx.softmax(ext).tolist() == [[0, 32768, 32768]]


# ------------------------------------------------------------------ RoPE
def test_rope_table_and_rotation():
    pos = np.array([0, 1, 7, 100, 8191])
    tab = nx.rope_table(pos, 64, 10000.0)
    assert tab.shape == (5, 64) and tab.dtype == np.int32
    ang = pos[:, None] * 10000.0 ** (-np.arange(0, 64, 2) / 64)
    assert np.abs(tab - np.concatenate([np.cos(ang), np.sin(ang)], axis=1) * 2**14).max() <= 0.5
    rng = np.random.default_rng(8)
    x = nx.to_fx(rng.normal(size=(5, 3 * 64)) * 4)
    y = nx.rope(x, tab)
    c, s = tab[:, None, :32] / 2**14, tab[:, None, 32:] / 2**14
    xr = nx.from_fx(x).reshape(5, 3, 32, 2)
    ref = np.stack([xr[..., 0] * c - xr[..., 1] * s, xr[..., 0] * s + xr[..., 1] * c], -1).reshape(5, -1)
    assert np.abs(nx.from_fx(y) - ref).max() <= 0.5 * LSB  # exact product, one rounding
    c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
    true = np.stack([xr[..., 0] * c - xr[..., 1] * s, xr[..., 0] * s + xr[..., 1] * c], -1).reshape(5, -1)
    pair = np.abs(xr).sum(-1).repeat(2, axis=-1).reshape(5, -1)
    assert np.all(np.abs(nx.from_fx(y) - true) <= 0.5 * LSB + pair * 2.0**-15)  # table rounding
    np.testing.assert_array_equal(y[0], x[0])  # position 0 is the identity
    with pytest.raises(ValueError, match="multiple of head_dim"):
        nx.rope(x[:, :100], tab)
    with pytest.raises(ValueError, match="even"):
        nx.rope_table(pos, 63, 10000.0)


# ------------------------------------------------------------------ the bits themselves
SEMANTICS_DIGEST = "4316b0d8d321cfd6215a585d82043ea0c9958f9d2afb1404ea41cb3d26ec312a"


def test_semantics_fingerprint():
    """The exact bits of every op on fixed inputs (same on numpy 1.24 and 2.x).

    This digest changes only when the integer semantics change.  The golden
    simulator, the quantized reference and the RTL all follow these bits: a
    change must be deliberate, announced, and the digest updated with it.
    """
    import hashlib

    rng = np.random.default_rng(2026)
    x = rng.integers(-(2**31), 2**31, (6, 96), dtype=np.int64).astype(np.int32) >> rng.integers(0, 31, (6, 1))
    x = x.astype(np.int32)
    q, e = nx.quant_rows(x)
    outs = [q, e, nx.requant(x, x[0], e, 20), nx.silu(x), nx.gelu(x), nx.softmax(x),
            nx.rmsnorm(x, x[1] >> 12, 42950), nx.layernorm(x, x[1] >> 12, x[2], 4295),
            nx.rope(x, nx.rope_table(np.arange(6), 32, 10000.0)), nx.exp_fx(-np.abs(x), 22),
            *nx.recip(np.abs(x.astype(np.int64)) + 1), *nx.rsqrt_fx(np.abs(x.astype(np.int64)) + 1, 3)]
    kq, ke = nx.quant_rows(x[:, :32])
    vq, ve = nx.quant_rows(x[:, 32:64] >> 8)
    st = nx.attn_tile(kq[:2], ke[:2], kq, ke, vq, ve, None, 3, True)
    st = nx.attn_tile(kq[:2], ke[:2], kq, ke, vq, ve, st, 9, True)
    outs += [*st, nx.attn_finish(st)]
    # a 64-token tile with negative V exponents (the weights d_j = p_j * 2**vexp_j, rounded once: since
    # 2026-12-05; the former rounding of each product gives other bits in 16 of these 64 outputs)
    r2 = np.random.default_rng(7)
    kk, kv_e = r2.integers(-127, 128, (64, 32)).astype(np.int8), r2.integers(-9, -5, 64).astype(np.int8)
    vv, vv_e = r2.integers(-127, 128, (64, 32)).astype(np.int8), r2.integers(-12, -3, 64).astype(np.int8)
    small = nx.attn_tile(kk[:2], kv_e[:2], kk, kv_e, vv, vv_e, None, 63, True)
    outs += [*small, nx.attn_finish(small)]
    h = hashlib.sha256()
    for o in outs:
        h.update(np.ascontiguousarray(o, dtype=np.int64).tobytes())
    assert h.hexdigest() == SEMANTICS_DIGEST
