"""``systolica dse --asic``: ASIC points (NanGate 45 nm area, Fmax, power) of array shapes of one configuration,
beside decode tokens/s from the performance model (:mod:`systolica.bench.dse_asic`).

    systolica dse --asic [--config default] --shapes 4x4,8x8,16x16 [--clocks 200,400] [--dram-gbps 12.8] [--synth]
"""

from __future__ import annotations

import argparse

from systolica.cli.exits import EXIT_OK
from systolica.cli.options import emit_json, json_to_stdout

__all__ = ["asic_main", "ASIC_PLOT_NAME"]

ASIC_PLOT_NAME = "dse_asic.png"  # the file --plots DIR writes with --asic


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def asic_main(args: argparse.Namespace, models: list[str], shapes: list[tuple[int, int]], clocks: list[float],
              dram: list[float]) -> int:
    from rich.console import Console
    from rich.table import Table

    from systolica.bench.dse import programs_for
    from systolica.bench.dse_asic import asic_front, asic_point, asic_tasks, synthesize_missing_asic

    to_stdout = json_to_stdout(args)
    con = Console(emoji=False, stderr=to_stdout)
    if not con.is_terminal:
        con = Console(width=160, emoji=False, stderr=to_stdout)
    tasks = asic_tasks(models, args.config or "default", shapes, prompt_len=args.prompt_len, clocks=clocks,
                       dram_gbps=dram)
    if args.synth:
        for r in synthesize_missing_asic(tasks, timeout=args.synth_timeout, say=con.print):
            con.print(f"ASIC estimate of {r['config']} in {r['seconds']:.0f} s -> {r['cache']}")
    points, progs = [], {}
    for t in tasks:  # points of one shape share its programs (clock and DRAM do not change them)
        key = (t["model"], str(sorted(t["config"].items())))
        if key not in progs:
            progs[key] = programs_for(t)
        points.append(asic_point(t, progs[key]))
    ok = [p for p in points if "error" not in p]
    front = asic_front(ok)
    n_meas = sum(p["asic"] == "measured" for p in ok)
    t = Table(title=f"ASIC design space (NanGate 45 nm): {len(ok)} points, {n_meas} with a measured ASIC estimate; "
                    f"{len(front)} on the Pareto front (tokens/s, area, energy per token) of measured points")
    for col in ("model", "config", "decode tok/s", "TTFT ms", "area mm2", "Fmax MHz", "clock MHz", "power mW",
                "uJ/token", "ASIC", "Pareto"):
        t.add_column(col, justify="left" if col in ("model", "config", "ASIC") else "right")
    for i, p in sorted(enumerate(ok), key=lambda x: (x[1]["asic"] != "measured", -x[1]["decode_tokens_per_s"])):
        c = p["clock"]
        clock = f"{c['mhz']:g} {'Fmax' if c['basis'].startswith('measured') else c['basis'].split(' ')[0]}"
        if c.get("met") is False:
            clock += " (above Fmax)"
        t.add_row(p["model"], p["config"], f"{p['decode_tokens_per_s']:.1f}", f"{p['ttft_s'] * 1e3:.2f}",
                  _num(p["area_mm2"], ".3f"), _num(p["fmax_mhz"], ".0f"), clock,
                  _num(None if p["power_w"] is None else p["power_w"] * 1e3, ".1f"),
                  _num(None if p["joules_per_token"] is None else p["joules_per_token"] * 1e6, ".2f"),
                  p["asic"], "*" if i in front else "", style=None if p["asic"] == "measured" else "dim")
    if not to_stdout:
        con.print(t)
    srcs = {p["dram_source"] for p in ok if p["dram_source"] != "swept"}
    for s in sorted(srcs):
        con.print(f"DRAM: {s}")
    con.print("area: cell area from Yosys synthesis + SRAM buffers from the stated macro model; Fmax and power: "
              "OpenSTA (typical corner, wire-load model); power at another clock: dynamic part scaled with the clock "
              "(assumed); SRAM macros and DRAM not in the power (docs/asic.md)")
    missing = sorted({p["config"] for p in ok if p["asic"] != "measured"})
    if missing:
        con.print(f"[yellow]no measured ASIC estimate of {', '.join(missing)}: speed only, never ranked "
                  "(systolica hw build --asic --config C, or dse --asic --synth, measures it)")
    for p in points:
        if "error" in p:
            con.print(f"[yellow]{p['config']}: {p['error']}[/yellow]")
    written = emit_json(args.json, {"points": ok, "pareto": sorted(front),
                                    "pareto_basis": "measured ASIC estimates only; tokens/s up, area and energy down",
                                    "failed": [p for p in points if "error" in p]})
    if written is not None:
        con.print(f"JSON: {written}")
    if args.plots:
        from pathlib import Path

        from systolica.bench.dse_plot import plot_asic

        Path(args.plots).mkdir(parents=True, exist_ok=True)
        con.print(f"plot: {plot_asic(ok, front, Path(args.plots) / ASIC_PLOT_NAME)}")
    return EXIT_OK
