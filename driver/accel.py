"""Register-level control of one accelerator, the same for every backend.

:class:`Accelerator` checks that the device is the hardware a program was
compiled for, runs programs that already sit in device DRAM, turns an error code
into the exception of that fault (with the faulting PC and the disassembled
instruction) and resets a device that does not answer, so that it stays usable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from systolica import csr
from systolica.asm import disasm_word
from systolica.driver.device import ConfigMismatchError, Device, DeviceError, DeviceFault, DeviceTimeout
from systolica.faults import Fault
from systolica.isa import WORD_BYTES
from systolica.program import words_from_bytes
from systolica.sim.faults import fault_error

__all__ = ["Accelerator", "RunStats"]


@dataclass
class RunStats:
    """Counters of one run, read from the device's CSRs."""

    cycles: int = 0
    load_busy: int = 0
    compute_busy: int = 0
    store_busy: int = 0
    dma_rd_bytes: int = 0
    dma_wr_bytes: int = 0
    instrs: int = 0
    array_busy: int = 0
    dma_beats: int = 0
    host_s: float = 0.0  # wall time the host spent on this run (start to done)

    def __add__(self, other: RunStats) -> RunStats:
        return RunStats(**{k: getattr(self, k) + getattr(other, k) for k in self.__dataclass_fields__})


class Accelerator:
    """One accelerator behind a :class:`~systolica.driver.device.Device`.

    Parameters
    ----------
    device
        Any backend; its VERSION register is checked at once.
    timeout_s
        Default watchdog of :meth:`run`.

    Raises
    ------
    DeviceError
        The registers are not a systolica accelerator's, or speak another CSR/ISA version.
    """

    def __init__(self, device: Device, timeout_s: float = 60.0):
        self.dev = device
        self.timeout_s = timeout_s
        version = device.read_csr(csr.REG["VERSION"].offset)
        if version >> 16 != csr.ID_MAGIC >> 16:
            raise DeviceError(f"{device.name}: VERSION register reads {version:#010x}, not a systolica accelerator "
                              f"(expected {csr.ID_MAGIC >> 16:#06x} in the upper half): wrong bitstream or address?")
        if version != csr.ID_MAGIC:
            raise DeviceError(f"{device.name}: CSR/ISA version {version & 0xFFFF} but this driver speaks "
                              f"{csr.ID_MAGIC & 0xFFFF}: update systolica or rebuild the bitstream")
        self.hash32 = device.read_csr(csr.REG["ID"].offset)

    def check_config(self, expected_hash32: int, what: str = "program") -> None:
        """Raise :class:`ConfigMismatchError` unless the device is the configuration ``what`` was compiled for."""
        if expected_hash32 != self.hash32:
            raise ConfigMismatchError(
                f"{what} was compiled for accelerator config {expected_hash32:08x}, but the {self.dev.name} device "
                f"reports {self.hash32:08x}: recompile with the device's config (--config/--board) or load the "
                "matching bitstream")

    def _w(self, name: str, value: int) -> None:
        self.dev.write_csr(csr.REG[name].offset, value)

    def _r(self, name: str) -> int:
        return self.dev.read_csr(csr.REG[name].offset)

    def _r64(self, name: str) -> int:
        lo = self._r(name + "_LO")
        return lo | (self._r(name + "_HI") << 32)

    def reset(self) -> None:
        self._w("CTRL", csr.CTRL_SOFT_RESET)

    def run(self, window, prog_offset: int, n_instr: int, timeout_s: float | None = None) -> RunStats:
        """Run ``n_instr`` instructions at byte ``prog_offset`` of ``window`` (a device buffer).

        Raises the :class:`~systolica.sim.faults.SimFault` subclass of a hardware fault, with the faulting
        PC and instruction, or :class:`DeviceTimeout` (after resetting the device) when it does not finish.
        """
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        window.sync_to_device()
        phys = int(window.physical_address)
        self._w("WIN_BASE_LO", phys & 0xFFFF_FFFF)
        self._w("WIN_BASE_HI", phys >> 32)
        self._w("WIN_SIZE", int(window.view.size))
        self._w("PROG_BASE", prog_offset)
        self._w("PROG_LEN", n_instr)
        t0 = time.perf_counter()
        self._w("CTRL", csr.CTRL_START)
        if not self.dev.wait_done(timeout_s):
            self.reset()
            raise DeviceTimeout(f"{self.dev.name}: no DONE after {timeout_s:.1f} s running {n_instr} instructions; "
                                "the device was reset and can be used again")
        host_s = time.perf_counter() - t0
        window.sync_from_device()
        status = self._r("STATUS")
        stats = RunStats(cycles=self._r64("CYCLES"), load_busy=self._r64("LOAD_BUSY"),
                         compute_busy=self._r64("COMPUTE_BUSY"), store_busy=self._r64("STORE_BUSY"),
                         dma_rd_bytes=self._r64("DMA_RD_BYTES"), dma_wr_bytes=self._r64("DMA_WR_BYTES"),
                         instrs=self._r64("INSTRS"), array_busy=self._r64("ARRAY_BUSY"),
                         dma_beats=self._r64("DMA_BEATS"), host_s=host_s)
        if status & csr.STATUS_ERROR:
            code, pc = self._r("ERROR_CODE"), self._r("ERROR_PC")
            try:
                fault = Fault(code)
            except ValueError:
                raise DeviceFault(f"{self.dev.name}: unknown error code {code} at pc {pc}: the bitstream knows faults "
                                  "this driver does not; update systolica or rebuild the bitstream") from None
            raise fault_error(fault, pc, self._describe(window, prog_offset, n_instr, pc))
        return stats

    @staticmethod
    def _describe(window, prog_offset: int, n_instr: int, pc: int) -> str:
        start = prog_offset + pc * WORD_BYTES
        if not 0 <= pc < n_instr or start + WORD_BYTES > window.view.size:
            return f"pc {pc} is outside the {n_instr}-instruction program"
        word = words_from_bytes(np.asarray(window.view[start:start + WORD_BYTES]))[0]
        return f"instruction: {disasm_word(word)}"
