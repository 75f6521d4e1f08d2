"""AXI4-Lite register file generated from :data:`systolica.csr.REGISTERS`.

Every register of the CSR map becomes a port of :class:`CsrFile` by its access
kind, so the hardware cannot drift from the map the driver and the generated
documentation use:

- ``rw``: a register, output ``<name>`` (lower case);
- ``ro``: an input ``<name>``; ``ID``/``VERSION`` are constants; a 64-bit counter
  ``X_LO``/``X_HI`` is one 64-bit input ``x`` (reading ``_LO`` latches ``_HI``
  so the pair is consistent);
- ``wo``: outputs ``<name>_stb`` (one-cycle write pulse) and ``<name>_data``;
- ``w1c``: a register set by input ``<name>_set`` and cleared by writing ones.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.csr import COUNTERS, CSR_SPACE, ID_MAGIC, REGISTERS

from .axi import axi4_lite_signature

__all__ = ["CsrFile", "CSR_ADDR_BITS"]

CSR_ADDR_BITS = (CSR_SPACE - 1).bit_length()
_COUNTER_REGS = {f"{c}_LO" for c in COUNTERS} | {f"{c}_HI" for c in COUNTERS}


class CsrFile(wiring.Component):
    """AXI4-Lite subordinate holding the accelerator's CSRs.

    Parameters
    ----------
    config
        The configuration whose ``hash32()`` the ID register reports.
    """

    def __init__(self, config: AccelConfig):
        self.config = config
        members = {"bus": In(axi4_lite_signature(CSR_ADDR_BITS, 32))}
        for reg in REGISTERS:
            n = reg.name.lower()
            if reg.name in ("ID", "VERSION") or reg.name in _COUNTER_REGS:
                continue
            if reg.access == "rw":
                members[n] = Out(32, init=reg.reset)
            elif reg.access == "ro":
                members[n] = In(32)
            elif reg.access == "wo":
                members[f"{n}_stb"] = Out(1)
                members[f"{n}_data"] = Out(32)
            elif reg.access == "w1c":
                members[f"{n}_set"] = In(32)
                members[n] = Out(32, init=reg.reset)
            else:  # pragma: no cover - csr.py only uses the four kinds
                raise ValueError(f"register {reg.name}: unknown access kind {reg.access!r}")
        for c in COUNTERS:
            members[c.lower()] = In(64)
        super().__init__(members)

    def _read_value(self, m, reg, hi_latch):
        """The 32-bit value a read of ``reg`` returns (and, for a counter _LO, the latch update)."""
        n = reg.name.lower()
        if reg.name == "ID":
            return Const(self.config.hash32(), 32)
        if reg.name == "VERSION":
            return Const(ID_MAGIC, 32)
        if reg.name in _COUNTER_REGS:
            counter = getattr(self, reg.name[:-3].lower())
            return counter[:32] if reg.name.endswith("_LO") else hi_latch[reg.name[:-3]]
        if reg.access == "wo":
            return Const(0, 32)
        return getattr(self, n)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        hi_latch = {c: Signal(32, name=f"{c.lower()}_hi_latch") for c in COUNTERS}

        # ---- writes: address and data may arrive in either order; accept each once, then answer on B
        aw_addr = Signal(CSR_ADDR_BITS)
        aw_full = Signal()
        w_data = Signal(32)
        w_strb = Signal(4)
        w_full = Signal()
        m.d.comb += [bus.awready.eq(~aw_full), bus.wready.eq(~w_full), bus.bresp.eq(0)]
        with m.If(bus.awvalid & bus.awready):
            m.d.sync += [aw_addr.eq(bus.awaddr), aw_full.eq(1)]
        with m.If(bus.wvalid & bus.wready):
            m.d.sync += [w_data.eq(bus.wdata), w_strb.eq(bus.wstrb), w_full.eq(1)]
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += bus.bvalid.eq(0)
        do_write = aw_full & w_full & ~bus.bvalid
        mask = Signal(32)
        m.d.comb += mask.eq(Cat(*[w_strb[i].replicate(8) for i in range(4)]))

        for reg in REGISTERS:
            n = reg.name.lower()
            if reg.access == "wo":
                m.d.sync += getattr(self, f"{n}_stb").eq(0)
        for reg in REGISTERS:
            if reg.access == "w1c":
                r = getattr(self, reg.name.lower())
                m.d.sync += r.eq(r | getattr(self, f"{reg.name.lower()}_set"))

        with m.If(do_write):
            m.d.sync += [aw_full.eq(0), w_full.eq(0), bus.bvalid.eq(1)]
            with m.Switch(aw_addr[2:]):
                for reg in REGISTERS:
                    n = reg.name.lower()
                    if reg.access not in ("rw", "wo", "w1c"):
                        continue
                    with m.Case(reg.offset >> 2):
                        if reg.access == "rw":
                            r = getattr(self, n)
                            m.d.sync += r.eq((r & ~mask) | (w_data & mask))
                        elif reg.access == "wo":
                            m.d.sync += [getattr(self, f"{n}_stb").eq(1),
                                         getattr(self, f"{n}_data").eq(w_data & mask)]
                        else:
                            r = getattr(self, n)
                            # a set in the same cycle wins over the clear: no event is lost
                            m.d.sync += r.eq((r & ~(w_data & mask)) | getattr(self, f"{n}_set"))

        # ---- reads: one outstanding read; data registered on AR, held until R handshakes
        m.d.comb += [bus.arready.eq(~bus.rvalid), bus.rresp.eq(0)]
        with m.If(bus.rvalid & bus.rready):
            m.d.sync += bus.rvalid.eq(0)
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += [bus.rvalid.eq(1), bus.rdata.eq(0)]
            with m.Switch(bus.araddr[2:]):
                for reg in REGISTERS:
                    with m.Case(reg.offset >> 2):
                        m.d.sync += bus.rdata.eq(self._read_value(m, reg, hi_latch))
                        if reg.name in _COUNTER_REGS and reg.name.endswith("_LO"):
                            c = reg.name[:-3]
                            m.d.sync += hi_latch[c].eq(getattr(self, c.lower())[32:])
        return m
