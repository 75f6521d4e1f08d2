"""Semantics of every instruction of the golden simulator, one function per op.

Each function first gathers every operand view it needs (which checks every
range), computes the result with :mod:`systolica.numerics`, and only then writes
it: a faulting instruction changes no state, as in the hardware, which checks an
instruction completely before it starts.  Buffer layouts follow
:mod:`systolica.layout` (also printed in ``docs/isa.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from systolica import numerics as nx
from systolica import numerics_int4 as n4
from systolica import wstream, wstream4
from systolica.faults import Fault
from systolica.isa import Buf, Instr, WFmt
from systolica.layout import (
    EXTENTS,
    attn_state_lines,
    dma_end,
    dma_line_bytes,
    dma_lines,
    kv_tile,
    lines_for,
)

if TYPE_CHECKING:  # pragma: no cover
    from systolica.sim.golden import GoldenSim

__all__ = ["OpFault", "ReadOnlyStore", "EXECUTE", "check_static", "check_operands", "readonly_cover"]


class ReadOnlyStore(RuntimeError):
    """A STORE into a window range the host declared read-only (``GoldenSim(readonly=...)``)."""


def readonly_cover(sim: GoldenSim, lo: int, hi: int) -> bool:
    """Whether ``[lo, hi)`` lies inside one of the simulator's read-only ranges."""
    return any(a <= lo and hi <= b for a, b in sim.readonly)


class OpFault(Exception):
    """Raised by an op before it changes state; the scheduler adds the PC and the disassembly."""

    def __init__(self, fault: Fault, msg: str):
        self.fault = fault
        super().__init__(msg)


_BUF_NAMES = {Buf.SPAD: "spad", Buf.ACC: "acc", Buf.VBUF: "vbuf"}


def _lines(sim: GoldenSim, buf: str, ins: Instr, field: str, nlines: int, what: str) -> np.ndarray:
    """``nlines`` lines of buffer ``buf`` at the address in ``field`` (a view).

    Dispatch has already range-checked every operand (:func:`check_operands`); this second check
    keeps an op from ever writing out of range should the two disagree.
    """
    arr = getattr(sim, buf)
    start = ins.fields[field]
    if nlines and start + nlines > arr.shape[0]:
        raise OpFault(Fault.SRAM_RANGE,
                      f"{ins.op}.{field}={start}: {what} = {nlines} lines from line {start} run past the "
                      f"end of {buf} ({arr.shape[0]} lines)")
    return arr[start:start + nlines]


def _rows(view: np.ndarray, rows: int) -> np.ndarray:
    """A packed region of ``rows`` rows as a 2-D ``(rows, lines*cols)`` view."""
    return view.reshape(rows, -1) if rows else view.reshape(0, 0)


def _padded_write(dst: np.ndarray, rows: int, n: int, y: np.ndarray) -> None:
    """Write ``y`` (rows, n) into a padded region; lanes past ``n`` become 0."""
    d = _rows(dst, rows)
    d[:, :n] = y
    d[:, n:] = 0


# --------------------------------------------------------------------- compute
def gemm(sim: GoldenSim, ins: Instr) -> None:
    m, k, n, cols = ins.m, ins.k, ins.n, sim.cfg.cols
    a = _lines(sim, "spad", ins, "a", m * k, f"A (m={m} rows x k={k} lines)")
    w = _lines(sim, "spad", ins, "w", n * cols * k, f"W (n*cols={n * cols} rows x k={k} lines)")
    dst = _lines(sim, "acc", ins, "dst", m * n, f"result (m={m} rows x n={n} lines)")
    if not dst.size:
        return
    res = np.zeros((m, n * cols), np.int32) if k == 0 else nx.matmul(_rows(a, m), _rows(w, n * cols))
    out = _rows(dst, m)
    if ins.acc:
        np.add(out, res, out=out, casting="unsafe")  # int32 + int32 wraps modulo 2**32 like the adder
    else:
        out[...] = res
    sim.counters.macs += m * k * cols * n * cols


