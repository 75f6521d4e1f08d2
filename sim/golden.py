"""The golden simulator: the bit-exact definition of what a program does.

:class:`GoldenSim` holds the three on-chip buffers as numpy arrays and a DRAM
window over a host byte array, and runs programs with the decoupled
load / compute / store engines and their four dependency-token queues exactly
as ``docs/isa.md`` describes:

- fetch dispatches instructions in program order into per-engine instruction
  queues (``cmd_depth`` deep) and stalls while the one it needs is full;
- an engine executes the head of its queue when every queue its ``pop_*``
  flags name holds a token and every queue its ``push_*`` flags name has room;
- engines are stepped in the fixed order load, compute, store, each as far as
  it can go, so a run is deterministic;
- every fault an instruction can cause (illegal opcode or field, DMA alignment
  or window, buffer range) and running off the end are found at dispatch, as
  the hardware's decoder does: fetch stops, the instructions dispatched before
  still run, then the fault is reported.  So faults are precise: the state
  after a fault is what exactly the instructions before it produced.

Op semantics are in :mod:`systolica.sim.golden_ops`; arithmetic is
:mod:`systolica.numerics`.  No cycle estimate here: that is the performance
model's job.
"""

from __future__ import annotations

import os
from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from systolica.asm import format_instr
from systolica.config import AccelConfig
from systolica.faults import Fault
from systolica.isa import OP_BY_CODE, OPCODE_BITS, Engine, IllegalInstruction, Instr, decode
from systolica.program import Program
from systolica.sim.faults import SimFault, fault_error
from systolica.sim.golden_ops import EXECUTE, OpFault, check_operands, check_static
from systolica.sim.golden_plan import Planner

__all__ = ["GoldenSim", "SimResult", "Counters", "SimFault", "QUEUE_NAMES"]

# Token queues: (engine, "prev"/"next") -> queue index.  Pops read the queue that points at the engine,
# pushes write the one that points away from it.
_L2C, _C2L, _C2S, _S2C = range(4)
_POP = {(Engine.COMPUTE, "prev"): _L2C, (Engine.LOAD, "next"): _C2L, (Engine.STORE, "prev"): _C2S,
        (Engine.COMPUTE, "next"): _S2C}
_PUSH = {(Engine.LOAD, "next"): _L2C, (Engine.COMPUTE, "prev"): _C2L, (Engine.COMPUTE, "next"): _C2S,
         (Engine.STORE, "prev"): _S2C}
QUEUE_NAMES = ("load->compute", "compute->load", "compute->store", "store->compute")
_WORD_CACHE = 1 << 18  # checked words kept (a SmolLM2 decode step has ~17k distinct ones)


@dataclass
class Counters:
    """What one run did, for reports and for checking the performance model."""

    instructions: int = 0
    per_op: Counter = field(default_factory=Counter)
    per_engine: Counter = field(default_factory=Counter)
    dma_read_bytes: int = 0
    dma_write_bytes: int = 0
    fetch_bytes: int = 0  # instruction words fetched (the hardware's DMA_RD_BYTES counts these too)
    macs: int = 0  # GEMM multiply-accumulates
    attn_macs: int = 0  # ATTN multiply-accumulates (q.k and p.v)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["per_op"], d["per_engine"] = dict(self.per_op), dict(self.per_engine)
        return d


@dataclass
class SimResult:
    """Outcome of :meth:`GoldenSim.run`: status (``Fault.NONE`` when done), faulting PC, message, counters."""

    status: Fault
    pc: int  # faulting instruction, or the FINISH that ended the run
    message: str
    counters: Counters
    tokens_left: tuple[int, int, int, int] = (0, 0, 0, 0)  # tokens still queued at the end, per QUEUE_NAMES

    @property
    def ok(self) -> bool:
        return self.status == Fault.NONE

    def raise_for_fault(self) -> None:
        if not self.ok:
            raise fault_error(self.status, self.pc, self.message)

    def to_dict(self) -> dict:
        return {"status": self.status.name, "code": int(self.status), "pc": self.pc, "message": self.message,
                "counters": self.counters.to_dict(), "tokens_left": dict(zip(QUEUE_NAMES, self.tokens_left, strict=False))}


