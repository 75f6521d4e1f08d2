"""Weight streams: where GEMM_STREAM finds each weight in DRAM, as numpy gathers and scatters.

The layout is :mod:`systolica.layout`'s (``wstream_addr``, printed in ``docs/isa.md``): weight port ``p``
of ``P = dma_ports`` carries the array columns ``c % P == p`` of every tile, tile by tile (output line
``j``, then K line ``kk``), in its own interleaved 4 KiB pages.  The golden simulator gathers W with
:func:`gather`; the compiler writes every matrix with :func:`port_streams` and :func:`scatter`, so the two
cannot disagree.  A matrix of ``nl`` output lines laid out at port offset ``x0`` (the same for every
port) is read by the GEMM_STREAM of output lines ``j0 .. j0+n`` at ``w = address(region, x0 + j0 *
row_bytes)``.
"""

from __future__ import annotations

import numpy as np

from systolica.config import AccelConfig
from systolica.layout import WPAGE, wstream_addr

__all__ = ["port_bytes", "port_row_bytes", "port_streams", "gather", "scatter", "address", "port_span"]


def port_row_bytes(k: int, cfg: AccelConfig) -> int:
    """Bytes one output line (``cols`` rows of ``W``, ``k`` K lines) adds to each port's stream."""
    return k * (cfg.cols // cfg.dma_ports) * cfg.cols


def port_bytes(n: int, k: int, cfg: AccelConfig) -> int:
    """Bytes each port reads for ``n`` output lines of ``k`` K lines."""
    return n * port_row_bytes(k, cfg)


def port_streams(w: np.ndarray, cfg: AccelConfig) -> np.ndarray:
    """``W`` (``n*cols`` rows x ``k*cols`` int8, zero padded) as ``(P, port_bytes)`` uint8: each port's stream."""
    C, P = cfg.cols, cfg.dma_ports
    rows, kc = w.shape
    if rows % C or kc % C:
        raise ValueError(f"weight stream of a {rows} x {kc} matrix: both sides must be whole lines of {C}")
    n, k = rows // C, kc // C
    t = np.asarray(w, np.int8).reshape(n, C // P, P, k, C)  # [j, g, p, kk, r]
    return np.ascontiguousarray(t.transpose(2, 0, 3, 1, 4)).reshape(P, -1).view(np.uint8)  # [p, j, kk, g, r]


def _spans(w: int, p: int, nbytes: int, cfg: AccelConfig):
    """(DRAM offset, port offset, length) of the contiguous pieces of port ``p``'s ``nbytes`` from ``w``."""
    x = 0
    while x < nbytes:
        a = wstream_addr(w, p, x, cfg)
        n = min(nbytes - x, WPAGE - a % WPAGE)
        yield a, x, n
        x += n


def gather(win: np.ndarray, w: int, n: int, k: int, cfg: AccelConfig) -> np.ndarray:
    """The ``n*cols x k*cols`` int8 ``W`` a GEMM_STREAM at ``w`` reads from the byte window ``win``."""
    C, P = cfg.cols, cfg.dma_ports
    nb = port_bytes(n, k, cfg)
    streams = np.empty((P, nb), np.uint8)
    for p in range(P):
        for a, x, ln in _spans(w, p, nb, cfg):
            streams[p, x:x + ln] = win[a:a + ln]
    t = streams.view(np.int8).reshape(P, n, k, C // P, C)  # [p, j, kk, g, r]
    return t.transpose(1, 3, 0, 2, 4).reshape(n * C, k * C)


def scatter(win: np.ndarray, w: int, streams: np.ndarray, cfg: AccelConfig) -> None:
    """Write each port's stream (``port_streams``) into ``win`` for a GEMM_STREAM at ``w``."""
    for p in range(cfg.dma_ports):
        for a, x, ln in _spans(w, p, streams.shape[1], cfg):
            win[a:a + ln] = streams[p, x:x + ln]


def address(region: int, x: int, cfg: AccelConfig) -> int:
    """The ``w`` field for port offset ``x`` of a weight region starting at the page-aligned ``region``."""
    if region % WPAGE:
        raise ValueError(f"weight region at {region:#x} is not aligned to a {WPAGE}-byte page")
    return region + (x // WPAGE) * cfg.dma_ports * WPAGE + x % WPAGE


def port_span(total_port_bytes: int, cfg: AccelConfig) -> int:
    """DRAM bytes a weight region of ``total_port_bytes`` per port occupies (whole page groups)."""
    pages = -(-total_port_bytes // WPAGE)
    return pages * cfg.dma_ports * WPAGE
