"""Integer building blocks of the numerics: formats, rounding, saturation, GEMM, (re)quantization.

Everything here is exact integer arithmetic on numpy arrays with ``int64``
intermediates; the results are identical on numpy 1.24 and 2.x.  Import these
names from :mod:`systolica.numerics`, which re-exports them.

Rounding everywhere is *round half up* (towards +inf on ties), the cheapest
rounding in hardware: add half an lsb, then shift arithmetically right.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "FX_FRAC", "TRIG_FRAC", "EPS_FRAC", "INT32_MIN", "INT32_MAX", "INT64_MIN", "INT64_MAX",
    "QUANT_ZERO_EXP", "to_fx", "from_fx", "rshift_round", "sat32", "bitlen", "clz", "matmul",
    "requant", "quant_rows", "quant_rows_split", "dequant_rows", "quant_weight", "add", "mul", "argmax", "as_int64",
]

FX_FRAC = 16  # vbuf fixed point: real = int * 2**-16
TRIG_FRAC = 14  # RoPE cos/sin table entries: real = int * 2**-14
EPS_FRAC = 32  # norm epsilon: eps_q32 = round(eps * 2**32)
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
QUANT_ZERO_EXP = -7 - FX_FRAC  # exponent quant_rows gives an all-zero row (bitlen(0) - 7 - FX_FRAC)

_I64 = np.int64


def as_int64(x, name: str = "x") -> np.ndarray:
    """``x`` as an int64 array; a float array is a caller bug and raises ``TypeError``."""
    a = np.asarray(x)
    if a.dtype.kind not in "iub":
        raise TypeError(f"{name} must be an integer array, got dtype {a.dtype}")
    return a.astype(_I64, copy=False)


def to_fx(x) -> np.ndarray:
    """Real values -> fx int32 (``FX_FRAC`` fraction bits), rounded half up, saturated."""
    f = np.floor(np.asarray(x, dtype=np.float64) * (1 << FX_FRAC) + 0.5)
    return np.clip(f, INT32_MIN, INT32_MAX).astype(np.int32)


def from_fx(x) -> np.ndarray:
    """fx integers -> real values (float64, exact)."""
    return np.asarray(x, dtype=np.float64) / (1 << FX_FRAC)


def sat32(x) -> np.ndarray:
    """Saturate to the int32 range and return int32."""
    return np.clip(np.asarray(x, dtype=_I64), INT32_MIN, INT32_MAX).astype(np.int32)


def rshift_round(x, s) -> np.ndarray:
    """Arithmetic shift with round half up, on int64.

    ``s > 0``: ``floor((x + 2**(s-1)) / 2**s)`` computed without overflow as
    ``(x >> s) + ((x >> (s-1)) & 1)``; any ``s >= 64`` gives 0.
    ``s <= 0``: ``x << -s``, saturated to the int64 range (callers saturate
    further to int32).  ``s`` may be a scalar or an array broadcastable to ``x``.

    Scalar form (what the hardware does)::

        def rshift_round(x, s):
            if s > 0:
                return (x + (1 << (s - 1))) >> s     # Python ints: exact
            return x << -s
    """
    x = as_int64(x)
    s_arr = np.asarray(s)
    if s_arr.ndim == 0:  # fast path: one shift for the whole array
        sv = int(s_arr)
        if sv >= 64:
            return np.zeros(x.shape, _I64)
        if sv > 0:
            return (x >> sv) + ((x >> (sv - 1)) & 1)
        if sv == 0:
            return x.copy()
    s_arr = as_int64(s_arr, "s")
    sr = np.clip(s_arr, 1, 63)  # on the (often smaller) shift array, before broadcasting
    out = (x >> sr) + ((x >> (sr - 1)) & 1)
    if np.any(s_arr >= 64):
        out = np.where(s_arr >= 64, 0, out)
    if np.any(s_arr <= 0):
        x, s_arr = np.broadcast_arrays(x, s_arr)
        sl = np.clip(-s_arr, 0, 63)
        left = (x.astype(np.uint64) << sl.astype(np.uint64)).view(_I64)
        ok = ((left >> sl) == x) & ((-s_arr <= 63) | (x == 0))
        left = np.where(ok, left, np.where(x < 0, INT64_MIN, INT64_MAX))
        out = np.where(s_arr <= 0, left, out)
    return out


def bitlen(x) -> np.ndarray:
    """Bit length of ``|x|`` (0 for 0): ``64 - clz64(|x|)``, exact for every int64 but INT64_MIN."""
    a = np.abs(as_int64(x))
    e = np.frexp(a.astype(np.float64))[1].astype(_I64)
    # float64 may round a 54+ bit value up to the next power of two: step back then
    e = np.where((e > 0) & ((a >> np.clip(e - 1, 0, 63)) == 0), e - 1, e)
    return e


def clz(x, width: int = 32) -> np.ndarray:
    """Leading-zero count of non-negative ``x`` in a ``width``-bit word (``width`` for 0)."""
    x = as_int64(x)
    if x.size and x.min() < 0:
        raise ValueError(f"clz needs non-negative values, got {x.min()}")
    return width - bitlen(x)


def _wrap32(x: np.ndarray) -> np.ndarray:
    return (((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)).astype(np.int32)


def _check_int8(a, name: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype != np.int8:
        a64 = as_int64(a, name)
        if a64.size and (a64.min() < -128 or a64.max() > 127):
            raise ValueError(f"{name} must hold int8 values, found {a64.min()}..{a64.max()}")
        return a64.astype(np.int8)
    return a


def matmul(a, w) -> np.ndarray:
    """GEMM: ``a int8[M,K] @ w int8[N,K].T -> int32[M,N]``, exact, wrapping modulo 2**32.

    BLAS is exact on integers while every partial sum is representable:
    float32 while ``K * 2**14 <= 2**24``, float64 while ``K * 2**14 <= 2**53``.
    """
    a = _check_int8(a, "a")
    w = _check_int8(w, "w")
    if a.ndim != 2 or w.ndim != 2 or a.shape[1] != w.shape[1]:
        raise ValueError(f"matmul needs a[M,K] and w[N,K], got {a.shape} and {w.shape}")
    k = a.shape[1]
    if k * (1 << 14) <= (1 << 53):
        ft = np.float32 if k * (1 << 14) <= (1 << 24) else np.float64
        af = a.astype(ft)
        r = np.empty((a.shape[0], w.shape[0]), ft)
        # decode (few rows): cast W a block at a time so the block stays in cache; GEMM: all at once
        step = max(64, (1 << 18) // max(k, 1)) if a.shape[0] <= 16 else max(w.shape[0], 1)
        for i in range(0, w.shape[0], step):
            r[:, i:i + step] = af @ w[i:i + step].astype(ft).T
        return _wrap32(r.astype(_I64))
    r = np.zeros((a.shape[0], w.shape[0]), _I64)  # pragma: no cover - K beyond 2**39
    for i in range(0, k, 1 << 30):
        r += a[:, i:i + (1 << 30)].astype(_I64) @ w[:, i:i + (1 << 30)].astype(_I64).T
    return _wrap32(r)


def requant(acc, mult, exps, shift: int) -> np.ndarray:
    """REQUANT: ``sat32(rshift_round(acc * mult[col], shift - exps[row]))`` (int64 product).

    With ``quant_weight``'s ``S`` and ``quant_rows``'s exponents, ``shift = S - FX_FRAC``
    gives fx results.
    """
    acc = as_int64(acc, "acc")
    if acc.ndim != 2:
        raise ValueError(f"acc must be 2-D [M,N], got shape {acc.shape}")
    mult = as_int64(mult, "mult").reshape(1, -1)
    exps = as_int64(exps, "exps").reshape(-1, 1)
    if mult.shape[1] != acc.shape[1] or exps.shape[0] != acc.shape[0]:
        raise ValueError(f"requant: acc {acc.shape}, mult {mult.shape[1]} columns, exps {exps.shape[0]} rows")
    s = int(shift) - exps
    if s.size and np.all(s == s.flat[0]):  # one shift for the whole array: the fast path
        s = int(s.flat[0])
    return sat32(rshift_round(acc * mult, s))


def quant_rows(x):
    """QUANT: fx ``int32[M,N]`` -> ``(q int8[M,N] in -127..127, e int8[M])`` with ``q*2**e ≈ x*2**-16``.

    Per row, with ``A = max|x|`` and ``s0 = bitlen(A) - 7``: ``s = s0`` unless
    rounding at ``s0`` leaves the row maximum above 127 or the minimum below
    -127, then ``s = s0 + 1``; ``q = rshift_round(x, s)``, ``e = s - FX_FRAC``.
    That ``e`` is the smallest for which every ``|q| <= 127`` (``-128`` never
    occurs), and ``|q*2**e - x*2**-16| <= 2**(e-1)`` (half an lsb).  An all-zero
    row gets ``e = QUANT_ZERO_EXP`` (-23) and ``q = 0``.
    """
    x = as_int64(x, "x")
    if x.ndim != 2:
        raise ValueError(f"quant_rows needs a 2-D [M,N] array, got shape {x.shape}")
    if x.shape[1] == 0:
        return np.zeros(x.shape, np.int8), np.full(x.shape[0], QUANT_ZERO_EXP, np.int8)
    hi = x.max(axis=1)
    lo = x.min(axis=1)
    s = bitlen(np.maximum(hi, -lo)) - 7
    over = (rshift_round(hi, s) > 127) | (rshift_round(lo, s) < -127)
    s = s + over
    q = rshift_round(x, s[:, None])
    return q.astype(np.int8), (s - FX_FRAC).astype(np.int8)


def dequant_rows(q, e) -> np.ndarray:
    """fx int32 of ``q * 2**e`` (exact where representable, else rounded half up, saturated)."""
    q = as_int64(q, "q")
    e = as_int64(e, "e").reshape(-1, 1)
    return sat32(rshift_round(q, -(e + FX_FRAC)))


def quant_rows_split(x):
    """QUANT with split=1: ``(q int8[2M,N], e int8[2M])``, the int8 part and then the residual of every row.

    ``hi, e_hi = quant_rows(x)``; ``r = sat32(x - dequant_rows(hi, e_hi))``;
    ``lo, e_lo = quant_rows(r)``; rows ``0..M-1`` are ``hi``, rows ``M..2M-1`` are ``lo``.
    ``x*2**-16 ≈ hi*2**e_hi + lo*2**e_lo`` to half an lsb of ``2**e_lo`` (about 2**-14 of the row
    maximum): a GEMM over both blocks, requantized per row and added, sees ~15-bit activations
    while the array still multiplies int8 (decode streams each weight once for both rows).
    """
    hi, e_hi = quant_rows(x)
    r = sat32(as_int64(x, "x") - as_int64(dequant_rows(hi, e_hi), "hi"))
    lo, e_lo = quant_rows(r)
    return np.concatenate([hi, lo]), np.concatenate([e_hi, e_lo])


def quant_weight(w):
    """Symmetric per-output-channel int8 weights: ``w[n,k] ≈ wq[n,k] * mult[n] * 2**-S``.

    ``mult[n] = round(max|w[n]|/127 * 2**S) < 2**24`` with one ``S`` per tensor,
    chosen so the largest channel scale has 24 significant bits, and clamped to
    ``FX_FRAC <= S <= 62`` (so the REQUANT shift ``S - FX_FRAC`` is >= 0).
    ``wq = clip(round(w / (mult[n] * 2**-S)), -127, 127)``; an all-zero channel
    gets ``mult = 0``, ``wq = 0``.

    Raises ``ValueError`` for non-finite weights or a channel scale >= 2**8
    (``|w| >= 32512``), which has no ``S >= FX_FRAC``.
    """
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"quant_weight needs a 2-D [N,K] weight, got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError("quant_weight: weight has non-finite values")
    scale = np.abs(w).max(axis=1) / 127.0 if w.shape[1] else np.zeros(w.shape[0])
    smax = float(scale.max()) if scale.size else 0.0
    if smax == 0.0:
        return np.zeros(w.shape, np.int8), np.zeros(w.shape[0], np.int32), FX_FRAC
    k = int(np.frexp(smax)[1]) - 1  # smax in [2**k, 2**(k+1))
    S = 23 - k
    if np.floor(smax * 2.0 ** S + 0.5) >= (1 << 24):
        S -= 1
    S = min(S, 62)
    if S < FX_FRAC:
        raise ValueError(f"quant_weight: channel scale {smax:.4g} (|w| up to {smax * 127:.4g}) is too large; "
                         f"needs S={S} < FX_FRAC={FX_FRAC}")
    mult = np.floor(scale * 2.0 ** S + 0.5)
    real = mult * 2.0 ** -S
    with np.errstate(divide="ignore", invalid="ignore"):
        wq = np.where(real[:, None] > 0, np.floor(w / np.where(real > 0, real, 1.0)[:, None] + 0.5), 0.0)
    return np.clip(wq, -127, 127).astype(np.int8), mult.astype(np.int32), int(S)


def add(a, b) -> np.ndarray:
    """ADD: ``sat32(a + b)`` (``b`` broadcasts, e.g. a bias row)."""
    return sat32(as_int64(a, "a") + as_int64(b, "b"))


def mul(a, b, shift: int) -> np.ndarray:
    """MUL: ``sat32(rshift_round(a * b, shift))`` with an int64 product."""
    return sat32(rshift_round(as_int64(a, "a") * as_int64(b, "b"), int(shift)))


def argmax(x) -> np.ndarray:
    """ARGMAX: index of the first maximum of each row, int32[M]."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"argmax needs a non-empty 2-D [M,N] array, got shape {x.shape}")
    return np.argmax(x, axis=1).astype(np.int32)
