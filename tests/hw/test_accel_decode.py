"""The decoder's instruction layout is the ISA table (no hand-written bit positions), checked bit by bit."""

from __future__ import annotations

import pytest
from amaranth.lib import data

from systolica.hw.decode import RTL_OPS, instr_layout
from systolica.isa import HEADER_FIELDS, OPS, WORD_BITS
from systolica.layout import EXTENTS


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_union_variant_matches_isa_layout(op):
    variant = instr_layout().members[op.name.lower()]
    assert variant.size == WORD_BITS
    offsets = {name: f.offset for name, f in variant}
    header = dict(iter(variant["h"].shape))
    pos = 0
    for hf in HEADER_FIELDS:  # the header fields first, in table order
        assert header[hf.name].offset == pos and header[hf.name].width == hf.bits
        pos += hf.bits
    for f, lo in op.layout():
        assert offsets[f.name] == lo, (op.name, f.name)
        shape = variant[f.name].shape
        assert (shape.width, shape.signed) == (f.bits, f.signed), (op.name, f.name)
    if op.used_bits < WORD_BITS:
        assert offsets["reserved"] == op.used_bits


def test_extents_name_real_fields_and_buffers():
    by_name = {op.name: op for op in OPS}
    for name, extents in EXTENTS.items():
        assert name in RTL_OPS
        fields = {f.name: f for f in by_name[name].fields}
        for addr, buf in ((e.field, e.buf) for e in extents):
            assert addr in fields and buf in ("spad", "acc", "vbuf"), (name, addr, buf)
            assert fields[addr].buf in (None, buf), (name, addr, fields[addr].buf, buf)


def test_view_decodes_an_encoded_word():
    from systolica.isa import encode, make

    ins = make("LOAD", buf=2, sram=77, dram=0x1230, rows=3, lines=5, stride=0x400, push_next=True)
    v = data.Const(instr_layout(), encode(ins))
    assert v.load.buf == 2 and v.load.sram == 77 and v.load.dram == 0x1230 and v.load.stride == 0x400
    assert v.load.h.push_next == 1 and v.load.h.pop_next == 0
