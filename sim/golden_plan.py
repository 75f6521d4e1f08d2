"""Execution plans: the golden simulator's fast path, bit-exact with the per-instruction path.

What a program does to the machine depends on its words alone, not on the data:
which engine runs which instruction when, how tokens move, which buffer lines and
DRAM bytes each instruction reads and writes.  So a program is decoded, checked
and *scheduled* once into a plan:

- the order in which the reference scheduler (:class:`systolica.sim.golden._Run`)
  executes the instructions, found by running that scheduler on the token flags
  alone (:func:`static_order`);
- per instruction, a closure over precomputed numpy views of its operands
  (:mod:`systolica.sim.golden_closures`), cached per word, so a decode step whose
  patch table changed a few words re-plans only those words; instructions that
  change no state (a LOAD of zero rows, an ATTN over an empty tile after the
  first) run a no-op;
- runs of repeated blocks (a linear layer's weight tiles) fused into one batched
  closure each (:mod:`systolica.sim.golden_fuse`);
- the counters the run will report, summed once.

Running a plan is then a loop over closures, which compute exactly what
:mod:`systolica.sim.golden_ops` computes.  A program that faults at dispatch, deadlocks or runs off its end is not
planned: the simulator runs it on the per-instruction path, which reports the
fault precisely.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from systolica.isa import OP_BY_NAME, Engine, Instr
from systolica.sim.golden_closures import Op, compile_dma, compile_word, word_counters
from systolica.sim.golden_fuse import fuse_order

if TYPE_CHECKING:  # pragma: no cover
    from systolica.sim.golden import Counters, GoldenSim

__all__ = ["Plan", "Planner", "static_order", "compile_word", "word_counters"]

_FAULT = None  # the signature of a word that faults at dispatch


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


# ------------------------------------------------------------------ plan
def _noop() -> None:
    pass


class Plan:
    """A scheduled program: the closures in execution order and the counters the run reports."""

    __slots__ = ("words", "entries", "ops", "slot", "fused", "counters", "finish_pc", "tokens", "order", "runs")

    def __init__(self, words: list[int], entries: list[tuple], ops: list[Op], slot: dict[int, int],
                 fused: frozenset[int], counters: Counters, finish_pc: int, tokens: tuple[int, int, int, int],
                 order: Sequence[int] = (), runs: Sequence[tuple] = ()):
        self.words, self.entries, self.ops, self.slot = words, entries, ops, slot  # slot: pc -> index in ops
        self.fused = fused  # pcs run inside a fused closure (golden_fuse)
        self.counters, self.finish_pc, self.tokens = counters, finish_pc, tokens
        self.order, self.runs = order, runs  # the execution order and its fused runs [(start, end, closure)]

    def run(self) -> None:
        for op in self.ops:
            op()

    def fresh_counters(self) -> Counters:
        c = self.counters
        return type(c)(instructions=c.instructions, per_op=Counter(c.per_op), per_engine=Counter(c.per_engine),
                       dma_read_bytes=c.dma_read_bytes, dma_write_bytes=c.dma_write_bytes,
                       fetch_bytes=c.fetch_bytes, macs=c.macs, attn_macs=c.attn_macs)


class Planner:
    """Plans of one simulator's programs, cached; a program that differs from a cached one in a few words
    (a decode step after the patch table) gets that plan with those words' closures replaced.

    ``check(word)`` is the simulator's dispatch check: ``(Instr, pops, pushes)``, or a fault object.
    """

    MAX_PLANS = 8
    COLLECT_AFTER = 20_000  # instructions of a plan after whose building the cyclic collector runs once

    def __init__(self, sim: GoldenSim, check: Callable[[int], object], counters_type: type, fuse: bool = True):
        self.sim, self.check, self.counters_type, self.fuse = sim, check, counters_type, fuse
        self.plans: dict[tuple, Plan | None] = {}  # insertion order = age
        self.entries: dict[int, tuple] = {}  # word -> (signature or None, closure, counter deltas, op name)
        self.orders: dict[tuple, tuple | None] = {}  # signatures -> static_order(...)
        self.volatile: dict[int, set[int]] = {}  # program length -> pcs seen patched inside a fused run
        self.key: tuple = ()

    def _entry(self, w: int) -> tuple:
        e = self.entries.get(w)
        if e is None:
            item = self.check(w)
            if not isinstance(item, tuple):  # faults at dispatch
                e = (None, _noop, (0, 0, 0, 0), "", None)
            else:
                ins, pops, pushes = item
                op = compile_word(self.sim, ins)
                e = ((int(ins.engine), pops, pushes, ins.op == "FINISH"), op if op is not None else _noop,
                     word_counters(self.sim, ins), ins.op, ins)
            self.entries[w] = e
        return e

    def plan(self, words: list[int]) -> Plan | None:
        """The plan of ``words``, or ``None`` when the run faults (the per-instruction path reports it)."""
        sim = self.sim
        # closures hold views of the buffers and the window: all dropped when any of them is another array
        key = (id(sim.spad), id(sim.acc), id(sim.vbuf), id(sim.window), sim.window.size)
        if key != self.key or len(self.entries) > 1 << 18:
            self.plans, self.entries, self.key = {}, {}, key
        wkey = tuple(words)
        if wkey in self.plans:
            plan = self.plans.pop(wkey)
            self.plans[wkey] = plan
            return plan
        plan = self._patched(words)
        if plan is None:
            plan = self._built(words)
        self.plans[wkey] = plan
        while len(self.plans) > self.MAX_PLANS:
            del self.plans[next(iter(self.plans))]
        return plan

    def _built(self, words: list[int], base: Plan | None = None) -> Plan | None:
        """:meth:`_build` with the cyclic collector held off: a plan is ~10 long-lived objects per instruction
        and no garbage, and the collector would walk every object of the process several times while a
        100k-instruction plan grows; after a large plan it runs once, here, instead of at some later step of
        the runs that use the plan."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            plan = self._build(words, base)
        finally:
            if enabled:
                gc.enable()
        if enabled and len(words) >= self.COLLECT_AFTER:
            gc.collect()
        return plan

    def _patched(self, words: list[int]) -> Plan | None:
        """The newest cached plan of as many words with a few of them replaced, if their signatures agree."""
        n = len(words)
        for base in reversed(list(self.plans.values())):
            if base is None or len(base.words) != n:
                continue
            diff = [i for i, (a, b) in enumerate(zip(base.words, words, strict=True)) if a != b]
            if len(diff) > max(64, n // 8):
                continue
            new = [self.entries.get(words[i]) or self._retargeted(base.words[i], base.entries[i], words[i])
                   or self._entry(words[i]) for i in diff]
            if any(e[0] != base.entries[i][0] or e[0] is None for e, i in zip(new, diff, strict=True)):
                continue  # the schedule may change: plan afresh
            hit = [i for i in diff if i in base.fused]
            if hit:  # patched words inside fused runs: keep them out of runs from now on, and find those runs anew
                self.volatile.setdefault(n, set()).update(hit)
                return self._built(words, base)
            entries, ops = list(base.entries), list(base.ops)
            c = base.fresh_counters()
            for i, e in zip(diff, new, strict=True):
                old = entries[i]
                entries[i] = e
                if i in base.slot:
                    ops[base.slot[i]] = e[1]
                    c.dma_read_bytes += e[2][0] - old[2][0]
                    c.dma_write_bytes += e[2][1] - old[2][1]
                    c.macs += e[2][2] - old[2][2]
                    c.attn_macs += e[2][3] - old[2][3]
                    if e[3] != old[3]:
                        c.per_op[old[3]] -= 1
                        c.per_op[e[3]] += 1
                        if not c.per_op[old[3]]:
                            del c.per_op[old[3]]
            return Plan(list(words), entries, ops, base.slot, base.fused, c, base.finish_pc, base.tokens, base.order,
                        base.runs)
        return None

    def _retargeted(self, old_word: int, old: tuple, word: int) -> tuple | None:
        """The entry of a LOAD/STORE ``word`` that differs from ``old_word`` in its DRAM address only (a decode
        step's KV-cache writes), from ``old``'s: the same signature, counters and dispatch checks but the window's,
        which building the closure makes (any fault, or doubt, gives ``None``: the full check then runs)."""
        ins = old[4]
        if ins is None or ins.op not in _DRAM_FIELD:
            return None
        lo, mask = _DRAM_FIELD[ins.op]
        if (old_word ^ word) & ~(mask << lo):
            return None
        new = Instr(ins.op, {**ins.fields, "dram": (word >> lo) & mask}, ins.pop_prev, ins.pop_next, ins.push_prev,
                    ins.push_next)
        try:
            op = compile_dma(self.sim, new)  # with the alignment, window and read-only checks
        except Exception:  # noqa: BLE001 - a fault (or a refused STORE): the full path reports it as the check does
            return None
        e = (old[0], op if op is not None else _noop, old[2], old[3], new)
        self.entries[word] = e
        return e

    def _build(self, words: list[int], base: Plan | None = None) -> Plan | None:
        """The plan of ``words``; ``base``, a plan of the same schedule, lends the fused runs that hold no volatile
        word (only the others are looked for again, in their own spans)."""
        entries = [self._entry(w) for w in words]
        sigs = tuple(e[0] for e in entries)
        if sigs not in self.orders:
            if len(self.orders) > 16:
                self.orders.clear()
            cfg = self.sim.cfg
            self.orders[sigs] = static_order(sigs, cfg.cmd_depth, cfg.queue_depth)
        found = self.orders[sigs]
        if found is None:
            return None
        order, fetched, finish_pc, tokens = found
        ops: list[Op] = []
        slot: dict[int, int] = {}
        volatile = self.volatile.get(len(words), set())
        instrs = [e[4] for e in entries]
        if not self.fuse:
            runs = []
        elif base is not None and base.order is order:
            runs = []
            for start, end, fn in base.runs:
                if any(order[k] in volatile for k in range(start, end)):
                    runs += [(start + a, start + b, f) for a, b, f in
                             fuse_order(self.sim, order[start:end], instrs, volatile)]
                else:
                    runs.append((start, end, fn))  # the same words: the same closure
        else:
            runs = fuse_order(self.sim, order, instrs, volatile)
        fused_runs = tuple(runs)
        runs.append((len(order), len(order), None))
        pos = 0
        for start, end, fn in runs:
            for pc in order[pos:start]:
                slot[pc] = len(ops)
                ops.append(entries[pc][1])
            if fn is not None:
                ops.append(fn)
            pos = end
        c = self.counters_type(instructions=len(order), fetch_bytes=16 * fetched)
        per_op: Counter = Counter()
        per_engine: Counter = Counter()
        for pc in order:
            sig, _, (r, wb, m, a), name, _ = entries[pc]
            c.dma_read_bytes += r
            c.dma_write_bytes += wb
            c.macs += m
            c.attn_macs += a
            per_op[name] += 1
            per_engine[_ENGINE_NAMES[sig[0]]] += 1
        c.per_op, c.per_engine = per_op, per_engine
        fused = frozenset(pc for start, end, _ in runs for pc in order[start:end])
        return Plan(list(words), entries, ops, slot, fused, c, finish_pc, tokens, order, fused_runs)


_ENGINE_NAMES = tuple(Engine(e).name for e in range(3))
_DRAM_FIELD = {op: next((lo, (1 << f.bits) - 1) for f, lo in OP_BY_NAME[op].layout() if f.name == "dram")
               for op in ("LOAD", "STORE")}  # op -> (lowest bit, mask) of its unsigned dram field
