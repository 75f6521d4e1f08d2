"""Assembler and disassembler: syntax, error messages with line numbers, and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from systolica.asm import AsmError, asm, assemble, disasm, format_instr, parse_line
from systolica.config import preset
from systolica.isa import OPS, WORD_BITS, Buf, decode, encode, make

FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")

SAMPLE = """
; a tiny program
LOAD buf=spad sram=0 dram=0x1000 rows=4 lines=2 stride=64 @push_next
GEMM dst=0 a=16 w=32 m=1 k=8 n=4 acc=1  @pop_prev @push_next  ; comment
store buf=ACC sram=0 dram=0x2000 rows=1 lines=4 stride=0 @pop_prev   # hash comment too
NOP engine=COMPUTE
ATTN offset=-5 t=3 nq=0x3 hd=0b10 page_log2=1_0
FINISH
"""


def test_sample_assembles_to_make():
    words = asm(SAMPLE)
    assert [decode(w) for w in words] == [
        make("LOAD", buf=Buf.SPAD, sram=0, dram=0x1000, rows=4, lines=2, stride=64, push_next=True),
        make("GEMM", dst=0, a=16, w=32, m=1, k=8, n=4, acc=1, pop_prev=True, push_next=True),
        make("STORE", buf=Buf.ACC, dram=0x2000, rows=1, lines=4, pop_prev=True),
        make("NOP", engine=1),
        make("ATTN", offset=-5, t=3, nq=3, hd=2, page_log2=10),
        make("FINISH"),
    ]


def test_disasm_round_trip_sample():
    words = asm(SAMPLE)
    text = disasm(words)
    assert asm(text) == words
    assert "buf=SPAD" in text and "dram=0x1000" in text and "@pop_prev @push_next" in text
    assert text.splitlines()[0].startswith("LOAD")


@st.composite
def words(draw):
    spec = draw(st.sampled_from(OPS))
    fields = {f.name: draw(st.integers(f.lo, f.hi)) for f in spec.fields}
    flags = {k: draw(st.booleans()) for k in FLAGS}
    return encode(make(spec.name, **fields, **flags))


@given(st.lists(st.one_of(words(), st.integers(0, (1 << WORD_BITS) - 1)), max_size=20))
def test_round_trip_any_words(ws):
    assert asm(disasm(ws)) == ws  # illegal words survive as .word lines


@pytest.mark.parametrize("line, match", [
    ("FROB x=1", "line 2: unknown op 'FROB'"),
    ("GEMM bogus=1", "line 2: GEMM has no field 'bogus'"),
    ("GEMM k=65536", r"line 2: GEMM.k=65536 out of range 0..65535 \(16-bit unsigned field\)"),
    ("ATTN offset=131072", r"line 2: ATTN.offset=131072 out of range -131072..131071 \(18-bit signed"),
    ("GEMM k=-1", "out of range"),
    ("GEMM k=ten", "GEMM.k='ten' is not an integer"),
    ("LOAD buf=DRAM", "one of SPAD, ACC, VBUF"),
    ("GEMM @wait", "unknown flag '@wait'"),
    ("GEMM k", "expected field=value"),
    ("GEMM k=1 k=2", "given twice"),
    ("GEMM @pop_prev @pop_prev", "given twice"),
    (".word", "one value"),
    (".word 0x1" + "0" * 40, "does not fit"),
    (".word xyz", "not an integer"),
])
def test_errors_name_line_and_problem(line, match):
    with pytest.raises(AsmError, match=match) as ei:
        asm("FINISH\n" + line)
    assert ei.value.line == 2


def test_symbolic_and_numeric_values():
    assert parse_line("LOAD buf=2") == parse_line("LOAD buf=vbuf")
    assert parse_line("NOP engine=store").fields["engine"] == 2
    assert parse_line("   ; only a comment") is None
    assert format_instr(make("NOP", engine=3)) == "NOP engine=3"  # not a member: printed as a number


def test_assemble_program():
    p = assemble("FINISH", preset("tiny"))
    assert p.config_hash == preset("tiny").hash32() and len(p) == 1


def test_disasm_pc_and_illegal():
    text = disasm([encode(make("FINISH")), 0x1E], pc=True)
    lines = text.splitlines()
    assert lines[0].split() == ["0:", "FINISH"]
    assert lines[1].startswith("     1: .word 0x") and "illegal opcode" in lines[1]
