"""Control and status registers of the accelerator, defined once, as data.

The Amaranth AXI4-Lite slave (``systolica.hw``), the register map written next
to the generated Verilog, the IP-XACT registers of the Vivado package and every
driver backend are generated from :data:`REGISTERS`.  Registers are 32 bits
wide at byte offsets; 64-bit counters are a ``_LO``/``_HI`` pair (read ``_LO``
first: it latches ``_HI`` so the pair is consistent).

All addresses the accelerator uses (program fetch and DMA) are byte offsets
inside the DRAM window ``[WIN_BASE, WIN_BASE + WIN_SIZE)``; the hardware adds
``WIN_BASE`` and refuses anything outside (``Fault.DMA_WINDOW``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Reg", "REGISTERS", "REG", "CTRL_START", "CTRL_SOFT_RESET", "STATUS_BUSY", "STATUS_DONE",
           "STATUS_ERROR", "IRQ_DONE", "ID_MAGIC", "COUNTERS"]

#: VERSION register: "SY" in the upper half, ISA/CSR version in the lower half.
ID_MAGIC = 0x5359_0001

CTRL_START = 1 << 0  # write 1: start fetching at PROG_BASE (ignored while busy)
CTRL_SOFT_RESET = 1 << 1  # write 1: abort, drain AXI transactions in flight, clear state and errors
STATUS_BUSY = 1 << 0
STATUS_DONE = 1 << 1
STATUS_ERROR = 1 << 2
IRQ_DONE = 1 << 0


@dataclass(frozen=True)
class Reg:
    name: str
    offset: int
    access: str  # "ro", "rw", "wo" (write-only pulses), "w1c"
    doc: str
    reset: int = 0


REGISTERS: tuple[Reg, ...] = (
    Reg("ID", 0x00, "ro", "AccelConfig.hash32() of the configuration this hardware was built from"),
    Reg("VERSION", 0x04, "ro", "0x5359 ('SY') << 16 | CSR/ISA version", reset=ID_MAGIC),
    Reg("CTRL", 0x08, "wo", "bit 0 START, bit 1 SOFT_RESET (self-clearing pulses)"),
    Reg("STATUS", 0x0C, "ro", "bit 0 BUSY, bit 1 DONE, bit 2 ERROR; DONE and ERROR clear on START"),
    Reg("ERROR_CODE", 0x10, "ro", "systolica.faults.Fault of the last run (0 = none)"),
    Reg("ERROR_PC", 0x14, "ro", "index of the faulting instruction"),
    Reg("PROG_BASE", 0x18, "rw", "byte offset of the first instruction inside the DRAM window (16-byte aligned)"),
    Reg("PROG_LEN", 0x1C, "rw", "number of 16-byte instructions; fetch past it is Fault.PROGRAM_OVERRUN"),
    Reg("WIN_BASE_LO", 0x20, "rw", "physical base address of the DRAM window, bits 31:0"),
    Reg("WIN_BASE_HI", 0x24, "rw", "physical base address of the DRAM window, bits 63:32"),
    Reg("WIN_SIZE", 0x28, "rw", "size of the DRAM window in bytes; nothing outside is ever read or written"),
    Reg("IRQ_ENABLE", 0x2C, "rw", "bit 0: raise `interrupt` when a run ends (done or error)"),
    Reg("IRQ_STATUS", 0x30, "w1c", "bit 0: a run ended; write 1 to clear"),
    Reg("CYCLES_LO", 0x40, "ro", "clock cycles from START to done, bits 31:0"),
    Reg("CYCLES_HI", 0x44, "ro", "bits 63:32"),
    Reg("LOAD_BUSY_LO", 0x48, "ro", "cycles the load engine was executing an instruction"),
    Reg("LOAD_BUSY_HI", 0x4C, "ro", "bits 63:32"),
    Reg("COMPUTE_BUSY_LO", 0x50, "ro", "cycles the compute engine was executing an instruction"),
    Reg("COMPUTE_BUSY_HI", 0x54, "ro", "bits 63:32"),
    Reg("STORE_BUSY_LO", 0x58, "ro", "cycles the store engine was executing an instruction"),
    Reg("STORE_BUSY_HI", 0x5C, "ro", "bits 63:32"),
    Reg("DMA_RD_BYTES_LO", 0x60, "ro", "bytes read from DRAM (instructions and data)"),
    Reg("DMA_RD_BYTES_HI", 0x64, "ro", "bits 63:32"),
    Reg("DMA_WR_BYTES_LO", 0x68, "ro", "bytes written to DRAM"),
    Reg("DMA_WR_BYTES_HI", 0x6C, "ro", "bits 63:32"),
    Reg("INSTRS_LO", 0x70, "ro", "instructions retired"),
    Reg("INSTRS_HI", 0x74, "ro", "bits 63:32"),
    Reg("ARRAY_BUSY_LO", 0x78, "ro", "cycles the systolic array accepted operands (utilization numerator)"),
    Reg("ARRAY_BUSY_HI", 0x7C, "ro", "bits 63:32"),
    Reg("DMA_BEATS_LO", 0x80, "ro", "cycles in which a read data beat was accepted (DMA utilization numerator)"),
    Reg("DMA_BEATS_HI", 0x84, "ro", "bits 63:32"),
)

REG: Mapping[str, Reg] = {r.name: r for r in REGISTERS}

#: The 64-bit counters (name -> offset of the _LO half).
COUNTERS: Mapping[str, int] = {r.name[:-3]: r.offset for r in REGISTERS if r.name.endswith("_LO") and r.access == "ro"}

#: Bytes of AXI4-Lite address space the register file decodes.
CSR_SPACE = 0x100

for _r in REGISTERS:
    assert _r.offset % 4 == 0 and _r.offset < CSR_SPACE, _r
assert len({r.offset for r in REGISTERS}) == len(REGISTERS)
