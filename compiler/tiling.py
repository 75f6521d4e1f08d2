"""Tiling of matrices to the systolic array and the double-buffered weight slots.

A matrix of ``N`` outputs and ``K`` inputs is stored in DRAM as ``Nl * cols`` rows of ``Kl``
scratchpad lines (``Nl = ceil(N / cols)``, ``Kl = ceil(K / cols)``, zero padded).  A tile is
``nt * cols`` rows by ``kt`` lines: one strided LOAD brings it into a weight slot, one GEMM (or
one per token row, see :func:`gemm_calls`) consumes it.  Tiles are as large as the slot and the
accumulator allow, whole rows (``kt = Kl``) first, because a full-K tile needs no partial sums
and gives the longest DMA bursts.
"""

from __future__ import annotations

from dataclasses import dataclass

from systolica.compiler.memory import MemoryError_

__all__ = ["Tile", "MatrixTiling", "tile_matrix", "gemm_calls"]


@dataclass(frozen=True)
class Tile:
    n0: int  # first output line
    nt: int  # output lines
    k0: int  # first input line
    kt: int  # input lines

    def spad_lines(self, cols: int) -> int:
        return self.nt * cols * self.kt


@dataclass(frozen=True)
class MatrixTiling:
    name: str
    Nl: int
    Kl: int
    nt: int
    kt: int

    def tiles(self) -> list[Tile]:
        """Output blocks in order; within one block the K tiles in order (the GEMMs accumulate)."""
        out = []
        for n0 in range(0, self.Nl, self.nt):
            for k0 in range(0, self.Kl, self.kt):
                out.append(Tile(n0, min(self.nt, self.Nl - n0), k0, min(self.kt, self.Kl - k0)))
        return out

    @property
    def n_blocks(self) -> int:
        return -(-self.Nl // self.nt)


def tile_matrix(name: str, Nl: int, Kl: int, cols: int, slot_lines: int, acc_lines: int, rows: int) -> MatrixTiling:
    """Pick ``(nt, kt)`` for a matrix of ``Nl x Kl`` lines.

    Parameters
    ----------
    slot_lines : int
        Scratchpad lines of one weight slot.
    acc_lines : int
        Accumulator lines available to the partial results (``rows * nt`` must fit).
    rows : int
        Token rows of the activation (the GEMM's ``m``).
    """
    if slot_lines < cols:
        raise MemoryError_(f"weight slot of {slot_lines} scratchpad lines cannot hold even one {cols}x{cols} tile "
                           f"of {name!r}")
    if acc_lines < rows:
        raise MemoryError_(f"accumulator of {acc_lines} lines cannot hold {rows} rows of one output line of {name!r}")
    nt_acc = max(1, acc_lines // rows)
    if cols * Kl <= slot_lines:
        kt = Kl
        nt = min(Nl, slot_lines // (cols * Kl), nt_acc)
    else:  # a row block of the whole K does not fit: split K, accumulate in the acc buffer
        nt = 1
        kt = slot_lines // cols
    # Even out the blocks: the same number of tiles with a smaller last-tile imbalance.
    nb = -(-Nl // nt)
    nt = -(-Nl // nb)
    kb = -(-Kl // kt)
    kt = -(-Kl // kb)
    for v, what in ((nt, "n"), (kt, "k")):
        if v > 0xFFFF:
            raise MemoryError_(f"tile of {name!r} has {v} lines along {what}, more than a 16-bit field holds")
    return MatrixTiling(name, Nl, Kl, nt, kt)


def gemm_calls(t: Tile, m: int, Kl: int) -> list[tuple[int, int, int, int]]:
    """The GEMMs of one tile as ``(row, m, a_offset, dst_offset)`` in lines.

    GEMM reads A as ``m`` rows of ``k`` lines and writes ``m`` rows of ``n`` lines.  When the tile
    spans all of K the activation rows are already ``kt`` lines apart and one GEMM does every row;
    otherwise the rows of A are ``Kl`` lines apart and each row gets its own GEMM (``m = 1``)
    so that partial sums of one row land in the same accumulator lines.  Either way the
    accumulator block holds ``m`` rows of ``t.nt`` lines.
    """
    if t.kt == Kl or m == 1:
        return [(0, m, t.k0, 0)]
    return [(r, 1, r * Kl + t.k0, r * t.nt) for r in range(m)]
