"""The core subcommands of ``systolica``: info, asm, disasm, sim, isa-doc.

Each is a class with ``add_arguments(parser)`` and ``main(args) -> int``, named
in :data:`systolica.cli.COMMANDS`.  Heavy imports (rich, the simulator) happen
inside ``main`` so listing commands stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["Info", "Asm", "Disasm", "Sim", "IsaDoc", "UsageError"]


class UsageError(ValueError):
    """Command-line input that cannot be used (printed as one red line by the CLI)."""


def _positive_int(text: str) -> int:
    """argparse type of a whole number >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} must be at least 1")
    return n


def add_config_arg(p) -> None:
    """``--config PRESET|FILE.toml`` on a parser or an argument group (every command reads it alike)."""
    from systolica.config import PRESETS

    p.add_argument("--config", metavar="PRESET|FILE.toml", default=None,
                   help=f"accelerator config: a preset ({', '.join(PRESETS)}) or a TOML file (default: default)")


def _console():
    from rich.console import Console

    return Console(highlight=False)


class Info:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        add_config_arg(p)

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from rich.table import Table

        from systolica.config import load_config
        from systolica.isa import OPS

        cfg = load_config(args.config)
        t = Table(title=f"accelerator config {cfg.name!r}")
        t.add_column("field")
        t.add_column("value", justify="right")
        for k, v in cfg.to_dict().items():
            t.add_row(k, str(v))
        t.add_row("spad lines (int8 x cols)", str(cfg.spad_lines))
        t.add_row("acc lines (int32 x cols)", str(cfg.acc_lines))
        t.add_row("vbuf lines (int32 x cols)", str(cfg.vbuf_lines))
        t.add_row("config hash (hash32)", f"{cfg.hash32():08x}")
        t.add_row("peak MAC / cycle", str(cfg.peak_macs_per_cycle))
        t.add_row("peak DRAM bytes / cycle", str(cfg.peak_dram_bytes_per_cycle))
        t.add_row("peak GMAC/s at clock", f"{cfg.peak_macs_per_cycle * cfg.clock_mhz / 1e3:.2f}")
        t.add_row("peak DRAM GB/s at clock", f"{cfg.peak_dram_bytes_per_cycle * cfg.clock_mhz / 1e3:.2f}")
        isa = Table(title="ISA (128-bit words)")
        for col in ("op", "code", "engine", "bits used"):
            isa.add_column(col, justify="right" if col in ("code", "bits used") else "left")
        for op in sorted(OPS, key=lambda o: o.code):
            isa.add_row(op.name, f"{op.code:#04x}", op.engine.name.lower() if op.engine is not None else "(field)",
                        str(op.used_bits))
        con = _console()
        con.print(t)
        con.print(isa)
        return 0


class Asm:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("input", type=Path, help="assembly text (one instruction per line)")
        p.add_argument("-o", "--output", type=Path, default=None, help="program binary (default: INPUT with .bin)")
        add_config_arg(p)

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from systolica.asm import AsmError, assemble
        from systolica.config import load_config

        cfg = load_config(args.config)
        try:
            text = args.input.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(f"{args.input}: not UTF-8 text (byte {e.start}: {e.reason}); asm reads assembly "
                             "text (a program binary goes to 'systolica disasm')") from None
        try:
            prog = assemble(text, cfg)
        except AsmError as e:
            raise AsmError(e.line, f"{args.input}: {str(e).split(': ', 1)[1]}") from None
        out = args.output or args.input.with_suffix(".bin")
        prog.save(out)
        print(f"{out}: {len(prog)} instructions for config {cfg.name!r} ({prog.config_hash:08x})")
        return 0


class Disasm:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("input", type=Path, help="program binary")
        p.add_argument("--config", default=None, metavar="PRESET|FILE.toml",
                       help="also check that the program was compiled for this config")
        p.add_argument("--no-pc", action="store_true", help="plain assembly text that 'systolica asm' reads back")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from systolica.asm import disasm
        from systolica.config import load_config
        from systolica.program import Program

        prog = Program.load(args.input, validate=False)  # illegal words print as .word lines
        if args.config:
            _check_config(prog, load_config(args.config))
        if not args.no_pc:
            print(f"; {args.input}: format v1, config {prog.config_hash:08x}, {len(prog)} instructions")
        sys.stdout.write(disasm(prog, pc=not args.no_pc))
        return 0


