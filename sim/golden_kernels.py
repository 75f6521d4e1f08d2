"""Compiled kernels of the golden simulator's closures (numba, optional): exact integer formulas of
:mod:`systolica.numerics`, in plain Python that numba compiles.

Their Python source is their definition; :func:`compiled` gives a kernel compiled (cached on disk), or ``None``
when numba is not installed or ``SYSTOLICA_GOLDEN_NUMBA=0`` -- the closures of
:mod:`systolica.sim.golden_closures` then take their numpy formulas, exact as well.  Every kernel is tested
against the reference ops, with and without numba (``tests/sim/test_golden_fast_paths.py``).
"""

from __future__ import annotations

import os

import numpy as np

from systolica import numerics as nx

__all__ = ["compiled", "int8_kernel", "attn_kernel", "KERNEL_MAX_M", "KERNEL_MAX_K", "gemm_nk_int8", "attn_tile_i64",
           "attn_out_i64", "binary_i64", "quant_i64", "requant_i64", "rmsnorm_i64", "rope_i64", "silu_i64"]

_RSQRT_SEED_A, _EXP_BASE_A, _EXP_DELTA_A = nx.RSQRT_SEED.copy(), nx.EXP_BASE.copy(), nx.EXP_DELTA.copy()  # kernels' tables
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

KERNEL_MAX_M = 16  # rows of A up to which the int8 kernel beats float32 BLAS (measured: 4x at m=2, even at 16)
KERNEL_MAX_K = ((1 << 31) - 1) >> 14  # |sum of K int8 products| < 2**31: the kernel's int32 sums never overflow
_jitted: dict = {}  # Python kernel -> its numba compilation, or None


_HELPERS = ("_rr_i64", "_sat32_i64", "_exp2_i64", "_bitlen_i64", "_quant_shift_i64", "_rsqrt_i64")  # scalar kernels the others call (compiled first, by name)


def compiled(fn):
    """``fn`` compiled by numba (cached on disk), or ``None`` when numba is not installed or
    ``SYSTOLICA_GOLDEN_NUMBA=0``: the closures then take their numpy formulas, exact as well.

    The kernels are plain Python (their source is the definition); the scalar helpers they call are
    compiled under their own names in this module's namespace first, where numba looks them up."""
    if fn not in _jitted:
        out = None
        if os.environ.get("SYSTOLICA_GOLDEN_NUMBA", "1") != "0":
            try:
                import numba
            except ImportError:
                pass
            else:
                g = globals()
                for name in _HELPERS:
                    if not hasattr(g[name], "py_func"):
                        g[name] = numba.njit(cache=True, nogil=True)(g[name])
                out = numba.njit(cache=True, nogil=True, boundscheck=False)(fn)
        _jitted[fn] = out
    return _jitted[fn]


def gemm_nk_int8(a, wnk, res):  # pragma: no cover - runs compiled (numba), its Python source is the definition
    """``res = a @ wnk.T`` for int8 ``a (m, K)``, int8 ``wnk (N, K)``, int32 ``res (m, N)``: exact integer sums.

    One dot product per output over a contiguous weight row (measured 1.5 to 4x the K-major row updates of
    before at m = 1: the weights stream once and the sums stay in registers)."""
    m, kk = a.shape
    nn = wnk.shape[0]
    for i in range(m):
        ai = a[i]
        ri = res[i]
        for n in range(nn):
            wr = wnk[n]
            d = np.int32(0)
            for k in range(kk):
                d += np.int32(np.int16(ai[k]) * np.int16(wr[k]))  # |a * w| <= 2**14, |sum| < 2**31 (K <= KERNEL_MAX_K)
            ri[n] = d


def int8_kernel():
    """The compiled int8 GEMM of read-only weights (:func:`compiled`), or ``None``: then float32 BLAS, exact too,
    reads four times the bytes."""
    return compiled(gemm_nk_int8)


