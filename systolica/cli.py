"""The ``systolica`` command line.

Subcommands are listed once, in :data:`COMMANDS`: a name, the object that
implements it as ``"module"`` or ``"module:attribute"``, and a one-line help.
The object has two callables, ``add_arguments(parser)`` and ``main(args) -> int``.
Only the chosen subcommand's module is imported, so ``systolica --help`` stays
fast and the core never imports a part at module import.  To add a command,
add one line to :data:`COMMANDS`.

Errors raised by systolica itself (any exception class defined in a
``systolica`` module: ``ProgramError``, ``SimFault``, ``ConfigError``, ...) and
file errors print as one red line and exit with code 2; ``--debug`` (or
``SYSTOLICA_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["COMMANDS", "main", "EXIT_ERROR"]

EXIT_ERROR = 2

#: name -> (implementation "module[:attribute]", one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("systolica.cli_run:Run", "generate text with a compiled model on an accelerator (golden, rtl, pynq)"),
    "info": ("systolica.cli_core:Info", "show an accelerator configuration and the ISA summary"),
    "asm": ("systolica.cli_core:Asm", "assemble a text program into a program binary"),
    "disasm": ("systolica.cli_core:Disasm", "disassemble a program binary"),
    "sim": ("systolica.cli_core:Sim", "run a program binary on the golden simulator"),
    "isa-doc": ("systolica.cli_core:IsaDoc", "write the ISA reference (docs/isa.md) from the ISA table"),
    "compile": ("systolica.compiler.cli_compile:Compile", "compile a model (GGUF, safetensors) into an artifact"),
    "bench": ("systolica.bench.cli_bench:Bench", "compare systolica on boards (modelled) with CPU/GPU baselines"),
    "dse": ("systolica.bench.cli_dse:Dse", "sweep configurations x boards x models; Pareto front of speed, DSPs, BRAM, energy"),
    "hw": ("systolica.hw.generate", "hardware generation: 'hw generate' writes the top-level Verilog and register map"),
    "build": ("systolica.boards.cli_build:Build", "everything a board needs: Verilog, Vivado TCL, deploy folder, fit check"),
    "synth": ("systolica.boards.synth", "Yosys resource counts (LUT/FF/DSP/BRAM) of a hardware unit for xc7 / xcup"),
}


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


def _chosen(argv: Sequence[str]) -> str | None:
    for a in argv:
        if not a.startswith("-"):
            return a if a in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; only the subcommand named in ``argv`` gets its arguments (and its module imported)."""
    from systolica import __version__

    parser = argparse.ArgumentParser(
        prog="systolica", description="FPGA/ASIC accelerator co-design for transformer inference.",
        epilog="Run 'systolica COMMAND --help' for a command's options. Exit codes: 0 ok, 1 the simulated "
               "program faulted, 2 an error (bad input, bad file, refused program).")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks for errors")
    parser.add_argument("--version", action="version", version=f"systolica {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _chosen(argv)
    for name, (target, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == chosen:
            impl = _load(target)
            impl.add_arguments(p)
            p.set_defaults(_main=impl.main)
    return parser


def _is_project_error(e: BaseException) -> bool:
    return any(c.__module__.split(".")[0] == "systolica" for c in type(e).__mro__) or isinstance(e, OSError)


def _red(msg: str) -> None:
    try:
        from rich.console import Console
        from rich.text import Text

        Console(stderr=True, highlight=False, soft_wrap=True).print(Text(msg, style="bold red"))
    except ImportError:  # rich is a dependency; stay usable if it is broken
        print(msg, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("SYSTOLICA_DEBUG") == "1"
    argv = [a for a in argv if a != "--debug"]  # accepted anywhere on the line
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_ERROR
        return int(args._main(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - the one place errors become exit codes
        if debug or not _is_project_error(e):
            raise
        _red(f"error: {e}")
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