def _wstream_check(sim: GoldenSim, ins: Instr) -> None:
    """GEMM_STREAM's DRAM checks, in the decoder's order: line alignment of ``w``, then the window."""
    cols = sim.cfg.cols
    why = wstream4.illegal(ins.fields, sim.cfg) if ins.wfmt != WFmt.INT8 else None
    if why:
        raise OpFault(Fault.ILLEGAL_FIELD, f"GEMM_STREAM with 4-bit weights: {why}")
    if ins.w % cols:
        raise OpFault(Fault.DMA_ALIGN, f"GEMM_STREAM.w={ins.w:#x} is not a multiple of the {cols}-byte scratchpad "
                                       f"line (cols={cols})")
    if ins.n and ins.k:
        end = wstream4.stream_end(ins.fields, sim.cfg)
        if end > sim.window.size:
            raise OpFault(Fault.DMA_WINDOW,
                          f"GEMM_STREAM.w={ins.w:#x}: {ins.n} x {ins.k} weight tiles over {sim.cfg.dma_ports} "
                          f"port(s) end at {end:#x}, past the {sim.window.size:#x}-byte DRAM window")


def gemm_stream(sim: GoldenSim, ins: Instr) -> None:
    _wstream_check(sim, ins)
    m, k, n, cols = ins.m, ins.k, ins.n, sim.cfg.cols
    a = _lines(sim, "spad", ins, "a", m * k, f"A (m={m} rows x k={k} lines)")
    dst = _lines(sim, "acc", ins, "dst", m * n, f"result (m={m} rows x n={n} lines)")
    if not n:
        return
    fmt = ins.fields.get("wfmt", WFmt.INT8)
    if fmt == WFmt.INT8:
        w = wstream.gather(sim.window, ins.w, n, k, sim.cfg) if k else None
    else:
        w = wstream4.gather(sim.window, ins.w, n, k, fmt, sim.cfg) if k else None
    sim.counters.dma_read_bytes += wstream4.stream_port_bytes(ins.fields, sim.cfg) * sim.cfg.dma_ports
    if not dst.size:
        return
    if k == 0:
        res = np.zeros((m, n * cols), np.int32)
    elif fmt == WFmt.INT8:
        res = nx.matmul(_rows(a, m), w)
    else:  # 4-bit codes: per-group terms, rounded by gshift, summed (numerics_int4.stream_acc)
        res = n4.stream_acc(_rows(a, m), w[0], w[1], w[2], ins.gshift)
    out = _rows(dst, m)
    if ins.acc:
        np.add(out, res, out=out, casting="unsafe")
    else:
        out[...] = res
    sim.counters.macs += m * k * cols * n * cols


def requant(sim: GoldenSim, ins: Instr) -> None:
    rows, lines = ins.rows, ins.lines
    src = _lines(sim, "acc", ins, "src", rows * lines, f"source (rows={rows} x lines={lines})")
    mult = _lines(sim, "vbuf", ins, "mult", lines, f"multipliers (lines={lines})")
    exps = _lines(sim, "spad", ins, "exps", rows, f"exponent lines (rows={rows})")
    dst = _lines(sim, "vbuf", ins, "dst", rows * lines, f"result (rows={rows} x lines={lines})")
    if dst.size:
        _rows(dst, rows)[...] = nx.requant(_rows(src, rows), mult.reshape(-1), exps[:, 0], ins.shift)


def quant(sim: GoldenSim, ins: Instr) -> None:
    rows, lines, k = ins.rows, ins.lines, 1 + ins.split
    src = _lines(sim, "vbuf", ins, "src", rows * lines, f"source (rows={rows} x lines={lines})")
    dst = _lines(sim, "spad", ins, "dst", k * rows * lines, f"result ({k} x rows={rows} x lines={lines})")
    exps = _lines(sim, "spad", ins, "exps", k * rows, f"exponent lines ({k} x rows={rows})")
    if not rows:
        return
    x = src.reshape(rows, lines * sim.cfg.cols)
    q, e = nx.quant_rows_split(x) if ins.split else nx.quant_rows(x)  # lines=0 still writes the zero-row exponent
    _rows(dst, k * rows)[...] = q
    exps[...] = 0
    exps[:, 0] = e


