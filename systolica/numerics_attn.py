"""Streaming (FlashAttention-style) attention in fixed point: one KV tile at a time.

The state of a query row is three int32 quantities that live in vbuf lanes:

``m``  (fx, ``FX_FRAC``)  the running reference: >= every score seen so far.
``l``  (``ATTN_FRAC`` = 22 fraction bits)  ``sum_j exp(s_j - m)``.
``o``  (``ATTN_FRAC``)  ``sum_j exp(s_j - m) * v_j`` (real ``v_j = vq_j * 2**vexp_j``).

``l`` and ``o`` share a block exponent hidden in ``m``: after each tile, if
``l >= 2**24``, both are shifted right by ``r = bitlen(l) - 24`` and ``m`` grows
by ``r * LN2_FX`` (``r * ln 2``, which is what a shift by ``r`` means for
``exp(s - m)``).  So ``2**22 <= l <= 2**24`` after every non-empty tile (the row
maximum contributes exactly ``2**22``), whatever the context length, and
``|o| <= l * max|v| < 2**31`` for ``|v| < 128``.  A tile accumulates in wider
registers: ``l`` < 2**35 and ``|o|`` < 2**42 for ``t <= 4095``.

Ranges: ``t <= 4095`` tokens per tile; any context length (``m`` absorbs it);
V values ``|v| < 128`` (``vexp <= 0``; a larger exponent is clamped to 0);
scores saturate at +-32768.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from systolica.numerics_fixed import FX_FRAC, INT32_MIN, as_int64, bitlen, matmul, rshift_round, sat32
from systolica.numerics_nonlinear import EXP_FRAC, LN2_FX, exp_fx, recip

__all__ = ["ATTN_FRAC", "ATTN_L_BITS", "AttnState", "attn_empty", "attn_tile", "attn_finish"]

ATTN_FRAC = 22  # fraction bits of p, l and o
ATTN_L_BITS = 24  # l is renormalised to stay <= 2**24


class AttnState(NamedTuple):
    """Running state of ``nq`` query rows: ``m int32[nq]`` (fx), ``l int32[nq]``, ``o int32[nq, hd]``."""

    m: np.ndarray
    l: np.ndarray  # noqa: E741  (the name of the contract)
    o: np.ndarray


def attn_empty(nq: int, hd: int) -> AttnState:
    """The state before any tile: ``m = INT32_MIN``, ``l = 0``, ``o = 0``."""
    return AttnState(np.full(nq, INT32_MIN, np.int32), np.zeros(nq, np.int32), np.zeros((nq, hd), np.int32))


def attn_tile(q, qexp, k, kexp, v, vexp, state: AttnState | None, offset: int, causal: bool) -> AttnState:
    """ATTN: fold one KV tile into the running state of ``nq`` query rows.

    Parameters
    ----------
    q, qexp : int8[nq, hd], int8[nq]
        Quantized query rows (one GQA group of heads of one token) and their exponents.
    k, kexp, v, vexp : int8[t, hd], int8[t], int8[t, hd], int8[t]
        The tile's keys and values and their per-token exponents.
    state : AttnState or None
        ``None`` for the first tile.
    offset : int
        Query position minus the position of the tile's first token.
    causal : bool
        Mask token ``j`` when ``j > offset``.

    Integer algorithm, per query row (``>>`` floor shifts)::

        s_j  = sat32(rshift_round(q . k_j, -(qexp + kexp_j + 16)))   # scores, fx (1/sqrt(hd) is in Wq)
        valid_j = not (causal and j > offset);  none valid: return state unchanged
        m1   = max(m, max_valid s_j)
        a    = exp_fx(sat32(m - m1), 30)                           # rescale of the old state, Q30
        p_j  = exp_fx(sat32(s_j - m1), 22) if valid_j else 0        # Q22
        L    = rshift_round(l * a, 30) + sum_j p_j
        O    = rshift_round(o * a, 30) + sum_j rshift_round(p_j * vq_j, -min(vexp_j, 0))
        r    = max(0, bitlen(L) - 24)
        return m1 + r*LN2_FX (sat32), rshift_round(L, r), sat32(rshift_round(O, r))

    Accuracy: see ``docs/quantization.md`` "Measured errors".
    """
    q = np.asarray(q)
    k = np.asarray(k)
    v = as_int64(v, "v")
    if q.ndim != 2 or k.ndim != 2 or v.shape != k.shape or k.shape[1] != q.shape[1]:
        raise ValueError(f"attn_tile needs q[nq,hd], k[t,hd], v[t,hd]; got {q.shape}, {k.shape}, {v.shape}")
    nq, hd = q.shape
    t = k.shape[0]
    if t > 4095:
        raise ValueError(f"attn_tile: a tile holds at most 4095 tokens, got {t}")
    qexp = as_int64(qexp, "qexp").reshape(nq, 1)
    kexp = as_int64(kexp, "kexp").reshape(1, t)
    vexp = np.minimum(as_int64(vexp, "vexp").reshape(t), 0)
    if state is None:
        state = attn_empty(nq, hd)
    elif state.o.shape != (nq, hd):
        raise ValueError(f"attn_tile: state o has shape {state.o.shape}, expected {(nq, hd)}")
    valid = np.arange(t) <= int(offset) if causal else np.ones(t, bool)
    if not valid.any():
        return state
    tv = int(np.count_nonzero(valid))  # valid tokens are a prefix of the tile
    dot = matmul(q, k[:tv]).astype(np.int64)
    s = sat32(rshift_round(dot, -(qexp + kexp[:, :tv] + FX_FRAC))).astype(np.int64)
    m_old = state.m.astype(np.int64)
    m1 = np.maximum(m_old, s.max(axis=1))
    a = exp_fx(sat32(m_old - m1), EXP_FRAC)
    p = exp_fx(sat32(s - m1[:, None]), ATTN_FRAC)
    big_l = rshift_round(state.l.astype(np.int64) * a, EXP_FRAC) + p.sum(axis=1)
    vt = v[:tv]
    sh = -vexp[:tv]
    if np.all(sh == 0):
        pv = (p.astype(np.float64) @ vt.astype(np.float64)).astype(np.int64)  # exact: sums < 2**41
    else:
        pv = rshift_round(p[:, :, None] * vt[None, :, :], sh[None, :, None]).sum(axis=1)
    big_o = rshift_round(state.o.astype(np.int64) * a[:, None], EXP_FRAC) + pv
    r = np.maximum(bitlen(big_l) - ATTN_L_BITS, 0)
    return AttnState(sat32(m1 + r * LN2_FX), sat32(rshift_round(big_l, r)),
                     sat32(rshift_round(big_o, r[:, None])))


def attn_finish(state: AttnState) -> np.ndarray:
    """ATTN_OUT: ``o / l`` as fx ``int32[nq, hd]`` with one reciprocal per row.

    ``y, k = recip(l)``; ``out = sat32(rshift_round(o * y, k - 16))``.  A row
    that saw no token (``l = 0``) gives 0.
    """
    o = as_int64(state.o, "o")
    y, k = recip(as_int64(state.l, "l"))
    out = sat32(rshift_round(o * y[:, None], (k - FX_FRAC)[:, None]))
    return np.where(np.asarray(state.l)[:, None] > 0, out, 0).astype(np.int32)
