"""OpenSTA for the ASIC estimate (:mod:`systolica.boards.asic`): the script, the netlist as Debian 12's OpenSTA
reads it, and the figures parsed from its report."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["ACTIVITY", "sta_script", "sta_netlist", "parse_sta"]

#: toggle rate (per clock) assumed at the primary inputs for OpenSTA's vectorless power, propagated inside
ACTIVITY = 0.1

#: the SRAM macro cell type that buffers become in the Yosys netlist (``$``: an internal, unchecked type)
SRAM_CELL = "$__systolica_sram"


def sta_script(liberty: str, netlist: str, top: str, clock: str, period_ns: float, resets: Sequence[str] = ()) -> str:
    """OpenSTA: the worst register-to-register path at ``period_ns`` and vectorless power at :data:`ACTIVITY`
    (the ``resets`` held: a reset toggling at the data rate would clear every register all the time)."""
    return "\n".join([
        f"read_liberty {liberty}", f"read_verilog {netlist}", f"link_design {top}",
        f"create_clock -name clk -period {period_ns:g} [get_ports {clock}]",
        f"set_input_delay 0 -clock clk [delete_from_list [all_inputs] [get_ports {clock}]]",
        "set_output_delay 0 -clock clk [all_outputs]",
        "puts \"=== reg2reg\"",
        "report_checks -path_delay max -from [all_registers -clock_pins] -to [all_registers -data_pins] -digits 3 "
        "-fields {nets fanout}",
        "puts \"=== any\"",
        "report_checks -path_delay max -digits 3 -fields {nets fanout}",
        f"set_power_activity -input -activity {ACTIVITY}",
        *(f"set_power_activity -input_ports [get_ports {r}] -activity 0" for r in resets),
        "puts \"=== power\"",
        # caught: a not-a-number stops the report (seen on whole presets: the activity propagated from the inputs
        # runs away in some instance); then every net at the same toggle rate, stated as such (power_global)
        "if {[catch {report_power -digits 5} msg]} {",
        "  puts \"Error: report_power: $msg\"",
        f"  set_power_activity -global -activity {ACTIVITY}",
        *(f"  set_power_activity -input_ports [get_ports {r}] -activity 0" for r in resets),
        "  puts \"=== power_global\"",
        "  if {[catch {report_power -digits 5} msg]} { puts \"Error: report_power -global: $msg\" }",
        "}", "exit", ""])


def sta_netlist(verilog: str) -> str:
    """The mapped netlist as the OpenSTA of Debian 12 (2019) reads it: without the SRAM macro instances (black
    boxes to it anyway; their parameter lists stop its parser) and without ``signed`` in declarations."""
    out, skip = [], False
    macro = "\\" + SRAM_CELL
    for line in verilog.splitlines():
        if skip:
            skip = line.strip() != ");"
            continue
        if line.lstrip().startswith(macro):
            skip = True
            continue
        out.append(re.sub(r"^(\s*(?:wire|input|output|inout|reg))\s+signed\b", r"\1", line))
    return "\n".join(out) + "\n"


def parse_sta(text: str, period_ns: float) -> dict[str, Any]:
    """Critical path (register to register, else any) and power from OpenSTA's report text."""
    out: dict[str, Any] = {}
    sections = dict(re.findall(r"=== (\w+)\n(.*?)(?==== |\Z)", text, re.S))
    for key in ("reg2reg", "any"):
        sec = sections.get(key, "")
        slack = re.search(r"^\s*(-?[\d.]+)\s+slack \((MET|VIOLATED)\)", sec, re.M)
        if slack:
            path_ns = period_ns - float(slack.group(1))
            start = re.search(r"^Startpoint: (\S+)", sec, re.M)
            end = re.search(r"^Endpoint: (\S+)", sec, re.M)
            arrival = re.search(r"^\s*([\d.]+)\s+data arrival time", sec, re.M)
            nets = [(int(n), name) for n, name in re.findall(r"^\s*(\d+)\s+(\S+) \(net\)", sec, re.M)]
            out["path"] = {"kind": "register to register" if key == "reg2reg" else "any (ports at 0 ns)",
                           "start": start.group(1) if start else None, "end": end.group(1) if end else None,
                           "arrival_ns": float(arrival.group(1)) if arrival else None,
                           "slack_ns": float(slack.group(1)), "period_ns": round(path_ns, 4),
                           "fmax_mhz": round(1000.0 / path_ns, 1) if path_ns > 0 else None}
            if nets:
                loads, net = max(nets)
                out["path"]["max_fanout"] = {"net": net, "loads": loads}
            break
    for key in ("power", "power_global"):
        total = re.search(r"^Total\s+([-\d.eE+]+)\s+([-\d.eE+]+)\s+([-\d.eE+]+)\s+([-\d.eE+]+)",
                          sections.get(key, ""), re.M)
        if total:
            break
    if total and key == "power_global":
        err = re.search(r"^Error: (.*)$", sections.get("power", ""), re.M)
        out["power_global"] = err.group(1) if err else "propagated activity not reported"
    if total:
        internal, switching, leakage, tot = (float(x) * 1e3 for x in total.groups())
        out["power_mw"] = {"internal": internal, "switching": switching, "leakage": leakage, "total": tot}
    return out



def _error() -> type[Exception]:
    from systolica.boards.asic import AsicError  # defined there (the flow's one error type); imported late: a cycle

    return AsicError


def _run_sta(exe: str, wd: Path, timeout: float) -> tuple[str, list[str], list[str]]:
    """OpenSTA's report, its errors up to the power report (reading, linking, timing) and those after it."""
    try:
        proc = subprocess.run([exe, "-no_splash", "-exit", "sta.tcl"], cwd=wd, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise _error()(f"OpenSTA did not finish in {timeout:.0f} s ({wd / 'sta.tcl'})") from None
    (wd / "sta.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or "=== power" not in proc.stdout:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-12:])
        raise _error()(f"OpenSTA failed (exit {proc.returncode}) in {wd}:\n{tail}")
    before, _, after = proc.stdout.partition("=== power")
    errors = [ln for ln in (before + "\n" + proc.stderr).splitlines() if ln.startswith("Error")]
    return proc.stdout, errors, [ln for ln in after.splitlines() if ln.startswith("Error")]


