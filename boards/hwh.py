"""Read the accelerator's register map out of a Vivado ``.hwh`` the way PYNQ does.

PYNQ (``pynq.pl_server.hwh_parser``) builds ``ip_dict[...]['registers']`` from the
``REGISTER`` elements of each ``MODULE``: the properties ``ADDRESS_OFFSET``,
``SIZE``, ``ACCESS``, ``DESCRIPTION`` and the ``FIELDS/FIELD`` children with
``BIT_OFFSET``, ``BIT_WIDTH`` and ``ACCESS``.  :func:`hwh_registers` reads the same
elements with the same paths, without needing ``pynq``, so a build can check the
``.hwh`` Vivado wrote against :mod:`systolica.csr` before it is copied to a board.
"""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

from systolica import csr
from systolica.boards.vivado_ip import ACCESS, IP_VLNV, register_fields

__all__ = ["HwhError", "hwh_registers", "expected_registers", "check_hwh"]


class HwhError(ValueError):
    """A .hwh without the accelerator, or with a register map that differs from the CSRs."""


def _int(s: str) -> int:
    return int(s, 16 if s.lower().startswith("0x") else 10)


def _prop(elem: ElementTree.Element, name: str) -> str:
    p = elem.find(f'./PROPERTY/[@NAME="{name}"]')
    if p is None:
        raise HwhError(f"{elem.tag} {elem.get('NAME')!r} has no {name} property")
    return p.get("VALUE")


def hwh_registers(hwh: str | Path, vlnv: str = IP_VLNV) -> dict[str, dict]:
    """Registers of the (single) module with ``vlnv`` in the ``.hwh`` text or file, as PYNQ's ip_dict has them."""
    text = Path(hwh).read_text() if isinstance(hwh, Path) else hwh
    root = ElementTree.fromstring(text)
    mods = [m for m in root.iter("MODULE") if m.get("VLNV") == vlnv]
    if len(mods) != 1:
        raise HwhError(f"expected one module {vlnv} in the .hwh, found {len(mods)}")
    regs = {}
    for r in mods[0].findall(".//REGISTERS/*[@NAME]"):
        regs[r.get("NAME")] = {
            "address_offset": _int(_prop(r, "ADDRESS_OFFSET")),
            "size": _int(_prop(r, "SIZE")),
            "access": _prop(r, "ACCESS"),
            "description": _prop(r, "DESCRIPTION"),
            "fields": {f.get("NAME"): {"bit_offset": _int(_prop(f, "BIT_OFFSET")),
                                       "bit_width": _int(_prop(f, "BIT_WIDTH")),
                                       "access": _prop(f, "ACCESS")}
                       for f in r.findall("./FIELDS/FIELD/[@NAME]")},
        }
    return regs


def expected_registers() -> dict[str, dict]:
    """The register map a correct .hwh gives, from :data:`systolica.csr.REGISTERS`."""
    out = {}
    for r in csr.REGISTERS:
        access = ACCESS[r.access][0]
        out[r.name] = {"address_offset": r.offset, "size": 32, "access": access, "description": r.doc,
                       "fields": {n: {"bit_offset": o, "bit_width": w, "access": access}
                                  for n, o, w in register_fields(r)}}
    return out


def check_hwh(hwh: str | Path) -> dict[str, dict]:
    """The .hwh's register map, after checking it equals the CSR map; :class:`HwhError` names each difference."""
    got, want = hwh_registers(hwh), expected_registers()
    problems = [f"missing {n}" for n in want if n not in got]
    problems += [f"unexpected {n}" for n in got if n not in want]
    for n in want.keys() & got.keys():
        for k in ("address_offset", "size", "access", "fields"):
            if got[n][k] != want[n][k]:
                problems.append(f"{n}.{k} is {got[n][k]!r}, the CSR map says {want[n][k]!r}")
    if problems:
        raise HwhError("the .hwh register map differs from systolica.csr: " + "; ".join(sorted(problems)))
    return got
