"""QuantUnit (QUANT, split 0 and 1) under the Amaranth simulator, bit-exact with numerics.quant_rows(_split)."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest
from hw_streams_tb import collect, run, send
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolica import numerics
from systolica.config import AccelConfig
from systolica.hw.quant_unit import QuantUnit

pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]

I32_MIN, I32_MAX = numerics.INT32_MIN, numerics.INT32_MAX
KINDS = ("zero", "extremes", "carry", "negative", "tiny", "wide", "small", "mixed")


def quant_row(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    """One fx row of ``n`` elements of a given flavour (the edge cases of quant_rows)."""
    if n == 0:
        return np.zeros(0, np.int64)
    if kind == "zero":
        return np.zeros(n, np.int64)
    if kind == "extremes":  # the int32 ends, and their neighbours
        return rng.choice(np.array([I32_MIN, I32_MIN + 1, I32_MAX, I32_MAX - 1, 0, -1, 1]), size=n)
    if kind == "carry":  # a maximum (or minimum) that rounds at s0 to 128 (-128): s = s0 + 1
        s0 = int(rng.integers(1, 25))
        x = rng.integers(-(127 << s0), 127 << s0, size=n)
        t = (127 << s0) + (1 << (s0 - 1))  # the least maximum that rounds to 128 (-t rounds to -127)
        edge = t + int(rng.integers(0, 1 << (s0 - 1)))
        # a carry from the maximum or the minimum, or the values just short of one (t - 1 and -t: no carry)
        x[int(rng.integers(0, n))] = (edge, -edge - 1, t - 1, -t)[int(rng.integers(0, 4))]
        return x
    if kind == "negative":  # negative-heavy: the minimum decides
        return -rng.integers(0, 1 << int(rng.integers(4, 31)), size=n) + int(rng.integers(0, 8))
    if kind == "tiny":  # |x| < 64: s < 0, q = x << -s exactly, residual 0
        return rng.integers(-63, 64, size=n)
    if kind == "wide":
        return rng.integers(I32_MIN, I32_MAX, size=n, endpoint=True)
    if kind == "small":
        return rng.integers(-(1 << 12), 1 << 12, size=n)
    # mixed: an activation-like row, a few outlier channels far above the rest
    x = rng.integers(-(1 << 16), 1 << 16, size=n)
    x[rng.integers(0, n, size=max(1, n // 8))] *= int(rng.integers(10, 300))
    return np.clip(x, I32_MIN, I32_MAX)


def quant_row_beats(x: np.ndarray, C: int, split: int):
    """The input beats of one row ``x`` (``1 x L*C``) and the output beats numerics expects."""
    L = x.shape[1] // C
    q, e = numerics.quant_rows_split(x) if split else numerics.quant_rows(x)
    beats = [{"kind": 0, "data": [0] * C, "last": 0, "split": split, "empty": int(L == 0)}]
    beats += [{"kind": 1, "data": [int(v) for v in x[0, j * C:(j + 1) * C]], "last": int(j == L - 1), "split": 0,
               "empty": 0} for _ in range(2 + split) for j in range(L)]
    want = []
    for b in range(1 + split):
        want.append({"data": [int(e[b])] + [0] * (C - 1), "exp": 1, "blk": b, "last": int(L == 0 and b == split)})
        want += [{"data": [int(v) for v in q[b, j * C:(j + 1) * C]], "exp": 0, "blk": b,
                  "last": int(j == L - 1 and b == split)} for j in range(L)]
    return beats, want


def quant_cases(C: int, seed: int, rows: int = 16, max_lines: int = 4):
    """Beats and expected output beats for ``rows`` random rows (random lines, split and flavour).

    Every flavour in :data:`KINDS`, an empty row (0 lines) and a one-line row occur in every call.
    Returns ``(beats, want, stats)``; ``stats`` counts rows whose scale needed the extra bit.
    """
    rng = np.random.default_rng(seed)
    beats, want = [], []
    stats = {"carry_rows": 0, "rows": 0}
    for r in range(rows):
        L = 0 if r == 1 else 1 if r == 2 else int(rng.integers(1, max_lines + 1))
        split = int(rng.random() < 0.5) if r > 2 else r % 2
        kind = KINDS[r % len(KINDS)] if r < 2 * len(KINDS) else str(rng.choice(KINDS))
        x = quant_row(rng, kind, L * C).reshape(1, L * C)
        e = (numerics.quant_rows_split(x) if split else numerics.quant_rows(x))[1]
        hi = max(0, int(x.max())) if x.size else 0
        lo = min(0, int(x.min())) if x.size else 0
        s0 = int(numerics.bitlen(max(hi, -lo))) - 7
        stats["carry_rows"] += int(int(e[0]) + numerics.FX_FRAC == s0 + 1)
        stats["rows"] += 1
        b, w = quant_row_beats(x, C, split)
        beats += b
        want += w
    return beats, want, stats


def _plain(beat) -> dict:
    return {"data": [int(v) for v in beat.data], "exp": int(beat.exp), "blk": int(beat.blk), "last": int(beat.last)}


def run_quant(cols: int, seed: int, idle: float, stall: float, lanes: int = 0, **kw):
    dut = QuantUnit(AccelConfig(rows=4, cols=cols, line_lanes=lanes))
    beats, want, stats = quant_cases(lanes or cols, seed, **kw)  # a row of L lines of cols: L * cols / lanes beats
    got, cycles = [], []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(seed), idle),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(seed + 1), stall, out=got,
                                  cycles=cycles)])
    return [_plain(g) for g in got], want, stats, cycles


@pytest.mark.parametrize("cols,lanes,seed", [(4, 0, 1), (2, 0, 2), (8, 0, 3), (8, 2, 4), (8, 4, 5)])
def test_quant_bit_exact(cols, lanes, seed):
    got, want, stats, _ = run_quant(cols, seed, 0.3, 0.3, lanes)
    assert stats["carry_rows"] > 0, "no row exercised the s0 + 1 case"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"output beat {k}: {g} != {w}"


def test_quant_full_rate_cycles():
    """At full rate a row of L lines takes 2L + 11 cycles (split 0) / 3L + 21 (split 1); the output keeps up."""
    C, L = 4, 8
    rng = np.random.default_rng(5)
    for split, per_row in ((0, 2 * L + 11), (1, 3 * L + 21)):
        dut = QuantUnit(AccelConfig(rows=4, cols=C))
        beats, want = [], []
        for _ in range(3):
            b, w = quant_row_beats(quant_row(rng, "mixed", L * C).reshape(1, -1), C, split)
            beats += b
            want += w
        got, cycles = [], []
        run(dut, [lambda ctx, dut=dut, beats=beats: send(ctx, dut.i_stream, beats, random.Random(0), 0.0),
                  lambda ctx, dut=dut, want=want, got=got, cycles=cycles: collect(
                      ctx, dut.o_stream, len(want), random.Random(0), 0.0, out=got, cycles=cycles)])
        assert [_plain(g) for g in got] == want
        per_out = (1 + split) * (L + 1)
        # the last output of row 1 and of row 2 are one row apart
        assert cycles[3 * per_out - 1] - cycles[2 * per_out - 1] == per_row, cycles


def test_quant_rejects_bad_config():
    with pytest.raises(TypeError, match="AccelConfig"):
        QuantUnit({"cols": 4})
    gc.collect()  # the half-built component warns when collected: inside this test's warning filter


def test_quant_flags_wrong_kind():
    """A row line where a header is due is consumed, ignored and flagged."""
    C = 4
    dut = QuantUnit(AccelConfig(rows=4, cols=C))
    beats, want, _ = quant_cases(C, 9, rows=3)
    stray = {"kind": 1, "data": [7] * C, "last": 1, "split": 0, "empty": 0}
    flagged = []

    async def check(ctx):
        await collect(ctx, dut.o_stream, len(want), random.Random(3), 0.0, out=(got := []))
        flagged.append(ctx.get(dut.error))
        assert [_plain(g) for g in got] == want

    run(dut, [lambda ctx: send(ctx, dut.i_stream, [stray] + beats, random.Random(4), 0.0), check])
    assert flagged == [1]


def test_round_shift8_every_shift():
    """The unit's one-shifter rshift_round equals numerics for every shift QUANT uses (-7..26), at the
    rounding edges, wherever the result fits int8."""
    from amaranth import Elaboratable, Module, Signal, signed
    from amaranth.sim import Simulator

    from systolica.hw.quant_unit import _round_shift8

    class Wrap(Elaboratable):
        def __init__(self):
            self.x, self.s = Signal(signed(32)), Signal(signed(7))
            self.y = None

        def elaborate(self, platform):
            m = Module()
            sh = Signal(range(34))  # the shifter takes s + 7, kept in a register of its own in the unit
            m.d.comb += sh.eq(self.s + 7)
            self.y = _round_shift8(m, self.x, sh, "y")
            return m

    dut = Wrap()
    rng = np.random.default_rng(0)
    cases = []
    for s in range(-7, 27):
        lim = (127 << s) + (1 << s) // 2 - 1 if s > 0 else 127 >> -s  # |rshift_round(x, s)| <= 127
        lo, hi = max(I32_MIN, -lim - 1 if s > 0 else -lim), min(I32_MAX, lim)
        xs = [lo, hi, 0, -1, 1] + [int(v) for v in rng.integers(lo, hi + 1, size=24)]
        if s > 0:  # exact halves round up
            xs += [(k << s) + (1 << (s - 1)) for k in (-100, -1, 0, 5, 126)] + [(k << s) + (1 << (s - 1)) - 1 for k in (-3, 7)]
        # only where the result fits int8, as in QUANT (x = 1, s = -7 would give 128)
        cases += [(x, s) for x in xs if lo <= x <= hi]
    got = []

    async def bench(ctx):
        for x, s in cases:
            ctx.set(dut.x, x)
            ctx.set(dut.s, s)
            got.append(ctx.get(dut.y))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    want = [int(numerics.rshift_round(np.array([x]), s)[0]) for x, s in cases]
    bad = [(c, g, w) for c, g, w in zip(cases, got, want, strict=True) if g != w]
    assert not bad, bad[:5]


_edge = st.sampled_from([I32_MIN, I32_MIN + 1, I32_MAX, -1, 0, 1, 63, 64, -64, -65, 127, 128, 255, 256, -255, -256,
                         (127 << 20) + (1 << 19), -(127 << 20) - (1 << 19) - 1])
_value = st.one_of(_edge, st.integers(-(1 << 12), 1 << 12), st.integers(I32_MIN, I32_MAX))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.data()), min_size=1, max_size=3))
def test_quant_property(rows):
    """Hypothesis rows (edge values mixed in, 0..3 lines, split or not), back to back: bit-exact."""
    C = 2
    dut = QuantUnit(AccelConfig(rows=4, cols=C))
    beats, want = [], []
    for L, split, draw in rows:
        x = np.array(draw.draw(st.lists(_value, min_size=L * C, max_size=L * C)), np.int64).reshape(1, L * C)
        b, w = quant_row_beats(x, C, int(split))
        beats += b
        want += w
    got = []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(0), 0.2),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(1), 0.2, out=got)])
    assert [_plain(g) for g in got] == want
