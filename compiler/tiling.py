"""Tiling of matrices to the accumulator: output blocks of whole output lines, all of K at once.

A matrix of ``N`` outputs and ``K`` inputs is ``Nl * cols`` rows of ``Kl`` lines
(``Nl = ceil(N / cols)``, ``Kl = ceil(K / cols)``, zero padded), stored once in DRAM in the
weight-stream layout (:mod:`systolica.wstream`).  GEMM_STREAM reads the weights of any block of
whole output lines straight from DRAM, so nothing limits a block's K: every block spans all of K
(no partial sums) and ``nt`` output lines, as many as the accumulator holds for the GEMM's ``m``
rows (``m * nt`` lines), the 16-bit ``n`` field and the caller's ``cap`` allow (the code generator
caps ``nt`` so that the vector-buffer slots sized by it fit).
"""

from __future__ import annotations

from dataclasses import dataclass

from systolica.compiler.memory import MemoryError_

__all__ = ["Tile", "MatrixTiling", "tile_matrix", "FIELD_MAX"]

FIELD_MAX = 0xFFFF  # GEMM_STREAM's m, k and n fields are 16 bits


@dataclass(frozen=True)
class Tile:
    """One output block: output lines ``n0 .. n0 + nt`` over all ``kt`` (= ``Kl``) K lines."""

    n0: int  # first output line
    nt: int  # output lines
    k0: int  # first input line (always 0: blocks span all of K)
    kt: int  # input lines


@dataclass(frozen=True)
class MatrixTiling:
    name: str
    Nl: int
    Kl: int
    nt: int
    kt: int  # = Kl

    def tiles(self) -> list[Tile]:
        """The output blocks in order, one GEMM_STREAM each."""
        return [Tile(n0, min(self.nt, self.Nl - n0), 0, self.kt) for n0 in range(0, self.Nl, self.nt)]

    @property
    def n_blocks(self) -> int:
        return -(-self.Nl // self.nt)


def tile_matrix(name: str, Nl: int, Kl: int, acc_lines: int, rows: int, cap: int | None = None) -> MatrixTiling:
    """Pick the block height ``nt`` of a matrix of ``Nl x Kl`` lines (``kt = Kl``).

    Parameters
    ----------
    acc_lines : int
        Accumulator lines available to one block's results (``rows * nt`` must fit).
    rows : int
        Token rows of the activation (the GEMM_STREAM's ``m``).
    cap : int, optional
        Largest ``nt`` the caller allows (vector-buffer slots); default no limit.
    """
    if acc_lines < rows:
        raise MemoryError_(f"accumulator of {acc_lines} lines cannot hold {rows} rows of one output line of {name!r}")
    for v, what in ((Kl, "k (its input lines)"), (rows, "m (its activation rows)")):
        if v > FIELD_MAX:
            raise MemoryError_(f"GEMM_STREAM of {name!r} needs {what} = {v}, more than the 16-bit field holds")
    nt = min(Nl, acc_lines // rows, FIELD_MAX, cap if cap is not None else Nl)
    if nt < 1:
        raise MemoryError_(f"no block height fits {name!r} (cap {cap})")
    # Even out the blocks: the same number of blocks with a smaller last-block imbalance.
    nb = -(-Nl // nt)
    nt = -(-Nl // nb)
    return MatrixTiling(name, Nl, Kl, nt, Kl)
