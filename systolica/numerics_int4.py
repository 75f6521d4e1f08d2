"""4-bit weights with group scales (GGUF Q4_0 / Q4_1) against int8 activations, in exact integers.

A GGUF Q4 block holds 32 consecutive weights of one row (along K): 4-bit codes ``q`` in 0..15 and an fp16
scale ``d`` (Q4_1 also an fp16 minimum ``m``): ``w = d * (q - 8)`` (Q4_0) or ``w = d * q + m`` (Q4_1).  The
codes are kept as they are (no re-rounding of weights).  The scales become integers per output row ``n``:

    d[n, g] = D[n, g] * 2**-s[n],   m[n, g] = Mn[n, g] * 2**-s[n]

with one shift ``s[n]`` per row, chosen so the row's largest ``|d|`` or ``|m|`` is a ``SCALE_BITS``-bit signed
integer.  An fp16 value is an 11-bit integer times a power of two, so ``D`` is exact whenever the row's scales
span at most ``SCALE_BITS - 12`` binary orders of magnitude (4 for 16-bit scales); smaller ones lose their
low bits (rounded to nearest): the relative error of a scale ``x`` is at most ``2**-(SCALE_BITS - 1) *
max|scale of the row| / |x|``, and :func:`int_scales` reports the largest one it made.

The dot product of an int8 activation row ``a`` with row ``n`` of the weights, over groups ``g`` of 32:

    acc[n] = sum_g D[n, g] * P[g] + Mn[n, g] * A[g]       (Q4_1)
    acc[n] = sum_g D[n, g] * (P[g] - 8 * A[g])           (Q4_0)

    P[g] = sum_{k in g} q[n, k] * a[k]   (|P| <= 15 * 128 * 32 < 2**16: a 4x8-bit product summed over 32)
    A[g] = sum_{k in g} a[k]             (|A| <= 128 * 32 = 2**12)

is exact in integers, and ``acc[n] * 2**-s[n]`` is the dot product with the dequantized weights whenever the
scales are exact (:func:`int4_group_gemm`; the tests check it against float64 on the dequantized weights).
``|D * P| < 2**15 * 2**16``, so with ``K / 32`` groups ``|acc| < 2**(31 + log2(K / 32))``: 37 bits for
K = 1,536 (SmolLM2's ffn_down).  The accumulator is int32, so GEMM_STREAM rounds each group's term before
adding it (:func:`stream_acc`, the ISA's semantics of an int4 GEMM_STREAM):

    T[n, g]  = D[n, g] * Pc[g]  (Q4_0, Pc[g] = sum_{k in g} (q - 8) * a: |T| <= 2**15 * 8 * 128 * 32 = 2**30)
    T[n, g]  = D[n, g] * P[g] + Mn[n, g] * A[g]    (Q4_1: |T| < 2**31 + 2**27, 33 bits signed)
    acc[n]  += sum_g rshift_round(T[n, g], gshift)   modulo 2**32, like the int8 GEMM

``gshift`` (4 bits, 0..15) is the instruction's; the compiler picks the smallest one for which no sum can leave
int32 (:func:`choose_gshift`), so ``acc * 2**(gshift - s[n])`` is the dot product to within ``G / 2``
units of ``2**gshift`` (``G`` groups), and with ``gshift = 0`` equals :func:`int4_group_gemm` exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolica.numerics_fixed import rshift_round

__all__ = ["GROUP", "SCALE_BITS", "GSHIFT_MAX", "Q4Weights", "from_gguf_blocks", "int_scales", "int4_group_gemm",
           "Q4Error", "group_terms", "stream_acc", "stream_operands", "stream_acc_prepared", "acc_bound", "choose_gshift"]

GROUP = 32  # weights per scale, along K (GGUF's block)
SCALE_BITS = 16  # signed bits of an integer group scale or minimum
GSHIFT_MAX = 15  # GEMM_STREAM.gshift is 4 bits


class Q4Error(ValueError):
    """A malformed 4-bit tensor (wrong block size, truncated scales, a NaN or infinite scale)."""


@dataclass(frozen=True)
class Q4Weights:
    """A matrix of 4-bit codes with per-group fp16 scales (and minimums): ``(N, K)`` codes, ``(N, K/32)`` scales."""

    codes: np.ndarray  # uint8 (N, K), values 0..15
    d: np.ndarray  # float32 (N, K // GROUP), fp16 values
    m: np.ndarray | None  # float32 (N, K // GROUP), fp16 values (Q4_1), or None (Q4_0: codes offset by 8)

    @property
    def kind(self) -> str:
        return "Q4_1" if self.m is not None else "Q4_0"

    def dequantize(self) -> np.ndarray:
        """The float64 weights (exact: every fp16 scale times a 4-bit code is a float64)."""
        q = self.codes.astype(np.float64).reshape(self.codes.shape[0], -1, GROUP)
        d = self.d.astype(np.float64)[:, :, None]
        w = d * q + self.m.astype(np.float64)[:, :, None] if self.m is not None else d * (q - 8)
        return w.reshape(self.codes.shape)


def from_gguf_blocks(raw: np.ndarray, kind: str, shape: tuple[int, int], name: str = "tensor") -> Q4Weights:
    """Parse GGUF Q4_0 / Q4_1 blocks (``raw``: the tensor's bytes) of an ``(N, K)`` matrix, keeping the codes.

    Q4_0 block: fp16 d, 16 bytes of nibbles (18 bytes); Q4_1: fp16 d, fp16 m, nibbles (20 bytes).  Low nibbles
    are elements 0..15 of the block, high nibbles 16..31.  Raises :class:`Q4Error` naming ``name``."""
    size = {"Q4_0": 18, "Q4_1": 20}.get(kind)
    if size is None:
        raise Q4Error(f"{name}: {kind} is not a 4-bit group type (Q4_0, Q4_1)")
    n, k = (int(x) for x in shape)
    if k % GROUP:
        raise Q4Error(f"{name}: rows of {k} weights are not whole blocks of {GROUP}")
    b = np.frombuffer(np.ascontiguousarray(raw).tobytes(), np.uint8)
    need = n * (k // GROUP) * size
    if b.size != need:
        raise Q4Error(f"{name}: {b.size} bytes for a {n} x {k} {kind} matrix, which needs {need} "
                      f"({n * k // GROUP} blocks of {size}): truncated or another type")
    b = b.reshape(n, k // GROUP, size)
    d = b[:, :, 0:2].copy().view("<f2")[:, :, 0].astype(np.float32)
    m = b[:, :, 2:4].copy().view("<f2")[:, :, 0].astype(np.float32) if kind == "Q4_1" else None
    for what, v in (("scale", d), ("minimum", m)):
        if v is not None and not np.isfinite(v).all():
            bad = np.argwhere(~np.isfinite(v))[0]
            raise Q4Error(f"{name}: {what} of row {bad[0]} block {bad[1]} is {v[tuple(bad)]}")
    nib = b[:, :, size - 16:]
    codes = np.concatenate([nib & 0x0F, nib >> 4], axis=2).reshape(n, k)
    return Q4Weights(codes.astype(np.uint8), d, m)


def int_scales(w: Q4Weights, bits: int = SCALE_BITS) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, float]:
    """``(D, Mn, s, err)``: integer scales and minimums (int64), the per-row shift ``s`` (int64; the value is
    ``D * 2**-s``) and the largest relative error of a nonzero scale or minimum (0.0: all exact)."""
    parts = [w.d] + ([w.m] if w.m is not None else [])
    big = np.max([np.abs(p.astype(np.float64)).max(axis=1) for p in parts], axis=0)  # (N,)
    # the largest s with big * 2**s < 2**(bits - 1): big's exponent e (big = f * 2**e, 0.5 <= f < 1)
    _, e = np.frexp(np.where(big > 0, big, 1.0))
    s = (bits - 1 - e).astype(np.int64)
    out, err = [], 0.0
    for p in parts:
        x = p.astype(np.float64) * np.exp2(s)[:, None]
        q = np.rint(x)  # to nearest, ties to even
        nz = p != 0
        if nz.any():
            err = max(err, float(np.max(np.abs(q[nz] - x[nz]) / np.abs(x[nz]))))
        out.append(q.astype(np.int64))
    assert all(np.abs(o).max(initial=0) < 1 << (bits - 1) for o in out)
    return out[0], (out[1] if w.m is not None else None), s, err


def int4_group_gemm(a: np.ndarray, w: Q4Weights, D: np.ndarray, Mn: np.ndarray | None) -> np.ndarray:
    """``acc (M, N)`` int64 of int8 activations ``a (M, K)`` against the 4-bit weights, in exact integers:
    per group the code products ``P`` and activation sums ``A``, times the integer scales (module docstring).
    Multiply by ``2**-s[n]`` (from :func:`int_scales`) for the real dot products."""
    a = np.asarray(a)
    if a.dtype != np.int8:
        raise TypeError(f"activations must be int8, got {a.dtype}")
    m_rows, k = a.shape
    n, kw = w.codes.shape
    if kw != k:
        raise ValueError(f"activations have K={k}, the weights {kw}")
    g = k // GROUP
    a64 = a.astype(np.int64).reshape(m_rows, g, GROUP)
    q = w.codes.astype(np.int64).reshape(n, g, GROUP)
    P = np.einsum("mgk,ngk->mng", a64, q)  # (M, N, G): |P| < 2**16
    A = a64.sum(axis=2)[:, None, :]  # (M, 1, G)
    if Mn is None:  # Q4_0: codes offset by 8
        return np.einsum("mng,ng->mn", P - 8 * A, D)
    return np.einsum("mng,ng->mn", P, D) + np.einsum("mng,ng->mn", np.broadcast_to(A, P.shape), Mn)


def _check_stream_operands(a: np.ndarray, codes: np.ndarray, D: np.ndarray, Mn: np.ndarray | None) -> None:
    if a.ndim != 2 or codes.ndim != 2 or a.shape[1] != codes.shape[1]:
        raise ValueError(f"int4 GEMM needs a[M,K] and codes[N,K], got {a.shape} and {codes.shape}")
    n, k = codes.shape
    if k % GROUP:
        raise ValueError(f"int4 GEMM: K={k} is not whole groups of {GROUP}")
    if D.shape != (n, k // GROUP) or (Mn is not None and Mn.shape != D.shape):
        raise ValueError(f"int4 GEMM: scales {D.shape} (minimums {None if Mn is None else Mn.shape}) for "
                         f"{n} rows of {k // GROUP} groups")


def group_terms(a: np.ndarray, codes: np.ndarray, D: np.ndarray, Mn: np.ndarray | None) -> np.ndarray:
    """``T (M, N, G)`` int64: each group's term (module docstring); ``Mn is None`` is Q4_0 (codes offset by 8).

    ``a`` int8-valued ``(M, K)``, ``codes`` 0..15 ``(N, K)``, ``D`` / ``Mn`` integer ``(N, K / 32)``."""
    a = np.asarray(a, np.int64)
    codes = np.asarray(codes, np.int64)
    _check_stream_operands(a, codes, np.asarray(D), Mn)
    (m_rows, k), n = a.shape, codes.shape[0]
    g = k // GROUP
    a3 = a.reshape(m_rows, g, GROUP)
    q3 = codes.reshape(n, g, GROUP) - (8 if Mn is None else 0)
    P = np.einsum("mgk,ngk->mng", a3, q3)  # 4 x 8-bit products over 32: exact in int64
    T = P * np.asarray(D, np.int64)[None]
    if Mn is not None:
        T = T + a3.sum(axis=2)[:, None, :] * np.asarray(Mn, np.int64)[None]
    return T


def stream_operands(codes: np.ndarray, D: np.ndarray, Mn: np.ndarray | None):
    """The weights of :func:`stream_acc_prepared`: ``(q (G, 32, N) float32, Q4_0 codes offset by 8; D (G, N)
    int64; Mn (G, N) int64 or None)``.  A caller that multiplies the same weights often keeps these."""
    n, k = codes.shape
    if k % GROUP:
        raise ValueError(f"int4 GEMM: K={k} is not whole groups of {GROUP}")
    q = codes.astype(np.float32).reshape(n, k // GROUP, GROUP) - (8.0 if Mn is None else 0.0)
    return (np.ascontiguousarray(q.transpose(1, 2, 0)), np.ascontiguousarray(np.asarray(D, np.int64).T),
            None if Mn is None else np.ascontiguousarray(np.asarray(Mn, np.int64).T))


def stream_acc_prepared(a: np.ndarray, ops, gshift: int) -> np.ndarray:
    """:func:`stream_acc` on :func:`stream_operands`' weights: each group's code products are one batched float32
    matmul, exact because ``|P| <= 15 * 128 * 32 < 2**24``; the terms, shift and sum in int64."""
    q, D, Mn = ops
    if not 0 <= int(gshift) <= GSHIFT_MAX:
        raise ValueError(f"gshift={gshift} outside 0..{GSHIFT_MAX}")
    g = q.shape[0]
    a = np.asarray(a)
    if a.ndim != 2 or a.shape[1] != g * GROUP:
        raise ValueError(f"int4 GEMM: activations {a.shape} against K={g * GROUP}")
    a3 = a.astype(np.float32).reshape(a.shape[0], g, GROUP).transpose(1, 0, 2)  # (G, M, 32)
    T = np.matmul(a3, q).astype(np.int64) * D[:, None, :]  # (G, M, N)
    if Mn is not None:
        T += a.astype(np.int64).reshape(a.shape[0], g, GROUP).sum(axis=2).T[:, :, None] * Mn[:, None, :]
    r = rshift_round(T, int(gshift)).sum(axis=0)
    return ((r + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def stream_acc(a: np.ndarray, codes: np.ndarray, D: np.ndarray, Mn: np.ndarray | None, gshift: int) -> np.ndarray:
    """GEMM_STREAM int4's result ``(M, N)`` int32: ``sum_g rshift_round(T, gshift)`` (``T``: :func:`group_terms`),
    wrapped modulo 2**32 like the int8 GEMM."""
    a = np.asarray(a)
    _check_stream_operands(a, np.asarray(codes), np.asarray(D), Mn)
    return stream_acc_prepared(a, stream_operands(codes, D, Mn), gshift)


def acc_bound(D: np.ndarray, Mn: np.ndarray | None) -> int:
    """The largest ``sum_g |T[n, g]|`` any int8 activation row can give (``|a| <= 128``), over rows ``n``."""
    D = np.abs(np.asarray(D, np.int64))
    cmax = 8 if Mn is None else 15
    per = D * (cmax * 128 * GROUP)
    if Mn is not None:
        per = per + np.abs(np.asarray(Mn, np.int64)) * (128 * GROUP)
    return int(per.sum(axis=1).max(initial=0))


def choose_gshift(D: np.ndarray, Mn: np.ndarray | None) -> int:
    """The smallest ``gshift`` for which ``stream_acc`` can never leave int32: every rounded term is at most
    ``|T| / 2**gshift + 1/2``, so ``acc_bound / 2**gshift + G / 2 < 2**31`` suffices.  Raises ValueError when
    even ``GSHIFT_MAX`` does not (K far beyond any model's)."""
    b, g = acc_bound(D, Mn), np.asarray(D).shape[1]
    for s in range(GSHIFT_MAX + 1):
        if (b >> s) + 1 + g < (1 << 31):
            return s
    raise ValueError(f"int4 GEMM: |acc| may reach {b} over {g} groups, more than int32 holds after a "
                     f"{GSHIFT_MAX}-bit group shift")
