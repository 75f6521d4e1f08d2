"""Memory planning: the DRAM image layout and the on-chip buffer allocation.

DRAM (byte offsets inside the accelerator's window, see ``systolica.csr``)::

    weights    every matrix's int8 weights once, in the weight-stream layout of GEMM_STREAM
               (``systolica.wstream``): one region aligned to a 4 KiB page, matrix after matrix
    mult:*     per matrix: its int32 requantization multipliers (one vector-buffer row)
    vectors    fx int32 norm gains (+ betas right after, as LAYERNORM wants), biases
    token_embd fx int32, one vector-buffer row per token id
    pos_embd   fx int32, one row per position (GPT-2)
    rope       fx int32, one row per position: padded head_dim/2 cos, then padded head_dim/2 sin
    kv         paged KV cache: layer -> physical page -> kv head -> KV tile (systolica.layout.kv_tile)
    logits     fx int32, one row (the last token of the run)
    programs   one region per program (the runtime copies the patched words there)

Every region starts on a multiple of :func:`dram_align` so that a DMA to any buffer is aligned
(``DMA_ALIGN``: addresses and strides are multiples of the target buffer's line bytes).

On chip, tensors of the IR get line ranges by first-fit over their live ranges
(:class:`LinearAllocator`); regions that the load engine fills while compute works on the
previous one (KV tiles, mult rows) come in pairs (double buffering).  Weights never enter the
scratchpad: GEMM_STREAM reads them from DRAM straight into the array.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["MemoryError_", "Region", "DramLayout", "dram_align", "LinearAllocator", "OnChipPlan", "BUFFERS"]

BUFFERS = ("spad", "acc", "vbuf")


class MemoryError_(ValueError):
    """A model or program that does not fit a buffer or the DRAM window; names the tensor and the sizes."""


def dram_align(cols: int) -> int:
    """Alignment of every DRAM region: a whole line of every buffer (``cols`` and ``4*cols`` bytes) and 64 B."""
    return math.lcm(cols, 4 * cols, 64)


@dataclass(frozen=True)
class Region:
    """A named byte range of the DRAM window."""

    name: str
    offset: int
    size: int
    kind: str  # "program", "weight", "vector", "table", "kv", "io"

    @property
    def end(self) -> int:
        return self.offset + self.size

    def to_json(self) -> dict:
        return {"name": self.name, "offset": self.offset, "size": self.size, "kind": self.kind}


@dataclass
class DramLayout:
    """Bump allocator of aligned DRAM regions, checked against the window size."""

    window: int
    align: int
    regions: dict[str, Region] = field(default_factory=dict)
    top: int = 0

    def add(self, name: str, size: int, kind: str, align: int | None = None) -> Region:
        """A region of ``size`` bytes after the last one, at a multiple of ``align`` (default the layout's)."""
        if name in self.regions:
            raise MemoryError_(f"DRAM region {name!r} allocated twice")
        a = math.lcm(self.align, align) if align else self.align
        off = -(-self.top // a) * a
        r = Region(name, off, int(size), kind)
        self.regions[name] = r
        self.top = off + int(size)
        return r

    def __getitem__(self, name: str) -> Region:
        return self.regions[name]

    def check_fits(self) -> None:
        """Raise :class:`MemoryError_` naming the biggest regions when the image exceeds the window."""
        if self.top <= self.window:
            return
        big = sorted(self.regions.values(), key=lambda r: -r.size)[:4]
        detail = ", ".join(f"{r.name} {r.size:,} B" for r in big)
        raise MemoryError_(f"the model needs {self.top:,} bytes of DRAM but the board's window (cfg.dram_bytes) is "
                           f"{self.window:,} bytes; largest regions: {detail}. Use a board with more DRAM, a smaller "
                           "max_seq, or a smaller model")

    def bytes_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.regions.values():
            out[r.kind] = out.get(r.kind, 0) + r.size
        return out


@dataclass
class _Block:
    name: str
    lo: int
    size: int
    first: int
    last: int


class LinearAllocator:
    """First-fit allocation of line ranges in one on-chip buffer, over live ranges ``[first, last]``.

    Blocks whose live ranges overlap never share lines; blocks live at disjoint times may.
    ``first=-inf .. last=+inf`` (the defaults) makes a block live for the whole program.
    """

    def __init__(self, buffer: str, capacity: int):
        self.buffer = buffer
        self.capacity = int(capacity)
        self.blocks: dict[str, _Block] = {}

    def alloc(self, name: str, size: int, first: int = -(1 << 60), last: int = 1 << 60) -> int:
        size = int(size)
        if size <= 0:
            raise MemoryError_(f"{self.buffer} block {name!r} has size {size}")
        if name in self.blocks:
            raise MemoryError_(f"{self.buffer} block {name!r} allocated twice")
        live = sorted((b for b in self.blocks.values() if not (b.last < first or last < b.first)),
                      key=lambda b: b.lo)
        lo = 0
        for b in live:  # first fit: the lowest gap between live blocks that is big enough
            if lo + size <= b.lo:
                break
            lo = max(lo, b.lo + b.size)
        if lo + size > self.capacity:
            used = ", ".join(f"{b.name}={b.size}" for b in live)
            raise MemoryError_(f"{self.buffer} overflow: {name!r} needs {size} lines at line {lo} but the {self.buffer} "
                               f"has {self.capacity} lines (live at the same time: {used or 'nothing'}); "
                               "use a smaller prefill chunk or a config with a bigger buffer")
        self.blocks[name] = _Block(name, lo, size, first, last)
        return lo

    def peak(self) -> int:
        return max((b.lo + b.size for b in self.blocks.values()), default=0)

    def addr(self, name: str) -> int:
        return self.blocks[name].lo


@dataclass
class OnChipPlan:
    """Line addresses of every on-chip block of one program, per buffer."""

    spad: LinearAllocator
    acc: LinearAllocator
    vbuf: LinearAllocator

    @classmethod
    def for_config(cls, cfg) -> OnChipPlan:
        return cls(LinearAllocator("spad", cfg.spad_lines), LinearAllocator("acc", cfg.acc_lines),
                   LinearAllocator("vbuf", cfg.vbuf_lines))

    def buf(self, name: str) -> LinearAllocator:
        return getattr(self, name)

    def usage(self) -> dict[str, tuple[int, int]]:
        """``{buffer: (peak lines used, capacity)}``."""
        return {b: (self.buf(b).peak(), self.buf(b).capacity) for b in BUFFERS}
