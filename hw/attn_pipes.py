"""Two of the attention unit's pipelines (hw/attention_unit.py): the sum of each row's C products in the K
phase, and the ``p . V`` accumulation of the V phase.  Both are one operation a stage, for ECP5 at 100 MHz.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data

from .lut_mul import lut_mul
from .word_regs import stage_reg

__all__ = ["PV_MUL_STAGES", "AddrCopies", "Copies", "k_pipeline", "k_sum_tree", "pv_pipeline"]

PV_MUL_STAGES = 3  # p * v: v's 8 partial products added in pairs (hw/lut_mul.py), or the DSP's M and P stages and a sum


class Copies:
    """``n`` copies of one register (each driving a share of a wide fan-out) that Yosys keeps apart.

    ``opt_merge`` merges flip-flops with the same input and the same init value and reset, bit by bit, so
    copies with differing init values alone share their equal bits (one merged bit drove ~1,300 LUT-RAM
    inputs, measured).  Copy ``c`` holds the value XOR a key (all ones for odd ``c``; the inversion folds
    into the LUTs before and after the register), all-ones init for ``c & 2``, and a reset for ``c & 4``:
    eight variants a bit.  ``copies.get(c)`` is copy ``c``'s value; ``copies[c]`` the register itself."""

    def __init__(self, m: Module, name: str, width: int, n: int):
        self.m, self.width = m, width
        ones = (1 << width) - 1
        self.keys = [ones if c & 1 else 0 for c in range(n)]
        self.regs = [Signal(width, name=f"{name}_{c}", init=ones if c & 2 else 0, reset_less=not c & 4)
                     for c in range(n)]

    def eq(self, value):
        """The assignments that load every copy with ``value`` (each XOR its key)."""
        return [r.eq((value ^ k)[:self.width]) for r, k in zip(self.regs, self.keys, strict=True)]

    def get(self, c: int):
        return (self.regs[c] ^ self.keys[c])[:self.width]

    def __getitem__(self, c: int):
        return self.regs[c]


class AddrCopies(Copies):
    """:class:`Copies` of a memory address, one a lane's memory: copy ``c`` addresses its memory with the
    register itself (XOR its key: odd lanes' memories are addressed in reverse, reads and writes alike), so
    no logic sits between the register and the memory.  The memories need ``2**width`` words (``depth``)."""

    def __init__(self, m: Module, name: str, width: int, n: int):
        super().__init__(m, name, width, n)
        self.depth = 1 << width


def k_sum_tree(m: Module, kp, R: int, C: int, tok_shape, suffix):
    """K1 .. K1+log2(C)-1: the C products ``kp.prod[q][c]`` of each row ``q`` summed in pairs, one add a
    stage, with the line's framing (``v``, ``eot``, ``exp``, ``tok``, ``ok``) alongside.

    Returns ``(tag, sums, stages)``: the last stage's framing, each row's sum (``sums[q]``) and the tags
    of every stage (their valid bits tell when the tree is empty)."""
    ktag_l = data.StructLayout({"v": 1, "eot": 1, "exp": signed(8), "tok": tok_shape, "ok": 1})
    k1, ksum = kp, [[kp.prod[q][c] for c in range(C)] for q in range(R)]
    k_tree = []
    while len(ksum[0]) > 1:
        lvl = len(k_tree)
        t = stage_reg(ktag_l, f"ksum_t{lvl}")
        m.d.sync += [t.v.eq(k1.v), t.eot.eq(k1.eot), t.exp.eq(k1.exp), t.tok.eq(k1.tok), t.ok.eq(k1.ok)]
        nxt = []
        for q in range(R):
            row = []
            for j in range(0, len(ksum[q]), 2):
                sj = Signal(signed(17 + lvl), name=f"ksum{lvl}{suffix(q)}_{j // 2}", reset_less=True)
                m.d.sync += sj.eq(ksum[q][j] + ksum[q][j + 1] if j + 1 < len(ksum[q]) else ksum[q][j])
                row.append(sj)
            nxt.append(row)
        k1, ksum = t, nxt
        k_tree.append(t)
    return k1, [row[0] for row in ksum], k_tree


