"""The golden simulator's fast path (execution plans) == its per-instruction path, bit for bit.

Random programs from the ISA generator (the ones the RTL is compared with), with and without
injected faults, and with token flags thinned out so that the three engines overlap; each runs
twice on one simulator (the plan cache), with the host writing DRAM between runs.  Everything is
compared: status, PC, message, counters, tokens left, all of DRAM and the three buffers.
"""

from __future__ import annotations

import numpy as np
import pytest

from systolica.config import preset
from systolica.faults import Fault
from systolica.isa import Instr, decode, encode, make
from systolica.sim.accel_programs import FAULT_KINDS, random_program
from systolica.sim.golden import GoldenSim
from systolica.sim.golden_plan import static_order

MEM, WIN_BASE, WIN_SIZE = 1 << 18, 0x1_0000, 0x2_0000
DATA_LO, DATA_HI = 0x1000, 0x5000
FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def _pair(cfg, rng):
    """Two simulators, reference and fast, over equal random DRAM and equal random buffers."""
    dram = rng.integers(0, 256, MEM, dtype=np.uint8)
    ref = GoldenSim(cfg, dram.copy(), window_base=WIN_BASE, window_size=WIN_SIZE, fast=False)
    fast = GoldenSim(cfg, dram.copy(), window_base=WIN_BASE, window_size=WIN_SIZE, fast=True)
    for name in ("spad", "acc", "vbuf"):
        a = getattr(ref, name)
        a[...] = rng.integers(np.iinfo(a.dtype).min, np.iinfo(a.dtype).max, a.shape, dtype=a.dtype, endpoint=True)
        getattr(fast, name)[...] = a
    return ref, fast


def _same(ref: GoldenSim, fast: GoldenSim, words: list[int], what: str) -> Fault:
    a = ref.run(words, raise_on_fault=False)
    b = fast.run(words, raise_on_fault=False)
    assert (b.status, b.pc, b.message) == (a.status, a.pc, a.message), what
    assert b.counters.to_dict() == a.counters.to_dict(), what
    assert b.tokens_left == a.tokens_left, what
    for name in ("dram", "spad", "acc", "vbuf"):
        x, y = getattr(ref, name), getattr(fast, name)
        assert np.array_equal(x, y), f"{what}: {name} differs at {np.count_nonzero(x != y)} elements"
    return a.status


_SYNC = {(0, 1): ("push_next", "pop_prev"), (1, 0): ("push_prev", "pop_next"), (1, 2): ("push_next", "pop_prev"),
         (2, 1): ("push_prev", "pop_next")}  # (engine, next engine) -> the serializing push and its pop


def _thin_flags(words: list[int], rng, p: float) -> list[int]:
    """Drop each serializing push/pop pair with probability ``p``: the engines then run ahead of each other."""
    ins = []
    for w in words:
        try:
            ins.append(decode(w))
        except Exception:  # noqa: BLE001 - an injected illegal word stays as it is
            ins.append(w)
    for i in range(len(ins) - 1):
        a, b = ins[i], ins[i + 1]
        if not (isinstance(a, Instr) and isinstance(b, Instr)) or rng.random() >= p:
            continue
        try:
            pair = _SYNC.get((int(a.engine), int(b.engine)))
        except ValueError:  # NOP.engine=3 (an injected illegal field)
            continue
        if pair and getattr(a, pair[0]) and getattr(b, pair[1]):
            ins[i] = Instr(a.op, dict(a.fields), **(a.flags() | {pair[0]: False}))
            ins[i + 1] = b = Instr(b.op, dict(b.fields), **(b.flags() | {pair[1]: False}))
    return [encode(x) if isinstance(x, Instr) else x for x in ins]


def _patch_one(words: list[int], rng) -> list[int]:
    """A second program that differs in one LOAD's DRAM address, as a decode step's patch table does."""
    out = list(words)
    loads = [i for i, w in enumerate(words) if _op(w) == "LOAD"]
    if loads:
        i = int(rng.choice(loads))
        ins = decode(words[i])
        lb = preset("tiny").cols * (1 if ins.buf == 0 else 4)
        f = dict(ins.fields)
        f["dram"] = max(DATA_LO, f["dram"] - lb * int(rng.integers(0, 4)))
        out[i] = encode(Instr(ins.op, f, **ins.flags()))
    return out


def _op(w: int) -> str | None:
    try:
        return decode(w).op
    except Exception:  # noqa: BLE001
        return None


