"""Fixed-point non-linear functions: reciprocal, rsqrt, exp, sigmoid, SiLU, GELU, norms, softmax, RoPE.

Each is built only from integer multiplies (operands <= 32 bits, products <= 64
bits), adds, shifts, compares, a leading-zero count and look-up tables of at most
256 entries, so the vector unit implements the very same bits.  The LUT entries
are computed once at import with exact decimal arithmetic (``decimal`` at 40
digits), so they are identical on every platform; ``EXP_BASE``, ``EXP_DELTA`` and
``RSQRT_SEED`` are public so the RTL generator can read them.

Import these names from :mod:`systolica.numerics`, which re-exports them.
"""

from __future__ import annotations

import decimal
import math

import numpy as np

from systolica.numerics_fixed import (
    FX_FRAC,
    TRIG_FRAC,
    as_int64,
    bitlen,
    rshift_round,
    sat32,
)

__all__ = [
    "EXP_FRAC", "EXP_BASE", "EXP_DELTA", "LOG2E_Q30", "LN2_FX", "RECIP_SEED", "RECIP_FIXUPS", "RECIP_SEED16",
    "RSQRT_SEED", "NORM_FRAC", "NORM_GUARD", "recip", "recip_newton", "recip_seeded", "exp2_fx", "rsqrt_fx", "exp_fx",
    "sigmoid_fx", "silu", "gelu", "rmsnorm", "layernorm",
    "softmax", "rope", "rope_table",
]

EXP_FRAC = 30  # exp_fx / sigmoid_fx internal and default output precision: Q30
NORM_FRAC = 20  # fraction bits of the normalised value (x - mu) / rms before gamma


def _round_dec(d: decimal.Decimal) -> int:
    return int((d + decimal.Decimal("0.5")).to_integral_value(rounding=decimal.ROUND_FLOOR))


def _tables():
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        D = decimal.Decimal
        ln2 = D(2).ln()
        two30 = D(1 << 30)
        nodes = [_round_dec(two30 * (ln2 * i / 256).exp()) for i in range(257)]
        seed = [_round_dec(two30 / (D(2 * i + 129) / 128).sqrt()) for i in range(192)]
        rseed = [_round_dec(two30 / (1 + D(2 * i + 1) / 512)) for i in range(256)]
        log2e = _round_dec(two30 / ln2)
        ln2fx = _round_dec(ln2 * (1 << FX_FRAC))
    base = nodes[:256]
    delta = [nodes[i + 1] - nodes[i] for i in range(256)]
    return tuple(base), tuple(delta), tuple(seed), tuple(rseed), log2e, ln2fx


_BASE, _DELTA, _SEED, _RSEED, LOG2E_Q30, LN2_FX = _tables()
EXP_BASE = np.array(_BASE, np.int64)  # round(2**30 * 2**(i/256)), i = 0..255
EXP_DELTA = np.array(_DELTA, np.int64)  # next node minus this one (node 256 = 2**31)
RECIP_SEED = np.array(_RSEED, np.int64)  # round(2**30 / (1 + (i + 0.5)/256)), i = 0..255
RSQRT_SEED = np.array(_SEED, np.int64)  # round(2**30 / sqrt(M_i)), M_i = (2i + 129)/128: mid of [1+i/64, 1+(i+1)/64)


def recip(d):
    """Normalised reciprocal: ``1/d ≈ y * 2**-k`` for integers ``d >= 1`` (int64).

    ``n = bitlen(d)``; ``m`` = the top 31 bits of ``d`` (``d << (31-n)`` or
    ``d >> (n-31)``, truncating), so ``2**30 <= m < 2**31``; ``y = floor(2**60 / m)``
    (``2**29 < y <= 2**30``) and ``k = n + 29``.  ``y`` is an exact quotient: the
    hardware may compute it with a 31-step restoring divider or a seeded Newton
    iteration followed by a remainder correction - any exact method gives the
    same bits.  Relative error of ``y*2**-k`` vs ``1/d``: < 2**-29 (0 for d < 2**31
    up to the floor).  ``d <= 0`` is treated as 1.

    Scalar form::

        n = d.bit_length(); m = d << (31 - n) if n <= 31 else d >> (n - 31)
        return (1 << 60) // m, n + 29
    """
    d = np.maximum(as_int64(d, "d"), 1)
    n = bitlen(d)
    m = np.where(n <= 31, d << np.clip(31 - n, 0, 31), d >> np.clip(n - 31, 0, 63))
    return (1 << 60) // m, n + 29


