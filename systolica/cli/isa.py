"""``systolica info``, ``asm``, ``disasm`` and ``isa-doc``: a configuration, the ISA, programs as text.

Each is a class with ``add_arguments(parser)`` and ``main(args) -> int``, named in
:data:`systolica.cli.COMMANDS`.  Heavy imports (rich, the simulator) happen inside ``main``
so listing commands stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from systolica.cli.exits import EXIT_OK, CheckFailed
from systolica.cli.options import UsageError, add_config, add_output

__all__ = ["Info", "Asm", "Disasm", "IsaDoc", "check_config", "plain_console"]


def plain_console():
    from rich.console import Console

    return Console(highlight=False)


class Info:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        add_config(p)

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
        con = plain_console()
        con.print(t)
        con.print(isa)
        return 0


class Asm:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("input", type=Path, help="assembly text (one instruction per line)")
        add_output(p, "program binary (default: INPUT with .bin)", type=Path, metavar="FILE")
        add_config(p)

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
        add_config(p, help="also check that the program was compiled for this config (a preset or a TOML file)")
        p.add_argument("--no-pc", action="store_true", help="plain assembly text that 'systolica asm' reads back")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from systolica.asm import disasm
        from systolica.config import load_config
        from systolica.program import Program

        prog = Program.load(args.input, validate=False)  # illegal words print as .word lines
        if args.config:
            check_config(prog, load_config(args.config))
        if not args.no_pc:
            print(f"; {args.input}: format v1, config {prog.config_hash:08x}, {len(prog)} instructions")
        sys.stdout.write(disasm(prog, pc=not args.no_pc))
        return 0



def check_config(prog, cfg) -> None:
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



class IsaDoc:
    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        add_output(p, "file to write (default: stdout)", type=Path, metavar="FILE")
        p.add_argument("--check", action="store_true",
                       help="write nothing; exit 3 (a check failed) if OUTPUT differs from what would be written")

    @staticmethod
    def main(args: argparse.Namespace) -> int:
        from systolica import isadoc

        text = isadoc.render()
        if args.check:
            if args.output is None:
                raise UsageError("--check needs -o FILE")
            if not (args.output.is_file() and args.output.read_bytes() == text.encode()):
                raise CheckFailed(f"{args.output} is stale: run {isadoc.REGENERATE}")
            print(f"{args.output}: up to date")
            return EXIT_OK
        if args.output is None:
            sys.stdout.write(text)
        else:
            isadoc.write(args.output)
            print(f"wrote {args.output}")
        return 0