def _rr_i64(x, s):  # pragma: no cover - compiled (numba) with its callers
    """numerics.rshift_round of one int64 by any shift ``s`` (``s <= 0``: a left shift saturated to int64)."""
    if s >= 64:
        return np.int64(0)
    if s > 0:
        return (x >> s) + ((x >> (s - 1)) & 1)
    if s == 0 or x == 0:
        return x
    if s < -63:
        return np.int64(_INT64_MIN) if x < 0 else np.int64(_INT64_MAX)
    left = np.int64(np.uint64(x) << np.uint64(-s))
    if (left >> -s) == x:
        return left
    return np.int64(_INT64_MIN) if x < 0 else np.int64(_INT64_MAX)


def _sat32_i64(x):  # pragma: no cover - compiled
    return max(min(x, np.int64(nx.INT32_MAX)), np.int64(nx.INT32_MIN))


def _exp2_i64(u, ufrac, frac, base, delta, down=0):  # pragma: no cover - compiled
    """numerics.exp2_fx of one int64 (``8 <= ufrac <= 24``, ``0 <= frac <= 30``, ``down >= 0``)."""
    u = min(u, 0)
    ip = u >> ufrac
    f = u & ((1 << ufrac) - 1)
    lob = ufrac - 8
    hi = f >> lob
    p = base[hi] + _rr_i64(delta[hi] * (f & ((1 << lob) - 1)), lob)
    sh = min((30 - frac) - ip + down, 40)
    return (p + ((np.int64(1) << sh) >> 1)) >> sh


def attn_tile_i64(q, qexp, k, kexp, v, vexp, ml, o, init, base, delta):  # pragma: no cover - compiled
    """numerics.attn_tile over the ``t = k.shape[0] > 0`` valid tokens of a tile, in place on the state lines
    ``ml`` (lane 0 m, lane 1 l, the other lanes written 0) and ``o``, one query row at a time in int64 scalars
    (the dot products are exact: ``|q.k| <= hdim * 2**14 < 2**31``)."""
    nq, hdim = q.shape
    t = k.shape[0]
    u = np.empty(t, np.int64)
    pv = np.empty(hdim, np.int64)
    for i in range(nq):
        qe = np.int64(qexp[i])
        m1 = np.int64(nx.INT32_MIN) if init else np.int64(ml[i, 0])
        m_old = m1
        for j in range(t):
            d = np.int64(0)
            for c in range(hdim):
                d += np.int64(q[i, c]) * np.int64(k[j, c])
            x = _sat32_i64(_rr_i64(d * np.int64(nx.LOG2E_Q30), (30 - nx.ATTN_M_FRAC) - qe - np.int64(kexp[j])))
            u[j] = x
            m1 = max(m1, x)
        a = _exp2_i64(_sat32_i64(m_old - m1), nx.ATTN_M_FRAC, nx.EXP_FRAC, base, delta)
        psum = np.int64(0)
        pv[:] = 0
        for j in range(t):
            pj = _exp2_i64(u[j] - m1, nx.ATTN_M_FRAC, nx.ATTN_P_FRAC, base, delta)
            psum += pj
            e = min(np.int64(vexp[j]), np.int64(nx.ATTN_VEXP_MAX))
            dj = _exp2_i64(u[j] - m1, nx.ATTN_M_FRAC, nx.ATTN_P_FRAC, base, delta, max(-e, np.int64(0)))
            left = max(e, np.int64(0))
            for c in range(hdim):
                pv[c] += (dj * np.int64(v[j, c])) << left
        guard = nx.ATTN_P_FRAC - nx.ATTN_FRAC
        l_old = np.int64(0) if init else np.int64(ml[i, 1])
        big_l = _rr_i64(l_old * a, nx.EXP_FRAC) + _rr_i64(psum, guard)
        r = np.int64(0)
        al = abs(big_l)
        while al > 0:  # bitlen
            r += 1
            al >>= 1
        r = max(r - nx.ATTN_L_BITS, 0)
        for c in range(hdim):
            o_old = np.int64(0) if init else np.int64(o[i, c])
            big_o = _rr_i64(o_old * a, nx.EXP_FRAC) + _rr_i64(pv[c], guard)
            o[i, c] = _sat32_i64(_rr_i64(big_o, r))
        ml[i, :] = 0
        ml[i, 0] = _sat32_i64(m1 + (r << nx.ATTN_M_FRAC))
        ml[i, 1] = _sat32_i64(_rr_i64(big_l, r))


