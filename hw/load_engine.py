"""The load engine: LOAD (DRAM rows -> packed buffer lines), the next LOAD asking while this one's beats arrive.

A LOAD has two halves: asking for its bursts (the reader's walker, a few cycles a burst) and taking its beats,
a DRAM round trip later.  Run one after the other, every LOAD pays its round trip with nothing else in flight:
~30 cycles of a KV page's ~670 at 200 MHz, and the pages' LOADs are what bounds a decode step's attention at
long context (docs/performance.md).  So the engine runs in two stages:

- **issue**: the token handshake (hw/engines.py: ``token_fsm``) pops the LOAD's tokens and starts the reader;
  the instruction leaves EXEC once its last burst is asked for (the reader's ``issuing`` falls), and the next
  word may start then, while this one's beats still arrive.  The reader answers in order (one AXI ID), so the
  next LOAD's beats come after these.
- **data**: a FIFO of *descriptors* (buffer, line address, rows, lines, push flag, PC; :data:`DESC_DEPTH` words
  owed at most), one per started word,
  says where the arriving beats go.  Lines are assembled from beats and queued for their buffer's write port;
  the line queue's entries carry their own address and buffer, and the LOAD's last line carries its push.  A
  word's ``push_next`` token goes out when that last line is written, so a consumer never sees a LOAD's token
  before its data, and tokens leave in program order.

A word that moves no beats (a NOP on the load engine, or a LOAD of zero rows or lines) still goes through the
descriptor FIFO: it queues an entry that writes nothing and carries its push, so its token too waits for the
LOADs before it.  Room for the pushes is reserved at the start: a word that pushes starts only while the
queue's tokens plus the pushes still owed fit its depth.  While data is owed the engine is neither idle nor
blocked (the token-deadlock check: what it owes will move the queues).  A bus error is reported with the PC of
the LOAD whose beat it came with (its descriptor's), not of the word issuing behind it.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.isa import OP_BY_NAME

from .axi import axi4_read_signature
from .dma import ADDR_BITS, DmaReader
from .engines import EngineState, beats_per_line, buffer_ports, engine_members, token_fsm
from .striped_reader import StripedReader
from .word_regs import free_room, word_reg

__all__ = ["LoadEngine", "DESC_DEPTH"]

#: started words whose data is still owed: the one taking beats and those asking for bursts or waiting behind it
DESC_DEPTH = 4


def _desc_layout() -> data.StructLayout:
    return data.StructLayout({"sram": 16, "buf": 2, "lines_m1": 16, "rows_m1": 16, "empty": 1, "push": 1,
                              "pc": 32})


class LoadEngine(wiring.Component):
    """LOAD: DRAM rows -> packed buffer lines, through a :class:`DmaReader` (or a :class:`StripedReader` over
    ``config.load_ports`` ports); up to :data:`DESC_DEPTH` started words owe their data (see the module docstring)."""

    def __init__(self, cfg: AccelConfig):
        self.cfg = cfg
        members = engine_members(cfg)
        members |= {"win_base": In(ADDR_BITS), "abort": In(1), "dma_busy": Out(1), "dma_quiet": Out(1),
                    "bus_error": Out(1), "bus_pc": Out(32), "next_count": In(range(cfg.queue_depth + 1))}
        for name, (ab, db) in buffer_ports(cfg).items():
            members |= {f"{name}_addr": Out(ab), f"{name}_data": Out(db), f"{name}_en": Out(1),
                        f"{name}_ready": In(1)}
        members["rd"] = Out(axi4_read_signature(ADDR_BITS, cfg.dma_bits))
        # config.load_ports > 1: the transfer's bursts striped over that many read ports (hw/striped_reader.py)
        members |= {f"rd{p}": Out(axi4_read_signature(ADDR_BITS, cfg.dma_bits)) for p in range(1, cfg.load_ports)}
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.desc = desc = fifo.SyncFIFOBuffered(width=_desc_layout().size, depth=DESC_DEPTH)
        wide = cfg.cols * 32
        # lines (and the empty words' markers) wait here for their buffer's write port: address, buffer, write,
        # end of the word, its push, the line.  A beat is taken only while there is room, so the R channel is held
        # (rready low) instead of dropping data, and the port's ready (the buffer's arbitration) only pops the
        # queue: no path from it into the line assembly
        entry = data.StructLayout({"addr": 32, "buf": 2, "write": 1, "end": 1, "push": 1, "line": wide})
        # The head is a register (SyncFIFOBuffered): it drives the buffers' write addresses and data, and out of
        # the FIFO's LUT RAM they went through the write port's select into the block RAMs in one cycle (ulx3s:
        # `load.lines` -> `spad_w_mem`'s write address, 12.0 ns, 151 endpoints).  Four places: a line a cycle
        # (one-beat lines) needs the register's, the output register's, the head's and the room's a cycle ahead
        m.submodules.lines = lq = fifo.SyncFIFOBuffered(width=entry.size, depth=4)
        owed = Signal()  # started words whose data or push is still to come
        staged = Signal(name="line_staged")  # (below) a line in the register before the line FIFO
        push_r = Signal(name="push_r")  # (below) a push on its way out
        m.d.comb += owed.eq((desc.level != 0) | staged | lq.r_rdy | push_r)
        room = Signal()
        ins, exec_start, exec_done, state = token_fsm(m, self, cfg, hold=~desc.w_rdy, push_room=room, behind=owed)
        v, h = ins.load, ins.nop.h

        # ---- pushes: reserved at the start, sent when the word's last line is written
        owed_push = Signal(range(cfg.queue_depth + 2))
        m.d.comb += room.eq(~h.push_next | (self.next_count + owed_push < cfg.queue_depth))
        head = data.View(entry, lq.r_data)
        ready = Mux(head.buf == 0, self.spad_ready, Mux(head.buf == 1, self.acc_ready, self.vbuf_ready))
        popped = lq.r_rdy & (~head.write | ready)
        pushed = popped & head.end & head.push
        # the token goes out a cycle after its line is written (a register: the buffer's write port's arbitration,
        # compute's write enable, reached the token queue's count and flags in one cycle, 12.6 ns on ulx3s); the
        # reservation is returned with it
        m.d.sync += push_r.eq(pushed)
        m.d.comb += [lq.r_en.eq(popped), self.push_next.eq(push_r)]
        m.d.sync += owed_push.eq(owed_push + (exec_start & h.push_next) - push_r)
        for i, (name, (_, dbits)) in enumerate(buffer_ports(cfg).items()):
            m.d.comb += [getattr(self, f"{name}_addr").eq(head.addr),
                         getattr(self, f"{name}_data").eq(head.line[wide - dbits:]),
                         getattr(self, f"{name}_en").eq(lq.r_rdy & head.write & (head.buf == i))]

        is_load = h.opcode == OP_BY_NAME["LOAD"].code
        new = Signal(_desc_layout())
        m.d.comb += [new.sram.eq(v.sram), new.buf.eq(v.buf), new.lines_m1.eq(v.lines - 1), new.rows_m1.eq(v.rows - 1),
                     new.empty.eq(~is_load | (v.rows == 0) | (v.lines == 0)), new.push.eq(h.push_next),
                     new.pc.eq(self.pc)]
        m.d.comb += [desc.w_en.eq(exec_start), desc.w_data.eq(new.as_value())]

        # ---- issue: the reader walks this word's bursts; the word leaves EXEC once it has asked for them all
        if cfg.load_ports > 1:
            m.submodules.dma = dma = StripedReader(cfg, cfg.load_ports)
            for p in range(1, cfg.load_ports):
                wiring.connect(m, wiring.flipped(getattr(self, f"rd{p}")), getattr(dma, f"axi{p}"))
        else:
            m.submodules.dma = dma = DmaReader(cfg)
        wiring.connect(m, wiring.flipped(self.rd), dma.axi)
        bpl_s, bpl_w = beats_per_line(cfg)
        m.d.comb += [dma.start.eq(exec_start & ~new.empty), dma.base.eq(self.win_base), dma.addr.eq(v.dram), dma.stride.eq(v.stride),
                     dma.rows.eq(v.rows), dma.beats.eq(Mux(v.buf == 0, v.lines * bpl_s, v.lines * bpl_w)),
                     dma.abort.eq(self.abort), self.dma_busy.eq(dma.busy), self.dma_quiet.eq(dma.quiet)]
        started = Signal()
        m.d.sync += started.eq(exec_start)
        m.d.comb += exec_done.eq((state == EngineState.EXEC) & ~started & ~dma.issuing)

        # ---- data: beats -> lines of the word at the head of the descriptor FIFO
        d = data.View(_desc_layout(), desc.r_data)
        db = cfg.dma_bits
        asm = Signal(wide, reset_less=True)  # the newest beat enters at the top of a shift register
        nxt = Signal(wide)
        m.d.comb += nxt.eq(Cat(asm[db:], dma.beat_data)) if wide > db else nxt.eq(dma.beat_data)
        bpl = Mux(d.buf == 0, bpl_s, bpl_w)
        count = Signal(8)  # beats of the line so far
        # lines of the word and rows so far: cleared while the head is not `seen` (always a cycle between two
        # words, and the cycles after a reset), not at the word's end: reset-less, so their set/reset is that one
        # register (ulx3s: the engines' reset or'ed with the beat's `word_end` was on them, 11.8 ns)
        line = Signal(32, reset_less=True)
        in_row = Signal(16)  # lines of the row so far
        row = Signal(16, reset_less=True)
        # "the beat ends its line, the line its row, the row its word" are flip-flops (c_last, r_last, w_last),
        # loaded from a candidate for each way the counters may move and the head's fields, the select late: no path
        # from the head's fields through 16-bit compares into the FIFO's read enable (ECP5: desc.r_rdy -> r_data
        # had been the LOAD engine's slowest path, 7 stages).  So a new head (after a pop, or into an empty FIFO)
        # waits a cycle (``seen``) before its first beat or marker, while the flags take its fields
        # The head is popped the cycle after its last beat or marker (``done``, a register): the pop is the FIFO's
        # output register's enable (its 84 bits) and pointer's, and decided in the cycle of the beat it ran from the
        # R channel's valid through the flags into them (ECP5: 13.4 ns, the LOAD engine's slowest path).  The head
        # takes nothing in that cycle (``seen`` low), so a word's beats follow the previous word's two cycles apart
        desc_end = Signal(name="desc_end")  # the head's last beat (or its marker) is taken
        seen = Signal()  # the head was there last cycle, was not popped and had not ended
        done = Signal(name="desc_done")
        # `seen` split by the head's `empty` as flip-flops of their own (the head holds while it is seen, so its
        # field is next cycle's): a beat's take is the R channel's valid, abort, `seen_beats` and the room, where
        # the FIFO's valid, `seen`, the head's field and the room were a LUT of their own before it
        seen_n = Signal(name="seen_n")
        seen_b, seen_m = Signal(name="seen_beats"), Signal(name="seen_marker")
        m.d.comb += seen_n.eq(desc.r_rdy & ~desc.r_en & ~desc_end)
        m.d.sync += [seen.eq(seen_n), seen_b.eq(seen_n & ~d.empty), seen_m.eq(seen_n & d.empty)]
        # a line (or marker) is registered before the line FIFO (``staged``): its write enable, decided from the R
        # channel's valid and the flags, reached the FIFO's LUT-RAM write enables and level in one cycle (ulx3s:
        # 13.8 ns, the top level's slowest path); the room for it is a register kept from a count of the places of
        # the FIFO and its register not claimed (free_room)
        claim = Signal(name="lines_claim")
        lq_room = free_room(m, "lines_room", lq.depth, claim, lq.r_en & lq.r_rdy)
        takes = seen_b & lq_room
        take = dma.beat_valid & takes
        m.d.comb += dma.beat_ready.eq(takes)
        # the flags' products too (cr_last: the beat ends its row, crw_last: its word) are flip-flops: the ends of a
        # line, a row and a word are each `take` and one flag, not a chain of ANDs (ulx3s: the R channel's valid ran
        # through take, line_end, row_end and word_end into `seen`, 6 LUTs, 10.4 ns).  Each flag's next value is
        # `take` selecting between two candidates worked out from registers: what it becomes if the beat is taken
        # (by the flags, how far the beat reaches: line, row, word) and if not
        c_last, r_last, w_last = Signal(name="c_last"), Signal(name="r_last"), Signal(name="w_last")
        cr_last, crw_last = Signal(name="cr_last"), Signal(name="crw_last")
        line_end = take & c_last
        row_end = take & cr_last
        word_end = take & crw_last
        marker = seen_m & lq_room  # a word without beats: its entry writes nothing
        # candidates: c_* the beat count's flag after a new line, a step and no beat; r_* the row's, w_* the word's.
        # A beat is taken only from a head that was there last cycle (`seen_beats`), so what the taken ones read of
        # the head are flip-flops loaded from it every cycle; the held ones read the head (a new one's first cycle)
        # (no adder before a compare: a counter is compared with the head's count less one or two, `count + 2 ==
        # bpl` and `count + 1 == bpl` had been one shared adder with `take` selecting its operand)
        c_new = word_reg(m, bpl == 1, "c_new", reset_less=True)
        r_new = word_reg(m, d.lines_m1 == 0, "r_new", reset_less=True)
        w_new = word_reg(m, d.rows_m1 == 0, "w_new", reset_less=True)
        bpl_m2 = word_reg(m, Mux(d.buf == 0, bpl_s - 2, bpl_w - 2), "bpl_m2", reset_less=True)  # (-1: one beat)
        lines_m2 = word_reg(m, d.lines_m1 - 1, "lines_m2", reset_less=True)  # (-1 when 0: no count matches)
        rows_m2 = word_reg(m, d.rows_m1 - 1, "rows_m2", reset_less=True)
        c_step, c_hold = count == bpl_m2, count == Mux(d.buf == 0, bpl_s - 1, bpl_w - 1)
        r_step, r_hold = in_row == lines_m2, in_row == d.lines_m1
        w_step, w_hold = row == rows_m2, row == d.rows_m1
        flags = (  # (flag, if the beat is taken, if not)
            (c_last, Mux(c_last, c_new, c_step), c_hold),
            (r_last, Mux(cr_last, r_new, Mux(c_last, r_step, r_hold)), r_hold),
            (w_last, Mux(crw_last, w_new, Mux(cr_last, w_step, w_hold)), w_hold),
            (cr_last, Mux(cr_last, c_new & r_new, Mux(c_last, c_new & r_step, c_step & r_hold)), c_hold & r_hold),
            (crw_last, Mux(crw_last, c_new & r_new & w_new,
                           Mux(cr_last, c_new & r_new & w_step,
                               Mux(c_last, c_new & r_step & w_hold, c_step & r_hold & w_hold))), c_hold & r_hold & w_hold),
        )
        for flag, taken, held in flags:
            k = Signal(name=f"{flag.name}_k")
            h_ = Signal(name=f"{flag.name}_h")
            m.d.comb += [k.eq(taken), h_.eq(held)]
            m.d.sync += flag.eq(Mux(take, k, h_))
        out = Signal(entry)
        m.d.comb += [out.addr.eq((d.sram + line)[:32]), out.buf.eq(d.buf), out.write.eq(~d.empty),
                     out.end.eq(word_end | marker), out.push.eq(d.push), out.line.eq(nxt),
                     desc_end.eq(word_end | marker), desc.r_en.eq(done)]
        entry_r = Signal(entry.size, name="line_entry", reset_less=True)  # loaded every cycle: `staged` says
        m.d.comb += claim.eq(line_end | marker)
        m.d.sync += [done.eq(desc_end), staged.eq(line_end | marker), entry_r.eq(out.as_value())]
        m.d.comb += [lq.w_en.eq(staged), lq.w_data.eq(entry_r)]
        with m.If(take):
            m.d.sync += [asm.eq(nxt), count.eq(Mux(line_end, 0, count + 1))]
        with m.If(line_end):
            m.d.sync += [line.eq(line + 1), in_row.eq(Mux(row_end, 0, in_row + 1))]
        with m.If(row_end):
            m.d.sync += row.eq(row + 1)
        with m.If(~seen):  # (the flags, loaded in the cycle a new head is first there, read them as 0)
            m.d.sync += [line.eq(0), row.eq(0)]
        # a beat's error response: reported with the PC of the LOAD it belongs to
        m.d.comb += [self.bus_error.eq(dma.bus_error & ~self.abort), self.bus_pc.eq(Mux(desc.r_rdy, d.pc, self.pc))]
        return m
