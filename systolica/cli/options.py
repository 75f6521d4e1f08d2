"""The options every ``systolica`` command spells the same way, and the argument types they share.

=========================  ==============================================================
option                     meaning, in every command that has it
=========================  ==============================================================
``-o/--output PATH``       the file or folder the command writes
``--json [FILE.json]``     the result as JSON: on stdout without FILE (instead of the
                           table), into FILE with one (also ``--json=FILE`` for any name)
``-n/--max-tokens N``      tokens to generate
``-j/--jobs N``            parallel processes or threads
``--plots DIR``            PNG plots written into the folder DIR
``--config PRESET|TOML``   the accelerator configuration
``--board NAME|TOML``      a board, and the accelerator configuration sized for it
``--page N``               KV-cache page (ATTN tile) in tokens; default: the compiler's choice
=========================  ==============================================================

Old spellings (``--out``, ``--tokens``, ``--workers``, ``--threads``, ``--plot``) still work
where they did, hidden from ``--help``, and print a one-line deprecation note.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["UsageError", "positive_int", "count", "real", "add_output", "add_json", "add_max_tokens", "add_jobs",
           "add_plots", "add_synth", "add_config", "add_board", "add_page", "add_deprecated", "normalize_json_args",
           "json_to_stdout", "emit_json", "JSON_STDOUT"]

JSON_STDOUT = "-"  # the value of args.json when --json was given without a FILE


class UsageError(ValueError):
    """Command-line input that cannot be used (printed as one red line, exit code 2)."""


# ------------------------------------------------------------------ argument types
def count(lo: int = 1, what: str = "", pow2: bool = False):
    """argparse type of a whole number >= ``lo`` (and a power of two with ``pow2``)."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if n < lo or n > 1 << 63:
            raise argparse.ArgumentTypeError(f"{n} must be at least {lo}{what}")
        if pow2 and n & (n - 1):
            raise argparse.ArgumentTypeError(f"{n} is not a power of two")
        return n

    return parse


positive_int = count(1)  # argparse type of a whole number >= 1


def real(lo: float, *, open_lo: bool = False, hi: float = math.inf, open_hi: bool = True):
    """argparse type of a finite number in the interval ``lo..hi`` (open or closed at each end)."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        below = v <= lo if open_lo else v < lo
        above = v >= hi if open_hi else v > hi
        if not math.isfinite(v) or below or above:
            rng = f"{'(' if open_lo else '['}{lo:g}, {hi:g}{')' if open_hi else ']'}"
            raise argparse.ArgumentTypeError(f"{text} must be a finite number in {rng}")
        return v

    return parse


# ------------------------------------------------------------------ deprecated spellings
class _Deprecated(argparse.Action):
    """An old spelling of an option: stores into the new option's ``dest`` and says what to type instead."""

    def __init__(self, option_strings, dest, new: str = "", **kw):
        self.new = new
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"note: {option_string} is deprecated, use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, True if self.nargs == 0 else values)


def add_deprecated(p, old: str, new: str, dest: str, *, flag: bool = False, **kw) -> None:
    """Accept ``old`` for ``new`` (same ``dest``), hidden from ``--help``; a one-line note on stderr when used."""
    if flag:
        kw["nargs"] = 0
    p.add_argument(old, dest=dest, action=_Deprecated, new=new, help=argparse.SUPPRESS, default=argparse.SUPPRESS,
                   **kw)


# ------------------------------------------------------------------ the shared options
def add_output(p, help: str, *, required: bool = False, old: bool = False, metavar: str = "PATH", **kw) -> None:
    """``-o/--output``; ``old``: also the deprecated ``--out`` (which then satisfies ``required`` too)."""
    if old and required:  # argparse counts a required option as given only if its own action ran
        p = p.add_mutually_exclusive_group(required=True)
        required = False
    p.add_argument("-o", "--output", required=required, metavar=metavar, help=help, **kw)
    if old:
        add_deprecated(p, "--out", "-o/--output", "output", **({"type": kw["type"]} if "type" in kw else {}))


def add_json(p, what: str = "the result") -> None:
    """``--json [FILE.json]``: stdout without FILE, the file with one."""
    p.add_argument("--json", nargs="?", const=JSON_STDOUT, default=None, metavar="FILE.json",
                   help=f"{what} as JSON: printed to stdout without FILE (instead of the table), written to FILE "
                        "with one (a FILE is a name ending in .json; --json=FILE for any name)")