def _bitlen_i64(a):  # pragma: no cover - compiled
    """numerics.bitlen of one non-negative int64."""
    n = np.int64(0)
    while a > 0:
        n += 1
        a >>= 1
    return n


def _quant_shift_i64(row):  # pragma: no cover - compiled
    """numerics.quant_rows' shift of one row: ``bitlen(max|x|) - 7``, one more if rounding leaves +-127."""
    hi = np.int64(row[0])
    lo = hi
    for c in range(1, row.shape[0]):
        x = np.int64(row[c])
        hi = max(hi, x)
        lo = min(lo, x)
    s = _bitlen_i64(max(hi, -lo)) - 7
    if _rr_i64(hi, s) > 127 or _rr_i64(lo, s) < -127:
        s += 1
    return s


def requant_i64(src, mult, exps, shift, out):  # pragma: no cover - compiled
    """numerics.requant: ``out = sat32(rshift_round(src * mult[col], shift - exps[row]))`` (|product| <= 2**62)."""
    rows, n = src.shape
    for r in range(rows):
        s = np.int64(shift) - np.int64(exps[r])
        for c in range(n):
            out[r, c] = _sat32_i64(_rr_i64(np.int64(src[r, c]) * np.int64(mult[c]), s))


def quant_i64(src, dst, exps, split):  # pragma: no cover - compiled
    """numerics.quant_rows (``split``: quant_rows_split) of ``src (rows, n)`` into ``dst`` (int8 rows, the
    residuals' after the rows' with ``split``) and the exponent lines ``exps`` (lane 0, the others 0)."""
    rows, n = src.shape
    q = np.empty(n, np.int64)
    res = np.empty(n, np.int64)
    for i in range(rows):
        s = _quant_shift_i64(src[i])
        e = np.int8(s - nx.FX_FRAC)
        for c in range(n):
            q[c] = np.int64(np.int8(_rr_i64(np.int64(src[i, c]), s)))
        exps[i, :] = 0
        exps[i, 0] = e
        if split:  # the residual sat32(x - dequant_rows(q, e)), quantized the same way
            sd = -(np.int64(e) + nx.FX_FRAC)
            for c in range(n):
                res[c] = _sat32_i64(np.int64(src[i, c]) - _sat32_i64(_rr_i64(q[c], sd)))
            s2 = _quant_shift_i64(res)
            for c in range(n):
                dst[rows + i, c] = np.int8(_rr_i64(res[c], s2))
            exps[rows + i, :] = 0
            exps[rows + i, 0] = np.int8(s2 - nx.FX_FRAC)
        for c in range(n):
            dst[i, c] = np.int8(q[c])


def binary_i64(a, b, out, mul, shift):  # pragma: no cover - compiled
    """ADD ``sat32(a + b)`` or MUL ``sat32(rshift_round(a * b, shift))`` (``b`` of one row: broadcast)."""
    rows, n = out.shape
    bc = b.shape[0] == 1
    for r in range(rows):
        br = 0 if bc else r
        for c in range(n):
            x, y = np.int64(a[r, c]), np.int64(b[br, c])
            out[r, c] = _sat32_i64(_rr_i64(x * y, shift) if mul else x + y)


def silu_i64(src, out):  # pragma: no cover - compiled
    """numerics.silu: ``sat32(rshift_round(x * sigmoid_fx(x), 30))``, sigmoid_fx through exp_fx(-|x|)."""
    rows, n = out.shape
    for r in range(rows):
        for c in range(n):
            x = np.int64(src[r, c])
            u = _rr_i64(min(-abs(x), 0) * np.int64(nx.LOG2E_Q30), 22)
            e = _exp2_i64(u, 24, nx.EXP_FRAC, _EXP_BASE_A, _EXP_DELTA_A)
            sg = (np.int64(1) << 60) // ((np.int64(1) << 30) + e)
            if x < 0:
                sg = (np.int64(1) << 30) - sg
            out[r, c] = _sat32_i64(_rr_i64(x * sg, 30))


