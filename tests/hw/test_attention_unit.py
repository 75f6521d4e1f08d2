"""AttentionUnit under the Amaranth simulator: chains of KV tiles (causal and not, GQA rows as
consecutive jobs) with idle cycles and back-pressure, bit-exact with numerics.attn_tile."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest
from hw_streams_tb import collect, run, send

from systolica import numerics
from systolica.config import AccelConfig
from systolica.hw.attention_unit import AttentionUnit, AttnBeat

# components built only for their layouts, or whose constructor rejected its arguments, are never elaborated
pytestmark = [pytest.mark.amaranth, pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")]


def job_beats(C, q, qexp, k, kexp, v, vexp, m, lsum, o, offset, causal):
    """The input beats of one job over one tile (see hw/attention_unit.py): the rows of ``q`` (``n x hd``,
    or one row ``hd``) with their ``qexp``, old ``m``, ``lsum`` and ``o``, through one pass of K and V."""
    q, o = np.atleast_2d(q), np.atleast_2d(o)
    qexp, m, lsum = np.atleast_1d(qexp), np.atleast_1d(m), np.atleast_1d(lsum)
    n, hdl = q.shape[0], q.shape[1] // C
    t = k.shape[0]
    zero = {"exp": 0, "eot": 0, "last": 0, "offset": 0, "causal": 0}

    def line(kind, vals, **kw):
        return {**zero, "kind": int(kind), "data": [int(x) for x in vals], **kw}

    beats = [line(AttnBeat.HDR, [int(m[r]), int(lsum[r])] + [0] * (C - 2), offset=int(offset), causal=int(causal),
                  last=int(r == n - 1)) for r in range(n)]
    beats += [line(AttnBeat.Q, q[r, i * C:(i + 1) * C], exp=int(qexp[r]), eot=int(i == hdl - 1),
                   last=int(r == n - 1 and i == hdl - 1)) for r in range(n) for i in range(hdl)]
    for kind, x, xe in ((AttnBeat.K, k, kexp), (AttnBeat.V, v, vexp)):
        beats += [line(kind, x[j, i * C:(i + 1) * C], exp=int(xe[j]), eot=int(i == hdl - 1),
                       last=int(j == t - 1 and i == hdl - 1)) for j in range(t) for i in range(hdl)]
    beats += [line(AttnBeat.STATE_O, o[r, i * C:(i + 1) * C], last=int(i == hdl - 1))
              for r in range(n) for i in range(hdl)]
    return beats


def attention_cases(C: int, seed: int, hd: int, nq: int = 2, tiles=(5, 8, 3), causal: bool = True, R: int = 1):
    """Jobs for nq query rows (a GQA group) over a chain of tiles, and the expected state lines; the
    rows go through each tile in jobs of up to ``R`` rows (the unit's ``attn_rows``)."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-127, 128, size=(nq, hd), dtype=np.int8)
    qexp = rng.integers(-9, -5, size=nq)
    state = numerics.attn_empty(nq, hd)
    beats, want = [], []
    pos0 = 0
    qpos = sum(tiles) - 3  # the query sits before the end: the last tile is partly masked
    for t in tiles:
        k = rng.integers(-127, 128, size=(t, hd), dtype=np.int8)
        v = rng.integers(-127, 128, size=(t, hd), dtype=np.int8)
        kexp = rng.integers(-9, -4, size=t)
        vexp = rng.integers(-10, 5, size=t)  # some above 3: clamped by numerics and the unit
        # and a few far below: d_j's shift reaches the exp2 pipeline's cap of 40 (d_j = 0) and the field's of 42
        vexp = np.where(rng.random(t) < 0.1, rng.integers(-80, -25, size=t), vexp)
        offset = qpos - pos0
        new = numerics.attn_tile(q, qexp, k, kexp, v, vexp, state, offset, causal)
        for r0 in range(0, nq, R):  # GQA: the rows of the group share the tile, R of them a job
            rs = slice(r0, min(nq, r0 + R))
            beats += job_beats(C, q[rs], qexp[rs], k, kexp, v, vexp, state.m[rs], state.l[rs],
                               state.o[rs], offset, causal)
            for r in range(r0, rs.stop):
                want.append([int(new.m[r]), int(new.l[r])] + [0] * (C - 2))
                want += [[int(x) for x in new.o[r, i * C:(i + 1) * C]] for i in range(hd // C)]
        state = new
        pos0 += t
    # ATTN_OUT: o / l of every row, plus one row that never saw a token (l = 0 gives 0)
    out = numerics.attn_finish(state)
    zero = {"exp": 0, "eot": 0, "last": 0, "offset": 0, "causal": 0}
    rows = [(int(state.l[r]), state.o[r], out[r]) for r in range(nq)]
    rows.append((0, rng.integers(-1000, 1000, size=hd), np.zeros(hd, np.int64)))
    for lsum, o, fx in rows:
        beats.append({**zero, "kind": int(AttnBeat.FIN), "data": [0, lsum] + [0] * (C - 2), "last": 1})
        beats += [{**zero, "kind": int(AttnBeat.STATE_O), "data": [int(x) for x in o[i * C:(i + 1) * C]],
                   "last": int(i == hd // C - 1)} for i in range(hd // C)]
        want += [[int(x) for x in fx[i * C:(i + 1) * C]] for i in range(hd // C)]
    return beats, want


@pytest.mark.parametrize("cols,lanes,hd,causal,tiles,R,nq,pv_dsp,shared", [
    (4, 0, 8, True, (5, 8, 3), 1, 2, 0, 0), (4, 0, 12, False, (5, 8, 3), 1, 2, 0, 0), (8, 0, 16, True, (5, 8, 3), 1, 2, 0, 0),
    (4, 0, 4, False, (1, 2, 1), 1, 2, 0, 0),
    # state lines (O pass, ATTN_OUT) through a datapath of fewer lanes than the line: cols / lanes cycles each
    (4, 2, 8, True, (5, 8, 3), 1, 2, 0, 0), (8, 2, 16, False, (3, 4, 2), 1, 2, 0, 0), (8, 4, 16, True, (5, 8, 3), 1, 2, 0, 0),
    # rows of a GQA group through each tile together: whole jobs of R rows, and a last job of fewer
    (4, 0, 8, True, (5, 8, 3), 3, 3, 0, 0), (4, 0, 8, True, (5, 8, 3), 2, 3, 0, 0), (8, 4, 16, False, (3, 4, 2), 4, 5, 0, 0),
    (4, 2, 8, True, (1, 2, 1), 2, 2, 0, 0),
    # p * v on DSP multipliers (dsp_muls): the low 24 bits of p on the multiplier, the top 5 in logic
    (4, 0, 8, True, (5, 8, 3), 1, 2, 1, 0), (8, 4, 16, False, (3, 4, 2), 4, 5, 1, 0),
    # rows sharing one set of p * v lanes (attn_pv_shared): V at n cycles a line; whole jobs, a last job of fewer,
    # one-line heads (the PV forward between rows of one address), p * v on DSPs, and lanes narrower than the line
    (4, 0, 8, True, (5, 8, 3), 3, 3, 0, 1), (4, 0, 8, True, (5, 8, 3), 2, 3, 0, 1),
    (4, 0, 4, False, (1, 2, 1), 3, 5, 0, 1), (8, 4, 16, False, (3, 4, 2), 4, 5, 1, 1),
    (4, 2, 8, True, (1, 2, 1), 2, 2, 0, 1),
    # shared on S = `shared` sets of lanes (attn_pv_sets), row r on set r % S: the last slot short of a set (3 rows
    # on 2 sets), a last job of fewer rows, one-line heads, S = 3 of 4 rows on DSPs, and S = R (one slot)
    (4, 0, 8, True, (5, 8, 3), 3, 3, 0, 2), (4, 0, 8, True, (5, 8, 3), 3, 5, 0, 2),
    (4, 0, 4, False, (1, 2, 1), 4, 5, 0, 2), (8, 4, 16, False, (3, 4, 2), 4, 5, 1, 3),
    (4, 0, 8, True, (1, 2, 1), 3, 3, 0, 3)])
def test_attention_bit_exact(cols, lanes, hd, causal, tiles, R, nq, pv_dsp, shared):
    cfg = AccelConfig(rows=4, cols=cols, line_lanes=lanes, attn_rows=R, dsp_muls=pv_dsp, attn_pv_shared=int(shared > 0),
                      attn_pv_sets=max(shared, 1))
    dut = AttentionUnit(cfg, max_tokens=16, max_lines=8)
    beats, want = attention_cases(cols, seed=cols + hd + R, hd=hd, nq=nq, causal=causal, tiles=tiles, R=R)
    got = []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(1), 0.3),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(2), 0.3, out=got)])
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert [g.data[c] for c in range(cols)] == w, f"output line {k}"


@pytest.mark.parametrize("R,lanes", [(3, 0), (2, 2)])
def test_a_jobs_rows_leave_back_to_back(R, lanes):
    """The rows' ends are one pipeline and their headers go through the lanes with the output lines
    (hw/attn_row_end.py): with no idle cycles, a job's rows leave the unit as one run of lines, a header and its
    row's lines a cycle each (a state line of fewer lanes than the line: cols / lanes cycles).  Before, each row's
    header waited for the row before to leave the lanes and its lines came ~10 cycles after it."""
    C, hd = 4, 8
    cfg = AccelConfig(rows=4, cols=C, line_lanes=lanes, attn_rows=R, attn_pv_shared=1, attn_pv_sets=R)
    dut = AttentionUnit(cfg, max_tokens=16, max_lines=8)
    beats, want = attention_cases(C, seed=5, hd=hd, nq=R, tiles=(8,), R=R)
    n = R * (1 + hd // C)  # the job's output lines (then ATTN_OUT's)
    got, cycles = [], []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(1), 0.0),
              lambda ctx: collect(ctx, dut.o_stream, len(want), random.Random(2), 0.0, out=got, cycles=cycles)])
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert [g.data[c] for c in range(C)] == w, f"output line {k}"
    assert [int(g.hdr) for g in got[:n]] == ([1] + [0] * (hd // C)) * R
    per_line = C // lanes if lanes else 1  # cycles a state line takes through the lanes
    span = cycles[n - 1] - cycles[0] + 1
    assert span <= R * (1 + (hd // C) * per_line), f"the job's {n} lines took {span} cycles: {cycles[:n]}"


def test_fully_masked_tile_keeps_state():
    cfg = AccelConfig(rows=4, cols=4)
    dut = AttentionUnit(cfg, max_tokens=8, max_lines=4)
    rng = np.random.default_rng(3)
    q = rng.integers(-127, 128, size=8, dtype=np.int8)
    k = rng.integers(-127, 128, size=(4, 8), dtype=np.int8)
    o = rng.integers(-1000, 1000, size=8)
    beats = job_beats(4, q, -7, k, [-7] * 4, k, [-7] * 4, 12345, 1 << 20, o, offset=-1, causal=True)
    got = []
    run(dut, [lambda ctx: send(ctx, dut.i_stream, beats, random.Random(1), 0.0),
              lambda ctx: collect(ctx, dut.o_stream, 3, random.Random(2), 0.0, out=got)])
    assert [got[0].data[0], got[0].data[1]] == [12345, 1 << 20]
    assert [got[1].data[c] for c in range(4)] + [got[2].data[c] for c in range(4)] == [int(x) for x in o]


def test_wrong_beat_kind_sets_error():
    cfg = AccelConfig(rows=4, cols=4)
    dut = AttentionUnit(cfg, max_tokens=8, max_lines=4)
    flags = []

    async def bench(ctx):
        assert ctx.get(dut.error) == 0
        ctx.set(dut.i_stream.payload, {"kind": int(AttnBeat.K), "data": [0] * 4, "exp": 0, "eot": 1, "last": 1,
                                       "offset": 0, "causal": 0})
        ctx.set(dut.i_stream.valid, 1)
        await ctx.tick().until(dut.i_stream.ready)  # a K line while the unit waits for a header
        ctx.set(dut.i_stream.valid, 0)
        await ctx.tick()
        flags.append(ctx.get(dut.error))

    run(dut, [bench])
    assert flags == [1]


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_bad_parameters():
    with pytest.raises(ValueError, match="max_tokens=0"):
        AttentionUnit(AccelConfig(), max_tokens=0)
    with pytest.raises(ValueError, match="max_lines=64"):
        AttentionUnit(AccelConfig(), max_lines=64)
    gc.collect()  # the half-built components go now, while this test's warning filter holds
