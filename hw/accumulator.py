"""Accumulator: adds the systolic array's partial-sum lines into the accumulator buffer.

The array gives one int32 line per activation row per K tile; a GEMM with ``K > R``
sums those partial lines over its K tiles.  Each line's ``tag`` (from the activation
beat) says where: ``addr`` (accumulator line) and ``acc`` (1: add to the line, 0:
overwrite it — the first K tile of a GEMM without ``acc``).  Read-modify-write takes
one line a cycle in two stages: the read is issued as the line arrives; stage 1 registers
the read data (the block RAM's output goes to a flip-flop: its clock-to-output of ~5.8 ns
on ECP5 plus a 32-bit add into the write data was the slowest path of the routed ulx3s top
level, 16.4 ns); stage 2 adds and writes.  The same line may arrive in back-to-back cycles
(decode: one line per K tile): a line one cycle behind another of the same address takes
that one's sum as stage 2 writes it (forwarded), one two cycles behind reads it through
the buffer's read port, which is transparent to its write port.  It never stalls, so
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
        To a transparent read port of the accumulator buffer.
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
        # stage 2: the line and the line it adds to as read (the read port's data, into a register of their own:
        # the block RAM's ~5.8 ns clock-to-output on ECP5 and then two selects -- no add, the forwarded sum -- was
        # among the slowest paths of the routed ulx3s top level, 12.0 ns); the sum goes to the write port
        valid2, zfill2 = Signal(), Signal()
        addr2 = Signal(self.abits, reset_less=True)
        line2 = Signal(self.line, reset_less=True)
        old2 = Signal(self.line, reset_less=True)
        tot_r = Signal(self.line, reset_less=True)  # the sum stage 2 wrote last cycle
        total = Signal(self.line)
        # a LOAD line takes stage 2 when stage 1 is empty (ld_ready, a register): written as a line without add,
        # so the buffer's write port has one writer and no select between the adder and the block RAMs' write
        # data (ulx3s: `acc_mem`'s DIA, 11.4 ns through the port's select of the sum and LOAD's line)
        ld2 = Signal(name="acc_ld2")
        take_ld = self.ld_en & ~valid
        m.d.comb += [self.ld_ready.eq(~valid), self.wr_load.eq(ld2)]
        m.d.sync += [valid2.eq(valid | take_ld), zfill2.eq(zfill), ld2.eq(take_ld),
                     addr2.eq(Mux(valid, addr, self.ld_addr)), line2.eq(Mux(valid, line, self.ld_data)),
                     old2.eq(self.rd.data), tot_r.eq(total)]
        # the line in stage 2 adds to the sum written last cycle when it is the line just behind that one at the
        # same address (its read went out before that sum was written), to 0 without acc: both flags decided in
        # stage 1 (from the incoming line and stage 1's) and registered, as three copies, a third of the lanes
        # each; the selects sit between registers and the adder, not after the block RAMs' read data
        fwd = Signal(name="acc_fwd")
        m.d.sync += fwd.eq(add & valid & (in_addr == addr))
        acc_c = flag_copies(m, acc & valid, 1, "acc_add2")  # (0 for a LOAD line: it takes an empty stage 1's place)
        fwd_c = flag_copies(m, fwd, 1, "acc_fwd2")
        for c in range(self.cfg.cols):  # int32 wrap on assignment, like the hardware adder and numerics.matmul
            k = c % len(acc_c)
            m.d.comb += total[c].eq(line2[c] + Mux(acc_c[k], Mux(fwd_c[k], tot_r[c], old2[c]), 0))
        m.d.comb += [self.wr.addr.eq(addr2), self.wr.en.eq(valid2), self.wr.data.eq(total)]
        with m.If(valid2 & ~zfill2 & ~ld2):
            m.d.sync += self.lines.eq(self.lines + 1)
        return m
