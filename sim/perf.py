"""The cycle performance model: when each instruction of a program runs, and how long the program takes.

It runs the same programs as the golden simulator and follows the same rules
(``docs/isa.md``), but with time instead of data:

- fetch reads instruction words through the read port (``16 / dma_bytes`` beats a word, a prefetch
  FIFO of 8 words, the read latency at each refill); LOADs and GEMM_STREAM's weight port 0 share it
  (``hw/accelerator.py``), so the words fetched while one of them runs stretch it; the decoder takes one word every 3 cycles
  (TAKE, CHECK, DISPATCH) into the engine's command FIFO (``cmd_depth - 1`` deep) and waits while
  that FIFO is full;
- each engine executes its FIFO in order: IDLE (read the FIFO) -> POP (wait until every queue its
  ``pop_*`` flags name holds a token and every queue its ``push_*`` flags name has room) -> EXEC
  (:func:`~systolica.sim.perf_costs.op_cost` cycles) -> PUSH, as ``hw/engines.py`` does;
- a token pushed at cycle t can be popped from cycle ``t + token_latency``; a queue of ``queue_depth``
  has room for push j once pop ``j - queue_depth`` has happened.

Each token queue has one producer and one consumer engine, so the j-th push and the j-th pop of a
queue are fixed by program order, and the schedule is computed in one pass over a work list (no
cycle-by-cycle stepping): cost ~ a few microseconds per instruction, independent of how many cycles
an instruction takes.

The counters match the hardware's CSRs (:data:`systolica.csr.COUNTERS`): CYCLES, LOAD_BUSY,
COMPUTE_BUSY, STORE_BUSY (cycles in EXEC), ARRAY_BUSY, DMA_BEATS (read beats, fetch included).
:func:`cycle_model` adapts the model to :class:`~systolica.driver.golden_device.GoldenDevice`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from systolica.config import AccelConfig
from systolica.hw.compute_engine import BESIDE_STREAM_OPS
from systolica.hw.decode import decode_cycles
from systolica.isa import WORD_BYTES, Engine, IllegalInstruction, Instr, decode
from systolica.program import Program
from systolica.sim.perf_costs import WSTREAM_STARTUP, OpCost, PerfParams, array_latency, op_cost, rd_round_trip
from systolica.sim.perf_fetch import FETCH_FIFO, FETCH_REFILL, FETCH_START, fetch_stretch, port0_busy, port0_tail
from systolica.sim.perf_load import load_busy, load_end

__all__ = ["PerfModel", "PerfResult", "PerfError", "PerfParams", "cycle_model", "RUN_OVERHEAD", "RUN_END"]

# token queues as in the golden simulator: load->compute, compute->load, compute->store, store->compute
_POP = {(Engine.COMPUTE, "prev"): 0, (Engine.LOAD, "next"): 1, (Engine.STORE, "prev"): 2, (Engine.COMPUTE, "next"): 3}
_STORE_TO_COMPUTE = _POP[(Engine.COMPUTE, "next")]
_PUSH = {(Engine.LOAD, "next"): 0, (Engine.COMPUTE, "prev"): 1, (Engine.COMPUTE, "next"): 2, (Engine.STORE, "prev"): 3}

#: Cycles of a run outside the engines: START -> RUN, and the last retire -> DONE (drain check); the end takes one
#: more (:data:`RUN_END`: the drained flag is a register, hw/accelerator.py)
RUN_OVERHEAD = 2
RUN_END = RUN_OVERHEAD + 1


class PerfError(ValueError):
    """A program the model cannot time: an illegal word, or a token deadlock (with the pc)."""


def decode_timed(word: int) -> Instr:
    """The instruction of ``word``, or :class:`PerfError` naming it: a word the model cannot time."""
    try:
        return decode(word)
    except IllegalInstruction as e:
        raise PerfError(f"cannot time an illegal instruction word {word:#034x}: {e}") from None


def deadlock_error(pc: int, op: str, engine: int, pushes: Sequence[int], pops: Sequence[int]) -> PerfError:
    """The error of a program whose instruction ``pc`` waits forever for a token (pushes / pops per queue)."""
    return PerfError(f"token deadlock: instruction {pc} ({op}) on the {Engine(engine).name.lower()} engine "
                     f"waits forever; pushes/pops per queue: {list(pushes)}/{list(pops)}")


@dataclass
class PerfResult:
    """Timeline of one program run (cycles from START).

    ``start[i]`` is the cycle instruction ``i`` began EXEC, ``end[i]`` the cycle it retired; both -1 for
    instructions after FINISH (never dispatched).
    """

    cycles: int
    start: list[int]
    end: list[int]
    engine_busy: tuple[int, int, int]
    array_busy: int
    dma_beats: int
    dma_wr_beats: int
    macs: int
    instructions: int
    per_op_cycles: dict[str, int] = field(default_factory=dict)
    #: per op, cycles of ATTN / ATTN_OUT that ran beside a GEMM_STREAM running on (config.attn_beside): inside
    #: ``per_op_cycles`` too, but they add no time of their own
    beside_cycles: dict[str, int] = field(default_factory=dict)

    def counters(self) -> dict[str, int]:
        """The cycle CSRs the hardware would report (names of :data:`systolica.csr.COUNTERS`)."""
        return {"CYCLES": self.cycles, "LOAD_BUSY": self.engine_busy[0], "COMPUTE_BUSY": self.engine_busy[1],
                "STORE_BUSY": self.engine_busy[2], "ARRAY_BUSY": self.array_busy, "DMA_BEATS": self.dma_beats}

    def to_dict(self) -> dict:
        return {"cycles": self.cycles, "instructions": self.instructions, "macs": self.macs,
                "dma_beats": self.dma_beats, "dma_wr_beats": self.dma_wr_beats, "per_op_cycles": self.per_op_cycles,
                **{k.lower(): v for k, v in self.counters().items()}}


def _plan(ins: Instr) -> tuple[tuple[int, ...], tuple[int, ...]]:
    e = ins.engine
    pops = tuple(_POP[(e, s)] for s in ("prev", "next") if getattr(ins, f"pop_{s}"))
    pushes = tuple(_PUSH[(e, s)] for s in ("prev", "next") if getattr(ins, f"push_{s}"))
    return pops, pushes


#: attn_beside: EXEC cycles of a GEMM_STREAM that runs on before it retires (begin, then exec_done: the engine goes
#: on), and the cycles from the end of its work to the start of a compute instruction held behind it (the hold
#: drops in POP: no IDLE or POP cycle of its own)
RUNS_ON_EXEC = 2
GEMM_HOLD_GAP = 1
#: what the compute engine issues beside a GEMM_STREAM that runs on: the attention unit's ops and the vector unit's
#: but REQUANT (hw/compute_engine.py)
_BESIDE_OPS = BESIDE_STREAM_OPS


def beside_plan(cfg: AccelConfig, engines: Sequence[int], ops: Sequence[str], pushes: Sequence[tuple]
                ) -> tuple[list[bool], list[int]]:
    """``(runs_on, gemm_prev)`` of a program on ``cfg`` (``config.attn_beside``, hw/compute_engine.py): which
    instructions are GEMM_STREAMs that retire as they start and run on (no pushes), and for each compute
    instruction that waits for such a stream (any but those of ``_BESIDE_OPS``) the last one before it (-1:
    none)."""
    n = len(ops)
    runs_on, gemm_prev = [False] * n, [-1] * n
    if not cfg.attn_beside:
        return runs_on, gemm_prev
    last = -1
    for i in range(n):
        if engines[i] != Engine.COMPUTE:
            continue
        if ops[i] not in _BESIDE_OPS:
            gemm_prev[i] = last
        if ops[i] == "GEMM_STREAM" and not pushes[i]:
            runs_on[i] = True
            last = i
    return runs_on, gemm_prev


def ahead_plan(cfg: AccelConfig, engines: Sequence[int], ops: Sequence[str], pops: Sequence[tuple]
               ) -> tuple[list[int], list[int]] | None:
    """``config.wstream_ahead`` (hw/weight_ahead.py): for each GEMM_STREAM the GEMM_STREAM before it (whose weight
    reads its ports wait for) and the last compute instruction up to it, itself included, that pops a token from
    the store engine (whose pop they wait for); -1: none.  None without the field."""
    if not cfg.wstream_ahead:
        return None
    n = len(ops)
    prev, barrier = [-1] * n, [-1] * n
    last_stream = last_pop = -1
    for i in range(n):
        if engines[i] != Engine.COMPUTE:
            continue
        if _STORE_TO_COMPUTE in pops[i]:  # only a store token says DRAM was written (hw/weight_ahead.py)
            last_pop = i
        if ops[i] == "GEMM_STREAM":
            prev[i], barrier[i] = last_stream, last_pop
            last_stream = i
    return prev, barrier


#: wstream_ahead: cycles from a GEMM_STREAM's dispatch to the earliest start of its weight ports (the queue's write and
#: its registered output)
AHEAD_DISPATCH = 3


def ahead_saving(cfg: AccelConfig, p: PerfParams, s: int, disp: int, prev_done: int, pop_start: int,
                 pair_gain: int = 0) -> tuple[int, int]:
    """``(saved, early)`` of a GEMM_STREAM that starts (POP) at ``s`` with weight ports started ahead of it
    (``config.wstream_ahead``): they start once it is dispatched (``disp``), the stream before has read its weights
    (its ports are done at ``prev_done``, the array's drain after its last weights) and the last pop of a store
    token before it happened (``pop_start``); what they read before ``s`` saves the round trip of its first weights,
    at most ``rd_round_trip + WSTREAM_STARTUP`` and the lines the FIFO holds (a line a port a cycle at full rate).

    With ``config.wstream_pairs`` the lines that arrived before ``s`` are taken two beats a cycle, each saving a
    cycle up to the stream's ``pair_gain`` (:class:`~systolica.sim.perf_costs.OpCost`).  At most the FIFO's lines
    less a round trip: until ``s`` a port asks for no more than its FIFO holds, so once it is full nothing is in
    flight, and the first lines asked for at ``s`` arrive a round trip later, while the array drains two a cycle.  Lines
    read ahead beyond that gain are lines the ports are ahead by at the stream's end: ``early``, the cycles its
    ports finish before its array does beyond the usual (the next stream's ports may start that much sooner)."""
    pf = max(disp + AHEAD_DISPATCH, prev_done - array_latency(cfg), pop_start + 1)
    room = rd_round_trip(p) + WSTREAM_STARTUP
    credit = cfg.wstream_ahead * max(1, cfg.cols // cfg.dma_bytes)
    saved = max(0, min(s - pf, room, credit))
    if not pair_gain:
        return saved, 0
    held = max(0, min(s - pf - room, credit - room))
    extra = min(held, pair_gain)
    return saved + extra, held - extra


def beside_cycles(runs_on: Sequence[bool], ops: Sequence[str], start: Sequence[int], end: Sequence[int]
                  ) -> dict[str, int]:
    """Per op, the cycles of the instructions that may run beside a stream (``_BESIDE_OPS``: ATTN, ATTN_OUT, the
    vector unit's line ops) that overlap a GEMM_STREAM running on (both run on the compute engine in program
    order: a stream's window ``[start, end)`` holds the instructions after it)."""
    out: dict[str, int] = {}
    lo = hi = -1
    for i, op in enumerate(ops):
        if runs_on[i]:
            lo, hi = start[i], end[i]
        elif op in _BESIDE_OPS and start[i] >= 0 and start[i] < hi:
            c = min(end[i], hi) - max(start[i] + 1, lo)  # its EXEC cycles: start + 1 .. end - 1
            if c > 0:
                out[op] = out.get(op, 0) + c
    return out


class PerfModel:
    """Times programs for one accelerator configuration.

    Parameters
    ----------
    cfg : AccelConfig
        The accelerator (array shape, DMA width, burst length, queue depths).
    params : PerfParams, optional
        Timing parameters (latencies, GEMM datapath); default :class:`PerfParams()`.
    cache : bool
        Time through the per-program analysis of :mod:`systolica.sim.perf_plan` (default): a program is
        analysed once and re-timed cheaply under other params or with other patched fields.  ``False`` runs
        the one-pass work list below on every call (the reference the cached path is tested against).

    Examples
    --------
    >>> r = PerfModel(preset("tiny")).run(program)
    >>> r.cycles, r.counters()["ARRAY_BUSY"]
    """

    def __init__(self, cfg: AccelConfig, params: PerfParams | None = None, *, cache: bool = True):
        self.cfg = cfg
        self.p = params or PerfParams()
        self.cache = cache
        self._decoded: dict[int, tuple] = {}  # word -> (engine, pops, pushes, cost, op, decode cycles)
        self._dec_cycles = decode_cycles(cfg)  # TAKE, a CHECK cycle per product of its range checks, DISPATCH

    def _info(self, word: int) -> tuple:
        info = self._decoded.get(word)
        if info is None:
            ins = decode_timed(word)
            pops, pushes = _plan(ins)
            info = (int(ins.engine), pops, pushes, op_cost(self.cfg, self.p, ins), ins.op,
                    self._dec_cycles[ins.op])
            if len(self._decoded) < 1 << 18:
                self._decoded[word] = info
        return info

    def run(self, program: Program | Sequence[int]) -> PerfResult:
        """Time ``program`` (a :class:`~systolica.program.Program` or its 128-bit words) from START to DONE."""
        words = program.words if isinstance(program, Program) else [int(w) for w in program]
        if isinstance(program, Program):
            program.check_config(self.cfg)
        if self.cache:  # the program's analysis once (systolica.sim.perf_plan), then the timing of these params
            from systolica.sim.perf_plan import plan_for

            return plan_for(self.cfg, words, copy=isinstance(program, Program)).time(self.p)
        return self._run_uncached(words)

    def run_without(self, program: Program | Sequence[int], free: Callable[[Instr], bool]) -> PerfResult:
        """A what-if: ``program`` timed with every instruction ``free`` picks taking one cycle (its tokens, and so
        every dependence, kept).  ``run(p).cycles - run_without(p, free).cycles`` is what those instructions add to
        the run -- time beside other work costs nothing, time on the critical path counts (``systolica bench``:
        what attention and its KV pages add to a decode step).  Always the one-pass work list (``cache`` is not
        used)."""
        words = program.words if isinstance(program, Program) else [int(w) for w in program]
        return self._run_uncached(words, free)

    def _run_uncached(self, words: list[int], free: Callable[[Instr], bool] | None = None) -> PerfResult:
        infos = []
        for _pc, w in enumerate(words):
            info = self._info(w)
            if free is not None and free(decode_timed(w)):
                info = info[:3] + (OpCost(1),) + info[4:]
            infos.append(info)
            if info[4] == "FINISH":
                break
        else:
            raise PerfError(f"program of {len(words)} words has no FINISH: the hardware would fault with "
                            "PROGRAM_OVERRUN")
        res, arrivals = self._schedule(infos, len(words), None)
        if self.p.fetch_contention and any(i[3].rd_beats for i in infos):
            # fetch words that arrive during a LOAD depend on when that LOAD frees its command FIFO slot:
            # time the program again with the first pass's arrivals (one more pass changes < 0.5%)
            res, _ = self._schedule(infos, len(words), arrivals)
        return res

    def _schedule(self, infos: list[tuple], n_words: int, known: list[int] | None) -> tuple[PerfResult, list[int]]:
        cfg, p = self.cfg, self.p
        n = len(infos)
        fifo = cfg.cmd_depth - 1
        qdepth = cfg.queue_depth
        ibeats = max(1, WORD_BYTES // cfg.dma_bytes)
        word_cycles = int(round(ibeats * p.beat_cycles))
        lat = p.token_latency
        # per engine: the program indices it runs, and where each instruction is in that list
        order: list[list[int]] = [[], [], []]
        slot = [0] * n
        for i, info in enumerate(infos):
            slot[i] = len(order[info[0]])
            order[info[0]].append(i)
        take = [0] * n  # cycle the decoder takes word i
        disp = [0] * n  # cycle it is dispatched
        start = [-1] * n  # first EXEC cycle - 1 (the exec_start cycle in POP)
        end = [-1] * n  # retire cycle (PUSH)
        pushes: list[list[int]] = [[], [], [], []]  # cycle of each push, per queue
        pops: list[list[int]] = [[], [], [], []]
        head = [0, 0, 0]
        engine_free = [0, 0, 0]  # first cycle the engine may read its next command
        eng_l = [x[0] for x in infos]
        qpop_l = [x[1] for x in infos]
        qpush_l = [x[2] for x in infos]
        exec_l = [x[3].exec_cycles for x in infos]
        rdb_l = [x[3].rd_beats for x in infos]
        issue_l = [x[3].issue_cycles for x in infos]
        tail_l = [x[3].tail for x in infos]
        exl = list(exec_l)  # EXEC cycles with the read-port contention added
        early = [0] * n  # config.wstream_pairs: cycles a stream's ports finish before its array beyond the usual
        runs_on, gemm_prev = beside_plan(cfg, eng_l, [x[4] for x in infos], qpush_l)
        ahead = ahead_plan(cfg, eng_l, [x[4] for x in infos], qpop_l)
        ret = [-1] * n  # retire cycle (PUSH): end, or for a GEMM_STREAM that runs on, a cycle after it began
        first_beat = 3 + rd_round_trip(p)  # the DMA's first address two cycles after start (hw/dma.py)
        nd = 0  # next word to dispatch
        arrival_prev = RUN_OVERHEAD + FETCH_START + p.fetch_latency + rd_round_trip(p)  # fetch starts with the run
        dec_free = 0
        done = 0
        arrivals: list[int] = []  # cycle each fetched word arrived (the read port carried its beats before)
        load_port = self.p.fetch_contention and known is not None
        seen = known if known is not None else arrivals
        while done < n:
            moved = False
            while nd < n:  # dispatch in program order while the engine's FIFO has room
                e = eng_l[nd]
                k = slot[nd]
                if k >= fifo:  # room once instruction k - fifo left the FIFO (IDLE after its predecessor retired)
                    j = order[e][k - fifo]
                    if slot[j] == 0:
                        room = disp[j] + 2
                    else:
                        prev = ret[order[e][slot[j] - 1]]
                        if prev < 0:
                            break
                        room = max(prev + 1, disp[j] + 1) + 1
                else:
                    room = 0
                # word nd arrives one word time after the previous; a refill after the FIFO ran full waits
                # for the decoder to free a slot, then pays the read latency again
                arrival = arrival_prev + word_cycles
                if nd >= FETCH_FIFO:
                    arrival = max(arrival, take[nd - FETCH_FIFO] + 1 + FETCH_REFILL + rd_round_trip(p) + p.fetch_latency
                                  + word_cycles)
                arrival_prev = arrival
                arrivals.append(arrival)
                take[nd] = t = max(arrival, dec_free)
                disp[nd] = d = max(t + infos[nd][5] - 1, room)
                dec_free = d + 1
                nd += 1
                moved = True
            for e in range(3):
                lst = order[e]
                nl = len(lst)
                h = head[e]
                while h < nl:
                    i = lst[h]
                    if i >= nd:
                        break
                    ready = engine_free[e]
                    di = disp[i] + 1
                    if di > ready:
                        ready = di
                    idle_i = ready  # IDLE: the engine reads the FIFO once it is free and the word is there
                    ok = True
                    for q in qpop_l[i]:
                        jq = len(pops[q])
                        pq = pushes[q]
                        if jq >= len(pq):
                            ok = False
                            break
                        t_ = pq[jq] + lat
                        if t_ > ready:
                            ready = t_
                    if not ok:
                        break
                    for q in qpush_l[i]:
                        jq = len(pushes[q]) - qdepth
                        if jq >= 0:
                            po = pops[q]
                            if jq >= len(po):
                                ok = False
                                break
                            t_ = po[jq] + lat
                            if t_ > ready:
                                ready = t_
                    if not ok:
                        break
                    g = gemm_prev[i]
                    if g >= 0 and end[g] + GEMM_HOLD_GAP > ready:  # held in POP until that stream's work is done
                        ready = end[g] + GEMM_HOLD_GAP
                    s = ready if ready > idle_i else idle_i + 1  # the POP state is at least one cycle after IDLE
                    start[i] = s
                    for q in qpop_l[i]:
                        pops[q].append(s)
                    ex = exec_l[i]
                    if ahead is not None and rdb_l[i] and infos[i][4] == "GEMM_STREAM":  # its weights read ahead
                        ps, pb = ahead[0][i], ahead[1][i]
                        if pb != i:
                            v, early[i] = ahead_saving(cfg, p, s, disp[i], end[ps] - early[ps] if ps >= 0 else 0,
                                                       start[pb] if pb >= 0 else 0, infos[i][3].pair_gain)
                            ex -= v
                            exl[i] = ex
                    if load_port and rdb_l[i]:  # a LOAD, or a GEMM_STREAM (weight port 0 shares gmem0)
                        b0 = port0_busy(cfg, infos[i][4], rdb_l[i], p.beat_cycles)
                        ex += fetch_stretch(seen, s, ex, first_beat, word_cycles, b0,
                                            port0_tail(cfg, infos[i][4], b0, p))
                        exl[i] = ex
                    r = s + ex + 1
                    if e == 0:  # the load engine: its words overlap, their data and pushes in order
                        r, ret[i] = load_end(s, r, issue_l[i], tail_l[i], end[lst[h - 1]] if h else -1)
                    else:
                        ret[i] = s + RUNS_ON_EXEC + 1 if runs_on[i] else r
                    end[i] = r
                    for q in qpush_l[i]:
                        pushes[q].append(r)
                    engine_free[e] = ret[i] + 1
                    h += 1
                    done += 1
                    moved = True
                head[e] = h
            if not moved:
                blocked = min(order[e][head[e]] for e in range(3) if head[e] < len(order[e]))
                raise deadlock_error(blocked, infos[blocked][4], infos[blocked][0],
                                     [len(x) for x in pushes], [len(x) for x in pops])
        last = max(end)
        fetch_beats = n * ibeats
        busy = [0, 0, 0]
        per_op: dict[str, int] = {}
        for i, info in enumerate(infos):
            busy[info[0]] += exl[i]
            per_op[info[4]] = per_op.get(info[4], 0) + exl[i]
        busy[0] = load_busy(order[0], start, end)
        array_busy = sum(x[3].array_busy for x in infos)
        rd = sum(rdb_l)
        wr = sum(x[3].wr_beats for x in infos)
        macs = sum(x[3].macs for x in infos)
        return PerfResult(cycles=last + RUN_END, start=start + [-1] * (n_words - n),
                          end=end + [-1] * (n_words - n), engine_busy=(busy[0], busy[1], busy[2]),
                          array_busy=array_busy, dma_beats=rd + fetch_beats, dma_wr_beats=wr, macs=macs,
                          instructions=n, per_op_cycles=per_op,
                          beside_cycles=beside_cycles(runs_on, [x[4] for x in infos], start, end)), arrivals


def cycle_model(cfg: AccelConfig, params: PerfParams | None = None) -> Callable[[Sequence[int], object], dict]:
    """A ``cycle_model`` for :class:`~systolica.driver.golden_device.GoldenDevice`.

    The returned callable takes the program words the device fetched and the golden simulator's
    counters and returns the cycle CSRs (CYCLES, LOAD_BUSY, COMPUTE_BUSY, STORE_BUSY, ARRAY_BUSY,
    DMA_BEATS), so the runtime's metrics report time at the board's clock.  A run that faulted is
    timed up to the instructions that ran (the counters say how many).
    """
    model = PerfModel(cfg, params)

    def timed(words: Sequence[int], counters=None) -> dict[str, int]:
        try:
            return model.run(words).counters()
        except PerfError:
            return {}  # a faulting program: the golden device reports the fault; no time is claimed

    timed.model = model  # type: ignore[attr-defined]
    return timed
