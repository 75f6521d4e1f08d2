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


# dsp: the GELU constants on multipliers; newton: the sigmoid's quotient by recip_seeded instead of the divider
@pytest.mark.parametrize("cols,line_lanes,nonlinear,dsp,newton", [
    (2, 2, 0, 0, 0), (4, 4, 0, 0, 0), (8, 2, 0, 0, 0), (8, 2, 1, 0, 0), (4, 4, 0, 1, 0), (8, 2, 1, 1, 0),
    (4, 4, 0, 1, 1), (8, 2, 1, 0, 1)])
def test_activation_bit_exact(cols, line_lanes, nonlinear, dsp, newton):
    cfg = AccelConfig(rows=4, cols=cols, line_lanes=line_lanes, nonlinear_lanes=nonlinear, dsp_muls=dsp,
                      act_newton=newton)
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


def _one_a_cycle(m, inp, out, vals, lat: int) -> list[int]:
    """``vals`` into ``inp`` one a cycle (the pipeline in ``m`` always enabled); ``out``'s values for them, ``lat``
    cycles later each."""
    from amaranth.sim import Simulator

    got = []

    async def tb(ctx):
        for i in range(len(vals) + lat):
            if i < len(vals):
                ctx.set(inp, vals[i])
            await ctx.tick()
            got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return got[lat - 1:lat - 1 + len(vals)]


def test_seeded_reciprocal_exact():
    """The Newton pipeline alone (hw/activation.py ``_recip_seeded``), one divisor a cycle: floor(2**60 / d) at both
    ends of every seed's interval, the range's ends and 2**31 (sigmoid(0)'s divisor), after its latency."""
    from amaranth import Const, Module, Signal, unsigned

    from systolica.hw.activation import _recip_seeded
    from systolica.hw.line_unit import Stages, Timed

    m = Module()
    d = Signal(unsigned(32))
    tl = Timed(Stages(m, Const(1)))
    q, t = _recip_seeded(tl, m, (d, 0), "_t", False)
    starts = [(1 << 30) + (i << 22) for i in range(256)]
    rng = random.Random(7)
    vals = [1 << 30, (1 << 31) - 1, 1 << 31] + [s + o for s in starts for o in (0, 1, (1 << 22) - 1, 1 << 21)] + \
        [rng.randrange(1 << 30, (1 << 31) + 1) for _ in range(200)]
    assert _one_a_cycle(m, d, q, vals, t) == [(1 << 60) // v for v in vals]


@pytest.mark.parametrize("k,width", [(48012366, 30), (1713444047, 28), (-12345, 20), (7, 8), (8, 8), (-1, 5)])
def test_const_mul_exact(k, width):
    """hw/vec_lut_mul.py's shift-and-add product (GELU's C1 / C2 and odd cases): x * k after its latency,
    extremes included, one operand a cycle."""
    from amaranth import Const, Module, Signal, signed

    from systolica.hw.line_unit import Stages
    from systolica.hw.vec_lut_mul import const_mul, const_mul_latency, csd

    assert sum(d << s for s, d in csd(k)) == k
    m = Module()
    x = Signal(signed(width))
    y = const_mul(Stages(m, Const(1)), x, k, "t")
    lat = const_mul_latency(k)
    rng = random.Random(k)
    vals = [-(1 << (width - 1)), (1 << (width - 1)) - 1, 0] + \
        [rng.randrange(-(1 << (width - 1)), 1 << (width - 1)) for _ in range(40)]
    assert _one_a_cycle(m, x, y, vals, lat) == [v * k for v in vals]
