"""``systolica dse``: sweep accelerator configurations x boards x models with the performance model.

    systolica dse --models default --boards kv260,zcu104,pynq-z2 --shapes 8x8,16x16,32x32 \\
        --dma-bits 64,128 [--clocks 100,150,200] [--dram-gbps 4,8,16] --json dse.json --plots plots/

Prints the Pareto front (decode tokens/s up; DSPs, BRAM, energy per token down) per model among the
points whose fit a synthesis measured (:mod:`systolica.boards.fit_status`); points that do not fit or
were never synthesized are listed, flagged and greyed, never ranked.  ``--synth`` runs Yosys first for
configurations the shared synthesis cache lacks (10 to 40 minutes each for the presets on 2 cores).  Runs on
all local cores by default (``-j N``: N processes), on a Ray cluster with ``--ray ADDRESS`` (``--ray local``
starts Ray here).  The last lines say how fast it went (:func:`summary_line`): points/s, wall and CPU seconds,
whether the programs were compiled (cold) or from ``$SYSTOLICA_CACHE/dse-programs`` (warm), the stages and the
CPU a point's decode and prefill timing took.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from systolica.cli.exits import EXIT_OK
from systolica.cli.options import (
    UsageError,
    add_deprecated,
    add_jobs,
    add_json,
    add_plots,
    add_synth,
    emit_json,
    json_to_stdout,
    positive_int,
)
from systolica.cli.progress import progress_enabled

__all__ = ["Dse", "parse_shapes", "split_models", "summary_line", "PLOT_NAME"]

PLOT_NAME = "dse_pareto.png"  # the file --plots DIR writes


def split_models(text: str) -> list[str]:
    """Comma-separated model specs; ``random:ARCH:k=v,k=v`` keeps its own commas (items with ``=``)."""
    out: list[str] = []
    for part in (x.strip() for x in text.split(",")):
        if not part:
            continue
        if out and "=" in part and ":" not in part and out[-1].startswith("random:"):
            out[-1] += "," + part
        else:
            out.append(part)
    return out


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """``"8x8,16x32"`` -> ``[(8, 8), (16, 32)]``; raises ValueError naming a bad item."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        r, sep, c = item.lower().partition("x")
        if not sep or not r.isdigit() or not c.isdigit():
            raise UsageError(f"--shapes item {item!r} is not ROWSxCOLS (e.g. 16x32)")
        out.append((int(r), int(c)))
    if not out:
        raise UsageError("--shapes names no shape")
    return out


def _floats(text: str, option: str, what: str) -> list[float]:
    """``"100,150"`` -> ``[100.0, 150.0]`` (empty: ``[]``); a non-positive or non-numeric item is a usage error."""
    out = []
    for x in (x.strip() for x in text.split(",") if x.strip()):
        try:
            v = float(x)
        except ValueError:
            v = -1.0
        if not v > 0:
            raise UsageError(f"{option} item {x!r} is not {what} (a positive number)")
        out.append(v)
    return out


def summary_line(n: int, stats: dict, where: str) -> str:
    """The run's rate line: points/s (wall), CPU, whether its programs were cold (compiled) or warm (cached), and
    where the time went (stages wall: shapes, until the last program set was ready, the rest; per point, the CPU
    of the decode and prefill timing)."""
    sec = stats["seconds"]
    rate = n / sec if sec > 0 else float("inf")
    c, k = stats["compiled"], stats["cached"]
    kind = "cold" if c and not k else "warm" if k and not c else "mixed" if c else "no programs"
    st, ph = stats["stage_seconds"], stats["phase_seconds"]
    per = (f"; per point {ph['decode'] / n * 1e3:.0f} ms decode + {ph['prefill'] / n * 1e3:.0f} ms prefill timing (CPU)"
           if n else "")
    return (f"{n} points in {sec:.2f} s ({stats['cpu_seconds']:.1f} s CPU): {rate:.1f} points/s on {where}; "
            f"{kind}: {c} program set(s) compiled, {k} from the cache; model shape {st['shapes']:.2f} s, "
            f"programs {st['programs']:.2f} s, points {st['points']:.2f} s{per}")


def _num(v, fmt: str = "g") -> str:
    return "-" if v is None else format(v, fmt)


