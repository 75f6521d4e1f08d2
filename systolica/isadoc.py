"""Generate the ISA reference (``docs/isa.md``) from the ISA table, the fault codes and the layout conventions.

Regenerate with ``systolica isa-doc -o docs/isa.md``; a test fails when the
checked-in file differs from :func:`render`.
"""

from __future__ import annotations

from pathlib import Path

from systolica.faults import Fault
from systolica.isa import HEADER_FIELDS, OPCODE_BITS, OPS, WORD_BITS, WORD_BYTES, Engine, Field, OpSpec
from systolica.layout import CONVENTIONS, EXTENTS

__all__ = ["render", "write", "REGENERATE"]

REGENERATE = "systolica isa-doc -o docs/isa.md"

_TOKENS = """\
Three engines run concurrently: **load** (LOAD), **compute** (GEMM, REQUANT, QUANT, the vector ops,
ATTN, ATTN_OUT, FINISH) and **store** (STORE); NOP runs on the engine its `engine` field names.
Instructions are fetched in program order and dispatched to per-engine instruction queues
(`cmd_depth` deep); fetch stalls while the queue it needs is full. Each engine executes its own
queue in order.

Four token queues of `queue_depth` tokens link neighbouring engines:

| queue | pushed by | popped by |
| --- | --- | --- |
| load → compute | load `@push_next` | compute `@pop_prev` |
| compute → load | compute `@push_prev` | load `@pop_next` |
| compute → store | compute `@push_next` | store `@pop_prev` |
| store → compute | store `@push_prev` | compute `@pop_next` |

- Before an instruction executes, its engine pops one token from each queue its `pop_*` flags name;
  it waits while such a queue is empty.
- After it executes, the engine pushes one token into each queue its `push_*` flags name; it waits
  while such a queue is full.
- The load engine has no *prev* and the store engine no *next*: `@pop_prev`/`@push_prev` on LOAD
  (or NOP engine=LOAD) and `@pop_next`/`@push_next` on STORE (or NOP engine=STORE) are `ILLEGAL_FIELD`.
- When no engine can make progress and work remains, the accelerator stops with `TOKEN_DEADLOCK`
  and the PC of the oldest blocked instruction.
- FINISH stops fetch; the run is done when every engine has drained its queue. Fetching past the
  last instruction without a FINISH is `PROGRAM_OVERRUN`.
- Every other fault (`ILLEGAL_OPCODE`, `ILLEGAL_FIELD`, `DMA_ALIGN`, `DMA_WINDOW`, `SRAM_RANGE`,
  `PROGRAM_OVERRUN`) is found when fetch reaches the instruction: fetch stops at that PC, the
  instructions dispatched before it still execute, then the fault is reported with that PC. When
  those earlier instructions cannot drain (they wait on tokens that would come later), the fetch
  fault is reported, not a deadlock.
- `BUS_ERROR` (hardware only; the golden simulator has no bus): the memory system answered a
  transfer with an AXI error (`rresp` / `bresp` SLVERR or DECERR). On a LOAD or STORE the run stops
  at once with that instruction's PC: no new bursts, those in flight complete (writes with
  `wstrb = 0`), the engines reset, so nothing queued after it runs. On an instruction fetch, the
  word that could not be read is where the program stops, as for the faults above.
- `BUFFER_COLLISION` (hardware only; the golden simulator has no cycles): an on-chip buffer line was
  read in the cycle it was written (a block RAM answers such a read with either word). The run stops
  as for `BUS_ERROR`, with the compute engine's PC. Programs whose engines hand lines over by tokens,
  as the compiler's do, never collide.
"""


def _bits(f: Field, lo: int) -> str:
    hi = lo + f.bits - 1
    return f"[{hi}]" if hi == lo else f"[{hi}:{lo}]"


def _esc(s: str) -> str:
    return s.replace("|", "\\|")


def _engine(op: OpSpec) -> str:
    return "named by `engine`" if op.engine is None else op.engine.name.lower()


