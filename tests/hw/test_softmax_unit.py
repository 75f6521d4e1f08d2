"""SoftmaxUnit under the Amaranth simulator, bit-exact with numerics.softmax."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest
from hw_streams_tb import collect, run, send

from systolica import numerics
from systolica.config import AccelConfig
from systolica.hw.softmax_unit import SoftmaxUnit

pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]

I32_MIN, I32_MAX = numerics.INT32_MIN, numerics.INT32_MAX
KINDS = ("scores", "extremes", "equal", "negative", "peaked", "wide", "tail")
PAD = 987654321  # junk in the lanes past n: must be ignored


def softmax_row(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    """One fx score row of ``n`` elements of a given flavour."""
    if kind == "scores":  # attention-like logits, a few units wide
        return rng.integers(-(8 << 16), 8 << 16, size=n)
    if kind == "extremes":  # x - max saturates to INT32_MIN: exp gives 0
        return rng.choice(np.array([I32_MIN, I32_MAX, 0, I32_MAX - 1, I32_MIN + 1]), size=n)
    if kind == "equal":  # ties: every element is exactly 2**30 before normalising
        return np.full(n, int(rng.integers(I32_MIN, I32_MAX)))
    if kind == "negative":
        return -rng.integers(1 << 20, 1 << 31, size=n)
    if kind == "peaked":  # one element dominates, the rest underflow to ~0
        x = rng.integers(-(64 << 16), -(30 << 16), size=n)
        x[int(rng.integers(0, n))] = int(rng.integers(0, 1 << 16))
        return x
    if kind == "tail":  # 19..34 below the maximum: where exp_fx reaches 0, and the unit's clamp at -32
        top = int(rng.integers(-(1 << 20), 1 << 20))
        x = top - rng.integers(19 << 16, 34 << 16, size=n)
        x[0] = top
        if n > 2:
            x[1:3] = [top - (32 << 16), top - (32 << 16) + 1]
        return x
    return rng.integers(I32_MIN, I32_MAX, size=n, endpoint=True)


def softmax_row_beats(x: np.ndarray, C: int, row_lanes: int | None = None):
    """The input beats (``C`` lanes) of one row ``x`` (``1 x n``, padded with junk to whole buffer lines of
    ``row_lanes``, default ``C``, elements) and the expected output beats."""
    n = x.shape[1]
    y = numerics.softmax(x)[0]
    L = -(-n // (row_lanes or C)) * (row_lanes or C) // C
    xp = np.concatenate([x[0], np.full(L * C - n, PAD)])
    yp = np.concatenate([y, np.zeros(L * C - n, np.int64)])
    beats = [{"kind": 0, "data": [0] * C, "last": 0, "n": n}]
    beats += [{"kind": 1, "data": [int(v) for v in xp[j * C:(j + 1) * C]], "last": int(j == L - 1), "n": 0}
              for _ in range(3) for j in range(L)]
    return beats, [[int(v) for v in yp[j * C:(j + 1) * C]] for j in range(L)]


def expected_lasts(beats, C: int, row_lanes: int | None = None) -> list[int]:
    """The ``last`` flag of every output beat the headers in ``beats`` call for (1 on each row's final beat)."""
    out = []
    RC = row_lanes or C
    for b in beats:
        if b["kind"] == 0 and b["n"]:
            L = -(-b["n"] // RC) * RC // C
            out += [0] * (L - 1) + [1]
    return out


def softmax_cases(C: int, seed: int, rows: int = 12, max_n: int = 13, row_lanes: int | None = None):
    """Beats and expected output lines (lane values; lanes past ``n`` are written as 0) for ``rows`` random rows
    of 1..max_n elements (the hardware core's RtlUnits test uses this too).

    A one-element row and every flavour of :data:`KINDS` occur in every call.
    """
    rng = np.random.default_rng(seed)
    beats, want = [], []
    for r in range(rows):
        n = 1 if r == 0 else int(rng.integers(1, max_n + 1))
        kind = KINDS[r % len(KINDS)]
        x = softmax_row(rng, kind, n).reshape(1, n)
        b, w = softmax_row_beats(x, C, row_lanes)
        beats += b
        want += w
    return beats, want


def check_lines(got, want, lasts, what: str = "output line") -> None:
    """Compare output beats with the expected lane values and ``last`` flags."""
    assert len(got) == len(want) == len(lasts), (len(got), len(want), len(lasts))
    for k, (g, w, last) in enumerate(zip(got, want, lasts, strict=True)):
        assert ([int(v) for v in g.data], int(g.last)) == (w, last), f"{what} {k}"


@pytest.mark.parametrize("cols,lanes,seed,idle,stall", [(4, 4, 1, 0.3, 0.3), (2, 2, 2, 0.3, 0.3), (8, 8, 3, 0.3, 0.3),
                                                        (4, 4, 4, 0.0, 0.8),  # a slow sink: rows overlap the drain
                                                        (8, 2, 5, 0.3, 0.3), (8, 4, 6, 0.2, 0.4),
                                                        (8, 1, 7, 0.3, 0.3)])  # one lane: nonlinear_lanes=1
def test_softmax_bit_exact(cols, lanes, seed, idle, stall):
    cfg = AccelConfig(rows=4, cols=cols, line_lanes=max(2, lanes), nonlinear_lanes=lanes)
    dut = SoftmaxUnit(cfg)
    assert dut.lanes == lanes
    beats, want = softmax_cases(lanes, seed, row_lanes=cols)
    got = []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(seed), idle),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(seed + 1), stall, out=got)])
    check_lines(got, want, expected_lasts(beats, lanes, cols))


