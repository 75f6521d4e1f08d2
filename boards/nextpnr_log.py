"""Where a running nextpnr is, read from its log: the phase, the post-placement Fmax estimate, the router's progress.

A whole top level takes nextpnr-ecp5 tens of minutes (placement alone 15-20 on 2 cores for ``ulx3s``), and its
router may not converge at all: router2 prints one line an iteration with the wires still used by more than one
net (``overused``), and that count falling towards 0 is the only sign the run will end; router1 prints a line every
1,000 arcs it has (re)routed with the arcs still to route, which falls to 0 as it finishes.  :func:`pnr_status`
turns the log text into a :class:`PnrStatus` for the progress line of ``systolica hw build --pnr`` and for the
error when the run is stopped (its phase, the estimate after placement, the last router iterations), so a run
that does not finish still says what it measured and why it stopped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PnrStatus", "pnr_status"]

_FMAX = re.compile(r"Max frequency for clock '[^']*': ([0-9.]+) MHz \((PASS|FAIL) at ([0-9.]+) MHz\)")
#: overused wires below which a route is let run whatever its trend (:meth:`PnrStatus.diverged`): the congested
#: top levels stall in the thousands; a unit alone finishing its last few wires can sit still for many iterations
DIVERGED_FLOOR = 100

_ITER = re.compile(r"iter=(\d+) wires=(\d+) overused=(\d+)")
_R1_ARCS = re.compile(r"Routing (\d+) arcs\.")
#: router1's progress line: ``IterCnt | w/ripup wo/ripup | w/r wo/r | remaining arcs | batch total``
_R1_LINE = re.compile(r"^Info:\s+(\d+) \|\s+\d+\s+\d+ \|\s+\d+\s+\d+ \|\s+(\d+)\|", re.M)
#: (log text, phase it starts), in the order nextpnr prints them
_PHASES = (("Packing", "packing"), ("Creating initial analytic placement", "placing (analytic)"),
           ("Running Static placer", "placing (static)"),
           ("Running simulated annealing placer", "placing (annealing)"), ("Routing globals", "routing"),
           ("Running router1 to check", "checking the route"), ("Critical path report", "timing report"),
           ("Program finished normally", "done"))


@dataclass(frozen=True)
class PnrStatus:
    """What a nextpnr log says so far."""

    phase: str  # "starting", "packing", "placing (analytic)", ..., "routing", "done"
    placed_fmax_mhz: float | None = None  # nextpnr's estimate after placement (before any routing)
    routed_fmax_mhz: float | None = None  # after routing: the measured figure
    target_mhz: float | None = None
    iterations: tuple[tuple[int, int], ...] = ()  # router2's (iteration, overused wires)
    arcs: int | None = None  # router1: the arcs it set out to route
    arcs_left: int | None = None  # router1: the arcs still to route at its last progress line (0: routed)
    arcs_routed: int = 0  # router1: arcs (re)routed so far, ripped-up ones again each time

    @property
    def converging(self) -> bool | None:
        """Whether the router's overused wires fell over its last 4 iterations (None: too few yet)."""
        if len(self.iterations) < 5:
            return None
        return self.iterations[-1][1] < self.iterations[-5][1]

    def diverged(self, patience: int, floor: int | None = None) -> bool:
        """Whether router2 has gone ``patience`` iterations past its fewest overused wires without a new fewest:
        on a congested design it falls for ten or so iterations and then climbs for as long as it is let run.

        A route down to fewer than ``floor`` (default :data:`DIVERGED_FLOOR`) overused wires has not diverged: router2
        takes its last few wires at its own pace (the STORE engine alone sat at one overused wire for 8 iterations)."""
        if not self.iterations or self.phase == "done":
            return False
        counts = [o for _, o in self.iterations]
        if counts[-1] < (DIVERGED_FLOOR if floor is None else floor):
            return False
        return len(counts) - 1 - counts.index(min(counts)) >= patience

    def describe(self) -> str:
        """One line: the phase, the estimate after placement, the router's last iteration and its trend."""
        out = [f"nextpnr: {self.phase}"]
        if self.placed_fmax_mhz is not None:
            out.append(f"post-placement estimate {self.placed_fmax_mhz:.2f} MHz (target {self.target_mhz:g})")
        if self.iterations:
            it, over = self.iterations[-1]
            line = f"router iteration {it}: {over:,} wires overused"
            if self.converging is False:
                best = min(o for _, o in self.iterations)
                line += f" (not converging: {self.iterations[-5][1]:,} four iterations ago, {best:,} at best)"
            out.append(line)
        if self.arcs_left is not None:
            out.append(f"router1: {self.arcs_left:,} of {self.arcs:,} arcs left ({self.arcs_routed:,} routed so far)"
                       if self.arcs else f"router1: {self.arcs_left:,} arcs left")
        if self.routed_fmax_mhz is not None:
            out.append(f"routed Fmax {self.routed_fmax_mhz:.2f} MHz")
        return "; ".join(out)


def pnr_status(text: str) -> PnrStatus:
    """The :class:`PnrStatus` of nextpnr's log ``text`` (all of it so far)."""
    phase = "starting"
    pos = -1
    for marker, name in _PHASES:
        at = text.rfind(marker)
        if at > pos:
            pos, phase = at, name
    fmax = [(m.start(), float(m.group(1)), float(m.group(3))) for m in _FMAX.finditer(text)]
    route_at = text.find("Routing globals")
    placed = [f for f in fmax if route_at < 0 or f[0] < route_at]
    routed = [f for f in fmax if route_at >= 0 and f[0] > route_at]
    iters = tuple((int(m.group(1)), int(m.group(3))) for m in _ITER.finditer(text))
    target = (placed or routed)[-1][2] if fmax else None
    arcs = _R1_ARCS.findall(text)
    r1 = _R1_LINE.findall(text) if arcs else []
    return PnrStatus(phase, placed[-1][1] if placed else None, routed[-1][1] if routed else None, target, iters,
                     int(arcs[-1]) if arcs else None, int(r1[-1][1]) if r1 else None, int(r1[-1][0]) if r1 else 0)
