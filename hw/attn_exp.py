"""The attention unit's ``exp2`` pipelines (hw/attention_unit.py): one per query row, shared by the
rescale ``a = exp2_fx(m - m1, 20, 30)`` (state A) and the weights ``p_j = exp2_fx(u_j - m1, 20, 28)``
(the V phase), bit-exact with :func:`systolica.numerics.exp2_fx`; in V beside ``p_j`` also ``d_j = exp2_fx(u_j -
m1, 20, 28, down=max(-vexp_j, 0))``, the weight with V's exponent applied (a second shift of the same E4 value).

Stages, one operation each (for ECP5 at 100 MHz): X1 the operand ``x`` (``m`` or the score read from
block RAM) registered; X2 ``d = x - m1`` and ``x > m1``; E0 the clamp ``min(d, 0)`` (and the tables' block RAMs,
a pair a pipeline, read at that address); E1 the table values registered and ``fo - (u >> 20)``; E1B the table
values registered again (the multipliers' operands: not straight from a block RAM); E2 the shift's cap at
40 and ``delta * lo`` (the 18 x 18 pieces); E3 the product; E4 ``base + rsr(delta * lo, 12)`` (one add:
``base`` sits above the rounding constant) and the shift's rounding bit decoded; E5 their sum; then the
caller's next register takes the shift.

``x - m1`` is not saturated to int32 as numerics saturates ``m - m1``: values below ``-40 * 2**20``
give 0 either way (the shift is capped at 40 places, past every ``base + rsr(..)`` < 2**33).
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import memory

from .fixed import mul_pipe
from .word_regs import stage_reg

__all__ = ["EXP_STAGES", "exp2_pipelines"]

#: stages X1, X2, E0, E1, E1B, E2 .. E5 (the caller's V1 register takes the shift)
EXP_STAGES = 9


def exp2_pipelines(m: Module, tag_layout, e_in, xs, m1s, suffix, down_field: str | None = None, down_of=None):
    """Builds the tags' shift register and one pipeline per row.

    ``e_in`` is the tag entering X1 (its ``fo`` field: ``30 - frac``); ``xs[r]`` / ``m1s[r]`` row ``r``'s
    operand and running maximum (``x`` is registered in X1; ``m1`` must hold still while a value is in
    X2).  Returns ``(tags, results, downs)``: the tags of the stages X1 .. E5 (``tags[-1]`` is E5), and per
    row the result as it leaves E5 (combinational: E5's value shifted).  With ``down_field`` (a tag field
    holding ``30 - frac + down``) ``downs`` holds per row a second result beside it, the same power with
    that shift instead (``exp2_fx(.., frac, down)``: one rounding of E4's ``p``); else ``downs`` is empty.
    ``down_of``: the down field as a function of X1's tag, loaded into X2's (X1's own is then not read), for a
    field that would otherwise be logic between the caller's inputs and X1.
    """
    from systolica.numerics import EXP_BASE, EXP_DELTA

    tags = [stage_reg(tag_layout, f"exp_s{s}") for s in range(EXP_STAGES)]  # only the valid bits reset
    m.d.sync += [tags[0].eq(e_in)] + [tags[s + 1].eq(tags[s]) for s in range(EXP_STAGES - 1)]
    if down_of is not None:
        m.d.sync += tags[1][down_field].eq(down_of(tags[0]))
    fo2 = tags[2].fo  # E0's tag: the row's frac offset as the value enters E1
    fd2 = tags[2][down_field] if down_field else None
    results, downs = [], []
    for r, (x, m1) in enumerate(zip(xs, m1s, strict=True)):
        def reg(name, shape, r=r):
            return Signal(shape, name=f"exp_{name}{suffix(r)}", reset_less=True)
        # the tables a pipeline: block RAM read synchronously at the address u0 takes (its D input), so the data
        # is there while u0 holds it, as a combinational read of u0 would be (as logic, one copy a read port, the
        # two tables were ~400 LUT a pipeline); EXP_DELTA < 2**23: stored at its width
        rom = {"ram_style": "block"}
        base = memory.Memory(shape=unsigned(32), depth=256, init=[int(v) for v in EXP_BASE], attrs=rom)
        delta = memory.Memory(shape=unsigned(max(int(v) for v in EXP_DELTA).bit_length()), depth=256,
                              init=[int(v) for v in EXP_DELTA], attrs=rom)
        m.submodules[f"exp_base{suffix(r)}"], m.submodules[f"exp_delta{suffix(r)}"] = base, delta
        bport, dport = base.read_port(), delta.read_port()
        dw = len(dport.data)
        x1 = reg("x1", signed(32))
        d2, gt2 = reg("x2_d", signed(34)), reg("x2_gt", 1)
        u0 = reg("e0_u", signed(34))
        base1, delta1, lo1 = reg("e1_base", unsigned(32)), reg("e1_delta", unsigned(dw)), reg("e1_lo", unsigned(12))
        shc1 = reg("e1_shc", signed(16))
        base1b, delta1b = reg("e1b_base", unsigned(32)), reg("e1b_delta", unsigned(dw))
        lo1b = reg("e1b_lo", unsigned(12))
        shc1b = reg("e1b_shc", signed(16))
        sh2, base2 = reg("e2_sh", range(41)), reg("e2_base", unsigned(32))
        sh3, base3 = reg("e3_sh", range(41)), reg("e3_base", unsigned(32))
        p4, half4, sh4 = reg("e4_p", unsigned(33)), reg("e4_half", unsigned(41)), reg("e4_sh", range(41))
        # E5 also shifts by the multiples of 8 (the rest, 0..7, after it): the whole 0..40 shift after E5 into `a`
        # and V1's p_j was 10.4 ns on ulx3s ((x >> a) >> b = x >> (a + b))
        pr5, sh5 = reg("e5_p", unsigned(42)), reg("e5_sh_lo", range(8))
        dl3, lat = mul_pipe(m, Const(1, 1), delta1b, lo1b, f"exp_e2_dl{suffix(r)}")  # pieces in E2, sum in E3
        assert lat == 2, lat
        u0_d = Signal(signed(34), name=f"exp_e0_u_d{suffix(r)}")
        m.d.comb += [u0_d.eq(Mux(gt2, 0, d2)), bport.addr.eq(u0_d[12:20]), dport.addr.eq(u0_d[12:20])]
        m.d.sync += [x1.eq(x),
                     d2.eq(x1 - m1), gt2.eq(x1 > m1),
                     u0.eq(u0_d),
                     base1.eq(bport.data), delta1.eq(dport.data), lo1.eq(u0[0:12]), shc1.eq(fo2 - (u0 >> 20)),
                     base1b.eq(base1), delta1b.eq(delta1), lo1b.eq(lo1), shc1b.eq(shc1),
                     sh2.eq(Mux(shc1b > 40, 40, shc1b)), base2.eq(base1b),
                     sh3.eq(sh2), base3.eq(base2),
                     # base + rsr(dl, 12) = (base * 2**12 + 2**11 + dl) >> 12: one add
                     p4.eq((Cat(Const(1 << 11, 12), base3) + dl3) >> 12), half4.eq((Const(1, 1) << sh3) >> 1),
                     sh4.eq(sh3),
                     pr5.eq((p4 + half4) >> Cat(Const(0, 3), sh4[3:])), sh5.eq(sh4[:3])]
        fin = Signal(unsigned(33), name=f"exp_e6_fin{suffix(r)}")
        m.d.comb += fin.eq(pr5 >> sh5)
        results.append(fin)
        if fd2 is not None:  # the second shift: its amount beside the first's, its rounding add beside E5's
            shd1, shd1b = reg("e1_shd", signed(16)), reg("e1b_shd", signed(16))
            shd2, shd3, shd4 = (reg(f"e{k}_shd", range(41)) for k in (2, 3, 4))
            halfd4, prd5 = reg("e4_halfd", unsigned(41)), reg("e5_pd", unsigned(42))
            # the shift by multiples of 8 in E5 behind the rounding add, the rest (0..7) after it: the whole
            # shift after E5 and 3 d_j's add behind it (V1, hw/attention_unit.py) were the attention
            # sequencer's slowest path on ECP5 ((x >> a) >> b = x >> (a + b))
            shd5 = reg("e5_shd_lo", range(8))
            m.d.sync += [shd1.eq(fd2 - (u0 >> 20)), shd1b.eq(shd1), shd2.eq(Mux(shd1b > 40, 40, shd1b)),
                         shd3.eq(shd2), halfd4.eq((Const(1, 1) << shd3) >> 1), shd4.eq(shd3),
                         prd5.eq((p4 + halfd4) >> Cat(Const(0, 3), shd4[3:])), shd5.eq(shd4[:3])]
            fin_d = Signal(unsigned(33), name=f"exp_e6_find{suffix(r)}")
            m.d.comb += fin_d.eq(prd5 >> shd5)
            downs.append(fin_d)
    return tags, results, downs
