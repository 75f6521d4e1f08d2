"""Execution plans: the golden simulator's fast path, bit-exact with the per-instruction path.

What a program does to the machine depends on its words alone, not on the data:
which engine runs which instruction when, how tokens move, which buffer lines and
DRAM bytes each instruction reads and writes.  So a program is decoded, checked
and *scheduled* once into a plan:

- the order in which the reference scheduler (:class:`systolica.sim.golden._Run`)
  executes the instructions, found by running that scheduler on the token flags
  alone (:func:`static_order`);
- per instruction, a closure over precomputed numpy views of its operands
  (:func:`compile_word`), cached per word, so a decode step whose patch table
  changed a few words re-plans only those words; instructions that change no
  state (a LOAD of zero rows, an ATTN over an empty tile after the first) are
  left out of the order;
- the counters the run will report, summed once.

Running a plan is then a loop over closures.  The closures compute exactly what
:mod:`systolica.sim.golden_ops` computes (they call the same
:mod:`systolica.numerics` functions, or the same integer formula with the
operands' ranges checked first, falling back to the numerics function outside
them).  A program that faults at dispatch, deadlocks or runs off its end is not
planned: the simulator runs it on the per-instruction path, which reports the
fault precisely.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from systolica import numerics as nx
from systolica.isa import Buf, Engine, Instr
from systolica.layout import attn_state_lines, dma_line_bytes
from systolica.sim.golden_ops import EXECUTE, _dma_plan, _dram_rows, _lines, _rows

if TYPE_CHECKING:  # pragma: no cover
    from systolica.sim.golden import Counters, GoldenSim

__all__ = ["Plan", "static_order", "compile_word", "word_counters"]

_I64 = np.int64
_LITTLE = sys.byteorder == "little"  # buffer int32 lines are little-endian in DRAM: views need a little-endian host
_FAULT = None  # the signature of a word that faults at dispatch

Op = Callable[[], None]


# ------------------------------------------------------------------ schedule
def static_order(sigs: Sequence[tuple | None], cmd_depth: int, queue_depth: int) -> tuple | None:
    """The reference scheduler's execution order, from each word's ``(engine, pops, pushes, is_finish)``.

    ``sigs[pc]`` is ``None`` for a word that faults at dispatch.  Returns ``(order, fetched, finish_pc,
    tokens)`` for a run that ends at a FINISH with every engine drained, or ``None`` for any run that
    faults (dispatch fault, overrun, deadlock): those take the per-instruction path.
    """
    n = len(sigs)
    cmd = ([], [], [])  # per engine: pcs dispatched and not yet executed (head at index heads[e])
    heads = [0, 0, 0]
    tok = [0, 0, 0, 0]
    order: list[int] = []
    fetch_pc, fetching, finish_pc = 0, True, -1
    while True:
        moved = False
        while fetching:  # fetch: dispatch in program order while the engine's queue has room
            if fetch_pc >= n or sigs[fetch_pc] is _FAULT:
                return None
            e = sigs[fetch_pc][0]
            if len(cmd[e]) - heads[e] >= cmd_depth:
                break
            cmd[e].append(fetch_pc)
            moved = True
            if sigs[fetch_pc][3]:
                fetching = False
            fetch_pc += 1
        for e in (Engine.LOAD, Engine.COMPUTE, Engine.STORE):
            q = cmd[e]
            while heads[e] < len(q):
                pc = q[heads[e]]
                _, pops, pushes, fin = sigs[pc]
                if any(tok[i] == 0 for i in pops) or any(tok[i] >= queue_depth for i in pushes):
                    break
                for i in pops:
                    tok[i] -= 1
                for i in pushes:
                    tok[i] += 1
                heads[e] += 1
                order.append(pc)
                if fin:
                    finish_pc = pc
                moved = True
        if moved:
            continue
        if all(heads[e] == len(cmd[e]) for e in range(3)):
            return order, fetch_pc, finish_pc, tuple(tok)
        return None  # deadlock


# ------------------------------------------------------------------ counters
def word_counters(sim: GoldenSim, ins: Instr) -> tuple[int, int, int, int]:
    """What executing ``ins`` adds to ``(dma_read_bytes, dma_write_bytes, macs, attn_macs)``."""
    cols = sim.cfg.cols
    if ins.op in ("LOAD", "STORE"):
        if not (ins.rows and ins.lines):
            return 0, 0, 0, 0
        b = ins.rows * ins.lines * dma_line_bytes(Buf(ins.buf), cols)
        return (b, 0, 0, 0) if ins.op == "LOAD" else (0, b, 0, 0)
    if ins.op == "GEMM":
        return 0, 0, (ins.m * ins.k * cols * ins.n * cols if ins.m and ins.n else 0), 0
    if ins.op == "ATTN":
        return 0, 0, 0, (2 * ins.nq * ins.t * ins.hd * cols if ins.nq and ins.hd else 0)
    return 0, 0, 0, 0


# ------------------------------------------------------------------ op closures
def _generic(sim: GoldenSim, ins: Instr) -> Op:
    fn = EXECUTE[ins.op]
    return lambda: fn(sim, ins)


def _load(sim: GoldenSim, ins: Instr) -> Op | None:
    view, lb, row_bytes, rows = _dma_plan(sim, ins)
    if not view.size:
        return None
    src = _dram_rows(sim.window, ins.dram, rows, row_bytes, ins.stride)
    dst = view.view(np.uint8).reshape(rows, row_bytes)  # a contiguous run of lines: a view
    return lambda: np.copyto(dst, src)


def _store(sim: GoldenSim, ins: Instr) -> Op | None:
    view, lb, row_bytes, rows = _dma_plan(sim, ins)
    if not view.size:
        return None
    if not (rows == 1 or ins.stride >= row_bytes):
        return _generic(sim, ins)  # overlapping rows: written in order by the reference
    src = view.view(np.uint8).reshape(rows, row_bytes)
    dst = _dram_rows(sim.window, ins.dram, rows, row_bytes, ins.stride)
    return lambda: np.copyto(dst, src)


def _gemm(sim: GoldenSim, ins: Instr) -> Op | None:
    m, k, n, cols = ins.m, ins.k, ins.n, sim.cfg.cols
    dst = _lines(sim, "acc", ins, "dst", m * n, "result")
    if not dst.size:
        return None
    a = _rows(_lines(sim, "spad", ins, "a", m * k, "A"), m)
    w = _rows(_lines(sim, "spad", ins, "w", n * cols * k, "W"), n * cols)
    out = _rows(dst, m)
    if k == 0:
        if ins.acc:
            return lambda: None  # adds zero
        return lambda: out.fill(0)
    matmul = nx.matmul
    if ins.acc:
        return lambda: np.add(out, matmul(a, w), out=out, casting="unsafe")
    return lambda: np.copyto(out, matmul(a, w))


def _rshift_round_inplace(p: np.ndarray, s: int) -> None:
    """``p = rshift_round(p, s)`` for ``0 < s < 64`` on int64, in place: ``((p >> (s-1)) + 1) >> 1``.

    Equal to numerics' ``(p >> s) + ((p >> (s-1)) & 1)``; ``p >> (s-1)`` is below 2**63 - 1 in magnitude
    for the products here (two int32 factors), so the ``+ 1`` cannot overflow.
    """
    np.right_shift(p, s - 1, out=p)
    np.add(p, 1, out=p)
    np.right_shift(p, 1, out=p)


def _sat32_into(dst: np.ndarray, p: np.ndarray) -> None:
    np.clip(p, nx.INT32_MIN, nx.INT32_MAX, out=p)
    np.copyto(dst, p, casting="unsafe")


def _requant(sim: GoldenSim, ins: Instr) -> Op | None:
    rows, lines, shift = ins.rows, ins.lines, ins.shift
    dst = _lines(sim, "vbuf", ins, "dst", rows * lines, "result")
    if not dst.size:
        return None
    src = _rows(_lines(sim, "acc", ins, "src", rows * lines, "source"), rows)
    mult = _lines(sim, "vbuf", ins, "mult", lines, "multipliers").reshape(-1)
    exps = _lines(sim, "spad", ins, "exps", rows, "exponents")[:, 0]
    out = _rows(dst, rows)
    p = np.empty(out.shape, _I64)
    requant = nx.requant

    def run() -> None:
        e = exps
        s = shift - int(e[0])
        if 0 < s < 64 and (rows == 1 or (e == e[0]).all()):
            np.multiply(src, mult, out=p, dtype=_I64)  # |acc * mult| < 2**62
            _rshift_round_inplace(p, s)
            _sat32_into(out, p)
        else:
            out[...] = requant(src, mult, e, shift)

    return run


def _binary(sim: GoldenSim, ins: Instr) -> Op | None:
    rows, lines = ins.rows, ins.lines
    dst = _lines(sim, "vbuf", ins, "dst", rows * lines, "result")
    if not dst.size:
        return None
    a = _rows(_lines(sim, "vbuf", ins, "a", rows * lines, "a"), rows)
    b = _lines(sim, "vbuf", ins, "b", lines if ins.bcast else rows * lines, "b")
    b = b.reshape(1, -1) if ins.bcast else _rows(b, rows)
    out = _rows(dst, rows)
    p = np.empty(out.shape, _I64)
    if ins.op == "ADD":
        def add() -> None:  # sat32(a + b)
            np.add(a, b, out=p, dtype=_I64)
            _sat32_into(out, p)

        return add
    s = ins.shift
    if not 0 < s < 64:
        return _generic(sim, ins)

    def mul() -> None:  # sat32(rshift_round(a * b, shift)), |a * b| <= 2**62
        np.multiply(a, b, out=p, dtype=_I64)
        _rshift_round_inplace(p, s)
        _sat32_into(out, p)

    return mul


def _attn(sim: GoldenSim, ins: Instr) -> Op | None:
    nq, hd, t = ins.nq, ins.hd, ins.t
    if nq == 0 or hd == 0:
        return None
    causal_empty = bool(ins.causal) and ins.offset < 0
    if not ins.init and (t == 0 or causal_empty):
        # numerics.attn_tile returns the state unchanged; the op rewrites the m/l lines with lanes 2.. zeroed
        st = _lines(sim, "vbuf", ins, "state", attn_state_lines(nq, hd), "state")
        ml_rest = st[:nq, 2:]
        return lambda: ml_rest.fill(0)
    return _generic(sim, ins)


def _nothing(sim: GoldenSim, ins: Instr) -> Op | None:
    return None


_COMPILERS: dict[str, Callable[[GoldenSim, Instr], Op | None]] = {
    "NOP": _nothing, "FINISH": _nothing, "LOAD": _load, "STORE": _store, "GEMM": _gemm, "REQUANT": _requant,
    "ADD": _binary, "MUL": _binary, "ATTN": _attn,
}


def compile_word(sim: GoldenSim, ins: Instr) -> Op | None:
    """A closure doing what ``EXECUTE[ins.op](sim, ins)`` does (counters aside), or ``None`` for no change.

    ``ins`` has passed the dispatch checks.  The closure holds views of ``sim``'s buffers and window.
    """
    if not _LITTLE:  # pragma: no cover - big-endian hosts take the reference op
        return _generic(sim, ins)
    return _COMPILERS.get(ins.op, _generic)(sim, ins)


# ------------------------------------------------------------------ plan
class Plan:
    """A scheduled program: the closures in execution order and the counters the run reports."""

    __slots__ = ("ops", "counters", "finish_pc", "tokens")

    def __init__(self, ops: list[Op], counters: Counters, finish_pc: int, tokens: tuple[int, int, int, int]):
        self.ops, self.counters, self.finish_pc, self.tokens = ops, counters, finish_pc, tokens

    def run(self) -> None:
        for op in self.ops:
            op()

    def fresh_counters(self) -> Counters:
        c = self.counters
        return type(c)(instructions=c.instructions, per_op=Counter(c.per_op), per_engine=Counter(c.per_engine),
                       dma_read_bytes=c.dma_read_bytes, dma_write_bytes=c.dma_write_bytes,
                       fetch_bytes=c.fetch_bytes, macs=c.macs, attn_macs=c.attn_macs)
