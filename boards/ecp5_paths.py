"""The longest register-to-register paths of a ``synth_ecp5`` netlist, estimated in seconds, before place and route.

Placing the whole ulx3s top level takes nextpnr about 15 minutes and routing it far longer, and its
post-placement report names no path.  This module reads the JSON netlist Yosys wrote
(``synth_ecp5 -json top.json``; ``systolica hw build --pnr`` leaves it in ``<out>/ecp5/top.json``)
and walks it: every flip-flop output, block-RAM output and wrapper input starts a path, every
flip-flop and block-RAM input (and a LUT RAM's write side) ends one, and each path is costed with a fixed delay per cell kind plus a
wire delay that grows with the net's fan-out (carry chains ride their dedicated wires).  The result
is an **estimate of logic depth and fan-out, not timing**: it knows nothing of placement, so it ranks
paths rather than predicting Fmax.  On the 8x8 ulx3s top level (main at ce1de74) its worst path came
to 29.3 ns where nextpnr's post-placement estimate was 27.4 ns (36.5 MHz); what it is for is naming the
paths, grouped by the units they cross, so that a change can be judged by a synthesis (minutes)
instead of a place and route (an hour).

``python -m systolica.boards.ecp5_paths top.json [--paths N] [--cut REGEX]``; ``--cut`` treats the nets
whose names match as flip-flop outputs (what a register there would give).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["cell_kinds", "CELL_NS", "Path_", "bel_locations", "longest_paths", "placed_wire_ns", "unit_route", "main"]

#: logic delay of a cell from an input to an output, ns (speed grade 6, rounded: LUT4 and the muxes
#: after it, a carry cell from A/B, LUT RAM read, an unregistered MULT18X18D)
CELL_NS = {"LUT4": 0.40, "PFUMX": 0.20, "L6MUX21": 0.20, "CCU2C": 0.35, "TRELLIS_DPR16X4": 0.50,
           "MULT18X18D": 4.5, "ALU54B": 2.5}
#: clock to output of a path's start, ns
START_NS = {"TRELLIS_FF": 0.45, "DP16KD": 3.6}
#: carry in -> carry out of one CCU2C (two bits) on the dedicated chain, ns
CARRY_NS = 0.05
#: cells whose inputs end paths and whose outputs start them
SEQUENTIAL = ("TRELLIS_FF", "DP16KD", "EHXPLLL", "TRELLIS_IO")
_CLOCKS = ("CLK", "CLKA", "CLKB", "WCK")
#: distributed RAM: its write data, address and enable end paths; its read address -> data is combinational
LUT_RAM = "TRELLIS_DPR16X4"


def _wire_ns(fanout: int) -> float:
    return 0.55 + 0.25 * math.log2(max(fanout, 1))


def placed_wire_ns(a: tuple[int, int], b: tuple[int, int]) -> float:
    """nextpnr-ecp5's estimate of a placed arc from tile ``a`` to tile ``b`` at speed grade 6, ns (its
    ``predictDelay``: 120 ps x (6 + each axis's distance past 5 tiles + twice the first 5))."""
    dx, dy = abs(a[0] - b[0]), abs(a[1] - b[1])
    return 0.12 * (6 + max(dx - 5, 0) + max(dy - 5, 0) + 2 * (min(dx, 5) + min(dy, 5)))


def bel_locations(placed: dict) -> dict[str, tuple[int, int]]:
    """Cell name -> (x, y) tile of nextpnr's placed netlist (``nextpnr-ecp5 --no-route --write placed.json``:
    each cell's ``NEXTPNR_BEL`` attribute, ``X<x>/Y<y>/<bel>``); packed cells keep the netlist's names."""
    out = {}
    for mod in placed["modules"].values():
        for name, c in mod.get("cells", {}).items():
            m = re.match(r"X(\d+)/Y(\d+)/", str(c.get("attributes", {}).get("NEXTPNR_BEL", "")))
            if m:
                out[name] = (int(m.group(1)), int(m.group(2)))
    return out


#: nextpnr-ecp5's packed cells by what they are (``TRELLIS_COMB`` by its ``MODE``: no mode is a LUT pair)
_KIND = {"TRELLIS_FF": "FF", "DP16KD": "block RAM", "MULT18X18D": "multiplier", "TRELLIS_RAMW": "LUT-RAM write",
         "TRELLIS_COMB:CCU2": "carry", "TRELLIS_COMB:DPRAM": "LUT-RAM", "TRELLIS_COMB:RAMW_BLOCK": "LUT-RAM write",
         "TRELLIS_COMB:LOGIC": "LUT"}


def cell_kinds(placed: dict) -> dict[str, str]:
    """Cell name -> what it is (``LUT``, ``carry``, ``LUT-RAM``, ``FF``, ``block RAM``, ...) in nextpnr's placed
    netlist, for :func:`~systolica.boards.congestion_map.hot_region`: which kinds of cell crowd a congested region."""
    out = {}
    for mod in placed["modules"].values():
        for name, c in mod.get("cells", {}).items():
            t = c.get("type", "?")
            if t == "TRELLIS_COMB":
                t += ":" + str(c.get("parameters", {}).get("MODE", "LOGIC"))
            out[name] = _KIND.get(t, t)
    return out


@dataclass(frozen=True)
class Path_:
    """One estimated path: its end (cell, port), its estimated delay and its nets from start to end."""

    ns: float
    end: str
    nets: tuple[str, ...]


def longest_paths(netlist: dict, *, cut: str | None = None, limit: int = 20,
                  locations: dict[str, tuple[int, int]] | None = None) -> tuple[int, list[Path_]]:
    """(endpoints, the ``limit`` slowest paths, one per endpoint register) of a Yosys JSON netlist.

    ``locations`` (:func:`bel_locations` of a placement of the same netlist): an arc between two placed cells
    costs nextpnr's distance estimate (:func:`placed_wire_ns`) instead of the fan-out term."""
    tops = [n for n, mod in netlist["modules"].items() if mod.get("attributes", {}).get("top")]
    if len(tops) != 1:
        raise ValueError(f"the netlist must have one top module (attribute top), it has {tops or 'none'}")
    mod = netlist["modules"][tops[0]]
    cells = mod["cells"]
    names: dict[int, str] = {}
    for n, v in mod["netnames"].items():
        for i, b in enumerate(v["bits"]):
            if isinstance(b, int):
                nm = n if len(v["bits"]) == 1 else f"{n}[{i}]"
                old = names.get(b)
                if old is None or (old.startswith("$") and not n.startswith("$")) or \
                        (not n.startswith("$") and len(nm) < len(old)):
                    names[b] = nm
    driver: dict[int, tuple[str, str]] = {}
    fanout: collections.Counter = collections.Counter()
    for cn, c in cells.items():
        for p, bits in c["connections"].items():
            out = c["port_directions"][p] == "output"
            for b in bits:
                if isinstance(b, int):
                    if out:
                        driver[b] = (cn, p)
                    else:
                        fanout[b] += 1
    cut_re = re.compile(cut) if cut else None
    loc = locations or {}

    def wire(bit: int, sink: str) -> float:
        src = driver.get(bit)
        if src is not None and src[0] in loc and sink in loc:
            return placed_wire_ns(loc[src[0]], loc[sink])
        return _wire_ns(fanout[bit])

    arrival: dict[int, float] = {}
    pred: dict[int, int | None] = {}

    def visit(bit: int) -> None:  # iterative depth-first: netlists nest far deeper than Python's stack
        stack = [(bit, False)]
        while stack:
            b, expanded = stack.pop()
            if b in arrival and not expanded:
                continue
            drv = driver.get(b)
            if drv is None or cells[drv[0]]["type"] in SEQUENTIAL or (cut_re and cut_re.search(names.get(b, ""))):
                t = cells[drv[0]]["type"] if drv else ""
                arrival[b], pred[b] = START_NS.get(t, 0.45 if drv else 0.0), None
                continue
            cn, port = drv
            c = cells[cn]
            ins = [(q, ib) for q, d in c["port_directions"].items() if d == "input"
                   for ib in c["connections"].get(q, []) if isinstance(ib, int)]
            if c["type"] == "CCU2C" and port == "COUT":
                ins = [(q, ib) for q, ib in ins if q in ("CIN", "A0", "B0", "A1", "B1")]
            elif c["type"] == LUT_RAM:  # only the read address reaches DO; the write side is clocked
                ins = [(q, ib) for q, ib in ins if q.startswith("RAD")]
            if not expanded:
                arrival[b] = 0.0  # provisional: a combinational loop ends here instead of recursing
                stack.append((b, True))
                stack.extend((ib, False) for _, ib in ins if ib not in arrival)
                continue
            best, via = 0.0, None
            for q, ib in ins:
                if c["type"] == "CCU2C" and q == "CIN":
                    t = arrival[ib] + CARRY_NS
                else:
                    t = arrival[ib] + wire(ib, cn) + CELL_NS.get(c["type"], 0.4)
                if t > best:
                    best, via = t, ib
            arrival[b], pred[b] = best, via

    ends = []
    for cn, c in cells.items():
        if c["type"] not in SEQUENTIAL and c["type"] != LUT_RAM:
            continue
        for p, bits in c["connections"].items():
            if c["port_directions"][p] != "input" or p in _CLOCKS or (c["type"] == LUT_RAM and p.startswith("RAD")):
                continue
            for b in bits:
                if isinstance(b, int):
                    visit(b)
                    ends.append((arrival[b] + wire(b, cn), cn, p, b))
    ends.sort(key=lambda e: -e[0])
    out, seen = [], set()
    for ns, cn, p, b in ends:
        key = re.sub(r"(_DO[AB]?\d+)?_TRELLIS_FF_Q(_\d+)?$", "", cn)  # a register's bits, a RAM's output holds
        if key in seen:
            continue
        seen.add(key)
        chain, x, on = [], b, set()
        while x is not None and x not in on:  # a combinational loop ends the walk where it closes
            on.add(x)
            chain.append(names.get(x, str(x)))
            x = pred.get(x)
        out.append(Path_(round(ns, 2), f"{cn}.{p}", tuple(reversed(chain))))
        if len(out) >= limit:
            break
    return len(ends), out


def unit_route(path: Path_, depth: int = 3) -> str:
    """The units a path crosses, in order (``dut.compute.vseq > dut.load.lines``): net names' first ``depth``
    hierarchy levels, with Yosys's cell-derived suffixes dropped and repeats merged."""
    units: list[str] = []
    for n in path.nets:
        u = ".".join(n.split(".")[:depth]) if n.startswith("dut.") else n.split(".")[0]
        u = re.sub(r"(_(LUT4|TRELLIS|PFUMX|CCU2C|L6MUX|DP16KD)\w*)|\[\d+\]$", "", u)
        if not units or units[-1] != u:
            units.append(u)
    return " > ".join(units)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m systolica.boards.ecp5_paths", description=__doc__.split("\n")[0])
    ap.add_argument("netlist", type=Path, help="Yosys JSON netlist of synth_ecp5 (e.g. <out>/ecp5/top.json)")
    ap.add_argument("--paths", type=int, default=20, help="paths to list, one per end register (default 20)")
    ap.add_argument("--cut", help="regex of net names to treat as register outputs (what-if)")
    ap.add_argument("--nets", action="store_true", help="print every net of each path")
    ap.add_argument("--placed", type=Path, help="nextpnr's placed netlist of the same design (nextpnr-ecp5 ... --no-route "
                                               "--write placed.json): wires cost their placed distance")
    a = ap.parse_args(argv)
    locs = bel_locations(json.loads(a.placed.read_text())) if a.placed else None
    n, paths = longest_paths(json.loads(a.netlist.read_text()), cut=a.cut, limit=a.paths, locations=locs)
    how = (f"logic + placed wire delay ({len(locs)} cells placed by {a.placed.name}; not a timing analysis)" if locs
           else "logic + fan-out delay (not a timing analysis: no placement)")
    print(f"{n} path ends; estimated {how}, slowest first")
    for p in paths:
        print(f"{p.ns:6.1f} ns  {unit_route(p)}  -> {p.end}")
        if a.nets:
            for net in p.nets:
                print(f"           {net}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