class _Stop(Exception):
    def __init__(self, fault: Fault, pc: int, msg: str):
        self.fault, self.pc, self.msg = fault, pc, msg


class GoldenSim:
    """Bit-exact simulator of one accelerator.

    Parameters
    ----------
    cfg
        The accelerator configuration (buffer sizes, ``cols``, queue depths).
    dram
        Host memory as a 1-D uint8 array (used in place: STOREs write into it), or a size in bytes for a
        zeroed one; ``None`` allocates ``cfg.dram_bytes``.
    window_base, window_size
        The DRAM window the accelerator may touch: ``dram[window_base : window_base + window_size]``.
        DMA addresses are byte offsets inside it.  ``window_size`` defaults to the rest of ``dram``, capped
        at ``cfg.dram_bytes``.
    fast
        Run programs through cached execution plans (:mod:`systolica.sim.golden_plan`), bit-exact with
        the per-instruction path (``fast=False``); default: on unless ``SYSTOLICA_GOLDEN_FAST=0``.
    readonly
        ``(offset, size)`` ranges of the window that nothing writes while the simulator lives (the weights,
        once the host has placed them): the simulator may keep what GEMM_STREAM reads there converted for
        its matmuls instead of reading it again every run.  A STORE that would write into one raises
        :class:`~systolica.sim.golden_ops.ReadOnlyStore` (a broken promise, not an accelerator fault); the
        host must not write there either.

    Buffers and DRAM persist between :meth:`run` calls, as in the hardware.
    """

    def __init__(self, cfg: AccelConfig, dram: np.ndarray | int | None = None, window_base: int = 0,
                 window_size: int | None = None, *, fast: bool | None = None, readonly=()):
        self.cfg = cfg
        if dram is None or isinstance(dram, (int, np.integer)):
            dram = np.zeros(int(dram if dram is not None else cfg.dram_bytes), dtype=np.uint8)
        if not isinstance(dram, np.ndarray) or dram.dtype != np.uint8 or dram.ndim != 1:
            raise TypeError(f"dram must be a 1-D uint8 numpy array, got {type(dram).__name__} "
                            f"{getattr(dram, 'dtype', '')} {getattr(dram, 'shape', '')}")
        if not 0 <= window_base <= dram.size:
            raise ValueError(f"window_base={window_base:#x} is outside the {dram.size:#x}-byte DRAM array")
        size = min(dram.size - window_base, cfg.dram_bytes) if window_size is None else window_size
        if not 0 <= window_base + size <= dram.size:
            raise ValueError(f"window [{window_base:#x}, {window_base + size:#x}) runs past the {dram.size:#x}-byte "
                             "DRAM array")
        self.dram = dram
        self.window_base = window_base
        self.window = dram[window_base:window_base + size]
        self.spad = np.zeros((cfg.spad_lines, cfg.cols), np.int8)
        self.acc = np.zeros((cfg.acc_lines, cfg.cols), np.int32)
        self.vbuf = np.zeros((cfg.vbuf_lines, cfg.cols), np.int32)
        self.counters = Counters()
        spans = sorted((int(o), int(o) + int(n)) for o, n in readonly)
        for lo, hi in spans:
            if not 0 <= lo <= hi <= size:
                raise ValueError(f"read-only range [{lo:#x}, {hi:#x}) is not inside the {size:#x}-byte window")
        merged: list[tuple[int, int]] = []  # adjacent or overlapping ranges as one (a model declares ~200 matrices)
        for lo, hi in spans:
            if hi <= lo:
                continue
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        self.readonly = tuple(merged)
        self._stream_weights: dict = {}  # read-only GEMM_STREAM weights, converted once (golden_closures)
        self._nmajor: dict = {}  # read-only range -> (its N-major int8 bands, their markers) (golden_closures)
        self._prepared: OrderedDict = OrderedDict()
        self._words: dict[int, object] = {}  # word -> what _check_word found (it depends on the word alone)
        self._words_window = self.window.size
        self.fast = os.environ.get("SYSTOLICA_GOLDEN_FAST", "1") != "0" if fast is None else bool(fast)
        self._planner = Planner(self, self._checked, Counters,
                                fuse=os.environ.get("SYSTOLICA_GOLDEN_FUSE", "1") != "0")

    def _checked(self, word: int):
        """:func:`_check_word` of ``word``, from the word cache."""
        if self._words_window != self.window.size or len(self._words) > _WORD_CACHE:
            self._words, self._words_window = {}, self.window.size
        item = self._words.get(word)
        if item is None:
            item = self._words[word] = _check_word(self, word)
        return item

    def reset(self) -> None:
        """Clear the on-chip buffers (DRAM is the host's and stays)."""
        for b in (self.spad, self.acc, self.vbuf):
            b[...] = 0

    # ------------------------------------------------------------------ run
    def _prepare(self, words: list[int]) -> list:
        """Decode and check every word once: ``(Instr, pops, pushes)`` or the :class:`_Stop` it causes.

        The checks depend only on the words, the config and the window size, so the result is cached:
        the runtime runs the same decode-step program once per token.
        """
        key = (tuple(words), self.window.size)
        hit = self._prepared.get(key)
        if hit is not None:
            self._prepared.move_to_end(key)
            return hit
        # a decode step's patch table changes a few words a token: the others come from the word cache
        if self._words_window != self.window.size or len(self._words) > _WORD_CACHE:
            self._words, self._words_window = {}, self.window.size
        cache = self._words
        out = []
        for w in words:
            item = cache.get(w)
            if item is None:
                item = cache[w] = _check_word(self, w)
            out.append(item)
        self._prepared[key] = out
        if len(self._prepared) > 8:
            self._prepared.popitem(last=False)
        return out

    def run(self, program: Program | Sequence[int], *, max_instructions: int | None = None,
            raise_on_fault: bool = True) -> SimResult:
        """Run a program until it finishes or faults.

        Parameters
        ----------
        program
            A :class:`~systolica.program.Program` (its config hash must match, else
            :class:`~systolica.program.ConfigMismatch`) or raw 128-bit words.
        max_instructions
            Stop with ``Fault.TIMEOUT`` after executing this many instructions (a watchdog).
        raise_on_fault
            Raise the :class:`~systolica.sim.faults.SimFault` subclass of the fault (default), or
            return a :class:`SimResult` carrying status, PC and message, as the hardware's CSRs do.
        """
        if isinstance(program, Program):
            program.check_config(self.cfg)
            words = program.words
        else:
            words = [int(w) for w in program]
        plan = self._planner.plan(words) if self.fast else None
        if plan is not None and (max_instructions is None or plan.counters.instructions <= max_instructions):
            self.counters = Counters()  # reference ops called from the plan count here; the plan's totals win
            plan.run()
            self.counters = plan.fresh_counters()
            res = SimResult(Fault.NONE, plan.finish_pc, "finished", self.counters, plan.tokens)
            if raise_on_fault:
                res.raise_for_fault()
            return res
        prepared = self._prepare(words)
        self.counters = Counters()
        state = _Run(self, prepared, max_instructions)
        try:
            state.go()
            res = SimResult(Fault.NONE, state.finish_pc, "finished", self.counters, tuple(state.tokens))
        except _Stop as s:
            res = SimResult(s.fault, s.pc, s.msg, self.counters, tuple(state.tokens))
        if raise_on_fault:
            res.raise_for_fault()
        return res


