"""docs/isa.md is generated from the ISA table; a stale copy fails here."""

from __future__ import annotations

from pathlib import Path

from systolica import isadoc
from systolica.faults import Fault
from systolica.isa import OPS

DOC = Path(__file__).resolve().parents[2] / "docs" / "isa.md"


def test_checked_in_doc_is_current():
    want = isadoc.render()
    have = DOC.read_text() if DOC.exists() else ""
    assert have == want, f"docs/isa.md is stale: regenerate it with `{isadoc.REGENERATE}` and commit it"


def test_doc_covers_every_op_field_and_fault():
    text = isadoc.render()
    for op in OPS:
        assert f"### {op.name}\n" in text
        for f, lo in op.layout():
            assert f"| `{f.name}` | [{lo + f.bits - 1}" in text
    for f in Fault:
        assert f"`{f.name}`" in text


def test_write(tmp_path):
    p = isadoc.write(tmp_path / "sub" / "isa.md")
    assert p.read_text() == isadoc.render()
