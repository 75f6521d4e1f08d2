"""The report of ``systolica hw build --asic`` (:mod:`systolica.cli.build`): per-unit area, critical path and
Fmax, power, every figure with where it comes from."""

from __future__ import annotations

from typing import Any

__all__ = ["render", "FANOUT_NOTE"]

#: a net on the critical path with more loads than this is named in the report (a buffer tree would split it)
FANOUT_NOTE = 64


def _um2(x: float) -> str:
    return f"{x:,.0f}"


def render(r: dict[str, Any], console) -> None:
    """Print an ASIC report (the dict :func:`~systolica.boards.asic.asic_estimate` returns)."""
    from rich.table import Table

    area, timing, power = r["area"], r["timing"], r["power"]
    total_um2 = area["logic_um2"] + area["sram_um2"]
    t = Table(title=f"ASIC estimate: {r['unit']} of config {r['config']!r} ({r['rows']}x{r['cols']}), "
                    f"{r['library']}, target {timing['target_period_ns']:g} ns")
    for col in ("unit", "what", "area (um^2)", "share", "std cells", "from"):
        t.add_column(col, justify="right" if col in ("area (um^2)", "share", "std cells") else "left")
    for key, u in r["units"].items():
        if not u["area_um2"]:
            continue
        src = "assumed SRAM-macro model" if key == "buffers" else "synthesis (stat -liberty)"
        t.add_row(key, u["what"], _um2(u["area_um2"]), f"{u['area_um2'] / total_um2:.1%}" if total_um2 else "-",
                  f"{u['cells']:,}" if key != "buffers" else "-", src)
    t.add_row("[bold]total", "", f"[bold]{_um2(total_um2)}", "100%", f"{r['cells']:,}", "")
    console.print(t)
    say = console.print
    say(f"area: [bold]{area['total_mm2']:.4f} mm^2[/] = standard cells {area['logic_um2'] * 1e-6:.4f} mm^2 "
        f"({area['logic_source']}) + SRAM {area['sram_um2'] * 1e-6:.4f} mm^2")
    blocks = (r.get("blocks") or {}).get("area_um2") or {}
    if len(blocks) > 1:
        leak = r["blocks"].get("leakage_mw") or {}
        say("largest blocks (std cells, Yosys stat -liberty; leakage from the liberty): " + ", ".join(
            f"{b} {_um2(a)} um^2" + (f" ({leak[b]:.2f} mW)" if b in leak else "") for b, a in list(blocks.items())[:8]))
    mem = r["memories"]
    if mem["sram"]:
        say(f"buffers: {area['sram_source']}")
        for m in mem["sram"]:
            say(f"  {m['name']}: {m['words']} x {m['width']} bits, {m['read_ports']} read port(s): "
                f"{_um2(m['area_um2'])} um^2")
    if mem["flip_flops"]:
        say("small memories in flip-flops (synthesized): " + ", ".join(
            f"{m['name']} ({m['words']} x {m['width']})" for m in mem["flip_flops"]))
    if mem["rom_logic"]:
        say("constant tables in logic (synthesized): " + ", ".join(mem["rom_logic"]))
    if timing.get("fmax_mhz"):
        say(f"critical path ({timing['kind']}): {timing['start']} -> {timing['end']}, [bold]{timing['period_ns']:.3f} ns"
            f"[/] incl. setup: [bold]Fmax {timing['fmax_mhz']:.0f} MHz[/] ({timing['source']})")
        fan = timing.get("max_fanout")
        if fan and fan["loads"] > FANOUT_NOTE:
            say(f"[yellow]on this path net {fan['net']} drives {fan['loads']:,} loads unbuffered[/] (OpenSTA; ABC "
                f"buffers no flip-flop output and this flow has no buffer-tree repair or placement, so the library's "
                f"wire-load model charges the whole net to one gate: this path is pessimistic)")
        if timing["slack_ns"] < 0:
            say(f"[bold yellow]the target period {timing['target_period_ns']:g} ns is NOT met "
                f"(slack {timing['slack_ns']:.3f} ns); the power below is at that unmet clock")
    else:
        say(f"[yellow]timing: {timing['source']}")
    if timing.get("abc_logic_delay_ps") is not None:
        say(f"logic delay: {timing['abc_logic_delay_ps']:.0f} ps ({timing['abc_source']})")
    if "total" in power:
        say(f"power: [bold]{power['total']:.3f} mW[/] at {power['clock_mhz']:g} MHz (internal {power['internal']:.3f}, "
            f"switching {power['switching']:.3f}, leakage {power['leakage']:.3f} mW; {power['source']})")
    else:
        say(f"[yellow]power: {power['source']}[/]; leakage {power['leakage_mw_liberty']:.3f} mW "
            f"({power['leakage_source']})")
    if r["foreign_cells"]:
        say(f"[bold yellow]warning:[/] cells not from the liberty: {r['foreign_cells']}")
    steps = ", ".join(f"{k.split(':')[0]} {v:.0f} s" for k, v in r["seconds"].items())
    say(f"wall time: {steps}")
    y = r.get("yosys")
    if y:
        top = r["top"]
        jobs = sorted(y["jobs"], key=lambda j: -(j["seconds"] or 0))
        say(f"Yosys: {len(jobs)} job(s), {y['processes']} at a time" + (", multipliers Booth-encoded (synth -booth)"
                                                                           if y.get("booth") else "") + ": " +
            "; ".join(f"{_label(j['modules'], top)} {j['seconds']:.0f} s" for j in jobs[:6]) +
            (f"; {len(jobs) - 6} more" if len(jobs) > 6 else ""))


def _label(modules: list[str], top: str) -> str:
    short = [m[len(top):].lstrip(".") or top if m.startswith(top) else m for m in modules]
    return short[0] + (f" +{len(short) - 1}" if len(short) > 1 else "")
