"""Per-instruction closures of the golden simulator's execution plans (:mod:`systolica.sim.golden_plan`).

:func:`compile_word` turns one checked instruction into a closure over precomputed numpy views of
its operands that does exactly what ``golden_ops.EXECUTE[op](sim, ins)`` does, counters aside (the
plan sums those once): the same :mod:`systolica.numerics` functions, or the same integer formula
with its operands' ranges checked first and the numerics function (or the reference op) outside
them.  :func:`word_counters` gives what the instruction adds to the run's counters.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from systolica import numerics as nx
from systolica import wstream, wstream4
from systolica.isa import Buf, Instr
from systolica.layout import WPAGE, attn_state_lines, dma_line_bytes, kv_tile, lines_for, wstream_end
from systolica.sim.golden_int4 import stream4_closure
from systolica.sim.golden_kernels import (
    _INT64_MAX,
    _INT64_MIN,
    KERNEL_MAX_K,
    KERNEL_MAX_M,
    attn_kernel,
    attn_out_i64,
    binary_i64,
    compiled,
    int8_kernel,
    quant_i64,
    requant_i64,
    rmsnorm_i64,
    rope_i64,
    silu_i64,
)
from systolica.sim.golden_ops import EXECUTE, _dma_plan, _dram_rows, _lines, _rows, check_operands, readonly_cover

if TYPE_CHECKING:  # pragma: no cover
    from systolica.sim.golden import GoldenSim

__all__ = ["Op", "compile_word", "compile_dma", "word_counters"]

_I64 = np.int64
_LITTLE = sys.byteorder == "little"  # buffer int32 lines are little-endian in DRAM: views need a little-endian host

Op = Callable[[], None]


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
def _generic(sim: GoldenSim, ins: Instr) -> Op:
    fn = EXECUTE[ins.op]
    return lambda: fn(sim, ins)


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


def _stream_reader(sim: GoldenSim, ins: Instr) -> tuple[np.ndarray, Op]:
    """GEMM_STREAM's ``W`` as a view of a buffer, and the closure that refills that buffer from DRAM.

    The view is 5-D, ``[j, g, p, kk, r]`` for ``W[j*cols + g*P + p, kk*cols + r]`` (a 2-D reshape would copy).

    Each port's bytes are one strided copy of whole pages (its pages are ``dma_ports`` pages apart), so a
    stream costs what the LOADs of the spad path cost."""
    cfg, P, C = sim.cfg, sim.cfg.dma_ports, sim.cfg.cols
    n, k, w0 = ins.n, ins.k, ins.w
    nb = wstream.port_bytes(n, k, cfg)
    first = w0 - w0 % WPAGE
    off = w0 - first
    pages = max(1, -(-(off + nb) // WPAGE))  # k = 0 at a page start reads nothing: still one (empty) page
    buf = np.empty((P, pages, WPAGE), np.uint8)
    win = sim.window
    tail = off + nb - (pages - 1) * WPAGE  # bytes of the last page each port reads (the window may end there)
    srcs = [(np.lib.stride_tricks.as_strided(win[first + p * WPAGE:], shape=(pages - 1, WPAGE),
                                             strides=(P * WPAGE, 1)),
             win[first + p * WPAGE + (pages - 1) * P * WPAGE:][:tail]) for p in range(P)]
    w = buf.reshape(P, -1)[:, off:off + nb].view(np.int8).reshape(P, n, k, C // P, C) \
        .transpose(1, 3, 0, 2, 4) if nb else np.empty((n * C, 0), np.int8)  # [j, g, p, kk, r]: a view of buf

    def fill() -> None:
        for p, (full, last) in enumerate(srcs):
            np.copyto(buf[p, :pages - 1], full)
            buf[p, pages - 1, :tail] = last

    return w, fill


def _gemm(sim: GoldenSim, ins: Instr) -> Op | None:
    if ins.op == "GEMM_STREAM" and ins.wfmt:  # 4-bit codes with group scales: a closure of their own
        return stream4_closure(sim, ins)
    m, k, n, cols = ins.m, ins.k, ins.n, sim.cfg.cols
    dst = _lines(sim, "acc", ins, "dst", m * n, "result")
    if not dst.size:
        return None
    a = _rows(_lines(sim, "spad", ins, "a", m * k, "A"), m)
    if ins.op == "GEMM_STREAM":
        w, fill = _stream_reader(sim, ins)
    else:
        w, fill = _rows(_lines(sim, "spad", ins, "w", n * cols * k, "W"), n * cols), None
    out = _rows(dst, m)
    if fill is not None and k and readonly_cover(sim, ins.w, wstream_end(ins.fields, sim.cfg)):
        # weights the host declared read-only: read and converted once per simulator, shared by every program
        kernel = int8_kernel() if m <= KERNEL_MAX_M and k * cols <= KERNEL_MAX_K else None
        if kernel is not None:
            return _gemm_int8(kernel, a, _readonly_weights(sim, ins, w, fill, int8=True)[0], out, bool(ins.acc))
        wkn, exact = _readonly_weights(sim, ins, w, fill)
        return _gemm_kn(a, wkn, out, m, bool(ins.acc), exact)
    if fill is not None and k:  # the weights are read when the instruction runs, as the hardware does
        inner = _gemm_math(a, w, out, m, k, n, cols, bool(ins.acc))

        def streamed() -> None:
            fill()
            inner()

        return streamed
    return _gemm_math(a, w, out, m, k, n, cols, bool(ins.acc))


_CHUNK = (1 << 24) >> 14  # K elements whose int8 x int8 products any float32 sum adds exactly (K * 2**14 <= 2**24)


def _readonly_weights(sim: GoldenSim, ins: Instr, w: np.ndarray, fill: Op, int8: bool = False) -> tuple[np.ndarray, bool]:
    """GEMM_STREAM's read-only ``W``: as ``W^T`` (K-major, C order) in float32, or as ``W`` (N-major) in int8 for
    :func:`int8_kernel`; and whether one float32 matmul of it is exact for any int8 ``A``.

    K-major because a matmul of a few rows of ``A`` streams it at the memory's rate (``A @ W^T`` with ``W``
    row-major runs a third slower at m = 2).  Exact when ``128 * max_n sum_k |W[n, k]| <= 2**24``: every partial
    sum of ``a_k * w_k`` (with or without FMA, in any order) is then an integer of at most 2**24 in magnitude,
    which float32 holds exactly; else the K axis is summed in chunks of 1024.  Kept per ``(w, n, k, type)`` in
    ``sim._stream_weights``: every run of every program with that tile reads them."""
    cols, P = sim.cfg.cols, sim.cfg.dma_ports
    key = (ins.w, ins.n, ins.k, int8)
    hit = sim._stream_weights.get(key)
    if hit is None and int8:  # one strided copy from the stream order [p, j, kk, g, r] to N-major [j, g, p, kk, r]
        if P == 1:  # one port: its stream is contiguous in the window; bands converted in place of a shared copy
            wnk = _nmajor_one_port(sim, ins.w, ins.n, ins.k)
            if wnk is not None:
                hit = sim._stream_weights[key] = (wnk, True)
                return hit
            nb = wstream.port_bytes(ins.n, ins.k, sim.cfg)
            ws = sim.window[ins.w:ins.w + nb].view(np.int8).reshape(1, ins.n, ins.k, cols, cols)
        else:
            fill()
            ws = w.transpose(2, 0, 3, 1, 4)  # the view of the filled buffer in stream order
        wnk = np.ascontiguousarray(ws.transpose(1, 3, 0, 2, 4)).reshape(ins.n * cols, ins.k * cols)  # [j, g, p, kk, r]
        hit = sim._stream_weights[key] = (wnk, True)
    if hit is None:
        fill()
        wi = np.empty((ins.n * cols, ins.k * cols), np.int8)
        np.copyto(wi.reshape(w.shape), w)  # W, row-major
        wkn = np.array(wi.T, dtype=np.float32, order="C")
        l1 = float(np.abs(wkn).sum(axis=0).max()) if wkn.size else 0.0  # float32 sums of |w| <= 2**21: exact
        hit = sim._stream_weights[key] = (wkn, 128 * l1 <= 1 << 24)
    return hit


def _nmajor_one_port(sim: GoldenSim, w: int, n: int, k: int) -> np.ndarray | None:
    """One port's read-only weight tile at ``w`` as N-major int8 ``(n * cols, k * cols)``: a view of a copy of its
    read-only range in which each band of ``cols`` output channels (stream order ``[kk, g, r]``) is stored as
    ``[g, kk, r]`` at the band's own addresses.  Tiles of one matrix tiled otherwise (prefill's ``n`` against
    decode's) then share the converted bands: each is converted once.  ``None`` when a band of the tile was
    converted as part of a band of another shape (a different ``k`` or start): the caller converts the tile alone.

    A marker per ``cols * cols`` bytes says which band (its first unit and ``k``) converted it (0: none)."""
    cols = sim.cfg.cols
    unit = cols * cols
    rng = next(((lo, hi) for lo, hi in sim.readonly if lo <= w and w + n * k * unit <= hi), None)
    if rng is None or (w - rng[0]) % unit or k >= 1 << 16:
        return None
    lo, hi = rng
    conv = sim._nmajor.get(rng)
    if conv is None:  # both lazily allocated: pages are touched as bands are converted
        conv = sim._nmajor[rng] = (np.empty(hi - lo, np.int8), np.zeros(-(-(hi - lo) // unit), np.int64))
    data, marks = conv
    u0 = (w - lo) // unit
    got = marks[u0:u0 + n * k].reshape(n, k)
    want = ((u0 + k * np.arange(n, dtype=np.int64)) << 16 | k)[:, None]
    done = (got == want).all(axis=1)
    if not done.all():
        free = (got == 0).all(axis=1)
        if not (done | free).all():
            return None
        src = sim.window[w:w + n * k * unit].view(np.int8).reshape(n, k, cols, cols)
        dst = data[w - lo:w - lo + n * k * unit].reshape(n, cols, k, cols)
        if free.all():
            np.copyto(dst, src.transpose(0, 2, 1, 3))
        else:
            for j in np.flatnonzero(free).tolist():
                np.copyto(dst[j], src[j].transpose(1, 0, 2))
        got[free] = np.broadcast_to(want, got.shape)[free]
    return data[w - lo:w - lo + n * k * unit].reshape(n * cols, k * cols)


def _gemm_int8(kernel, a: np.ndarray, wkn: np.ndarray, out: np.ndarray, ins_acc: bool) -> Op:
    """``out (+)= a @ wkn.T`` (``wkn``: N-major int8 weights) through the int8 kernel; the accumulation wraps modulo 2**32 like the adder."""
    if not ins_acc and out.flags.c_contiguous:
        return partial(kernel, a, wkn, out)
    res = np.empty(out.shape, np.int32)
    if not ins_acc:
        def gemm() -> None:
            kernel(a, wkn, res)
            np.copyto(out, res)

        return gemm

    def gemm_acc() -> None:
        kernel(a, wkn, res)
        np.add(out, res, out=out)

    return gemm_acc


def _gemm_kn(a: np.ndarray, wkn: np.ndarray, out: np.ndarray, m: int, ins_acc: bool, exact: bool) -> Op:
    """``out (+)= a @ wkn`` for int8 ``a`` and float32 ``wkn`` (``W^T``) holding int8 values; see
    :func:`_readonly_weights` for ``exact``; else chunks of K summed exactly in int64."""
    kk, nn = wkn.shape
    if kk * (1 << 14) > 1 << 53:  # pragma: no cover - K beyond 2**39: numerics' int64 path
        wi = wkn.T.astype(np.int8)
        if ins_acc:
            return lambda: np.add(out, nx.matmul(a, wi), out=out, casting="unsafe")
        return lambda: np.copyto(out, nx.matmul(a, wi))
    af, r = np.empty((m, kk), np.float32), np.empty((m, nn), np.float32)
    if exact:  # |result| <= 2**24: fits int32 as it is
        if not ins_acc:
            def gemm_exact() -> None:
                np.copyto(af, a)
                np.matmul(af, wkn, out=r)
                np.copyto(out, r, casting="unsafe")

            return gemm_exact
        ri = np.empty((m, nn), np.int32)

        def gemm_exact_acc() -> None:
            np.copyto(af, a)
            np.matmul(af, wkn, out=r)
            np.copyto(ri, r, casting="unsafe")
            np.add(out, ri, out=out)  # int32 + int32 wraps modulo 2**32 like the adder

        return gemm_exact_acc
    r64 = np.empty((m, nn), _I64)
    parts = [(af[:, c:c + _CHUNK], wkn[c:c + _CHUNK]) for c in range(0, kk, _CHUNK)]

    def gemm_chunks() -> None:
        np.copyto(af, a)
        r64.fill(0)
        for ap, wp in parts:
            np.matmul(ap, wp, out=r)
            np.add(r64, r, out=r64, casting="unsafe")  # exact: integers below 2**53 in float64, then int64
        if ins_acc:
            np.add(r64, out, out=r64)
        np.bitwise_and(r64, 0xFFFFFFFF, out=r64)  # two's complement low 32 bits
        np.copyto(out, r64.view(np.uint64).astype(np.uint32).view(np.int32))

    return gemm_chunks


def _gemm_math(a, w, out, m: int, k: int, n: int, cols: int, ins_acc: bool) -> Op:
    """``out (+)= a @ W^T`` as a closure; ``w`` is ``W`` (2-D) or any view with ``W``'s elements in row-major order
    of a reshape (read again at every call)."""
    if k == 0:
        if ins_acc:
            return lambda: None  # adds zero
        return lambda: out.fill(0)
    kk, nn = k * cols, n * cols
    if kk * (1 << 14) > 1 << 53:  # pragma: no cover - K beyond 2**39: numerics' int64 path
        def matmul(a, w, mm=nx.matmul):
            return mm(a, w.reshape(nn, kk))
        if ins_acc:
            return lambda: np.add(out, matmul(a, w), out=out, casting="unsafe")
        return lambda: np.copyto(out, matmul(a, w))
    # as numerics.matmul: |a*w| <= 2**14, so float32 sums are exact while K * 2**14 <= 2**24 (K <= 1024); a longer K
    # is summed in float32 chunks of 1024, each exact, added up exactly in int64 (|sum| <= 2**53); the exact integer
    # result then wraps to int32 as the accumulator does.  Weights stay float32 either way (half the memory
    # traffic of a float64 copy: decode is this matmul's memory bandwidth)
    chunk = _CHUNK
    af, wf = np.empty((m, kk), np.float32), np.empty((nn, kk), np.float32)
    wft = wf.T
    wf = wf.reshape(w.shape)  # the copy target in the source's own shape (a view of the same floats)
    r = np.empty((m, nn), np.float32)
    if kk <= chunk:  # |result| <= 2**24: fits int32 as it is
        ri = np.empty((m, nn), np.int32)

        def gemm32() -> None:
            np.copyto(af, a)
            np.copyto(wf, w)
            np.matmul(af, wft, out=r)
            if ins_acc:
                np.copyto(ri, r, casting="unsafe")
                np.add(out, ri, out=out)  # int32 + int32 wraps modulo 2**32 like the adder
            else:
                np.copyto(out, r, casting="unsafe")

        return gemm32
    r64 = np.empty((m, nn), _I64)
    parts = [(af[:, c:c + chunk], wft[c:c + chunk]) for c in range(0, kk, chunk)]

    def gemm64() -> None:
        np.copyto(af, a)
        np.copyto(wf, w)
        r64.fill(0)
        for ap, wp in parts:
            np.matmul(ap, wp, out=r)
            np.add(r64, r, out=r64, casting="unsafe")  # exact: integers below 2**53 in float64, then int64
        if ins_acc:
            np.add(r64, out, out=r64)
        np.bitwise_and(r64, 0xFFFFFFFF, out=r64)  # two's complement low 32 bits
        np.copyto(out, r64.view(np.uint64).astype(np.uint32).view(np.int32))

    return gemm64


def _rshift_round_inplace(p: np.ndarray, s: int) -> None:
    """``p = rshift_round(p, s)`` for ``0 < s < 64`` on int64, in place: ``((p >> (s-1)) + 1) >> 1``.

    Equal to numerics' ``(p >> s) + ((p >> (s-1)) & 1)``; ``p >> (s-1)`` is below 2**63 - 1 in magnitude
    for the products here (two int32 factors), so the ``+ 1`` cannot overflow.
    """
    np.right_shift(p, s - 1, out=p)
    np.add(p, 1, out=p)
    np.right_shift(p, 1, out=p)


def _sat32_into(dst: np.ndarray, p: np.ndarray) -> None:
    np.maximum(p, nx.INT32_MIN, out=p)
    np.minimum(p, nx.INT32_MAX, out=p)
    np.copyto(dst, p, casting="unsafe")


def _in_place_ok(ins: Instr, dst: str, n: int, srcs: tuple, bcast: bool = False) -> bool:
    """Whether a kernel that writes each result element right after reading its operands' elements computes what
    the reference (all reads, then the write) does: every source of ``n`` lines is ``dst`` itself or apart from it
    (a broadcast second source must be apart)."""
    for i, (f, m) in enumerate(srcs):
        same = ins.fields[f] == ins.fields[dst] and m == n and not (bcast and i == 1)
        if not same and _overlap_fields(ins, (dst, n), (f, m)):
            return False
    return True


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


def _overlap_fields(ins: Instr, a: tuple[str, int], b: tuple[str, int]) -> bool:
    """Whether the lines ``[ins.<a>, +n)`` and ``[ins.<b>, +m)`` (of one buffer) overlap."""
    (fa, na), (fb, nb) = a, b
    x, y = ins.fields[fa], ins.fields[fb]
    return na > 0 and nb > 0 and x < y + nb and y < x + na


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
        ve = [min(x, vexp_max) for x in vexp.tolist()]
        if u_shift0 - max(qe) - max(ke) < 1 or u_shift0 - min(qe) - min(ke) > 63:
            return reference(sim, ins)
        v_pos = min(ve) >= 0
        if not (v_pos or (max(ve) < 0 and min(ve) >= -63)):
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
        p = exp2_fx(u - np.array(m1, _I64)[:, None], frac_m, frac_p)
        big_l = [_rr_int(lo * ai, frac_e) + _rr_int(ps, guard)
                 for lo, ai, ps in zip(l_old, a, p.sum(axis=1).tolist(), strict=True)]
        if v_pos:  # exact in float64: |p * (vq << vexp)| <= 2**38, sums < 2**50
            pv = (p.astype(np.float64) @ (v.astype(_I64) << np.array(ve, _I64)[:, None]).astype(np.float64)
                  ).astype(_I64)
        else:
            prod = p[:, :, None] * v.astype(_I64)[None, :, :]
            _rshift_round_inplace_arr(prod, -np.array(ve, _I64)[None, :, None])
            pv = prod.sum(axis=1)
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


_EXP_BASE, _EXP_DELTA = nx.EXP_BASE.tolist(), nx.EXP_DELTA.tolist()


def _exp2_scalar(u: int, ufrac: int, frac: int) -> int:
    """numerics.exp2_fx of one Python integer (the same integer formula, see its docstring)."""
    u = min(u, 0)
    ip = u >> ufrac
    f = u & ((1 << ufrac) - 1)
    lob = ufrac - 8
    hi = f >> lob
    p = _EXP_BASE[hi] + _rr_int(_EXP_DELTA[hi] * (f & ((1 << lob) - 1)), lob)
    sh = min((nx.EXP_FRAC - frac) - ip, 40)
    return (p + ((1 << sh) >> 1)) >> sh


def _rr_int(x: int, s: int) -> int:
    """numerics.rshift_round of a Python integer by ``s`` in 1..63."""
    return (x >> s) + ((x >> (s - 1)) & 1)


def _rr(x: np.ndarray, s: int) -> np.ndarray:
    """numerics.rshift_round by a scalar ``s`` in 1..63 (a new array)."""
    return (x >> s) + ((x >> (s - 1)) & 1)


def _rshift_round_inplace_arr(p: np.ndarray, s: np.ndarray) -> None:
    """``p = rshift_round(p, s)`` for shifts ``s`` (broadcastable to ``p``) all in 1..63, in place."""
    np.right_shift(p, s - 1, out=p)
    np.add(p, 1, out=p)
    np.right_shift(p, 1, out=p)


def _recip_int(d: int) -> tuple[int, int]:
    """numerics.recip of one Python integer: ``(y, k)`` with ``1/d ≈ y * 2**-k`` (``d <= 0`` counts as 1)."""
    d = max(d, 1)
    n = d.bit_length()
    m = d << (31 - n) if n <= 31 else d >> (n - 31)
    return (1 << 60) // m, n + 29


_RSQRT_SEED = nx.RSQRT_SEED.tolist()


def _rsqrt_int(v: int, e: int) -> tuple[int, int]:
    """numerics.rsqrt_fx of one Python integer (the same integer formula, see its docstring)."""
    v = max(v, 1)
    K = (v.bit_length() - 1 + e) >> 1
    sh = 29 + e - 2 * K
    m = v << min(sh, 63) if sh >= 0 else v >> min(-sh, 63)
    y = _RSQRT_SEED[(m >> 23) - 64]
    for _ in range(2):
        y2 = (y * y) >> 30
        t = (m * y2) >> 29
        y = (y * (3 * (1 << 30) - t)) >> 31
    return y, 30 + K


def _rr_sat64(x: int, s: int) -> int:
    """numerics.rshift_round of a Python integer by any ``s`` (``s <= 0``: a left shift saturated to int64)."""
    if s > 0:
        return 0 if s >= 64 else (x >> s) + ((x >> (s - 1)) & 1)
    return min(max(x << -s, _INT64_MIN), _INT64_MAX) if x else 0


def _wrap64(x: int) -> int:
    return ((x + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)


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