def rope_i64(src, table, out, heads):  # pragma: no cover - compiled
    """numerics.rope: each head's pairs ``(x0, x1)`` rotated by the row's cos (first half) and sin (second)."""
    rows = out.shape[0]
    hdim = table.shape[1]
    half = hdim // 2
    for r in range(rows):
        for h in range(heads):
            for i in range(half):
                j = h * hdim + 2 * i
                x0, x1 = np.int64(src[r, j]), np.int64(src[r, j + 1])
                c, s = np.int64(table[r, i]), np.int64(table[r, half + i])
                out[r, j] = _sat32_i64(_rr_i64(x0 * c - x1 * s, nx.TRIG_FRAC))
                out[r, j + 1] = _sat32_i64(_rr_i64(x0 * s + x1 * c, nx.TRIG_FRAC))


def _rsqrt_i64(v, e):  # pragma: no cover - compiled
    """numerics.rsqrt_fx of one int64: ``(y, k)``."""
    v = max(v, 1)
    K = (_bitlen_i64(v) - 1 + e) >> 1
    sh = 29 + e - 2 * K
    m = v << min(sh, 63) if sh >= 0 else v >> min(-sh, 63)
    y = _RSQRT_SEED_A[(m >> 23) - 64]
    for _ in range(2):
        y2 = (y * y) >> 30
        t = (m * y2) >> 29
        y = (y * (3 * (np.int64(1) << 30) - t)) >> 31
    return y, 30 + K


def rmsnorm_i64(src, gamma, out, n, eps, ry, rk):  # pragma: no cover - compiled
    """numerics.rmsnorm of the first ``n`` lanes of each row (``(ry, rk) = recip(n)``); lanes past ``n`` 0."""
    rows = out.shape[0]
    d = np.empty(n, np.int64)
    guard = nx.NORM_GUARD
    for r in range(rows):
        amax = np.int64(0)
        for c in range(n):
            d[c] = np.int64(src[r, c]) << guard  # Q24, |d| < 2**39
            amax = max(amax, abs(d[c]))
        s = max(_bitlen_i64(amax) - 23, 0)
        ss = np.int64(0)
        for c in range(n):
            d[c] = _rr_i64(d[c], s)
            ss += d[c] * d[c]
        ss = max(ss + _rr_i64(np.int64(n) * np.int64(eps), 2 * s - 2 * guard), 1)
        cc = max(_bitlen_i64(ss) - 31, 0)
        y, k = _rsqrt_i64((ss >> cc) * ry, cc + 2 * s - 2 * (nx.FX_FRAC + guard) - rk)
        sh = k + nx.FX_FRAC + guard - nx.NORM_FRAC - s
        for c in range(n):
            out[r, c] = _sat32_i64(_rr_i64(_rr_i64(d[c] * y, sh) * np.int64(gamma[c]), nx.NORM_FRAC))
        out[r, n:] = 0


def attn_out_i64(ml, o, out):  # pragma: no cover - compiled
    """numerics.attn_finish: ``sat32(rshift_round(o * y, k - 16))`` with ``y, k = recip(l)``; 0 where ``l <= 0``."""
    nq, hdim = o.shape
    for i in range(nq):
        ell = np.int64(ml[i, 1])
        if ell <= 0:
            out[i, :] = 0
            continue
        n = _bitlen_i64(ell)
        m = ell << (31 - n) if n <= 31 else ell >> (n - 31)
        y = (np.int64(1) << 60) // m
        sh = n + 29 - nx.FX_FRAC
        for c in range(hdim):
            out[i, c] = _sat32_i64(_rr_i64(np.int64(o[i, c]) * y, sh))


def attn_kernel():
    """The compiled ATTN tile (:func:`compiled`), or ``None``: then the numpy formulas."""
    return compiled(attn_tile_i64)
