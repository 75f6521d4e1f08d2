"""The ``systolica`` command line.

Subcommands are listed once, in :data:`COMMANDS`: a name (``"run"``, or ``"hw build"`` for a command of a
group), the object that implements it as ``"module:attribute"``, and a one-line help.  The object has two
callables, ``add_arguments(parser)`` and ``main(args) -> int``.  Only the chosen subcommand's module is
imported, so ``systolica --help`` stays fast.  To add a command, add one line to :data:`COMMANDS` (and one
module to this package: the command modules live here, and they are the only modules of the core that
import the parts).

Options that several commands have are spelled alike (:mod:`systolica.cli.options`); exit codes come from
the kind of error, in one place (:mod:`systolica.cli.exits`): 0 ok, 1 accelerator fault, 2 bad input (one
red line; ``--debug`` or ``SYSTOLICA_DEBUG=1`` shows the traceback), 3 a check failed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from systolica.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_CODES_HELP,
    EXIT_FAULT,
    EXIT_OK,
    exit_code,
    is_project_error,
)

__all__ = ["COMMANDS", "GROUPS", "ALIASES", "main", "build_parser", "EXIT_OK", "EXIT_FAULT", "EXIT_BAD_INPUT",
           "EXIT_CHECK_FAILED", "EXIT_ERROR"]

EXIT_ERROR = EXIT_BAD_INPUT  # the name this module had for code 2
_is_project_error = is_project_error  # the name tests and callers used

#: name -> (implementation "module:attribute", one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("systolica.cli.run:Run", "generate text with a compiled model on an accelerator (golden, rtl, pynq)"),
    "compile": ("systolica.cli.compile:Compile", "compile a model (GGUF, safetensors) into an artifact"),
    "info": ("systolica.cli.isa:Info", "show an accelerator configuration and the ISA summary"),
    "asm": ("systolica.cli.isa:Asm", "assemble a text program into a program binary"),
    "disasm": ("systolica.cli.isa:Disasm", "disassemble a program binary"),
    "sim": ("systolica.cli.sim:Sim", "run a program binary on the golden simulator (and the RTL with --rtl)"),
    "isa-doc": ("systolica.cli.isa:IsaDoc", "write the ISA reference (docs/isa.md) from the ISA table"),
    "hw generate": ("systolica.cli.hw:Generate", "write the top-level Verilog (and RTLIL) and the register map"),
    "hw synth": ("systolica.cli.hw:Synth", "Yosys resource counts (LUT/FF/DSP/BRAM) of a hardware unit for xc7 / xcup"),
    "hw build": ("systolica.cli.build:Build", "everything a board needs: Verilog, Vivado TCL, deploy folder, fit check "
                                              "(or --asic: a NanGate 45 nm estimate)"),
    "serve": ("systolica.cli.serve:Serve", "an HTTP completions endpoint with continuous batching (golden backend)"),
    "bench": ("systolica.cli.bench:Bench", "compare systolica on boards (modelled) with CPU/GPU baselines"),
    "dse": ("systolica.cli.dse:Dse", "sweep configurations x boards x models; Pareto front of speed, DSPs, BRAM, "
                                     "energy"),
}

#: command groups: name -> one-line help
GROUPS: dict[str, str] = {"hw": "the hardware: generate Verilog, synthesize a unit, build for a board"}

#: old spellings of commands -> the command they are now (they work, with a one-line note)
ALIASES: dict[str, str] = {"build": "hw build", "synth": "hw synth"}


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


def _positionals(argv: Sequence[str]) -> list[str]:
    """The leading words of ``argv`` that name a command (``["hw", "build"]``)."""
    words: list[str] = []
    for a in argv:
        if a.startswith("-"):
            continue
        words.append(a)
        if a not in GROUPS:
            break
    return words


def _chosen(argv: Sequence[str]) -> str | None:
    name = " ".join(_positionals(argv)[:2])
    return name if name in COMMANDS else None


def _resolve_alias(argv: list[str]) -> list[str]:
    for i, a in enumerate(argv):
        if a.startswith("-"):
            continue
        if a in ALIASES:
            print(f"note: 'systolica {a}' is now 'systolica {ALIASES[a]}'", file=sys.stderr)
            return argv[:i] + ALIASES[a].split() + argv[i + 1:]
        return argv
    return argv


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; only the subcommand named in ``argv`` gets its arguments (and its module imported)."""
    from systolica import __version__

    parser = argparse.ArgumentParser(
        prog="systolica", description="FPGA/ASIC accelerator co-design for transformer inference.",
        epilog=f"Run 'systolica COMMAND --help' for a command's options. {EXIT_CODES_HELP}.")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks for errors")
    parser.add_argument("--version", action="version", version=f"systolica {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _chosen(argv)
    groups: dict[str, Any] = {}
    for name, (target, help_) in COMMANDS.items():
        group, _, leaf = name.rpartition(" ")
        if group:
            if group not in groups:
                gp = sub.add_parser(group, help=GROUPS[group], description=GROUPS[group],
                                    epilog=f"{EXIT_CODES_HELP}.")
                groups[group] = gp.add_subparsers(dest=f"{group}_command", metavar=f"{group.upper()}_COMMAND",
                                                  required=True)
            where = groups[group]
        else:
            where = sub
        p = where.add_parser(leaf, help=help_, description=help_, epilog=f"{EXIT_CODES_HELP}.")
        if name == chosen:
            impl = _load(target)
            impl.add_arguments(p)
            p.set_defaults(_main=impl.main)
    return parser


def _red(msg: str) -> None:
    try:
        from rich.console import Console
        from rich.text import Text

        Console(stderr=True, highlight=False, soft_wrap=True).print(Text(msg, style="bold red"))
    except ImportError:  # rich is a dependency; stay usable if it is broken
        print(msg, file=sys.stderr)


_PREFIX = {EXIT_FAULT: "accelerator fault", EXIT_BAD_INPUT: "error", EXIT_CHECK_FAILED: "check failed"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    from systolica.cli.options import normalize_json_args

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("SYSTOLICA_DEBUG") == "1"
    argv = normalize_json_args(_resolve_alias([a for a in argv if a != "--debug"]))  # --debug: anywhere
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_BAD_INPUT
        return int(args._main(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - the one place errors become exit codes
        code = exit_code(e)
        if debug or code is None:
            raise
        _red(f"{_PREFIX[code]}: {e}")
        return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
