"""4-bit weight streams: where an int4 GEMM_STREAM (``wfmt`` Q4_0 / Q4_1) finds codes and group scales in DRAM.

The ports, pages and tile order are the int8 stream's (:mod:`systolica.wstream`): port ``p`` of ``P =
dma_ports`` carries the array columns ``c % P == p``, i.e. the ``R = cols / P`` rows ``c = j*cols + r*P + p``
(``r < R``) of every output line ``j``, in its own interleaved 4 KiB pages.  What changes is what one output
line puts into each port's stream, two sections, each padded with zero bytes to whole ``cols``-byte lines:

1. **scales** (first, so the accumulator holds a column's scales before its groups arrive): for each group
   ``g < G = k*cols/32`` and each of the port's rows ``r``: ``D[c, g]`` as int16 little endian, and for
   Q4_1 then ``Mn[c, g]`` as int16 (2 or 4 bytes);
2. **codes**: for each K line ``kk < k`` and each row ``r``: ``cols / 2`` bytes, byte ``b`` holding element
   ``kk*cols + 2b`` in its low nibble and ``kk*cols + 2b + 1`` in its high nibble.

So a port reads ``pad(G*R*sb) + pad(k*R*cols/2)`` bytes per output line against the int8 stream's
``k*R*cols``: for Q4_1 0.625 bytes a weight, for Q4_0 0.5625 (before the padding, under a line per output
line).  ``k * cols`` must be whole groups of 32.  The golden simulator gathers with :func:`gather`; the
compiler writes with :func:`port_streams` and :func:`systolica.wstream.scatter`, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from systolica.config import AccelConfig
from systolica.isa import WFmt
from systolica.layout import wstream_end, wstream_port_bytes
from systolica.numerics_int4 import GROUP
from systolica.wstream import _spans  # the int8 stream's page walk: one definition

__all__ = ["scale_bytes", "port_row_bytes", "port_bytes", "port_streams", "gather", "stream_end",
           "stream_port_bytes", "whole_groups", "config_problem", "illegal", "MAX_ROWS"]

#: rows (``m``) a 4-bit GEMM_STREAM may have: the array's group partial sums are held per row
MAX_ROWS = 64


def _pad(x: int, cols: int) -> int:
    return -(-x // cols) * cols


def scale_bytes(fmt: int) -> int:
    """Bytes of one row's scale entry per group: int16 D (Q4_0), int16 D + int16 Mn (Q4_1)."""
    if fmt == WFmt.Q4_0:
        return 2
    if fmt == WFmt.Q4_1:
        return 4
    raise ValueError(f"wfmt={fmt} is not a 4-bit format (Q4_0={int(WFmt.Q4_0)}, Q4_1={int(WFmt.Q4_1)})")


def whole_groups(k: int, cfg: AccelConfig) -> bool:
    """Whether ``k`` K lines are whole groups of 32 weights (an int4 GEMM_STREAM's condition)."""
    return (k * cfg.cols) % GROUP == 0


def port_row_bytes(k: int, fmt: int, cfg: AccelConfig) -> int:
    """Bytes one output line adds to each port's stream (scales, then codes, each padded to whole lines):
    :func:`systolica.layout.wstream_port_bytes` for ``n = 1``, the one formula."""
    scale_bytes(fmt)  # a 4-bit format, or ValueError
    if not whole_groups(k, cfg):
        raise ValueError(f"k={k} lines of {cfg.cols} are not whole groups of {GROUP} weights")
    return wstream_port_bytes({"n": 1, "k": k, "wfmt": int(fmt)}, cfg)


def port_bytes(n: int, k: int, fmt: int, cfg: AccelConfig) -> int:
    """Bytes each port reads for ``n`` output lines of ``k`` K lines in format ``fmt``."""
    return n * port_row_bytes(k, fmt, cfg)


def stream_port_bytes(f: Mapping[str, int], cfg: AccelConfig) -> int:
    """Bytes each port reads for a GEMM_STREAM's fields, any format (:func:`systolica.layout.wstream_port_bytes`,
    the formula the hardware decoder traces; it equals ``port_bytes`` for the 4-bit formats)."""
    return wstream_port_bytes(f, cfg)


def config_problem(cfg: AccelConfig) -> str | None:
    """Why a config's array cannot take 4-bit weights (its GEMM_STREAMs with ``wfmt`` Q4_0 / Q4_1 are then
    ``ILLEGAL_FIELD``), or ``None``.  The array takes a code line of each port as two columns, ``2 * dma_ports``
    columns a beat, and sums a group of 32 over ``32 / cols`` K tiles; it holds ``q4_groups`` groups of scales."""
    C, P = cfg.cols, cfg.dma_ports
    if not cfg.q4_groups:
        return f"config {cfg.name!r} has no 4-bit datapath (q4_groups=0)"
    if C % (2 * P):
        return f"cols={C} is not a multiple of 2 x dma_ports={P} (a code line holds two of a port's columns)"
    if C > GROUP:
        return f"cols={C} > {GROUP}: a K line would hold more than one group of {GROUP} weights"
    return None