def recip_newton(m):
    """``floor(2**60 / m)`` for ``2**30 <= m < 2**31`` by LUT seed, Newton and remainder correction.

    The hardware-friendly way to the exact quotient :func:`recip` defines
    (tested equal to ``(1 << 60) // m``)::

        y = RECIP_SEED[(m >> 22) - 256]       # 256 entries, Q30 of 1/M, M = m / 2**30 in [1, 2)
        repeat 2 times:                       # Newton: y <- y * (2 - M*y)
            t = (m * y) >> 30
            y = (y * (2**31 - t)) >> 30
        r = 2**60 - m * y                     # y ends within +-1 of the quotient
        repeat RECIP_FIXUPS (2) times:
            if r < 0:    y -= 1; r += m
            elif r >= m: y += 1; r -= m
        return y
    """
    m = as_int64(m, "m")
    if m.size and (m.min() < (1 << 30) or m.max() >= (1 << 31)):
        raise ValueError(f"recip_newton needs 2**30 <= m < 2**31, got {m.min()}..{m.max()}")
    y = RECIP_SEED[(m >> 22) - 256]
    for _ in range(2):
        t = (m * y) >> 30
        y = (y * ((1 << 31) - t)) >> 30
    r = (1 << 60) - m * y
    for _ in range(RECIP_FIXUPS):  # the floors of the Newton steps leave y within +-1 of the quotient
        down = r < 0
        up = r >= m
        y = y - down + up
        r = r + np.where(down, m, 0) - np.where(up, m, 0)
    return y


RECIP_FIXUPS = 2  # correction steps in recip_newton; one is needed at most (measured), two for margin

