"""Measured synthesis results, cached once for ``systolica hw build``, ``bench`` and ``dse``.

One JSON record per (configuration hash, Yosys family, URAM mapping) under
``$SYSTOLICA_CACHE/synth`` (default ``~/.cache/systolica/synth``): the resource counts of
``stat -json``, the raw cell counts, which memories became block RAM / URAM / flip-flops
(:mod:`systolica.boards.yosys_log`), the synthesis wall time, and a digest of the
``hw/`` sources the Verilog came from.  A record whose digest differs from the current
``hw/`` is *stale*: the RTL changed since it was measured, so it is not used as a fit
(``systolica hw build`` synthesizes again; ``bench`` and ``dse`` say "not measured").

A record may carry ``fmax_mhz`` (from a place-and-route run); nothing fills it yet.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from systolica.boards.board import Board, Resources
from systolica.config import AccelConfig

__all__ = ["SynthRecord", "cache_dir", "uram_target", "hw_digest", "record_path", "lookup", "store",
           "verilog_digest", "verilog_digest_text", "restamp", "records", "synthesize",
           "SCHEMA"]

SCHEMA = "systolica-synth/1"


def cache_dir() -> Path:
    """``$SYSTOLICA_CACHE/synth`` or ``~/.cache/systolica/synth`` (the model zoo uses the same root)."""
    return Path(os.environ.get("SYSTOLICA_CACHE") or Path.home() / ".cache" / "systolica") / "synth"


@lru_cache(maxsize=1)
def _hw_digest_cached(root: str, stamp: tuple) -> str:
    h = hashlib.sha256()
    for p in sorted(Path(root).glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def hw_digest() -> str:
    """A digest of the gateware sources (``hw/*.py``): the RTL a cached count belongs to."""
    import importlib.util

    spec = importlib.util.find_spec("systolica.hw")
    root = Path(next(iter(spec.submodule_search_locations)))
    stamp = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(root.glob("*.py")))
    return _hw_digest_cached(str(root), stamp)


@dataclass(frozen=True)
class SynthRecord:
    """One measured synthesis of the whole top level."""

    config: dict[str, Any]
    config_hash: str
    family: str
    uram: bool
    resources: Resources
    cells: dict[str, int]
    memories: list[dict] = field(default_factory=list)  # MemoryMapping.to_dict() of each memory
    seconds: float | None = None
    hw: str = ""  # hw_digest() when it was measured
    verilog: str = ""  # verilog_digest() of the top level Yosys read
    when: str = ""
    tool: str = "yosys"
    fmax_mhz: float | None = None  # measured Fmax (place and route); a later flow fills it
    path: Path | None = None

    @property
    def stale(self) -> bool:
        """The ``hw/`` sources changed since this was measured."""
        return self.hw != hw_digest()

    @property
    def buffers_in_ff(self) -> list[str]:
        from systolica.boards.yosys_log import buffers_in_ff

        return buffers_in_ff(self.memories)

    def accel_config(self) -> AccelConfig:
        return AccelConfig.from_dict(dict(self.config), source=str(self.path or "synth record"))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "config": self.config, "config_hash": self.config_hash, "family": self.family,
                "uram": self.uram, "resources": self.resources.as_dict(), "cells": self.cells,
                "memories": self.memories, "seconds": self.seconds, "hw": self.hw, "verilog": self.verilog,
                "when": self.when,
                "tool": self.tool, "fmax_mhz": self.fmax_mhz}

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: Path | None = None) -> SynthRecord:
        return cls(config=d["config"], config_hash=d["config_hash"], family=d["family"], uram=bool(d["uram"]),
                   resources=Resources(**d["resources"]), cells=d.get("cells", {}), memories=d.get("memories", []),
                   seconds=d.get("seconds"), hw=d.get("hw", ""), verilog=d.get("verilog", ""), when=d.get("when", ""),
                   tool=d.get("tool", "yosys"),
                   fmax_mhz=d.get("fmax_mhz"), path=path)


def uram_target(board: Board) -> bool:
    """The board's part has UltraRAM: Verilog with ``ram_style = "ultra"`` buffers, ``synth_xilinx -uram``."""
    return board.family == "xcup" and board.resources.uram > 0


_uram = uram_target


def record_path(cfg: AccelConfig, family: str, uram: bool, root: Path | None = None) -> Path:
    return (root or cache_dir()) / f"{family}{'-uram' if uram else ''}-{cfg.hash_hex()[:16]}.json"


def lookup(cfg: AccelConfig, board: Board, *, root: Path | None = None) -> SynthRecord | None:
    """The cached synthesis of ``cfg`` for ``board``'s family (stale or not), or None."""
    p = record_path(cfg, board.family, _uram(board), root)
    if not p.exists():
        return None
    try:
        return SynthRecord.from_dict(json.loads(p.read_text()), p)
    except (ValueError, KeyError, TypeError):
        return None  # a broken or older record: as if absent (the next synthesis overwrites it)


def verilog_digest(path: Path) -> str:
    """A digest of a generated top level's text: equal Verilog synthesizes to equal counts."""
    return verilog_digest_text(Path(path).read_text())


def verilog_digest_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def restamp(rec: SynthRecord, verilog: Path) -> SynthRecord | None:
    """``rec`` made current again if it is stale only because ``hw/`` changed where ``verilog`` (the top level
    the current sources generate) did not: the record of a byte-identical Verilog file, stored with the
    current ``hw_digest()``.  None if the Verilog differs or ``rec`` has no Verilog digest."""
    if not rec.verilog or rec.verilog != verilog_digest(verilog):
        return None
    fresh = replace(rec, hw=hw_digest(), path=None)
    p = rec.path or record_path(fresh.accel_config(), rec.family, rec.uram)
    _write(p, fresh)
    return replace(fresh, path=p)


def _write(p: Path, rec: SynthRecord) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec.to_dict(), indent=1))
    tmp.replace(p)


def store(cfg: AccelConfig, family: str, uram: bool, resources: Resources, *, cells: dict | None = None,
          memories: list | None = None, seconds: float | None = None, hw: str | None = None,
          verilog: str = "", root: Path | None = None) -> SynthRecord:
    """Write a record (the counts of one synthesis of ``cfg``; ``verilog``: the digest of its top level)
    and return it."""
    rec = SynthRecord(config=cfg.to_dict(), config_hash=cfg.hash_hex(), family=family, uram=uram,
                      resources=resources, cells=dict(cells or {}),
                      memories=[m if isinstance(m, dict) else m.to_dict() for m in (memories or [])],
                      seconds=None if seconds is None else round(seconds, 1), hw=hw if hw is not None else hw_digest(),
                      verilog=verilog, when=time.strftime("%Y-%m-%dT%H:%M:%S"))
    p = record_path(cfg, family, uram, root)
    _write(p, rec)
    return SynthRecord.from_dict(rec.to_dict(), p)


def records(family: str | None = None, *, root: Path | None = None, current_only: bool = False) -> list[SynthRecord]:
    """Every cached record (of ``family``), for calibrating the estimate."""
    d = root or cache_dir()
    out = []
    for p in sorted(d.glob("*.json")) if d.exists() else []:
        try:
            r = SynthRecord.from_dict(json.loads(p.read_text()), p)
        except (ValueError, KeyError, TypeError):
            continue
        if (family is None or r.family == family) and not (current_only and r.stale):
            out.append(r)
    return out


def synthesize(cfg: AccelConfig, board: Board, *, workdir: Path, verilog: Path | None = None,
               timeout: float = 3600.0, say=lambda s: None) -> SynthRecord:
    """Synthesize the top level of ``cfg`` for ``board``'s family with Yosys and cache the result.

    ``verilog`` is the generated top level if the caller has it (generated with ``uram`` set as
    :func:`uram_target` says for the board); otherwise it is generated into ``workdir/hdl``.  The Yosys log stays in ``workdir/<family>-work/yosys.log``.
    """
    from systolica.boards.yosys import synth_resources, synthesis_source
    from systolica.hw.generate import TOP_NAME

    uram = _uram(board)
    if verilog is None:
        from systolica.boards.hdl import write_verilog

        verilog = write_verilog(cfg, Path(workdir) / "hdl", uram=uram)[0]["verilog"]
    say(f"Yosys {'synth_ecp5' if board.family == 'ecp5' else 'synth_xilinx -family ' + board.family} of "
        f"{cfg.name} ({cfg.rows}x{cfg.cols}): 10 to 40 minutes on 2 cores for the board presets (WebAssembly Yosys); cached in {cache_dir()}")
    hw = hw_digest()  # the sources the Verilog was generated from, before Yosys runs
    r = synth_resources([synthesis_source(verilog)], TOP_NAME, board.family, uram=uram, workdir=Path(workdir) / f"{board.family}-work",
                        timeout=timeout)
    return store(cfg, board.family, uram, r.resources, cells=r.cells, memories=list(r.memories), seconds=r.seconds,
                 hw=hw, verilog=verilog_digest(verilog))
