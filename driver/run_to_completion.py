"""A Device whose accelerator runs a whole program per START: the golden simulator, the Verilator harness.

Such a backend has no registers of its own that the host can poke mid-run, so this
class keeps the register file on the host exactly as the hardware defines it
(:mod:`systolica.csr`): writes to PROG_BASE, WIN_BASE, ... are stored; a START
hands them to :meth:`RunToCompletionDevice._execute`, which runs the program to
its end and returns the fault, the faulting PC and the counters the hardware
would show.  The runtime cannot tell this from a board.
"""

from __future__ import annotations

import numpy as np

from systolica import csr
from systolica.config import AccelConfig
from systolica.driver.device import DeviceError
from systolica.faults import Fault

__all__ = ["RunToCompletionDevice", "ArenaBuffer", "BumpAllocator", "PHYS_BASE"]

PHYS_BASE = 0x4000_0000  # where the simulated DRAM starts in the "physical" address space
PAGE = 4096  # buffers start on a page, as pynq.allocate's do


class ArenaBuffer:
    """A slice of the simulated DRAM; host view and device memory are the same bytes.

    ``phys_base`` is the physical address of the arena's first byte (``PHYS_BASE`` for the
    emulated register file; 0 where the DRAM model starts at address 0, as in the testbench).
    """

    def __init__(self, arena: np.ndarray, offset: int, nbytes: int, phys_base: int = PHYS_BASE):
        self.physical_address = phys_base + offset
        self.offset = offset
        self.view = arena[offset:offset + nbytes]

    def sync_to_device(self) -> None:  # one memory: nothing to flush
        pass

    def sync_from_device(self) -> None:
        pass


class BumpAllocator:
    """Page-aligned bump allocation of zeroed regions of a DRAM arena, from ``base`` upward.

    Nothing is freed: a simulated device serves one runtime, which allocates its window once.
    """

    def __init__(self, arena: np.ndarray, base: int = 0):
        self.arena, self.next = arena, base

    def take(self, nbytes: int, who: str, hint: str = "") -> int:
        """Offset of ``nbytes`` fresh zeroed bytes; :class:`DeviceError` naming ``who`` when they do not fit."""
        off = -(-self.next // PAGE) * PAGE
        if off + nbytes > self.arena.size:
            raise DeviceError(f"{who}: cannot allocate {nbytes} bytes; {max(0, self.arena.size - off)} of "
                              f"{self.arena.size} bytes of simulated DRAM are left{hint}")
        self.next = off + nbytes
        self.arena[off:off + nbytes] = 0
        return off


class RunToCompletionDevice:
    """Register file + DRAM arena on the host; subclasses run programs in :meth:`_execute`."""

    name = "emulated"

    def __init__(self, cfg: AccelConfig, dram_bytes: int | None = None):
        self.cfg = cfg
        self.arena = np.zeros(int(dram_bytes or cfg.dram_bytes), np.uint8)
        self._heap = BumpAllocator(self.arena)
        self._regs = {r.offset: r.reset for r in csr.REGISTERS}
        self._regs[csr.REG["ID"].offset] = cfg.hash32()

    # ------------------------------------------------------------- memory
    def alloc(self, nbytes: int) -> ArenaBuffer:
        off = self._heap.take(nbytes, f"{self.name} device", " (open the device with a larger dram_bytes)")
        return ArenaBuffer(self.arena, off, nbytes)

    # ------------------------------------------------------------- registers
    def read_csr(self, offset: int) -> int:
        if offset not in self._regs:
            raise DeviceError(f"no CSR at offset {offset:#x}")
        return self._regs[offset]

    def write_csr(self, offset: int, value: int) -> None:
        reg = next((r for r in csr.REGISTERS if r.offset == offset), None)
        if reg is None:
            raise DeviceError(f"no CSR at offset {offset:#x}")
        value &= 0xFFFF_FFFF
        if reg.name == "CTRL":
            if value & csr.CTRL_SOFT_RESET:
                self._soft_reset()
            if value & csr.CTRL_START:
                self._start()
        elif reg.name == "IRQ_STATUS":
            self._regs[offset] &= ~value
        elif reg.access == "rw":
            self._regs[offset] = value

    def _r(self, name: str) -> int:
        return self._regs[csr.REG[name].offset]

    def _set(self, name: str, value: int) -> None:
        self._regs[csr.REG[name].offset] = int(value) & 0xFFFF_FFFF

    def _set64(self, name: str, value: int) -> None:
        self._set(name + "_LO", value)
        self._set(name + "_HI", int(value) >> 32)

    def _soft_reset(self) -> None:
        for name in ("STATUS", "ERROR_CODE", "ERROR_PC"):
            self._set(name, 0)

    def _start(self) -> None:
        win_base = self._r("WIN_BASE_LO") | (self._r("WIN_BASE_HI") << 32)
        win_size = self._r("WIN_SIZE")
        off = win_base - PHYS_BASE
        if off < 0 or off + win_size > self.arena.size or win_size == 0:
            raise DeviceError(f"DRAM window [{win_base:#x}, +{win_size:#x}) is not inside the simulated DRAM "
                              f"[{PHYS_BASE:#x}, +{self.arena.size:#x})")
        status, pc, counters = self._execute(off, win_size, self._r("PROG_BASE"), self._r("PROG_LEN"))
        self._set("ERROR_CODE", int(status))
        self._set("ERROR_PC", pc if status != Fault.NONE else 0)
        self._set("STATUS", csr.STATUS_DONE | (csr.STATUS_ERROR if status != Fault.NONE else 0))
        for name in csr.COUNTERS:
            self._set64(name, int(counters.get(name, 0)))
        if self._r("IRQ_ENABLE") & csr.IRQ_DONE:
            self._regs[csr.REG["IRQ_STATUS"].offset] |= csr.IRQ_DONE

    def _execute(self, win_off: int, win_size: int, prog_base: int, prog_len: int) -> tuple[Fault, int, dict]:
        """Run the program; return (fault, faulting pc, counters by csr.COUNTERS name)."""
        raise NotImplementedError

    def wait_done(self, timeout_s: float) -> bool:
        return bool(self._r("STATUS") & (csr.STATUS_DONE | csr.STATUS_ERROR))

    def close(self) -> None:
        pass
