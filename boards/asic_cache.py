"""Measured ASIC estimates, cached for ``systolica dse --asic``.

``systolica hw build --asic`` stores every report it writes (``asic.json``, :mod:`systolica.boards.asic`) under
``$SYSTOLICA_CACHE/asic`` (default ``~/.cache/systolica/asic``), one file per (unit, configuration hash, target
period), with the digest of the ``hw/`` sources it was synthesized from.  A report whose digest differs from the
current ``hw/`` is *stale* (the RTL changed since) and is not looked up.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from systolica.boards import synth_cache
from systolica.config import AccelConfig

__all__ = ["asic_cache_dir", "store", "lookup"]


def asic_cache_dir() -> Path:
    """``$SYSTOLICA_CACHE/asic`` or ``~/.cache/systolica/asic``."""
    return Path(os.environ.get("SYSTOLICA_CACHE") or Path.home() / ".cache" / "systolica") / "asic"


def _path(cfg: AccelConfig, unit: str, period_ns: float, root: Path | None) -> Path:
    return (root or asic_cache_dir()) / f"{unit}-{cfg.hash_hex()[:16]}-{round(period_ns * 1000)}ps.json"


def store(report: dict[str, Any], cfg: AccelConfig, *, root: Path | None = None) -> Path:
    """Write ``report`` (an :func:`~systolica.boards.asic.asic_estimate` result of ``cfg``) into the cache."""
    period = float(report["timing"]["target_period_ns"])
    path = _path(cfg, report["unit"], period, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {**report, "cached": {"hw": synth_cache.hw_digest(), "config": cfg.to_dict(),
                                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)
    return path


def lookup(cfg: AccelConfig, unit: str = "top", *, root: Path | None = None) -> dict[str, Any] | None:
    """The current (not stale) cached report of ``unit`` of ``cfg``: of the target periods measured, the one with
    the highest measured Fmax (then the newest); ``None`` when there is none."""
    d = root or asic_cache_dir()
    best, key = None, None
    for p in sorted(d.glob(f"{unit}-{cfg.hash_hex()[:16]}-*ps.json")) if d.is_dir() else []:
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        meta = doc.get("cached") or {}
        if meta.get("hw") != synth_cache.hw_digest() or doc.get("config_hash") != cfg.hash_hex():
            continue
        k = ((doc.get("timing") or {}).get("fmax_mhz") or 0.0, meta.get("when", ""))
        if key is None or k > key:
            best, key = {**doc, "cache_path": str(p)}, k
    return best
