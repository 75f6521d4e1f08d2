"""NormUnit (RMSNorm, LayerNorm) under the Amaranth simulator, bit-exact with numerics."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hw_streams_tb import collect, run, send

from systolica import numerics
from systolica.config import AccelConfig
from systolica.hw.norm_unit import NormUnit

# components built only for their layouts, or whose constructor rejected its arguments, are never elaborated
pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]


def norm_cases(C: int, seed: int, rows=((13, True), (8, False), (5, True), (16, False), (1, False), (64, False),
                                       (33, True), (12, True)), row_lanes: int | None = None):
    """Beats (of ``C`` lanes) and expected lines for rows of (n elements, LayerNorm?), padded to whole
    buffer lines of ``row_lanes`` (default ``C``) elements."""
    RC = row_lanes or C
    rng = np.random.default_rng(seed)
    beats, want = [], []
    for r, (n, center) in enumerate(rows):
        scale = [1 << 16, 1 << 22, 1 << 12, 1 << 28, 1 << 18][r % 5]
        # LayerNorm rows have a mean away from 0: positive on even rows, negative on odd ones
        x = rng.integers(-scale, scale, size=(1, n)) + ((scale // 2) * (-1 if r % 2 else 1) if center else 0)
        if n >= 32:  # one element far above the rest: |t| near its sqrt(n) * 2**20 bound; int32 extremes
            x[0, 7] = (1 << 31) - 1
            x[0, 9] = -(1 << 31) if center else x[0, 9]
        gamma = rng.integers(-(2 << 16), 2 << 16, size=n)
        beta = rng.integers(-(1 << 16), 1 << 16, size=n)
        eps = int(rng.integers(0, 1 << 24)) if r % 2 else 43  # 1e-8 in units of 2**-32
        y = numerics.layernorm(x, gamma, beta, eps) if center else numerics.rmsnorm(x, gamma, eps)
        nl = -(-n // RC) * RC // C

        def pad(v, n=n, nl=nl):
            return np.concatenate([np.asarray(v).reshape(-1), np.full(nl * C - n, 123456)])  # junk must be ignored

        xp, gp, bp = pad(x), pad(gamma), pad(beta)
        beats.append({"kind": 0, "a": [0] * C, "b": [0] * C, "c": [0] * C, "last": 0, "n": n, "eps": eps,
                      "center": int(center)})
        for _ in range(4 if center else 3):
            for j in range(nl):
                sl = slice(j * C, (j + 1) * C)
                beats.append({"kind": 1, "a": [int(v) for v in xp[sl]], "b": [int(v) for v in gp[sl]],
                              "c": [int(v) for v in bp[sl]], "last": int(j == nl - 1), "n": 0, "eps": 0,
                              "center": 0})
        yp = np.concatenate([y[0], np.zeros(nl * C - n, np.int64)])
        want += [[int(v) for v in yp[j * C:(j + 1) * C]] for j in range(nl)]
        for j in range(nl):  # lanes past n carry whatever the padding gives: not compared
            want[-nl + j] = [w if j * C + c < n else None for c, w in enumerate(want[-nl + j])]
    return beats, want


@pytest.mark.parametrize("cols,lanes", [(4, 4), (8, 8), (8, 2), (8, 4)])
def test_norms_bit_exact(cols, lanes):
    cfg = AccelConfig(rows=4, cols=cols, line_lanes=lanes)
    dut = NormUnit(cfg)
    beats, want = norm_cases(lanes, seed=cols + lanes, row_lanes=cols)
    got = []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(1), 0.3),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(2), 0.3, out=got)])
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert [g.data[c] if w[c] is not None else None for c in range(lanes)] == w, f"output line {k}"


# cycles per row beyond its passes' beats (header, reciprocal, the scalar states: mean, scale, rsqrt and
# the two Newton steps on the shared multiplier): what sim/perf_costs.VECTOR_PASSES should charge
FIXED_CYCLES = {False: 87, True: 98}


@pytest.mark.parametrize("center", [False, True])
def test_fixed_cycles_per_row(center):
    lanes = 2
    dut = NormUnit(AccelConfig(rows=4, cols=8, line_lanes=lanes))
    beats, want = norm_cases(lanes, seed=5, rows=[(64, center)] * 2, row_lanes=8)
    got, cyc = [], []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(1), 0.0),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(2), 0.0, out=got, cycles=cyc)])
    per_row = len(want) // 2
    passes = 4 if center else 3
    assert cyc[per_row] - cyc[0] == passes * per_row + FIXED_CYCLES[center]  # one row, first beat to first beat
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert [g.data[c] if w[c] is not None else None for c in range(lanes)] == w, f"output line {k}"
