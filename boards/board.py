"""Board descriptions: one TOML file per board beside this module.

A board file holds what a deployment needs to know about a board (Vivado part,
programmable-logic resources, DRAM and the bandwidth the fabric can reach, a
realistic accelerator clock, power and price; every figure with its source in a
comment) and an ``[accel]`` table: the :class:`~systolica.config.AccelConfig`
sized for that board.

>>> from systolica.boards.board import load_board, board_config
>>> load_board("kv260").part
'xck26-sfvc784-2LV-c'
>>> board_config("kv260").rows
16
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from systolica.config import AccelConfig, ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 board images
    import tomli as tomllib

__all__ = ["Board", "BoardError", "Resources", "FLOWS", "FAMILIES", "BOARD_DIR",
           "list_boards", "load_board", "board_config"]

#: Where the ``<name>.toml`` board files live (installed as package data).
BOARD_DIR = Path(__file__).resolve().parent

#: Build flows: Zynq-7000 and Zynq UltraScale+ block designs, an Alveo RTL kernel,
#: and the open-source Lattice ECP5 flow.
FLOWS = ("zynq7", "zynqmp", "alveo", "ecp5")
#: Yosys synthesis families (``synth_xilinx -family xc7|xcup``, ``synth_ecp5``).
FAMILIES = ("xc7", "xcup", "ecp5")


class BoardError(ValueError):
    """An unknown board or a board file that does not describe a usable board."""


@dataclass(frozen=True)
class Resources:
    """Programmable-logic resources, used or available.

    ``bram`` counts the family's block-RAM tiles (RAMB36 on Xilinx, where a RAMB18
    counts as 0.5; DP16KD on ECP5); ``dsp`` counts DSP48 slices or ECP5 MULT18X18D.
    """

    lut: float = 0
    ff: float = 0
    dsp: float = 0
    bram: float = 0
    uram: float = 0

    KINDS = ("lut", "ff", "dsp", "bram", "uram")

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.KINDS}

    def __add__(self, other: Resources) -> Resources:
        return Resources(**{k: getattr(self, k) + getattr(other, k) for k in self.KINDS})

    def scale(self, factor: float) -> Resources:
        return Resources(**{k: getattr(self, k) * factor for k in self.KINDS})


@dataclass(frozen=True)
class Board:
    """One board, as read from ``boards/<name>.toml``."""

    name: str
    title: str
    flow: str
    family: str
    part: str
    resources: Resources
    bram_kbits: int
    dram: str
    dram_mbytes: int
    dram_bus_bits: int
    dram_mtps: float
    dram_peak_gbps: float
    dram_efficiency: float
    pl_ports: int
    pl_port_bits: int
    pl_bandwidth_gbps: float
    accel_mhz: float
    power_w: float
    price_usd: float
    config: AccelConfig
    window_peak_gbps: float = 0.0  # peak of the DRAM the accelerator's window lies in (0: all of it)
    board_part: str = ""
    platform: str = ""  # Vitis platform (Alveo only)
    ps: dict[str, str] = field(default_factory=dict)  # extra PS IP properties (CONFIG.<key>)
    ecp5: dict[str, Any] = field(default_factory=dict)  # nextpnr device, package, speed, clock pin
    path: Path | None = None

    @property
    def pl_bandwidth_computed_gbps(self) -> float:
        """PL-reachable bandwidth: ports x width x accelerator clock, in GB/s."""
        return self.pl_ports * self.pl_port_bits / 8 * self.accel_mhz / 1000

    @property
    def dram_bytes(self) -> int:
        return self.dram_mbytes << 20

    @property
    def accel_dram_gbps(self) -> float:
        """Bandwidth the board's accelerator config can use: its ports x width x clock,
        capped by what the DRAM delivers (peak x controller efficiency)."""
        c = self.config
        ports = c.dma_ports * c.dma_bits / 8 * c.clock_mhz / 1000
        peak = self.window_peak_gbps or self.dram_peak_gbps
        return min(ports, peak * self.dram_efficiency)

    @property
    def has_ps(self) -> bool:
        return self.flow in ("zynq7", "zynqmp")


def list_boards() -> list[str]:
    """Names of every board with a description file, sorted."""
    return sorted(p.stem for p in BOARD_DIR.glob("*.toml"))


def _check_ranges(source: str, resources: dict, memory: dict, d: dict) -> None:
    """Sizes, rates, clock, power and price are finite and positive (resources may be 0); efficiency in (0, 1]."""
    import math

    checks = [(f"{source} [memory]", memory, k) for k in ("dram_mbytes", "dram_bus_bits", "dram_mtps", "dram_peak_gbps",
                                                         "pl_ports", "pl_port_bits", "pl_bandwidth_gbps")]
    checks += [(f"{source} [clock]", d.get("clock", {}), "accel_mhz"),
               (f"{source} [cost]", d.get("cost", {}), "power_w"), (f"{source} [cost]", d.get("cost", {}), "price_usd")]
    for where, table, key in checks:
        v = table.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not (math.isfinite(v) and v > 0):
            raise BoardError(f"{where}: {key}={v!r} must be a positive finite number")
    for key, v in resources.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not (math.isfinite(v) and v >= 0):
            raise BoardError(f"{source} [resources]: {key}={v!r} must be a finite number >= 0")
    eff = memory.get("dram_efficiency")
    if isinstance(eff, (int, float)) and not isinstance(eff, bool) and not (0 < eff <= 1):
        raise BoardError(f"{source} [memory]: dram_efficiency={eff!r} must be in (0, 1]")


def _need(table: dict, key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if key not in table:
        raise BoardError(f"{where}: missing {key!r}")
    v = table[key]
    if isinstance(v, bool) or not isinstance(v, kind):
        raise BoardError(f"{where}: {key}={v!r} must be {getattr(kind, '__name__', kind)}")
    return v


def parse_board(text: str, *, source: str) -> Board:
    """A :class:`Board` from the text of a board TOML file (``source`` names it in errors)."""
    try:
        d = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BoardError(f"{source}: not valid TOML: {e}") from None
    for t in ("board", "resources", "memory", "clock", "cost", "accel"):
        if not isinstance(d.get(t), dict):
            raise BoardError(f"{source}: missing table [{t}]")
    b, r, m = d["board"], d["resources"], d["memory"]
    num = (int, float)
    flow = _need(b, "flow", f"{source} [board]", str)
    if flow not in FLOWS:
        raise BoardError(f"{source}: flow={flow!r} must be one of {', '.join(FLOWS)}")
    family = _need(b, "family", f"{source} [board]", str)
    if family not in FAMILIES:
        raise BoardError(f"{source}: family={family!r} must be one of {', '.join(FAMILIES)}")
    try:
        cfg = AccelConfig.from_dict(dict(d["accel"]), source=f"{source} [accel]")
    except (ConfigError, TypeError) as e:
        raise BoardError(f"{source}: [accel] is not a valid AccelConfig: {e}") from None
    ecp5 = {k: b[k] for k in ("nextpnr_device", "package", "speed", "clock_pin", "clock_io") if k in b}
    if flow == "ecp5" and len(ecp5) != 5:
        raise BoardError(f"{source}: an ecp5 board needs nextpnr_device, package, speed, clock_pin, clock_io in [board]")
    res = Resources(**{k: _need(r, k, f"{source} [resources]", num) for k in Resources.KINDS})
    _check_ranges(source, r, m, d)
    return Board(
        name=_need(b, "name", f"{source} [board]", str),
        title=_need(b, "title", f"{source} [board]", str),
        flow=flow, family=family,
        part=_need(b, "part", f"{source} [board]", str),
        board_part=b.get("board_part", ""), platform=b.get("platform", ""),
        resources=res, bram_kbits=_need(r, "bram_kbits", f"{source} [resources]", int),
        dram=_need(m, "dram", f"{source} [memory]", str),
        dram_mbytes=_need(m, "dram_mbytes", f"{source} [memory]", int),
        dram_bus_bits=_need(m, "dram_bus_bits", f"{source} [memory]", int),
        dram_mtps=float(_need(m, "dram_mtps", f"{source} [memory]", num)),
        dram_peak_gbps=float(_need(m, "dram_peak_gbps", f"{source} [memory]", num)),
        dram_efficiency=float(_need(m, "dram_efficiency", f"{source} [memory]", num)),
        pl_ports=_need(m, "pl_ports", f"{source} [memory]", int),
        pl_port_bits=_need(m, "pl_port_bits", f"{source} [memory]", int),
        pl_bandwidth_gbps=float(_need(m, "pl_bandwidth_gbps", f"{source} [memory]", num)),
        accel_mhz=float(_need(d["clock"], "accel_mhz", f"{source} [clock]", num)),
        power_w=float(_need(d["cost"], "power_w", f"{source} [cost]", num)),
        price_usd=float(_need(d["cost"], "price_usd", f"{source} [cost]", num)),
        window_peak_gbps=float(m.get("window_peak_gbps", 0.0)),
        config=cfg, ps={k: str(v) for k, v in d.get("ps", {}).items()}, ecp5=ecp5,
    )


def load_board(name: str | Path) -> Board:
    """The board called ``name`` (e.g. ``"kv260"``), or a board file given by path.

    Raises
    ------
    BoardError
        For an unknown board (the message lists the known ones) or a malformed file.
    """
    p = Path(name)
    if p.suffix == ".toml" and p.exists():
        path = p
    else:
        path = BOARD_DIR / f"{name}.toml"
        if not path.exists():
            raise BoardError(f"unknown board {str(name)!r}; known boards: {', '.join(list_boards())}")
    board = parse_board(path.read_text(), source=str(path))
    if board.name != path.stem:
        raise BoardError(f"{path}: [board] name={board.name!r} differs from the file name {path.stem!r}")
    return _with_path(board, path)


def _with_path(board: Board, path: Path) -> Board:
    object.__setattr__(board, "path", path)  # frozen dataclass: set once after parsing
    return board


def board_config(name: str) -> AccelConfig:
    """The :class:`AccelConfig` sized for board ``name`` (its ``[accel]`` table)."""
    return load_board(name).config