def k_pipeline(m: Module, p, tok, valid_tok, q_rs, qexp, dot, anyv, R: int, C: int, max_tokens: int, suffix):
    """The K phase, each row at once: K0 the line ``p`` and each row's query line (``q_rs``) registered, KP
    their C products (one MULT18X18D each; KB registers K0 again before them), the sum tree
    (:func:`k_sum_tree`), K2 the dot-product accumulation into ``dot`` (a token's score leaves in ``k2.dot``
    with its shift ``k2.sh``); ``anyv`` is set by a token the mask lets through.  K0 loads every cycle; the
    caller sets ``k0.v`` on a K line.  Returns ``(k0, kp, stages, k2)`` (``stages``: KB and the tree's;
    their valid bits tell when they are empty)."""
    k2 = stage_reg(data.StructLayout({"v": 1, "tok": range(max_tokens + 1), "ok": 1,
                                   "dot": data.ArrayLayout(signed(32), R), "sh": data.ArrayLayout(signed(10), R)}), "k2")
    # K0: the line and each row's query line, registered; KP: their C products (one MULT18X18D each)
    k0 = stage_reg(data.StructLayout({"v": 1, "eot": 1, "exp": signed(8), "tok": range(max_tokens + 1), "ok": 1,
                                   "q": data.ArrayLayout(data.ArrayLayout(signed(8), C), R),
                                   "k": data.ArrayLayout(signed(8), C)}), "k0")
    kp = stage_reg(data.StructLayout({"v": 1, "eot": 1, "exp": signed(8), "tok": range(max_tokens + 1), "ok": 1,
                                   "prod": data.ArrayLayout(data.ArrayLayout(signed(16), C), R)}), "kp")
    m.d.sync += [k0.v.eq(0), k2.v.eq(0)]  # the stages below set them when they hold a line
    # K0's data registers load every cycle (no enable: only k0.v depends on the handshake)
    m.d.sync += [k0.eot.eq(p.eot), k0.exp.eq(p.exp), k0.tok.eq(tok), k0.ok.eq(valid_tok)]
    m.d.sync += [k0.q[q][c].eq(q_rs[q].data[c]) for q in range(R) for c in range(C)]
    m.d.sync += [k0.k[c].eq(p.data[c][0:8]) for c in range(C)]
    # KB: K0 again, the multipliers' operand registers (Yosys puts the query lines in block RAM with K0 as its
    # output register, whose output is slower than a flip-flop's)
    kb = stage_reg(k0.shape(), "kb")
    m.d.sync += kb.eq(k0)
    m.d.sync += [kp.v.eq(kb.v), kp.eot.eq(kb.eot), kp.exp.eq(kb.exp), kp.tok.eq(kb.tok), kp.ok.eq(kb.ok)]
    m.d.sync += [kp.prod[q][c].eq(kb.q[q][c] * kb.k[c]) for q in range(R) for c in range(C)]
    # K1 .. K1+log2(C)-1: the C products of each row summed in pairs, one add a stage
    k1, ksum, k_tree = k_sum_tree(m, kp, R, C, range(max_tokens + 1), suffix)
    with m.If(k1.v):
        with m.If(k1.eot):
            m.d.sync += [k2.v.eq(1), k2.tok.eq(k1.tok), k2.ok.eq(k1.ok)]
            m.d.sync += [k2.sh[q].eq(10 - qexp[q] - k1.exp) for q in range(R)]
        for q in range(R):
            full = Signal(signed(32), name=f"dot_full{suffix(q)}")
            m.d.comb += full.eq(dot[q] + ksum[q])
            with m.If(k1.eot):
                m.d.sync += [dot[q].eq(0), k2.dot[q].eq(full)]
            with m.Else():
                m.d.sync += dot[q].eq(full)
    with m.If(k2.v & k2.ok):
        m.d.sync += anyv.eq(1)
    return k0, kp, [kb, *k_tree], k2


def pv_dsp_mul(m: Module, p, v, name: str):
    """``p * v`` of a 29-bit unsigned ``p`` and an int8 ``v`` (both registers) in :data:`PV_MUL_STAGES` stages on one
    DSP multiplier: ``p[:24] * v`` fits a DSP48's 25 x 18 (its M and P registers are the first two stages),
    ``p[24:] * v`` (5 x 8 bits) is five shifted copies of ``v`` added in logic beside it, and the third stage
    adds the two."""
    def reg(shape, tag, value):
        r = Signal(shape, name=f"{name}_{tag}", reset_less=True)
        m.d.sync += r.eq(value)
        return r
    ph = p[24:29]
    hi_terms = [Mux(ph[i], v.as_signed() << i, 0) for i in range(5)]
    lo1 = reg(signed(33), "lo1", p[:24] * v)
    hi1 = reg(signed(13), "hi1", sum(hi_terms[1:], hi_terms[0]))
    lo2, hi2 = reg(signed(33), "lo2", lo1), reg(signed(13), "hi2", hi1)
    return reg(signed(38), "p", lo2 + (hi2 << 24))


