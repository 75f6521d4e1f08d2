"""The slowest endpoints of a routed ECP5 design, as nextpnr timed them, and the units they belong to.

nextpnr's report names one critical path a clock; the next hundreds, which a design change must also clear
before the clock moves, it does not.  ``systolica hw build --pnr`` routes with ``--detailed-timing-report``, so
``report.json`` holds, for every timing endpoint (a flip-flop, block-RAM or LUT-RAM write input), the latest
arrival of its data after the clock edge (``detailed_net_timings``: each net into an endpoint, with the
endpoint's ``[earliest, latest]`` arrival in ns).  The latest arrival of the slowest endpoint is the critical
path nextpnr prints (``tests/boards/test_routed_paths.py`` holds a report where both agree), so these are
nextpnr's own numbers, listed, not a second timing analysis.

Only the design's own endpoints count (cells under ``dut.``): the timing wrapper's shift registers
(``boards/ecp5.py`` ``timing_wrapper``) also capture paths from its asynchronous pins, which nextpnr's Fmax
leaves out.

``python -m systolica.boards.routed_paths OUT/ecp5 [--paths N] [--period NS] [--depth D]``: the slowest
registers (one line each, the worst bit), and by unit how many endpoints arrive later than ``--period``, by pin
(data, enable, set / reset, block RAM).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Endpoint", "endpoints", "register_of", "unit_of", "slowest_registers", "late_by_unit", "late_pins", "main"]

#: the design's cells in the timing wrapper's netlist
DESIGN = "dut."


@dataclass(frozen=True)
class Endpoint:
    """A timing endpoint: its latest data arrival after the clock edge (ns), the cell and pin, and the cell that
    drives that pin (the path's last cell)."""

    ns: float
    cell: str
    pin: str
    driver: str


def endpoints(report: dict, *, design: str = DESIGN) -> list[Endpoint]:
    """Every endpoint of the design in nextpnr's ``--report`` JSON written with ``--detailed-timing-report``,
    slowest first.  Raises :class:`ValueError` for a report without the detailed timings."""
    nets = report.get("detailed_net_timings")
    if nets is None:
        raise ValueError("the report has no detailed_net_timings: route with nextpnr's --detailed-timing-report "
                         "(systolica hw build --pnr does)")
    latest: dict[tuple[str, str], Endpoint] = {}
    for net in nets:
        for e in net.get("endpoints", []):
            if not e["cell"].startswith(design):
                continue
            ns = float(max(e["delay"]))
            key = (e["cell"], e["port"])
            if key not in latest or ns > latest[key].ns:
                latest[key] = Endpoint(ns, e["cell"], e["port"], net.get("driver", ""))
    return sorted(latest.values(), key=lambda p: -p.ns)


def register_of(cell: str) -> str:
    """The register (or memory) a packed cell belongs to: Yosys's per-bit and per-tile suffixes dropped
    (``dut.store.last_addr_TRELLIS_FF_Q_3`` -> ``dut.store.last_addr``, ``dut.acc_mem.0.12`` -> ``dut.acc_mem``)."""
    cell = re.sub(r"_(TRELLIS_FF|DO[AB]?\d+|DI[AB]?\d+|LUT4|PFUMX|L6MUX21|CCU2C)(?=_|$).*$", "", cell)
    cell = re.sub(r"(\.\d+)+$", "", cell)
    return re.sub(r"\$.*$", "", cell)


def unit_of(cell: str, depth: int = 3) -> str:
    """The unit of a cell: the first ``depth`` levels of its hierarchical name (``dut.compute.vseq``)."""
    return ".".join(register_of(cell).split(".")[:depth])


def slowest_registers(eps: list[Endpoint], limit: int = 20) -> list[Endpoint]:
    """The ``limit`` slowest registers, each by its slowest endpoint (``eps`` slowest first)."""
    out, seen = [], set()
    for e in eps:
        reg = register_of(e.cell)
        if reg not in seen:
            seen.add(reg)
            out.append(e)
            if len(out) >= limit:
                break
    return out


def late_by_unit(eps: list[Endpoint], period_ns: float, depth: int = 3) -> list[tuple[str, int, float]]:
    """(unit, endpoints later than ``period_ns``, the unit's worst arrival), most late endpoints first."""
    count: collections.Counter = collections.Counter()
    worst: dict[str, float] = {}
    for e in eps:
        if e.ns > period_ns:
            u = unit_of(e.cell, depth)
            count[u] += 1
            worst[u] = max(worst.get(u, 0.0), e.ns)
    return [(u, n, worst[u]) for u, n in count.most_common()]


def late_pins(eps: list[Endpoint], period_ns: float, depth: int = 3) -> dict[str, collections.Counter]:
    """For each unit, how many of its endpoints later than ``period_ns`` are which pin: ``DI`` / ``M`` (a
    flip-flop's data), ``CE`` (its enable), ``LSR`` (its set / reset), a block RAM's address or data pins.  The
    pin says what to change: a late ``LSR`` is a reset's distribution, a late ``CE`` a decision that enables a
    wide register."""
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for e in eps:
        if e.ns > period_ns:
            out[unit_of(e.cell, depth)][re.sub(r"\d+$", "", e.pin)] += 1
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m systolica.boards.routed_paths", description=__doc__.split("\n")[0])
    ap.add_argument("where", type=Path, help="the ECP5 flow's folder (OUT/ecp5) or its report.json")
    ap.add_argument("--paths", type=int, default=20, help="registers to list, slowest first (default 20)")
    ap.add_argument("--period", type=float, default=10.0,
                    help="count the endpoints arriving later than this, by unit (ns; default 10: 100 MHz)")
    ap.add_argument("--depth", type=int, default=3, help="hierarchy levels that name a unit (default 3)")
    a = ap.parse_args(argv)
    path = a.where / "report.json" if a.where.is_dir() else a.where
    if not path.is_file():
        ap.error(f"{path} not found: run `systolica hw build --board B --pnr -o OUT` first (OUT/ecp5/report.json)")
    try:
        eps = endpoints(json.loads(path.read_text()))
    except ValueError as e:
        ap.error(str(e))
    if not eps:
        ap.error(f"{path}: no endpoints of the design (cells under {DESIGN})")
    late = [e for e in eps if e.ns > a.period]
    print(f"{path}: {len(eps):,} endpoints of the design, timed by nextpnr after routing; slowest {eps[0].ns:.2f} ns "
          f"({1000 / eps[0].ns:.1f} MHz); {len(late):,} arrive later than {a.period:g} ns ({1000 / a.period:.0f} MHz)")
    print("slowest registers (latest arrival, register, the pin's driver):")
    for e in slowest_registers(eps, a.paths):
        print(f"  {e.ns:6.2f} ns  {register_of(e.cell)}.{e.pin}  <- {e.driver}")
    if late:
        print(f"endpoints later than {a.period:g} ns by unit (count, worst):")
        pins = late_pins(eps, a.period, a.depth)
        for u, n, w in late_by_unit(eps, a.period, a.depth):
            kinds = ", ".join(f"{k} {c}" for k, c in pins[u].most_common())
            print(f"  {n:7,}  {w:6.2f} ns  {u}  ({kinds})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
