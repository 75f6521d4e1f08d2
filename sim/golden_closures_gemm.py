"""GEMM and GEMM_STREAM closures of the golden simulator (:mod:`systolica.sim.golden_closures`): the streamed
weights as a view refilled from DRAM, the int8 kernel, and the int64 / exact paths outside its ranges."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from systolica import numerics as nx
from systolica import wstream
from systolica.isa import Instr
from systolica.layout import WPAGE, wstream_end
from systolica.sim.golden_closure_util import _I64, Op
from systolica.sim.golden_int4 import stream4_closure
from systolica.sim.golden_kernels import KERNEL_MAX_K, KERNEL_MAX_M, int8_kernel
from systolica.sim.golden_ops import _lines, _rows, readonly_cover

if TYPE_CHECKING:  # pragma: no cover
    from systolica.sim.golden import GoldenSim


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


def _sum_chunks(parts, r: np.ndarray, r64: np.ndarray, out: np.ndarray, ins_acc: bool) -> None:
    """``out (+)= sum of ap @ wp`` over ``parts`` (float32 chunks of K), exact in int64, wrapped to int32."""
    r64.fill(0)
    for ap, wp in parts:
        np.matmul(ap, wp, out=r)
        np.add(r64, r, out=r64, casting="unsafe")  # exact: integers below 2**53 in float64, then int64
    if ins_acc:
        np.add(r64, out, out=r64)
    np.bitwise_and(r64, 0xFFFFFFFF, out=r64)  # two's complement low 32 bits
    np.copyto(out, r64.view(np.uint64).astype(np.uint32).view(np.int32))


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
        _sum_chunks(parts, r, r64, out, ins_acc)

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
        _sum_chunks(parts, r, r64, out, ins_acc)

    return gemm64
