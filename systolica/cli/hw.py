"""``systolica hw generate`` and ``systolica hw synth``: the accelerator as Verilog, and what a unit costs.

``hw build`` (everything a board needs) is :mod:`systolica.cli.build`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from systolica.cli.exits import EXIT_OK
from systolica.cli.options import add_config, add_json, add_output, emit_json, json_to_stdout
from systolica.cli.progress import progress_enabled, steps

__all__ = ["Generate", "Synth"]


class Generate:
    """``systolica hw generate``: top-level Verilog, RTLIL, register map and config (:mod:`systolica.hw.generate`)."""

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        add_config(p)
        add_output(p, "output folder", required=True, old=True, metavar="DIR")
        p.add_argument("--uram", action="store_true",
                       help="mark buffers of >= 1 Mbit ram_style=\"ultra\" (UltraScale+ targets: Kria, ZCU104, Alveo)")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from systolica.config import load_config
        from systolica.hw.generate import generate

        cfg = load_config(args.config)
        with steps(progress_enabled(args), transient=True) as step:  # ~25 s for the default preset
            paths = generate(cfg, args.output, uram=args.uram, progress=step)
        for kind, p in paths.items():
            print(f"{kind:9s} {p}")
        return EXIT_OK


class Synth:
    """``systolica hw synth``: Yosys resource counts of one unit (:mod:`systolica.boards.synth`)."""

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        from systolica.boards.synth import FAMILIES, UNITS

        add_config(p)
        p.add_argument("--unit", choices=sorted(UNITS), default="array",
                       help="what to synthesize: " + "; ".join(f"{k}: {v[1]}" for k, v in UNITS.items()))
        p.add_argument("--family", choices=[*FAMILIES, "all"], default="all",
                       help="xc7 (Zynq-7000) or xcup (UltraScale+); default both")
        add_json(p, "the counts (and raw cell types)")
        p.add_argument("--keep", metavar="DIR", help="keep the Verilog, Yosys script, log and stat JSON in DIR")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from rich.console import Console
        from rich.table import Table

        from systolica.boards.synth import FAMILIES, synth_counts
        from systolica.boards.yosys_log import buffers_in_ff
        from systolica.config import load_config

        cfg = load_config(args.config)
        fams = FAMILIES if args.family == "all" else (args.family,)
        console = Console(highlight=False, stderr=json_to_stdout(args))
        results = []
        with steps(progress_enabled(args), transient=True) as step:
            for fam in fams:
                step(f"yosys synth_xilinx -family {fam}: {args.unit} of {cfg.name} ({cfg.rows}x{cfg.cols})")
                results.append(synth_counts(args.unit, cfg, fam, workdir=Path(args.keep) if args.keep else None))
        t = Table(title=f"{args.unit} of config {cfg.name!r} ({cfg.rows}x{cfg.cols}), Yosys synth_xilinx")
        for col in ("family", "LUT", "FF", "DSP", "BRAM36", "URAM", "seconds"):
            t.add_column(col, justify="left" if col == "family" else "right")
        for r in results:
            t.add_row(r["family"], f"{r['lut']:g}", f"{r['ff']:g}", f"{r['dsp']:g}", f"{r['bram']:g}",
                      f"{r['uram']:g}", f"{r['seconds']:g}")
        if not json_to_stdout(args):
            console.print(t)
        if args.unit in ("array", "gemm"):
            for r in results:
                if r["dsp"] < cfg.rows * cfg.cols:
                    console.print(f"[yellow]{r['family']}: {r['dsp']:g} DSPs for {cfg.rows * cfg.cols} multipliers: "
                                  "some int8 multipliers went to LUTs[/]")
        for r in results:
            ff = buffers_in_ff(r["memories"])
            if ff:
                console.print(f"[yellow]{r['family']}: buffer memories mapped to flip-flops: {', '.join(ff)}[/]")
        emit_json(args.json, results)
        return EXIT_OK
