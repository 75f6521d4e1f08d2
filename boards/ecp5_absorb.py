"""Move flip-flops into the output registers of ECP5's block RAMs and multipliers, in ``synth_ecp5``'s netlist.

A DP16KD's read data reach the fabric 5.8 ns after the clock without its output register (``REGMODE NOREG``),
0.96 ns with it (``OUTREG``; nextpnr-ecp5 0.11, a block RAM alone: 134 against 420 MHz); an unregistered
MULT18X18D adds its 4.5 ns to every path through it, its output register (``REG_OUTPUT_CLK``) ends those paths
inside it (a multiplier between two flip-flops: 135 against 187 MHz).  Yosys 0.70's ``synth_ecp5`` uses
neither: a register the design puts right after a block RAM or a product stays a flip-flop in the fabric, and
the routing from the block to it comes on top of the block's delay.

:func:`absorb_registers` rewrites the netlist (Yosys's JSON) where the design already has such a register:
every used output bit of a block RAM port (``DOA*``/``DOB*``) or a multiplier (``P*``) drives exactly one
flip-flop's data input and nothing else, the flip-flops share the block's clock and one clock enable, and they
have no set/reset.  The flip-flops are removed, their outputs driven by the block, the block's register turned
on with that clock enable (DP16KD: ``OCEx``; MULT18X18D: ``CE0``).  What the design computes is unchanged: the
register holds the same bits, loaded on the same edges, as the flip-flops did (the block RAM's output register
loads its output latch's word; the multiplier's its product).  Both start from zero, as the flip-flops did
(``REGSET RESET``).  Ports or multipliers that break a rule keep their flip-flops, counted by reason.

This is a rewrite of the synthesized netlist, not of the design: the RTL simulations (cocotb, Verilator) run the
Amaranth design before it, and no simulation model of either block in Yosys's library has behaviour (DP16KD and
MULT18X18D are parameter lists there), so the rules above are what keep it exact.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["AbsorbReport", "absorb_registers", "absorb_file"]

FF = "TRELLIS_FF"
BRAM = "DP16KD"
MULT = "MULT18X18D"


@dataclass
class AbsorbReport:
    """What :func:`absorb_registers` did: block RAM ports and multipliers whose register now holds the flip-flops'
    bits, flip-flops removed, and the blocks left as they were by reason."""

    bram_ports: int = 0
    mults: int = 0
    flip_flops: int = 0
    kept: collections.Counter = field(default_factory=collections.Counter)  # (kind, reason) -> count

    def describe(self) -> str:
        kept = ", ".join(f"{k} {r}: {n}" for (k, r), n in sorted(self.kept.items()))
        return (f"{self.bram_ports} block RAM read ports (OUTREG) and {self.mults} multipliers (REG_OUTPUT) took "
                f"{self.flip_flops} flip-flops" + (f"; kept: {kept}" if kept else ""))

    def as_dict(self) -> dict:
        return {"bram_ports": self.bram_ports, "mults": self.mults, "flip_flops": self.flip_flops,
                "kept": {f"{k} {r}": n for (k, r), n in sorted(self.kept.items())}}


def _outputs(kind: str) -> dict[str, list[str]]:
    """The output pins of a block, by the register that can take them."""
    if kind == BRAM:
        return {x: [f"DO{x}{i}" for i in range(18)] for x in "AB"}
    return {"P": [f"P{i}" for i in range(36)]}


def absorb_registers(netlist: dict, top: str | None = None) -> AbsorbReport:
    """Rewrite ``netlist`` (Yosys ``write_json`` of a flattened ``synth_ecp5`` design) in place; see the module."""
    mod = _top_module(netlist, top)
    cells = mod["cells"]
    sinks: dict[int, list[tuple[str, str]]] = collections.defaultdict(list)
    for name, cell in cells.items():
        dirs = cell.get("port_directions", {})
        outs = {p for pins in _outputs(cell["type"]).values() for p in pins} if cell["type"] in (BRAM, MULT) else set()
        for pin, bits in cell["connections"].items():
            if dirs.get(pin) == "output" or pin in outs or (cell["type"] == FF and pin == "Q"):
                continue
            for b in bits:
                if isinstance(b, int):
                    sinks[b].append((name, pin))
    for pname, port in mod.get("ports", {}).items():
        if port["direction"] != "input":
            for b in port["bits"]:
                if isinstance(b, int):
                    sinks[b].append(("$port", pname))
    rep = AbsorbReport()
    for name in [n for n, c in cells.items() if c["type"] in (BRAM, MULT)]:
        kind = cells[name]["type"]
        for reg, pins in _outputs(kind).items():
            why, removed = _absorb(cells, name, reg, pins, sinks)
            rep.flip_flops += removed
            if why:
                rep.kept[(kind, why)] += 1
            elif kind == BRAM:
                rep.bram_ports += 1
            else:
                rep.mults += 1
    return rep


def _top_module(netlist: dict, top: str | None) -> dict:
    """The module ``top`` of a Yosys JSON netlist, or the one marked top when ``top`` is None."""
    mods = netlist.get("modules", {})
    if top is None:
        tops = [n for n, m in mods.items() if m.get("attributes", {}).get("top")] or list(mods)
        if len(tops) != 1:
            raise ValueError(f"cannot tell the top module among {sorted(mods)}")
        top = tops[0]
    return mods[top]


def _ff_control(cell: dict) -> tuple | None:
    """(clock net, clock enable: '1' or its net) of a flip-flop the rules allow, or None."""
    p, c = cell["parameters"], cell["connections"]
    if p.get("CLKMUX", "CLK").strip() != "CLK" or p.get("REGSET", "RESET").strip() != "RESET":
        return None
    lsr = c.get("LSR", ["0"])[0]
    if lsr != "0" and p.get("LSRMUX", "LSR").strip() != "0":
        return None
    cemux = p.get("CEMUX", "1").strip()
    if cemux == "1":
        ce = "1"
    elif cemux == "CE":
        ce = c["CE"][0]
    else:
        return None
    return c["CLK"][0], ce


def _absorb(cells: dict, name: str, reg: str, pins: list[str], sinks) -> tuple[str, int]:
    """Absorb the flip-flops after ``pins`` of block ``name`` into its register ``reg``: ('', flip-flops removed)
    when done, else (why not, 0)."""
    cell = cells[name]
    conn, params = cell["connections"], cell["parameters"]
    kind = cell["type"]
    used = [(p, conn[p][0]) for p in pins if p in conn and isinstance(conn[p][0], int) and sinks[conn[p][0]]]
    if not used:
        return "unused", 0
    if kind == BRAM:
        if params.get(f"REGMODE_{reg}", "NOREG").strip() != "NOREG":
            return "registered already", 0
        if conn.get(f"RST{reg}", ["0"])[0] != "0":
            return "read reset", 0
        if params.get(f"CLK{reg}MUX", f"CLK{reg}").strip() != f"CLK{reg}":
            return "inverted clock", 0
        clock = conn[f"CLK{reg}"][0]
    else:
        if any(params.get(k, "NONE").strip() != "NONE" for k in ("REG_OUTPUT_CLK", "REG_PIPELINE_CLK")):
            return "registered already", 0
        clock = None
    ffs, control = [], set()
    for pin, bit in used:
        s = sinks[bit]
        if len(s) != 1 or s[0][1] != "DI" or cells.get(s[0][0], {}).get("type") != FF:
            return "output not one flip-flop", 0
        ctl = _ff_control(cells[s[0][0]])
        if ctl is None:
            return "flip-flop with set/reset", 0
        control.add(ctl)
        ffs.append((pin, s[0][0]))
    if len(control) != 1:
        return "flip-flops on several enables", 0
    ff_clock, ce = control.pop()
    if clock is not None and ff_clock != clock:
        return "another clock", 0
    # the flip-flops' outputs are now the block's; the flip-flops go
    for pin, ff in ffs:
        conn[pin] = list(cells.pop(ff)["connections"]["Q"])
    if kind == BRAM:
        params[f"REGMODE_{reg}"] = "OUTREG"
        conn[f"OCE{reg}"] = [ce]
    else:
        params.update({"REG_OUTPUT_CLK": "CLK0", "REG_OUTPUT_CE": "CE0", "REG_OUTPUT_RST": "RST0"})
        conn.update({"CLK0": [ff_clock], "CE0": [ce], "RST0": ["0"]})
        dirs = cell.setdefault("port_directions", {})
        if dirs:
            dirs.update({"CLK0": "input", "CE0": "input", "RST0": "input"})
    return "", len(ffs)


def absorb_file(path: str | Path, top: str | None = None) -> AbsorbReport:
    """:func:`absorb_registers` on a JSON netlist file, written back in place."""
    path = Path(path)
    doc = json.loads(path.read_text())
    rep = absorb_registers(doc, top)
    path.write_text(json.dumps(doc))
    return rep


#: block RAMs a cloned driver serves at most (:func:`split_bram_fanout`)
BRAM_GROUP = 8


def split_bram_fanout(netlist: dict, top: str | None = None, *, group: int = BRAM_GROUP,
                      min_brams: int = 2 * BRAM_GROUP) -> int:
    """Give each group of ``group`` block RAMs its own copy of the LUT or flip-flop that drives an address, enable
    or write-enable pin of ``min_brams`` or more of them: one driver per pin across a wide buffer (the scratchpad
    is 32 DP16KDs on the ulx3s) is one net spanning the chip, and it was the slowest route into the buffers
    (10.3-11.3 ns to ``spad_a``'s read address).  Copies of a driver compute the same function of the same inputs
    (a flip-flop's copy loads the same data on the same clock, enable and reset), so what the design computes is
    unchanged; the placer can put each copy beside its group.  Returns the number of copies made."""
    mod = _top_module(netlist, top)
    cells = mod["cells"]
    driver: dict[int, tuple[str, str]] = {}
    for name, cell in cells.items():
        out_pins = {"LUT4": ("Z",), FF: ("Q",)}.get(cell["type"], ())
        for pin in out_pins:
            b = cell["connections"].get(pin, [None])[0]
            if isinstance(b, int):
                driver[b] = (name, pin)
    # every pin of the net, block RAM or not, and which of them are block RAM control / address pins
    pins: dict[int, list[tuple[str, str]]] = collections.defaultdict(list)
    for name, cell in cells.items():
        for pin, bits in cell["connections"].items():
            b = bits[0] if len(bits) == 1 else None
            if isinstance(b, int) and driver.get(b, (None, None)) != (name, pin):
                pins[b].append((name, pin))
    outputs = {b for p in mod.get("ports", {}).values() if p["direction"] != "input" for b in p["bits"]}
    next_bit = 1 + max((b for c in cells.values() for bits in c["connections"].values() for b in bits
                        if isinstance(b, int)), default=1)
    made = 0
    control = ("AD", "CE", "WE", "OCE", "CS")
    for bit, loads in list(pins.items()):
        if bit not in driver or bit in outputs:
            continue
        brams = sorted({n for n, p in loads if cells[n]["type"] == BRAM and p.startswith(control)})
        if len(brams) < min_brams:
            continue
        src, pin = driver[bit]
        for k in range(1, (len(brams) + group - 1) // group):  # the first group keeps the original driver
            mine = set(brams[k * group:(k + 1) * group])
            new = next_bit
            next_bit += 1
            clone = json.loads(json.dumps(cells[src]))
            clone["connections"][pin] = [new]
            cells[f"{src}$fanout{k}"] = clone
            for n, p in loads:
                if n in mine and p.startswith(control):
                    cells[n]["connections"][p] = [new]
            made += 1
    return made