def pv_pipeline(m: Module, v1, pv_ws, pv_rs, R: int, C: int, li_shape, pv_bits: int, suffix,
                wa: AddrCopies, dsp: bool = False):
    """``PV += (d_j * v) << max(min(vexp, 3), 0)`` lane by lane, each row at once, from the V1 register ``v1``.

    ``d_j`` (``v1.d``) is the weight with V's negative exponent already applied (rounded once a token and row in
    the ``exp2`` pipeline, hw/attn_exp.py), so a lane has no rounding shift: P1 .. P3 the products ``d * v`` in
    logic (:func:`~systolica.hw.lut_mul.lut_mul`: v's eight partial products of d added in pairs, one add a
    stage; no multiplier), or with ``dsp`` on one DSP multiplier a lane (:func:`pv_dsp_mul`), P4 the 0..3 left
    shift and the read of PV (the caller keeps the read address at P4's line: ``tags[-3].li`` a cycle ahead),
    P5 the write of PV + the term.  The line in P4 takes P5's new sum instead of the memory's (not written yet)
    when both are one PV address (a head of one line, or the two lines of a token boundary).  The shift's
    decode is registered with the line in P1.  ``v1.li`` is the PV address (shape ``li_shape``: the line of the
    head, or with rows sharing the lanes the row and the line).  ``wa``: the write address registers, one a
    lane (:class:`AddrCopies`).
    Returns ``(tags, busy)``: the tags of P1 .. P5 and whether a line is in V1 .. P5.
    """
    vt_l = data.StructLayout({"v": 1, "li": li_shape, "first": 1, "sl": range(4)})
    NV = PV_MUL_STAGES + 2
    vt = [Signal(vt_l, name=f"pv_s{s}") for s in range(1, NV + 1)]  # P1 .. P5
    ve = v1.exp  # the left shift max(min(e, 3), 0)
    m.d.sync += [vt[0].v.eq(v1.v), vt[0].li.eq(v1.li), vt[0].first.eq(v1.first),
                 vt[0].sl.eq(Mux(ve > 3, 3, Mux(ve < 0, 0, ve)))]
    m.d.sync += [vt[s + 1].eq(vt[s]) for s in range(NV - 1)]
    v_busy = Signal(name="pv_busy")
    m.d.comb += v_busy.eq(Cat(v1.v, *[t.v for t in vt]).any())
    vw, vr = vt[NV - 1], vt[NV - 2]  # P5: the term into PV; P4: the line whose PV is read
    # the write address, one copy a lane (one register would drive every lane's LUT-RAM)
    m.d.sync += wa.eq(vr.li)
    # each lane's selects are copies of their own (one register a select drove ~300-450 LUTs, one per bit of
    # every lane): P3's shift amount (loaded beside the product), and P4's `first` and `fwd` (the line in P4
    # meets P5's not yet written sum: both valid lines of one li)
    n = R * C
    slc = Copies(m, "pv_p3_sl", 2, n)
    first4, fwd = Copies(m, "pv_first4", 1, n), Copies(m, "pv_fwd4", 1, n)
    m.d.sync += slc.eq(vt[PV_MUL_STAGES - 2].sl)
    m.d.sync += first4.eq(vt[NV - 3].first)
    m.d.sync += fwd.eq(vr.v & (vt[NV - 3].li == vr.li))
    for q in range(R):
        m.d.comb += [pv_ws[q][c].addr.eq(wa[c]) for c in range(C)]
        m.d.comb += [pv_ws[q][c].en.eq(vw.v) for c in range(C)]
        for c in range(C):
            def vreg(name, shape, q=q, c=c):
                return Signal(shape, name=f"{name}{suffix(q)}_{c}", reset_less=True)
            # d_j <= p_j = exp2_fx(<= 0, 20, 28) <= 2**28: 29 bits
            if dsp:
                prod = pv_dsp_mul(m, v1.d[q], v1.data[c], f"pv_mul{suffix(q)}_{c}")
            else:
                prod, lat = lut_mul(m, Const(1, 1), v1.d[q], v1.data[c], f"pv_mul{suffix(q)}_{c}", a3=v1.d3[q],
                                    na=v1.dn[q])
                assert lat == PV_MUL_STAGES, lat
            left4 = vreg("pv_p4_left", signed(40))
            term5, acc5 = vreg("pv_p5_term", signed(pv_bits)), vreg("pv_p5_acc", signed(pv_bits))
            new = Signal(signed(pv_bits), name=f"pv_new{suffix(q)}_{c}")
            m.d.comb += new.eq(acc5 + term5)
            k = q * C + c
            m.d.sync += [left4.eq(prod << slc.get(k)), term5.eq(left4),
                         acc5.eq(Mux(first4.get(k), 0, Mux(fwd.get(k), new, pv_rs[q][c].data)))]
            m.d.comb += pv_ws[q][c].data.eq(new)
    return vt, v_busy
