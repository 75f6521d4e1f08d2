"""Instruction fetch: reads 128-bit words from DRAM in bursts into a small prefetch FIFO.

Fetch reads instruction ``pc`` at ``WIN_BASE + PROG_BASE + 16 * pc``.  It never
reads past ``limit = min(PROG_LEN, (WIN_SIZE - PROG_BASE) / 16)``: after the
last word it offers an *end marker* at ``pc = limit`` carrying the fault the
decoder reports there, ``PROGRAM_OVERRUN`` (ran past PROG_LEN without FINISH)
or ``DMA_WINDOW`` (the program runs out of the window), or ``DMA_ALIGN`` at pc 0
when PROG_BASE is not 16-byte aligned.  Bursts are sized by the free FIFO space
so that every word requested has a place to land.

A word any of whose beats comes back with an AXI error response (``rresp`` not
OKAY) is never executed: it becomes the end marker, with ``BUS_ERROR`` at its
pc, and the words fetched after it are dropped.  A word behind a FINISH is
never reached, so an error there (prefetch) does not stop a program that ends.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.faults import Fault
from systolica.isa import WORD_BITS, WORD_BYTES

from .axi import BURST_INCR, axi4_read_signature
from .dma import ADDR_BITS

__all__ = ["InstructionFetch"]


class InstructionFetch(wiring.Component):
    """Prefetching instruction reader with an end-of-program marker.

    Parameters
    ----------
    cfg
        Accelerator configuration (DMA width, burst length).
    depth
        Words of the prefetch FIFO.
    """

    def __init__(self, cfg: AccelConfig, depth: int = 8):
        if cfg.dma_bits > WORD_BITS:
            raise ValueError(f"instruction fetch needs dma_bits <= {WORD_BITS}, config has {cfg.dma_bits}")
        self.cfg, self.depth = cfg, depth
        super().__init__({
            "axi": Out(axi4_read_signature(ADDR_BITS, cfg.dma_bits)),
            "start": In(1), "stop": In(1), "abort": In(1),
            "prog_base": In(32), "prog_len": In(32), "win_base": In(ADDR_BITS), "win_size": In(32),
            # the next word (or the end marker) for the decoder
            "valid": Out(1), "ready": In(1), "word": Out(WORD_BITS), "pc": Out(32),
            "end": Out(1), "end_code": Out(4),
            "quiet": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, axi = self.cfg, self.axi
        beat_bytes = cfg.dma_bytes
        ibeats = WORD_BYTES // beat_bytes  # beats per instruction word
        per_burst = max(1, cfg.max_burst // ibeats)
        # the prefetch FIFO (a SyncFIFO's behaviour, written out): its write enable needs no `level != depth` (a
        # burst is asked for only while level + inflight leaves room for its words, so a word never arrives at a
        # full FIFO), and `level != 0` is a flip-flop of its own (`q_rdy`), loaded beside the level
        m.submodules.q = mem = Memory(shape=WORD_BITS, depth=self.depth, init=[])
        wp, rp = mem.write_port(), mem.read_port(domain="comb")
        produce, consume = Signal(range(self.depth), name="produce"), Signal(range(self.depth), name="consume")
        level = Signal(range(self.depth + 1), name="level")
        q_rdy, q_wen, q_ren = Signal(name="q_rdy"), Signal(name="q_wen"), Signal(name="q_ren")
        m.d.comb += [wp.addr.eq(produce), wp.en.eq(q_wen), rp.addr.eq(consume)]
        with m.If(q_wen):
            m.d.sync += produce.eq(Mux(produce == self.depth - 1, 0, produce + 1))
        with m.If(q_ren):
            m.d.sync += consume.eq(Mux(consume == self.depth - 1, 0, consume + 1))
        m.d.sync += [level.eq(level + q_wen - q_ren), q_rdy.eq(Mux(q_wen, 1, Mux(q_ren, level != 1, level != 0)))]

        limit = Signal(32)
        end_code = Signal(4)
        issue_pc = Signal(32)  # next word to request
        out_pc = Signal(32)  # pc of the word at the FIFO head
        inflight = Signal(range(self.depth + 1))  # words requested, not yet in the FIFO
        bursts = Signal(range(self.depth + 1))
        stopped = Signal()

        # start takes three cycles: limit and the end code load (init1), then the words left and the low address
        # bits (init2); the end marker waits for them.  limit and the end code come from the program's CSRs
        # only, which hold still while a run starts (the last write is cycles before START reaches here): they
        # are worked out in registers loaded every cycle -- the window's room for words, then the compare and
        # its select -- so limit's load is a register's value, not two 32-bit compares and a subtraction in
        # series (ulx3s: `limit`'s 32 bits, 11.1 ns)
        # (reset-less: the engines' reset, in the RESET cycle before the start, must not clear them)
        avail = Signal(32, name="win_words", reset_less=True)
        misaligned = Signal(reset_less=True)
        fits = Signal(name="prog_fits", reset_less=True)
        lim_c = Signal(32, name="limit_c", reset_less=True)
        code_c = Signal(4, name="end_code_c", reset_less=True)
        m.d.sync += [avail.eq(Mux(self.win_size > self.prog_base, (self.win_size - self.prog_base) >> 4, 0)),
                     misaligned.eq(self.prog_base[:4] != 0), fits.eq(self.prog_len <= avail),
                     lim_c.eq(Mux(misaligned, 0, Mux(fits, self.prog_len, avail))),
                     code_c.eq(Mux(misaligned, Fault.DMA_ALIGN, Mux(fits, Fault.PROGRAM_OVERRUN, Fault.DMA_WINDOW)))]
        init1, init2 = Signal(), Signal()
        m.d.sync += [init1.eq(self.start), init2.eq(init1)]
        with m.If(self.start):
            m.d.sync += [issue_pc.eq(0), out_pc.eq(0), stopped.eq(0)]
        with m.If(init1):
            m.d.sync += [limit.eq(lim_c), end_code.eq(code_c)]
        with m.If(self.stop & ~self.start):  # the decoder still shows its idle STOP in the start cycle
            m.d.sync += stopped.eq(1)

        # ---- AR: a burst of n words, n capped by what is left, the FIFO space and the 4 KiB boundary.
        # Every operand of n is a register kept beside issue_pc (words left, the offset and its low 12 bits),
        # and n itself is registered (``n_ok`` a cycle after anything it depends on changed), so no cycle
        # holds the 64-bit address sum, the subtractions and the three minimums in series.
        off = Signal(32)  # prog_base + 16 * issue_pc
        lo12 = Signal(12)  # (win_base + off) mod 4096
        left = Signal(32)  # limit - issue_pc
        n_r = Signal(range(self.depth + 1))
        n_ok = Signal()
        space = Signal(range(self.depth + 1))
        m.d.comb += space.eq(self.depth - level - inflight)
        w = (4096 // WORD_BYTES).bit_length()
        to_4k = Signal(range(4096 // WORD_BYTES + 1))
        m.d.comb += to_4k.eq((4096 >> 4) - lo12[4:])
        # min(left, per_burst) a cycle after `left` changed (cand), then the 4 KiB room and the FIFO's space;
        # n_ok0 / n_ok: one cycle for each stage after any of them changed
        cand = Signal(range(per_burst + 1))
        n_ok0 = Signal()
        m.d.sync += cand.eq(Mux(left[w:] != 0, per_burst, Mux(left[:w] < per_burst, left[:w], per_burst)))
        cand2 = Mux(to_4k < cand, to_4k, cand)
        idle = ~self.start & ~init1 & ~init2
        # (n_nz: n_r != 0 as a flag of its own, loaded beside it: the burst's issue, the enable of the address
        # registers and counters, starts at flip-flops.  min(space, to_4k, cand) != 0 is space != 0 and cand != 0
        # (to_4k is at least 1), not a compare after the minimums: that was the fetch unit's slowest path on ECP5)
        n_nz = Signal(name="n_nz")
        n_next = Mux(space < cand2, space, cand2)
        m.d.sync += [n_r.eq(n_next), n_nz.eq((space != 0) & (cand != 0)), n_ok0.eq(idle), n_ok.eq(n_ok0 & idle)]
        with m.If(self.start):
            m.d.sync += [off.eq(self.prog_base), n_ok0.eq(0), n_ok.eq(0)]
        with m.If(init2):
            m.d.sync += [left.eq(limit), lo12.eq((self.win_base[:12] + self.prog_base[:12])[:12])]
        m.d.comb += [axi.arsize.eq(Const(beat_bytes.bit_length() - 1, 3)), axi.arburst.eq(BURST_INCR),
                     axi.rready.eq(1)]
        ar_hs = axi.arvalid & axi.arready
        with m.If(ar_hs):
            m.d.sync += axi.arvalid.eq(0)
        issue = Signal()
        m.d.comb += issue.eq(~axi.arvalid & ~stopped & ~self.stop & ~self.abort & ~self.start & ~init1 & ~init2 & n_ok
                             & n_nz)
        with m.If(issue):
            m.d.sync += [axi.arvalid.eq(1), axi.araddr.eq(self.win_base + off), axi.arlen.eq(n_r * ibeats - 1),
                         issue_pc.eq(issue_pc + n_r), off.eq(off + (n_r << 4)), lo12.eq(lo12 + (n_r << 4)),
                         left.eq(left - n_r), n_ok0.eq(0), n_ok.eq(0)]

        # ---- R: assemble words from beats, in order.  What the next beat will do is kept in flip-flops loaded with
        # the next cycle's values of the beat count and the error flags: `w_ok`, it ends a word that enters the
        # FIFO unless its own response is an error; `w_pz`, it ends a word and nothing is poisoned yet; `w_pze`,
        # that and an earlier beat of the word was an error.  The FIFO's write and the poisoning are then the R
        # channel's valid, its response, one flag and abort (ulx3s: the valid ran through the count, `poisoned`,
        # `word_err` and abort into the FIFO's level, 6 LUTs, 12.3 ns)
        r_hs = axi.rvalid & axi.rready
        beat_err = r_hs & (axi.rresp != 0)
        word_err = Signal()  # an earlier beat of the word being assembled was an error
        poisoned = Signal()  # a word failed: nothing after it enters the FIFO
        word_done = Signal()
        last = Signal(name="w_last", init=int(ibeats == 1))  # the next beat ends its word (count == ibeats - 1)
        w_ok, w_pz = Signal(name="w_ok", init=int(ibeats == 1)), Signal(name="w_pz", init=int(ibeats == 1))
        w_pze = Signal(name="w_pze")
        if ibeats == 1:
            m.d.comb += [word_done.eq(r_hs), wp.data.eq(axi.rdata)]
            last_n = 1
        else:
            parts = Signal(WORD_BITS - beat_bytes * 8, reset_less=True)  # a word's first beats (count resets)
            count = Signal(range(ibeats))
            with m.If(r_hs):
                m.d.sync += [count.eq(Mux(count == ibeats - 1, 0, count + 1)),
                             parts.eq(Cat(parts[beat_bytes * 8:], axi.rdata))]
            m.d.comb += [word_done.eq(r_hs & last), wp.data.eq(Cat(parts, axi.rdata))]
            last_n = Mux(r_hs, count == ibeats - 2, count == ibeats - 1)
            m.d.sync += last.eq(last_n)
        poison = Signal(name="poison")  # this word is where the program now ends
        m.d.comb += poison.eq(r_hs & (w_pze | (w_pz & (axi.rresp != 0))))
        werr_n, pois_n = Signal(name="word_err_n"), Signal(name="poisoned_n")
        m.d.comb += [werr_n.eq(~self.start & ~word_done & (word_err | beat_err)),
                     pois_n.eq(~self.start & (poisoned | poison))]
        m.d.sync += [word_err.eq(werr_n), poisoned.eq(pois_n),
                     w_ok.eq(last_n & ~pois_n & ~werr_n), w_pz.eq(last_n & ~pois_n), w_pze.eq(last_n & ~pois_n & werr_n)]
        with m.If(poison):
            m.d.sync += [limit.eq(out_pc + level), end_code.eq(Fault.BUS_ERROR),
                         left.eq(0), n_ok0.eq(0), n_ok.eq(0)]  # nothing more to fetch: what is in flight is dropped
        m.d.comb += q_wen.eq(r_hs & w_ok & (axi.rresp == 0) & ~self.abort)
        m.d.sync += [inflight.eq(inflight + Mux(issue, n_r, 0) - word_done),
                     bursts.eq(bursts + issue - (r_hs & axi.rlast))]

        # ---- to the decoder: the FIFO head, or the end marker once every word before `limit` went out
        at_end = ~q_rdy & (out_pc == limit) & (inflight == 0) & ~init1 & ~init2
        m.d.comb += [self.valid.eq(q_rdy | at_end), self.word.eq(rp.data), self.pc.eq(out_pc),
                     self.end.eq(~q_rdy), self.end_code.eq(end_code),
                     q_ren.eq(self.ready & q_rdy),
                     self.quiet.eq(~axi.arvalid & (bursts == 0))]
        with m.If(q_ren):
            m.d.sync += out_pc.eq(out_pc + 1)
        return m
