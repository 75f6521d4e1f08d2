"""Per-instruction closures of the golden simulator's execution plans (:mod:`systolica.sim.golden_plan`).

:func:`compile_word` turns one checked instruction into a closure over precomputed numpy views of
its operands that does exactly what ``golden_ops.EXECUTE[op](sim, ins)`` does, counters aside (the
plan sums those once): the same :mod:`systolica.numerics` functions, or the same integer formula
with its operands' ranges checked first and the numerics function (or the reference op) outside
them.  :func:`word_counters` gives what the instruction adds to the run's counters.

This module holds the dispatch, DMA and line-op closures; GEMM's are in
:mod:`~systolica.sim.golden_closures_gemm`, attention's in :mod:`~systolica.sim.golden_closures_attn`, and the
helpers they share in :mod:`~systolica.sim.golden_closure_util`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from systolica import numerics as nx
from systolica import wstream4
from systolica.isa import Buf, Instr
from systolica.layout import dma_line_bytes, lines_for
from systolica.sim.golden_closure_util import (
    _I64,
    Op,
    _generic,
    _in_place_ok,
    _overlap_fields,
    _recip_int,
    _rr_sat64,
    _rshift_round_inplace,
    _rsqrt_int,
    _sat32_into,
    _wrap64,
)
from systolica.sim.golden_closures_attn import _attn, _attn_out
from systolica.sim.golden_closures_gemm import _gemm
from systolica.sim.golden_kernels import binary_i64, compiled, quant_i64, requant_i64, rmsnorm_i64, rope_i64, silu_i64
from systolica.sim.golden_ops import EXECUTE, _dma_plan, _dram_rows, _lines, _rows, check_operands

if TYPE_CHECKING:  # pragma: no cover
    from systolica.sim.golden import GoldenSim

__all__ = ["Op", "compile_word", "compile_dma", "word_counters"]

_LITTLE = sys.byteorder == "little"  # buffer int32 lines are little-endian in DRAM: views need a little-endian host



# ------------------------------------------------------------------ counters
def word_counters(sim: GoldenSim, ins: Instr) -> tuple[int, int, int, int]:
    """What executing ``ins`` adds to ``(dma_read_bytes, dma_write_bytes, macs, attn_macs)``."""
    cols = sim.cfg.cols
    if ins.op in ("LOAD", "STORE"):
        if not (ins.rows and ins.lines):
            return 0, 0, 0, 0
        b = ins.rows * ins.lines * dma_line_bytes(Buf(ins.buf), cols)
        return (b, 0, 0, 0) if ins.op == "LOAD" else (0, b, 0, 0)
    if ins.op == "GEMM":
        return 0, 0, (ins.m * ins.k * cols * ins.n * cols if ins.m and ins.n else 0), 0
    if ins.op == "GEMM_STREAM":
        rd = wstream4.stream_port_bytes(ins.fields, sim.cfg) * sim.cfg.dma_ports
        return rd, 0, (ins.m * ins.k * cols * ins.n * cols if ins.m and ins.n else 0), 0
    if ins.op == "ATTN":
        return 0, 0, 0, (2 * ins.nq * ins.t * ins.hd * cols if ins.nq and ins.hd else 0)
    return 0, 0, 0, 0


# ------------------------------------------------------------------ op closures
def _load(sim: GoldenSim, ins: Instr) -> Op | None:
    view, lb, row_bytes, rows = _dma_plan(sim, ins)
    if not view.size:
        return None
    src = _dram_rows(sim.window, ins.dram, rows, row_bytes, ins.stride)
    dst = view.view(np.uint8).reshape(rows, row_bytes)  # a contiguous run of lines: a view
    return partial(np.copyto, dst, src)  # (a partial: one object for the collector, a lambda four)


def _store(sim: GoldenSim, ins: Instr) -> Op | None:
    view, lb, row_bytes, rows = _dma_plan(sim, ins)
    if not view.size:
        return None
    if not (rows == 1 or ins.stride >= row_bytes):
        return _generic(sim, ins)  # overlapping rows: written in order by the reference
    src = view.view(np.uint8).reshape(rows, row_bytes)
    dst = _dram_rows(sim.window, ins.dram, rows, row_bytes, ins.stride)
    return partial(np.copyto, dst, src)


def _unary_kernel(sim: GoldenSim, ins: Instr, kernel, *extra) -> Op | None:
    """SILU through its compiled kernel (``None`` when numba is missing or the lines overlap: the generic op)."""
    rows, lines = ins.rows, ins.lines
    dst = _lines(sim, "vbuf", ins, "dst", rows * lines, "result")
    if not dst.size:
        return None
    if kernel is None or not _in_place_ok(ins, "dst", rows * lines, (("src", rows * lines),)):
        return _generic(sim, ins)
    src = _rows(_lines(sim, "vbuf", ins, "src", rows * lines, "source"), rows)
    return partial(kernel, src, _rows(dst, rows), *extra)


def _silu(sim: GoldenSim, ins: Instr) -> Op | None:
    return _unary_kernel(sim, ins, compiled(silu_i64))


def _rope(sim: GoldenSim, ins: Instr) -> Op | None:
    rows, heads, hd, cols = ins.rows, ins.heads, ins.hd, sim.cfg.cols
    n = rows * heads * hd
    dst = _lines(sim, "vbuf", ins, "dst", n, "result")
    if not dst.size:
        return None
    kernel = compiled(rope_i64)
    if kernel is None or not _in_place_ok(ins, "dst", n, (("src", n), ("table", rows * hd)), bcast=False) \
            or _overlap_fields(ins, ("dst", n), ("table", rows * hd)):
        return _generic(sim, ins)
    src = _rows(_lines(sim, "vbuf", ins, "src", n, "source"), rows)
    table = _lines(sim, "vbuf", ins, "table", rows * hd, "table").reshape(rows, hd * cols)
    return partial(kernel, src, table, _rows(dst, rows), heads)


def _requant(sim: GoldenSim, ins: Instr) -> Op | None:
    rows, lines, shift = ins.rows, ins.lines, ins.shift
    dst = _lines(sim, "vbuf", ins, "dst", rows * lines, "result")
    if not dst.size:
        return None
    src = _rows(_lines(sim, "acc", ins, "src", rows * lines, "source"), rows)
    mult = _lines(sim, "vbuf", ins, "mult", lines, "multipliers").reshape(-1)
    exps = _lines(sim, "spad", ins, "exps", rows, "exponents")[:, 0]
    out = _rows(dst, rows)
    kernel = compiled(requant_i64)
    if kernel is not None and not _overlap_fields(ins, ("dst", rows * lines), ("mult", lines)):
        return partial(kernel, src, mult, exps, shift, out)  # the kernel writes as it reads: mult apart from dst
    p = np.empty(out.shape, _I64)
    sh = np.empty((rows, 1), _I64)
    requant = nx.requant

    def run() -> None:
        if rows == 1:
            s = shift - int(exps[0])
            if 0 < s < 64:
                np.multiply(src, mult, out=p, dtype=_I64)  # |acc * mult| <= 2**62
                _rshift_round_inplace(p, s)
                _sat32_into(out, p)
                return
        else:  # one shift per row, each in 1..63: the same formula with the shifts broadcast
            np.subtract(shift, exps[:, None], out=sh, dtype=_I64)
            if sh.min() > 0 and sh.max() < 64:
                np.multiply(src, mult, out=p, dtype=_I64)
                np.subtract(sh, 1, out=sh)
                np.right_shift(p, sh, out=p)
                np.add(p, 1, out=p)
                np.right_shift(p, 1, out=p)
                _sat32_into(out, p)
                return
        out[...] = requant(src, mult, exps, shift)

    return run


def _binary(sim: GoldenSim, ins: Instr) -> Op | None:
    rows, lines = ins.rows, ins.lines
    dst = _lines(sim, "vbuf", ins, "dst", rows * lines, "result")
    if not dst.size:
        return None
    a = _rows(_lines(sim, "vbuf", ins, "a", rows * lines, "a"), rows)
    b = _lines(sim, "vbuf", ins, "b", lines if ins.bcast else rows * lines, "b")
    b = b.reshape(1, -1) if ins.bcast else _rows(b, rows)
    out = _rows(dst, rows)
    kernel = compiled(binary_i64)
    n_b = lines if ins.bcast else rows * lines
    if kernel is not None and _in_place_ok(ins, "dst", rows * lines, (("a", rows * lines), ("b", n_b)), ins.bcast):
        return partial(kernel, a, b, out, ins.op == "MUL", ins.shift if ins.op == "MUL" else 0)
    p = np.empty(out.shape, _I64)
    if ins.op == "ADD":
        def add() -> None:  # sat32(a + b)
            np.add(a, b, out=p, dtype=_I64)
            _sat32_into(out, p)

        return add
    s = ins.shift
    if not 0 < s < 64:
        return _generic(sim, ins)

    def mul() -> None:  # sat32(rshift_round(a * b, shift)), |a * b| <= 2**62
        np.multiply(a, b, out=p, dtype=_I64)
        _rshift_round_inplace(p, s)
        _sat32_into(out, p)

    return mul


def _quant_rows_pos(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """numerics.quant_rows of int64 ``x[rows, n]`` (n > 0) when every row's shift is positive, else ``None``.

    Per row, as numerics: ``s = bitlen(max|x|) - 7``, one more if rounding leaves the maximum above 127 or
    the minimum below -127; ``q = rshift_round(x, s)``, ``e = s - FX_FRAC``.  The per-row scalars are Python
    integers (``int.bit_length`` is numerics' bitlen on int64); with every ``s`` in 1..63 the shift is the
    same ``((x >> (s-1)) + 1) >> 1`` for the whole block.
    """
    shifts = []
    for hi, lo in zip(x.max(axis=1).tolist(), x.min(axis=1).tolist(), strict=True):
        s = max(hi, -lo).bit_length() - 7
        if s <= 0:
            return None
        if ((hi + (1 << (s - 1))) >> s) > 127 or ((lo + (1 << (s - 1))) >> s) < -127:
            s += 1
        shifts.append(s)
    sh = np.array(shifts, _I64).reshape(-1, 1)
    q = np.right_shift(x, sh - 1)
    np.add(q, 1, out=q)
    np.right_shift(q, 1, out=q)
    return q, sh


def _quant(sim: GoldenSim, ins: Instr) -> Op | None:
    rows, lines, k = ins.rows, ins.lines, 1 + ins.split
    if not rows:
        return None
    if not lines:
        return _generic(sim, ins)
    src = _lines(sim, "vbuf", ins, "src", rows * lines, "source").reshape(rows, lines * sim.cfg.cols)
    dst = _rows(_lines(sim, "spad", ins, "dst", k * rows * lines, "result"), k * rows)
    exps = _lines(sim, "spad", ins, "exps", k * rows, "exponent lines")
    split = bool(ins.split)
    kernel = compiled(quant_i64)
    if kernel is not None and not _overlap_fields(ins, ("dst", k * rows * lines), ("exps", k * rows)):
        return partial(kernel, src, dst, exps, split)  # written row by row: the result lines apart from the exponents
    x = np.empty(src.shape, _I64)
    reference = EXECUTE["QUANT"]

    def run() -> None:
        np.copyto(x, src)
        first = _quant_rows_pos(x)
        if first is None:
            return reference(sim, ins)
        q, s = first
        if not split:
            dst[...] = q
            exps[...] = 0
            exps[:, 0] = (s - nx.FX_FRAC).reshape(-1)
            return None
        # the residual: sat32(x - dequant_rows(q, e)); dequant is q << s here (s > 0, |q| <= 127: no overflow)
        deq = np.left_shift(q, s)
        np.maximum(deq, nx.INT32_MIN, out=deq)
        np.minimum(deq, nx.INT32_MAX, out=deq)
        r = np.subtract(x, deq)
        np.maximum(r, nx.INT32_MIN, out=r)
        np.minimum(r, nx.INT32_MAX, out=r)
        second = _quant_rows_pos(r)
        if second is None:
            return reference(sim, ins)
        q2, s2 = second
        dst[:rows] = q
        dst[rows:] = q2
        exps[...] = 0
        exps[:rows, 0] = (s - nx.FX_FRAC).reshape(-1)
        exps[rows:, 0] = (s2 - nx.FX_FRAC).reshape(-1)
        return None

    return run


def _rmsnorm(sim: GoldenSim, ins: Instr) -> Op | None:
    """numerics.rmsnorm: the per-row scalars (shift, sum of squares, 1/rms) as Python integers, the rows as int64
    arrays; a row shift outside 1..63 (or a bad eps) takes the reference op."""
    rows, n, eps, cols = ins.rows, ins.n, ins.eps, sim.cfg.cols
    lines = lines_for(n, cols)
    dst = _lines(sim, "vbuf", ins, "dst", rows * lines, "result")
    if not dst.size:
        return None
    if n == 0 or not 0 <= eps < 1 << 24:
        return _generic(sim, ins)  # numerics raises: the reference op does it
    src = _rows(_lines(sim, "vbuf", ins, "src", rows * lines, "source"), rows)[:, :n]
    gamma = _lines(sim, "vbuf", ins, "gamma", lines, "gamma").reshape(-1)[:n]
    out = _rows(dst, rows)
    res, pad = out[:, :n], out[:, n:]
    ry, rk = _recip_int(n)
    kernel = compiled(rmsnorm_i64)
    if kernel is not None and not _overlap_fields(ins, ("dst", rows * lines), ("gamma", lines)) and \
            _in_place_ok(ins, "dst", rows * lines, (("src", rows * lines),)):
        return partial(kernel, src, gamma, out, n, eps, ry, rk)  # a row is read whole before it is written
    d, p = np.empty((rows, n), _I64), np.empty((rows, n), _I64)
    s_col, y_col, t_col = (np.empty((rows, 1), _I64) for _ in range(3))
    reference = EXECUTE["RMSNORM"]
    guard, ffrac, nfrac = nx.NORM_GUARD, nx.FX_FRAC, nx.NORM_FRAC

    def run() -> None:
        np.copyto(d, src)
        np.left_shift(d, guard, out=d)  # Q24: |d| < 2**39
        ss = [max(hi, -lo).bit_length() - 23 for hi, lo in zip(d.max(axis=1).tolist(), d.min(axis=1).tolist(),
                                                                strict=True)]
        ss = [max(s, 0) for s in ss]
        if max(ss) > 0:  # ds = rshift_round(d, s) = (d + 2**(s-1)) >> s in place (|d| < 2**39); s = 0 keeps d
            s_col[:, 0] = ss
            y_col[:, 0] = [(1 << s) >> 1 for s in ss]
            np.add(d, y_col, out=d)
            np.right_shift(d, s_col, out=d)
        np.multiply(d, d, out=p)
        sq = p.sum(axis=1).tolist()
        ys, ts = [], []
        for s, q in zip(ss, sq, strict=True):
            tot = _wrap64(q + _rr_sat64(n * eps, 2 * s - 2 * guard))
            tot = max(tot, 1)
            c = max(tot.bit_length() - 31, 0)
            y, k = _rsqrt_int((tot >> c) * ry, c + 2 * s - 2 * (ffrac + guard) - rk)
            ys.append(y)
            ts.append(k + ffrac + guard - nfrac - s)
        if min(ts) < 1 or max(ts) > 63:
            return reference(sim, ins)
        y_col[:, 0], t_col[:, 0] = ys, ts
        np.multiply(d, y_col, out=p)  # (x - mu) / rms, Q20
        np.subtract(t_col, 1, out=t_col)
        np.right_shift(p, t_col, out=p)
        np.add(p, 1, out=p)
        np.right_shift(p, 1, out=p)
        np.multiply(p, gamma, out=p)
        _rshift_round_inplace(p, nfrac)
        _sat32_into(res, p)
        pad.fill(0)
        return None

    return run


def _nothing(sim: GoldenSim, ins: Instr) -> Op | None:
    return None


_COMPILERS: dict[str, Callable[[GoldenSim, Instr], Op | None]] = {
    "NOP": _nothing, "FINISH": _nothing, "LOAD": _load, "STORE": _store, "GEMM": _gemm, "GEMM_STREAM": _gemm,
    "REQUANT": _requant,
    "ADD": _binary, "MUL": _binary, "ATTN": _attn, "ATTN_OUT": _attn_out, "QUANT": _quant, "RMSNORM": _rmsnorm,
    "SILU": _silu, "ROPE": _rope,
}


def compile_dma(sim: GoldenSim, ins: Instr) -> Op | None:
    """:func:`compile_word` of a LOAD/STORE, raising what its dispatch check raises (``OpFault`` for a DMA or range
    fault, ``ReadOnlyStore``) instead of compiling a faulting instruction."""
    if not _LITTLE:  # pragma: no cover - the reference op checks only when it runs
        check_operands(sim, ins)
    return compile_word(sim, ins)


def compile_word(sim: GoldenSim, ins: Instr) -> Op | None:
    """A closure doing what ``EXECUTE[ins.op](sim, ins)`` does (counters aside), or ``None`` for no change.

    ``ins`` has passed the dispatch checks.  The closure holds views of ``sim``'s buffers and window.
    """
    if not _LITTLE:  # pragma: no cover - big-endian hosts take the reference op
        return _generic(sim, ins)
    return _COMPILERS.get(ins.op, _generic)(sim, ins)
