"""The decoupled engines: a shared token handshake, and the load and store engines.

Every engine runs its own command FIFO in order: take a command, wait until
every queue its ``pop_*`` flags name holds a token and every queue its
``push_*`` flags name has room, pop, execute, push, retire.  An engine waiting
there is *blocked*; the top
level declares a token deadlock when no engine can move any more (see
``accelerator.py``).

Queue names from an engine's point of view: *prev* is the engine before it in
load -> compute -> store, *next* the one after; the decoder has already
refused the flags an engine does not have.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib import enum as aenum
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.isa import WORD_BITS

from .axi import axi4_write_signature
from .buffers import buffer_ports
from .decode import CMD_BITS, instr_layout
from .dma import ADDR_BITS, DmaWriter
from .word_regs import flag_copies, free_room, lane_mux

__all__ = ["EngineState", "engine_members", "token_fsm", "StoreEngine", "buffer_ports", "beats_per_line"]


class EngineState(aenum.Enum, shape=2):
    IDLE = 0
    POP = 1
    EXEC = 2
    PUSH = 3


def engine_members(cfg: AccelConfig) -> dict:
    """Ports every engine has: command input, token queues, status for the top level."""
    return {
        "cmd_valid": In(1), "cmd_ready": Out(1), "cmd_data": In(CMD_BITS),
        "prev_avail": In(1), "next_avail": In(1), "prev_space": In(1), "next_space": In(1),
        "pop_prev": Out(1), "pop_next": Out(1), "push_prev": Out(1), "push_next": Out(1),
        "idle": Out(1), "blocked": Out(1), "executing": Out(1), "retire": Out(1), "pc": Out(32),
    }


def token_fsm(m, eng, cfg: AccelConfig, on_load=None, hold=None, busy=None, push_room=None, behind=None):
    """Command FIFO + pop/exec/push handshake of one engine.

    Returns ``(ins, exec_start, exec_done, state)``: the view of the current word, a
    one-cycle pulse when execution starts, the signal the engine's datapath
    drives when it has finished, and the handshake's state.  ``on_load(next_ins)``, if given, is
    called where the next word is loaded (``next_ins`` views the word leaving the command FIFO), so
    an engine can register what it decodes from the word in the same cycle as the word itself.
    ``hold`` (a signal, optional): while high the word waits in POP, its tokens there or not (the compute
    engine's instruction behind a GEMM_STREAM that still runs); ``busy``: work that outlives its instruction,
    which keeps ``idle`` low.

    An engine that pushes its own tokens (the load engine: a LOAD's push goes out when its last line is in its
    buffer, after the next LOAD has started; hw/load_engine.py) passes ``push_room``, the signal that says its
    pushes will fit (it replaces the queues' ``space``), and ``behind``: earlier instructions' work still under
    way, which counts as executing, keeps ``idle`` low, and is never *blocked* (it will push the tokens the
    word waiting in POP may need).  Its PUSH state then only retires.
    """
    # cmd_depth - 1 queued plus the one being handled: the queue holds cmd_depth instructions like the
    # golden simulator's (which the token-deadlock rule depends on)
    m.submodules.cmds = cmds = fifo.SyncFIFO(width=CMD_BITS, depth=cfg.cmd_depth - 1)
    word = Signal(WORD_BITS, reset_less=True)  # loaded in IDLE before any state reads it: no reset (its ~100 bits
    # in every engine were loads of the engines' reset net)
    ins = data.View(instr_layout(), word)
    h = ins.nop.h
    state = Signal(EngineState)
    exec_start = Signal()
    exec_done = Signal()
    m.d.comb += [cmds.w_en.eq(eng.cmd_valid), cmds.w_data.eq(eng.cmd_data), eng.cmd_ready.eq(cmds.w_rdy)]
    can_pop = (~h.pop_prev | eng.prev_avail) & (~h.pop_next | eng.next_avail)
    can_push = (~h.push_prev | eng.prev_space) & (~h.push_next | eng.next_space) if push_room is None else push_room
    # start only when the pops are there AND the pushes will fit: every queue has a single producer and a
    # single consumer, so the room checked now is still there when the instruction ends (golden's rule)
    idle = (state == EngineState.IDLE) & ~cmds.r_rdy
    blocked = (state == EngineState.POP) & ~(can_pop & can_push)
    executing = state == EngineState.EXEC
    if busy is not None:
        idle = idle & ~busy
    if behind is not None:
        idle, blocked, executing = idle & ~behind, blocked & ~behind, executing | behind
    m.d.comb += [eng.idle.eq(idle), eng.executing.eq(executing), eng.blocked.eq(blocked)]
    go = can_pop & can_push if hold is None else can_pop & can_push & ~hold
    with m.Switch(state):
        with m.Case(EngineState.IDLE):
            m.d.comb += cmds.r_en.eq(1)
            with m.If(cmds.r_rdy):
                m.d.sync += [word.eq(cmds.r_data[:WORD_BITS]), eng.pc.eq(cmds.r_data[WORD_BITS:]),
                             state.eq(EngineState.POP)]
                if on_load is not None:
                    on_load(data.View(instr_layout(), cmds.r_data[:WORD_BITS]))
        with m.Case(EngineState.POP), m.If(go):
            m.d.comb += [eng.pop_prev.eq(h.pop_prev), eng.pop_next.eq(h.pop_next), exec_start.eq(1)]
            m.d.sync += state.eq(EngineState.EXEC)
        with m.Case(EngineState.EXEC), m.If(exec_done):
            m.d.sync += state.eq(EngineState.PUSH)
        with m.Case(EngineState.PUSH):
            if push_room is None:
                with m.If(can_push):
                    m.d.comb += [eng.push_prev.eq(h.push_prev), eng.push_next.eq(h.push_next), eng.retire.eq(1)]
                    m.d.sync += state.eq(EngineState.IDLE)
            else:  # the engine pushes when the instruction's work is done (room was reserved at its start)
                m.d.comb += eng.retire.eq(1)
                m.d.sync += state.eq(EngineState.IDLE)
    return ins, exec_start, exec_done, state


def beats_per_line(cfg: AccelConfig) -> tuple[int, int]:
    """DMA beats of a scratchpad line and of an accumulator / vector-buffer line."""
    spad, wide = cfg.cols, 4 * cfg.cols
    if spad % cfg.dma_bytes:
        raise ValueError(f"a scratchpad line ({spad} bytes, cols={cfg.cols}) must be a whole number of DMA beats "
                         f"({cfg.dma_bytes} bytes, dma_bits={cfg.dma_bits}); use cols >= {cfg.dma_bytes}")
    return spad // cfg.dma_bytes, wide // cfg.dma_bytes


class StoreEngine(wiring.Component):
    """STORE: packed buffer lines -> DRAM rows, through a :class:`DmaWriter`."""

    LINE_FIFO = 4

    def __init__(self, cfg: AccelConfig):
        self.cfg = cfg
        members = engine_members(cfg)
        members |= {"win_base": In(ADDR_BITS), "abort": In(1), "dma_busy": Out(1), "dma_quiet": Out(1),
                    "bus_error": Out(1)}
        for name, (ab, db) in buffer_ports(cfg).items():
            members |= {f"{name}_addr": Out(ab), f"{name}_rdata": In(db), f"{name}_en": Out(1),
                        f"{name}_ready": In(1)}
        members["wr"] = Out(axi4_write_signature(ADDR_BITS, cfg.dma_bits))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        # the buffer a STORE reads, decoded as the word loads: three copies a buffer, each selecting a third of
        # the read line's lanes (one decode of the word's field over 3 x 256 bits was a congested net on ulx3s)
        from_buf = {}

        def on_load(nxt):
            for i in range(len(buffer_ports(cfg))):
                from_buf[i] = flag_copies(m, nxt.store.buf == i, 1, f"from_buf{i}")

        ins, exec_start, exec_done, _ = token_fsm(m, self, cfg, on_load)
        v = ins.store
        m.submodules.dma = dma = DmaWriter(cfg)
        wiring.connect(m, wiring.flipped(self.wr), dma.axi)
        bpl_s, bpl_w = beats_per_line(cfg)
        bpl = Mux(v.buf == 0, bpl_s, bpl_w)
        m.d.comb += [dma.start.eq(exec_start), dma.base.eq(self.win_base), dma.addr.eq(v.dram), dma.stride.eq(v.stride),
                     dma.rows.eq(v.rows), dma.beats.eq(Mux(v.buf == 0, v.lines * bpl_s, v.lines * bpl_w)),
                     dma.abort.eq(self.abort),
                     self.dma_busy.eq(dma.busy), self.dma_quiet.eq(dma.quiet),
                     self.bus_error.eq(dma.bus_error & ~self.abort)]  # reported with self.pc, the transfer's owner
        started = Signal()
        m.d.sync += started.eq(exec_start)
        m.d.comb += exec_done.eq(self.executing & ~started & ~dma.busy)

        # read lines ahead into a small FIFO (one read in flight; sync read ports answer next cycle).  A read is
        # requested from this engine's own registers alone; the port serves compute first, so a request the
        # compute side took the port from is lost and repeated the next cycle (`lost`, a flip-flop).  The
        # compute side's read enable thus reaches only the port's multiplexer, one flip-flop and the address
        # register's count enable here, never the counters: the same cycles as deciding from it, without its
        # path through this engine.
        wide = cfg.cols * 32
        m.submodules.lines = lq = fifo.SyncFIFO(width=wide, depth=self.LINE_FIFO)
        # rows * lines lines to read, counted as rows of lines (a product of two fields would be DSP48s)
        reading = Signal()
        rows_left = Signal(16)
        lines_left = Signal(16)
        # the address a request presents, a register: the next line's, or again the last one's when the port goes
        # to compute this cycle (that request will be lost and repeated).  A select between the last request's
        # address and the next one's sat between flip-flops and the block RAMs' address pins (ulx3s: 11.9 ns)
        addr = Signal(32, name="store_addr")
        pending = Signal()  # a request went out last cycle ...
        served = Signal()  # ... and the port served it (compute did not read then)
        with m.If(exec_start):
            m.d.sync += [reading.eq((v.rows != 0) & (v.lines != 0)), rows_left.eq(v.rows), lines_left.eq(v.lines),
                         addr.eq(v.sram)]
        # the buffer's read port is free unless compute reads it this cycle (compute first)
        free = Mux(v.buf == 0, self.spad_ready, Mux(v.buf == 1, self.acc_ready, self.vbuf_ready))
        lost = pending & ~served
        got = pending & served
        # A request goes out from flip-flops (its enable and address reach the block RAMs of three buffers across
        # the die: the slowest placed paths of the ulx3s top level started at the token handshake's state and
        # the FIFO's level adder): `active` is executing & ~started, loaded from their next values; `room` says
        # a place is free of the FIFO's, its register's and the request in flight's, counting a request the port
        # may yet lose as a line (one slot held a cycle longer, only then).  A lost request is repeated whatever
        # `room` says: its slot was counted when it first went out
        active = Signal(name="store_active")
        m.d.sync += active.eq(self.executing & (started | dma.busy))
        issue = Signal()
        # (free_room: a request claims a place; a line leaving the FIFO and a lost request give one back)
        pop = Signal(name="store_pop")
        room = free_room(m, "store_room", self.LINE_FIFO, issue, pop, lost)
        m.d.comb += issue.eq(active & ((reading & room) | lost))
        # the line read is registered before the FIFO (`staged`: the block RAM's clock-to-data, 5.8 ns on ECP5, and
        # the three buffers' select would otherwise reach the FIFO's LUT-RAM write data in one cycle, 13.9 ns on
        # ulx3s), so a line counts against the room from its request until it leaves the FIFO: request in flight,
        # the register, the FIFO's next level
        staged = Signal(name="store_staged")
        m.d.sync += [pending.eq(issue), served.eq(free)]
        with m.If(issue & free):
            m.d.sync += addr.eq(addr + 1)
        with m.If(issue & ~lost):
            m.d.sync += lines_left.eq(lines_left - 1)
            with m.If(lines_left == 1):
                m.d.sync += [lines_left.eq(v.lines), rows_left.eq(rows_left - 1)]
                with m.If(rows_left == 1):
                    m.d.sync += reading.eq(0)
        # each buffer's read data go into flip-flops as they are, and the buffer's select sits between them and the
        # FIFO's write data: a select before the register left the block RAM's clock-to-data and the routing from
        # three buffers no time at 100 MHz (ulx3s: 12.1 ns into the line register)
        line = 0
        for i, (name, _) in enumerate(buffer_ports(cfg).items()):
            m.d.comb += [getattr(self, f"{name}_addr").eq(addr),
                         getattr(self, f"{name}_en").eq(issue & (v.buf == i))]
            rdata = getattr(self, f"{name}_rdata")
            raw = Signal(len(rdata), name=f"store_line{i}", reset_less=True)  # loaded every cycle: see `staged`
            m.d.sync += raw.eq(rdata)
            line = lane_mux(from_buf[i], raw, line, 32)
        m.d.sync += staged.eq(got)
        m.d.comb += [lq.w_en.eq(staged), lq.w_data.eq(line), pop.eq(lq.r_en & lq.r_rdy)]

        # serialize the head line into beats, lane 0 first (little endian, as the bus and DRAM)
        db = cfg.dma_bits
        beat = Signal(8)
        m.d.comb += [dma.beat_valid.eq(lq.r_rdy), dma.beat_data.eq(lq.r_data.word_select(beat, db))]
        with m.If(dma.beat_valid & dma.beat_ready):
            with m.If(beat == bpl - 1):
                m.d.sync += beat.eq(0)
                m.d.comb += lq.r_en.eq(1)
            with m.Else():
                m.d.sync += beat.eq(beat + 1)
        with m.If(exec_start):
            m.d.sync += beat.eq(0)
        return m
