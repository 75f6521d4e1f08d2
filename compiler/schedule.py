"""Scheduling across the load / compute / store engines with dependency tokens.

Code generation emits instructions in one sequential order, each with the on-chip blocks and DRAM
regions it reads and writes.  :class:`Scheduler` turns the hazards between engines into token
flags (VTA's protocol, ``systolica.isa``):

- A hazard (read-after-write, write-after-read, write-after-write on overlapping blocks) between
  an earlier instruction ``a`` on engine ``A`` and a new one ``b`` on engine ``B != A`` needs
  ``a`` complete before ``b`` starts.  Engines are in order, and the scheduler keeps a vector
  clock per engine (the latest instruction of every engine known complete), so ``b`` waits only
  for the latest ``a`` per engine that its clock does not already cover.
- Adjacent engines (load-compute, compute-store): ``a`` pushes one token toward ``B`` and ``b``
  pops it.  Because a new wait is only added for an ``a`` later than every earlier wait of ``B``
  on ``A``, pushes and pops on each queue pair up in order: the k-th push is the k-th pop.
- Load and store are not linked: a store -> load hazard (the KV cache written, then read back)
  goes through a compute ``NOP`` that pops the store's token and pushes one to the load.

Why this cannot deadlock (checked by :func:`verify_tokens` on every program): executed one
instruction at a time in emission order, no pop finds an empty queue and no push exceeds
``queue_depth``, and all queues end empty.  Take any state of the real machine and the earliest
(in emission order) instruction X not yet executed.  Everything before X has executed, so X heads
its engine's queue (fetch is in order and every engine queue ahead of X is drained).  The queue X
pops is consumed only by X's engine, which has popped exactly as in the sequential run, while
everything that pushes into it before X has run: it holds at least the sequential count, so > 0.
A queue X pushes into holds at most the sequential count, so it has room.  So X can run: some
engine can always progress, and since every queue ends empty the next program starts clean.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from systolica.isa import Engine, Instr, make

__all__ = ["Scheduler", "Emitted", "ScheduleError", "verify_tokens", "queue_of"]

LOAD, COMPUTE, STORE = Engine.LOAD, Engine.COMPUTE, Engine.STORE
_Q_NAMES = ("load->compute", "compute->load", "compute->store", "store->compute")
#: (engine, "prev" | "next") -> the engine a token flag on that side talks to
_NEIGHBOUR = {(COMPUTE, "prev"): LOAD, (COMPUTE, "next"): STORE, (LOAD, "next"): COMPUTE, (STORE, "prev"): COMPUTE}


class ScheduleError(RuntimeError):
    """A token protocol that could deadlock or miss a hazard (a compiler bug), with the instruction index."""


def queue_of(src: Engine, dst: Engine) -> tuple[int, str, str]:
    """(queue index, push flag on ``src``, pop flag on ``dst``) of the queue from ``src`` to ``dst``."""
    table = {(LOAD, COMPUTE): (0, "push_next", "pop_prev"), (COMPUTE, LOAD): (1, "push_prev", "pop_next"),
             (COMPUTE, STORE): (2, "push_next", "pop_prev"), (STORE, COMPUTE): (3, "push_prev", "pop_next")}
    try:
        return table[(src, dst)]
    except KeyError:
        raise ScheduleError(f"no token queue from {src.name} to {dst.name}") from None


@dataclass
class Emitted:
    """One instruction in emission order, before flags are final."""

    op: str
    fields: dict
    engine: Engine
    reads: tuple = ()
    writes: tuple = ()
    patches: list = field(default_factory=list)  # (field, kind, args)
    flags: dict = field(default_factory=lambda: {"pop_prev": False, "pop_next": False, "push_prev": False,
                                                 "push_next": False})

    def instr(self) -> Instr:
        return make(self.op, **self.fields, **self.flags)


class _Hazards:
    """Per block: the last writer and, per engine, the last reader since that write."""

    def __init__(self, overlaps: dict[str, tuple[str, ...]]):
        self.overlaps = overlaps
        self.write: dict[str, tuple[int, int]] = {}
        self.reads: dict[str, dict[int, int]] = {}

    def deps(self, engine: int, reads, writes) -> dict[int, int]:
        need: dict[int, int] = {}

        def dep(e: int, i: int) -> None:
            if e != engine and need.get(e, -1) < i:
                need[e] = i

        for key, is_write in [(k, False) for k in reads] + [(k, True) for k in writes]:
            for k in self.overlaps.get(key, (key,)):
                w = self.write.get(k)
                if w is not None:
                    dep(*w)
                if is_write:
                    for e, i in self.reads.get(k, {}).items():
                        dep(e, i)
        return need

    def record(self, engine: int, idx: int, reads, writes) -> None:
        for k in reads:
            self.reads.setdefault(k, {})[engine] = idx
        for k in writes:
            self.write[k] = (engine, idx)
            self.reads[k] = {}


class Scheduler:
    """Collects instructions in emission order and sets their token flags (see the module docstring).

    Parameters
    ----------
    overlaps : dict
        Block key -> keys of every block sharing a line with it (itself included).  Keys not listed
        overlap only themselves (DRAM regions such as ``"dram:kv0"``).
    queue_depth : int
        Capacity of each token queue: a wait is moved to a later producer (or a NOP) rather than let
        the sequential occupancy exceed it.
    """

    def __init__(self, overlaps: dict[str, tuple[str, ...]], queue_depth: int = 256):
        self.instrs: list[Emitted] = []
        self.clock: list[tuple[int, int, int]] = []  # vector clock of each instruction (after it)
        self.vc = [[-1, -1, -1] for _ in range(3)]  # per engine: latest instruction of each engine known done
        self.haz = _Hazards(overlaps)
        self.depth = queue_depth
        self.by_engine: list[list[int]] = [[], [], []]
        self.occ: list[list[int]] = [[], [], [], []]  # tokens in flight per queue after each instruction
        self.nops = 0

    def emit(self, op: str, engine: Engine | None = None, reads=(), writes=(), patches=(), after: int | None = None,
             **fields) -> int:
        """Append an instruction; returns its index.  ``engine`` only for NOP (the op fixes it otherwise).
        ``after``: an earlier instruction it must also wait for (an ordering with no data between them)."""
        probe = make(op, **fields)
        eng = Engine(engine) if engine is not None else probe.engine
        if op == "NOP":
            fields = {**fields, "engine": int(eng)}
        need = self.haz.deps(eng, reads, writes)
        if after is not None and self.instrs[after].engine != eng:
            e = int(self.instrs[after].engine)
            need[e] = max(need.get(e, -1), after)
        pairs = self._wait(eng, need)
        idx = self._append(Emitted(op, dict(probe.fields, **fields), eng, tuple(reads), tuple(writes),
                                   list(patches)), pairs)
        self.haz.record(eng, idx, reads, writes)
        return idx

    def _append(self, em: Emitted, pairs: list[tuple[int, str, int]]) -> int:
        """Append ``em``, popping one token per ``(queue, pop flag, producer)`` pair."""
        idx = len(self.instrs)
        self.instrs.append(em)
        for q in self.occ:
            q.append(0)
        for q, pop, a in pairs:
            em.flags[pop] = True
            occ = self.occ[q]
            for x in range(a, idx):  # the token is in flight from its push to this pop
                occ[x] += 1
        self.by_engine[em.engine].append(idx)
        self.vc[em.engine][em.engine] = idx
        self.clock.append(tuple(self.vc[em.engine]))
        return idx

    def _producer(self, e: int, a: int, q: int, push: str) -> int:
        """The first instruction of engine ``e`` at or after ``a`` that can push one more token into queue ``q``."""
        occ, end = self.occ[q], len(self.instrs)
        cands = self.by_engine[e]
        for a2 in cands[bisect_left(cands, a):]:
            if not self.instrs[a2].flags[push] and max(occ[a2:end], default=0) < self.depth:
                return a2
        # every candidate is busy or its queue is full until now: a NOP on that engine pushes right here
        self.nops += 1
        return self._append(Emitted("NOP", {"engine": int(e)}, Engine(e)), [])

    def _wait(self, eng: int, need: dict[int, int]) -> list[tuple[int, str, int]]:
        """Make engine ``eng`` wait for ``need`` (engine -> instruction); returns the pops of its next one."""
        need = {e: i for e, i in need.items() if self.vc[eng][e] < i}
        far = {LOAD: STORE, STORE: LOAD}.get(Engine(eng))
        if far is not None and far in need and self.vc[COMPUTE][far] >= need[far]:
            # Compute already waited for it: wait for the first compute instruction that knows it done.
            comp = self.by_engine[COMPUTE]
            c = comp[bisect_left(comp, need.pop(far), key=lambda x: self.clock[x][far])]
            need[COMPUTE] = max(need.get(COMPUTE, -1), c)
        if far is not None and far in need:
            # No queue links load and store: a compute NOP relays the token.
            nop_pairs = self._wait(COMPUTE, {far: need.pop(far)})
            idx = self._append(Emitted("NOP", {"engine": int(COMPUTE)}, COMPUTE), nop_pairs)
            self.nops += 1
            need[COMPUTE] = max(need.get(COMPUTE, -1), idx)
        pairs = []
        for e, a in need.items():
            q, push, pop = queue_of(Engine(e), Engine(eng))
            a = self._producer(e, a, q, push)
            self.instrs[a].flags[push] = True
            pairs.append((q, pop, a))
            self.vc[eng] = [max(x, y) for x, y in zip(self.vc[eng], self.clock[a], strict=True)]
        return pairs

    def finish(self) -> list[Emitted]:
        """Append FINISH and return the instructions with their final flags."""
        self.emit("FINISH")
        return self.instrs


def verify_tokens(instrs: list[Instr], queue_depth: int) -> dict:
    """Check the deadlock-freedom condition of the module docstring; returns the peak occupancy per queue.

    Raises
    ------
    ScheduleError
        A pop from an empty queue, a push past ``queue_depth``, or tokens left at the end.
    """
    q = [0, 0, 0, 0]
    peak = [0, 0, 0, 0]
    for i, ins in enumerate(instrs):
        e = ins.engine
        for side in ("prev", "next"):
            if getattr(ins, f"pop_{side}"):
                src = _NEIGHBOUR.get((e, side))
                if src is None:
                    raise ScheduleError(f"instruction {i} ({ins.op}) pops {side} on the {e.name} engine")
                k = queue_of(src, e)[0]
                if q[k] == 0:
                    raise ScheduleError(f"instruction {i} ({ins.op}) pops the empty {_Q_NAMES[k]} queue")
                q[k] -= 1
        for side in ("prev", "next"):
            if getattr(ins, f"push_{side}"):
                dst = _NEIGHBOUR.get((e, side))
                if dst is None:
                    raise ScheduleError(f"instruction {i} ({ins.op}) pushes {side} on the {e.name} engine")
                k = queue_of(e, dst)[0]
                q[k] += 1
                peak[k] = max(peak[k], q[k])
                if q[k] > queue_depth:
                    raise ScheduleError(f"instruction {i} ({ins.op}) pushes a {q[k]}th token into {_Q_NAMES[k]} "
                                        f"(queue_depth={queue_depth})")
    if any(q):
        raise ScheduleError("tokens left at the end of the program: " +
                            ", ".join(f"{n}={c}" for n, c in zip(_Q_NAMES, q, strict=True) if c))
    return dict(zip(_Q_NAMES, peak, strict=True))