@pytest.mark.parametrize("cfg_name", ["tiny", "default"])
@pytest.mark.parametrize("thin", [0.0, 0.3])
def test_random_programs_fast_equals_reference(cfg_name, thin):
    cfg = preset(cfg_name)
    rng = np.random.default_rng(7 + int(thin * 10) + len(cfg_name))
    finished = 0
    for i in range(60):
        kind = None if rng.random() < 0.5 else str(rng.choice(FAULT_KINDS))
        prog = random_program(cfg, rng, n_ops=int(rng.integers(3, 30)), data_lo=DATA_LO, data_hi=DATA_HI,
                              win_size=WIN_SIZE, fault=kind, dump_at=DATA_HI)
        words = _thin_flags(prog.words, rng, thin) if thin else prog.words
        ref, fast = _pair(cfg, rng)
        status = _same(ref, fast, words, f"program {i} ({kind})")
        finished += status == Fault.NONE
        # the host writes DRAM between runs; the same program again (a cached plan), then a patched one
        for sim in (ref, fast):
            sim.dram[WIN_BASE + DATA_LO:WIN_BASE + DATA_LO + 256] = np.arange(256, dtype=np.uint8)
        _same(ref, fast, words, f"program {i} ({kind}), second run")
        _same(ref, fast, _patch_one(words, rng), f"program {i} ({kind}), patched")
    assert finished >= 10  # enough programs ran on the fast path


def test_max_instructions_and_raise_match():
    cfg = preset("tiny")
    rng = np.random.default_rng(3)
    prog = random_program(cfg, rng, n_ops=20, data_lo=DATA_LO, data_hi=DATA_HI, win_size=WIN_SIZE, dump_at=DATA_HI)
    ref, fast = _pair(cfg, rng)
    n = ref.run(prog.words).counters.instructions
    fast.run(prog.words)
    for limit in (n - 3, n, n + 1):
        assert _same(ref, fast, prog.words, f"limit {limit}") in (Fault.NONE, Fault.TIMEOUT)
        a = ref.run(prog.words, max_instructions=limit, raise_on_fault=False)
        b = fast.run(prog.words, max_instructions=limit, raise_on_fault=False)
        assert (a.status, a.pc, a.message, a.counters.to_dict()) == (b.status, b.pc, b.message, b.counters.to_dict())
        assert all(np.array_equal(getattr(ref, x), getattr(fast, x)) for x in ("dram", "spad", "acc", "vbuf"))


def test_static_order_is_the_reference_order():
    """Concurrent engines: the plan executes in the order the reference scheduler does (its DRAM shows it)."""
    cfg = preset("tiny")
    c = cfg.cols
    words = [encode(make("LOAD", buf=0, sram=0, dram=DATA_LO, rows=1, lines=4, stride=0, push_next=True)),
             encode(make("LOAD", buf=0, sram=4, dram=DATA_LO + 4 * c, rows=1, lines=4, stride=0)),
             encode(make("GEMM", dst=0, a=0, w=4, m=1, k=4, n=1, acc=0, pop_prev=True, push_next=True)),
             encode(make("STORE", buf=1, sram=0, dram=DATA_HI, rows=1, lines=1, stride=0, pop_prev=True)),
             encode(make("STORE", buf=0, sram=0, dram=DATA_HI + 64, rows=1, lines=8, stride=0)),
             encode(make("FINISH"))]
    rng = np.random.default_rng(0)
    ref, fast = _pair(cfg, rng)
    assert _same(ref, fast, words, "concurrent") == Fault.NONE
    sigs = [(decode(w).engine, (), (), decode(w).op == "FINISH") for w in words]
    order, fetched, finish_pc, tokens = static_order(sigs, cfg.cmd_depth, cfg.queue_depth)
    assert sorted(order) == list(range(len(words))) and fetched == len(words) and finish_pc == len(words) - 1
    assert static_order(sigs[:-1], cfg.cmd_depth, cfg.queue_depth) is None  # no FINISH: overrun, reference path


@pytest.mark.parametrize("t,offset,causal", [(0, 0, 1), (0, 0, 0), (2, -1, 1), (2, 0, 1), (3, 5, 0)])
def test_attn_continuation_on_random_state(t, offset, causal):
    """An ATTN tile that folds in nothing still rewrites its m/l lines (lanes 2.. zeroed), on any state."""
    cfg = preset("tiny")
    rng = np.random.default_rng(t * 7 + offset + causal)
    words = [encode(make("ATTN", q=64, qexp=100, kv=0, state=4, nq=2, hd=2, t=t, page_log2=2, offset=offset,
                         causal=causal, init=0)),
             encode(make("ATTN_OUT", dst=40, state=4, nq=2, hd=2)), encode(make("FINISH"))]
    ref, fast = _pair(cfg, rng)
    assert _same(ref, fast, words, f"t={t} offset={offset} causal={causal}") == Fault.NONE


