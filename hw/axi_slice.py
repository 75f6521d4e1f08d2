"""AXI register slices: every channel of a port through a two-entry skid buffer.

A slice cuts each channel's combinational paths at the top level's AXI ports: on the far side
``*valid`` and the payload come from flip-flops, and ``*ready`` on the near side is a flip-flop too,
so no path runs from the interconnect into the engines' handshakes (or back).  It costs one cycle per
channel crossed: an address reaches the bus a cycle later and a response beat the engines a cycle
later (:data:`SLICE_READ_CYCLES`, :data:`SLICE_WRITE_CYCLES`, what the performance model adds), and
it keeps one beat a cycle: the second entry catches the beat that was on its way when the far side
stopped taking.

The slices are not reset by the engines' START / SOFT_RESET reset: a burst accepted by a slice is in
flight for the DMA engine that issued it, so it must reach the bus and its response come back.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiSlice", "SkidBuffer", "SLICE_READ_CYCLES", "SLICE_WRITE_CYCLES", "channel_of"]

#: cycles the slices add to a read's round trip (AR forward, R back)
SLICE_READ_CYCLES = 2
#: cycles they add between a write's last W beat leaving the engine and its B response reaching it (W, B)
SLICE_WRITE_CYCLES = 2

#: the channels whose valid travels from the manager to the subordinate (the others travel back)
_FORWARD = ("ar", "aw", "w")


def channel_of(name: str) -> str:
    """The AXI channel of a signal name: ``araddr`` -> ``ar``, ``rdata`` -> ``r``, ``bresp`` -> ``b``."""
    return name[:2] if name.startswith(("ar", "aw")) else name[0]


class SkidBuffer(wiring.Component):
    """A valid/ready register slice of ``width`` payload bits: registered ``o_valid``/``o_data`` and ``i_ready``."""

    def __init__(self, width: int):
        super().__init__({"i_valid": In(1), "i_ready": Out(1), "i_data": In(width),
                          "o_valid": Out(1), "o_ready": In(1), "o_data": Out(width)})

    def elaborate(self, platform):
        m = Module()
        # the payload registers have no reset (only the valid bits decide anything after one)
        spare = Signal.like(self.i_data, reset_less=True)
        o_data = Signal.like(self.o_data, name="o_data_r", reset_less=True)
        spare_valid = Signal()
        m.d.comb += [self.i_ready.eq(~spare_valid), self.o_data.eq(o_data)]
        with m.If(self.o_ready | ~self.o_valid):  # the output register is free (or frees now)
            with m.If(spare_valid):
                m.d.sync += [o_data.eq(spare), self.o_valid.eq(1), spare_valid.eq(0)]
            with m.Else():
                m.d.sync += [o_data.eq(self.i_data), self.o_valid.eq(self.i_valid)]
        with m.Elif(~spare_valid):  # the output waits: the beat on its way (if any) goes to the spare
            # (the payload loads whatever is there and only the valid bit follows i_valid: the spare's enable
            # is the far side's ready and flip-flops, not the engine's valid logic, which reached the W
            # slice's 130 enables from across the die on ulx3s, 11.3 ns)
            m.d.sync += [spare.eq(self.i_data), spare_valid.eq(self.i_valid)]
        return m


class AxiSlice(wiring.Component):
    """One register slice per channel of an AXI manager interface of ``signature``.

    ``s`` faces the accelerator's manager (connect the manager's interface to it), ``m`` the bus.
    """

    def __init__(self, signature: wiring.Signature):
        self._sig = signature
        super().__init__({"s": In(signature), "m": Out(signature)})

    def elaborate(self, platform):
        m = Module()
        chans: dict[str, list[str]] = {}
        for name in self._sig.members:
            if not name.endswith(("valid", "ready")):
                chans.setdefault(channel_of(name), []).append(name)
        for ch, fields in chans.items():
            src, dst = (self.s, self.m) if ch in _FORWARD else (self.m, self.s)
            sb = m.submodules[f"{ch}_slice"] = SkidBuffer(sum(len(getattr(src, f)) for f in fields))
            m.d.comb += [sb.i_valid.eq(getattr(src, f"{ch}valid")), getattr(src, f"{ch}ready").eq(sb.i_ready),
                         sb.i_data.eq(Cat(*(getattr(src, f) for f in fields))),
                         getattr(dst, f"{ch}valid").eq(sb.o_valid), sb.o_ready.eq(getattr(dst, f"{ch}ready"))]
            pos = 0
            for f in fields:
                w = len(getattr(dst, f))
                m.d.comb += getattr(dst, f).eq(sb.o_data[pos:pos + w])
                pos += w
        return m
