"""Streaming (FlashAttention-style) attention in fixed point: one KV tile at a time.

Scores are kept in *log2 units* (``score * log2(e)``), so that ``exp`` becomes
``2**`` and a renormalisation by a power of two is exact.  The state of a query
row is three int32 quantities that live in vbuf lanes:

``m``  (``ATTN_M_FRAC`` = 20 fraction bits, log2 units)  the running reference:
       >= every score seen so far (range +-2048, i.e. natural scores +-1419).
``l``  (``ATTN_FRAC`` = 20 fraction bits)  ``sum_j 2**(u_j - m)``  (``u_j``: score in log2 units).
``o``  (``ATTN_FRAC``)  ``sum_j 2**(u_j - m) * v_j`` (real ``v_j = vq_j * 2**vexp_j``).

``l`` and ``o`` share a block exponent folded into ``m``: after each tile, if
``l >= 2**21``, both are shifted right by ``r = bitlen(l) - 21`` and ``m`` grows
by exactly ``r`` (``r << 20``).  So ``2**20 <= l <= 2**21`` after every
non-empty tile (the row maximum alone contributes ``2**20``), whatever the
context length, and ``|o| <= l * max|v| < 2**31`` for ``|v| < 1024``.  Inside a
tile the weights ``p_j`` carry 8 more fraction bits (``ATTN_P_FRAC`` = 28) so
that ``l`` and ``o`` are rounded once per tile; the sums need 41 bits (``l``) and
51 bits (``o``) for ``t <= 4095``.

Ranges: ``t <= 4095`` tokens per tile; any context length; V values
``|v| < 1024`` (``vexp <= 3``; a larger exponent is clamped to 3).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from systolica.numerics_fixed import FX_FRAC, INT32_MIN, as_int64, bitlen, matmul, rshift_round, sat32
from systolica.numerics_nonlinear import EXP_FRAC, LOG2E_Q30, exp2_fx, recip

__all__ = ["ATTN_FRAC", "ATTN_M_FRAC", "ATTN_L_BITS", "ATTN_VEXP_MAX", "ATTN_P_FRAC", "AttnState", "attn_empty",
           "attn_tile", "attn_finish"]

ATTN_FRAC = 20  # fraction bits of l and o (and of a weight after its tile's rounding)
ATTN_M_FRAC = 20  # fraction bits of the scores and of m, in log2 units
ATTN_L_BITS = 21  # l is renormalised to stay <= 2**21
ATTN_VEXP_MAX = 3  # V exponents above this are clamped: |v| < 1024 keeps |o| < 2**31
ATTN_P_FRAC = 28  # fraction bits of p inside a tile: 8 guard bits, so l and o round once per tile


class AttnState(NamedTuple):
    """Running state of ``nq`` query rows: ``m int32[nq]`` (Q20, log2 units), ``l int32[nq]``, ``o int32[nq, hd]``."""

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

        u_j  = sat32(rshift_round((q . k_j) * LOG2E_Q30, 10 - qexp - kexp_j))   # score*log2(e), Q20
        valid_j = not (causal and j > offset);  none valid: return state unchanged
        m1   = max(m, max_valid u_j)
        a    = exp2_fx(m - m1, 20, 30)                     # rescale of the old state, Q30 (m - m1 saturated)
        p_j  = exp2_fx(u_j - m1, 20, 28) if valid_j else 0  # Q28 (8 guard bits), the maximum gives 2**28
        L    = rshift_round(l * a, 30) + rshift_round(sum_j p_j, 8)
        e_j  = min(vexp_j, 3)
        d_j  = exp2_fx(u_j - m1, 20, 28, down=max(-e_j, 0)) if valid_j else 0   # p_j * 2**e_j, rounded once
        PV   = sum_j (d_j * vq_j) << max(e_j, 0)                      # Q28, |PV| < 2**50
        O    = rshift_round(o * a, 30) + rshift_round(PV, 8)
        r    = max(0, bitlen(L) - 21)
        return sat32(m1 + (r << 20)), rshift_round(L, r), sat32(rshift_round(O, r))

    ``p_j`` weighs ``l``; ``d_j``, the weight with V's exponent applied (one rounding of ``p_j * 2**vexp_j`` a
    token and row, not one a product), weighs the values, so a p.V term is an exact product (in hardware a
    multiplier a lane, no shifter).  ``d_j`` keeps ``28 + vexp_j`` fraction bits: its rounding adds at most
    ``|vq_j| / 2**29`` to a row's ``PV / 2**28``, far below V's own quantization step.

    Accuracy of ``attn_finish`` after any number of tiles, vs float softmax
    attention on the dequantized q, k, v: <= 1 lsb + 1e-5 * max|v| (measured:
    3.6e-6 * max|v| above 1 lsb; 0.63 lsb for small v with pages >= 16).
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
    vexp = np.minimum(as_int64(vexp, "vexp").reshape(t), ATTN_VEXP_MAX)
    if state is None:
        state = attn_empty(nq, hd)
    elif state.o.shape != (nq, hd):
        raise ValueError(f"attn_tile: state o has shape {state.o.shape}, expected {(nq, hd)}")
    valid = np.arange(t) <= int(offset) if causal else np.ones(t, bool)
    if not valid.any():
        return state
    tv = int(np.count_nonzero(valid))  # valid tokens are a prefix of the tile
    dot = matmul(q, k[:tv]).astype(np.int64)  # |dot| <= hd * 2**14: dot * LOG2E_Q30 < 2**63 for hd < 2**17
    u = sat32(rshift_round(dot * LOG2E_Q30, (30 - ATTN_M_FRAC) - qexp - kexp[:, :tv])).astype(np.int64)
    m_old = state.m.astype(np.int64)
    m1 = np.maximum(m_old, u.max(axis=1))
    a = exp2_fx(sat32(m_old - m1), ATTN_M_FRAC, EXP_FRAC)
    p = exp2_fx(u - m1[:, None], ATTN_M_FRAC, ATTN_P_FRAC)  # u - m1 in [-2**32, 0]: fine in int64
    guard = ATTN_P_FRAC - ATTN_FRAC
    big_l = rshift_round(state.l.astype(np.int64) * a, EXP_FRAC) + rshift_round(p.sum(axis=1), guard)
    e = vexp[:tv]
    d = exp2_fx(u - m1[:, None], ATTN_M_FRAC, ATTN_P_FRAC, down=np.maximum(-e, 0)[None, :])
    # exact in float64: |d * (vq << max(e, 0))| <= 2**28 * 2**10, sums < 2**50
    pv = (d.astype(np.float64) @ (v[:tv] << np.maximum(e, 0)[:, None]).astype(np.float64)).astype(np.int64)
    big_o = rshift_round(state.o.astype(np.int64) * a[:, None], EXP_FRAC) + rshift_round(pv, guard)
    r = np.maximum(bitlen(big_l) - ATTN_L_BITS, 0)
    return AttnState(sat32(m1 + (r << ATTN_M_FRAC)), sat32(rshift_round(big_l, r)),
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
