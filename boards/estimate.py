"""The resource estimate of ``systolica hw build`` (:mod:`systolica.cli.build`): the measured synthesis of a
board's top level from the shared cache or a Yosys run, and the per-PE model behind ``--estimate`` and the
largest array a board holds.
"""

from __future__ import annotations

from pathlib import Path

from systolica.boards.board import Board, Resources
from systolica.boards.fit import ResourceModel
from systolica.boards.synth_cache import SynthRecord
from systolica.config import AccelConfig

__all__ = ["estimate_resources", "estimate_model", "analytic_model", "FIT_SCHEMA"]

FIT_SCHEMA = "systolica-fit/1"


def analytic_model(family: str, *, uram: bool = False) -> ResourceModel:
    """A prior for when no synthesis is cached (``--estimate``): one int8 MAC per DSP, ~40 LUT and
    ~80 FF per processing element (operand and partial-sum registers, accumulate adder),
    ~10k LUT / 12k FF of control, DMA and AXI logic, buffers in block RAM.  Uncalibrated: the
    synthesized top level has been far larger (docs/boards.md)."""
    return ResourceModel(family, fixed=Resources(lut=10000, ff=12000), per_pe=Resources(lut=40, ff=80, dsp=1),
                         uram=uram)


def estimate_model(family: str, *, uram: bool = False, root: Path | None = None) -> tuple[ResourceModel, str]:
    """The ``--estimate`` model for ``family`` (buffers in URAM where ``uram``, as on UltraScale+ boards):
    calibrated on the cached measured syntheses of that family and URAM setting (current ``hw/`` sources
    first, older ones if there are no current ones), else the uncalibrated :func:`analytic_model`.
    Returns the model and a sentence saying which."""
    from systolica.boards.synth_cache import records
    from systolica.config import ConfigError

    recs = [r for r in records(family, root=root) if bool(r.uram) == uram]
    current = [r for r in recs if not r.stale]
    use, note = (current, "") if current else (recs, ", of older hw/ sources")
    points = []
    for r in use:
        try:
            points.append((r.accel_config(), r.resources))
        except (ConfigError, TypeError):
            continue  # a record from an older AccelConfig schema
    if not points:
        return analytic_model(family, uram=uram), "uncalibrated per-PE model (no measured synthesis cached)"
    names = ", ".join(sorted({f"{c.rows}x{c.cols}" for c, _ in points}))
    return (ResourceModel.calibrate(family, points, uram=uram),
            f"per-PE model calibrated on {len(points)} measured synthesis(es) ({names}{note})")


def estimate_resources(cfg: AccelConfig, board: Board, verilog: Path, synth_dir: Path, *, timeout: float,
                       say=print) -> tuple[SynthRecord, str]:
    """The measured synthesis of ``verilog`` for ``board``: the shared cache's record if it is of the
    current ``hw/`` sources, else a Yosys run (stored in the cache)."""
    from systolica.boards.synth_cache import lookup, restamp, synthesize

    rec = lookup(cfg, board)
    if rec is not None and not rec.stale:
        return rec, f"yosys, measured (cached {rec.when}, {rec.seconds or 0:.0f} s)"
    if rec is not None and (same := restamp(rec, verilog)) is not None:
        say(f"the cached synthesis ({rec.when}) is of older hw/ sources that generate this same Verilog: reused")
        return same, f"yosys, measured (cached {rec.when}, {rec.seconds or 0:.0f} s; identical Verilog)"
    if rec is not None:
        say(f"[yellow]the cached synthesis ({rec.when}) is of older hw/ sources: synthesizing again")
    if rec is None:
        say(f"no cached synthesis of {cfg.name} for {board.family}: running Yosys (10 to 40 minutes for the presets "
            f"on 2 cores, at most {timeout:.0f} s; --estimate skips it)")
    rec = synthesize(cfg, board, workdir=synth_dir, verilog=verilog, timeout=timeout, say=say)
    return rec, f"yosys, measured ({rec.seconds or 0:.0f} s)"
