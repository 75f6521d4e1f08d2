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

import functools
import types

from amaranth.hdl import Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, wiring
from amaranth.lib import enum as aenum
from amaranth.lib.wiring import In, Out

from systolica.config import ATTN_HD_MAX, AccelConfig
from systolica.faults import Fault
from systolica.isa import HEADER_FIELDS, OP_BY_NAME, OPS, WORD_BITS, Engine
from systolica.layout import EXTENTS, dma_end, dma_line_bytes, dma_lines, wstream_end
from systolica.numerics_int4 import GROUP
from systolica.wstream4 import MAX_ROWS, config_problem

from .range_check import Lowering, sym_fields

__all__ = ["instr_layout", "HEADER_LAYOUT", "InstructionDecoder", "RTL_OPS", "CMD_BITS", "decode_cycles"]

HEADER_LAYOUT = data.StructLayout({f.name: unsigned(f.bits) for f in HEADER_FIELDS})

#: Ops the RTL executes; any other opcode of the table is reported as ILLEGAL_OPCODE.
RTL_OPS = ("NOP", "LOAD", "STORE", "GEMM", "GEMM_STREAM", "FINISH", "ADD", "MUL", "REQUANT", "ARGMAX", "SILU", "GELU", "ROPE",
           "QUANT", "SOFTMAX", "RMSNORM", "LAYERNORM", "ATTN", "ATTN_OUT")

CMD_BITS = WORD_BITS + 32  # what an engine's command FIFO holds: the word and its pc
PRODUCT_CYCLES = 3  # CHECK cycles per product of the range checks: operands, the multiplier's pieces, their sum


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


class DecState(aenum.Enum, shape=4):
    """The decoder's state, one-hot: "in TAKE" (the ~190 enables of the word, pc and end flags) and "stopped" are
    a flip-flop each, not a decode of the state."""
    TAKE = 1
    CHECK = 2
    DISPATCH = 4
    STOP = 8


def buf_lines(cfg: AccelConfig) -> dict[str, int]:
    return {"spad": cfg.spad_lines, "acc": cfg.acc_lines, "vbuf": cfg.vbuf_lines}


def _past_end(addr, n, size: int, hold):
    """``n != 0 and addr + n > size``, as ``n > size - addr``: the room past ``addr`` is formed from the word's
    field alone and held in a register (``hold``, :meth:`InstructionDecoder._hold`) long before the extent ``n``
    is, so the condition is one compare after ``n``'s register, not an adder and a compare (ulx3s: the
    conditions' registers at 11.2 ns).

    ``addr`` or ``n`` at or above the next power of two past ``size`` is past the end by itself (a wide OR),
    so only the low bits need comparing: 12 bits for a 4096-line buffer instead of 33.
    """
    k = size.bit_length()
    addr, n = Value.cast(addr), Value.cast(n)
    lo = addr[:k]
    beyond = (addr[k:] != 0) | (lo > size) if len(addr) > k else (lo > size)  # past the end whatever n is
    beyond_r = hold(beyond, "past_addr")
    room_r = hold(Mux(lo > size, 0, size - lo)[:k], "room")
    high = beyond_r
    if len(n) > k:
        high = high | (n[k:] != 0)
    return (n != 0) & (high | (n[:k] > room_r))