def _binary(sim: GoldenSim, ins: Instr, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    rows, lines = ins.rows, ins.lines
    a = _lines(sim, "vbuf", ins, "a", rows * lines, f"a (rows={rows} x lines={lines})")
    b = _lines(sim, "vbuf", ins, "b", lines if ins.bcast else rows * lines,
               f"b ({'1 row' if ins.bcast else f'rows={rows}'} x lines={lines})")
    dst = _lines(sim, "vbuf", ins, "dst", rows * lines, f"result (rows={rows} x lines={lines})")
    if dst.size:
        bb = b.reshape(1, -1) if ins.bcast else _rows(b, rows)
        _rows(dst, rows)[...] = fn(_rows(a, rows), bb)


def add(sim: GoldenSim, ins: Instr) -> None:
    _binary(sim, ins, nx.add)


def mul(sim: GoldenSim, ins: Instr) -> None:
    _binary(sim, ins, lambda a, b: nx.mul(a, b, ins.shift))


def _norm(sim: GoldenSim, ins: Instr, with_beta: bool) -> None:
    rows, n = ins.rows, ins.n
    lines = lines_for(n, sim.cfg.cols)
    src = _lines(sim, "vbuf", ins, "src", rows * lines, f"source (rows={rows} x ceil(n={n}/cols) lines)")
    g = _lines(sim, "vbuf", ins, "gamma", (2 if with_beta else 1) * lines,
               f"{'gamma and beta' if with_beta else 'gamma'} ({'2 x ' if with_beta else ''}{lines} lines)")
    dst = _lines(sim, "vbuf", ins, "dst", rows * lines, f"result (rows={rows} x {lines} lines)")
    if not dst.size:
        return
    x = _rows(src, rows)[:, :n]
    gamma = g[:lines].reshape(-1)[:n]
    y = nx.layernorm(x, gamma, g[lines:].reshape(-1)[:n], ins.eps) if with_beta else nx.rmsnorm(x, gamma, ins.eps)
    _padded_write(dst, rows, n, y)


def rmsnorm(sim: GoldenSim, ins: Instr) -> None:
    _norm(sim, ins, with_beta=False)


def layernorm(sim: GoldenSim, ins: Instr) -> None:
    _norm(sim, ins, with_beta=True)


def _unary(sim: GoldenSim, ins: Instr, fn: Callable[[np.ndarray], np.ndarray]) -> None:
    rows, lines = ins.rows, ins.lines
    src = _lines(sim, "vbuf", ins, "src", rows * lines, f"source (rows={rows} x lines={lines})")
    dst = _lines(sim, "vbuf", ins, "dst", rows * lines, f"result (rows={rows} x lines={lines})")
    if dst.size:
        _rows(dst, rows)[...] = fn(_rows(src, rows))


def silu(sim: GoldenSim, ins: Instr) -> None:
    _unary(sim, ins, nx.silu)


def gelu(sim: GoldenSim, ins: Instr) -> None:
    _unary(sim, ins, nx.gelu)


def rope(sim: GoldenSim, ins: Instr) -> None:
    rows, heads, hd, cols = ins.rows, ins.heads, ins.hd, sim.cfg.cols
    src = _lines(sim, "vbuf", ins, "src", rows * heads * hd, f"source (rows={rows} x heads={heads} x hd={hd} lines)")
    table = _lines(sim, "vbuf", ins, "table", rows * hd, f"cos/sin table (rows={rows} x hd={hd} lines)")
    dst = _lines(sim, "vbuf", ins, "dst", rows * heads * hd, f"result (rows={rows} x heads={heads} x hd={hd} lines)")
    if dst.size:  # numerics.rope: x[M, H*head_dim], table[M, head_dim]
        _rows(dst, rows)[...] = nx.rope(_rows(src, rows), table.reshape(rows, hd * cols))


def _scores(sim: GoldenSim, ins: Instr, out_lines_per_row: int | None) -> tuple[np.ndarray, np.ndarray]:
    """SOFTMAX/ARGMAX operands: rows of ceil(n/cols) lines in, ``out_lines_per_row`` lines out (None: same)."""
    rows, n = ins.rows, ins.n
    lines = lines_for(n, sim.cfg.cols)
    out = lines if out_lines_per_row is None else out_lines_per_row
    src = _lines(sim, "vbuf", ins, "src", rows * lines, f"source (rows={rows} x ceil(n={n}/cols) lines)")
    dst = _lines(sim, "vbuf", ins, "dst", rows * out, f"result (rows={rows} x {out} lines)")
    return src, dst


def softmax(sim: GoldenSim, ins: Instr) -> None:
    src, dst = _scores(sim, ins, None)
    if dst.size:
        _padded_write(dst, ins.rows, ins.n, nx.softmax(_rows(src, ins.rows)[:, :ins.n]))


def argmax(sim: GoldenSim, ins: Instr) -> None:
    src, dst = _scores(sim, ins, 1)
    if dst.size:
        idx = nx.argmax(_rows(src, ins.rows)[:, :ins.n]) if ins.n else np.zeros(ins.rows, np.int32)
        dst[...] = 0  # lanes other than 0 are written as 0, like exponent lines
        dst[:, 0] = idx


def _state_views(state: np.ndarray, nq: int, hd: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    return state[:nq], state[nq:].reshape(nq, hd * cols)


def attn(sim: GoldenSim, ins: Instr) -> None:
    nq, hd, t, cols = ins.nq, ins.hd, ins.t, sim.cfg.cols
    p = 1 << ins.page_log2
    tile = kv_tile(ins.page_log2, hd)
    q = _lines(sim, "spad", ins, "q", nq * hd, f"queries (nq={nq} rows x hd={hd} lines)")
    qexp = _lines(sim, "spad", ins, "qexp", nq, f"query exponent lines (nq={nq})")
    kv = _lines(sim, "spad", ins, "kv", tile.lines, f"KV tile (P={p} slots x hd={hd}: 2*P*hd + 2*P lines)")
    st = _lines(sim, "vbuf", ins, "state", attn_state_lines(nq, hd), f"state (nq={nq} + nq*hd={nq * hd} lines)")
    if nq == 0 or hd == 0:
        return
    hdim = hd * cols
    k = kv[tile.k:tile.k + p * hd].reshape(p, hdim)[:t]
    v = kv[tile.v:tile.v + p * hd].reshape(p, hdim)[:t]
    kexp, vexp = kv[tile.kexp:tile.kexp + t, 0], kv[tile.vexp:tile.vexp + t, 0]
    ml, o = _state_views(st, nq, hd, cols)
    state = None if ins.init else nx.AttnState(m=ml[:, 0].copy(), l=ml[:, 1].copy(), o=o.copy())
    new = nx.attn_tile(q.reshape(nq, hdim), qexp[:, 0], k, kexp, v, vexp, state, ins.offset, bool(ins.causal))
    ml[...] = 0
    ml[:, 0], ml[:, 1] = new.m, new.l
    o[...] = new.o
    sim.counters.attn_macs += 2 * nq * t * hdim


def attn_out(sim: GoldenSim, ins: Instr) -> None:
    nq, hd, cols = ins.nq, ins.hd, sim.cfg.cols
    st = _lines(sim, "vbuf", ins, "state", attn_state_lines(nq, hd), f"state (nq={nq} + nq*hd={nq * hd} lines)")
    dst = _lines(sim, "vbuf", ins, "dst", nq * hd, f"result (nq={nq} rows x hd={hd} lines)")
    if dst.size:
        ml, o = _state_views(st, nq, hd, cols)
        dst.reshape(nq, hd * cols)[...] = nx.attn_finish(nx.AttnState(m=ml[:, 0].copy(), l=ml[:, 1].copy(),
                                                                      o=o.copy()))


def nothing(sim: GoldenSim, ins: Instr) -> None:
    """NOP and FINISH: only their tokens move."""


# ------------------------------------------------------------------------- DMA
def _dma_plan(sim: GoldenSim, ins: Instr) -> tuple[np.ndarray, int, int, int]:
    """Check a LOAD/STORE completely (alignment, window, buffer range, in that order).

    Returns (buffer lines view, line bytes, row bytes, rows).
    """
    buf = Buf(ins.buf)
    name = _BUF_NAMES[buf]
    lb = dma_line_bytes(buf, sim.cfg.cols)
    rows, lines, dram, stride = ins.rows, ins.lines, ins.dram, ins.stride
    row_bytes = lines * lb
    for field, v in (("dram", dram), ("stride", stride)):
        if v % lb:
            raise OpFault(Fault.DMA_ALIGN, f"{ins.op}.{field}={v:#x} is not a multiple of the {lb}-byte line of "
                                           f"{name} (cols={sim.cfg.cols})")
    if rows and lines:
        end = dma_end(ins.fields, sim.cfg)
        if end > sim.window.size:
            raise OpFault(Fault.DMA_WINDOW,
                          f"{ins.op}.dram={dram:#x}: {rows} rows of {row_bytes} bytes, stride {stride:#x}, end at "
                          f"{end:#x}, past the {sim.window.size:#x}-byte DRAM window")
    view = _lines(sim, name, ins, "sram", dma_lines(ins.fields, sim.cfg), f"{rows} rows x {lines} lines")
    if ins.op == "STORE" and rows and lines and sim.readonly:
        end = dma_end(ins.fields, sim.cfg)
        for lo, hi in sim.readonly:
            if dram < hi and lo < end:
                raise ReadOnlyStore(f"STORE.dram={dram:#x}..{end:#x} writes into the read-only range [{lo:#x}, "
                                    f"{hi:#x}) of the window (the weights the host declared read-only)")
    return view, lb, row_bytes, rows


def _dram_rows(win: np.ndarray, dram: int, rows: int, row_bytes: int, stride: int) -> np.ndarray:
    """The DRAM rows as a (rows, row_bytes) uint8 view (2-D strided access)."""
    if rows == 1 or stride == row_bytes:
        return win[dram:dram + rows * row_bytes].reshape(rows, row_bytes)
    if stride >= row_bytes and dram + rows * stride <= win.size:  # whole strides fit: a plain view (as_strided
        return win[dram:dram + rows * stride].reshape(rows, stride)[:, :row_bytes]  # keeps two Python objects each)
    return np.lib.stride_tricks.as_strided(win[dram:], shape=(rows, row_bytes), strides=(stride, 1))


def load(sim: GoldenSim, ins: Instr) -> None:
    view, lb, row_bytes, rows = _dma_plan(sim, ins)
    if not view.size:
        return
    src = _dram_rows(sim.window, ins.dram, rows, row_bytes, ins.stride)
    if lb == sim.cfg.cols:  # scratchpad: bytes are int8 elements
        view[...] = src.view(np.int8).reshape(view.shape)
    else:
        view[...] = np.ascontiguousarray(src).view("<i4").reshape(view.shape)
    sim.counters.dma_read_bytes += rows * row_bytes


def store(sim: GoldenSim, ins: Instr) -> None:
    view, lb, row_bytes, rows = _dma_plan(sim, ins)
    if not view.size:
        return
    data = (view if lb == sim.cfg.cols else view.astype("<i4", copy=False)).view(np.uint8).reshape(rows, row_bytes)
    stride = ins.stride
    if rows == 1 or stride >= row_bytes:
        _dram_rows(sim.window, ins.dram, rows, row_bytes, stride)[...] = data
    else:  # overlapping rows: later rows win, as the DMA writes them in order
        for r in range(rows):
            sim.window[ins.dram + r * stride:ins.dram + r * stride + row_bytes] = data[r]
    sim.counters.dma_write_bytes += rows * row_bytes


EXECUTE: dict[str, Callable[[GoldenSim, Instr], None]] = {
    "NOP": nothing, "FINISH": nothing, "LOAD": load, "STORE": store, "GEMM": gemm, "GEMM_STREAM": gemm_stream,
    "REQUANT": requant,
    "QUANT": quant, "ADD": add, "MUL": mul, "RMSNORM": rmsnorm, "LAYERNORM": layernorm, "SILU": silu,
    "GELU": gelu, "ROPE": rope, "SOFTMAX": softmax, "ARGMAX": argmax, "ATTN": attn, "ATTN_OUT": attn_out,
}


def check_operands(sim: GoldenSim, ins: Instr) -> None:
    """Raise :class:`OpFault` for a DMA or buffer-range fault of ``ins``, before it is dispatched.

    These depend only on the fields, the config and the window size, so the simulator (like the
    hardware's decoder) finds them at dispatch, which makes every fault precise.
    """
    if ins.op in ("LOAD", "STORE"):
        _dma_plan(sim, ins)
        return
    if ins.op == "GEMM_STREAM":
        _wstream_check(sim, ins)
    if ins.op in ("ATTN", "ATTN_OUT") and ins.hd > sim.cfg.attn_max_lines:
        raise OpFault(Fault.ILLEGAL_FIELD, f"{ins.op}.hd={ins.hd} lines: the attention unit of config "
                                           f"{sim.cfg.name!r} takes heads of at most {sim.cfg.attn_max_lines} lines "
                                           f"(attn_head_lines; head_dim {sim.cfg.attn_max_lines * sim.cfg.cols})")
    for ext in EXTENTS.get(ins.op, ()):
        n = ext.lines(ins.fields, sim.cfg)
        size = getattr(sim, ext.buf).shape[0]
        start = ins.fields[ext.field]
        if n and start + n > size:
            raise OpFault(Fault.SRAM_RANGE, f"{ins.op}.{ext.field}={start}: {ext.formula} = {n} lines from line "
                                            f"{start} run past the end of {ext.buf} ({size} lines)")


def _wfmt_illegal(ins: Instr) -> str | None:
    """GEMM_STREAM's format fields: a format the table has, ``gshift`` only with 4-bit weights, whole groups."""
    fmt, gs = ins.fields["wfmt"], ins.fields["gshift"]
    if fmt not in tuple(WFmt):
        return f"GEMM_STREAM.wfmt={fmt} is no weight format (INT8=0, Q4_0=1, Q4_1=2)"
    if fmt == WFmt.INT8 and gs:
        return f"GEMM_STREAM.gshift={gs} with int8 weights (the group shift is for the 4-bit formats; must be 0)"
    return None


def check_static(ins: Instr) -> str | None:
    """Field values the ISA forbids whatever the state (``ILLEGAL_FIELD``): the reason, or ``None``."""
    if ins.op in ("LOAD", "STORE") and ins.buf not in _BUF_NAMES:
        return f"{ins.op}.buf={ins.buf} selects no buffer (SPAD=0, ACC=1, VBUF=2)"
    if ins.op == "NOP" and ins.fields["engine"] > 2:  # (ins.engine is the Engine property, not the field)
        return f"NOP.engine={ins.fields['engine']} names no engine (LOAD=0, COMPUTE=1, STORE=2)"
    if ins.op == "GEMM_STREAM":
        why = _wfmt_illegal(ins)
        if why:
            return why
    if ins.op == "ATTN" and ins.t > 1 << ins.page_log2:
        return f"ATTN.t={ins.t} valid tokens exceed the tile's 2**page_log2={1 << ins.page_log2} slots"
    eng = ins.engine
    bad = ("pop_prev", "push_prev") if eng == 0 else ("pop_next", "push_next") if eng == 2 else ()
    for flag in bad:
        if getattr(ins, flag):
            side = "previous" if eng == 0 else "next"
            return f"@{flag} on the {ins.engine.name.lower()} engine, which has no {side} engine"
    return None
