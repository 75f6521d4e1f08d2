"""How a GEMM ``out = a @ w.T`` maps onto the SystolicArray's streams (shared by the Amaranth and
cocotb tests): weight tile by weight tile, N tiles outer, K tiles inner."""

from __future__ import annotations

import numpy as np


def tile_streams(a: np.ndarray, w: np.ndarray, R: int, C: int, P: int):
    """Weight beats, activation beats and the (n-tile, k-tile) order of a GEMM on an R x C array.

    a: (M, K) int8, w: (N, K) int8 with K % R == 0 and N % C == 0.  P weight columns per beat.
    """
    M, K = a.shape
    N = w.shape[0]
    if K % R or N % C:
        raise ValueError(f"K={K} must be a multiple of R={R} and N={N} of C={C}")
    wbeats, abeats, order = [], [], []
    for nt in range(N // C):
        for kt in range(K // R):
            tile = w[nt * C:(nt + 1) * C, kt * R:(kt + 1) * R]  # (C, R): column c = W[n0+c, k0:k0+R]
            for g in range(C // P):
                wbeats.append([[int(v) for v in tile[g * P + j]] for j in range(P)])
            for i in range(M):
                abeats.append({"data": [int(v) for v in a[i, kt * R:(kt + 1) * R]],
                               "last": int(i == M - 1), "tag": (nt * 977 + kt * 31 + i) & 0x1FFFF})
            order.append((nt, kt))
    return wbeats, abeats, order


def accumulate(beats, abeats, order, M: int, N: int, C: int) -> np.ndarray:
    """Sum the array's partial-sum lines over K tiles (int32 wrap); checks tags and last flags."""
    out = np.zeros((M, N), dtype=np.int64)
    for idx, beat in enumerate(beats):
        nt, _ = order[idx // M]
        want = abeats[idx]
        if int(beat.tag) != want["tag"] or int(beat.last) != want["last"]:
            raise AssertionError(f"beat {idx}: tag/last {int(beat.tag)}/{int(beat.last)}, "
                                 f"expected {want['tag']}/{want['last']}")
        out[idx % M, nt * C:(nt + 1) * C] += np.array([int(beat.data[c]) for c in range(C)], dtype=np.int64)
    return ((out + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
