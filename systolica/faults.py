"""Fault codes: what the accelerator (RTL or golden simulator) reports when it stops on an error.

The hardware writes one of these into its ERROR CSR together with the program
counter (instruction index) of the faulting instruction; the golden simulator
raises :class:`systolica.sim.golden.SimFault` carrying the same pair.  The codes
are part of the hardware/software contract: never renumber them.
"""

from __future__ import annotations

import enum

__all__ = ["Fault"]


class Fault(enum.IntEnum):
    NONE = 0  # finished normally
    ILLEGAL_OPCODE = 1  # opcode not in the ISA table
    ILLEGAL_FIELD = 2  # reserved bits set, buf=3, NOP engine=3, a token flag the engine does not have
    DMA_WINDOW = 3  # a DMA row would touch bytes outside the configured DRAM window
    SRAM_RANGE = 4  # an operand or result runs past the end of its on-chip buffer
    TOKEN_DEADLOCK = 5  # every engine waits on a token that can never arrive (protocol violation)
    PROGRAM_OVERRUN = 6  # fetch ran past the program length without a FINISH
    DMA_ALIGN = 7  # a DRAM address or stride not aligned to a line of the buffer
    TIMEOUT = 8  # the host's watchdog stopped a device that did not finish in time
    BUS_ERROR = 9  # an AXI read or write answered SLVERR / DECERR (hardware only: the golden model has no bus)
    BUFFER_COLLISION = 10  # a buffer line read in the cycle it was written (hardware only: the golden model has no cycles)

    @property
    def describe(self) -> str:
        return {
            Fault.NONE: "no fault",
            Fault.ILLEGAL_OPCODE: "illegal opcode",
            Fault.ILLEGAL_FIELD: "illegal field value or reserved bits set",
            Fault.DMA_WINDOW: "DMA address outside the DRAM window",
            Fault.SRAM_RANGE: "on-chip buffer address out of range",
            Fault.TOKEN_DEADLOCK: "dependency-token deadlock",
            Fault.PROGRAM_OVERRUN: "program ran past its end without FINISH",
            Fault.DMA_ALIGN: "misaligned DRAM address or stride",
            Fault.TIMEOUT: "device timed out",
            Fault.BUS_ERROR: "AXI error response (SLVERR/DECERR) to a fetch or DMA transfer",
            Fault.BUFFER_COLLISION: "an on-chip buffer line read in the cycle it was written",
        }[self]
