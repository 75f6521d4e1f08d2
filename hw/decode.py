"""Instruction decoder: the ISA table as an Amaranth union layout, legality checks, dispatch.

:func:`instr_layout` builds a ``data.UnionLayout`` with one ``StructLayout``
variant per op of :data:`systolica.isa.OPS` (header, the op's fields, then the
reserved bits), so no bit position is written by hand here.

The decoder takes words in program order and checks each one completely
before dispatching it (opcode, reserved bits, field values, token flags of its
engine, on-chip buffer ranges, DMA alignment and window).  The first faulting
instruction stops dispatch: everything before it runs to completion, nothing
after it is dispatched, and the fault is reported with its PC once the engines
have drained.  Faults are therefore precise and independent of timing, which
is what lets the RTL match the golden simulator bit for bit.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib import enum as aenum
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.faults import Fault
from systolica.isa import HEADER_FIELDS, OP_BY_NAME, OPS, WORD_BITS, Engine

from .dma import transfer_faults

__all__ = ["instr_layout", "HEADER_LAYOUT", "InstructionDecoder", "RTL_OPS", "EXTENTS", "CMD_BITS"]

HEADER_LAYOUT = data.StructLayout({f.name: unsigned(f.bits) for f in HEADER_FIELDS})

#: Ops the RTL executes; any other opcode of the table is reported as ILLEGAL_OPCODE.
RTL_OPS = ("NOP", "LOAD", "STORE", "GEMM", "FINISH", "ADD", "MUL", "REQUANT", "ARGMAX", "SILU", "GELU", "ROPE",
           "QUANT", "SOFTMAX", "RMSNORM", "LAYERNORM", "ATTN", "ATTN_OUT")

#: On-chip operands of each compute op: (address field, buffer, lines as a function of fields and config).
#: The same expressions serve Python ints and Amaranth values.
def _rl(f, c):
    return f["rows"] * f["lines"]


EXTENTS = {
    "GEMM": (("a", "spad", lambda f, c: f["m"] * f["k"]),
             ("w", "spad", lambda f, c: f["n"] * c.cols * f["k"]),
             ("dst", "acc", lambda f, c: f["m"] * f["n"])),
    # b: one row when broadcast, else rows rows (written without a Mux so ints work too)
    "ADD": (("a", "vbuf", _rl), ("b", "vbuf", lambda f, c: f["lines"] * (f["bcast"] + (1 - f["bcast"]) * f["rows"])),
            ("dst", "vbuf", _rl)),
    "REQUANT": (("src", "acc", _rl), ("mult", "vbuf", lambda f, c: f["lines"]),
                ("exps", "spad", lambda f, c: f["rows"]), ("dst", "vbuf", _rl)),
    "ARGMAX": (("src", "vbuf", lambda f, c: f["rows"] * ((f["n"] + c.cols - 1) // c.cols)),
               ("dst", "vbuf", lambda f, c: f["rows"])),
    "SILU": (("src", "vbuf", _rl), ("dst", "vbuf", _rl)),
}
EXTENTS["ROPE"] = (("src", "vbuf", lambda f, c: f["rows"] * f["heads"] * f["hd"]),
                   ("table", "vbuf", lambda f, c: f["rows"] * f["hd"]),
                   ("dst", "vbuf", lambda f, c: f["rows"] * f["heads"] * f["hd"]))
def _padded(f, c):
    return f["rows"] * ((f["n"] + c.cols - 1) // c.cols)


EXTENTS["QUANT"] = (("src", "vbuf", _rl), ("dst", "spad", lambda f, c: (1 + f["split"]) * f["rows"] * f["lines"]),
                    ("exps", "spad", lambda f, c: (1 + f["split"]) * f["rows"]))
EXTENTS["SOFTMAX"] = (("src", "vbuf", _padded), ("dst", "vbuf", _padded))
EXTENTS["RMSNORM"] = (("src", "vbuf", _padded), ("gamma", "vbuf", lambda f, c: (f["n"] + c.cols - 1) // c.cols),
                      ("dst", "vbuf", _padded))
EXTENTS["LAYERNORM"] = (("src", "vbuf", _padded),
                        ("gamma", "vbuf", lambda f, c: 2 * ((f["n"] + c.cols - 1) // c.cols)),
                        ("dst", "vbuf", _padded))
EXTENTS["ATTN"] = (("q", "spad", lambda f, c: f["nq"] * f["hd"]), ("qexp", "spad", lambda f, c: f["nq"]),
                   ("kv", "spad", lambda f, c: (2 * f["hd"] + 2) << f["page_log2"]),  # layout.kv_tile
                   ("state", "vbuf", lambda f, c: f["nq"] + f["nq"] * f["hd"]))  # layout.attn_state_lines
EXTENTS["ATTN_OUT"] = (("state", "vbuf", lambda f, c: f["nq"] + f["nq"] * f["hd"]),
                       ("dst", "vbuf", lambda f, c: f["nq"] * f["hd"]))
EXTENTS["MUL"] = EXTENTS["ADD"]
EXTENTS["GELU"] = EXTENTS["SILU"]

CMD_BITS = WORD_BITS + 32  # what an engine's command FIFO holds: the word and its pc


def instr_layout() -> data.UnionLayout:
    """One variant per op (lower-case op name): header, fields, ``reserved`` up to 128 bits."""
    variants = {}
    for op in OPS:
        fields = {"h": HEADER_LAYOUT}
        for f in op.fields:
            fields[f.name] = data.signed(f.bits) if f.signed else unsigned(f.bits)
        if op.used_bits < WORD_BITS:
            fields["reserved"] = unsigned(WORD_BITS - op.used_bits)
        variants[op.name.lower()] = data.StructLayout(fields)
    return data.UnionLayout(variants)


class DecState(aenum.Enum, shape=2):
    TAKE = 0
    CHECK = 1
    DISPATCH = 2
    STOP = 3


def buf_lines(cfg: AccelConfig) -> dict[str, int]:
    return {"spad": cfg.spad_lines, "acc": cfg.acc_lines, "vbuf": cfg.vbuf_lines}


class InstructionDecoder(wiring.Component):
    """Checks each word and dispatches it to the command FIFO of its engine.

    Outputs ``stopped`` once it has dispatched FINISH or found a fault; the fault
    (``fault_code``, ``fault_pc``) is held until the next start.
    """

    def __init__(self, cfg: AccelConfig):
        self.cfg = cfg
        super().__init__({
            "start": In(1), "win_size": In(32),
            "in_valid": In(1), "in_ready": Out(1), "in_word": In(WORD_BITS), "in_pc": In(32),
            "in_end": In(1), "in_end_code": In(4),
            "cmd_data": Out(CMD_BITS), "cmd_valid": Out(3), "cmd_ready": In(3),
            "stopped": Out(1), "dispatch_blocked": Out(1),
            "fault": Out(1), "fault_code": Out(4), "fault_pc": Out(32),
        })

    def _check(self, m, ins, code_sig, engine_sig):
        """Drive ``code_sig`` with the fault of word ``ins`` (0 = legal) and ``engine_sig`` with its engine."""
        cfg = self.cfg
        h = ins.nop.h
        lines = buf_lines(cfg)
        with m.Switch(h.opcode):
            for op in OPS:
                with m.Case(op.code):
                    if op.name not in RTL_OPS:
                        m.d.comb += code_sig.eq(Fault.ILLEGAL_OPCODE)
                        continue
                    v = getattr(ins, op.name.lower())
                    eng = Signal(2, name=f"eng_{op.name.lower()}")
                    m.d.comb += eng.eq(v.engine if op.engine is None else int(op.engine))
                    m.d.comb += engine_sig.eq(eng)
                    # the golden simulator's order, lowest priority first (the last If that holds wins):
                    # reserved bits > buf/engine/token flags > DMA alignment > DMA window > buffer ranges
                    checks = []
                    if op.name in ("LOAD", "STORE"):
                        mis, out = transfer_faults(cfg, v.buf, v.dram, v.stride, v.rows, v.lines, self.win_size)
                        total = v.rows * v.lines
                        blines = [lines["spad"], lines["acc"], lines["vbuf"], 0]
                        over = (total != 0) & (
                            ((v.buf == 0) & (v.sram + total > blines[0])) |
                            ((v.buf == 1) & (v.sram + total > blines[1])) |
                            ((v.buf == 2) & (v.sram + total > blines[2])))
                        checks += [(over, Fault.SRAM_RANGE), (out, Fault.DMA_WINDOW), (mis, Fault.DMA_ALIGN)]
                    for name, buf, fn in reversed(EXTENTS.get(op.name, ())):
                        fv = {f.name: getattr(v, f.name) for f in op.fields}
                        n = fn(fv, cfg)
                        checks.append(((n != 0) & (getattr(v, name) + n > lines[buf]), Fault.SRAM_RANGE))
                    bad_flags = ((eng == Engine.LOAD) & (h.pop_prev | h.push_prev)) | \
                                ((eng == Engine.STORE) & (h.pop_next | h.push_next)) | (eng == 3)
                    checks.append((bad_flags, Fault.ILLEGAL_FIELD))
                    if op.name == "ATTN":  # more valid tokens than the tile has slots
                        checks.append((v.t > (1 << v.page_log2), Fault.ILLEGAL_FIELD))
                    if op.name in ("LOAD", "STORE"):
                        checks.append((v.buf == 3, Fault.ILLEGAL_FIELD))
                    if op.used_bits < WORD_BITS:
                        checks.append((v.reserved != 0, Fault.ILLEGAL_FIELD))
                    for cond, fault in checks:
                        with m.If(cond):
                            m.d.comb += code_sig.eq(fault)
            with m.Default():
                m.d.comb += code_sig.eq(Fault.ILLEGAL_OPCODE)

    def elaborate(self, platform):
        m = Module()
        layout = instr_layout()
        word = Signal(WORD_BITS)
        pc = Signal(32)
        end = Signal()
        end_code = Signal(4)
        engine = Signal(2)
        ins = data.View(layout, word)
        state = Signal(DecState, init=DecState.STOP)  # idle until the first start
        code = Signal(4)
        eng_c = Signal(2)
        self._check(m, ins, code, eng_c)

        m.d.comb += [self.cmd_data.eq(word | (pc << WORD_BITS)), self.stopped.eq(state == DecState.STOP)]
        with m.If(self.start):
            m.d.sync += [state.eq(DecState.TAKE), self.fault.eq(0), self.fault_code.eq(0), self.fault_pc.eq(0)]
        with m.Else(), m.Switch(state):
            with m.Case(DecState.TAKE):
                m.d.comb += self.in_ready.eq(1)
                with m.If(self.in_valid):
                    m.d.sync += [word.eq(self.in_word), pc.eq(self.in_pc), end.eq(self.in_end),
                                 end_code.eq(self.in_end_code), state.eq(DecState.CHECK)]
            with m.Case(DecState.CHECK):
                with m.If(end | (code != 0)):
                    m.d.sync += [self.fault.eq(1), self.fault_pc.eq(pc), state.eq(DecState.STOP),
                                 self.fault_code.eq(Mux(end, end_code, code))]
                with m.Else():
                    m.d.sync += [engine.eq(eng_c), state.eq(DecState.DISPATCH)]
            with m.Case(DecState.DISPATCH):
                ready = self.cmd_ready.bit_select(engine, 1)
                m.d.comb += [self.cmd_valid.eq(1 << engine), self.dispatch_blocked.eq(~ready)]
                with m.If(ready):
                    is_finish = ins.nop.h.opcode == OP_BY_NAME["FINISH"].code
                    m.d.sync += state.eq(DecState.TAKE)
                    with m.If(is_finish):
                        m.d.sync += state.eq(DecState.STOP)
        return m
