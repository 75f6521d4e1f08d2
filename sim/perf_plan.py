"""The performance model's analysis of one program, done once, so that timing it again is cheap.

A design-space sweep times the same compiled programs under many :class:`~systolica.sim.perf_costs.PerfParams`
(board DRAM bandwidths and latencies, clocks), and the runtime times each decode step's program, which differs
from the last step's only in its patched fields.  What the schedule of :mod:`systolica.sim.perf` depends on
splits in two:

- fixed by the program and the configuration (:func:`plan_for`, once per program): each instruction's engine;
  its token partners (the j-th pop of a queue waits for the j-th push, the j-th push for pop
  ``j - queue_depth``: one producer and one consumer per queue fix both by program order); the instruction
  whose retirement frees its command-FIFO slot; its decode cycles; its cost signature
  (:func:`~systolica.sim.perf_costs.cost_signature`); and an order in which the schedule can be evaluated
  (the order in which the engines' work list advances; a token deadlock shows here, with the same message);
- what each timing redoes (:meth:`ProgramPlan.time`): the cost of each distinct signature under the params (a
  few hundred per program, priced once per configuration and params), then the max-plus recurrence over the
  fixed order, twice when instruction fetch contends with LOADs for the read port.

The result is the uncached model's, cycle for cycle (``tests/sim/test_perf_plan.py`` checks start, end and
every counter).  A program whose words differ from a cached one's in a few fields that leave every engine,
token flag and op alone (a patched decode step) reuses that plan: only those words are decoded again.
"""

from __future__ import annotations

from collections.abc import Sequence

from systolica.config import AccelConfig
from systolica.hw.decode import decode_cycles
from systolica.isa import WORD_BYTES
from systolica.sim.perf import (
    GEMM_HOLD_GAP,
    RUN_END,
    RUN_OVERHEAD,
    RUNS_ON_EXEC,
    PerfError,
    PerfResult,
    _plan,
    ahead_plan,
    ahead_saving,
    beside_cycles,
    beside_plan,
    deadlock_error,
    decode_timed,
)
from systolica.sim.perf_costs import cost_signature, op_cost, rd_round_trip
from systolica.sim.perf_fetch import FETCH_FIFO, FETCH_REFILL, FETCH_START, fetch_stretch, port0_busy, port0_tail
from systolica.sim.perf_load import load_busy, load_end

__all__ = ["ProgramPlan", "plan_for", "clear_plans"]

_MAX_WORDS = 1 << 18  # decoded-word cache entries
_PLANS_PER_CONFIG = 32  # recently timed programs kept per configuration (a DSE point times 14)


class _Table:
    """Per configuration: decoded words, the distinct cost signatures, and their costs per PerfParams."""

    def __init__(self, cfg: AccelConfig):
        self.cfg = cfg
        self.dec = decode_cycles(cfg)
        self.words: dict[int, tuple] = {}  # word -> (engine, pops, pushes, op, decode cycles, signature id)
        self.sig_ids: dict[tuple, int] = {}
        self.reps: list = []  # one Instr per signature
        self.priced: dict = {}  # PerfParams -> ([exec], [array_busy], [rd_beats], [wr_beats], [macs], [pair_gain],
        #                        [issue_cycles], [tail]) per signature

    def info(self, word: int) -> tuple:
        got = self.words.get(word)
        if got is None:
            ins = decode_timed(word)
            sig = cost_signature(ins)
            sid = self.sig_ids.get(sig)
            if sid is None:
                sid = self.sig_ids[sig] = len(self.reps)
                self.reps.append(ins)
            pops, pushes = _plan(ins)
            got = (int(ins.engine), pops, pushes, ins.op, self.dec[ins.op], sid)
            if len(self.words) < _MAX_WORDS:
                self.words[word] = got
        return got

    def costs(self, p) -> tuple[list[int], ...]:
        """Costs of every signature known so far under ``p`` (priced once; new signatures appended)."""
        c = self.priced.get(p)
        if c is None:
            if len(self.priced) >= 256:  # a long sweep of params: keep memory bounded
                self.priced.clear()
            c = self.priced[p] = ([], [], [], [], [], [], [], [])
        if len(c[0]) < len(self.reps):
            for ins in self.reps[len(c[0]):]:
                oc = op_cost(self.cfg, p, ins)
                for lst, v in zip(c, (oc.exec_cycles, oc.array_busy, oc.rd_beats, oc.wr_beats, oc.macs,
                                      oc.pair_gain, oc.issue_cycles, oc.tail), strict=True):
                    lst.append(v)
        return c