class Dse:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--models", default="default", help="comma-separated: default, checkpoint paths, random:ARCH[:k=v]")
        p.add_argument("--boards", default="kv260,zcu104,pynq-z2", help="comma-separated board names")
        p.add_argument("--weights", default="int8", metavar="FORMATS",
                       help="matrix weight formats, comma-separated: int8, int4 or int8,int4 (int4 points: the "
                            "performance model of the RTL's 4-bit datapath, on a Pareto front of their own; "
                            "default int8)")
        p.add_argument("--shapes", default="4x4,8x8,16x16,32x32",
                       help="array shapes ROWSxCOLS (the RTL GEMM sequencer builds square arrays only)")
        p.add_argument("--dma-bits", default="64,128", help="DMA port widths (capped at the board's HP port)")
        p.add_argument("--prompt-len", type=positive_int, default=16, metavar="N",
                       help="context of the timed decode step and prompt (default 16)")
        p.add_argument("--gemm", choices=("systolic", "line_dot"), default="systolic",
                       help="GEMM datapath to model: the RTL's systolic array (default) or the earlier line-dot one")
        p.add_argument("--clocks", default="", metavar="MHZ,...",
                       help="sweep the clock: a point per value on the same compiled programs (default: the board's; "
                            "a clock above a measured Fmax is never on the front)")
        p.add_argument("--dram-gbps", default="", metavar="GBPS,...",
                       help="sweep the DRAM bandwidth the board delivers (default: the board's peak x efficiency)")
        add_jobs(p, "local processes", None, old=("--workers",))
        p.add_argument("--ray", metavar="ADDRESS", help="run on a Ray cluster ('local' starts one here)")
        add_synth(p, "they are reported as 'fit: not measured' (with --asic: runs the ASIC estimate)")
        a = p.add_argument_group("ASIC points (--asic: NanGate 45 nm, docs/asic.md)")
        a.add_argument("--asic", action="store_true",
                       help="sweep ASIC points instead of boards: array shapes of --config, area / Fmax / power from "
                            "cached `systolica hw build --asic` estimates, tokens/s from the performance model")
        a.add_argument("--config", default=None, metavar="PRESET|FILE.toml",
                       help="with --asic: the configuration whose array shapes are swept (default: default)")
        add_json(p, "every point, the Pareto front and the failed points")
        add_plots(p, f"the Pareto plot ({PLOT_NAME})")
        add_deprecated(p, "--plot", "--plots DIR", "plot_file")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from rich.console import Console
        from rich.progress import Progress
        from rich.table import Table

        from systolica.bench.dse import front_of, make_tasks, run_tasks

        to_stdout = json_to_stdout(args)
        con = Console(emoji=False, stderr=to_stdout)  # model specs like random:llama:... are not emoji codes
        if not con.is_terminal:
            con = Console(width=160, emoji=False, stderr=to_stdout)
        shapes = parse_shapes(args.shapes)
        widths = []
        for x in (x.strip() for x in args.dma_bits.split(",") if x.strip()):
            if not x.isdigit() or int(x) < 1:
                raise UsageError(f"--dma-bits item {x!r} is not a port width in bits (e.g. 64)")
            widths.append(int(x))
        models = split_models(args.models)
        weights = [w.strip() for w in args.weights.split(",") if w.strip()]
        if not weights or any(w not in ("int8", "int4") for w in weights):
            raise UsageError(f"--weights {args.weights!r}: give int8, int4 or int8,int4")
        if args.asic and weights != ["int8"]:
            raise UsageError("--weights int4 is for board sweeps; --asic points time int8 weights")
        if args.asic:
            from systolica.cli.dse_asic import asic_main

            return asic_main(args, models, shapes, _floats(args.clocks, "--clocks", "a clock in MHz"),
                             _floats(args.dram_gbps, "--dram-gbps", "a bandwidth in GB/s"))
        if args.config is not None:
            raise UsageError("--config goes with --asic (board sweeps take each board's [accel] configuration)")
        tasks = make_tasks(models, [b.strip() for b in args.boards.split(",") if b.strip()], shapes, widths,
                           args.prompt_len, args.gemm, clocks=_floats(args.clocks, "--clocks", "a clock in MHz"),
                           dram_gbps=_floats(args.dram_gbps, "--dram-gbps", "a bandwidth in GB/s"), weights=weights)
        if not tasks:
            raise UsageError("no valid configuration: check --shapes and --dma-bits against the boards")
        if args.synth:
            from systolica.bench.dse import synthesize_missing

            for r in synthesize_missing(tasks, timeout=args.synth_timeout, say=con.print):
                con.print(f"synthesized {r['config']} for {r['board']} in {r['seconds']:.0f} s -> {r['cache']}")
        with Progress(console=Console(stderr=True), transient=True, disable=not progress_enabled(args)) as prog:
            job = prog.add_task(f"{len(tasks)} design points", total=len(tasks))
            stats: dict = {}
            points = run_tasks(tasks, workers=args.jobs, ray_address=args.ray, stats=stats,
                               progress=lambda d, n: prog.update(job, completed=d))
        rate = len(points) / stats["seconds"] if stats["seconds"] > 0 else float("inf")
        ok = [p for p in points if "error" not in p]
        front = front_of(ok)
        n_fit = sum(p["fit"] == "yes" for p in ok)
        n_unmeasured = sum(p["fit"] == "not measured" for p in ok)
        t = Table(title=f"design space: {len(ok)} points; {n_fit} fit (measured synthesis), "
                        f"{n_unmeasured} not measured; {len(front)} on the Pareto front of measured fits")
        for col in ("model", "weights", "board", "config", "decode tok/s", "TTFT ms", "DSP", "BRAM", "J/token", "fit",
                    "clock MHz", "power W", "Pareto"):
            t.add_column(col, justify="right" if col not in ("model", "weights", "board", "config", "fit") else "left")
        order = {"yes": 0, "no": 1, "not measured": 2}  # measured fits first: the others are not ranked
        for i, p in sorted(enumerate(ok), key=lambda x: (order[x[1]["fit"]], -x[1]["decode_tokens_per_s"])):
            fit = p["fit"] + (f" ({p['fit_tightest']})" if p["fit_tightest"] else "")
            if p["buffers_in_ff"]:
                fit += ", buffers in FFs"
            w = p.get("weights", "int8") + (" (model: no RTL datapath)" if p.get("weights", "int8") != "int8" else "")
            t.add_row(p["model"], w, p["board"], p["config"], f"{p['decode_tokens_per_s']:.1f}", f"{p['ttft_s'] * 1e3:.1f}",
                      _num(p["dsp"]), _num(p["bram"]), f"{p['joules_per_token']:.4f}",
                      fit if p["fit"] == "yes" else f"[red]{fit}[/red]",
                      f"{p['clock']['mhz']:g} {p['clock']['basis']}", f"{p['power_w']:g} {p['power']['basis']}",
                      "*" if i in front else "", style=None if p["fit"] == "yes" else "dim")
        if not to_stdout:
            con.print(t)
        where = f"Ray at {args.ray}" if args.ray else f"{args.jobs or os.cpu_count() or 1} local process(es)"
        con.print(summary_line(len(points), stats, where))
        if n_unmeasured:
            con.print(f"[yellow]{n_unmeasured} point(s) have no measured synthesis: their speed is what the design "
                      "would do IF it fit (systolica hw build --board B --config C, or dse --synth, measures it)")
        for p in points:
            if "error" in p:
                con.print(f"[yellow]{p['board']} {p['config']}: {p['error']}[/yellow]")
        written = emit_json(args.json, {"points": ok, "pareto": sorted(front),
                                        "pareto_basis": "measured fits only (fit == 'yes')",
                                        "failed": [p for p in points if "error" in p],
                                        "timing": {"points": len(points), "seconds": stats["seconds"],
                                                   "cpu_seconds": stats["cpu_seconds"],
                                                   "points_per_s": rate, "programs_compiled": stats["compiled"],
                                                   "programs_cached": stats["cached"],
                                                   "stage_seconds": stats["stage_seconds"],
                                                   "stage_cpu_seconds": stats["stage_cpu_seconds"],
                                                   "phase_seconds": stats["phase_seconds"],
                                                   "workers": None if args.ray else (args.jobs or os.cpu_count()),
                                                   "ray": args.ray}})
        if written is not None:
            con.print(f"JSON: {written}")
        plot = getattr(args, "plot_file", None)
        if args.plots:
            Path(args.plots).mkdir(parents=True, exist_ok=True)
            plot = Path(args.plots) / PLOT_NAME
        if plot:
            from systolica.bench.dse_plot import plot_pareto

            con.print(f"plot: {plot_pareto(ok, front, plot)}")
        return EXIT_OK
