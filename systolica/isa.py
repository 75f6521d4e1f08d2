"""The systolica instruction set, defined once, as data.

Every instruction is one 128-bit little-endian word.  Bits [4:0] hold the
opcode, bits [8:5] the four dependency-token flags, and the operation's fields
follow from bit 9 upward in the order of :data:`OPS`.  The Amaranth decoder, the
compiler's encoder, the golden simulator, the assembler/disassembler and
``docs/isa.md`` are all generated from this table.

Engines and dependency tokens (as in VTA): LOAD runs on the load engine, STORE on
the store engine, everything else on the compute engine (NOP names its engine).
Four token queues link them: load->compute, compute->load, compute->store,
store->compute.  Before an instruction executes its engine pops one token from
each queue its ``pop_prev`` / ``pop_next`` flags name; after it finishes it
pushes one token into each queue its ``push_prev`` / ``push_next`` flags name.
The load engine has no *prev* and the store engine no *next*: those flags are
illegal there.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "WORD_BITS", "WORD_BYTES", "OPCODE_BITS", "Engine", "Buf", "Field", "OpSpec", "OPS",
    "OP_BY_NAME", "OP_BY_CODE", "HEADER_FIELDS", "Instr", "encode", "decode", "IsaError",
    "IllegalInstruction", "WFmt",
]

WORD_BITS = 128
WORD_BYTES = WORD_BITS // 8
OPCODE_BITS = 5


class IsaError(ValueError):
    """An instruction that cannot be encoded (a field out of range, an unknown op)."""


class IllegalInstruction(IsaError):
    """A word that does not decode to a legal instruction."""

    def __init__(self, msg: str, *, word: int | None = None, reason: str = "opcode"):
        super().__init__(msg)
        self.word = word
        self.reason = reason


class Engine(enum.IntEnum):
    LOAD = 0
    COMPUTE = 1
    STORE = 2


class Buf(enum.IntEnum):
    """On-chip buffer selector of LOAD and STORE (2-bit field; 3 is illegal)."""

    SPAD = 0  # int8, lines of `cols` bytes
    ACC = 1  # int32, lines of `cols` words
    VBUF = 2  # int32, lines of `cols` words


class WFmt(enum.IntEnum):
    """GEMM_STREAM's weight format (2-bit ``wfmt`` field; 3 is illegal).  Layouts: :mod:`systolica.wstream`
    (int8) and :mod:`systolica.wstream4` (4-bit codes with group scales); arithmetic:
    :func:`systolica.numerics_int4.stream_acc`."""

    INT8 = 0  # one int8 weight a byte
    Q4_0 = 1  # 4-bit codes q, w = D * (q - 8) per group of 32 along K (GGUF Q4_0)
    Q4_1 = 2  # 4-bit codes q, w = D * q + Mn per group of 32 along K (GGUF Q4_1)


@dataclass(frozen=True)
class Field:
    name: str
    bits: int
    signed: bool = False
    buf: str | None = None  # which buffer an address field points into ("spad", "acc", "vbuf", "dram")
    why: str = ""

    @property
    def lo(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1


@dataclass(frozen=True)
class OpSpec:
    name: str
    code: int
    engine: Engine | None  # None: the instruction names its engine (NOP)
    fields: tuple[Field, ...]
    doc: str

    def layout(self) -> list[tuple[Field, int]]:
        """(field, low bit) pairs of the operation's own fields."""
        out, pos = [], HEADER_BITS
        for f in self.fields:
            out.append((f, pos))
            pos += f.bits
        return out

    @property
    def used_bits(self) -> int:
        return HEADER_BITS + sum(f.bits for f in self.fields)


# ------------------------------------------------------------------ fields
_A16 = "16 bits of line address: 65536 lines covers the largest buffer a board preset builds"
_ROWS = "16 bits: up to 65535 rows (tokens x heads in prefill) per instruction"
_LINES = "16 bits of lines per row: rows up to 65535 x cols elements (a whole vocabulary row)"


def _addr(name: str, buf: str) -> Field:
    return Field(name, 16, buf=buf, why=f"{buf} line address; {_A16}")


