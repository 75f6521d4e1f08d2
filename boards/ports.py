"""The ports of a Verilog top level, and the AXI interfaces their names form.

Vivado's IP packager infers AXI interfaces from port names (``<prefix>_<signal>``);
the block design and the Vitis kernel then refer to the interfaces by prefix.  This
module reads the port list of the generated Verilog so that every name a build
script refers to can be checked against the hardware before Vivado ever runs.

The top level's port names are fixed by the top-level generator:
``ap_clk``, ``ap_rst_n``, ``s_axi_control_<sig>`` (AXI4-Lite slave),
``m_axi_gmem<N>_<sig>`` (AXI4 masters) and ``interrupt``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Port", "PortError", "parse_ports", "axi_interfaces", "check_top", "CLOCK", "RESET", "IRQ",
           "CONTROL", "gmem_name", "AXI_LITE_REQUIRED", "AXI_FULL_REQUIRED"]

CLOCK = "ap_clk"
RESET = "ap_rst_n"
IRQ = "interrupt"
CONTROL = "s_axi_control"

#: Signals Vivado needs to infer an AXI4-Lite slave (``aximm_rtl``, protocol AXI4LITE).
AXI_LITE_REQUIRED = frozenset(["awvalid", "awready", "awaddr", "wvalid", "wready", "wdata", "wstrb", "bvalid", "bready", "bresp", "arvalid", "arready", "araddr", "rvalid", "rready", "rdata", "rresp"])
#: ... and an AXI4 master with bursts.
AXI_FULL_REQUIRED = AXI_LITE_REQUIRED | frozenset(["awlen", "awsize", "awburst", "wlast", "arlen", "arsize", "arburst", "rlast"])


def gmem_name(i: int) -> str:
    """Name of AXI master port ``i`` (``m_axi_gmem0``, ``m_axi_gmem1``, ...)."""
    return f"m_axi_gmem{i}"


class PortError(ValueError):
    """The Verilog top level lacks a port or interface the build needs."""


@dataclass(frozen=True)
class Port:
    name: str
    direction: str  # "input" | "output" | "inout"
    width: int


_MODULE = re.compile(r"\bmodule\s+([A-Za-z_][\w$]*)\s*(?:#\s*\(.*?\)\s*)?\((.*?)\)\s*;(.*?)\bendmodule\b", re.S)
_ID = r"(?:[A-Za-z_][\w$]*|\\\S+)"  # a simple or an escaped identifier (``\end``: Amaranth escapes keywords)
_DECL = re.compile(r"\b(input|output|inout)\b\s*(?:wire|reg|logic)?\s*(?:signed\s*)?(\[\s*(\d+)\s*:\s*(\d+)\s*\])?\s*"
                   rf"({_ID}(?:\s*,\s*(?!input\b|output\b|inout\b){_ID})*)")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"\(\*.*?\*\)", " ", text, flags=re.S)  # attributes, e.g. Amaranth's (* src = ... *)


def parse_ports(verilog: str | Path, top: str | None = None) -> dict[str, Port]:
    """Ports of module ``top`` (default: the last module in the file) by name.

    Handles ANSI headers (``module m(input wire [7:0] a, ...)``) and the
    non-ANSI style Yosys and Amaranth write (``module m(a, b); input [7:0] a;``).
    """
    text = Path(verilog).read_text() if isinstance(verilog, Path) else verilog
    text = _strip_comments(text)
    modules = {m.group(1): m for m in _MODULE.finditer(text)}
    if not modules:
        raise PortError("no Verilog module found")
    if top is None:
        m = list(modules.values())[-1]
    elif top in modules:
        m = modules[top]
    else:
        raise PortError(f"module {top!r} not found; modules: {', '.join(modules)}")
    header, body = m.group(2), m.group(3)
    ports: dict[str, Port] = {}
    ansi = re.search(r"\b(input|output|inout)\b", header) is not None
    # A non-ANSI body declares ports with statements ending in ';'.
    src = header if ansi else ";".join(s for s in body.split(";") if re.match(r"\s*(input|output|inout)\b", s))
    for d in _DECL.finditer(src):
        width = abs(int(d.group(3)) - int(d.group(4))) + 1 if d.group(2) else 1
        for name in re.split(r"\s*,\s*", d.group(5).strip()):
            ports[name] = Port(name, d.group(1), width)
    if not ansi:
        order = [n.strip() for n in header.split(",") if n.strip()]
        missing = [n for n in order if n not in ports]
        if missing:
            raise PortError(f"module {m.group(1)}: ports without a direction: {', '.join(missing)}")
        ports = {n: ports[n] for n in order}
    return ports


def axi_interfaces(ports: dict[str, Port]) -> dict[str, dict[str, Port]]:
    """AXI interfaces by prefix (``s_axi_*``, ``m_axi_*``), each a map signal -> port."""
    out: dict[str, dict[str, Port]] = {}
    for p in ports.values():
        m = re.match(r"^((?:s|m)_axi_[A-Za-z0-9]+)_([A-Za-z]+)$", p.name)
        if m:
            out.setdefault(m.group(1), {})[m.group(2).lower()] = p
    return out


def check_top(ports: dict[str, Port], dma_ports: int, dma_bits: int | None = None) -> dict[str, dict[str, Port]]:
    """Check the ports a board build relies on; return the AXI interfaces.

    Raises
    ------
    PortError
        Naming every missing port or signal, or a data width that differs from the config.
    """
    problems = []
    for name, direction in ((CLOCK, "input"), (RESET, "input"), (IRQ, "output")):
        if name not in ports:
            problems.append(f"no {direction} port {name!r}")
        elif ports[name].direction != direction:
            problems.append(f"port {name!r} is an {ports[name].direction}, expected {direction}")
    intfs = axi_interfaces(ports)
    wanted = {CONTROL: AXI_LITE_REQUIRED, **{gmem_name(i): AXI_FULL_REQUIRED for i in range(dma_ports)}}
    for intf, req in wanted.items():
        have = intfs.get(intf, {})
        lacking = sorted(req - set(have))
        if lacking:
            problems.append(f"interface {intf} lacks {', '.join(f'{intf}_{s}' for s in lacking)}")
        elif dma_bits is not None and intf != CONTROL and have["rdata"].width != dma_bits:
            problems.append(f"{intf}_rdata is {have['rdata'].width} bits, the config says dma_bits={dma_bits}")
    extra = sorted(i for i in intfs if i.startswith("m_axi_") and i not in wanted)
    if extra:
        problems.append(f"AXI masters beyond dma_ports={dma_ports}: {', '.join(extra)}")
    if problems:
        raise PortError("the Verilog top level does not match the board build: " + "; ".join(problems))
    return intfs