#: round(2**16 / (1 + (i + 0.5) / 256)) = round(2**25 / (2i + 513)), i = 0..255: recip_seeded's 16-bit seeds
RECIP_SEED16 = np.array([((1 << 26) + k) // (2 * k) for k in range(513, 1025, 2)], np.int64)


def recip_seeded(m):
    """``floor(2**60 / m)`` for ``2**30 <= m < 2**31`` on 18 x 18-bit multipliers: the activation unit's method.

    A 16-bit seed, a Newton step on the top 17 bits of ``m``, a second on all of ``m`` with its correction
    from the error's top 18 bits, and one remainder fixup (the ``y`` before it is the quotient or one
    less)::

        y0 = RECIP_SEED16[(m >> 22) & 255]                 # Q16 of 1/M, M = m / 2**30
        e1 = (2**32 - (m >> 14) * y0) >> 7                 # |e1| <= 2**16      (17 x 16 bits)
        y1 = (y0 << 1) + ((y0 * e1) >> 24)                 # Q17, < 2**17       (16 x 18 bits)
        e2 = 2**47 - m * y1                                # |e2| < 2**32       (31 x 17 bits: two pieces)
        d  = (y1 * (e2 >> 15)) >> 19                       # |d| < 2**14        (17 x 18 bits)
        y  = (y1 << 13) + d                                # Q30: the quotient or one less
        r  = (e2 << 13) - m * d                            # = 2**60 - m * y, in [0, 2m)  (31 x 15 bits: two)
        return y + (r >= m)

    Seven 18 x 18 pieces where :func:`recip_newton`'s five 31 x 31 products take twenty.  Checked equal to
    ``(1 << 60) // m`` for every ``m`` in ``[2**30, 2**31)`` (``tests/core/test_numerics.py``, slow: the whole
    range; the default run: 2**20 of them and the edges).
    """
    m = as_int64(m, "m")
    if m.size and (m.min() < (1 << 30) or m.max() >= (1 << 31)):
        raise ValueError(f"recip_seeded needs 2**30 <= m < 2**31, got {m.min()}..{m.max()}")
    y0 = RECIP_SEED16[(m >> 22) & 255]
    e1 = ((1 << 32) - (m >> 14) * y0) >> 7
    y1 = (y0 << 1) + ((y0 * e1) >> 24)
    e2 = (1 << 47) - m * y1
    d = (y1 * (e2 >> 15)) >> 19
    r = (e2 << 13) - m * d
    return (y1 << 13) + d + (r >= m)


def rsqrt_fx(v, e=0):
    """Normalised reciprocal square root: ``1/sqrt(v * 2**e) ≈ y * 2**-k`` for ``v >= 1``.

    Algorithm (all integer; ``>>`` is an arithmetic floor shift)::

        t  = bitlen(v) - 1 + e;  K = t >> 1          # v*2**e = M * 4**K, 1 <= M < 4
        sh = 29 + e - 2*K
        m  = v << sh if sh >= 0 else v >> -sh          # M with 29 fraction bits, 2**29 <= m < 2**31
        y  = RSQRT_SEED[(m >> 23) - 64]                # 192-entry seed, Q30, error < 2**-8
        repeat 2 times:                                # Newton: y <- y * (3 - M*y*y) / 2
            y2 = (y * y) >> 30
            t  = (m * y2) >> 29
            y  = (y * (3 * 2**30 - t)) >> 31
        return y, 30 + K                               # y <= 2**30

    Relative error: measured 2**-28.6 (asserted < 2**-28).  ``v <= 0`` is
    treated as 1.
    """
    v = np.maximum(as_int64(v, "v"), 1)
    e = as_int64(e, "e")
    t = bitlen(v) - 1 + e
    K = t >> 1
    sh = 29 + e - 2 * K
    m = np.where(sh >= 0, v << np.clip(sh, 0, 63), v >> np.clip(-sh, 0, 63))
    y = RSQRT_SEED[(m >> 23) - 64]
    for _ in range(2):
        y2 = (y * y) >> 30
        tt = (m * y2) >> 29
        y = (y * (3 * (1 << 30) - tt)) >> 31
    return y, 30 + K


def exp2_fx(u, ufrac: int, frac: int = EXP_FRAC, down=0):
    """``2**(u / 2**ufrac) / 2**down`` for ``u <= 0`` (positive ``u`` counts as 0), with ``frac`` fraction bits.

    The integer part of the power is a shift, the fraction a 256-entry LUT with
    linear interpolation (``8 <= ufrac <= 24``, ``0 <= frac <= 30``; ``down >= 0``, a scalar or an
    array broadcast with ``u``, joins the final shift, so the result is rounded once)::

        ip = u >> ufrac;  f = u & (2**ufrac - 1)         # u = ip + f/2**ufrac, ip <= 0
        hi = f >> (ufrac - 8);  lo = f & (2**(ufrac - 8) - 1)
        p  = EXP_BASE[hi] + rshift_round(EXP_DELTA[hi] * lo, ufrac - 8)   # 2**(f/2**ufrac), Q30
        return rshift_round(p, min(30 - frac - ip + down, 40))

    Relative error of ``p`` < 9.2e-7 (the chord of a convex curve lies above
    it); ``2**0`` is exactly ``2**frac``.  The cap of the shift at 40 changes nothing (``p < 2**31``).
    """
    if not 0 <= frac <= EXP_FRAC or not 8 <= ufrac <= 24:
        raise ValueError(f"exp2_fx: need 0 <= frac <= {EXP_FRAC} and 8 <= ufrac <= 24, got frac={frac}, ufrac={ufrac}")
    down = as_int64(down, "down")
    if np.any(down < 0):
        raise ValueError("exp2_fx: down must be >= 0")
    u = np.minimum(as_int64(u, "u"), 0)
    ip = u >> ufrac
    f = u & ((1 << ufrac) - 1)
    lob = ufrac - 8
    hi = f >> lob
    p = EXP_BASE[hi] + rshift_round(EXP_DELTA[hi] * (f & ((1 << lob) - 1)), lob)
    # rshift_round(p, sh) inline: p < 2**31, and any shift beyond 40 gives 0 as well
    sh = np.minimum((EXP_FRAC - frac) - ip + down, 40)
    return (p + ((np.int64(1) << sh) >> 1)) >> sh


def exp_fx(x, frac: int = EXP_FRAC):
    """``exp(x)`` for fx inputs ``x <= 0`` (positive inputs count as 0), with ``frac`` fraction bits.

    ``exp(x) = 2**(x*log2 e)``::

        u = rshift_round(x * LOG2E_Q30, 22)          # x*log2(e), 24 fraction bits, <= 0
        return exp2_fx(u, 24, frac)

    Relative error < 1e-6 before the output rounding; ``exp(0)`` is exactly
    ``2**frac``.  ``x`` must be within int32.
    """
    if not 0 <= frac <= EXP_FRAC:
        raise ValueError(f"exp_fx: frac must be in 0..{EXP_FRAC}, got {frac}")
    x = np.minimum(as_int64(x, "x"), 0)
    return exp2_fx(rshift_round(x * LOG2E_Q30, 22), 24, frac)


def sigmoid_fx(x):
    """``sigmoid(x)`` of fx ``x`` as Q30 (int64), exactly symmetric: ``s(x) + s(-x) = 2**30``.

    ``e = exp_fx(-|x|)`` (Q30); ``s = floor(2**60 / (2**30 + e))`` (= ``sigmoid(|x|)``, the
    quotient :func:`recip` computes for this already normalised divisor); result ``s`` for ``x >= 0``,
    ``2**30 - s`` for ``x < 0``.  Absolute error: measured 2.3e-7 (252 Q30 units).
    In hardware the quotient is :func:`recip_newton` of ``d = 2**30 + e`` (already
    normalised); ``d = 2**31`` happens only for ``x = 0`` and gives ``2**29``.
    """
    x = as_int64(x, "x")
    e = exp_fx(-np.abs(x), EXP_FRAC)
    s = (1 << 60) // ((1 << 30) + e)  # = rshift_round(*recip(2**30 + e) ...): the divisor is already normalised
    return np.where(x >= 0, s, (1 << 30) - s)



def silu(x) -> np.ndarray:
    """SILU: ``x * sigmoid(x)`` = ``sat32(rshift_round(x * sigmoid_fx(x), 30))``, fx in and out.

    Max error vs float: 0.513 lsb (measured over [-24, 24]); exactly ``x`` or 0 beyond.
    """
    x = as_int64(x, "x")
    return sat32(rshift_round(x * sigmoid_fx(x), 30))


# IEEE float64 sqrt and division are correctly rounded: these constants are the same everywhere
_GELU_C1 = int(math.floor(0.044715 * 2**30 + 0.5))  # 48012366
_GELU_C2 = int(math.floor(2 * math.sqrt(2 / math.pi) * 2**30 + 0.5))  # 1713444047
_GELU_CLAMP = 16 << FX_FRAC


def gelu(x) -> np.ndarray:
    """GELU, GPT-2's tanh form: ``0.5 x (1 + tanh(u)) = x * sigmoid(2u)``, ``u = sqrt(2/pi)(x + 0.044715 x**3)``.

    ::

        xc = clip(x, -16, 16)                          # fx; beyond, sigmoid(2u) is 0 or 1 in Q30
        x3 = rshift_round(rshift_round(xc * xc, 16) * xc, 16)
        w  = xc + rshift_round(x3 * 48012366, 30)      # 0.044715 in Q30
        u2 = rshift_round(w * 1713444047, 30)          # 2*sqrt(2/pi) in Q30
        return sat32(rshift_round(x * sigmoid_fx(u2), 30))

    Max error vs float: 0.668 lsb (measured over [-24, 24]); exactly ``x`` or 0 beyond.
    """
    x = as_int64(x, "x")
    xc = np.clip(x, -_GELU_CLAMP, _GELU_CLAMP)
    x3 = rshift_round(rshift_round(xc * xc, FX_FRAC) * xc, FX_FRAC)
    w = xc + rshift_round(x3 * _GELU_C1, 30)
    u2 = rshift_round(w * _GELU_C2, 30)
    return sat32(rshift_round(x * sigmoid_fx(u2), 30))


def _trunc31(v):
    """``v ≈ t * 2**c`` with ``|t| < 2**31`` (arithmetic right shift by ``c = max(0, bitlen(v) - 31)``)."""
    c = np.maximum(bitlen(v) - 31, 0)
    return v >> c, c


NORM_GUARD = 8  # extra fraction bits of the centred values: the mean is kept to 2**-24


def _normalise(x, center: bool, n: int, eps_q32: int):
    """Shared RMSNORM / LAYERNORM datapath: ``(x - mu) / sqrt(mean((x - mu)**2) + eps)`` in Q20."""
    d = x << NORM_GUARD  # Q24: |d| < 2**39
    if center:
        ry, rk = recip(n)
        st, c = _trunc31(x.sum(axis=1, keepdims=True))
        d = d - rshift_round(st * int(ry), int(rk) - c - NORM_GUARD)  # |d| < 2**40
    s = np.maximum(bitlen(np.abs(d).max(axis=1, keepdims=True)) - 23, 0)
    ds = rshift_round(d, s)  # |ds| <= 2**23: squares < 2**46, their sum < 2**62
    ss = (ds * ds).sum(axis=1, keepdims=True) + rshift_round(n * eps_q32, 2 * s - 2 * NORM_GUARD)
    ry, rk = recip(n)  # the mean: one reciprocal per instruction
    st, c = _trunc31(np.maximum(ss, 1))
    y, k = rsqrt_fx(st * int(ry), c + 2 * s - 2 * (FX_FRAC + NORM_GUARD) - int(rk))
    return rshift_round(ds * y, k + FX_FRAC + NORM_GUARD - NORM_FRAC - s)


def _check_eps(eps_q32) -> int:
    eps_q32 = int(eps_q32)
    if not 0 <= eps_q32 < (1 << 24):
        raise ValueError(f"eps_q32 must be in 0..2**24-1 (eps < 3.9e-3), got {eps_q32}")
    return eps_q32


def _check_rows(x, name: str) -> np.ndarray:
    x = as_int64(x, "x")
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"{name} needs a non-empty 2-D [M,N] array, got shape {x.shape}")
    return x


def rmsnorm(x, gamma, eps_q32: int) -> np.ndarray:
    """RMSNORM: ``x / sqrt(mean(x**2) + eps) * gamma``, fx in and out, per row of ``n`` elements.

    Integer algorithm (LAYERNORM is the same with the marked line)::

        d   = x << 8                                            # Q24
        [LAYERNORM: ry, rk = recip(n); c = max(0, bitlen(sum(x)) - 31)
                    d = d - rshift_round((sum(x) >> c) * ry, rk - c - 8)]   # minus the mean, Q24
        s   = max(0, bitlen(max|d|) - 23);  ds = rshift_round(d, s)         # |ds| <= 2**23
        ss  = sum(ds*ds) + rshift_round(n * eps_q32, 2*s - 16)  # units 2**(2s-48), < 2**63
        ry, rk = recip(n)                                       # 1/n, once per instruction
        ss  = max(ss, 1); c = max(0, bitlen(ss) - 31)
        y, k = rsqrt_fx((ss >> c) * ry, c + 2*s - 48 - rk)     # 1/rms = y * 2**-k
        t   = rshift_round(ds * y, k + 4 - s)                   # (x - mu) / rms, Q20
        out = sat32(rshift_round(t * gamma, 20))                # [LAYERNORM: + beta before sat32]

    Max error vs float: 0.637 lsb measured; asserted 0.65 lsb + 2**-22 of the row's largest output.
    """
    x = _check_rows(x, "rmsnorm")
    t = _normalise(x, False, x.shape[1], _check_eps(eps_q32))
    return sat32(rshift_round(t * as_int64(gamma, "gamma").reshape(1, -1), NORM_FRAC))


def layernorm(x, gamma, beta, eps_q32: int) -> np.ndarray:
    """LAYERNORM: ``(x - mean) / sqrt(var + eps) * gamma + beta``, fx in and out, per row.

    The integer algorithm is :func:`rmsnorm`'s with the mean subtracted (Q24)
    and ``beta`` added before the final saturation.  Max error vs float: as
    :func:`rmsnorm` plus the mean's rounding, ``gamma * 2**-25 / std`` (real units).
    """
    x = _check_rows(x, "layernorm")
    t = _normalise(x, True, x.shape[1], _check_eps(eps_q32))
    y = rshift_round(t * as_int64(gamma, "gamma").reshape(1, -1), NORM_FRAC)
    return sat32(y + as_int64(beta, "beta").reshape(1, -1))


def softmax(x) -> np.ndarray:
    """SOFTMAX: fx scores -> fx probabilities, per row.

    ::

        e   = exp_fx(sat32(x - max(x)), 30)     # Q30, the max gives exactly 2**30
        S   = sum(e)                             # < 2**47
        y, k = recip(S)                          # one reciprocal per row
        p   = rshift_round(e * y, k - 16)

    Max error vs float: 0.500 lsb (measured, rows of 1 to 49152 elements).
    """
    x = as_int64(x, "x")
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"softmax needs a non-empty 2-D [M,N] array, got shape {x.shape}")
    e = exp_fx(sat32(x - x.max(axis=1, keepdims=True)), EXP_FRAC)
    y, k = recip(e.sum(axis=1, keepdims=True))
    return sat32(rshift_round(e * y, k - FX_FRAC))


