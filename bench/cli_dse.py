"""``systolica dse``: sweep accelerator configurations x boards x models with the performance model.

    systolica dse --models default --boards kv260,zcu104,pynq-z2 --shapes 8x8,8x16,16x16,16x32,32x32 \\
        --dma-bits 64,128 --json dse.json --plot dse.png

Prints the Pareto front (decode tokens/s up; DSPs, BRAM, energy per token down) per model among the
points whose fit a synthesis measured (:mod:`systolica.boards.fit_status`); points that do not fit or
were never synthesized are listed, flagged and greyed, never ranked.  ``--synth`` runs Yosys first for
configurations the shared synthesis cache lacks (10 to 40 minutes each for the presets on 2 cores).  Runs on all local cores by
default, on a Ray cluster with ``--ray ADDRESS`` (``--ray local`` starts Ray here).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from systolica.bench.errors import BenchError

__all__ = ["Dse", "parse_shapes", "split_models", "plot_pareto"]


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
            raise BenchError(f"--shapes item {item!r} is not ROWSxCOLS (e.g. 16x32)")
        out.append((int(r), int(c)))
    if not out:
        raise BenchError("--shapes names no shape")
    return out


def plot_pareto(points: list[dict], front: set[int], path: str | Path) -> Path:
    """Tokens/s vs array MACs and energy per token vs tokens/s.  Filled: fits (measured); hollow:
    does not fit; faint x: fit not measured; ringed: Pareto front (among measured fits only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    boards = sorted({p["board"] for p in points})
    for bi, b in enumerate(boards):
        for i, p in enumerate(points):
            if p["board"] != b:
                continue
            if p.get("fit") == "yes":
                kw = {"color": f"C{bi}", "marker": "o", "markerfacecolor": f"C{bi}"}
            elif p.get("fit") == "no":
                kw = {"color": f"C{bi}", "marker": "o", "markerfacecolor": "none", "alpha": 0.6}
            else:
                kw = {"color": f"C{bi}", "marker": "x", "alpha": 0.45}
            kw["linestyle"] = "none"
            a1.plot(p["macs"], p["decode_tokens_per_s"], **kw)
            a2.plot(p["decode_tokens_per_s"], p["joules_per_token"], **kw)
            if i in front:
                for ax, xy in ((a1, (p["macs"], p["decode_tokens_per_s"])),
                               (a2, (p["decode_tokens_per_s"], p["joules_per_token"]))):
                    ax.plot(*xy, marker="o", markersize=13, markerfacecolor="none", color="k", linestyle="none")
        a1.plot([], [], "o", color=f"C{bi}", label=f"{b} (fits, measured)")
    a1.plot([], [], "o", color="k", markerfacecolor="none", markersize=13, label="Pareto front (measured fits)")
    a1.plot([], [], "o", color="gray", markerfacecolor="none", label="does NOT fit (synthesis)")
    a1.plot([], [], "x", color="gray", alpha=0.45, label="fit not measured")
    a1.set_xscale("log")
    a1.set_xlabel("array MACs (rows x cols)")
    a1.set_ylabel("decode tokens/s (modelled, assumed clock)")
    a2.set_xlabel("decode tokens/s (modelled, assumed clock)")
    a2.set_ylabel("energy per token (J, board power figure)")
    a2.set_yscale("log")
    for a in (a1, a2):
        a.grid(True, alpha=0.3)
    a1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def _num(v, fmt: str = "g") -> str:
    return "-" if v is None else format(v, fmt)


class Dse:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--models", default="default", help="comma-separated: default, checkpoint paths, random:ARCH[:k=v]")
        p.add_argument("--boards", default="kv260,zcu104,pynq-z2", help="comma-separated board names")
        p.add_argument("--shapes", default="4x4,8x8,16x16,32x32",
                       help="array shapes ROWSxCOLS (the RTL GEMM sequencer builds square arrays only)")
        p.add_argument("--dma-bits", default="64,128", help="DMA port widths (capped at the board's HP port)")
        p.add_argument("--prompt-len", type=int, default=16, help="context of the timed decode step and prompt")
        p.add_argument("--gemm", choices=("systolic", "line_dot"), default="systolic",
                       help="GEMM datapath to model: the RTL's systolic array (default) or the earlier line-dot one")
        p.add_argument("--workers", type=int, default=None, help="local processes (default: one per core)")
        p.add_argument("--ray", metavar="ADDRESS", help="run on a Ray cluster ('local' starts one here)")
        p.add_argument("--synth", action="store_true",
                       help="run Yosys for configurations without a cached synthesis (10 to 40 minutes each on 2 cores); "
                            "without it they are reported as 'fit: not measured'")
        p.add_argument("--synth-timeout", type=float, default=3600.0, help="seconds per Yosys run (default 3600)")
        p.add_argument("--json", help="write every point (and the front) as JSON")
        p.add_argument("--plot", help="write the Pareto plot (PNG)")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from rich.console import Console
        from rich.progress import Progress
        from rich.table import Table

        from systolica.bench.dse import front_of, make_tasks, run_tasks

        con = Console(emoji=False)  # model specs like random:llama:... are not emoji codes
        if not con.is_terminal:
            con = Console(width=160, emoji=False)
        shapes = parse_shapes(args.shapes)
        widths = [int(x) for x in args.dma_bits.split(",") if x.strip()]
        models = split_models(args.models)
        tasks = make_tasks(models, [b.strip() for b in args.boards.split(",") if b.strip()], shapes, widths,
                           args.prompt_len, args.gemm)
        if not tasks:
            raise BenchError("no valid configuration: check --shapes and --dma-bits against the boards")
        if args.synth:
            from systolica.bench.dse import synthesize_missing

            for r in synthesize_missing(tasks, timeout=args.synth_timeout, say=con.print):
                con.print(f"synthesized {r['config']} for {r['board']} in {r['seconds']:.0f} s -> {r['cache']}")
        with Progress(console=con, transient=True) as prog:
            job = prog.add_task(f"{len(tasks)} design points", total=len(tasks))
            points = run_tasks(tasks, workers=args.workers, ray_address=args.ray,
                               progress=lambda d, n: prog.update(job, completed=d))
        ok = [p for p in points if "error" not in p]
        front = front_of(ok)
        n_fit = sum(p["fit"] == "yes" for p in ok)
        n_unmeasured = sum(p["fit"] == "not measured" for p in ok)
        t = Table(title=f"design space: {len(ok)} points; {n_fit} fit (measured synthesis), "
                        f"{n_unmeasured} not measured; {len(front)} on the Pareto front of measured fits")
        for col in ("model", "board", "config", "decode tok/s", "TTFT ms", "DSP", "BRAM", "J/token", "fit",
                    "clock MHz", "power W", "Pareto"):
            t.add_column(col, justify="right" if col not in ("model", "board", "config", "fit") else "left")
        order = {"yes": 0, "no": 1, "not measured": 2}  # measured fits first: the others are not ranked
        for i, p in sorted(enumerate(ok), key=lambda x: (order[x[1]["fit"]], -x[1]["decode_tokens_per_s"])):
            fit = p["fit"] + (f" ({p['fit_tightest']})" if p["fit_tightest"] else "")
            if p["buffers_in_ff"]:
                fit += ", buffers in FFs"
            t.add_row(p["model"], p["board"], p["config"], f"{p['decode_tokens_per_s']:.1f}", f"{p['ttft_s'] * 1e3:.1f}",
                      _num(p["dsp"]), _num(p["bram"]), f"{p['joules_per_token']:.4f}",
                      fit if p["fit"] == "yes" else f"[red]{fit}[/red]",
                      f"{p['clock']['mhz']:g} {p['clock']['basis']}", f"{p['power_w']:g} {p['power']['basis']}",
                      "*" if i in front else "", style=None if p["fit"] == "yes" else "dim")
        con.print(t)
        if n_unmeasured:
            con.print(f"[yellow]{n_unmeasured} point(s) have no measured synthesis: their speed is what the design "
                      "would do IF it fit (systolica build --board B --config C, or dse --synth, measures it)")
        for p in points:
            if "error" in p:
                con.print(f"[yellow]{p['board']} {p['config']}: {p['error']}[/yellow]")
        if args.json:
            Path(args.json).write_text(json.dumps({"points": ok, "pareto": sorted(front),
                                                   "pareto_basis": "measured fits only (fit == 'yes')",
                                                   "failed": [p for p in points if "error" in p]}, indent=1))
            con.print(f"JSON: {args.json}")
        if args.plot:
            con.print(f"plot: {plot_pareto(ok, front, args.plot)}")
        return 0
