"""Power while a baseline runs: measured where the machine lets us, stated figures otherwise.

- GPU: NVML (``pynvml``) board power, sampled every 50 ms in a thread during the run.
- CPU: the RAPL package energy counter (``/sys/class/powercap/intel-rapl:0/energy_uj``) when it is
  readable -- the whole package, so other load on the machine is counted too; otherwise the stated
  per-core figure of ``costs.json`` times the threads the baseline used.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from systolica.bench.costs import CostInputs

__all__ = ["PowerReading", "PowerMeter", "cpu_meter", "gpu_meter"]

RAPL = Path("/sys/class/powercap/intel-rapl:0/energy_uj")


@dataclass(frozen=True)
class PowerReading:
    watts: float | None
    source: str  # "NVML (measured)", "RAPL package (measured)" or the stated figure's source


class PowerMeter:
    """Context manager: ``with meter: run()`` then :meth:`reading`."""

    def __init__(self, stated: PowerReading):
        self.stated = stated
        self._measured: float | None = None
        self._source = ""

    def __enter__(self) -> PowerMeter:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def reading(self) -> PowerReading:
        if self._measured is not None and self._measured > 0:
            return PowerReading(self._measured, self._source)
        return self.stated


class _RaplMeter(PowerMeter):
    def __enter__(self):
        self._e0, self._t0 = int(RAPL.read_text()), time.perf_counter()
        return self

    def __exit__(self, *exc):
        e1, t1 = int(RAPL.read_text()), time.perf_counter()
        de = e1 - self._e0
        if de > 0 and t1 > self._t0:  # a wrapped counter reads as negative: keep the stated figure
            self._measured, self._source = de / 1e6 / (t1 - self._t0), "RAPL package energy (measured)"


class _NvmlMeter(PowerMeter):
    def __init__(self, stated: PowerReading, handle, nvml):
        super().__init__(stated)
        self._h, self._nvml = handle, nvml
        self._samples: list[float] = []
        self._stop = threading.Event()

    def _loop(self):
        while not self._stop.is_set():
            try:
                self._samples.append(self._nvml.nvmlDeviceGetPowerUsage(self._h) / 1000.0)  # mW -> W
            except Exception:  # noqa: BLE001 - a failed sample leaves the stated figure
                return
            self._stop.wait(0.05)

    def __enter__(self):
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self._samples:
            self._measured = sum(self._samples) / len(self._samples)
            self._source = f"NVML board power (measured, {len(self._samples)} samples)"


def cpu_meter(costs: CostInputs, threads: int) -> PowerMeter:
    stated = PowerReading(costs.cpu_core_power.value * threads,
                          f"stated: {threads} cores x {costs.cpu_core_power.value} W ({costs.cpu_core_power.source})")
    try:
        int(RAPL.read_text())
        return _RaplMeter(stated)
    except (OSError, ValueError):
        return PowerMeter(stated)


def gpu_meter(costs: CostInputs, gpu_name: str, index: int = 0) -> PowerMeter:
    f = costs.gpu_power_for(gpu_name)
    stated = PowerReading(f.value, f"stated TDP: {f.source}")
    try:
        import pynvml

        pynvml.nvmlInit()
        return _NvmlMeter(stated, pynvml.nvmlDeviceGetHandleByIndex(index), pynvml)
    except Exception:  # noqa: BLE001 - no pynvml or no driver: the stated figure
        return PowerMeter(stated)
