"""On-chip line buffers: the int8 scratchpad and the int32 accumulator / vector buffers.

Every buffer is one :class:`amaranth.lib.memory.Memory` of *lines*; a line is what one
array row consumes or produces in a cycle (``cols`` lanes).  One write port and
``read_ports`` synchronous read ports (data one cycle after the address), each read
port transparent to the write port so that a read-modify-write of the same line in
back-to-back cycles sees the newest value without a forwarding path.  On an FPGA a
one-write, one-read buffer is one simple-dual-port BRAM column per lane group; each
additional read port duplicates the memory (Yosys maps it that way), so units ask
for as few as they need.
"""

from __future__ import annotations

from amaranth import Module, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import Out

from systolica.config import AccelConfig

__all__ = ["LineBuffer", "scratchpad", "accumulator_buffer", "vector_buffer"]


class LineBuffer(wiring.Component):
    """``depth`` lines of ``lanes`` elements of ``elem`` (a Shape); 1 write and ``read_ports`` read ports.

    Attributes
    ----------
    w : Out(memory.WritePort.Signature)
        ``addr``, ``data`` (one line, ``ArrayLayout(elem, lanes)``), ``en``.
    r0, r1, ... : Out(memory.ReadPort.Signature)
        ``addr``, ``en`` (default 1) in; ``data`` out one cycle later.
    """

    def __init__(self, *, depth: int, lanes: int, elem, read_ports: int = 1):
        if not (isinstance(depth, int) and depth >= 2):
            raise ValueError(f"depth={depth!r} must be an int >= 2 lines")
        if not (isinstance(lanes, int) and lanes >= 1):
            raise ValueError(f"lanes={lanes!r} must be a positive int")
        if not (isinstance(read_ports, int) and 1 <= read_ports <= 4):
            raise ValueError(f"read_ports={read_ports!r} must be 1..4 (each extra port duplicates the memory)")
        self.depth, self.lanes, self.read_ports = depth, lanes, read_ports
        self.line = data.ArrayLayout(elem, lanes)
        abits = max(1, (depth - 1).bit_length())
        members = {"w": Out(memory.WritePort.Signature(addr_width=abits, shape=self.line))}
        for i in range(read_ports):
            members[f"r{i}"] = Out(memory.ReadPort.Signature(addr_width=abits, shape=self.line))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=self.line, depth=self.depth, init=[])
        wp = mem.write_port()
        m.d.comb += [wp.addr.eq(self.w.addr), wp.data.eq(self.w.data), wp.en.eq(self.w.en)]
        for i in range(self.read_ports):
            rp = mem.read_port(transparent_for=(wp,))
            port = getattr(self, f"r{i}")
            m.d.comb += [rp.addr.eq(port.addr), rp.en.eq(port.en), port.data.eq(rp.data)]
        return m


def scratchpad(cfg: AccelConfig, read_ports: int = 2) -> LineBuffer:
    """int8 scratchpad: ``spad_lines`` lines of ``cols`` bytes (A and W operands read together: 2 ports)."""
    return LineBuffer(depth=cfg.spad_lines, lanes=cfg.cols, elem=signed(8), read_ports=read_ports)


def accumulator_buffer(cfg: AccelConfig, read_ports: int = 2) -> LineBuffer:
    """int32 accumulator: ``acc_lines`` lines of ``cols`` words (one port for accumulate, one for REQUANT/STORE)."""
    return LineBuffer(depth=cfg.acc_lines, lanes=cfg.cols, elem=signed(32), read_ports=read_ports)


def vector_buffer(cfg: AccelConfig, read_ports: int = 2) -> LineBuffer:
    """int32 fixed-point vector buffer: ``vbuf_lines`` lines of ``cols`` words (two operands per cycle for ADD/MUL)."""
    return LineBuffer(depth=cfg.vbuf_lines, lanes=cfg.cols, elem=signed(32), read_ports=read_ports)