def illegal(f: Mapping[str, int], cfg: AccelConfig) -> str | None:
    """Why a 4-bit GEMM_STREAM (``wfmt`` Q4_0 / Q4_1) is ``ILLEGAL_FIELD`` on ``cfg`` (the decoder's checks), or
    ``None``: a config without the datapath, ``k`` not whole groups, more than :data:`MAX_ROWS` rows or more
    groups along K than the scale buffer holds."""
    why = config_problem(cfg)
    if why:
        return why
    k = f["k"]
    if not whole_groups(k, cfg):
        return f"k={k} lines of {cfg.cols} are not whole groups of {GROUP} weights"
    if f["m"] > MAX_ROWS:
        return f"m={f['m']} rows: a 4-bit GEMM_STREAM takes at most {MAX_ROWS} (the group partial sums of each row)"
    if k * cfg.cols // GROUP > cfg.q4_groups:
        return (f"k={k} lines are {k * cfg.cols // GROUP} groups of {GROUP}: the scale buffer holds "
                f"q4_groups={cfg.q4_groups}")
    return None


#: One past the last DRAM byte a GEMM_STREAM with ``n * k > 0`` reads, any format
#: (:func:`systolica.layout.wstream_end`, kept here under its old name).
stream_end = wstream_end


def port_streams(codes: np.ndarray, D: np.ndarray, Mn: np.ndarray | None, cfg: AccelConfig) -> np.ndarray:
    """``(P, port_bytes)`` uint8: each port's stream of the ``n*cols x k*cols`` codes (0..15, zero padded) with
    integer scales ``D`` (and Q4_1 minimums ``Mn``), ``(n*cols, G)`` int16-valued."""
    C, P = cfg.cols, cfg.dma_ports
    R = C // P
    rows, kc = codes.shape
    if rows % C or kc % C:
        raise ValueError(f"int4 weight stream of a {rows} x {kc} matrix: both sides must be whole lines of {C}")
    n, k = rows // C, kc // C
    fmt = WFmt.Q4_0 if Mn is None else WFmt.Q4_1
    g = kc // GROUP if kc % GROUP == 0 else -1
    if g < 0 or D.shape != (rows, g) or (Mn is not None and Mn.shape != D.shape):
        raise ValueError(f"int4 weight stream: K={kc} must be whole groups of {GROUP} and the scales "
                         f"{D.shape} must be ({rows}, {kc // GROUP})")
    for what, v in (("scale", D), ("minimum", Mn)):
        v = np.asarray(v if v is not None else 0, np.int64)
        if v.size and (v.max() >= 1 << 15 or v.min() < -(1 << 15)):
            raise ValueError(f"int4 weight stream: a {what} outside int16 ({v.min()} .. {v.max()})")
    if codes.min(initial=0) < 0 or codes.max(initial=0) > 15:
        raise ValueError("int4 weight stream: codes must be 0..15")
    # scales: [j, r, p, g, entry] -> [p, j, g, r, entry]
    ent = np.asarray(D, np.int64)[..., None] if Mn is None else np.stack([D, Mn], axis=-1).astype(np.int64)
    ent = ent.astype("<i2").reshape(n, R, P, g, -1).transpose(2, 0, 3, 1, 4)
    sb = np.ascontiguousarray(ent).view(np.uint8).reshape(P, n, -1)
    # codes: [j, r, p, kk, b, nibble] -> [p, j, kk, r, b]
    c = np.asarray(codes, np.uint8).reshape(n, R, P, k, C // 2, 2)
    cb = (c[..., 0] | (c[..., 1] << 4)).transpose(2, 0, 3, 1, 4).reshape(P, n, -1)
    out = np.zeros((P, n, port_row_bytes(k, fmt, cfg)), np.uint8)
    s0 = _pad(sb.shape[2], C)
    out[:, :, :sb.shape[2]] = sb
    out[:, :, s0:s0 + cb.shape[2]] = cb
    return out.reshape(P, -1)


def gather(win: np.ndarray, w: int, n: int, k: int, fmt: int, cfg: AccelConfig):
    """``(codes uint8 (n*cols, k*cols), D int64 (n*cols, G), Mn int64 or None)`` a GEMM_STREAM at ``w`` reads."""
    C, P = cfg.cols, cfg.dma_ports
    R = C // P
    nb = port_bytes(n, k, fmt, cfg)
    streams = np.empty((P, nb), np.uint8)
    for p in range(P):
        for a, x, ln in _spans(w, p, nb, cfg):
            streams[p, x:x + ln] = win[a:a + ln]
    g = k * C // GROUP
    ne = scale_bytes(fmt) // 2
    per = streams.reshape(P, n, -1)
    sb = np.ascontiguousarray(per[:, :, :g * R * ne * 2]).view("<i2").reshape(P, n, g, R, ne)
    ent = sb.transpose(1, 3, 0, 2, 4).reshape(n * C, g, ne).astype(np.int64)  # [j, r, p] -> row
    s0 = _pad(g * R * ne * 2, C)
    cb = per[:, :, s0:s0 + k * R * C // 2].reshape(P, n, k, R, C // 2)
    nib = np.stack([cb & 0x0F, cb >> 4], axis=-1).reshape(P, n, k, R, C)
    codes = nib.transpose(1, 3, 0, 2, 4).reshape(n * C, k * C)
    return codes, ent[..., 0], (ent[..., 1] if fmt == WFmt.Q4_1 else None)
