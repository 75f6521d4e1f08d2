"""Accumulator: adds the systolic array's partial-sum lines into the accumulator buffer.

The array gives one int32 line per activation row per K tile; a GEMM with ``K > R``
sums those partial lines over its K tiles.  Each line's ``tag`` (from the activation
beat) says where: ``addr`` (accumulator line) and ``acc`` (1: add to the line, 0:
overwrite it — the first K tile of a GEMM without ``acc``).  Read-modify-write takes
one line a cycle in three stages: the read is issued as the line arrives; stage 1 registers
the read data (the block RAM's output goes to a flip-flop: its clock-to-output of ~5.8 ns
on ECP5 plus a 32-bit add into the write data was the slowest path of the routed ulx3s top
level, 16.4 ns); stage 2 adds, stage 3 writes the registered sum.  The same line may arrive
in back-to-back cycles (decode: one line per K tile): a line up to three cycles behind
another of the same address takes that one's sum from the registers that hold it (forwarded),
so the buffer's read port need not be transparent to its write port.  It never stalls, so
``i_stream.ready`` is always 1.

A GEMM with ``k = 0`` writes zero lines (``zero_en``, ``zero_addr``: no array lines arrive then): they take the
same stages, a line register cleared and ``acc`` low, so the buffer's write port
has one compute-side writer, not a second one whose enable selects all of its 256..2048 data bits there.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig

from .word_regs import flag_copies

__all__ = ["Accumulator", "acc_tag_layout"]


def acc_tag_layout(cfg: AccelConfig) -> data.StructLayout:
    """The array tag the accumulator understands: ``addr`` (16-bit line) then ``acc``."""
    return data.StructLayout({"addr": 16, "acc": 1})


class Accumulator(wiring.Component):
    """Read-modify-write of array output lines into an accumulator buffer.

    Attributes
    ----------
    i_stream : In(stream)
        The array's ``o_stream`` (``data``: C int32, ``last``, ``tag`` as :func:`acc_tag_layout`).
    rd : In(ReadPort.Signature)
        To a read port of the accumulator buffer (transparent or not: a read of the line written in the same
        cycle is answered from the accumulator's registers).
    wr : In(WritePort.Signature)
        To its write port.
    lines : Out(32)
        Lines written since reset (for counters and tests).
    """

    def __init__(self, cfg: AccelConfig, o_layout: data.Layout):
        self.cfg = cfg
        self.line = data.ArrayLayout(o_layout["data"].shape.elem_shape, cfg.cols)
        abits = max(1, (cfg.acc_lines - 1).bit_length())
        self.abits = abits
        super().__init__({
            "i_stream": In(stream.Signature(o_layout)),
            "rd": In(memory.ReadPort.Signature(addr_width=abits, shape=self.line)),
            "wr": In(memory.WritePort.Signature(addr_width=abits, shape=self.line)),
            "zero_en": In(1), "zero_addr": In(abits),
            "ld_en": In(1), "ld_addr": In(abits), "ld_data": In(self.line), "ld_ready": Out(1), "wr_load": Out(1),
            "lines": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        i = self.i_stream
        tag = Signal(acc_tag_layout(self.cfg))
        m.d.comb += [i.ready.eq(1), tag.eq(i.payload.tag)]
        m.d.comb += [self.rd.addr.eq(tag.addr), self.rd.en.eq(i.valid)]
        # stage 1: the line, its address and whether to add, one cycle later with the read data (a zero line:
        # the line register cleared, no add, the zero fill's address)
        valid, zfill = Signal(), Signal()
        acc = Signal()
        addr = Signal(self.abits)
        line = Signal(self.line)
        add = tag.acc & ~self.zero_en
        in_addr = Mux(self.zero_en, self.zero_addr, tag.addr)
        m.d.sync += [valid.eq(i.valid | self.zero_en), zfill.eq(self.zero_en), acc.eq(add),
                     addr.eq(in_addr), line.eq(i.payload.data)]
        with m.If(self.zero_en):
            m.d.sync += line.eq(0)
        valid2, zfill2, ld2 = Signal(), Signal(), Signal(name="acc_ld2")
        addr2 = Signal(self.abits, reset_less=True)
        valid3, zfill3, ld3 = Signal(), Signal(), Signal(name="acc_ld3")
        addr3 = Signal(self.abits, reset_less=True)
        line2 = Signal(self.line, reset_less=True)
        old2 = Signal(self.line, reset_less=True)
        tot_r = Signal(self.line, reset_less=True)  # the sum of stage 3's line: what it writes
        tot_rr = Signal(self.line, reset_less=True)  # the sum written last cycle
        total = Signal(self.line)
        # The sums are written a stage after the add (stage 3, from a register: the adder's carry into the block
        # RAMs' write data was the slowest path of a ulx3s route, 11.4 ns), so a line's read misses the writes of
        # the three lines ahead of it (the read port need not be transparent: the block RAM's answer to a read of
        # the address written in that cycle is not used).  Their sums come from the registers instead: the line
        # two ahead's (written the cycle after the read) and three ahead's (written in the cycle of the read) into
        # `old2` beside the read data, in stage 1; the line just ahead's in stage 2, at the adder.  Each decision
        # is an address compare of registers (or of the incoming tag with stage 2's and 3's), registered as three
        # flag copies, a third of the lanes each.
        f2 = valid2 & (in_addr == addr2)  # the incoming line's address is stage 2's (written in 2 cycles)
        f3 = valid3 & (in_addr == addr3)  # ... stage 3's (written now)
        ram_c = flag_copies(m, ~(f2 | f3), 1, "acc_ram1")
        f2_c = flag_copies(m, f2, 1, "acc_f2_1")
        for c in range(self.cfg.cols):
            k = c % len(ram_c)
            m.d.sync += old2[c].eq(Mux(ram_c[k], self.rd.data[c], Mux(f2_c[k], tot_r[c], tot_rr[c])))
        # stage 2: the line and the line it adds to; a LOAD line takes stage 2 when stage 1 is empty (ld_ready,
        # a register): written as a line without add, so the buffer's write port has one writer and no select
        # between the sums and the block RAMs' write data
        take_ld = self.ld_en & ~valid
        m.d.comb += [self.ld_ready.eq(~valid), self.wr_load.eq(ld3)]
        m.d.sync += [valid2.eq(valid | take_ld), zfill2.eq(zfill), ld2.eq(take_ld),
                     addr2.eq(Mux(valid, addr, self.ld_addr)), line2.eq(Mux(valid, line, self.ld_data))]
        # stage 2 adds to the sum of the line just ahead (in stage 3 now) when it has its address, else to what
        # stage 1 gave (0 without acc; 0 for a LOAD line: it takes an empty stage 1's place)
        acc_c = flag_copies(m, acc & valid, 1, "acc_add2")
        fwd_c = flag_copies(m, valid2 & (addr == addr2), 1, "acc_fwd2")
        for c in range(self.cfg.cols):  # int32 wrap on assignment, like the hardware adder and numerics.matmul
            k = c % len(acc_c)
            m.d.comb += total[c].eq(line2[c] + Mux(acc_c[k], Mux(fwd_c[k], tot_r[c], old2[c]), 0))
        # stage 3: the sum written from its register
        m.d.sync += [valid3.eq(valid2), zfill3.eq(zfill2), ld3.eq(ld2), addr3.eq(addr2), tot_r.eq(total),
                     tot_rr.eq(tot_r)]
        m.d.comb += [self.wr.addr.eq(addr3), self.wr.en.eq(valid3), self.wr.data.eq(tot_r)]
        with m.If(valid3 & ~zfill3 & ~ld3):
            m.d.sync += self.lines.eq(self.lines + 1)
        return m
