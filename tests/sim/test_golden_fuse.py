"""Fused runs of repeated blocks (sim/golden_fuse.py) == the per-instruction path, bit for bit.

Programs made of a random block repeated with random address steps: some steps make the blocks
independent (fused), some make a block read what an earlier one wrote, or reuse lines, or make
STOREs meet LOADs (which must not fuse, or must fuse into the same result).  Plus the
decode-style double-buffered GEMV of the RTL tests and a block with a real MLP tile's shape.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_golden_plan import DATA_HI, DATA_LO, WIN_SIZE, _pair, _same

from systolica.config import preset
from systolica.faults import Fault
from systolica.isa import Instr, encode, make
from systolica.sim.accel_programs import _Gen, weight_stream_program
from systolica.sim.golden_fuse import _ADDR

_OPS = ("LOAD", "LOAD", "GEMM", "REQUANT", "ADD", "MUL", "SILU", "STORE")


def _fused(sim) -> int:
    plans = [p for p in sim._planner.plans.values() if p is not None]
    return sum(len(p.fused) for p in plans)


def _block_program(cfg, rng) -> list[int]:
    g = _Gen(cfg, rng, DATA_LO, DATA_HI, WIN_SIZE)
    block = []
    for _ in range(int(rng.integers(1, 6))):
        op = str(rng.choice(_OPS))
        if op in ("LOAD", "STORE"):
            block.append(make(op, **g.dma(op)))
        elif op == "GEMM":
            f = g.gemm()
            f["acc"] = int(rng.random() < 0.2)
            block.append(make("GEMM", **f))
        else:
            block.append(make(op, **g.vector(op)))
    reps = int(rng.integers(2, 6))
    steps = []
    for ins in block:
        st = {}
        for f in _ADDR[ins.op]:
            choice = rng.random()
            if choice < 0.35:
                st[f] = 0  # the same lines every block
            elif f == "dram":
                lb = cfg.cols * (1 if ins.buf == 0 else 4)
                st[f] = lb * int(rng.integers(1, 40))
            else:
                st[f] = int(rng.integers(1, 24))
        steps.append(st)
    words = []
    for j in range(reps):
        for ins, st in zip(block, steps, strict=True):
            f = dict(ins.fields)
            for name, d in st.items():
                f[name] += j * d
            if f.get("dram", 0) + 4096 > DATA_HI + 0x4000 or any(f[x] >= 1 << 15 for x in st):
                f = dict(ins.fields)  # keep the block inside the window and its buffers: no step
            words.append(encode(Instr(ins.op, f)))
    return words + [encode(make("FINISH"))]


@pytest.mark.parametrize("cfg_name", ["tiny", "default"])
def test_repeated_random_blocks(cfg_name):
    cfg = preset(cfg_name)
    rng = np.random.default_rng(11 if cfg_name == "tiny" else 12)
    fused = finished = 0
    for i in range(150):
        words = _block_program(cfg, rng)
        ref, fast = _pair(cfg, rng)
        status = _same(ref, fast, words, f"program {i}")
        finished += status == Fault.NONE
        fused += _fused(fast) > 0
        # again on the same simulators: the cached plan, over the state the first run left
        _same(ref, fast, words, f"program {i}, second run")
    assert finished >= 50 and fused >= 20, (finished, fused)


@pytest.mark.parametrize("n_tiles", [2, 3, 7])
def test_weight_stream_gemv(n_tiles):
    """Double-buffered weight tiles: each GEMM reads the tile its LOAD wrote in the block before."""
    cfg = preset("tiny")
    rng = np.random.default_rng(n_tiles)
    prog = weight_stream_program(cfg, k_lines=4, n_tiles=n_tiles, n_lines=2, w_dram=DATA_LO + 0x400,
                                 a_dram=DATA_LO, out_dram=DATA_HI)
    words = [encode(i) for i in prog]
    ref, fast = _pair(cfg, rng)
    assert _same(ref, fast, words, f"{n_tiles} tiles") == Fault.NONE


def _mlp_tile_program(cfg, tiles: int, rows: int = 2) -> list[int]:
    """The shape of a compiled MLP tile: multipliers and weights of two projections, GEMMs, REQUANT, ADD of the
    int8 + residual rows, SILU of one, MUL into an output that moves with the tile; a STORE of it."""
    c = cfg.cols
    k, n = 2, 1
    w_lines = n * c * k
    words = []
    for t in range(tiles):
        wa, wb = DATA_LO + 0x800 + t * 2 * w_lines * c, DATA_LO + 0x800 + (t * 2 + 1) * w_lines * c
        ma, mb = DATA_LO + t * 2 * n * c * 4, DATA_LO + (t * 2 + 1) * n * c * 4
        words += [make("LOAD", buf=2, sram=4, dram=ma, rows=1, lines=n, stride=0),
                  make("LOAD", buf=0, sram=64, dram=wa, rows=1, lines=w_lines, stride=0),
                  make("LOAD", buf=2, sram=6, dram=mb, rows=1, lines=n, stride=0),
                  make("LOAD", buf=0, sram=128, dram=wb, rows=1, lines=w_lines, stride=0),
                  make("GEMM", dst=0, a=0, w=64, m=rows, k=k, n=n, acc=0),
                  make("REQUANT", dst=10, src=0, mult=4, exps=32, rows=rows, lines=n, shift=12),
                  make("ADD", dst=10, a=10, b=10 + n, rows=1, lines=n, bcast=0),
                  make("GEMM", dst=0, a=0, w=128, m=rows, k=k, n=n, acc=0),
                  make("REQUANT", dst=14, src=0, mult=6, exps=32, rows=rows, lines=n, shift=12),
                  make("ADD", dst=14, a=14, b=14 + n, rows=1, lines=n, bcast=0),
                  make("SILU", dst=10, src=10, rows=1, lines=n),
                  make("MUL", dst=30 + t * n, a=10, b=14, rows=1, lines=n, bcast=0, shift=16),
                  make("STORE", buf=2, sram=30 + t * n, dram=DATA_HI + t * n * c * 4, rows=1, lines=n, stride=0)]
    return [encode(i) for i in words] + [encode(make("FINISH"))]


@pytest.mark.parametrize("tiles", [2, 5])
@pytest.mark.parametrize("exps", ["in_range", "random"])
def test_mlp_tile_blocks_fuse_and_match(tiles, exps):
    cfg = preset("tiny")
    rng = np.random.default_rng(tiles * 3 + len(exps))
    ref, fast = _pair(cfg, rng)
    if exps == "in_range":  # REQUANT shifts in 1..63: the batched formula, else numerics per block
        a = rng.integers(-127, 128, (4, cfg.cols), dtype=np.int8)
        for sim in (ref, fast):
            sim.spad[32:34, 0] = [-10, -3]
            sim.spad[0:4] = a
    words = _mlp_tile_program(cfg, tiles)
    assert _same(ref, fast, words, f"{tiles} tiles") == Fault.NONE
    assert _fused(fast) > 0  # the tiles did run as one fused closure


def test_mlp_tile_blocks_unfused_closures_match():
    """The same program with fusion off (SYSTOLICA_GOLDEN_FUSE=0): the per-instruction closures alone."""
    cfg = preset("tiny")
    rng = np.random.default_rng(5)
    ref, fast = _pair(cfg, rng)
    fast._planner.fuse = False
    assert _same(ref, fast, _mlp_tile_program(cfg, 4), "unfused") == Fault.NONE
    assert _fused(fast) == 0


def test_a_patched_word_inside_a_fused_run_fuses_again_only_its_run():
    """Two repeated-block programs back to back, then the same with one LOAD of the first fused run moved (as a
    decode step's patch table moves KV stores): fast == reference on both; the runs the patched word is not in
    keep their closures (the planner looks for runs again only where a patched word is)."""
    cfg = preset("tiny")
    rng = np.random.default_rng(23)
    checked = kept = 0
    for i in range(120):
        words = _block_program(cfg, rng)[:-1] + _block_program(cfg, rng)
        ref, fast = _pair(cfg, rng)
        if _same(ref, fast, words, f"program {i}") != Fault.NONE:
            continue
        plan = fast._planner.plans[tuple(words)]
        if plan is None or len(plan.runs) < 2:
            continue
        start, end, _ = plan.runs[0]
        loads = [pc for pc in plan.order[start:end] if _decode_op(words[pc]) == "LOAD"]
        if not loads:
            continue
        pc = loads[0]
        ins = _decode(words[pc])
        f = dict(ins.fields)
        f["dram"] = f["dram"] + cfg.cols * (1 if ins.buf == 0 else 4)
        patched = list(words)
        patched[pc] = encode(Instr(ins.op, f, **ins.flags()))
        _same(ref, fast, patched, f"program {i}, patched inside a fused run")
        new = fast._planner.plans[tuple(patched)]
        assert new is not None and pc not in new.fused
        checked += 1
        kept += any(fn is old for _, _, fn in new.runs for _, _, old in plan.runs[1:])
    assert checked >= 5 and kept >= 1, (checked, kept)


def _decode(w: int) -> Instr:
    from systolica.isa import decode

    return decode(w)


def _decode_op(w: int) -> str | None:
    try:
        return _decode(w).op
    except Exception:  # noqa: BLE001
        return None


def test_repeated_blocks_with_empty_rows():
    """Blocks whose row counts are 0 (the rows a batched decode step or a short prefill run leaves empty: the
    patch table sets their ``rows`` or ``m`` to 0), fused or not: fast == reference."""
    cfg = preset("tiny")
    rng = np.random.default_rng(31)
    for i in range(80):
        words = []
        for w in _block_program(cfg, rng)[:-1]:
            ins = _decode(w)
            f = dict(ins.fields)
            for name in ("rows", "m"):
                if name in f and rng.random() < 0.7:
                    f[name] = 0
            words.append(encode(Instr(ins.op, f, **ins.flags())))
        words.append(encode(make("FINISH")))
        ref, fast = _pair(cfg, rng)
        _same(ref, fast, words, f"program {i}")
