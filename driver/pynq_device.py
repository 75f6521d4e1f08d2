"""The board backend: the accelerator on a Zynq / Kria FPGA through the `pynq` package.

``pynq.Overlay`` loads the bitstream (its ``.hwh`` must lie beside it) and tells
where the accelerator's AXI4-Lite registers are; ``pynq.allocate`` gives
physically contiguous DRAM with a physical address for the accelerator and a
numpy view for the host; ``pynq.MMIO`` reads and writes the registers.  Done is
awaited on the accelerator's interrupt through PYNQ's asyncio ``Interrupt`` when
the overlay wires one up, else by polling STATUS.  The same code runs on the
board and on a host talking to a board through PYNQ.remote
(``PYNQ_REMOTE_DEVICES=<board ip>``).
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from pathlib import Path

import numpy as np

from systolica import csr
from systolica.config import AccelConfig
from systolica.driver.device import DeviceError

__all__ = ["PynqDevice", "find_accelerator_ip"]

IP_NAME_HINT = "systolica"
_log = logging.getLogger(__name__)


def _import_pynq():
    try:
        import pynq
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise DeviceError("the pynq backend needs the `pynq` package: pip install -e .[board] "
                          f"(on the board it comes with the PYNQ image) ({e})") from None
    return pynq


def find_accelerator_ip(ip_dict: dict) -> tuple[str, dict]:
    """The overlay IP that is the systolica accelerator (by its VLNV or instance name)."""
    hits = [(name, d) for name, d in ip_dict.items()
            if IP_NAME_HINT in str(d.get("type", "")).lower() or IP_NAME_HINT in name.lower()]
    if not hits:
        raise DeviceError("the overlay has no systolica accelerator IP; IPs found: "
                          + (", ".join(sorted(ip_dict)) or "none") + " (was the bitstream built by `systolica hw build`?)")
    if len(hits) > 1:
        raise DeviceError("the overlay has several systolica IPs (" + ", ".join(n for n, _ in hits)
                          + "); pass ip_name=... to choose one")
    return hits[0]


class _PynqBuffer:
    def __init__(self, buf):
        self.buf = buf
        self.physical_address = int(buf.physical_address)
        self.view = buf  # a numpy ndarray subclass over the same memory

    def sync_to_device(self) -> None:
        self.buf.sync_to_device()

    def sync_from_device(self) -> None:
        self.buf.sync_from_device()


class PynqDevice:
    """The accelerator on an FPGA board.

    Parameters
    ----------
    cfg
        The configuration the artifact was compiled for (checked against the ID register by the runtime).
    bitstream
        Path of the ``.bit``; its ``.hwh`` must sit beside it.  Loads the overlay unless ``download=False``.
    base_addr, addr_range
        Instead of a bitstream: the physical address of the accelerator's registers (an overlay that is
        already loaded, or a simulated board in tests).
    poll_s
        Polling interval while waiting for DONE when no interrupt is wired.
    """

    name = "pynq"

    def __init__(self, cfg: AccelConfig, bitstream: str | Path | None = None, *, base_addr: int | None = None,
                 addr_range: int = csr.CSR_SPACE, ip_name: str | None = None, download: bool = True,
                 poll_s: float = 1e-4):
        pynq = _import_pynq()
        self.cfg, self.poll_s, self._pynq = cfg, poll_s, pynq
        self.interrupt = None
        if bitstream is not None:
            bit = Path(bitstream)
            if not bit.exists():
                raise DeviceError(f"bitstream {bit} does not exist (build it with `systolica hw build --board ...`, "
                                  "then copy the deploy folder to the board)")
            hwh = bit.with_suffix(".hwh")
            if not hwh.exists():
                raise DeviceError(f"{hwh} is missing: PYNQ needs the .hwh written by Vivado next to the .bit "
                                  "to find the accelerator's registers")
            self.overlay = pynq.Overlay(str(bit), download=download)
            name, desc = ((ip_name, self.overlay.ip_dict[ip_name]) if ip_name
                          else find_accelerator_ip(self.overlay.ip_dict))
            base_addr, addr_range = int(desc["phys_addr"]), int(desc["addr_range"])
            if desc.get("interrupts"):
                try:
                    self.interrupt = pynq.Interrupt(f"{name}/interrupt")
                except Exception as e:  # noqa: BLE001 - no interrupt controller wired: poll, and say so
                    self.interrupt = None
                    warnings.warn(f"pynq: the interrupt of {name} cannot be used ({type(e).__name__}: {e}); "
                                  f"waiting for DONE by polling STATUS every {poll_s * 1e3:g} ms instead",
                                  RuntimeWarning, stacklevel=2)
            else:
                _log.info("pynq: %s has no interrupt in the overlay; waiting for DONE by polling STATUS", name)
        #: how :meth:`wait_done` waits: "interrupt" or "polling"
        self.wait_mode = "interrupt" if self.interrupt is not None else "polling"
        if base_addr is None:
            raise DeviceError("PynqDevice needs a bitstream (path to the .bit) or base_addr")
        self.mmio = pynq.MMIO(base_addr, addr_range)
        self._buffers: list = []

    def alloc(self, nbytes: int) -> _PynqBuffer:
        try:
            buf = self._pynq.allocate(shape=(nbytes,), dtype=np.uint8)
        except Exception as e:
            raise DeviceError(f"pynq.allocate of {nbytes} bytes failed: {e} (is the CMA pool large enough?)") from e
        buf[:] = 0
        self._buffers.append(buf)
        return _PynqBuffer(buf)

    def read_csr(self, offset: int) -> int:
        return int(self.mmio.read(offset))

    def write_csr(self, offset: int, value: int) -> None:
        self.mmio.write(offset, int(value) & 0xFFFF_FFFF)

    def wait_done(self, timeout_s: float) -> bool:
        done = csr.STATUS_DONE | csr.STATUS_ERROR
        status_off = csr.REG["STATUS"].offset
        if self.interrupt is not None:
            import asyncio

            self.write_csr(csr.REG["IRQ_ENABLE"].offset, csr.IRQ_DONE)

            async def _wait():
                while not self.read_csr(status_off) & done:
                    await self.interrupt.wait()

            try:
                asyncio.run(asyncio.wait_for(_wait(), timeout_s))
            except asyncio.TimeoutError:
                return False
            self.write_csr(csr.REG["IRQ_STATUS"].offset, csr.IRQ_DONE)
            return True
        deadline = time.monotonic() + timeout_s
        while not self.read_csr(status_off) & done:
            if time.monotonic() > deadline:
                return False
            time.sleep(self.poll_s)
        return True

    def close(self) -> None:
        for b in self._buffers:
            # one buffer that cannot be freed (already freed, overlay gone) must not keep the rest allocated
            with contextlib.suppress(Exception):
                b.freebuffer()
        self._buffers.clear()
