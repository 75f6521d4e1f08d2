"""Several placements of one netlist side by side, the best of them kept for routing.

On the whole ulx3s top level nextpnr's placement seed moves the routed clock as much as a week of pipelining:
the same hw routed 67.0 and 88.4 MHz at seed 1 before and after a few registers that are nowhere on either
route's slowest paths, and those routes' post-placement estimates (51.1 and 60.0 MHz) ranked them as the router
later did (docs/boards.md).  nextpnr-ecp5 places on one thread, so on a two-core machine a second placement
costs no wall time: :func:`place_best` runs ``n`` placements (seeds ``seed``, ``seed + 1``, ...) at once, each in
a folder of its own, and keeps the one with the highest post-placement estimate (its ``placed.json`` and
``nextpnr.log`` are copied into the work folder, where the route reads them).  The estimate is nextpnr's own,
before any routing: a ranking, not a measured clock.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PlacementTry", "place_best"]

#: what nextpnr reads from the work folder to place (the netlist and the pin constraints)
_INPUTS = ("top.json", "top.lpf")
#: what a placement leaves that the route and the reports read
_OUTPUTS = ("placed.json", "nextpnr.log", "report.json")


@dataclass(frozen=True)
class PlacementTry:
    """One of the placements: its seed, its placer and nextpnr's post-placement estimate (None: none printed)."""

    seed: int
    placer: str
    estimate_mhz: float | None

    def describe(self) -> str:
        est = "no estimate" if self.estimate_mhz is None else f"{self.estimate_mhz:.2f} MHz"
        return f"seed {self.seed} {est}"


def place_best(out: Path, seed: int, n: int, place: Callable[[Path, int, Callable[[str], None] | None], str],
               progress: Callable[[str], None] | None = None) -> tuple[PlacementTry, tuple[PlacementTry, ...]]:
    """Run ``place(folder, seed, progress)`` for seeds ``seed .. seed + n - 1`` at once, each in
    ``out/place_seed<S>`` (a copy of the netlist and constraints), and copy the best placement's files into
    ``out``.  Returns the chosen try and all of them, in seed order.  A placement that fails raises (after the
    others have finished)."""
    from systolica.boards.nextpnr_log import pnr_status

    if n < 1:
        raise ValueError(f"placements must be at least 1 (got {n})")
    seeds = [seed + i for i in range(n)]
    folders = {}
    for s in seeds:
        sub = out / f"place_seed{s}"
        sub.mkdir(parents=True, exist_ok=True)
        for name in _INPUTS:
            shutil.copyfile(out / name, sub / name)
        folders[s] = sub

    def one(s: int) -> str:
        said = None if progress is None else (lambda line, s=s: progress(f"seed {s}: {line}"))
        return place(folders[s], s, said)

    with ThreadPoolExecutor(max_workers=n) as pool:
        placers = list(pool.map(one, seeds))
    tries = []
    for s, placer in zip(seeds, placers, strict=True):
        st = pnr_status((folders[s] / "nextpnr.log").read_text(errors="replace"))
        tries.append(PlacementTry(s, placer, st.placed_fmax_mhz))
    best = max(tries, key=lambda t: (t.estimate_mhz if t.estimate_mhz is not None else -1.0, -t.seed))
    for name in _OUTPUTS:
        if (folders[best.seed] / name).exists():
            shutil.copyfile(folders[best.seed] / name, out / name)
    for sub in folders.values():  # the netlist copies go (tens of MB each); each try's placement and log stay
        (sub / "top.json").unlink(missing_ok=True)
    return best, tuple(tries)
