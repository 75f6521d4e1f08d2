"""VectorUnit under the Amaranth simulator: ADD, MUL, REQUANT, ARGMAX on random rows with idle
cycles and back-pressure, bit-exact with systolica.numerics."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hw_streams_tb import collect, run, send

from systolica import numerics
from systolica.config import AccelConfig
from systolica.hw.vector_unit import VecOp, VectorUnit

# components built only for their layouts, or whose constructor rejected its arguments, are never elaborated
pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]

I32 = np.iinfo(np.int32)


def rand_i32(rng, shape, big: bool):
    """Random int32: half near the extremes (saturation), half small."""
    if big:
        return rng.integers(I32.min, I32.max, size=shape, endpoint=True, dtype=np.int64)
    return rng.integers(-(1 << 20), 1 << 20, size=shape, dtype=np.int64)


def vector_cases(C: int, seed: int, row_lanes: int | None = None):
    """Input beats and the expected output lines of a mixed batch of ops (shared with the RTL test).

    ``C`` is the unit's lanes; ARGMAX rows are padded to whole buffer lines of ``row_lanes``
    (default ``C``) elements and cut into beats of ``C``, as the sequencer sends them (beats wholly
    past ``n`` carry ``n = 0``)."""
    RC = row_lanes or C
    rng = np.random.default_rng(seed)
    beats, want = [], []

    def line(op, a, b, shift=0, first=1, last=1, n=C):
        beats.append({"op": int(op), "a": [int(v) for v in a], "b": [int(v) for v in b], "shift": int(shift),
                      "first": first, "last": last, "n": n})

    for r in range(4):  # ADD: residual adds, some saturating
        a, b = rand_i32(rng, (1, C), r % 2 == 0), rand_i32(rng, (1, C), r % 2 == 0)
        line(VecOp.ADD, a[0], b[0])
        want.append(numerics.add(a, b)[0])
    for r in range(4):  # MUL with fraction shifts 0..63
        a, b = rand_i32(rng, (1, C), r % 2 == 0), rand_i32(rng, (1, C), r % 2 == 1)
        sh = [0, 16, 63, int(rng.integers(1, 40))][r]
        line(VecOp.MUL, a[0], b[0], sh)
        want.append(numerics.mul(a, b, sh)[0])
    for r in range(6):  # REQUANT: acc * mult[col] >> (S - exps[row]); shifts negative to past 63
        acc = rand_i32(rng, (1, C), r % 3 == 0)
        mult = rng.integers(0, 1 << 24, size=C)
        S, e = [(40, -20), (20, 30), (62, -128), (16, 5), (255, -128), (30, 0)][r]
        line(VecOp.REQUANT, acc[0], mult, S - e)
        want.append(numerics.requant(acc, mult, np.array([e]), S)[0])
    for r in range(4):  # ROPE: one head of hd = C lanes per line, real angles and saturating extremes
        x = rand_i32(rng, (1, C), r == 3)
        table = numerics.rope_table([int(rng.integers(0, 4096))], C, 10000.0)
        if r == 2:
            table[0, :C // 2], table[0, C // 2:] = 1 << 14, -(1 << 14)  # |cos| = |sin| = 1: overflow room
        line(VecOp.ROPE, x[0], table[0])
        want.append(numerics.rope(x, table)[0])
    for r, n in enumerate([3 * C, 2 * C + 1, C - 1, 1]):  # ARGMAX over rows of n elements, with ties
        x = rng.integers(-50, 50, size=(1, n))
        if r == 0:
            x[0, [2, C + 1]] = 99  # two equal maxima in different lines: the first wins
        nl = -(-n // RC) * RC // C  # beats
        pad = np.concatenate([x[0], np.full(nl * C - n, I32.max)])  # padding must be ignored
        for j in range(nl):
            line(VecOp.ARGMAX, pad[j * C:(j + 1) * C], np.zeros(C), 0, int(j == 0), int(j == nl - 1),
                 max(0, min(C, n - j * C)))
        want.append(np.array([numerics.argmax(x)[0]] + [0] * (C - 1)))
    return beats, want


@pytest.mark.parametrize("cols,lanes", [(4, 4), (8, 8), (8, 2), (8, 4)])
def test_vector_ops_bit_exact(cols, lanes):
    cfg = AccelConfig(rows=4, cols=cols, line_lanes=lanes)
    dut = VectorUnit(cfg)
    beats, want = vector_cases(lanes, seed=cols + lanes, row_lanes=cols)
    got = []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(1), 0.3),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(2), 0.3, out=got)])
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert [g.data[c] for c in range(lanes)] == [int(v) for v in w], f"output line {k}"


def _seq_run(cfg, ins, vbuf: dict, acc: dict | None = None, exps: dict | None = None) -> dict:
    """Run one instruction on the VectorSequencer with synchronous-read buffer models (vector buffer,
    accumulator, scratchpad exponents in lane 0): the lines written."""
    from amaranth.sim import Simulator

    from systolica.hw.vector_sequencer import VectorSequencer
    from systolica.isa import encode

    C = cfg.cols
    dut = VectorSequencer(cfg)
    mask = (1 << 32) - 1

    def pack(vals):
        return sum((int(v) & mask) << (32 * c) for c, v in enumerate(vals))

    written = {}

    async def tb(ctx):
        ctx.set(dut.word, encode(ins))  # a cycle before start, as the compute engine sets it
        await ctx.tick()
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for _ in range(4000):
            ra = ctx.get(dut.va_addr) if ctx.get(dut.va_en) else None
            rb = ctx.get(dut.vb_addr) if ctx.get(dut.vb_en) else None
            rc = ctx.get(dut.acc_addr) if ctx.get(dut.acc_en) else None
            re = ctx.get(dut.exp_addr) if ctx.get(dut.exp_en) else None
            if ctx.get(dut.out_en):
                v = ctx.get(dut.out_data)
                written[ctx.get(dut.out_addr)] = [((v >> (32 * c)) & mask) - ((v >> (32 * c) & mask) >> 31 << 32)
                                                  for c in range(C)]
            busy = ctx.get(dut.busy)
            await ctx.tick()
            if ra is not None:
                ctx.set(dut.va_rdata, pack(vbuf.get(ra, [0] * C)))
            if rb is not None:
                ctx.set(dut.vb_rdata, pack(vbuf.get(rb, [0] * C)))
            if rc is not None:
                ctx.set(dut.acc_rdata, pack((acc or {}).get(rc, [0] * C)))
            if re is not None:
                ctx.set(dut.exp_rdata, (exps or {}).get(re, 0) & 0xFF)
            if not busy:
                return
        raise AssertionError("the sequencer stayed busy")

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return written


@pytest.mark.parametrize("lanes,nonlinear", [(2, 1), (0, 0)])
def test_vector_sequencer_line_ops(lanes, nonlinear):
    """The line-op sequencer (serializers, vector and activation units, gather) on ADD, MUL, SILU, GELU and
    ARGMAX rows, bit-exact with numerics (its one-unit-at-a-time output path included)."""
    from systolica.isa import make

    cfg = AccelConfig(rows=4, cols=4, line_lanes=lanes, nonlinear_lanes=nonlinear)
    C, rows, lines = cfg.cols, 2, 3
    rng = np.random.default_rng(7)
    a = rand_i32(rng, (rows, lines * C), True)
    a[0, :C] = rand_i32(rng, (1, C), False)[0]
    b = rand_i32(rng, (rows, lines * C), False)
    vbuf = {}
    for r in range(rows):
        for ln in range(lines):
            vbuf[16 + r * lines + ln] = list(a[r, ln * C:(ln + 1) * C])
            vbuf[32 + r * lines + ln] = list(b[r, ln * C:(ln + 1) * C])
    xs = np.clip(a, -(1 << 22), 1 << 22)  # SILU / GELU inputs: saturating and in the tables' range
    for r in range(rows):
        for ln in range(lines):
            vbuf[48 + r * lines + ln] = list(xs[r, ln * C:(ln + 1) * C])
    cases = [(make("ADD", dst=0, a=16, b=32, rows=rows, lines=lines, bcast=0), numerics.add(a, b)),
             (make("MUL", dst=0, a=16, b=32, rows=rows, lines=lines, bcast=0, shift=13), numerics.mul(a, b, 13)),
             (make("SILU", dst=0, src=48, rows=rows, lines=lines), numerics.silu(xs)),
             (make("GELU", dst=0, src=48, rows=rows, lines=lines), numerics.gelu(xs))]
    for ins, want in cases:
        got = _seq_run(cfg, ins, vbuf)
        for r in range(rows):
            for ln in range(lines):
                assert got[r * lines + ln] == list(want[r, ln * C:(ln + 1) * C]), (ins.op, r, ln)
    n = lines * C - 1
    got = _seq_run(cfg, make("ARGMAX", dst=0, src=16, rows=rows, n=n), vbuf)
    assert [got[r][0] for r in range(rows)] == list(numerics.argmax(a[:, :n]))
    # REQUANT: a from the accumulator, mult one row (of b), the row's exponent in lane 0 of a scratchpad line
    accm = {64 + r * lines + ln: list(a[r, ln * C:(ln + 1) * C]) for r in range(rows) for ln in range(lines)}
    ex = [-7, 12]
    got = _seq_run(cfg, make("REQUANT", dst=0, src=64, mult=32, exps=5, rows=rows, lines=lines, shift=20), vbuf,
                   accm, {5 + r: ex[r] for r in range(rows)})
    want = numerics.requant(a, b[0], np.array(ex), 20)
    for r in range(rows):
        for ln in range(lines):
            assert got[r * lines + ln] == list(want[r, ln * C:(ln + 1) * C]), ("REQUANT", r, ln)
    # ROPE: 2 heads of hd = 2 lines per row, the table's rows at 96 (hd lines each)
    hd, heads = 2, 2
    x = a[:, :heads * hd * C] if lines * C >= heads * hd * C else np.tile(a, (1, 2))[:, :heads * hd * C]
    tab = numerics.rope_table([5, 900], hd * C, 10000.0).astype(np.int64)
    vb2 = dict(vbuf)
    for r in range(rows):
        for ln in range(heads * hd):
            vb2[128 + r * heads * hd + ln] = list(x[r, ln * C:(ln + 1) * C])
        for ln in range(hd):
            vb2[96 + r * hd + ln] = list(tab[r, ln * C:(ln + 1) * C])
    got = _seq_run(cfg, make("ROPE", dst=0, src=128, table=96, rows=rows, heads=heads, hd=hd), vb2)
    want = numerics.rope(x, tab)
    for r in range(rows):
        for ln in range(heads * hd):
            assert got[r * heads * hd + ln] == list(want[r, ln * C:(ln + 1) * C]), ("ROPE", r, ln)


def _sat_rsr(v: int, s: int) -> int:
    """numerics' sat32(rshift_round(v, s)) of a 64-bit v (left shifts for s <= 0, 0 from s = 64)."""
    r = v << -s if s <= 0 else 0 if s >= 64 else (v >> s) + ((v >> (s - 1)) & 1)
    return max(-2**31, min(2**31 - 1, r))


