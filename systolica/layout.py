"""Where operands live in the on-chip buffers: the line conventions every instruction follows.

The golden simulator reads operands this way, the compiler places them this
way, and ``docs/isa.md`` prints :data:`CONVENTIONS`; the RTL implements the same.

A *line* is ``cols`` elements (int8 in the scratchpad, int32 in the accumulator
and vector buffers).  A *row* of ``lines`` lines is ``lines * cols`` consecutive
elements; the rows of one operand are packed one after the other, so ``rows``
rows of ``lines`` lines occupy lines ``[base, base + rows * lines)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CONVENTIONS", "lines_for", "KvTile", "kv_tile", "attn_state_lines", "EXTENTS", "Extent", "select",
           "dma_line_bytes", "dma_lines", "dma_end",
           "WPAGE", "wstream_port_bytes", "wstream_addr", "wstream_end"]

# Every formula below is plain arithmetic (+ - * // <<, ==, and :func:`select`) with no Python ``if`` on
# a field value, so the same function evaluates to an int in the golden simulator and to a circuit in
# the hardware decoder (``systolica.hw.decode`` traces them; a formula that branches on a field fails there).


def select(cond, a, b):
    """``a`` if ``cond`` else ``b``: a Python conditional for ints, a multiplexer for hardware values."""
    if isinstance(cond, int):  # bool is an int
        return a if cond else b
    mux = getattr(cond, "mux", None)  # the decoder's symbolic values
    if mux is not None:
        return mux(a, b)
    from amaranth.hdl import Mux  # an Amaranth value (imported only when one is given)
    return Mux(cond, a, b)


def lines_for(n: int, cols: int) -> int:
    """Lines a row of ``n`` elements occupies (rows are padded to whole lines)."""
    return (n + cols - 1) // cols


@dataclass(frozen=True)
class KvTile:
    """Line offsets, relative to the ATTN ``kv`` field, of the parts of one KV tile."""

    k: int  # K: P rows x hd lines, int8
    v: int  # V: P rows x hd lines, int8
    kexp: int  # K exponent lines: P lines, exponent in lane 0
    vexp: int  # V exponent lines: P lines
    lines: int  # total lines of the tile


def kv_tile(page_log2: int, hd: int) -> KvTile:
    """The layout of a KV tile of ``P = 2**page_log2`` slots and ``hd`` lines per head.

    Written with shifts (``x << page_log2`` is ``x * P``) so that a hardware evaluation needs no multiplier.
    """
    return KvTile(k=0, v=hd << page_log2, kexp=(2 * hd) << page_log2, vexp=(2 * hd + 1) << page_log2,
                  lines=(2 * hd + 2) << page_log2)


def attn_state_lines(nq: int, hd: int) -> int:
    """Vector-buffer lines of the ATTN running state of ``nq`` rows: ``nq`` (m, l) lines, then ``nq*hd`` of o."""
    return nq + nq * hd


@dataclass(frozen=True)
class Extent:
    """One on-chip operand of an op: the address field, its buffer, and how many lines it spans."""

    field: str
    buf: str  # "spad", "acc" or "vbuf"
    lines: Callable[[Mapping[str, Any], Any], Any]  # (fields, config) -> lines; plain arithmetic, see above
    formula: str  # the same, as text for messages and docs


def _ceil_lines(n, cfg):
    return lines_for(n, cfg.cols)


def _rows_lines(f, c):
    return f["rows"] * f["lines"]


def _rows_n(f, c):
    return f["rows"] * _ceil_lines(f["n"], c)


#: The on-chip operands of every compute op, in the order they are checked (the first out of range is
#: reported).  LOAD/STORE address the buffer their ``buf`` field selects: ``rows * lines`` lines at ``sram``.
EXTENTS: dict[str, tuple[Extent, ...]] = {
    "GEMM": (Extent("a", "spad", lambda f, c: f["m"] * f["k"], "m*k"),
             Extent("w", "spad", lambda f, c: f["n"] * c.cols * f["k"], "n*cols*k"),
             Extent("dst", "acc", lambda f, c: f["m"] * f["n"], "m*n")),
    "GEMM_STREAM": (Extent("a", "spad", lambda f, c: f["m"] * f["k"], "m*k"),
                    Extent("dst", "acc", lambda f, c: f["m"] * f["n"], "m*n")),
    "REQUANT": (Extent("src", "acc", _rows_lines, "rows*lines"), Extent("mult", "vbuf", lambda f, c: f["lines"], "lines"),
                Extent("exps", "spad", lambda f, c: f["rows"], "rows"), Extent("dst", "vbuf", _rows_lines, "rows*lines")),
    "QUANT": (Extent("src", "vbuf", _rows_lines, "rows*lines"),
              Extent("dst", "spad", lambda f, c: (1 + f.get("split", 0)) * (f["rows"] * f["lines"]),
                     "rows*lines (x2 with split)"),
              Extent("exps", "spad", lambda f, c: (1 + f.get("split", 0)) * f["rows"], "rows (x2 with split)")),
    **{op: (Extent("a", "vbuf", _rows_lines, "rows*lines"),
            Extent("b", "vbuf", lambda f, c: select(f["bcast"], f["lines"], f["rows"] * f["lines"]),
                   "lines if bcast else rows*lines"),
            Extent("dst", "vbuf", _rows_lines, "rows*lines")) for op in ("ADD", "MUL")},
    "RMSNORM": (Extent("src", "vbuf", _rows_n, "rows*ceil(n/cols)"),
                Extent("gamma", "vbuf", lambda f, c: _ceil_lines(f["n"], c), "ceil(n/cols)"),
                Extent("dst", "vbuf", _rows_n, "rows*ceil(n/cols)")),
    "LAYERNORM": (Extent("src", "vbuf", _rows_n, "rows*ceil(n/cols)"),
                  Extent("gamma", "vbuf", lambda f, c: 2 * _ceil_lines(f["n"], c), "2*ceil(n/cols) (gamma, beta)"),
                  Extent("dst", "vbuf", _rows_n, "rows*ceil(n/cols)")),
    **{op: (Extent("src", "vbuf", _rows_lines, "rows*lines"), Extent("dst", "vbuf", _rows_lines, "rows*lines"))
       for op in ("SILU", "GELU")},
    "ROPE": (Extent("src", "vbuf", lambda f, c: f["rows"] * f["hd"] * f["heads"], "rows*heads*hd"),
             Extent("table", "vbuf", lambda f, c: f["rows"] * f["hd"], "rows*hd"),
             Extent("dst", "vbuf", lambda f, c: f["rows"] * f["hd"] * f["heads"], "rows*heads*hd")),
    "SOFTMAX": (Extent("src", "vbuf", _rows_n, "rows*ceil(n/cols)"), Extent("dst", "vbuf", _rows_n, "rows*ceil(n/cols)")),
    "ARGMAX": (Extent("src", "vbuf", _rows_n, "rows*ceil(n/cols)"), Extent("dst", "vbuf", lambda f, c: f["rows"], "rows")),
    "ATTN": (Extent("q", "spad", lambda f, c: f["nq"] * f["hd"], "nq*hd"),
             Extent("qexp", "spad", lambda f, c: f["nq"], "nq"),
             Extent("kv", "spad", lambda f, c: kv_tile(f["page_log2"], f["hd"]).lines, "2*P*hd + 2*P"),
             Extent("state", "vbuf", lambda f, c: attn_state_lines(f["nq"], f["hd"]), "nq + nq*hd")),
    "ATTN_OUT": (Extent("state", "vbuf", lambda f, c: attn_state_lines(f["nq"], f["hd"]), "nq + nq*hd"),
                 Extent("dst", "vbuf", lambda f, c: f["nq"] * f["hd"], "nq*hd")),
}



def dma_line_bytes(buf, cols: int):
    """Bytes of one line of buffer ``buf`` (0 = SPAD: ``cols`` int8; ACC, VBUF: ``cols`` int32)."""
    return select(buf == 0, cols, 4 * cols)


def dma_lines(f: Mapping[str, Any], c) -> Any:
    """Buffer lines a LOAD/STORE moves, from line ``sram`` of the buffer ``buf`` selects."""
    return f["rows"] * f["lines"]


def dma_end(f: Mapping[str, Any], c) -> Any:
    """One past the last DRAM byte (window offset) a LOAD/STORE of at least one row and line touches.

    ``rows * stride - stride`` is ``(rows - 1) * stride`` with unsigned operands.
    """
    return f["dram"] + f["rows"] * f["stride"] - f["stride"] + f["lines"] * dma_line_bytes(f["buf"], c.cols)


#: bytes of one weight-stream page: each weight port reads whole pages of its own (AXI bursts never cross 4 KiB)
WPAGE = 4096


def wstream_port_bytes(f: Mapping[str, Any], c) -> Any:
    """Bytes each weight port reads for a GEMM_STREAM of ``n`` output lines of ``k`` K lines.

    int8 (``wfmt`` 0): ``n * k`` tiles of ``cols / dma_ports`` lines of ``cols`` bytes.  4-bit (``wfmt`` Q4_0 = 1,
    Q4_1 = 2; :mod:`systolica.wstream4`): per output line ``ceil(k*R*sb / 32)`` lines of scales (``sb`` = 2 or 4
    bytes a row and group, ``R = cols / dma_ports`` rows a port) and ``ceil(k*R / 2)`` lines of codes.
    """
    R = c.cols // c.dma_ports
    k, fmt = f["k"], f.get("wfmt", 0)
    if isinstance(fmt, int) and fmt == 0:  # (the int8-only callers: no select in their circuit)
        return f["n"] * f["k"] * (c.cols * R)
    q4_lines = select(fmt == 2, (k * (R * 4) + 31) // 32, (k * (R * 2) + 31) // 32) + (k * R + 1) // 2
    return f["n"] * select(fmt == 0, k * R, q4_lines) * c.cols


def wstream_addr(w, p: int, x, c) -> Any:
    """DRAM window offset of byte ``x`` of weight port ``p``'s stream of a GEMM_STREAM at ``w``.

    Port ``p`` starts ``p`` pages after ``w``; each time a port's address crosses a 4 KiB page it skips the
    ``dma_ports - 1`` pages of the other ports, so the ports read interleaved pages and never the same one.
    """
    page_off = w - (w // WPAGE) * WPAGE
    return w + p * WPAGE + x + (c.dma_ports - 1) * WPAGE * ((page_off + x) // WPAGE)


def wstream_end(f: Mapping[str, Any], c) -> Any:
    """One past the last DRAM byte (window offset) a GEMM_STREAM with ``n * k > 0`` reads: the last port's last byte."""
    return wstream_addr(f["w"], c.dma_ports - 1, wstream_port_bytes(f, c) - 1, c) + 1


