"""The decoder evaluates :mod:`systolica.layout`'s formulas, not a copy of them.

For random field values of every op, run in the Amaranth simulator: each operand extent (and the DMA
end) the decoder computes equals the Python value of the same layout formula, and the decoder faults
exactly when the golden simulator does, with the same code.
"""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from systolica.config import preset
from systolica.faults import Fault
from systolica.hw.decode import RTL_OPS, InstructionDecoder, decode_cycles
from systolica.hw.range_check import Sym, sym_fields
from systolica.isa import OP_BY_CODE, OP_BY_NAME, OPS, encode, make
from systolica.layout import EXTENTS, dma_end, dma_lines, select, wstream_end
from systolica.numerics_int4 import GROUP
from systolica.sim.golden import GoldenSim, _check_word

WIN = 1 << 16  # DRAM window of these tests (bytes)


def _size(cfg, buf):
    return {"spad": cfg.spad_lines, "acc": cfg.acc_lines, "vbuf": cfg.vbuf_lines}[buf]


def random_instr(rng: random.Random, cfg, op):
    """Fields biased to the edges: mostly in range, often just past a buffer's end or the window's."""
    fields = {}
    addr_buf = {e.field: e.buf for e in EXTENTS.get(op.name, ())}
    for f in op.fields:
        top = f.hi
        r = rng.random()
        if f.signed:
            v = rng.randint(f.lo, f.hi)
        elif f.name == "buf":
            v = rng.choice([0, 1, 2, 2, 2, 3])
        elif f.name in ("dram", "stride"):
            v = rng.choice([0, cfg.cols, 4 * cfg.cols]) * rng.randrange(WIN // (4 * cfg.cols) + 4) \
                if r < 0.85 else rng.randrange(top + 1)
        elif f.name in addr_buf or f.name == "sram":
            size = _size(cfg, addr_buf.get(f.name, "vbuf"))
            v = rng.randrange(size + 8) if r < 0.85 else rng.randrange(top + 1)
        elif f.bits <= 1:
            v = rng.randrange(2)
        elif f.name == "page_log2":
            v = rng.randrange(5)
        elif f.name == "wfmt":  # mostly int8; the 4-bit formats and the illegal 3 sometimes
            v = rng.choice([0, 0, 0, 0, 1, 2, 3])
        elif f.name == "gshift":
            v = 0 if r < 0.8 else rng.randrange(top + 1)
        else:
            v = 0 if r < 0.1 else rng.randrange(1, min(top, 9) + 1) if r < 0.8 else rng.randrange(top + 1)
        fields[f.name] = min(v, top)
    if op.name == "GEMM_STREAM" and fields["wfmt"] in (1, 2) and rng.random() < 0.6:  # 4-bit weights the array
        fields["k"], fields["m"] = GROUP // cfg.cols * rng.randint(1, 2), rng.randint(1, 4)  # takes, mostly
    flags = {k: rng.random() < 0.05 for k in ("pop_prev", "pop_next", "push_prev", "push_next")}
    return make(op.name, **fields, **flags)


def run_decoder(cfg, words):
    """Feed ``words`` one at a time; per word: (fault code or 0, cycles from TAKE to DISPATCH or to the
    fault, the operand extents the decoder computed)."""
    dut = InstructionDecoder(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    out = []

    async def tb(ctx):
        ctx.set(dut.win_size, WIN)
        ctx.set(dut.cmd_ready, 0b111)
        for w in words:
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.in_word, w)
            ctx.set(dut.in_valid, 1)
            cycles = 0
            while True:
                cycles += 1
                if ctx.get(dut.in_ready):
                    await ctx.tick()
                    ctx.set(dut.in_valid, 0)
                    continue
                if ctx.get(dut.cmd_valid):
                    code = 0
                    break
                if ctx.get(dut.stopped):
                    assert ctx.get(dut.fault)
                    code = ctx.get(dut.fault_code)
                    break
                await ctx.tick()
            op = getattr(OP_BY_CODE.get(w & 0x1F), "name", None)
            ext = {k[1]: ctx.get(v) for k, v in dut.extent_lines.items() if k[0] == op}
            out.append((code, cycles, ext))
            await ctx.tick()

    sim.add_testbench(tb)
    sim.run()
    return out, dut


def golden_code(gs, word) -> int:
    r = _check_word(gs, word)
    return 0 if isinstance(r, tuple) else int(r.fault)


@pytest.mark.parametrize("config", ["tiny", "default"])
def test_decoder_extents_and_faults_match_layout_and_golden(config):
    cfg = preset(config)
    rng = random.Random(config)
    gs = GoldenSim(cfg, dram=WIN)
    instrs = [random_instr(rng, cfg, OP_BY_NAME[name]) for name in RTL_OPS for _ in range(48)]
    words = [encode(i) for i in instrs]
    res, dut = run_decoder(cfg, words)
    nprod = {}
    seen = {code: 0 for code in Fault}
    q4 = {False: 0, True: 0}
    for ins, w, (code, cycles, ext) in zip(instrs, words, res, strict=True):
        want = golden_code(gs, w)
        assert code == want, f"{ins}: decoder fault {code}, golden {want}"
        seen[Fault(code)] += 1
        if ins.op == "GEMM_STREAM" and ins.wfmt in (1, 2):  # 4-bit weights: refused (wstream4.illegal) or checked
            q4[code == Fault.ILLEGAL_FIELD] += 1
        if code in (0, Fault.SRAM_RANGE, Fault.DMA_WINDOW):  # every product was computed
            want_ext = {e.field: e.lines(ins.fields, cfg) for e in EXTENTS.get(ins.op, ())}
            if ins.op in ("LOAD", "STORE"):
                want_ext = {"dma_end": dma_end(ins.fields, cfg), "sram": dma_lines(ins.fields, cfg)}
            if ins.op == "GEMM_STREAM":  # the last weight port's end, from the same formula as golden's check
                want_ext["wstream_end"] = wstream_end(ins.fields, cfg)
            assert ext == want_ext, ins
            nprod.setdefault(ins.op, set()).add(cycles - 6)
    # the fault mix is wide enough to mean something
    assert seen[Fault.NONE] > 100 and seen[Fault.SRAM_RANGE] > 30 and seen[Fault.ILLEGAL_FIELD] > 10
    assert seen[Fault.DMA_WINDOW] > 3 and seen[Fault.DMA_ALIGN] > 3
    assert q4[False] >= 2 and q4[True] >= 2, q4  # 4-bit GEMM_STREAMs both taken and refused by the format rules
    # latency: TAKE, four CHECK cycles (extents, conditions and codes registered), three more per product
    # (operand registers, the multiplier's pieces, their sum), DISPATCH
    # (docs/hardware.md's table)
    products = {"NOP": 0, "FINISH": 0, "LOAD": 2, "STORE": 2, "ROPE": 2, "GEMM": 3, "GEMM_STREAM": 3}
    assert nprod == {op: {3 * products.get(op, 1)} for op in RTL_OPS}, nprod
    # ... and what the performance model is told (decode_cycles traces the same formulas)
    assert {op: {c - 6} for op, c in decode_cycles(cfg).items()} == nprod


def test_illegal_opcode_and_reserved_bits_fault_at_once():
    cfg = preset("tiny")
    bad = [0, len(OPS) + 1, encode(make("GEMM", m=1, k=1, n=1)) | 1 << 127]
    res, _ = run_decoder(cfg, bad)
    assert [r[0] for r in res] == [Fault.ILLEGAL_OPCODE, Fault.ILLEGAL_OPCODE, Fault.ILLEGAL_FIELD]
    assert all(r[1] == 5 for r in res)  # TAKE, three CHECK cycles (each condition, then the code registered), STOP


def test_every_formula_traces_without_branching():
    """A layout formula that branches on a field (``if``, ``and``, ``min``) cannot become hardware."""
    for name, extents in EXTENTS.items():
        f = sym_fields(fl.name for fl in OP_BY_NAME[name].fields)
        for e in extents:
            assert isinstance(e.lines(f, preset("tiny")), (Sym, int)), (name, e.field)
    with pytest.raises(TypeError, match="branches on a field"):
        bool(Sym("field", "n") == 0)
    assert select(1, 2, 3) == 2 and select(0, 2, 3) == 3