def test_mul_shift_edges_bit_exact():
    """MUL / REQUANT's shifter is a 34-bit window of x with the fit decided from bitlen(x): the edges where that
    flag decides (products just fitting or just past int32 after shifts of -40..70, 0 and -1) are exact."""
    C = 4
    dut = VectorUnit(AccelConfig(rows=4, cols=C))
    rng = random.Random(7)
    ea = [0, 1, -1, 2**31 - 1, -2**31, 2**15, -(2**15) - 1, 3]
    eb = [0, 1, -1, 2**16, -(2**16), 2**31 - 1, -2**31]
    shifts = [-40, -33, -32, -31, -30, -2, -1, 0, 1, 2, 30, 31, 32, 33, 34, 62, 63, 64, 70]
    triples = [(a, b, s) for s in shifts for a in ea for b in eb]
    for _ in range(400):
        ba, bb = rng.randint(0, 31), rng.randint(0, 31)
        triples.append((rng.randint(-2**ba, 2**ba - 1), rng.randint(-2**bb, 2**bb - 1), rng.randint(-40, 70)))
    beats, want = [], []
    for s in sorted({t[2] for t in triples}):  # one shift a beat: group the triples by shift
        ts = [t for t in triples if t[2] == s]
        for j in range(0, len(ts), C):
            grp = (ts[j:j + C] + [(0, 0, s)] * C)[:C]
            op = VecOp.MUL if s >= 0 else VecOp.REQUANT
            beats.append({"op": int(op), "a": [a for a, _, _ in grp], "b": [b for _, b, _ in grp], "shift": s,
                          "first": 1, "last": 1, "n": C})
            want.append([_sat_rsr(a * b, s) for a, b, _ in grp])
    got = []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(1), 0.2),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(2), 0.2, out=got)])
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert [g.data[c] for c in range(C)] == w, f"beat {k}: shift {beats[k]['shift']}, a {beats[k]['a']}, b {beats[k]['b']}"