#: Markdown bullet list of the conventions (printed into docs/isa.md).
CONVENTIONS = """\
- **Line.** A buffer line is `cols` elements: int8 in the scratchpad (`cols` bytes), int32 in the
  accumulator and the vector buffer (`4 * cols` bytes). Every on-chip address field counts lines.
- **Rows.** An operand of `rows` rows of `lines` lines occupies lines `[addr, addr + rows * lines)`;
  row `r` is the `lines * cols` consecutive elements starting at line `addr + r * lines`.
- **Padded rows.** Ops with an element count `n` (RMSNORM, LAYERNORM, SOFTMAX, ARGMAX) use rows of
  `ceil(n / cols)` lines; lanes past `n` are ignored on input and written as 0 on output.
- **Exponent lines.** A quantized row's power-of-two exponent is one scratchpad line per row with the
  signed exponent in lane 0; QUANT writes 0 to the other lanes and readers ignore them.
- **Per-column operands.** REQUANT's `mult` is one vector-buffer row of `lines` lines (one int32 per
  column); LAYERNORM's `beta` is the row that follows `gamma`; ROPE's `table` holds one row of `hd`
  lines per input row (`head_dim / 2` cos, then `head_dim / 2` sin).
- **ARGMAX** writes the index to lane 0 of line `dst + row` and 0 to the other lanes.
- **ATTN state** at vector-buffer line `state`: lines `state + r` (r < nq) hold the running max `m` in
  lane 0 and the running sum `l` in lane 1 (other lanes 0); the running output `o` of row `r` is
  `hd` lines at `state + nq + r * hd`. `init=1` starts from an empty state and ignores what is there.
- **KV tile** at scratchpad line `kv` with `P = 2**page_log2` slots: K at `kv` (P rows of `hd` lines),
  V at `kv + P * hd`, K exponent lines at `kv + 2 * P * hd` (P lines), V exponent lines at
  `kv + 2 * P * hd + P`; the first `t <= P` slots are valid (`t > P` is `ILLEGAL_FIELD`).
- **GEMM** reads A as `m` rows of `k` lines and W as `n * cols` rows of `k` lines (PyTorch
  `[out, in]` layout) and writes `m` rows of `n` lines to the accumulator; `acc=1` adds modulo 2^32.
- **Weight streams.** GEMM_STREAM reads W from DRAM through `P = dma_ports` weight ports. Port `p`
  carries the columns `c` with `c % P == p`: for each output line `j < n` and K line `kk < k` (in that
  order), the `cols / P` lines `W[j*cols + g*P + p, kk]` for `g < cols / P`, `cols` bytes each, one after
  the other. Port `p`'s byte `x` lies at `w + p*4096 + x + (P-1)*4096*floor((w % 4096 + x) / 4096)`:
  the ports read interleaved 4 KiB pages (`w` is port 0's first byte and must be line aligned,
  `DMA_ALIGN`; a stream past the window is `DMA_WINDOW`). The compiler lays every matrix out this way
  once, and any block of whole output lines is then one GEMM_STREAM.
- **4-bit weight streams** (`wfmt` Q4_0=1 / Q4_1=2, `systolica/wstream4.py`). Same ports, pages and
  output-line order; per output line each port's stream holds two sections, each zero-padded to whole
  `cols`-byte lines: first the scales, for each group `g < k*cols/32` and each of the port's `cols / P`
  rows, `D[row, g]` as int16 little endian (Q4_1: then `Mn[row, g]`, int16); then the codes, for each K
  line `kk` and each of the port's rows, `cols / 2` bytes, byte `b` holding element `2b` of the line in
  its low nibble and `2b + 1` in its high nibble. Per group the array forms `T = D*sum((q-8)*a)` (Q4_0)
  or `T = D*sum(q*a) + Mn*sum(a)` (Q4_1), and adds `rshift_round(T, gshift)` to the int32 result
  (`numerics_int4.stream_acc`); REQUANT then scales each column by its power-of-two `mult`. The window
  check counts these bytes. A config without the 4-bit datapath (`wstream4.config_problem`), `k` not whole
  groups, `m > 64` or more than `q4_groups` groups along K is `ILLEGAL_FIELD` (`wstream4.illegal`).
- **DMA.** LOAD/STORE move `rows` rows of `lines` buffer lines; DRAM addresses are byte offsets in the
  DRAM window, and `dram` and `stride` must be multiples of the buffer's line bytes (`DMA_ALIGN`).
  A transfer that would touch any byte outside the window faults (`DMA_WINDOW`) before moving anything.
- **Operand extents.** Each op section lists the lines every on-chip operand spans; an operand that
  runs past the end of its buffer is `SRAM_RANGE` (the first one, in the order listed); an operand of
  0 lines is never out of range.
- **Faults are precise.** Every fault an instruction can cause depends only on its fields, the
  config and the window size, so it is found when the instruction is dispatched: fetch stops there,
  the instructions dispatched before it still execute, none after it does, and then the fault is
  reported. After a fault, buffers and DRAM hold exactly what the instructions before it produced.
"""