def _op_section(op: OpSpec) -> list[str]:
    out = [f"### {op.name}", "", f"Opcode `{op.code:#04x}`, {_engine(op)} engine.", "", _esc(op.doc), ""]
    layout = op.layout()
    if not layout:
        out += ["No fields beyond the header.", ""]
    else:
        out += ["| field | bits | signed | buffer | why this width |", "| --- | --- | --- | --- | --- |"]
        for f, lo in layout:
            out.append(f"| `{f.name}` | {_bits(f, lo)} | {'yes' if f.signed else 'no'} | {f.buf or ''} | {_esc(f.why)} |")
        out.append("")
    if op.name in EXTENTS:
        out += ["On-chip operands, range-checked in this order:", "", "| operand | buffer | lines |",
                "| --- | --- | --- |"]
        out += [f"| `{e.field}` | {e.buf} | `{e.formula}` |" for e in EXTENTS[op.name]]
        out.append("")
    elif op.name in ("LOAD", "STORE"):
        out += ["On-chip operand: `sram` in the buffer `buf` selects, rows*lines lines. Checked in this order: "
                "`buf` (`ILLEGAL_FIELD`), `dram` and `stride` alignment (`DMA_ALIGN`), the window (`DMA_WINDOW`), "
                "the buffer range (`SRAM_RANGE`).", ""]
    out += [f"Bits used: {op.used_bits} of {WORD_BITS}; bits [{WORD_BITS - 1}:{op.used_bits}] are reserved "
            "and must be 0 (`ILLEGAL_FIELD`).", ""]
    return out


def render() -> str:
    """The ISA reference as Markdown."""
    out = [
        "# systolica ISA reference", "",
        f"<!-- Generated from systolica/isa.py by `{REGENERATE}`; do not edit by hand. -->", "",
        f"Every instruction is one {WORD_BITS}-bit word, stored as {WORD_BYTES} little-endian bytes. A program "
        "binary is a 16-byte header (magic `SYST`, version u16, flags u16, config hash u32, instruction count u32) "
        "followed by the words (`systolica/program.py`).", "",
        "## Header (every instruction)", "",
        "| field | bits | meaning |", "| --- | --- | --- |",
    ]
    lo = 0
    for f in HEADER_FIELDS:
        out.append(f"| `{f.name}` | {_bits(f, lo)} | {_esc(f.why)} |")
        lo += f.bits
    out += ["", f"Operation fields follow from bit {lo} upward in table order. Unused opcodes of the "
            f"{1 << OPCODE_BITS} are `ILLEGAL_OPCODE`, and so is `SOFTMAX` on a configuration built without a "
            "softmax unit (`softmax_unit = 0`, as the board presets are: the compiler emits no SOFTMAX).", ""]
    out += ["## Summary", "", "| op | opcode | engine | bits used |", "| --- | --- | --- | --- |"]
    for op in sorted(OPS, key=lambda o: o.code):
        out.append(f"| [{op.name}](#{op.name.lower()}) | `{op.code:#04x}` | {_engine(op)} "
                   f"| {op.used_bits} |")
    out += ["", "## Engines and dependency tokens", "", _TOKENS, "## Buffers and line conventions", "", CONVENTIONS,
            "## Operations", ""]
    for op in sorted(OPS, key=lambda o: o.code):
        out += _op_section(op)
    out += ["## Fault codes", "",
            "The accelerator stops and reports the code in `ERROR_CODE` with the faulting instruction's index in "
            "`ERROR_PC`; the golden simulator raises `SimFault` with the same pair (`systolica/faults.py`).", "",
            "| code | name | meaning |", "| --- | --- | --- |"]
    for f in Fault:
        out.append(f"| {int(f)} | `{f.name}` | {f.describe} |")
    out += ["", f"Engines: {', '.join(f'{e.name}={int(e)}' for e in Engine)}.", ""]
    return "\n".join(out)


def write(path: str | Path) -> Path:
    """Write :func:`render` to ``path``; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render())
    return p