def _misaligned(x, lb: int):
    """``x % lb != 0``; for a power-of-two ``lb`` (the usual ``cols``) a look at the low bits."""
    return x[:lb.bit_length() - 1] != 0 if lb & (lb - 1) == 0 else x % lb != 0


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

    def _range_checks(self, op, v, slots):
        """The checks of ``op`` that need products: ``(lowering, [(condition, fault), ...])``, highest priority first.

        The formulas are :mod:`systolica.layout`'s, traced and lowered by :mod:`.range_check`; the products
        they need are the lowering's slots, filled by the CHECK state before the conditions are read.
        """
        cfg = self.cfg
        lines = buf_lines(cfg)
        names = [f.name for f in op.fields]
        low = Lowering({n: getattr(v, n) for n in names}, slots, op.name)
        sym = sym_fields(names)
        checks = []
        if op.name in ("LOAD", "STORE"):  # the golden order: window, then buffer range
            end = self._held_sum(low, dma_end(sym, cfg), f"{op.name.lower()}_dma_end")
            n = self._held_sum(low, dma_lines(sym, cfg), f"{op.name.lower()}_sram_lines")
            self.extent_lines[op.name, "dma_end"] = end
            self.extent_lines[op.name, "sram"] = n
            past = Mux(v.buf == 0, _past_end(v.sram, n, lines["spad"], self._hold),
                       Mux(v.buf == 1, _past_end(v.sram, n, lines["acc"], self._hold),
                           _past_end(v.sram, n, lines["vbuf"], self._hold)))
            checks += [((v.rows != 0) & (v.lines != 0) & (end > self.win_size), Fault.DMA_WINDOW),
                       (past, Fault.SRAM_RANGE)]
        if op.name == "GEMM_STREAM":  # the weight ports' pages, then the on-chip operands (the golden order)
            # any format's pages (without the 4-bit datapath the decoder refuses wfmt != 0: ILLEGAL_FIELD, which
            # the window check never overrides, so the int8 formula suffices)
            fmt = {} if config_problem(cfg) is None else {"wfmt": 0}
            end = self._held_sum(low, wstream_end(sym | fmt, cfg), "wstream_end")
            self.extent_lines[op.name, "wstream_end"] = end
            checks.append(((v.n != 0) & (v.k != 0) & (end > self.win_size), Fault.DMA_WINDOW))
        for ext in EXTENTS.get(op.name, ()):
            n = self._held_sum(low, ext.lines(sym, cfg), f"{op.name.lower()}_{ext.field}_lines")
            self.extent_lines[op.name, ext.field] = n
            checks.append((_past_end(getattr(v, ext.field), n, lines[ext.buf], self._hold), Fault.SRAM_RANGE))
        return low, checks

    def _held_sum(self, low, formula, name: str):
        """:meth:`_hold` of ``formula``, lowered with its terms of the fields alone summed a cycle ahead in a
        register of their own (:meth:`~.range_check.Lowering.split_sum`): the word is there from TAKE, the
        slots only later, so the extent's register takes one adder after the slots (STORE's DMA end had
        three in series after the word's fields: the decoder's slowest path on ECP5)."""
        return self._hold(low.split_sum(formula, lambda v: self._hold(v, f"{name}_fields")), name)

    def _hold(self, value, name: str):
        """``value`` (an extent or a DMA end, from the slots and the fields) in a register of its own, so
        the comparison that reads it is a cycle after the adders that form it."""
        reg = Signal(Value.cast(value).shape(), name=f"ext_{name}", reset_less=True)  # data: read after a load
        self._held.append((reg, value))
        return reg

    def _check(self, m, ins, code_sig, engine_sig):
        """Drive ``code_sig`` with the fault of word ``ins`` found without products (0 = none) and
        ``engine_sig`` with its engine."""
        cfg = self.cfg
        h = ins.nop.h
        with m.Switch(h.opcode):
            for op in OPS:
                with m.Case(op.code):
                    if op.name not in RTL_OPS or (op.name == "SOFTMAX" and not cfg.softmax_unit):
                        m.d.comb += code_sig.eq(Fault.ILLEGAL_OPCODE)  # (or an op this config does not build)
                        continue
                    v = getattr(ins, op.name.lower())
                    eng = Signal(2, name=f"eng_{op.name.lower()}")
                    m.d.comb += eng.eq(v.engine if op.engine is None else int(op.engine))
                    m.d.comb += engine_sig.eq(eng)
                    # the golden simulator's order, lowest priority first (the last If that holds wins):
                    # reserved bits > buf/engine/token flags > DMA alignment (> DMA window > buffer ranges,
                    # which need products: see _range_checks)
                    checks = []
                    if op.name in ("LOAD", "STORE"):
                        mis = [_misaligned(v.dram, lb) | _misaligned(v.stride, lb)
                               for lb in (dma_line_bytes(0, cfg.cols), dma_line_bytes(1, cfg.cols))]
                        checks.append((Mux(v.buf == 0, mis[0], mis[1]), Fault.DMA_ALIGN))
                    if op.name == "GEMM_STREAM":
                        checks.append((_misaligned(v.w, cfg.cols), Fault.DMA_ALIGN))
                        # the weight formats the array takes (wstream4.illegal: the golden simulator's rules)
                        checks.append((self._bad_wfmt(v), Fault.ILLEGAL_FIELD))
                    bad_flags = ((eng == Engine.LOAD) & (h.pop_prev | h.push_prev)) | \
                                ((eng == Engine.STORE) & (h.pop_next | h.push_next)) | (eng == 3)
                    checks.append((bad_flags, Fault.ILLEGAL_FIELD))
                    if op.name == "ATTN":  # more valid tokens than the tile has slots
                        checks.append((v.t > (1 << v.page_log2), Fault.ILLEGAL_FIELD))
                    if op.name in ("ATTN", "ATTN_OUT") and cfg.attn_max_lines < ATTN_HD_MAX:
                        # a head longer than the attention unit's memories (config.attn_head_lines)
                        checks.append((v.hd > cfg.attn_max_lines, Fault.ILLEGAL_FIELD))
                    if op.name in ("LOAD", "STORE"):
                        checks.append((v.buf == 3, Fault.ILLEGAL_FIELD))
                    if op.used_bits < WORD_BITS:
                        checks.append((v.reserved != 0, Fault.ILLEGAL_FIELD))
                    # each condition is registered first (the word's compares, which Yosys shares across the
                    # ops as one comparator behind a multiplexer, a cycle of their own), then the priority picks
                    # the code (ulx3s: word -> shared compare -> code_r, 10.8 ns)
                    for i, (cond, fault) in enumerate(checks):
                        cond_r = Signal(name=f"fchk_{op.name.lower()}_{i}")
                        m.d.sync += cond_r.eq(cond)
                        with m.If(cond_r):
                            m.d.comb += code_sig.eq(fault)
            with m.Default():
                m.d.comb += code_sig.eq(Fault.ILLEGAL_OPCODE)

    def _bad_wfmt(self, v):
        """GEMM_STREAM's weight format is ILLEGAL_FIELD: ``wfmt`` 3, a group shift on int8 weights, or 4-bit
        weights the array cannot take (``wstream4.illegal``: no datapath, ``k`` not whole groups, more than
        ``MAX_ROWS`` rows, more groups along K than ``q4_groups``)."""
        cfg = self.cfg
        bad = (v.wfmt == 3) | ((v.wfmt == 0) & (v.gshift != 0))
        q4 = (v.wfmt == 1) | (v.wfmt == 2)
        if config_problem(cfg) is not None:
            return bad | q4
        L = GROUP // cfg.cols  # K lines a group
        part = v.k[:L.bit_length() - 1] != 0 if L > 1 else 0
        return bad | (q4 & (part | (v.m > MAX_ROWS) | (v.k > cfg.q4_groups * L)))

    def _products(self, m, ins, plans, prod_j, last_step, range_code):
        """The shared multiplier's product ``prod_j`` of the word's op, the CHECK step at which its
        range checks' code is in (``last_step``: a constant per op, no multiplier), and that code
        (``range_code``)."""
        pairs = [ab for low, _ in plans.values() for ab in low.products]
        mul_a = Signal(max((len(a) for a, _ in pairs), default=1))
        mul_b = Signal(max((len(b) for _, b in pairs), default=1))
        with m.Switch(ins.nop.h.opcode):
            for op in OPS:
                if op.name not in plans:
                    continue
                low, checks = plans[op.name]
                with m.Case(op.code):
                    m.d.comb += last_step.eq(PRODUCT_CYCLES * len(low.products) + 3)
                    with m.Switch(prod_j):  # a counter of its own: no step comparison before the operand mux
                        for j, (a, b) in enumerate(low.products):
                            with m.Case(j):
                                m.d.comb += [mul_a.eq(a), mul_b.eq(b)]
                    # each condition is registered first (its adders and comparators a cycle of their own),
                    # then the op's priority picks the code: the last If that holds wins
                    for i, (cond, fault) in enumerate(reversed(checks)):
                        cond_r = Signal(name=f"chk_{op.name.lower()}_{i}")
                        m.d.sync += cond_r.eq(cond)
                        with m.If(cond_r):
                            m.d.comb += range_code.eq(fault)
        # three stages: the operands are registered, then the multiplier's pieces (18-bit multipliers on
        # ECP5, one DSP48 on Xilinx) are registered, then their sum is written: product j's operands are
        # chosen in steps 3j .. 3j + 2 (``prod_j = j``; the register keeps those of step 3j + 1, the same) and
        # its product written to its slot in step 3j + 2, so a product whose operand is the one before it
        # (ROPE, GEMM) reads the slot already written
        a_r, b_r = Signal.like(mul_a, name="mul_a_r", reset_less=True), Signal.like(mul_b, name="mul_b_r", reset_less=True)
        m.d.sync += [a_r.eq(mul_a), b_r.eq(mul_b)]
        if len(b_r) <= 18:
            p_r = Signal.like(a_r * b_r, name="mul_p_r", reset_less=True)
            m.d.sync += p_r.eq(a_r * b_r)
            return p_r
        lo, hi = b_r[:16], (b_r[16:].as_signed() if b_r.shape().signed else b_r[16:])
        lo_r, hi_r = (Signal.like(a_r * lo, name="mul_lo_r", reset_less=True),
                      Signal.like(a_r * hi, name="mul_hi_r", reset_less=True))
        m.d.sync += [lo_r.eq(a_r * lo), hi_r.eq(a_r * hi)]
        return lo_r + (hi_r << 16)

    def elaborate(self, platform):
        m = Module()
        layout = instr_layout()
        word = Signal(WORD_BITS, reset_less=True)  # loaded in TAKE before CHECK reads it
        # the checks read a copy of their own (its other initial value keeps Yosys from merging the two): the word
        # itself drives the three engines' command FIFOs across the die, and the checks' compares sat 3.3 ns of
        # routing away from it (ulx3s, the decoder's slowest path)
        word_c = Signal(WORD_BITS, reset_less=True, init=(1 << WORD_BITS) - 1, name="word_chk")
        pc = Signal(32, reset_less=True)
        end = Signal()
        end_code = Signal(4)
        engine = Signal(2)
        # the engine's command valid, one flip-flop each, set on the way into DISPATCH and cleared on the way
        # out: the command FIFOs' write enables start at a register, not at a decode of state and engine (the
        # compute engine's FIFO, ~150 flip-flops an entry, was enabled 11.8 ns after the decoder's state on ulx3s)
        valid = Signal(3, name="cmd_valid_r")
        ins = data.View(layout, word_c)
        state = Signal(DecState, init=DecState.STOP)  # idle until the first start
        code = Signal(4)
        eng_c = Signal(2)
        self._check(m, ins, code, eng_c)
        # range checks: the op's products, one per CHECK cycle on one multiplier, then the comparisons
        self.extent_lines = {}  # (op, operand) -> lines it spans, as the decoder computes them (for tests)
        self._held = []  # (register, value) of every extent: filled by _hold
        slots = []
        plans = {op.name: self._range_checks(op, getattr(ins, op.name.lower()), slots)
                 for op in OPS if op.name in RTL_OPS}
        step = Signal(range(PRODUCT_CYCLES * len(slots) + 4))  # up to 3p + 3: products, then three check registers
        last_step = Signal.like(step, init=3)  # an op without range checks (and an illegal opcode): 3
        range_code = Signal(4)
        prod_j = Signal(range(len(slots) + 1))  # the product in the multiplier (step // 3)
        phase = Signal(range(PRODUCT_CYCLES))  # step % 3
        product = self._products(m, ins, plans, prod_j, last_step, range_code)
        m.d.sync += [reg.eq(value) for reg, value in self._held]

        # the fast checks' code and the range checks' code are registered (the fast checks twice: each condition,
        # then the code; the range checks three times: each extent, each condition, then the code its op's
        # priority picks), so no path runs from the word through the checks into the fault registers
        code_r, range_r, last_step_r = Signal(4), Signal(4), Signal.like(last_step)
        m.d.sync += [code_r.eq(code), range_r.eq(range_code), last_step_r.eq(last_step)]
        m.d.comb += [self.cmd_data.eq(word | (pc << WORD_BITS)), self.stopped.eq(state.as_value()[3])]
        m.d.comb += self.cmd_valid.eq(valid)
        # the word, its pc and end flags load in every TAKE cycle: the last load is the one the state leaves TAKE
        # with (in_valid), and they hold through CHECK and DISPATCH. Their ~190 enables are then a decode of the
        # state register alone, not of the fetch FIFO's valid and the start (11.9 ns on ulx3s, 140 late enables)
        with m.If(state.as_value()[0]):  # (state == TAKE: one-hot)
            m.d.sync += [word.eq(self.in_word), word_c.eq(self.in_word), pc.eq(self.in_pc), end.eq(self.in_end), end_code.eq(self.in_end_code)]
        with m.If(self.start):
            m.d.sync += [state.eq(DecState.TAKE), valid.eq(0), self.fault.eq(0), self.fault_code.eq(0),
                         self.fault_pc.eq(0)]
        with m.Else(), m.Switch(state):
            with m.Case(DecState.TAKE):
                m.d.comb += self.in_ready.eq(1)
                with m.If(self.in_valid):
                    m.d.sync += [step.eq(0), prod_j.eq(0), phase.eq(0), state.eq(DecState.CHECK)]
            with m.Case(DecState.CHECK):
                # found in the third CHECK cycle (each condition, then the code registered), before any range
                with m.If((step >= 2) & (end | (code_r != 0))):
                    m.d.sync += [self.fault.eq(1), self.fault_pc.eq(pc), state.eq(DecState.STOP),
                                 self.fault_code.eq(Mux(end, end_code, code_r))]
                with m.Elif((step == 0) | (step != last_step_r)):  # last_step >= 3: step 0 always goes on
                    m.d.sync += [step.eq(step + 1), phase.eq(Mux(phase == PRODUCT_CYCLES - 1, 0, phase + 1))]
                    with m.If(phase == PRODUCT_CYCLES - 1):
                        m.d.sync += prod_j.eq(prod_j + 1)
                        with m.Switch(prod_j):
                            for j, slot in enumerate(slots):
                                with m.Case(j):
                                    m.d.sync += slot.eq(product)
                with m.Elif(range_r != 0):
                    m.d.sync += [self.fault.eq(1), self.fault_pc.eq(pc), state.eq(DecState.STOP),
                                 self.fault_code.eq(range_r)]
                with m.Else():
                    m.d.sync += [engine.eq(eng_c), valid.eq(1 << eng_c), state.eq(DecState.DISPATCH)]
            with m.Case(DecState.DISPATCH):
                ready = self.cmd_ready.bit_select(engine, 1)
                m.d.comb += self.dispatch_blocked.eq(~ready)
                with m.If(ready):
                    m.d.sync += valid.eq(0)
                    is_finish = ins.nop.h.opcode == OP_BY_NAME["FINISH"].code
                    m.d.sync += state.eq(DecState.TAKE)
                    with m.If(is_finish):
                        m.d.sync += state.eq(DecState.STOP)
        return m


@functools.lru_cache(maxsize=16)
def decode_cycles(cfg: AccelConfig) -> dict[str, int]:
    """Cycles from TAKE to DISPATCH of each op on the decoder of ``cfg``: TAKE, three CHECK cycles per product
    its range checks need (one shared multiplier between registers), four CHECK cycles for the
    comparisons (each extent, each condition, then the fault code registered), DISPATCH.

    Traced from the same formulas the decoder lowers (no elaboration), for the performance model.
    """
    probe = types.SimpleNamespace(cfg=cfg, win_size=Signal(32), extent_lines={}, _hold=lambda v, name: v,
                                  _held_sum=lambda low, formula, name: low(formula))
    ins = data.View(instr_layout(), Signal(WORD_BITS))
    out, slots = {}, []
    for op in OPS:
        if op.name in RTL_OPS:
            low, _ = InstructionDecoder._range_checks(probe, op, getattr(ins, op.name.lower()), slots)
            out[op.name] = 6 + PRODUCT_CYCLES * len(low.products)
    return out
