"""The RTL backend: the generated Verilog of the accelerator under Verilator.

Two ways to drive it, one :class:`~systolica.driver.device.Device` each:

- :class:`CocotbRtlDevice` inside a cocotb simulation.  The runtime is ordinary
  blocking code; run it in a thread with ``await cocotb.task.bridge(fn)()`` and
  every register access becomes a real AXI4-Lite transaction through
  ``cocotb.task.resume``.  DRAM is the ``AxiRam`` model of the testbench, copied
  to and from a host buffer around each run, as PYNQ does for non-coherent memory.
- :class:`RtlDevice` for long runs with no Python on the clock edge: the
  Verilator C++ harness of :mod:`systolica.sim.fast_harness` (DRAM in C++, the
  clock in the simulator), used by ``systolica run --backend rtl``.
"""

from __future__ import annotations

import numpy as np

from systolica import csr
from systolica.config import AccelConfig
from systolica.driver.device import DeviceError, DeviceFault
from systolica.driver.run_to_completion import PHYS_BASE, ArenaBuffer, BumpAllocator, RunToCompletionDevice

__all__ = ["CocotbRtlDevice", "RtlDevice", "MemoryView"]


class MemoryView(ArenaBuffer):
    """A device buffer over simulator memory: physical address = offset in the DRAM model."""

    def __init__(self, mem: np.ndarray, offset: int, nbytes: int):
        super().__init__(mem, offset, nbytes, phys_base=0)


class _AxiRamBuffer(MemoryView):
    """Host copy of a region of the testbench's ``AxiRam``, synced around every run (like PYNQ's buffers)."""

    def __init__(self, ram, mem: np.ndarray, offset: int, nbytes: int):
        super().__init__(mem, offset, nbytes)
        self.ram = ram

    def sync_to_device(self) -> None:
        self.ram.write(self.physical_address, self.view.tobytes())

    def sync_from_device(self) -> None:
        self.view[:] = np.frombuffer(self.ram.read(self.physical_address, self.view.size), np.uint8)


class CocotbRtlDevice:
    """The accelerator RTL in a cocotb simulation, driven from a ``cocotb.task.bridge`` thread.

    Parameters
    ----------
    tb
        A :class:`systolica.sim.tb_accel.AccelTB` (clock started, reset done).
    cfg
        Its configuration.
    cycles_per_second
        How simulated cycles map to the runtime's timeouts (``wait_done(timeout_s)`` waits
        ``timeout_s * cycles_per_second`` cycles); default: the config's clock.
    """

    name = "rtl"

    def __init__(self, tb, cfg: AccelConfig, cycles_per_second: float | None = None, alloc_base: int = 0x1000):
        from cocotb.task import resume  # cocotb 2.x (was cocotb.function in 1.x)

        self._resume = resume
        self.tb, self.cfg = tb, cfg
        self.cps = cycles_per_second or cfg.clock_mhz * 1e6
        self.mem = np.zeros(tb.mem_size, np.uint8)  # host side; the AxiRam holds the device side
        self._heap = BumpAllocator(self.mem, alloc_base)
        self._win = [0, 0, 0]  # base lo, base hi, size: the testbench's memory guard follows them

    def alloc(self, nbytes: int) -> MemoryView:
        off = self._heap.take(nbytes, "rtl device", " (give the testbench more memory)")
        return _AxiRamBuffer(self.tb.ram, self.mem, off, nbytes)

    def read_csr(self, offset: int) -> int:
        return int(self._resume(self.tb.csr.read_dword)(offset))

    def write_csr(self, offset: int, value: int) -> None:
        value &= 0xFFFF_FFFF
        names = {csr.REG["WIN_BASE_LO"].offset: 0, csr.REG["WIN_BASE_HI"].offset: 1, csr.REG["WIN_SIZE"].offset: 2}
        if offset in names:
            self._win[names[offset]] = value
            self.tb.window = (self._win[0] | (self._win[1] << 32), self._win[2])
        if offset == csr.REG["CTRL"].offset and value & csr.CTRL_START:
            # done is awaited on the interrupt line: enable it and clear a stale one first
            self._resume(self.tb.csr.write_dword)(csr.REG["IRQ_STATUS"].offset, csr.IRQ_DONE)
            self._resume(self.tb.csr.write_dword)(csr.REG["IRQ_ENABLE"].offset, csr.IRQ_DONE)
        self._resume(self.tb.csr.write_dword)(offset, value)

    def wait_done(self, timeout_s: float) -> bool:
        cycles = max(1, int(timeout_s * self.cps))
        return bool(self._resume(self.tb.wait_done)(cycles))

    def close(self) -> None:
        pass


class RtlDevice(RunToCompletionDevice):
    """The accelerator RTL in the Verilator C++ harness (no Python on the clock edge).

    The host-side register file is handed to the harness on START; the harness sets the same
    CSRs on the RTL, runs the program from the simulated DRAM to its interrupt and returns the
    RTL's own STATUS, ERROR_CODE, ERROR_PC and counters, which this device then shows.
    """

    name = "rtl"

    def __init__(self, cfg: AccelConfig, dram_bytes: int | None = None, build_dir=None, stall_percent: int = 0,
                 slverr: dict[str, tuple[int, int]] | None = None, dram_latency: int | None = None):
        """``slverr``: error injection, ``{"read" | "write": (lo, hi)}`` physical address ranges (as a buffer's
        ``physical_address``) that the DRAM model answers with AXI SLVERR.  ``dram_latency``: the DRAM model's
        read and write-response latency in cycles (:meth:`FastRtl.run`; ``None``: ``$SYSTOLICA_DRAM_LATENCY``,
        default 0)."""
        super().__init__(cfg, dram_bytes)
        try:
            from systolica.sim.fast_harness import FastRtl, default_build_root
        except ImportError as e:
            raise DeviceError(f"the rtl backend needs the Verilator harness (systolica.sim.fast_harness): {e}") from e
        from pathlib import Path

        root = Path(build_dir) if build_dir else default_build_root()
        self.harness = FastRtl(cfg, root)
        self.stall_percent = stall_percent
        self.slverr = dict(slverr or {})
        self.dram_latency = dram_latency
        self.last_result = None

    def _execute(self, off: int, win_size: int, base: int, n: int):
        from systolica.faults import Fault

        # the harness maps physical address 0 to the start of its DRAM image: hand it the arena
        res = self.harness.run(self.arena, window_base=off, window_size=win_size, prog_base=base, prog_len=n,
                               stall_percent=self.stall_percent, dram_latency=self.dram_latency,
                               slverr={k: (lo - PHYS_BASE, hi - PHYS_BASE) for k, (lo, hi) in self.slverr.items()})
        self.last_result = res
        if res.violations:
            raise DeviceFault(f"rtl: the accelerator touched {res.violations} bytes outside its DRAM window")
        if not res.done:
            return Fault.TIMEOUT, res.pc, res.counters
        return res.code, res.pc, res.counters