def test_softmax_zero_n_writes_nothing():
    """A header with n = 0 is a row of no lines: nothing streams in or out, the next row follows."""
    C = 4
    dut = SoftmaxUnit(AccelConfig(rows=4, cols=C))
    beats, want = softmax_cases(C, 7, rows=2)
    empty = {"kind": 0, "data": [0] * C, "last": 0, "n": 0}
    got, err = [], []

    async def check(ctx):
        await collect(ctx, dut.o_stream, len(want), random.Random(1), 0.2, out=got)
        err.append(ctx.get(dut.error))

    run(dut, [lambda ctx: send(ctx, dut.i_stream, [empty] + beats + [empty], random.Random(2), 0.2), check])
    check_lines(got, want, expected_lasts(beats, C))
    assert err == [0]


def test_softmax_full_rate_cycles():
    """At full rate a row of L lines takes 3L + 49 cycles (three passes, the reciprocal's 35, the SUM drain 13, the max drain 1, the output shift 1, the header)."""
    C, L = 4, 8
    dut = SoftmaxUnit(AccelConfig(rows=4, cols=C))
    rng = np.random.default_rng(3)
    beats, want = [], []
    for _ in range(3):
        b, w = softmax_row_beats(softmax_row(rng, "scores", L * C).reshape(1, -1), C)
        beats += b
        want += w
    got, cycles = [], []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(0), 0.0),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(0), 0.0, out=got, cycles=cycles)])
    check_lines(got, want, expected_lasts(beats, C))
    assert cycles[3 * L - 1] - cycles[2 * L - 1] == 3 * L + 51, cycles


def test_softmax_rejects_bad_config():
    with pytest.raises(TypeError, match="AccelConfig"):
        SoftmaxUnit(None)
    gc.collect()  # the half-built component warns when collected: inside this test's warning filter


def test_exp_clamp_keeps_the_bits():
    """The unit clamps x - max at D_MIN before exp_fx: numerics gives 0 at and below it (outputs alone
    cannot show this: an e of 0 or 1 moves no probability by an lsb)."""
    from systolica.hw.softmax_unit import D_MIN

    rng = np.random.default_rng(0)
    d = np.concatenate([np.arange(D_MIN - 4096, D_MIN + 1), rng.integers(I32_MIN, D_MIN, size=4096), [I32_MIN]])
    assert not numerics.exp_fx(d).any()
    assert numerics.exp_fx(np.array([D_MIN // 2])).any()  # the clamp is not vacuous: e > 0 at half of it