def _check_word(sim: GoldenSim, word: int):
    """What fetch finds at one word: ``(Instr, pops, pushes)``, or the fault (a :class:`_Stop` without pc)."""
    try:
        ins = decode(word)
    except IllegalInstruction as e:
        if e.reason == "opcode":
            return _Stop(Fault.ILLEGAL_OPCODE, -1, str(e))
        spec = OP_BY_CODE[word & ((1 << OPCODE_BITS) - 1)]
        legal = format_instr(decode(word & ((1 << spec.used_bits) - 1)))
        return _Stop(Fault.ILLEGAL_FIELD, -1, f"{legal}: reserved bits set in word {word:#034x} "
                                              f"(bits above {spec.used_bits - 1} must be 0)")
    if ins.op == "SOFTMAX" and not sim.cfg.softmax_unit:
        return _Stop(Fault.ILLEGAL_OPCODE, -1, f"{format_instr(ins)}: config {sim.cfg.name!r} has no softmax unit "
                                               "(softmax_unit = 0)")
    why = check_static(ins)
    if why is not None:
        return _Stop(Fault.ILLEGAL_FIELD, -1, f"{format_instr(ins)}: {why}")
    try:
        check_operands(sim, ins)
    except OpFault as f:
        return _Stop(f.fault, -1, f"{format_instr(ins)}: {f}")
    return (ins, *_token_plan(ins))


