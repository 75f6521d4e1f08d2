"""Exceptions for a run that stopped on a fault: the :class:`~systolica.faults.Fault` code plus the faulting PC.

Every backend that runs programs (golden simulator, RTL, board) reports the same
pair; :func:`fault_error` builds the matching exception so that callers can
``except DmaWindowError`` whatever ran the program.
"""

from __future__ import annotations

from systolica.faults import Fault

__all__ = [
    "SimFault", "IllegalOpcodeError", "IllegalFieldError", "DmaWindowError", "SramRangeError",
    "TokenDeadlockError", "ProgramOverrunError", "DmaAlignError", "DeviceTimeoutError", "BusError", "BufferCollisionError", "fault_error",
    "FAULT_ERRORS",
]


class SimFault(RuntimeError):
    """A program stopped on a fault.

    Attributes
    ----------
    fault : Fault
        The code the hardware writes to ``ERROR_CODE``.
    pc : int
        Index of the faulting instruction (``ERROR_PC``).
    """

    def __init__(self, fault: Fault, pc: int, message: str):
        self.fault = Fault(fault)
        self.pc = int(pc)
        self.detail = message
        super().__init__(f"{self.fault.name} at pc {self.pc}: {message}")


class IllegalOpcodeError(SimFault):
    """The opcode is not in the ISA table."""


class IllegalFieldError(SimFault):
    """A field value the ISA forbids, reserved bits set, or a token flag the engine does not have."""


class DmaWindowError(SimFault):
    """A DMA row would touch bytes outside the DRAM window."""


class SramRangeError(SimFault):
    """An operand or result runs past the end of its on-chip buffer."""


class TokenDeadlockError(SimFault):
    """Every engine waits on a token that can never arrive."""


class ProgramOverrunError(SimFault):
    """Fetch ran past the end of the program without a FINISH."""


class DmaAlignError(SimFault):
    """A DRAM address or stride not aligned to one line of the buffer."""


class DeviceTimeoutError(SimFault):
    """The run did not finish within its budget (instructions or seconds)."""


class BusError(SimFault):
    """The memory system answered a fetch, LOAD or STORE burst with an AXI error (SLVERR / DECERR).

    The accelerator stops issuing bursts, lets those in flight complete, and reports the
    instruction whose transfer failed (for a fetch: the word that could not be read).  Only a
    bus reports it: the golden simulator has none.
    """


class BufferCollisionError(SimFault):
    """The accelerator read an on-chip buffer line in the same cycle as it wrote it, where a block RAM answers with
    either word (hardware only: the golden simulator has no cycles).  Compiled programs never do; the pc is the
    compute engine's when it was seen."""


FAULT_ERRORS: dict[Fault, type[SimFault]] = {
    Fault.ILLEGAL_OPCODE: IllegalOpcodeError,
    Fault.ILLEGAL_FIELD: IllegalFieldError,
    Fault.DMA_WINDOW: DmaWindowError,
    Fault.SRAM_RANGE: SramRangeError,
    Fault.TOKEN_DEADLOCK: TokenDeadlockError,
    Fault.PROGRAM_OVERRUN: ProgramOverrunError,
    Fault.DMA_ALIGN: DmaAlignError,
    Fault.TIMEOUT: DeviceTimeoutError,
    Fault.BUS_ERROR: BusError,
    Fault.BUFFER_COLLISION: BufferCollisionError,
}


def fault_error(fault: Fault, pc: int, message: str) -> SimFault:
    """The specific :class:`SimFault` subclass for ``fault``."""
    if Fault(fault) == Fault.NONE:
        raise ValueError("Fault.NONE is not a fault")
    return FAULT_ERRORS[Fault(fault)](fault, pc, message)