def rope(x, table) -> np.ndarray:
    """ROPE: rotate adjacent pairs ``(x[2i], x[2i+1])`` of every head by row ``r`` of ``table``.

    ``table int32[M, hd]``: ``hd/2`` cos then ``hd/2`` sin with ``TRIG_FRAC`` bits.
    ``y0 = rshift_round(x0*c - x1*s, 14)``, ``y1 = rshift_round(x0*s + x1*c, 14)``, saturated.
    Error: 0.5 lsb against the table's values; against exact angles add
    ``(|x0| + |x1|) * 2**-15`` from the table's rounding.
    """
    x = as_int64(x, "x")
    table = as_int64(table, "table")
    if x.ndim != 2 or table.ndim != 2 or table.shape[0] != x.shape[0] or table.shape[1] % 2:
        raise ValueError(f"rope needs x[M, H*hd] and table[M, hd] (hd even), got {x.shape} and {table.shape}")
    m, hd = table.shape
    if hd == 0 or x.shape[1] % hd:
        raise ValueError(f"rope: row length {x.shape[1]} is not a multiple of head_dim {hd}")
    xr = x.reshape(m, -1, hd // 2, 2)
    c = table[:, None, : hd // 2]
    s = table[:, None, hd // 2:]
    x0, x1 = xr[..., 0], xr[..., 1]
    y = np.stack([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)
    return sat32(rshift_round(y, TRIG_FRAC)).reshape(x.shape)


def rope_table(positions, head_dim: int, base: float) -> np.ndarray:
    """Host-side RoPE table ``int32[T, head_dim]``: cos then sin of ``pos * base**(-2i/head_dim)``, Q14."""
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"rope_table: head_dim must be a positive even number, got {head_dim}")
    pos = np.asarray(positions, dtype=np.float64).reshape(-1)
    inv = float(base) ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    ang = pos[:, None] * inv[None, :]
    tab = np.concatenate([np.cos(ang), np.sin(ang)], axis=1)
    return np.floor(tab * (1 << TRIG_FRAC) + 0.5).astype(np.int32)
