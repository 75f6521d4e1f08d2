"""``systolica sim PROGRAM``: a program binary on the golden simulator, and with ``--rtl`` on the Verilog too.

Exit code 1 when the program faults, 3 when ``--rtl`` finds RTL and golden simulator differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from systolica.cli.exits import EXIT_CHECK_FAILED, EXIT_FAULT, EXIT_OK
from systolica.cli.isa import check_config, plain_console
from systolica.cli.options import UsageError, add_config, add_json, emit_json, json_to_stdout, positive_int
from systolica.cli.progress import progress_enabled, steps

__all__ = ["Sim"]


class Sim:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("program", type=Path, help="program binary")
        add_config(p)
        p.add_argument("--dram", type=Path, default=None, help="raw bytes loaded at offset 0 of the DRAM window")
        p.add_argument("--dram-out", type=Path, default=None,
                       help="write the DRAM window back after the run (as many bytes as --dram had, else all)")
        p.add_argument("--max-instructions", type=positive_int, default=None, metavar="N",
                       help="stop with TIMEOUT after this many (at least 1)")
        add_json(p, "the result (status, pc, counters; with --rtl the RTL run too)")
        rtl = p.add_argument_group("RTL", "run the program on the generated Verilog under Verilator as well "
                                          "(the C++ harness: the first run of a config builds it, minutes)")
        rtl.add_argument("--rtl", action="store_true",
                         help="also run on the RTL and compare fault, pc and DRAM with the golden simulator")
        rtl.add_argument("--waves", type=Path, default=None, metavar="FILE",
                         help="with --rtl: write the RTL run's waveform here (FST; VCD where Verilator's FST "
                              "writer cannot be built: no liblz4 headers)")
        rtl.add_argument("--window", type=positive_int, default=None, metavar="BYTES",
                         help=f"with --rtl: the DRAM window of both runs (default {_RTL_WINDOW >> 20} MiB, or the "
                              "config's if smaller; the program sits at its top)")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        import numpy as np

        from systolica.config import load_config
        from systolica.program import Program, words_to_bytes
        from systolica.sim.golden import GoldenSim

        if (args.waves is not None or args.window is not None) and not args.rtl:
            raise UsageError(f"{'--waves' if args.waves is not None else '--window'} needs --rtl")
        cfg = load_config(args.config)
        prog = Program.load(args.program, validate=False)  # illegal words become faults with a pc
        check_config(prog, cfg)
        size = min(cfg.dram_bytes, args.window or _RTL_WINDOW) if args.rtl else cfg.dram_bytes
        size -= size % 64
        dram = np.zeros(size, np.uint8)  # calloc'd: untouched pages cost nothing
        n_in = 0
        if args.dram is not None:
            data = np.fromfile(args.dram, dtype=np.uint8)
            if data.size > dram.size:
                raise UsageError(f"--dram {args.dram}: {data.size} bytes do not fit the {dram.size}-byte window "
                                 f"of config {cfg.name!r}" + (" (--window)" if args.rtl else ""))
            dram[:data.size] = data
            n_in = data.size
        if args.rtl:  # the RTL fetches the program from the window: put it at the top, in both runs
            code = np.frombuffer(words_to_bytes(prog.words), np.uint8)
            prog_base = (size - code.size) & ~63
            if prog_base < n_in:
                raise UsageError(f"no room for the {code.size}-byte program above the {n_in} bytes of --dram in "
                                 f"the {size}-byte window: give a larger --window")
            dram[prog_base:prog_base + code.size] = code
            dram_in = dram.copy()
        res = GoldenSim(cfg, dram).run(prog, max_instructions=args.max_instructions, raise_on_fault=False)
        rtl = None
        if args.rtl:
            rtl = _run_rtl(cfg, dram_in, prog_base, len(prog.words), args.waves, progress=progress_enabled(args))
            rtl["same_dram"] = bool(np.array_equal(rtl.pop("dram"), dram))
            rtl["same_fault"] = (rtl["fault"], rtl["pc"]) == (res.status.name, res.pc if not res.ok else 0)
            rtl["agree"] = rtl["same_dram"] and rtl["same_fault"]
            del dram_in
        if args.dram_out is not None:
            dram[:n_in or dram.size].tofile(args.dram_out)
        if args.json is not None:
            out = res.to_dict()
            if rtl is not None:
                out["rtl"] = rtl
            emit_json(args.json, out, indent=2)
        if not json_to_stdout(args):
            _print_result(res, cfg)
            if rtl is not None:
                _print_rtl(rtl)
        if rtl is not None and not rtl["agree"]:
            return EXIT_CHECK_FAILED  # the check failed: RTL and golden differ (printed above)
        return EXIT_OK if res.ok else EXIT_FAULT


_RTL_WINDOW = 16 << 20  # default DRAM window of `sim --rtl` (the C++ harness copies it through files)


def _run_rtl(cfg, dram_in, prog_base: int, n_words: int, waves: Path | None, *, progress: bool = False) -> dict:
    """Run the program at ``prog_base`` of a copy of ``dram_in`` on the Verilator harness of ``cfg``."""
    import time

    from systolica.sim.fast_harness import FastHarnessError, FastRtl, default_build_root

    root = default_build_root()
    t0 = time.monotonic()
    try:
        with steps(progress, f"Verilator harness of config {cfg.name!r}" + (" with tracing" if waves else "")
                   + " (built once per config: minutes)", transient=True) as step:
            harness = FastRtl(cfg, root, waves=waves is not None)
            if waves is not None and waves.suffix.lower() != f".{harness.waves}":
                print(f"note: --waves {waves}: writing {harness.waves.upper()} to "
                      f"{waves.with_suffix('.' + harness.waves)}"
                      + (" (Verilator's FST writer needs the liblz4 headers)" if harness.waves == "vcd" else ""),
                      file=sys.stderr)
                waves = waves.with_suffix("." + harness.waves)
            step(f"running {n_words} instructions on the RTL")
            dram = dram_in.copy()
            r = harness.run(dram, window_base=0, window_size=dram.size, prog_base=prog_base, prog_len=n_words,
                            waves_file=waves)
    except FastHarnessError as e:
        raise UsageError(f"rtl: {e}") from None
    from systolica.faults import Fault

    fault = Fault.TIMEOUT if not r.done else Fault(r.code)
    return {"fault": fault.name, "pc": r.pc if fault != Fault.NONE else 0, "cycles": r.sim_cycles,
            "cycles_per_s": round(r.cycles_per_s), "counters": r.counters, "violations": r.violations,
            "waves": str(waves) if waves is not None else None, "wall_s": round(time.monotonic() - t0, 2),
            "dram": dram}


def _print_rtl(rtl: dict) -> None:
    from rich.console import Console

    c = Console()
    verdict = "[green]RTL ≡ golden[/]" if rtl["agree"] else "[red]RTL and golden differ[/]"
    c.print(f"RTL (Verilator): {rtl['fault']} at pc {rtl['pc']}, {rtl['cycles']:,} cycles "
            f"(RTL counters; {rtl['cycles_per_s']:,} cycles/s on this machine); {verdict}: fault "
            f"{'same' if rtl['same_fault'] else 'different'}, DRAM {'same' if rtl['same_dram'] else 'different'}")
    if rtl["waves"]:
        c.print(f"waveform: {rtl['waves']}")



def _print_result(res, cfg) -> None:
    from rich.table import Table

    c = res.counters
    t = Table(title=f"golden simulation, config {cfg.name!r}")
    t.add_column("counter")
    t.add_column("value", justify="right")
    for k, v in (("instructions", c.instructions), ("DMA bytes read", c.dma_read_bytes),
                 ("DMA bytes written", c.dma_write_bytes), ("instruction bytes fetched", c.fetch_bytes),
                 ("GEMM MACs", c.macs), ("ATTN MACs", c.attn_macs)):
        t.add_row(k, f"{v:,}")
    for e, n in sorted(c.per_engine.items()):
        t.add_row(f"  {e.lower()} engine", f"{n:,}")
    for op, n in sorted(c.per_op.items()):
        t.add_row(f"  {op}", f"{n:,}")
    con = plain_console()
    con.print(t)
    if res.ok:
        con.print(f"[green]finished[/green] at pc {res.pc}")
    else:
        from rich.text import Text

        con.print(Text(f"fault {res.status.name} (code {int(res.status)}) at pc {res.pc}: {res.message}",
                       style="bold red"), soft_wrap=True)


