"""GemmCore: the systolic array, the accumulator and the accumulator buffer, wired together.

The unit the compute engine drives for GEMM: weight beats into ``w_stream``,
activation beats (tag = accumulator line + accumulate flag, see
:func:`~systolica.hw.accumulator.acc_tag_layout`) into ``a_stream``; results land in
the accumulator buffer, whose second read port ``acc_rd`` serves REQUANT / STORE.
"""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig

from .accumulator import Accumulator
from .scratchpad import accumulator_buffer
from .systolic_array import SystolicArray

__all__ = ["GemmCore"]


class GemmCore(wiring.Component):
    """Array -> accumulator -> accumulator buffer.

    Attributes
    ----------
    w_stream, a_stream : In(stream)
        As :class:`~systolica.hw.systolic_array.SystolicArray`.
    acc_rd : Out(ReadPort.Signature)
        A read port of the accumulator buffer (line address in, line out one cycle later).
    lines : Out(32)
        Accumulator lines written since reset.
    """

    def __init__(self, cfg: AccelConfig):
        self.cfg = cfg
        self.array = SystolicArray(cfg, out_fifo=0)  # the accumulator takes every line
        self.acc = Accumulator(cfg, self.array.o_layout)
        self.buf = accumulator_buffer(cfg, read_ports=2)
        super().__init__({
            "w_stream": In(stream.Signature(self.array.w_layout)),
            "a_stream": In(stream.Signature(self.array.a_layout)),
            "acc_rd": Out(memory.ReadPort.Signature(addr_width=self.acc.abits, shape=self.buf.line)),
            "lines": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.array, m.submodules.acc, m.submodules.buf = self.array, self.acc, self.buf
        wiring.connect(m, wiring.flipped(self.w_stream), self.array.w_stream)
        wiring.connect(m, wiring.flipped(self.a_stream), self.array.a_stream)
        wiring.connect(m, array=self.array.o_stream, acc=self.acc.i_stream)
        wiring.connect(m, acc=self.acc.rd, buf=self.buf.r0)
        wiring.connect(m, acc=self.acc.wr, buf=self.buf.w)
        wiring.connect(m, wiring.flipped(self.acc_rd), self.buf.r1)
        m.d.comb += self.lines.eq(self.acc.lines)
        return m