@pytest.mark.parametrize("split", [0, 1])
@pytest.mark.parametrize("kind", ["random", "small", "extreme", "zero_row", "ties"])
def test_quant_fast_path_on_edge_rows(split, kind):
    """QUANT's fast path (per-row shifts as Python integers) == numerics on rows chosen to hit its edges."""
    cfg = preset("tiny")
    c = cfg.cols
    rng = np.random.default_rng(split * 10 + len(kind))
    ref, fast = _pair(cfg, rng)
    rows, lines = 3, 4
    x = {"random": lambda: rng.integers(-2**31, 2**31, (rows, lines * c)),
         "small": lambda: rng.integers(-200, 200, (rows, lines * c)),
         "extreme": lambda: rng.choice([-2**31, 2**31 - 1, -1, 0, 1, 2**30], (rows, lines * c)),
         "zero_row": lambda: np.vstack([rng.integers(-2**20, 2**20, (rows - 1, lines * c)),
                                        np.zeros((1, lines * c), np.int64)]),
         "ties": lambda: (rng.integers(-127, 128, (rows, lines * c)) << 12) + (1 << 11)}[kind]()
    for sim in (ref, fast):
        sim.vbuf[8:8 + rows * lines] = x.reshape(rows * lines, c).astype(np.int32)
    words = [encode(make("QUANT", dst=0, src=8, exps=100, rows=rows, lines=lines, split=split)),
             encode(make("QUANT", dst=40, src=8, exps=120, rows=1, lines=lines, split=split)),
             encode(make("FINISH"))]
    assert _same(ref, fast, words, f"QUANT {kind} split={split}") == Fault.NONE


@pytest.mark.parametrize("seed", range(12))
def test_attn_chains_with_realistic_exponents(seed):
    """ATTN tiles (init, then continuations) and ATTN_OUT with exponents a compiled model produces, so that
    the fast path's shifts are in range; V exponents all negative, all non-negative, or mixed (reference)."""
    cfg = preset("tiny")
    c = cfg.cols
    rng = np.random.default_rng(100 + seed)
    ref, fast = _pair(cfg, rng)
    nq, hd, page_log2 = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(0, 4))
    p = 1 << page_log2
    tile_lines = (2 * hd + 2) * p
    vlo, vhi = [(-8, -1), (0, 3), (-3, 3)][seed % 3]
    q_at, qexp_at, state, out = 200, 240, 4, 40
    words = []
    for j in range(int(rng.integers(1, 4))):
        kv = j % 2 * tile_lines
        kvals = rng.integers(-127, 128, (tile_lines, c)).astype(np.int8)
        kvals[(2 * hd) * p:(2 * hd + 1) * p, 0] = rng.integers(-12, -2, p)  # k exponents
        kvals[(2 * hd + 1) * p:, 0] = rng.integers(vlo, vhi + 1, p)  # v exponents
        for sim in (ref, fast):
            sim.spad[kv:kv + tile_lines] = kvals
        words.append(encode(make("ATTN", q=q_at, qexp=qexp_at, kv=kv, state=state, nq=nq, hd=hd,
                                 t=int(rng.integers(0, p + 1)), page_log2=page_log2,
                                 offset=int(rng.integers(-1, p + 3)), causal=int(rng.integers(0, 2)),
                                 init=int(j == 0))))
    qv = rng.integers(-127, 128, (nq * hd, c)).astype(np.int8)
    qe = np.zeros((nq, c), np.int8)
    qe[:, 0] = rng.integers(-12, -2, nq)
    for sim in (ref, fast):
        sim.spad[q_at:q_at + nq * hd] = qv
        sim.spad[qexp_at:qexp_at + nq] = qe
    words += [encode(make("ATTN_OUT", dst=out, state=state, nq=nq, hd=hd)), encode(make("FINISH"))]
    # each tile is its own run as well, so that the tiles' writes of the state are compared one by one
    for w in words[:-2]:
        assert _same(ref, fast, [w, words[-1]], f"seed {seed}: one tile") == Fault.NONE
    assert _same(ref, fast, words, f"seed {seed}: chain") == Fault.NONE