HEADER_FIELDS: tuple[Field, ...] = (
    Field("opcode", OPCODE_BITS, why="5 bits: 32 opcodes, room beyond the 19 used"),
    Field("pop_prev", 1, why="wait for a token from the previous engine"),
    Field("pop_next", 1, why="wait for a token from the next engine"),
    Field("push_prev", 1, why="signal the previous engine when done"),
    Field("push_next", 1, why="signal the next engine when done"),
)
HEADER_BITS = sum(f.bits for f in HEADER_FIELDS)

_DMA_FIELDS = (
    Field("buf", 2, why="2 bits: SPAD=0, ACC=1, VBUF=2; 3 is illegal"),
    Field("sram", 16, why=f"line address in the selected buffer; {_A16}"),
    Field("dram", 32, buf="dram", why="byte offset in the DRAM window: AXI addresses are 32 bits; must be aligned to one line of the buffer"),
    Field("rows", 16, why=_ROWS),
    Field("lines", 16, why="lines per row; " + _LINES),
    Field("stride", 32, why="DRAM bytes from one row to the next: 32 bits like an address (2-D strided access)"),
)

_GEMM_SHAPE = (  # the shape fields GEMM and GEMM_STREAM share
    Field("m", 16, why="rows of A (tokens): " + _ROWS),
    Field("k", 16, why="lines of the reduction dimension K: " + _LINES),
    Field("n", 16, why="lines of the output dimension N (W has n*cols rows): " + _LINES),
    Field("acc", 1, why="1: add into dst, 0: overwrite"),
)

