"""The ISA table's encoder and decoder: round trips, field extremes, illegal opcodes and reserved bits."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from systolica import isa
from systolica.isa import OP_BY_CODE, OPS, WORD_BITS, IllegalInstruction, IsaError, decode, encode, make

FLAG_NAMES = ("pop_prev", "pop_next", "push_prev", "push_next")


@st.composite
def instrs(draw, op=None):
    spec = op or draw(st.sampled_from(OPS))
    fields = {f.name: draw(st.one_of(st.sampled_from([f.lo, f.hi, 0]), st.integers(f.lo, f.hi)))
              for f in spec.fields}
    flags = {k: draw(st.booleans()) for k in FLAG_NAMES}
    return make(spec.name, **flags, **fields)


@given(instrs())
def test_encode_decode_round_trip(ins):
    w = encode(ins)
    assert 0 <= w < 1 << WORD_BITS
    assert w >> ins.spec.used_bits == 0
    back = decode(w)
    assert back == ins
    assert encode(back) == w


@pytest.mark.parametrize("spec", OPS, ids=lambda s: s.name)
def test_field_extremes_every_op(spec):
    for pick in ("lo", "hi"):
        ins = make(spec.name, pop_prev=True, push_next=True, **{f.name: getattr(f, pick) for f in spec.fields})
        assert decode(encode(ins)) == ins
    for f in spec.fields:
        for bad in (f.lo - 1, f.hi + 1):
            with pytest.raises(IsaError, match=rf"{spec.name}\.{f.name}={bad} out of range"):
                encode(make(spec.name, **{f.name: bad}))


def test_fields_do_not_overlap():
    for spec in OPS:
        mask = (1 << isa.HEADER_BITS) - 1
        for f, lo in spec.layout():
            fm = ((1 << f.bits) - 1) << lo
            assert mask & fm == 0, (spec.name, f.name)
            mask |= fm
        assert mask == (1 << spec.used_bits) - 1


ILLEGAL_CODES = sorted(set(range(1 << isa.OPCODE_BITS)) - set(OP_BY_CODE))


def test_some_opcodes_are_unused():
    assert 0 in ILLEGAL_CODES and len(ILLEGAL_CODES) == 32 - len(OPS)


@given(st.sampled_from(ILLEGAL_CODES), st.integers(0, (1 << 123) - 1))
def test_illegal_opcodes_raise(code, rest):
    word = code | (rest << 5)
    with pytest.raises(IllegalInstruction, match="illegal opcode") as ei:
        decode(word)
    assert ei.value.reason == "opcode"


@given(instrs(), st.data())
def test_reserved_bits_raise(ins, data):
    used = ins.spec.used_bits
    assume(used < WORD_BITS)  # GEMM_STREAM's fields fill the whole word
    bit = data.draw(st.integers(used, WORD_BITS - 1))
    with pytest.raises(IllegalInstruction, match="bits set above") as ei:
        decode(encode(ins) | (1 << bit))
    assert ei.value.reason == "reserved"


def test_unknown_op_and_field():
    with pytest.raises(IsaError, match="unknown op 'FROB'"):
        make("FROB")
    with pytest.raises(IsaError, match="GEMM has no field"):
        make("GEMM", bogus=1)


def test_word_out_of_range():
    with pytest.raises(IllegalInstruction):
        decode(1 << WORD_BITS)
    with pytest.raises(IllegalInstruction):
        decode(-1)
