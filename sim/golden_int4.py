"""The golden simulator's plan closure of an int4 GEMM_STREAM (``wfmt`` Q4_0 / Q4_1).

The same integers as ``golden_ops.gemm_stream`` (:func:`systolica.numerics_int4.stream_acc`), faster: the
codes of read-only weights are gathered and converted once per simulator (as the int8 path keeps its converted
tiles).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from systolica import wstream4
from systolica.isa import Instr, WFmt
from systolica.numerics_int4 import stream_acc_prepared, stream_operands
from systolica.sim.golden_ops import _lines, _rows, readonly_cover

if TYPE_CHECKING:  # pragma: no cover
    from systolica.sim.golden import GoldenSim

__all__ = ["stream4_closure"]


def stream4_closure(sim: GoldenSim, ins: Instr) -> Callable[[], None] | None:
    """The closure of an int4 GEMM_STREAM (the instruction was checked: its operands are in range)."""
    m, k, n, cfg, fmt = ins.m, ins.k, ins.n, sim.cfg, WFmt(ins.wfmt)
    dst = _lines(sim, "acc", ins, "dst", m * n, "result")
    if not dst.size:
        return None
    a = _rows(_lines(sim, "spad", ins, "a", m * k, "A"), m)
    out = _rows(dst, m)
    if k == 0:
        def zero() -> None:
            if not ins.acc:
                out[...] = 0
        return zero
    ro = readonly_cover(sim, ins.w, wstream4.stream_end(ins.fields, cfg))
    key = ("q4", ins.w, n, k, int(fmt))

    def weights():
        hit = sim._stream_weights.get(key) if ro else None
        if hit is None:
            hit = stream_operands(*wstream4.gather(sim.window, ins.w, n, k, fmt, cfg))
            if ro:  # weights the host declared read-only: gathered once, shared by every program
                sim._stream_weights[key] = hit
        return hit

    def run() -> None:
        res = stream_acc_prepared(a, weights(), ins.gshift)
        if ins.acc:
            np.add(out, res, out=out, casting="unsafe")  # wraps modulo 2**32 like the adder
        else:
            out[...] = res

    return run
