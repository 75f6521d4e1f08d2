"""SoftmaxUnit under the Amaranth simulator, bit-exact with numerics.softmax."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hw_streams_tb import collect, run, send

from systolica import numerics
from systolica.config import AccelConfig
from systolica.hw.softmax_unit import SoftmaxUnit

# components whose constructor rejected its arguments are never elaborated
pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]


def softmax_cases(C: int, seed: int, sizes=(9, 4, 1, 16, 7)):
    """Beats and expected lines for rows of n fx scores, padded to whole lines (padding not compared)."""
    rng = np.random.default_rng(seed)
    beats, want = [], []
    for r, n in enumerate(sizes):
        scale = [1 << 16, 1 << 20, 1 << 14, 1 << 24, 1 << 31][r % 5]
        x = rng.integers(-scale, scale, size=(1, n), dtype=np.int64)
        if r == 3:
            x[0, 3] = x[0, 11] = x.max()  # a tie for the maximum
        y = numerics.softmax(x)
        nl = -(-n // C)
        xp = np.concatenate([x[0], np.full(nl * C - n, (1 << 31) - 1)])  # padding must not win the max
        beats.append({"kind": 0, "data": [0] * C, "last": 0, "n": n})
        for _ in range(3):
            beats += [{"kind": 1, "data": [int(v) for v in xp[j * C:(j + 1) * C]], "last": int(j == nl - 1), "n": 0}
                      for j in range(nl)]
        want += [[int(y[0, j * C + c]) if j * C + c < n else None for c in range(C)] for j in range(nl)]
    return beats, want


@pytest.mark.parametrize("cols", [4, 8])
def test_softmax_bit_exact(cols):
    dut = SoftmaxUnit(AccelConfig(rows=4, cols=cols))
    beats, want = softmax_cases(cols, seed=cols)
    got = []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(1), 0.3),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(2), 0.3, out=got)])
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert [g.data[c] if w[c] is not None else None for c in range(cols)] == w, f"output line {k}"