def add_max_tokens(p, default: int, *, old: bool = False) -> None:
    """``-n/--max-tokens N``; ``old``: also the deprecated ``--tokens``."""
    p.add_argument("-n", "--max-tokens", type=positive_int, default=default, metavar="N",
                   help=f"tokens to generate (default {default})")
    if old:
        add_deprecated(p, "--tokens", "-n/--max-tokens", "max_tokens", type=positive_int)


def add_page(p) -> None:
    """``--page N``: the KV-cache page of the compile (``compile_model(page=...)``); default None, the compiler's
    choice (:func:`systolica.compiler.kv_page.choose_page`)."""
    p.add_argument("--page", type=count(1, pow2=True), default=None, metavar="N",
                   help="KV-cache page (attention tile) in tokens, a power of two (default: chosen by the compiler "
                        "from the accelerator: 64, less when two pages' KV tiles would take over half the "
                        "scratchpad or the context is shorter)")


def add_weights(p, default: str | None = "auto") -> None:
    """``--weights auto|int8|int4``: the matrices' format (``compile_model(weights=...)``)."""
    p.add_argument("--weights", choices=("auto", "int8", "int4"), default=default,
                   help="matrix weights: auto (default) keeps a GGUF checkpoint's Q4_0/Q4_1 matrices as their 4-bit "
                        "codes with group scales and makes the rest int8 (int8 everywhere on a config without the "
                        "4-bit datapath); int8 everywhere; or int4: also float matrices quantized to 4-bit groups "
                        "unless their error is too large (the LM head stays int8 unless stored as 4-bit codes)")


def add_jobs(p, what: str, default: int | None, *, old: Sequence[str] = ()) -> None:
    """``-j/--jobs N``; ``old``: deprecated spellings such as ``--workers``."""
    p.add_argument("-j", "--jobs", type=positive_int, default=default, metavar="N",
                   help=f"{what} (default {default if default is not None else 'one per core'})")
    for o in old:
        add_deprecated(p, o, "-j/--jobs", "jobs", type=positive_int)


def add_synth(p, without: str) -> None:
    """``--synth`` (run Yosys for configurations without a cached synthesis) and ``--synth-timeout SECONDS``;
    ``without``: what the output says for them when ``--synth`` is not given."""
    p.add_argument("--synth", action="store_true",
                   help="run Yosys for configurations without a cached synthesis (10 to 40 minutes each for the "
                        f"presets on 2 cores); without it {without}")
    p.add_argument("--synth-timeout", type=real(0.0, open_lo=True), default=3600.0, metavar="SECONDS",
                   help="seconds per Yosys run (default 3600)")


def add_plots(p, what: str) -> None:
    """``--plots DIR``."""
    p.add_argument("--plots", metavar="DIR", default=None, help=f"write {what} (PNG) into the folder DIR")


def add_config(p, default: str = "default", help: str | None = None) -> None:
    """``--config PRESET|FILE.toml`` on a parser or an argument group (every command reads it alike)."""
    from systolica.config import PRESETS

    p.add_argument("--config", metavar="PRESET|FILE.toml", default=None,
                   help=help or f"accelerator config: a preset ({', '.join(PRESETS)}) or a TOML file "
                                f"(default: {default})")


def add_board(p, help: str | None = None) -> None:
    """``--board NAME|FILE.toml``."""
    p.add_argument("--board", metavar="NAME|FILE.toml", default=None,
                   help=help or "a board (e.g. kv260, see 'systolica hw build --help') whose accelerator "
                                "configuration to use")


# ------------------------------------------------------------------ --json, one meaning
def normalize_json_args(argv: Sequence[str]) -> list[str]:
    """``--json X`` -> ``--json=X`` when X is a FILE (``-`` or a name ending in .json), else ``--json=-``.

    So a bare ``--json`` never swallows the positional argument after it (``run --json "a prompt"``).
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out += argv[i:]
            break
        if a == "--json":
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and (nxt == JSON_STDOUT or nxt.lower().endswith(".json")):
                out.append(f"--json={nxt}")
                i += 2
                continue
            out.append(f"--json={JSON_STDOUT}")
        else:
            out.append(a)
        i += 1
    return out


def json_to_stdout(args: argparse.Namespace) -> bool:
    """Whether ``--json`` without a FILE was given: stdout carries the JSON document and nothing else."""
    return getattr(args, "json", None) == JSON_STDOUT


def emit_json(dest: str | None, doc: Any, *, indent: int = 1) -> Path | None:
    """Write ``doc`` where ``--json`` says: stdout (``-``), a file (returned), or nowhere (None)."""
    if dest is None:
        return None
    text = json.dumps(doc, indent=indent, default=str)
    if dest == JSON_STDOUT:
        print(text)
        return None
    path = Path(dest)
    path.write_text(text + "\n")
    return path