class _Run:
    """The state of one run: fetch pointer, instruction queues, token counts."""

    def __init__(self, sim: GoldenSim, prepared: list, max_instructions: int | None):
        self.sim, self.prepared, self.limit = sim, prepared, max_instructions
        self.cmd = (deque(), deque(), deque())
        self.tokens = [0, 0, 0, 0]
        self.fetch_pc = 0
        self.fetching = True
        self.pending: _Stop | None = None  # a fetch fault waiting for the dispatched instructions to drain
        self.finish_pc = -1

    def _fetch(self) -> bool:
        moved = False
        depth = self.sim.cfg.cmd_depth
        prepared = self.prepared
        while self.fetching:
            pc = self.fetch_pc
            if pc >= len(prepared):
                self.pending = _Stop(Fault.PROGRAM_OVERRUN, pc, f"fetch reached pc {pc}, past the last of "
                                     f"{len(prepared)} instructions, without a FINISH")
                self.fetching = False
                break
            item = prepared[pc]
            if isinstance(item, _Stop):
                self.pending, self.fetching = _Stop(item.fault, pc, item.msg), False
                break
            ins = item[0]
            q = self.cmd[ins.engine]
            if len(q) >= depth:
                break
            q.append((pc, *item))
            self.fetch_pc += 1
            self.sim.counters.fetch_bytes += 16
            moved = True
            if ins.op == "FINISH":
                self.fetching = False
        return moved

    def _step_engine(self, e: int) -> bool:
        q, tok, depth = self.cmd[e], self.tokens, self.sim.cfg.queue_depth
        c = self.sim.counters
        moved = False
        while q:
            pc, ins, pops, pushes = q[0]
            if any(tok[i] == 0 for i in pops) or any(tok[i] >= depth for i in pushes):
                break
            if self.limit is not None and c.instructions >= self.limit:
                raise _Stop(Fault.TIMEOUT, pc, f"stopped after {self.limit} instructions (max_instructions) "
                            f"before {format_instr(ins)}")
            try:
                EXECUTE[ins.op](self.sim, ins)
            except OpFault as f:
                raise _Stop(f.fault, pc, f"{format_instr(ins)}: {f}") from None
            for i in pops:
                tok[i] -= 1
            for i in pushes:
                tok[i] += 1
            q.popleft()
            c.instructions += 1
            c.per_op[ins.op] += 1
            c.per_engine[Engine(e).name] += 1
            if ins.op == "FINISH":
                self.finish_pc = pc
            moved = True
        return moved

    def go(self) -> None:
        while True:
            moved = self._fetch()
            for e in (Engine.LOAD, Engine.COMPUTE, Engine.STORE):
                moved |= self._step_engine(e)
            if moved:
                continue
            if not any(self.cmd):
                if self.pending is not None:
                    raise self.pending
                return  # FINISH dispatched and every engine drained
            if self.pending is not None:  # blocked only because fetch stopped at the fault
                raise self.pending
            pc, ins = min((q[0] for q in self.cmd if q), key=lambda h: h[0])[:2]
            raise _Stop(Fault.TOKEN_DEADLOCK, pc, f"{format_instr(ins)} on the {ins.engine.name.lower()} engine "
                        f"waits forever; tokens queued: " +
                        ", ".join(f"{n}={t}" for n, t in zip(QUEUE_NAMES, self.tokens, strict=False)))


def _token_plan(ins: Instr) -> tuple[tuple[int, ...], tuple[int, ...]]:
    e = ins.engine
    pops = tuple(_POP[(e, side)] for side in ("prev", "next") if getattr(ins, f"pop_{side}"))
    pushes = tuple(_PUSH[(e, side)] for side in ("prev", "next") if getattr(ins, f"push_{side}"))
    return pops, pushes


