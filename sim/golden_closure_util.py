"""Helpers the golden simulator's closures share (:mod:`systolica.sim.golden_closures`): the reference op as a
closure, in-place rounding and saturation on int64 arrays, operand-overlap checks, and the scalar integer
formulas of :mod:`systolica.numerics` (exp2, rounding shifts, reciprocal, rsqrt) on Python integers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from systolica import numerics as nx
from systolica.isa import Instr
from systolica.sim.golden_kernels import _INT64_MAX, _INT64_MIN
from systolica.sim.golden_ops import EXECUTE

if TYPE_CHECKING:  # pragma: no cover
    from systolica.sim.golden import GoldenSim


_I64 = np.int64

Op = Callable[[], None]


def _generic(sim: GoldenSim, ins: Instr) -> Op:
    fn = EXECUTE[ins.op]
    return lambda: fn(sim, ins)


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


def _overlap_fields(ins: Instr, a: tuple[str, int], b: tuple[str, int]) -> bool:
    """Whether the lines ``[ins.<a>, +n)`` and ``[ins.<b>, +m)`` (of one buffer) overlap."""
    (fa, na), (fb, nb) = a, b
    x, y = ins.fields[fa], ins.fields[fb]
    return na > 0 and nb > 0 and x < y + nb and y < x + na




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