OPS: tuple[OpSpec, ...] = (
    OpSpec("NOP", 0x1F, None, (Field("engine", 2, why="2 bits: LOAD=0, COMPUTE=1, STORE=2; moves tokens only"),),
           "Does nothing on the named engine but pop and push its tokens."),
    OpSpec("LOAD", 0x01, Engine.LOAD, _DMA_FIELDS,
           "DRAM -> buffer: `rows` rows of `lines` lines each; DRAM rows `stride` bytes apart, buffer rows packed from `sram`."),
    OpSpec("STORE", 0x02, Engine.STORE, _DMA_FIELDS,
           "Buffer -> DRAM: the mirror of LOAD."),
    OpSpec("GEMM", 0x03, Engine.COMPUTE, (
        _addr("dst", "acc"), _addr("a", "spad"), _addr("w", "spad"),
        *_GEMM_SHAPE,
    ), "acc[dst] (+)= A @ W^T. A: m rows x k lines (int8) at `a`; W: n*cols rows x k lines (int8, "
       "PyTorch [out, in] layout) at `w`; result m rows x n lines (int32). m=1 is decode (matrix x vector); "
       "the compiler streams model weights with GEMM_STREAM instead."),
    OpSpec("GEMM_STREAM", 0x12, Engine.COMPUTE, (
        _addr("dst", "acc"), _addr("a", "spad"),
        Field("w", 32, buf="dram", why="byte offset in the DRAM window of weight port 0's first byte (port p starts "
              "p x 4 KiB later): 32 bits like a DMA address; must be aligned to one scratchpad line"),
        *_GEMM_SHAPE,
        Field("wfmt", 2, why="2 bits: weight format INT8=0, Q4_0=1, Q4_1=2 (4-bit codes with group scales, "
              "isa.WFmt); 3 is illegal"),
        Field("gshift", 4, why="4 bits: rounding right shift 0..15 of each 32-weight group's term (int4 formats; "
              "must be 0 for INT8)"),
    ), "acc[dst] (+)= A @ W^T with W streamed from DRAM, not the scratchpad: every weight port (one per "
       "`dma_ports`) reads its share of W's tiles from its own 4 KiB pages (see *Weight streams*), and the "
       "array takes `dma_ports` weight lines a cycle. A: m rows x k lines (int8) at `a`; result m rows x n "
       "lines (int32), as GEMM. Decode (m=1) runs at the DRAM rate of all ports; prefill chunks read each "
       "weight once per chunk. wfmt=Q4_0/Q4_1: W is 4-bit codes, two a byte, with a 16-bit scale (Q4_1: and "
       "minimum) per row and group of 32 along K (see *4-bit weight streams*); each group's term "
       "D*sum(q*a) (+ Mn*sum(a)) is rounded by `gshift` and added (numerics_int4.stream_acc); k*cols must be "
       "whole groups of 32, else ILLEGAL_FIELD. The RTL does not implement the int4 formats yet: its decoder "
       "refuses wfmt != 0 (and gshift != 0) with ILLEGAL_FIELD; the golden simulator executes them."),
    OpSpec("REQUANT", 0x04, Engine.COMPUTE, (
        _addr("dst", "vbuf"), _addr("src", "acc"), _addr("mult", "vbuf"), _addr("exps", "spad"),
        Field("rows", 16, why=_ROWS), Field("lines", 16, why=_LINES),
        Field("shift", 8, why="8 bits: right shift 0..255 before the row exponent is applied"),
    ), "vbuf[dst] = requant(acc[src] * mult[col], shift - exps[row]) -> fixed point (numerics.requant). "
       "`mult`: one int32 per column (one row at `mult`); `exps`: one scratchpad line per row, exponent in lane 0."),
    OpSpec("QUANT", 0x05, Engine.COMPUTE, (
        _addr("dst", "spad"), _addr("src", "vbuf"), _addr("exps", "spad"),
        Field("rows", 16, why=_ROWS), Field("lines", 16, why=_LINES),
        Field("split", 1, why="1: also quantize the residual (x minus its int8 part) as a second block of rows"),
    ), "spad[dst] = int8 of each fixed-point row with a per-row power-of-two scale; the exponent goes to lane 0 "
       "of line `exps`+row (numerics.quant_rows). With split=1 the rows' residuals follow as rows "
       "rows..2*rows-1 of dst and exps: x ~ hi*2^e_hi + lo*2^e_lo, ~15-bit activations from two int8 GEMM rows "
       "(numerics.quant_rows_split)."),
    OpSpec("ADD", 0x06, Engine.COMPUTE, (
        _addr("dst", "vbuf"), _addr("a", "vbuf"), _addr("b", "vbuf"),
        Field("rows", 16, why=_ROWS), Field("lines", 16, why=_LINES),
        Field("bcast", 1, why="1: `b` is one row added to every row (bias)"),
    ), "vbuf[dst] = sat32(a + b) (residual add, bias)."),
    OpSpec("MUL", 0x07, Engine.COMPUTE, (
        _addr("dst", "vbuf"), _addr("a", "vbuf"), _addr("b", "vbuf"),
        Field("rows", 16, why=_ROWS), Field("lines", 16, why=_LINES),
        Field("bcast", 1, why="1: `b` is one row applied to every row"),
        Field("shift", 6, why="6 bits: product shift 0..63 (the fraction bits of the operands)"),
    ), "vbuf[dst] = sat32(round(a * b >> shift)) (SwiGLU gate, scaling)."),
    OpSpec("RMSNORM", 0x08, Engine.COMPUTE, (
        _addr("dst", "vbuf"), _addr("src", "vbuf"), _addr("gamma", "vbuf"),
        Field("rows", 16, why=_ROWS),
        Field("n", 16, why="16 bits: number of elements normalized per row (rows are padded to whole lines)"),
        Field("eps", 24, why="24 bits: epsilon in units of 2^-32 (numerics.EPS_FRAC), up to 3.9e-3"),
    ), "vbuf[dst] = x * rsqrt(mean(x^2) + eps) * gamma over the first n elements of each row (numerics.rmsnorm)."),
    OpSpec("LAYERNORM", 0x09, Engine.COMPUTE, (
        _addr("dst", "vbuf"), _addr("src", "vbuf"), _addr("gamma", "vbuf"),
        Field("rows", 16, why=_ROWS),
        Field("n", 16, why="16 bits: number of elements normalized per row"),
        Field("eps", 24, why="24 bits: epsilon in units of 2^-32 (numerics.EPS_FRAC)"),
    ), "vbuf[dst] = (x - mean) * rsqrt(var + eps) * gamma + beta; beta follows gamma by ceil(n/cols) lines "
       "(numerics.layernorm)."),
    OpSpec("SILU", 0x0A, Engine.COMPUTE, (
        _addr("dst", "vbuf"), _addr("src", "vbuf"), Field("rows", 16, why=_ROWS), Field("lines", 16, why=_LINES),
    ), "vbuf[dst] = x * sigmoid(x) (numerics.silu)."),
    OpSpec("GELU", 0x0B, Engine.COMPUTE, (
        _addr("dst", "vbuf"), _addr("src", "vbuf"), Field("rows", 16, why=_ROWS), Field("lines", 16, why=_LINES),
    ), "vbuf[dst] = gelu(x), tanh form as GPT-2 (numerics.gelu)."),
    OpSpec("ROPE", 0x0C, Engine.COMPUTE, (
        _addr("dst", "vbuf"), _addr("src", "vbuf"), _addr("table", "vbuf"),
        Field("rows", 16, why=_ROWS),
        Field("heads", 8, why="8 bits: up to 255 heads per row"),
        Field("hd", 8, why="8 bits: head_dim in lines (head_dim up to 255 x cols)"),
    ), "Rotary embedding of each head of each row: adjacent pairs (x[2i], x[2i+1]) rotate by the angle whose cos "
       "and sin are row r of `table` (hd lines: head_dim/2 cos then head_dim/2 sin, numerics.TRIG_FRAC) "
       "(numerics.rope)."),
    OpSpec("SOFTMAX", 0x0D, Engine.COMPUTE, (
        _addr("dst", "vbuf"), _addr("src", "vbuf"), Field("rows", 16, why=_ROWS),
        Field("n", 16, why="16 bits: elements per row taking part"),
    ), "Row-wise softmax of fixed-point scores to fixed-point probabilities (numerics.softmax)."),
    OpSpec("ARGMAX", 0x0E, Engine.COMPUTE, (
        _addr("dst", "vbuf"), _addr("src", "vbuf"), Field("rows", 16, why=_ROWS),
        Field("n", 16, why="16 bits: elements per row searched (vocabulary up to 65535)"),
    ), "Lane 0 of line dst+row = index of the first maximum of the first n elements of the row."),
    OpSpec("ATTN", 0x0F, Engine.COMPUTE, (
        _addr("q", "spad"), _addr("qexp", "spad"), _addr("kv", "spad"), _addr("state", "vbuf"),
        Field("nq", 6, why="6 bits: query rows (the heads of one GQA group) per instruction, up to 63"),
        Field("hd", 6, why="6 bits: head_dim in lines (up to 63 x cols)"),
        Field("t", 12, why="12 bits: valid KV tokens in this tile, up to 4095"),
        Field("page_log2", 4, why="4 bits: tile capacity 2^page_log2 tokens fixes the tile layout"),
        Field("offset", 18, signed=True, why="18 bits signed: query position minus the tile's first KV position (+-131071)"),
        Field("causal", 1, why="1: mask KV tokens after the query position"),
        Field("init", 1, why="1: first tile; start the running max/sum/output from scratch"),
    ), "One KV tile of streaming (FlashAttention-style) attention for nq query rows (int8, per-row exponents at "
       "`qexp`). The tile at `kv` holds P=2^page_log2 slots: K (P rows x hd lines), V (P x hd), K exponents "
       "(P lines), V exponents (P lines); t are valid. Updates the running max, sum and output at `state` "
       "(numerics.attn_tile)."),
    OpSpec("ATTN_OUT", 0x10, Engine.COMPUTE, (
        _addr("dst", "vbuf"), _addr("state", "vbuf"),
        Field("nq", 6, why="6 bits: as ATTN"), Field("hd", 6, why="6 bits: as ATTN"),
    ), "vbuf[dst] = running output / running sum, nq rows x hd lines of fixed point (numerics.attn_finish)."),
    OpSpec("FINISH", 0x11, Engine.COMPUTE, (),
           "End of program: fetch stops; the accelerator reports done when every engine has drained."),
)

