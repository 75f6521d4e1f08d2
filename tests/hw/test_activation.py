"""ActivationUnit (SILU, GELU) under the Amaranth simulator, bit-exact with numerics.silu / gelu."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hw_streams_tb import collect, run, send

from systolica import numerics
from systolica.config import AccelConfig
from systolica.hw.activation import ActivationUnit, ActOp

# components built only for their layouts, or whose constructor rejected its arguments, are never elaborated
pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]


def activation_cases(C: int, seed: int, lines: int = 24):
    """Beats and expected lines: fx values from tiny to saturating, both ops interleaved."""
    rng = np.random.default_rng(seed)
    special = np.array([0, 1, -1, 1 << 16, -(1 << 16), (1 << 31) - 1, -(1 << 31), 16 << 16, -(16 << 16),
                        (16 << 16) + 1, 3 << 20, -(3 << 20)], np.int64)
    beats, want = [], []
    for j in range(lines):
        scale = [1 << 14, 1 << 17, 1 << 19, 1 << 20, 1 << 21, 1 << 31][j % 6]
        x = rng.integers(-scale, scale, size=(1, C), dtype=np.int64)
        if j < len(special) // C + 1:
            part = special[j * C:(j + 1) * C]
            x[0, :len(part)] = part
        op = ActOp.GELU if j % 2 else ActOp.SILU
        ref = numerics.gelu(x) if op == ActOp.GELU else numerics.silu(x)
        beats.append({"op": int(op), "data": [int(v) for v in x[0]], "last": int(j == lines - 1)})
        want.append([int(v) for v in ref[0]])
    return beats, want


@pytest.mark.parametrize("cols,line_lanes,nonlinear", [(2, 2, 0), (4, 4, 0), (8, 2, 0), (8, 2, 1)])
def test_activation_bit_exact(cols, line_lanes, nonlinear):
    cfg = AccelConfig(rows=4, cols=cols, line_lanes=line_lanes, nonlinear_lanes=nonlinear)
    dut = ActivationUnit(cfg)
    lanes = dut.lanes
    assert lanes == (nonlinear or line_lanes)
    beats, want = activation_cases(lanes, seed=cols + lanes)
    got = []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(1), 0.3),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(2), 0.3, out=got)])
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert [g.data[c] for c in range(lanes)] == w, f"line {k} ({'GELU' if beats[k]['op'] else 'SILU'}) " \
                                                      f"of {beats[k]['data']}"
