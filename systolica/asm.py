"""Text assembler and disassembler, derived from the ISA table alone.

Syntax: one instruction per line, the op name, then ``field=value`` pairs, then
``@flag`` dependency-token flags, then an optional comment after ``;`` or ``#``::

    LOAD  buf=SPAD sram=0 dram=0x1000 rows=4 lines=2 stride=64  @push_next
    GEMM  dst=0 a=0 w=8 m=4 k=2 n=1 acc=0  @pop_prev @push_next   ; C = A @ W^T
    FINISH

Op and symbol names are case-insensitive.  Values are Python integer literals
(decimal, ``0x`` hex, ``0b`` binary, negative, ``_`` separators); fields that
select an enum (``buf``, ``engine``) also take its member names.  Fields left
out are 0.  ``.word 0x...`` emits a raw 128-bit word, which is how the
disassembler prints words that do not decode, so ``asm(disasm(words)) == words``
for any words.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from systolica.config import AccelConfig
from systolica.isa import (
    HEADER_FIELDS,
    OP_BY_NAME,
    WORD_BITS,
    Buf,
    Engine,
    IllegalInstruction,
    Instr,
    IsaError,
    OpSpec,
    decode,
    encode,
)
from systolica.program import Program

__all__ = ["AsmError", "asm", "assemble", "disasm", "disasm_word", "format_instr", "parse_line", "FLAGS"]

FLAGS: tuple[str, ...] = tuple(f.name for f in HEADER_FIELDS[1:])

#: Fields whose values are members of an enum; keyed by field name, so every op with such a field gets it.
SYMBOLS: Mapping[str, type[enum.IntEnum]] = {"buf": Buf, "engine": Engine}


class AsmError(IsaError):
    """Assembly text that does not assemble; the message starts with the line number."""

    def __init__(self, line: int, msg: str):
        self.line = line
        super().__init__(f"line {line}: {msg}")


def _parse_int(text: str) -> int:
    return int(text.replace("_", ""), 0) if text.lstrip("+-")[:2].lower() in ("0x", "0b", "0o") else int(text, 10)


def _value(spec: OpSpec, name: str, text: str, lineno: int) -> int:
    sym = SYMBOLS.get(name)
    if sym is not None and text.upper() in sym.__members__:
        return int(sym[text.upper()])
    try:
        return _parse_int(text)
    except ValueError:
        hint = f" or one of {', '.join(sym.__members__)}" if sym is not None else ""
        raise AsmError(lineno, f"{spec.name}.{name}={text!r} is not an integer{hint}") from None


def parse_line(text: str, lineno: int = 1) -> Instr | int | None:
    """Parse one line: an :class:`~systolica.isa.Instr`, a raw word (``.word``), or ``None`` for a blank line."""
    code = text.split(";", 1)[0].split("#", 1)[0].strip()
    if not code:
        return None
    tokens = code.split()
    head = tokens[0]
    if head.lower() == ".word":
        if len(tokens) != 2:
            raise AsmError(lineno, f".word takes one value, got {len(tokens) - 1}")
        try:
            w = _parse_int(tokens[1])
        except ValueError:
            raise AsmError(lineno, f".word value {tokens[1]!r} is not an integer") from None
        if not 0 <= w < 1 << WORD_BITS:
            raise AsmError(lineno, f".word value {tokens[1]} does not fit {WORD_BITS} bits")
        return w
    spec = OP_BY_NAME.get(head.upper())
    if spec is None:
        raise AsmError(lineno, f"unknown op {head!r}; ops: {', '.join(OP_BY_NAME)}")
    widths = {f.name: f for f in spec.fields}
    fields: dict[str, int] = {}
    flags: dict[str, bool] = {}
    for tok in tokens[1:]:
        if tok.startswith("@"):
            flag = tok[1:].lower()
            if flag not in FLAGS:
                raise AsmError(lineno, f"unknown flag {tok!r}; flags: {', '.join('@' + f for f in FLAGS)}")
            if flag in flags:
                raise AsmError(lineno, f"flag {tok} given twice")
            flags[flag] = True
            continue
        name, eq, val = tok.partition("=")
        name = name.lower()
        if not eq or not val:
            raise AsmError(lineno, f"expected field=value or @flag, got {tok!r}")
        f = widths.get(name)
        if f is None:
            known = ", ".join(widths) or "(none)"
            raise AsmError(lineno, f"{spec.name} has no field {name!r}; its fields: {known}")
        if name in fields:
            raise AsmError(lineno, f"{spec.name}.{name} given twice")
        v = _value(spec, name, val, lineno)
        if not f.lo <= v <= f.hi:
            raise AsmError(lineno, f"{spec.name}.{name}={val} out of range {f.lo}..{f.hi} "
                                   f"({f.bits}-bit {'signed' if f.signed else 'unsigned'} field)")
        fields[name] = v
    full = {f.name: fields.get(f.name, 0) for f in spec.fields}
    return Instr(spec.name, full, **flags)


def asm(text: str) -> list[int]:
    """Assemble text to 128-bit words; raises :class:`AsmError` naming the line."""
    words = []
    for lineno, line in enumerate(text.splitlines(), 1):
        item = parse_line(line, lineno)
        if item is None:
            continue
        if isinstance(item, int):
            words.append(item)
        else:
            try:
                words.append(encode(item))
            except IsaError as e:  # parse_line checks ranges, so this is only a safety net
                raise AsmError(lineno, str(e)) from None
    return words


def assemble(text: str, config: AccelConfig | int) -> Program:
    """Assemble text to a :class:`~systolica.program.Program` for ``config``."""
    return Program(asm(text), config)


def _fmt_value(spec: OpSpec, name: str, v: int) -> str:
    sym = SYMBOLS.get(name)
    if sym is not None and v in sym._value2member_map_:
        return sym(v).name
    f = next(f for f in spec.fields if f.name == name)
    return f"{v:#x}" if f.buf == "dram" or name == "stride" else str(v)


def format_instr(ins: Instr) -> str:
    """One line of assembly for an instruction (every field, then its flags)."""
    spec = ins.spec
    parts = [spec.name] + [f"{f.name}={_fmt_value(spec, f.name, ins.fields[f.name])}" for f in spec.fields]
    parts += ["@" + k for k in FLAGS if getattr(ins, k)]
    return " ".join(parts)


def disasm_word(word: int) -> str:
    """One line for a word; a word that does not decode becomes ``.word 0x...  ; illegal: why``."""
    try:
        return format_instr(decode(word))
    except IllegalInstruction as e:
        return f".word {word:#034x}  ; illegal: {e}"


def disasm(words: Iterable[int] | Program, *, pc: bool = False) -> str:
    """Disassemble words (or a program) to assembly text.

    ``pc=True`` prefixes each line with its index (``   12: GEMM ...``) for reading; such text
    does not assemble again.
    """
    lines = [disasm_word(w) for w in words]
    if pc:
        lines = [f"{i:>6}: {line}" for i, line in enumerate(lines)]
    return "\n".join(lines) + ("\n" if lines else "")