OP_BY_NAME: Mapping[str, OpSpec] = {op.name: op for op in OPS}
OP_BY_CODE: Mapping[int, OpSpec] = {op.code: op for op in OPS}

for _op in OPS:  # the table is checked once at import: a field that does not fit is a bug here
    assert _op.used_bits <= WORD_BITS, (_op.name, _op.used_bits)
    assert 0 < _op.code < (1 << OPCODE_BITS)


def engine_of(op: OpSpec, fields: Mapping[str, int]) -> Engine:
    return op.engine if op.engine is not None else Engine(fields["engine"])


@dataclass(frozen=True)
class Instr:
    """A decoded instruction: an op name, its fields and its dependency flags."""

    op: str
    fields: Mapping[str, int]
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    @property
    def spec(self) -> OpSpec:
        return OP_BY_NAME[self.op]

    @property
    def engine(self) -> Engine:
        return engine_of(self.spec, self.fields)

    def __getattr__(self, name: str) -> int:
        try:
            return self.__dict__["fields"][name]
        except KeyError:
            raise AttributeError(name) from None

    def flags(self) -> dict[str, bool]:
        return {k: getattr(self, k) for k in ("pop_prev", "pop_next", "push_prev", "push_next")}


def make(op: str, *, pop_prev: bool = False, pop_next: bool = False, push_prev: bool = False,
         push_next: bool = False, **fields: int) -> Instr:
    """Build an instruction; missing fields are 0.  Raises :class:`IsaError` on unknown names."""
    spec = OP_BY_NAME.get(op)
    if spec is None:
        raise IsaError(f"unknown op {op!r}; ops: {', '.join(OP_BY_NAME)}")
    names = {f.name for f in spec.fields}
    extra = sorted(set(fields) - names)
    if extra:
        raise IsaError(f"{op} has no field(s) {', '.join(extra)}; fields: {', '.join(sorted(names)) or '(none)'}")
    full = {f.name: int(fields.get(f.name, 0)) for f in spec.fields}
    return Instr(op, full, pop_prev, pop_next, push_prev, push_next)


