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
        for qv, xv in zip(q[r].tolist(), x64[r].tolist()):  # round trip within half an lsb of 2**e
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
