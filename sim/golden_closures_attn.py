"""ATTN and ATTN_OUT closures of the golden simulator (:mod:`systolica.sim.golden_closures`): one KV tile of
streaming attention for a GQA group's rows, and the finish, bit-exact with :mod:`systolica.numerics`."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from systolica import numerics as nx
from systolica.isa import Instr
from systolica.layout import attn_state_lines, kv_tile
from systolica.sim.golden_closure_util import (
    _I64,
    Op,
    _exp2_scalar,
    _generic,
    _overlap_fields,
    _recip_int,
    _rr_int,
    _rshift_round_inplace,
    _sat32_into,
)
from systolica.sim.golden_kernels import attn_kernel, attn_out_i64, compiled
from systolica.sim.golden_ops import EXECUTE, _lines

if TYPE_CHECKING:  # pragma: no cover
    from systolica.sim.golden import GoldenSim


def _attn(sim: GoldenSim, ins: Instr) -> Op | None:
    nq, hd, t, cols = ins.nq, ins.hd, ins.t, sim.cfg.cols
    if nq == 0 or hd == 0:
        return None
    st = _lines(sim, "vbuf", ins, "state", attn_state_lines(nq, hd), "state")
    ml, o = st[:nq], st[nq:].reshape(nq, hd * cols)
    tv = min(t, max(ins.offset + 1, 0)) if ins.causal else t  # valid tokens: a prefix of the tile
    if tv == 0:
        if not ins.init:  # numerics.attn_tile returns the state unchanged; the m/l lines are rewritten, lanes 2.. 0
            ml_rest = ml[:, 2:]
            return partial(np.ndarray.fill, ml_rest, 0)
        o_all = o

        def empty() -> None:  # the state before any tile: m = INT32_MIN, l = 0, o = 0
            ml.fill(0)
            ml[:, 0] = nx.INT32_MIN
            o_all.fill(0)

        return empty
    hdim = hd * cols
    if hdim * (1 << 14) > 1 << 24:
        return _generic(sim, ins)
    p_slots = 1 << ins.page_log2
    tile = kv_tile(ins.page_log2, hd)
    q = _lines(sim, "spad", ins, "q", nq * hd, "queries").reshape(nq, hdim)
    qexp = _lines(sim, "spad", ins, "qexp", nq, "query exponents")[:, 0]
    kv = _lines(sim, "spad", ins, "kv", tile.lines, "KV tile")
    k = kv[tile.k:tile.k + p_slots * hd].reshape(p_slots, hdim)[:tv]
    v = kv[tile.v:tile.v + p_slots * hd].reshape(p_slots, hdim)[:tv]
    kexp, vexp = kv[tile.kexp:tile.kexp + tv, 0], kv[tile.vexp:tile.vexp + tv, 0]
    init = bool(ins.init)
    kernel = attn_kernel()
    if kernel is not None:
        base, delta = nx.EXP_BASE, nx.EXP_DELTA
        return partial(kernel, q, qexp, k, kexp, v, vexp, ml, o, init, base, delta)
    qf, kf = np.empty((nq, hdim), np.float32), np.empty((tv, hdim), np.float32)
    reference = EXECUTE["ATTN"]
    exp2_fx, frac_m, frac_e, frac_p = nx.exp2_fx, nx.ATTN_M_FRAC, nx.EXP_FRAC, nx.ATTN_P_FRAC
    guard = frac_p - nx.ATTN_FRAC

    int32_min, int32_max, log2e = nx.INT32_MIN, nx.INT32_MAX, nx.LOG2E_Q30
    u_shift0 = 30 - frac_m
    l_bits, vexp_max = nx.ATTN_L_BITS, nx.ATTN_VEXP_MAX

    def run() -> None:
        # numerics.attn_tile: per-row quantities (m, l, the rescale a, the renormalisation r) as Python integers,
        # the tile's scores, weights and sums as int64 / exact float arrays; every shift is checked to be in
        # 1..63 first (else the reference op runs)
        qe, ke = qexp.tolist(), kexp.tolist()
        ve = np.minimum(vexp.astype(_I64), vexp_max)
        if u_shift0 - max(qe) - max(ke) < 1 or u_shift0 - min(qe) - min(ke) > 63:
            return reference(sim, ins)
        np.copyto(qf, q)
        np.copyto(kf, k)
        u = (qf @ kf.T).astype(_I64)  # |q.k| <= hdim * 2**14 <= 2**24: exact
        np.multiply(u, log2e, out=u)
        ush = np.subtract.outer(np.array(qe, _I64), -np.array(ke, _I64))
        np.subtract(u_shift0 - 1, ush, out=ush)  # rshift_round(u, s) = ((u >> (s-1)) + 1) >> 1
        np.right_shift(u, ush, out=u)
        np.add(u, 1, out=u)
        np.right_shift(u, 1, out=u)
        np.clip(u, int32_min, int32_max, out=u)
        if init:
            m_old, l_old = [int32_min] * nq, [0] * nq
        else:
            m_old, l_old = ml[:, 0].tolist(), ml[:, 1].tolist()
        m1 = [max(mo, um) for mo, um in zip(m_old, u.max(axis=1).tolist(), strict=True)]
        a = [_exp2_scalar(min(max(mo - mm, int32_min), int32_max), frac_m, frac_e)
             for mo, mm in zip(m_old, m1, strict=True)]
        um = u - np.array(m1, _I64)[:, None]
        p = exp2_fx(um, frac_m, frac_p)
        big_l = [_rr_int(lo * ai, frac_e) + _rr_int(ps, guard)
                 for lo, ai, ps in zip(l_old, a, p.sum(axis=1).tolist(), strict=True)]
        # the weights with V's exponents applied, rounded once; exact in float64: |d * (vq << e)| <= 2**38,
        # sums < 2**50
        d = exp2_fx(um, frac_m, frac_p, down=np.maximum(-ve, 0)[None, :])
        pv = (d.astype(np.float64) @ (v.astype(_I64) << np.maximum(ve, 0)[:, None]).astype(np.float64)).astype(_I64)
        _rshift_round_inplace(pv, guard)
        if init:
            big_o = pv
        else:
            big_o = o.astype(_I64)
            np.multiply(big_o, np.array(a, _I64)[:, None], out=big_o)
            _rshift_round_inplace(big_o, frac_e)
            np.add(big_o, pv, out=big_o)
        rs = [max(abs(x).bit_length() - l_bits, 0) for x in big_l]
        for i, r in enumerate(rs):
            if r:
                _rshift_round_inplace(big_o[i], r)
        np.clip(big_o, int32_min, int32_max, out=big_o)
        ml.fill(0)
        ml[:, 0] = [min(max(mm + (r << frac_m), int32_min), int32_max) for mm, r in zip(m1, rs, strict=True)]
        ml[:, 1] = [min(max(_rr_int(x, r) if r else x, int32_min), int32_max) for x, r in zip(big_l, rs, strict=True)]
        np.copyto(o, big_o, casting="unsafe")
        return None

    return run


def _attn_out(sim: GoldenSim, ins: Instr) -> Op | None:
    """numerics.attn_finish with each row's reciprocal as Python integers."""
    nq, hd, cols = ins.nq, ins.hd, sim.cfg.cols
    dst = _lines(sim, "vbuf", ins, "dst", nq * hd, "result")
    if not dst.size:
        return None
    st = _lines(sim, "vbuf", ins, "state", attn_state_lines(nq, hd), "state")
    ml, o = st[:nq], st[nq:].reshape(nq, hd * cols)
    out = dst.reshape(nq, hd * cols)
    kernel = compiled(attn_out_i64)
    if kernel is not None and not _overlap_fields(ins, ("dst", nq * hd), ("state", attn_state_lines(nq, hd))):
        return partial(kernel, ml, o, out)
    p = np.empty(out.shape, _I64)
    y_col, s_col = np.empty((nq, 1), _I64), np.empty((nq, 1), _I64)
    ffrac = nx.FX_FRAC

    def run() -> None:
        ys, ss = [], []
        for ell in ml[:, 1].tolist():
            if ell > 0:  # k = bitlen(l) + 29 >= 30: a shift in 14..44
                y, k = _recip_int(ell)
                ys.append(y)
                ss.append(k - ffrac - 1)
            else:  # no token seen: 0
                ys.append(0)
                ss.append(0)
        y_col[:, 0], s_col[:, 0] = ys, ss
        np.multiply(o, y_col, out=p, dtype=_I64)  # |o * y| < 2**61
        np.right_shift(p, s_col, out=p)
        np.add(p, 1, out=p)
        np.right_shift(p, 1, out=p)
        _sat32_into(out, p)

    return run