def encode(ins: Instr) -> int:
    """The 128-bit word of an instruction.  Raises :class:`IsaError` for a field out of range."""
    spec = ins.spec
    word = spec.code
    for i, k in enumerate(("pop_prev", "pop_next", "push_prev", "push_next")):
        word |= int(bool(getattr(ins, k))) << (OPCODE_BITS + i)
    for f, lo in spec.layout():
        v = int(ins.fields.get(f.name, 0))
        if not f.lo <= v <= f.hi:
            raise IsaError(f"{spec.name}.{f.name}={v} out of range {f.lo}..{f.hi} ({f.bits} bits)")
        word |= (v & ((1 << f.bits) - 1)) << lo
    return word


def decode(word: int) -> Instr:
    """Decode a 128-bit word.  Raises :class:`IllegalInstruction` for an unknown opcode or a set unused bit."""
    if not 0 <= word < (1 << WORD_BITS):
        raise IllegalInstruction(f"word {word:#x} is not a {WORD_BITS}-bit value", word=word)
    code = word & ((1 << OPCODE_BITS) - 1)
    spec = OP_BY_CODE.get(code)
    if spec is None:
        raise IllegalInstruction(f"illegal opcode {code:#04x} in word {word:#034x}", word=word)
    flags = [bool((word >> (OPCODE_BITS + i)) & 1) for i in range(4)]
    fields: dict[str, int] = {}
    for f, lo in spec.layout():
        v = (word >> lo) & ((1 << f.bits) - 1)
        if f.signed and v >> (f.bits - 1):
            v -= 1 << f.bits
        fields[f.name] = v
    if word >> spec.used_bits:
        raise IllegalInstruction(f"{spec.name} word {word:#034x} has bits set above bit {spec.used_bits - 1}",
                                 word=word, reason="reserved")
    return Instr(spec.name, fields, *flags)


def encode_all(instrs: Iterable[Instr]) -> list[int]:
    return [encode(i) for i in instrs]