class Sim:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("program", type=Path, help="program binary")
        add_config_arg(p)
        p.add_argument("--dram", type=Path, default=None, help="raw bytes loaded at offset 0 of the DRAM window")
        p.add_argument("--dram-out", type=Path, default=None,
                       help="write the DRAM window back after the run (as many bytes as --dram had, else all)")
        p.add_argument("--max-instructions", type=_positive_int, default=None, metavar="N",
                       help="stop with TIMEOUT after this many (at least 1)")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        rtl = p.add_argument_group("RTL", "run the program on the generated Verilog under Verilator as well "
                                          "(the C++ harness: the first run of a config builds it, minutes)")
        rtl.add_argument("--rtl", action="store_true",
                         help="also run on the RTL and compare fault, pc and DRAM with the golden simulator")
        rtl.add_argument("--waves", type=Path, default=None, metavar="FILE",
                         help="with --rtl: write the RTL run's waveform here (FST; VCD where Verilator's FST "
                              "writer cannot be built: no liblz4 headers)")
        rtl.add_argument("--window", type=_positive_int, default=None, metavar="BYTES",
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
        _check_config(prog, cfg)
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
            rtl = _run_rtl(cfg, dram_in, prog_base, len(prog.words), args.waves)
            rtl["same_dram"] = bool(np.array_equal(rtl.pop("dram"), dram))
            rtl["same_fault"] = (rtl["fault"], rtl["pc"]) == (res.status.name, res.pc if not res.ok else 0)
            rtl["agree"] = rtl["same_dram"] and rtl["same_fault"]
            del dram_in
        if args.dram_out is not None:
            dram[:n_in or dram.size].tofile(args.dram_out)
        if args.json:
            out = res.to_dict()
            if rtl is not None:
                out["rtl"] = rtl
            print(json.dumps(out, indent=2))
        else:
            _print_result(res, cfg)
            if rtl is not None:
                _print_rtl(rtl)
        if rtl is not None and not rtl["agree"]:
            return 3  # the check failed: RTL and golden differ
        return 0 if res.ok else 1


_RTL_WINDOW = 16 << 20  # default DRAM window of `sim --rtl` (the C++ harness copies it through files)


def _run_rtl(cfg, dram_in, prog_base: int, n_words: int, waves: Path | None) -> dict:
    """Run the program at ``prog_base`` of a copy of ``dram_in`` on the Verilator harness of ``cfg``."""
    import time

    from rich.console import Console

    from systolica.sim.fast_harness import FastHarnessError, FastRtl, default_build_root

    root = default_build_root()
    t0 = time.monotonic()
    try:
        with Console(stderr=True).status(f"Verilator harness of config {cfg.name!r}"
                                         + (" with tracing" if waves else "") + " (built once per config)"):
            harness = FastRtl(cfg, root, waves=waves is not None)
        if waves is not None and waves.suffix.lower() != f".{harness.waves}":
            print(f"note: --waves {waves}: writing {harness.waves.upper()} to {waves.with_suffix('.' + harness.waves)}"
                  + (" (Verilator's FST writer needs the liblz4 headers)" if harness.waves == "vcd" else ""),
                  file=sys.stderr)
            waves = waves.with_suffix("." + harness.waves)
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


def _check_config(prog, cfg) -> None:
    """Refuse a program of another config; name the preset it was built for when there is one."""
    from systolica.config import PRESETS
    from systolica.program import ConfigMismatch

    try:
        prog.check_config(cfg)
    except ConfigMismatch as e:
        match = [n for n, p in PRESETS.items() if p.hash32() == prog.config_hash]
        if match:
            raise UsageError(f"{e} (it was built for preset {match[0]!r}: run with --config {match[0]})") from None
        raise


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
    con = _console()
    con.print(t)
    if res.ok:
        con.print(f"[green]finished[/green] at pc {res.pc}")
    else:
        from rich.text import Text

        con.print(Text(f"fault {res.status.name} (code {int(res.status)}) at pc {res.pc}: {res.message}",
                       style="bold red"), soft_wrap=True)


class IsaDoc:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("-o", "--output", type=Path, default=None, help="file to write (default: stdout)")
        p.add_argument("--check", action="store_true", help="exit 1 if OUTPUT differs from what would be written")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from systolica import isadoc

        text = isadoc.render()
        if args.check:
            if args.output is None:
                raise UsageError("--check needs -o FILE")
            same = args.output.is_file() and args.output.read_bytes() == text.encode()
            print(f"{args.output}: {'up to date' if same else 'stale: run ' + isadoc.REGENERATE}")
            return 0 if same else 1
        if args.output is None:
            sys.stdout.write(text)
        else:
            isadoc.write(args.output)
            print(f"wrote {args.output}")
        return 0
