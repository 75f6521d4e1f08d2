"""Measured timing (Fmax) of a configuration on a board, cached for ``systolica bench`` and ``dse``.

One JSON record per (board, configuration hash, tool) under ``$SYSTOLICA_CACHE/timing``:
the Fmax a place-and-route run reached (nextpnr-ecp5 for the ECP5 boards; Vivado's
worst negative slack at the board's clock where Vivado ran), the target it was routed
for, the slowest path, the run's wall time and the digest of the ``hw/`` sources.  A
record of older ``hw/`` sources is *stale* and never used as a clock.

:func:`systolica.boards.fit_status.clock_basis` reads these records: an ECP5 board is
timed at ``min(target, Fmax)``, labelled measured; a Xilinx board stays at its assumed
target until Vivado timing exists, and its row shows the ECP5 Fmax of the same hardware
as a proxy beside it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from systolica.boards.board import Board
from systolica.boards.synth_cache import cache_dir as _synth_cache_dir
from systolica.boards.synth_cache import hw_digest
from systolica.config import AccelConfig

__all__ = ["TimingRecord", "timing_dir", "store_timing", "lookup_timing", "ecp5_proxy", "SCHEMA"]

SCHEMA = "systolica-timing/1"
TOOLS = ("nextpnr-ecp5", "vivado")


def timing_dir() -> Path:
    """``$SYSTOLICA_CACHE/timing`` (beside the synthesis cache)."""
    return _synth_cache_dir().parent / "timing"


@dataclass(frozen=True)
class TimingRecord:
    """One measured timing run of the whole top level."""

    board: str
    part: str
    config: dict[str, Any]
    config_hash: str
    tool: str  # "nextpnr-ecp5" or "vivado"
    fmax_mhz: float
    target_mhz: float
    critical_path: str = ""
    wns_ns: float | None = None  # Vivado: worst negative slack at target_mhz
    utilization: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None
    hw: str = ""
    when: str = ""
    path: str | None = None

    @property
    def stale(self) -> bool:
        """The ``hw/`` sources changed since this was measured."""
        return self.hw != hw_digest()

    @property
    def meets_target(self) -> bool:
        return self.fmax_mhz >= self.target_mhz

    def label(self) -> str:
        cfg = self.config
        return (f"{self.tool} on {self.part}, {cfg.get('name', '?')} {cfg.get('rows', '?')}x{cfg.get('cols', '?')}, "
                f"{self.when}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("path")
        return {"schema": SCHEMA, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: Path | None = None) -> TimingRecord:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} record")
        keys = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "path"}
        rec = cls(**keys, path=str(path) if path else None)
        if not (rec.fmax_mhz > 0 and rec.target_mhz > 0) or rec.tool not in TOOLS:
            raise ValueError(f"timing record with fmax {rec.fmax_mhz}, target {rec.target_mhz}, tool {rec.tool!r}")
        return rec


def _path(board: str, cfg_hash: str, tool: str, root: Path | None) -> Path:
    return (root or timing_dir()) / f"{board}-{tool}-{cfg_hash[:16]}.json"


def store_timing(cfg: AccelConfig, board: Board, tool: str, *, fmax_mhz: float, target_mhz: float,
                 critical_path: str = "", wns_ns: float | None = None, utilization: dict | None = None,
                 seconds: float | None = None, root: Path | None = None, hw: str | None = None) -> TimingRecord:
    """Write the record of one timing run of ``cfg`` on ``board`` and return it.

    ``hw``: the digest of the ``hw/`` sources the measured Verilog was generated from (``hdl/hw_digest`` beside
    it); default the sources' digest now.  A place and route takes half an hour, and sources edited meanwhile
    must not pass for the ones measured."""
    if tool not in TOOLS:
        raise ValueError(f"tool must be one of {TOOLS}, not {tool!r}")
    rec = TimingRecord(board=board.name, part=board.part, config=cfg.to_dict(), config_hash=cfg.hash_hex(),
                       tool=tool, fmax_mhz=round(float(fmax_mhz), 2), target_mhz=float(target_mhz),
                       critical_path=critical_path, wns_ns=wns_ns,
                       utilization={k: list(v) if isinstance(v, tuple) else v for k, v in (utilization or {}).items()},
                       seconds=None if seconds is None else round(seconds, 1), hw=hw or hw_digest(),
                       when=time.strftime("%Y-%m-%dT%H:%M:%S"))
    p = _path(board.name, cfg.hash_hex(), tool, root)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec.to_dict(), indent=1))
    tmp.replace(p)
    return TimingRecord.from_dict(rec.to_dict(), p)


def _read(p: Path) -> TimingRecord | None:
    try:
        return TimingRecord.from_dict(json.loads(p.read_text()), p)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a broken or foreign record: as if absent (the next run overwrites it)


def lookup_timing(cfg: AccelConfig, board: Board, tool: str, *, root: Path | None = None,
                  current_only: bool = True) -> TimingRecord | None:
    """The timing record of ``cfg`` on ``board`` by ``tool`` (only one of the current ``hw/`` by default)."""
    p = _path(board.name, cfg.hash_hex(), tool, root)
    rec = _read(p) if p.exists() else None
    if rec is None or (current_only and rec.stale):
        return None
    return rec


def ecp5_proxy(cfg: AccelConfig, *, root: Path | None = None) -> TimingRecord | None:
    """The ECP5 place-and-route Fmax that best stands for ``cfg``'s RTL: a current record of the same
    configuration if one exists, otherwise the newest current nextpnr-ecp5 record of any configuration
    (the same ``hw/`` sources at another array size: a proxy, and labelled as one)."""
    d = root or timing_dir()
    recs = [r for p in sorted(d.glob("*-nextpnr-ecp5-*.json")) if (r := _read(p)) is not None and not r.stale]
    same = [r for r in recs if r.config_hash == cfg.hash_hex()]
    pool = same or recs
    return max(pool, key=lambda r: r.when) if pool else None
