"""The golden backend: a :class:`~systolica.driver.device.Device` whose accelerator is the golden simulator.

It behaves like the hardware at the register level: the host writes the program
and data into DRAM buffers, sets PROG_BASE / PROG_LEN / WIN_BASE / WIN_SIZE, writes
START, and reads STATUS, ERROR_CODE, ERROR_PC and the counters back.  The
program is fetched from the simulated DRAM, not handed over as Python objects,
so the runtime exercises exactly the path it uses on a board.
"""

from __future__ import annotations

import numpy as np

from systolica import csr
from systolica.config import AccelConfig
from systolica.driver.device import DeviceError
from systolica.faults import Fault
from systolica.isa import WORD_BYTES
from systolica.sim.golden import GoldenSim

__all__ = ["GoldenDevice", "ArenaBuffer", "words_from_bytes"]

PHYS_BASE = 0x4000_0000  # where the simulated DRAM starts in the "physical" address space


class ArenaBuffer:
    """A slice of the simulated DRAM; host view and device memory are the same bytes."""

    def __init__(self, arena: np.ndarray, offset: int, nbytes: int):
        self.physical_address = PHYS_BASE + offset
        self.offset = offset
        self.view = arena[offset:offset + nbytes]

    def sync_to_device(self) -> None:  # one memory: nothing to flush
        pass

    def sync_from_device(self) -> None:
        pass


def words_from_bytes(raw: np.ndarray) -> list[int]:
    """128-bit little-endian instruction words from raw bytes."""
    q = np.frombuffer(np.ascontiguousarray(raw).tobytes(), dtype="<u8").reshape(-1, 2)
    return [int(lo) | (int(hi) << 64) for lo, hi in q]


class GoldenDevice:
    """Golden-simulator accelerator with a register file and a DRAM arena.

    Parameters
    ----------
    cfg
        Configuration the simulated hardware is "built" from (its hash is the ID register).
    dram_bytes
        Size of the simulated DRAM (default ``cfg.dram_bytes``); allocation is lazy (zero pages).
    cycle_model
        Optional callable ``(program_words, counters) -> dict`` of cycle counters (the performance
        model); without it the cycle CSRs read 0.
    """

    name = "golden"

    def __init__(self, cfg: AccelConfig, dram_bytes: int | None = None, cycle_model=None):
        self.cfg = cfg
        self.arena = np.zeros(int(dram_bytes or cfg.dram_bytes), np.uint8)
        self._next = 0
        self._regs = {r.offset: r.reset for r in csr.REGISTERS}
        self._regs[csr.REG["ID"].offset] = cfg.hash32()
        self._sim: GoldenSim | None = None
        self._sim_window: tuple[int, int] | None = None
        self.cycle_model = cycle_model
        self.last_result = None

    # ------------------------------------------------------------- memory
    def alloc(self, nbytes: int) -> ArenaBuffer:
        align = 4096
        off = (self._next + align - 1) // align * align
        if off + nbytes > self.arena.size:
            raise DeviceError(f"golden device: cannot allocate {nbytes} bytes; {self.arena.size - off} of "
                              f"{self.arena.size} bytes of simulated DRAM are left")
        self._next = off + nbytes
        buf = ArenaBuffer(self.arena, off, nbytes)
        buf.view[...] = 0
        return buf

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
        self._set("STATUS", 0)
        self._set("ERROR_CODE", 0)
        self._set("ERROR_PC", 0)
        if self._sim is not None:
            self._sim.reset()

    # ------------------------------------------------------------- run
    def _start(self) -> None:
        win_base = self._r("WIN_BASE_LO") | (self._r("WIN_BASE_HI") << 32)
        win_size = self._r("WIN_SIZE")
        off = win_base - PHYS_BASE
        if off < 0 or off + win_size > self.arena.size or win_size == 0:
            raise DeviceError(f"DRAM window [{win_base:#x}, +{win_size:#x}) is not inside the simulated DRAM "
                              f"[{PHYS_BASE:#x}, +{self.arena.size:#x})")
        if self._sim_window != (off, win_size):
            self._sim = GoldenSim(self.cfg, self.arena, window_base=off, window_size=win_size)
            self._sim_window = (off, win_size)
        sim = self._sim
        base, n = self._r("PROG_BASE"), self._r("PROG_LEN")
        # Fetch as the hardware does: words that lie outside the window fault before they run.
        fit = max(0, min(n, (win_size - base) // WORD_BYTES)) if base % WORD_BYTES == 0 else 0
        words = words_from_bytes(sim.window[base:base + fit * WORD_BYTES])
        res = sim.run(words, raise_on_fault=False)
        status, pc = res.status, res.pc
        if fit < n and status in (Fault.NONE, Fault.PROGRAM_OVERRUN) and (status != Fault.NONE or pc >= fit):
            status, pc = Fault.DMA_WINDOW, fit
        self.last_result = res
        c = res.counters
        self._set("ERROR_CODE", int(status))
        self._set("ERROR_PC", pc if status != Fault.NONE else 0)
        self._set("STATUS", csr.STATUS_DONE | (csr.STATUS_ERROR if status != Fault.NONE else 0))
        self._set64("INSTRS", c.instructions)
        self._set64("DMA_RD_BYTES", c.dma_read_bytes + c.fetch_bytes)
        self._set64("DMA_WR_BYTES", c.dma_write_bytes)
        cycles = self.cycle_model(words, c) if self.cycle_model else {}
        for name in ("CYCLES", "LOAD_BUSY", "COMPUTE_BUSY", "STORE_BUSY", "ARRAY_BUSY", "DMA_BEATS"):
            self._set64(name, int(cycles.get(name, 0)))
        if self._r("IRQ_ENABLE") & csr.IRQ_DONE:
            self._regs[csr.REG["IRQ_STATUS"].offset] |= csr.IRQ_DONE

    def wait_done(self, timeout_s: float) -> bool:
        return bool(self._r("STATUS") & (csr.STATUS_DONE | csr.STATUS_ERROR))

    def close(self) -> None:
        self._sim = None
