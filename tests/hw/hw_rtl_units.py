"""One Verilog top holding every unit the RTL tests drive, so that they share one Verilator build.

Each Verilator build compiles the same runtime (verilated.cpp, the VPI glue, cocotb's
main) before the design itself; on 2 shared cores that fixed part is most of a small
unit's build.  ``RtlUnits`` exposes each sub-unit's members as ``<unit>_<member>``
(Verilog ports ``<unit>_<member>__valid`` / ``__ready`` / ``__payload``).
"""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring

from systolica.config import AccelConfig, preset
from systolica.hw.activation import ActivationUnit
from systolica.hw.attention_unit import AttentionUnit
from systolica.hw.gemm_core import GemmCore
from systolica.hw.norm_unit import NormUnit
from systolica.hw.softmax_unit import SoftmaxUnit
from systolica.hw.systolic_array import SystolicArray
from systolica.hw.vector_unit import VectorUnit

#: array shapes under test: square 4x4 (32-bit DMA, one weight column per beat), the default 8x8
#: (64-bit DMA) and a non-square 4x8 (64-bit DMA: two weight columns per beat)
SHAPES: dict[str, AccelConfig] = {
    "4x4": preset("tiny"),
    "8x8": preset("default"),
    "4x8": AccelConfig(name="r4c8", rows=4, cols=8, dma_bits=64),
}
UNIT_CFG = preset("tiny")  # the line units (vector, activation, attention, norm, softmax): 4 lanes
ATTN_PARAMS = {"max_tokens": 32, "max_lines": 8}


def unit_factories() -> dict:
    units = {f"arr{k}": (lambda c=c: SystolicArray(c)) for k, c in SHAPES.items()}
    units["vec"] = lambda: VectorUnit(UNIT_CFG)
    units["act"] = lambda: ActivationUnit(UNIT_CFG)
    units["attn"] = lambda: AttentionUnit(UNIT_CFG, **ATTN_PARAMS)
    units["norm"] = lambda: NormUnit(UNIT_CFG)
    units["gemm"] = lambda: GemmCore(UNIT_CFG)
    units["smax"] = lambda: SoftmaxUnit(UNIT_CFG)
    return units


class UnitsTop(wiring.Component):
    """One Verilog top for several units: each unit's members become ports ``<unit>_<member>``."""

    def __init__(self, units: dict):
        self.units = units
        super().__init__({f"{u}_{k}": v for u, c in units.items() for k, v in c.signature.members.items()})

    def elaborate(self, platform):
        m = Module()
        for uname, u in self.units.items():
            m.submodules[uname] = u
            for mname, member in u.signature.members.items():
                outer, inner = getattr(self, f"{uname}_{mname}"), getattr(u, mname)
                if member.is_signature:
                    wiring.connect(m, wiring.flipped(outer), inner)
                elif member.flow == wiring.Out:
                    m.d.comb += outer.eq(inner)
                else:
                    m.d.comb += inner.eq(outer)
        return m


class RtlUnits(UnitsTop):
    def __init__(self):
        super().__init__({name: make() for name, make in unit_factories().items()})


def build_key() -> dict:
    return {"shapes": {k: c.to_dict() for k, c in SHAPES.items()}, "unit_cfg": UNIT_CFG.to_dict(),
            "attn": ATTN_PARAMS}
