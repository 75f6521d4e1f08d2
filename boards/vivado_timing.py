"""Vivado's timing summary (``report_timing_summary``) read back: WNS at the board's clock, and the Fmax it implies.

The build script writes ``reports/timing.rpt`` after implementation.  Its "Design Timing
Summary" table has a header row ``WNS(ns) TNS(ns) ...``, a row of dashes, then the values;
a design with no constrained path prints ``NA`` there, which is no figure at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["VivadoTiming", "VivadoTimingError", "parse_timing_summary", "read_timing_summary"]


class VivadoTimingError(ValueError):
    """The report has no Design Timing Summary with a WNS figure."""


@dataclass(frozen=True)
class VivadoTiming:
    wns_ns: float  # worst negative slack (setup) at the target clock; negative: the target is missed
    tns_ns: float
    failing_endpoints: int
    target_mhz: float

    @property
    def fmax_mhz(self) -> float:
        """The clock the slowest path would meet: 1 / (period - WNS)."""
        return 1000.0 / (1000.0 / self.target_mhz - self.wns_ns)

    @property
    def meets_target(self) -> bool:
        return self.wns_ns >= 0


def parse_timing_summary(text: str, target_mhz: float) -> VivadoTiming:
    """WNS, TNS and failing endpoints from a ``report_timing_summary`` text."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "WNS(ns)" in line and "TNS(ns)" in line:
            rest = [ln for ln in lines[i + 1:i + 4] if ln.strip() and not set(ln.strip()) <= {"-", " "}]
            if not rest:
                break
            fields = rest[0].split()
            if len(fields) < 3 or not re.fullmatch(r"-?\d+(\.\d+)?", fields[0]):
                raise VivadoTimingError(f"the Design Timing Summary has no WNS figure ({rest[0].strip()!r}): "
                                        "no constrained path? check the clock constraint")
            return VivadoTiming(float(fields[0]), float(fields[1]), int(fields[2]), float(target_mhz))
    raise VivadoTimingError("no Design Timing Summary (WNS(ns) TNS(ns) ...) in the report")


def read_timing_summary(path: str | Path, target_mhz: float) -> VivadoTiming:
    p = Path(path)
    if not p.exists():
        raise VivadoTimingError(f"{p} does not exist: the Vivado run wrote no timing summary")
    return parse_timing_summary(p.read_text(errors="replace"), target_mhz)
