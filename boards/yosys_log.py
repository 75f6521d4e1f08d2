"""Which memories Yosys put into block RAM / UltraRAM and which it built from flip-flops.

``synth_xilinx`` and ``synth_ecp5`` first offer every memory to ``memory_libmap``, which
prints one line per memory; what it cannot map to a RAM primitive goes to ``memory_map``,
which builds it from flip-flops and multiplexers.  Checked with Yosys 0.70 (YoWASP) on a
small Amaranth design: a 64 x 1024 memory with one write and one read port, and a
16 x 64 memory with two write ports::

    2.34. Executing MEMORY_LIBMAP pass (mapping memories to cells).
    using FF mapping for memory two.bad_mem
    mapping memory two.good_mem via $__XILINX_BLOCKRAM_TDP_
    ...
    2.38. Executing MEMORY_MAP pass (converting memories to logic and flip-flops).
    Mapping memory \\bad_mem in module \\two:
      created 64 $dff cells and 0 static cells of width 16.

A memory in flip-flops costs ``depth x width`` FFs plus a read multiplexer tree: a buffer
(anything of a block RAM's size) mapped that way is a design bug, not a fit problem.  A
constant table (a ROM: the exp and rsqrt-seed tables) goes the same way, but ``memory_map``
reports ``write interface: 0 write mux blocks`` for it: its ``$dff`` cells hold their initial
values forever and ``opt`` folds them into constants, so it ends as logic (LUTs), not
flip-flops, and is reported as kind ``"rom"``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

__all__ = ["MemoryMapping", "parse_memory_mapping", "BUFFER_MIN_BITS", "buffers_in_ff"]

#: A memory of at least this many bits is a buffer: in flip-flops it is a design bug
#: (half a RAMB18; smaller memories such as queues are fine in LUT-RAM or FFs).
BUFFER_MIN_BITS = 8192

_LIBMAP_FF = re.compile(r"^using FF mapping for memory (\S+)\s*$")
_LIBMAP_VIA = re.compile(r"^mapping memory (\S+) via (\S+)\s*$")
_MAP_HEAD = re.compile(r"^Mapping memory \\?(\S+) in module \\?(\S+):\s*$")
_MAP_CREATED = re.compile(r"^\s*created (\d+) \$dff cells and (\d+) static cells of width (\d+)")
_MAP_WRITES = re.compile(r"^\s*write interface: (\d+) write mux blocks")


@dataclass(frozen=True)
class MemoryMapping:
    """One memory of the synthesized design and what Yosys built it from."""

    name: str  # hierarchical name below the top module, e.g. "gemm.acc_mem"
    kind: str  # "bram", "uram", "lutram", "ff", "rom" (a constant table in logic) or "other"
    cell: str  # the memory_libmap target ("$__XILINX_BLOCKRAM_TDP_") or "flip-flops"
    bits: int | None = None  # for FF-mapped memories: words x width as memory_map created them

    @property
    def is_buffer(self) -> bool:
        """A flip-flop memory big enough to be one of the accelerator's buffers."""
        return self.bits is None or self.bits >= BUFFER_MIN_BITS

    def to_dict(self) -> dict:
        return asdict(self)


def _kind(cell: str) -> str:
    c = cell.upper()
    if "URAM" in c:
        return "uram"
    if "BLOCKRAM" in c or "DP16KD" in c or "PDPW16KD" in c or "RAMB" in c:
        return "bram"
    if "LUTRAM" in c or "DPR16X4" in c or "DISTRIBUTED" in c:
        return "lutram"
    return "other"


def _strip_top(name: str, top: str | None) -> str:
    name = name.lstrip("\\")
    if top and name.startswith(top + "."):
        return name[len(top) + 1:]
    return name


def parse_memory_mapping(log: str, top: str | None = None) -> list[MemoryMapping]:
    """The memories of a Yosys synthesis log, in the order ``memory_libmap`` reported them.

    ``top`` (the top module) is stripped from the front of each name.  FF-mapped memories get
    their size from the ``memory_map`` lines that follow (``None`` if the log lacks them).
    """
    found: dict[str, MemoryMapping] = {}
    sizes: dict[str, int] = {}
    writes: dict[str, int] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := _LIBMAP_FF.match(line):
            name = _strip_top(m.group(1), top)
            found[name] = MemoryMapping(name, "ff", "flip-flops")
        elif m := _LIBMAP_VIA.match(line):
            name = _strip_top(m.group(1), top)
            found[name] = MemoryMapping(name, _kind(m.group(2)), m.group(2))
        elif m := _MAP_HEAD.match(line):
            current = m.group(1)
        elif current is not None and (m := _MAP_CREATED.match(line)):
            sizes[current] = (int(m.group(1)) + int(m.group(2))) * int(m.group(3))
        elif current is not None and (m := _MAP_WRITES.match(line)):
            writes[current] = int(m.group(1))
            current = None
    out = []
    for name, mm in found.items():
        if mm.kind == "ff" and name in sizes:
            rom = writes.get(name) == 0  # no write port: a constant table, folded into logic
            mm = MemoryMapping(name, "rom" if rom else "ff", "logic" if rom else mm.cell, sizes[name])
        out.append(mm)
    return out


def buffers_in_ff(memories: list[MemoryMapping] | list[dict]) -> list[str]:
    """Names of the buffer-sized memories that went to flip-flops."""
    out = []
    for m in memories:
        mm = m if isinstance(m, MemoryMapping) else MemoryMapping(**m)
        if mm.kind == "ff" and mm.is_buffer:
            out.append(mm.name)
    return out