_TABLES: dict[AccelConfig, _Table] = {}
_PLANS: dict[AccelConfig, list[ProgramPlan]] = {}


def _table(cfg: AccelConfig) -> _Table:
    t = _TABLES.get(cfg)
    if t is None:
        if len(_TABLES) >= 16:  # each holds up to _MAX_WORDS decoded words
            _TABLES.clear()
            _PLANS.clear()
        t = _TABLES[cfg] = _Table(cfg)
    return t


def clear_plans() -> None:
    """Forget every cached plan, decoded word and priced signature (tests; memory)."""
    _TABLES.clear()
    _PLANS.clear()


class ProgramPlan:
    """What the schedule of one program depends on that no timing parameter changes.

    Build it with :func:`plan_for`; time it with :meth:`time`.
    """

    def __init__(self, cfg: AccelConfig, words: list[int], infos: list[tuple]):
        self.cfg = cfg
        self.words = words
        n = self.n = len(infos)
        self.eng = [x[0] for x in infos]
        self.ops = [x[3] for x in infos]
        self.dec1 = [x[4] - 1 for x in infos]  # TAKE to DISPATCH, less the TAKE cycle
        self.sig = [x[5] for x in infos]
        fifo = cfg.cmd_depth - 1
        qdepth = cfg.queue_depth
        order: list[list[int]] = [[], [], []]
        slot = [0] * n
        for i, e in enumerate(self.eng):
            slot[i] = len(order[e])
            order[e].append(i)
        self.load_words = order[0]  # the load engine's words in order (its busy cycles: sim/perf_load.py)
        # the engine's previous instruction, and what frees instruction i's command-FIFO slot (-1: nothing)
        self.prev = [order[e][slot[i] - 1] if slot[i] else -1 for i, e in enumerate(self.eng)]
        self.room_a = [-1] * n  # the instruction k - fifo of the same engine: its dispatch
        self.room_b = [-1] * n  # and its predecessor on the engine: its retirement
        for i, e in enumerate(self.eng):
            if slot[i] >= fifo:
                j = order[e][slot[i] - fifo]
                self.room_a[i] = j
                self.room_b[i] = self.prev[j]
        pushers: list[list[int]] = [[], [], [], []]
        poppers: list[list[int]] = [[], [], [], []]
        for i, x in enumerate(infos):
            for q in x[2]:
                pushers[q].append(i)
        for i, x in enumerate(infos):
            for q in x[1]:
                poppers[q].append(i)
        never = n  # stands for a partner that never comes (a deadlock)
        npop, npush = [0] * 4, [0] * 4
        dep_end: list[tuple[int, ...]] = []  # the pushes instruction i pops: their retirement + token latency
        dep_start: list[tuple[int, ...]] = []  # the pops that make room for its pushes: their start + latency
        for x in infos:
            de = []
            for q in x[1]:
                de.append(pushers[q][npop[q]] if npop[q] < len(pushers[q]) else never)
                npop[q] += 1
            ds = []
            for q in x[2]:
                j = npush[q] - qdepth
                if j >= 0:
                    ds.append(poppers[q][j] if j < len(poppers[q]) else never)
                npush[q] += 1
            dep_end.append(tuple(de))
            dep_start.append(tuple(ds))
        self.dep_end, self.dep_start = dep_end, dep_start
        self.runs_on, self.gemm_prev = beside_plan(cfg, self.eng, self.ops, [x[2] for x in infos])
        self.ahead = ahead_plan(cfg, self.eng, self.ops, [x[1] for x in infos])
        # the evaluation order: the uncached model's work list (dispatch in program order while the FIFO has room,
        # then each engine as far as its tokens allow), with "computed" in place of times
        seq: list[int] = []  # i >= 0: dispatch i; ~i: start (and retire) i
        ready = [False] * (n + 1)
        head = [0, 0, 0]
        nd = done = 0
        room_a, room_b = self.room_a, self.room_b
        while done < n:
            moved = False
            while nd < n and not (room_a[nd] >= 0 and room_b[nd] >= 0 and not ready[room_b[nd]]):
                seq.append(nd)
                nd += 1
                moved = True
            for e in range(3):
                lst, h = order[e], head[e]
                while h < len(lst):
                    i = lst[h]
                    if i >= nd or not all(ready[j] for j in dep_end[i]) or not all(ready[j] for j in dep_start[i]):
                        break
                    ready[i] = True
                    seq.append(~i)
                    h += 1
                    done += 1
                    moved = True
                head[e] = h
            if not moved:
                blocked = min(order[e][head[e]] for e in range(3) if head[e] < len(order[e]))
                pu = [sum(ready[j] for j in pushers[q]) for q in range(4)]
                po = [sum(ready[j] for j in poppers[q]) for q in range(4)]
                raise deadlock_error(blocked, infos[blocked][3], infos[blocked][0], pu, po)
        self.seq = seq
        self.prev_or_n = [n if k < 0 else k for k in self.prev]
        self.zeros = [0] * n
        self._count()

    def _count(self) -> None:
        """Instructions per (signature, engine), and the ops in order of first appearance."""
        counts: dict[tuple[int, int], int] = {}
        for s, e in zip(self.sig, self.eng, strict=True):
            counts[(s, e)] = counts.get((s, e), 0) + 1
        self.counts = counts
        self.op_order = list(dict.fromkeys(self.ops))

    def patched(self, words: list[int], changed: Sequence[int]) -> ProgramPlan | None:
        """This plan for ``words``, which differ from its own at ``changed``; None when a change moves an engine,
        a token flag or an op (then the program needs its own analysis)."""
        t = _table(self.cfg)
        new = [(i, t.info(words[i])) for i in changed if i < self.n]
        for i, x in new:
            if x[0] != self.eng[i] or x[3] != self.ops[i] or x[4] - 1 != self.dec1[i] or \
                    self._queues(i) != (x[1], x[2]):
                return None
        q = object.__new__(ProgramPlan)
        q.__dict__.update(self.__dict__)
        q.words = words
        q.sig = list(self.sig)
        counts = dict(self.counts)
        for i, x in new:
            old, e = q.sig[i], q.eng[i]
            counts[(old, e)] -= 1
            if not counts[(old, e)]:
                del counts[(old, e)]
            q.sig[i] = x[5]
            counts[(x[5], e)] = counts.get((x[5], e), 0) + 1
        q.counts = counts
        return q

    def _queues(self, i: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return _table(self.cfg).info(self.words[i])[1:3]

    def time(self, p):
        """The :class:`~systolica.sim.perf.PerfResult` of this program under timing parameters ``p``."""
        cost_ex, cost_arr, cost_rd, cost_wr, cost_macs, cost_gain, cost_issue, cost_tail = _table(self.cfg).costs(p)
        sig = self.sig
        ex = [cost_ex[s] for s in sig]
        load = ([cost_issue[s] for s in sig], [cost_tail[s] for s in sig])  # the load engine's words (sim/perf_load.py)
        rd_total = sum(cost_rd[s] * c for (s, _e), c in self.counts.items())
        wc = int(round(max(1, WORD_BYTES // self.cfg.dma_bytes) * p.beat_cycles))
        saved = [0] * self.n  # cycles each GEMM_STREAM gains from its weights read ahead (config.wstream_ahead)
        # the GEMM_STREAMs that read weights (as the uncached model's rd_beats says): their ports may read ahead
        ahead_on = None if self.ahead is None else [op == "GEMM_STREAM" and cost_rd[s] > 0
                                                   for op, s in zip(self.ops, sig, strict=True)]
        gains = [cost_gain[s] for s in sig] if self.cfg.wstream_pairs else None
        start, end, arrivals = self._replay(ex, None, None, p, wc, load, saved=saved, ahead_on=ahead_on,
                                             gains=gains)
        exl = ex
        if p.fetch_contention and rd_total:
            reps = _table(self.cfg).reps
            busy0 = [port0_busy(self.cfg, reps[k].op, cost_rd[k], p.beat_cycles) for k in range(len(reps))]
            tail0 = [port0_tail(self.cfg, reps[k].op, busy0[k], p) for k in range(len(reps))]
            rdb = [busy0[s] for s in sig]
            exl = list(ex)
            saved = [0] * self.n
            start, end, _ = self._replay(exl, rdb, arrivals, p, wc, load, [tail0[s] for s in sig], saved=saved,
                                         ahead_on=ahead_on, gains=gains)
        busy = [0, 0, 0]
        per_sig_op: dict[str, int] = dict.fromkeys(self.op_order, 0)
        ops_of = _table(self.cfg).reps
        array_busy = wr = macs = 0
        for (s, e), c in self.counts.items():
            busy[e] += cost_ex[s] * c
            per_sig_op[ops_of[s].op] += cost_ex[s] * c
            array_busy += cost_arr[s] * c
            wr += cost_wr[s] * c
            macs += cost_macs[s] * c
        if exl is not ex:  # the read-port contention stretched LOADs and GEMM_STREAMs (gmem0's read channels)
            for i, (a, b) in enumerate(zip(exl, ex, strict=True)):
                if a != b:
                    busy[self.eng[i]] += a - b
                    per_sig_op[self.ops[i]] = per_sig_op.get(self.ops[i], 0) + a - b
        for i, v in enumerate(saved):
            if v:
                busy[self.eng[i]] -= v
                per_sig_op[self.ops[i]] -= v
        busy[0] = load_busy(self.load_words, start, end)
        pad = [-1] * (len(self.words) - self.n)
        ibeats = max(1, WORD_BYTES // self.cfg.dma_bytes)
        return PerfResult(cycles=max(end) + RUN_END, start=start + pad, end=end + pad,
                          engine_busy=(busy[0], busy[1], busy[2]), array_busy=array_busy,
                          dma_beats=rd_total + self.n * ibeats, dma_wr_beats=wr, macs=macs, instructions=self.n,
                          per_op_cycles=per_sig_op, beside_cycles=beside_cycles(self.runs_on, self.ops, start, end))

    def _replay(self, ex: list[int], rdb: list[int] | None, seen: list[int] | None, p, wc: int,
                load: tuple[list[int], list[int]], tails: list[float] | None = None, saved: list[int] | None = None,
                ahead_on: list[bool] | None = None, gains: list[int] | None = None):
        """One pass of the schedule in the fixed order; with ``rdb`` and ``seen`` (the first pass's fetch
        arrivals), the words fetched during a LOAD or GEMM_STREAM stretch it (``ex`` is updated in place);
        ``saved[i]``: the cycles GEMM_STREAM ``i`` gains from its weights read ahead (``ex`` keeps them), for the
        streams ``ahead_on`` marks, with ``gains[i]`` its ``OpCost.pair_gain``."""
        n = self.n
        disp = [0] * n
        take = [0] * n
        start = [-1] * n
        end = [-1] * n + [-(1 << 62)]  # end[n]: the "previous instruction" of an engine's first one
        ret = [-1] * n + [-(1 << 62)]  # retirement: end, or a GEMM_STREAM's that runs on (config.attn_beside)
        runs_on, gemm_prev = self.runs_on, self.gemm_prev
        cfg, ahead = self.cfg, self.ahead
        saved = saved if saved is not None else [0] * n
        gains = gains if gains is not None else self.zeros
        early = [0] * n  # config.wstream_pairs: cycles a stream's ports finish before its array beyond the usual
        arrivals = [0] * n
        dec1, room_a, room_b = self.dec1, self.room_a, self.room_b
        prev, dep_end, dep_start = self.prev_or_n, self.dep_end, self.dep_start
        eng, (issue, tail) = self.eng, load
        rdb = rdb if rdb is not None else self.zeros
        lat = p.token_latency
        arrival = RUN_OVERHEAD + FETCH_START + p.fetch_latency + rd_round_trip(p)  # fetch starts with the run
        refill = 1 + FETCH_REFILL + rd_round_trip(p) + p.fetch_latency + wc
        first_beat = 3 + rd_round_trip(p)  # the DMA's first address two cycles after start (hw/dma.py)
        fifo = FETCH_FIFO
        dec_free = 0
        for x in self.seq:
            if x >= 0:  # the decoder takes word x and dispatches it
                arrival += wc
                if x >= fifo:
                    v = take[x - fifo] + refill
                    if v > arrival:
                        arrival = v
                arrivals[x] = arrival
                t = arrival if arrival > dec_free else dec_free
                take[x] = t
                d = t + dec1[x]
                j = room_a[x]
                if j >= 0:
                    k = room_b[x]
                    if k < 0:
                        v = disp[j] + 2
                    else:
                        v = ret[k] + 1
                        w = disp[j] + 1
                        v = (v if v > w else w) + 1
                    if v > d:
                        d = v
                disp[x] = d
                dec_free = d + 1
            else:  # instruction i leaves POP, runs EXEC, retires
                i = ~x
                s = disp[i] + 2
                v = ret[prev[i]] + 2
                if v > s:
                    s = v
                g = gemm_prev[i]
                if g >= 0:  # held in POP until that stream's work is done
                    v = end[g] + GEMM_HOLD_GAP
                    if v > s:
                        s = v
                de = dep_end[i]
                if de:
                    for j in de:
                        v = end[j] + lat
                        if v > s:
                            s = v
                ds = dep_start[i]
                if ds:
                    for j in ds:
                        v = start[j] + lat
                        if v > s:
                            s = v
                start[i] = s
                e = ex[i]
                if ahead is not None and ahead_on[i]:  # its weights read ahead (config.wstream_ahead)
                    ps, pb = ahead[0][i], ahead[1][i]
                    if pb != i:
                        v, early[i] = ahead_saving(cfg, p, s, disp[i], end[ps] - early[ps] if ps >= 0 else 0,
                                                   start[pb] if pb >= 0 else 0, gains[i])
                        saved[i] = v
                        e -= v
                if rdb[i]:  # port 0's own busy cycles of a LOAD or GEMM_STREAM
                    st = fetch_stretch(seen, s, e, first_beat, wc, rdb[i], tails[i])
                    e += st
                    ex[i] += st
                if eng[i] == 0:  # the load engine: its words overlap, their data and pushes in order
                    end[i], ret[i] = load_end(s, s + e + 1, issue[i], tail[i], end[prev[i]])
                else:
                    end[i] = s + e + 1
                    ret[i] = s + RUNS_ON_EXEC + 1 if runs_on[i] else end[i]
        del end[n]
        return start, end, arrivals


def plan_for(cfg: AccelConfig, words: Sequence[int], *, copy: bool = True) -> ProgramPlan:
    """The plan of ``words`` on ``cfg``: cached; a program that differs from a recently planned one of the same
    length in a few words that keep every engine, token flag and op reuses that plan.  ``copy=False``: ``words``
    is a list of Python ints the caller will not change (kept as it is).

    Raises
    ------
    PerfError
        An illegal word before FINISH, no FINISH, or a token deadlock.
    """
    words = [int(w) for w in words] if copy else words
    plans = _PLANS.setdefault(cfg, [])
    n = len(words)
    key = hash(tuple(words))
    for k, pl in enumerate(plans):
        if pl.key == key and pl.words == words:
            if k:
                plans.insert(0, plans.pop(k))
            return pl
    limit = max(64, n // 8)  # a decode step of a small model patches ~1/7 of its words
    for pl in plans:
        if len(pl.words) != n:
            continue
        changed = []
        for i, a, b in zip(range(n), words, pl.words):  # noqa: B905 - equal lengths checked above
            if a != b:
                changed.append(i)
                if len(changed) > limit:
                    break
        if len(changed) <= limit:
            q = pl.patched(words, changed)
            if q is not None:
                _remember(plans, q)
                return q
    t = _table(cfg)
    infos = []
    for w in words:
        info = t.info(w)
        infos.append(info)
        if info[3] == "FINISH":
            break
    else:
        raise PerfError(f"program of {n} words has no FINISH: the hardware would fault with PROGRAM_OVERRUN")
    pl = ProgramPlan(cfg, words, infos)
    _remember(plans, pl)
    return pl


def _remember(plans: list[ProgramPlan], pl: ProgramPlan) -> None:
    pl.key = hash(tuple(pl.words))
    plans.insert(0, pl)
    del plans[_PLANS_PER_CONFIG:]
