"""Reciprocal under the Amaranth simulator, bit-exact with numerics.recip."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hw_streams_tb import collect, run, send

from systolica import numerics
from systolica.hw.recip import Reciprocal

# components built only for their layouts, or whose constructor rejected its arguments, are never elaborated
pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]


@pytest.mark.parametrize("registered", [False, True])
def test_recip_bit_exact(registered):
    rng = np.random.default_rng(0)
    ds = [0, -5, 1, 2, 3, (1 << 30) - 1, 1 << 30, (1 << 31) - 1, 1 << 31, (1 << 31) + 1, (1 << 62) + 12345,
          (1 << 63) - 1]
    ds += [int(x) for x in rng.integers(1, 1 << 24, size=8)] + [int(x) for x in rng.integers(1, 1 << 62, size=8)]
    dut = Reciprocal(64, registered=registered)
    got = []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, ds, random.Random(1), 0.2),
              lambda ctx: collect(ctx, dut.o_stream, len(ds), random.Random(2), 0.3, out=got)])
    y, k = numerics.recip(np.array(ds, dtype=np.int64))
    assert [(g.y, g.k) for g in got] == list(zip(y.tolist(), k.tolist(), strict=True))
