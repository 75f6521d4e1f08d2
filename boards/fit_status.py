"""What is known about a configuration on a board: fit, clock and power, each with its basis.

``systolica bench`` and ``systolica dse`` report speed, energy and cost only beside these:

- fit (:func:`fit_status`): ``yes`` / ``no`` from a measured synthesis of the whole top level
  (:mod:`systolica.boards.synth_cache`) against the board, ``no`` when the hardware generator
  refuses the configuration (:func:`systolica.boards.fit.hardware_problem`), otherwise
  ``not measured`` -- never a per-PE guess;
- clock (:func:`clock_basis`): the board's target, labelled *assumed*, until a place-and-route
  run (or Vivado timing) of the configuration is cached (:mod:`systolica.boards.timing_cache`);
- power (:func:`power_basis`): the board file's figure with the source its comment gives
  (``[V]`` measured, ``[S: ...]`` datasheet or another named source, ``[?]`` assumed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from systolica.boards.board import Board
from systolica.boards.fit import DEFAULT_MARGIN, FitReport, fit_check, hardware_problem
from systolica.boards.synth_cache import SynthRecord, lookup
from systolica.config import AccelConfig

__all__ = ["FitStatus", "fit_status", "clock_basis", "clock_label", "power_basis", "figure_source", "YES", "NO", "NOT_MEASURED"]

YES, NO, NOT_MEASURED = "yes", "no", "not measured"


@dataclass(frozen=True)
class FitStatus:
    state: str  # YES, NO or NOT_MEASURED
    board: str
    config: str
    tightest: str = ""  # e.g. "LUT 469%" or "hardware rules"
    reason: str = ""  # why not measured, or why it cannot be built
    report: FitReport | None = None
    record: SynthRecord | None = None
    buffers_in_ff: tuple[str, ...] = field(default=())

    @property
    def measured(self) -> bool:
        return self.report is not None

    @property
    def fits(self) -> bool | None:
        """True / False when known, None when not measured."""
        return None if self.state == NOT_MEASURED else self.state == YES

    def label(self) -> str:
        if self.state == NOT_MEASURED:
            return "not measured"
        return f"{self.state} ({self.tightest})" if self.tightest else self.state

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"state": self.state, "fits": self.fits, "tightest": self.tightest,
                             "reason": self.reason, "buffers_in_ff": list(self.buffers_in_ff),
                             "source": "measured synthesis (Yosys)" if self.measured else None}
        if self.report is not None:
            d["utilization"] = {r.kind: r.utilization for r in self.report.rows}
            d["used"] = {r.kind: r.used for r in self.report.rows}
            d["margin"] = self.report.margin
        if self.record is not None:
            d["synth"] = {"when": self.record.when, "seconds": self.record.seconds, "family": self.record.family,
                          "cache": str(self.record.path) if self.record.path else None}
        return d


def _tightest(report: FitReport) -> str:
    w = report.worst
    return f"{w.kind.upper()} {w.utilization:.0%}"


def fit_status(cfg: AccelConfig, board: Board, *, margin: float = DEFAULT_MARGIN, root: Path | None = None,
               record: SynthRecord | None = None) -> FitStatus:
    """The fit of ``cfg`` on ``board`` as far as a measured synthesis says (see the module docstring)."""
    problem = hardware_problem(cfg)
    if problem:
        return FitStatus(NO, board.name, cfg.name, "hardware rules", f"the hardware generator refuses it: {problem}")
    rec = record if record is not None else lookup(cfg, board, root=root)
    if rec is None:
        return FitStatus(NOT_MEASURED, board.name, cfg.name,
                         reason=f"no synthesis of config {cfg.hash_hex()[:12]} for {board.family} cached "
                                f"(systolica hw build --board {board.name} --config ..., or --synth)")
    if rec.stale:
        return FitStatus(NOT_MEASURED, board.name, cfg.name, record=rec,
                         reason=f"the cached synthesis ({rec.when}) is of older hw/ sources; synthesize again")
    report = fit_check(board, rec.resources, config=cfg.name, margin=margin, source="yosys (measured)")
    return FitStatus(YES if report.fits else NO, board.name, cfg.name, _tightest(report), report=report, record=rec,
                     buffers_in_ff=tuple(rec.buffers_in_ff))


def clock_basis(cfg: AccelConfig, record: SynthRecord | None = None, board: Board | None = None, *,
                timing_root: Path | None = None) -> dict[str, Any]:
    """The clock the figures use and where it comes from (:mod:`systolica.boards.timing_cache`).

    - An ECP5 board with a current place-and-route record of ``cfg``: ``min(target, Fmax)``, measured.
    - A Xilinx board with Vivado timing of ``cfg``: ``min(target, 1 / (period - WNS))``, measured.
    - Otherwise the board's target clock (``clock_mhz`` of the config), *assumed*; a Xilinx row then
      carries the ECP5 Fmax of the same hardware sources as ``ecp5_proxy`` (a proxy, named as one).

    ``label`` is the one line a report prints.
    """
    from systolica.boards.timing_cache import ecp5_proxy, lookup_timing

    target = cfg.clock_mhz
    out: dict[str, Any] = {"mhz": target, "target_mhz": target, "measured_fmax_mhz": None, "basis": "assumed",
                           "source": "the board's target clock; timing not measured", "ecp5_proxy": None}
    fmax, source = None, ""
    if board is not None:
        tool = "nextpnr-ecp5" if board.flow == "ecp5" else "vivado"
        rec = lookup_timing(cfg, board, tool, root=timing_root)
        if rec is not None:
            fmax, source = rec.fmax_mhz, f"Fmax from place and route ({rec.label()})"
            out["critical_path"] = rec.critical_path
    if fmax is None and record is not None and not record.stale and record.fmax_mhz:
        fmax, source = record.fmax_mhz, "Fmax from place and route"
    if fmax:
        out.update(mhz=min(target, fmax), measured_fmax_mhz=fmax, basis="measured", source=source)
    elif board is not None:
        why = "no place and route yet" if board.flow == "ecp5" else "no Vivado timing"
        out["source"] = f"the board's target clock; {why}"
        if board.flow != "ecp5":
            proxy = ecp5_proxy(cfg, root=timing_root)
            if proxy is not None:
                out["ecp5_proxy"] = {"mhz": proxy.fmax_mhz, "same_config": proxy.config_hash == cfg.hash_hex(),
                                     "source": proxy.label()}
    out["label"] = clock_label(out)
    return out


def clock_label(clock: dict[str, Any]) -> str:
    """``clock: assumed 200 MHz (no Vivado timing); ECP5 proxy 41.3 MHz (...)`` or ``clock: 48.2 MHz measured ...``."""
    if clock["basis"] == "measured":
        capped = " (the target; Fmax above it)" if clock["measured_fmax_mhz"] > clock["target_mhz"] else ""
        s = f"clock: {clock['mhz']:g} MHz measured{capped}, {clock['source']}"
    else:
        why = clock["source"].split("; ", 1)[-1]
        s = f"clock: assumed {clock['mhz']:g} MHz ({why})"
    proxy = clock.get("ecp5_proxy")
    if proxy:
        kind = "same config" if proxy["same_config"] else "same hw at another size"
        s += f"; ECP5 proxy {proxy['mhz']:g} MHz ({kind}: {proxy['source']})"
    return s


def figure_source(board: Board, key: str) -> str:
    """The comment beside ``key = ...`` in the board file (its source), or ''."""
    if board.path is None or not Path(board.path).exists():
        return ""
    m = re.search(rf"^\s*{re.escape(key)}\s*=[^#\n]*#\s*(.*)$", Path(board.path).read_text(), re.M)
    return m.group(1).strip() if m else ""


def power_basis(board: Board) -> dict[str, Any]:
    """The board's power figure with its basis: measured ``[V]``, datasheet ``[S: ...]``, assumed ``[?]``."""
    note = figure_source(board, "power_w")
    if "[V" in note:
        basis = "measured"
    elif "[S" in note:
        basis = "datasheet"
    else:
        basis = "assumed"
    return {"watts": board.power_w, "basis": basis, "source": f"{board.name}.toml power_w: {note or 'no source'}"}
