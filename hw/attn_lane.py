"""One lane of the attention unit's state-line datapath (hw/attention_unit.py): nine stages, one operation
each, from the registered operands to ``sat32(rsr(x * y [+ ...], s))``.

S0 the operands ``x`` (int32), ``y`` (33 bits), ``pv`` and the shift ``s``; S1 the four <= 18 x 18 partial
products of ``x = xh * 2**16 + xl`` and ``y = yh * 2**17 + yl`` (one MULT18X18D each); S2 two partial sums;
S3 the product; S4 its low 64 bits (``raw``: ATTN_OUT's ``o * y``, the scores) or the roundings of
``o*a >> 30`` and ``PV >> 8`` (the O pass); S5 one value, and the shift decoded; S6 the barrel shift
``val >> (s - 1)`` to 33 bits (or ``val << -s`` to 32) beside ``bitlen(val)``; S7 the rounding and the overflow
flag (from the bit length: no shifter is wider than its result); S8 sat32.  Every stage loads while ``adv`` is high.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed, unsigned

from .fixed import INT32_MAX, INT32_MIN, bitlen_exceeds, bitlen_parts, sat32

__all__ = ["state_lane"]


def state_lane(m: Module, adv, ox, oy, opv, osh, raw, j: int, pv_bits: int):
    """Lane ``j``: ``ox, oy, opv, osh`` are the operands entering S0, ``raw`` the flag of the entry in S4.
    Returns ``(out, product)``: S8's register and S3's (the full 66-bit product)."""
    def reg(name, shape):
        return Signal(shape, name=f"{name}_{j}", reset_less=True)
    x0, y0, pv0, sh0 = reg("ls0_x", signed(32)), reg("ls0_y", unsigned(33)), reg("ls0_pv", signed(pv_bits)), \
        reg("ls0_sh", signed(10))
    # S1: x = xh * 2**16 + xl, y = yh * 2**17 + yl: four products of at most 18 x 18 bits
    pp = [reg(f"ls1_pp{k}", shp) for k, shp in enumerate((unsigned(33), unsigned(32), signed(34), signed(33)))]
    pv1, sh1 = reg("ls1_pv", signed(pv_bits)), reg("ls1_sh", signed(10))
    # S2: two partial sums; S3: the product
    pa2, pb2 = reg("ls2_a", signed(52)), reg("ls2_b", signed(50))
    pv2, sh2 = reg("ls2_pv", signed(pv_bits)), reg("ls2_sh", signed(10))
    prod3 = reg("ls3_prod", signed(66))
    pv3, sh3 = reg("ls3_pv", signed(pv_bits)), reg("ls3_sh", signed(10))
    # S4: the product's low 64 bits (FOUT, scores) or the two rounded terms (O); S5: one value
    raw4, pr4, pvr4 = reg("ls4_raw", signed(64)), reg("ls4_pr", signed(40)), reg("ls4_pvr", signed(50))
    sh4 = reg("ls4_sh", signed(10))
    # S5 also decodes the shift amount (the S6 shifters then take registered amounts)
    val5, sr1_5, sl_5 = reg("ls5_val", signed(64)), reg("ls5_sr1", range(63)), reg("ls5_sl", range(34))
    zero5, pos5 = reg("ls5_zero", 1), reg("ls5_pos", 1)
    # S6: val >> (s - 1) to 33 bits, val << -s to 32, and val's bit length (the two saturation tests need no
    # wide value: the right shift fits 33 bits iff bitlen(val ^ sign) <= s - 1 + 32, the left shift int32 iff
    # val = 0 or bitlen(val ^ sign) <= 31 + s); S7: the rounding and the overflow flag; S8: sat32
    t6, left6 = reg("ls6_t", signed(33)), reg("ls6_left", signed(32))
    # the bit length as its tree's (any bit, top index) pair (hw/fixed.py bitlen_parts): S7 compares the index
    blv6, blp6 = reg("ls6_blv", 1), reg("ls6_blp", unsigned(6))
    rthr6, lthr6 = reg("ls6_rthr", range(96)), reg("ls6_lthr", signed(7))
    zero6, pos6, neg6, nz6 = reg("ls6_zero", 1), reg("ls6_pos", 1), reg("ls6_neg", 1), reg("ls6_nz", 1)
    w7, ovf7, neg7 = reg("ls7_w", signed(33)), reg("ls7_ovf", 1), reg("ls7_neg", 1)
    out8 = reg("ls8_out", signed(32))
    mag5 = Signal(63, name=f"ls6_mag_{j}")
    m.d.comb += mag5.eq(val5[:63] ^ val5[63].replicate(63))
    blv, blp = bitlen_parts(m, mag5, 63, f"ls6_bitlen_{j}")
    sr1 = Signal(range(63), name=f"ls5_sr1c_{j}")
    sl = Signal(range(34), name=f"ls5_slc_{j}")
    m.d.comb += [sr1.eq(Mux(sh4 > 63, 62, Mux(sh4 < 1, 0, sh4 - 1))),
                 sl.eq(Mux(sh4 < -33, 33, Mux(sh4 > 0, 0, -sh4)))]
    xl, xh = x0[:16], x0[16:32].as_signed()
    yl, yh = y0[:17], y0[17:33]
    with m.If(adv):
        m.d.sync += [x0.eq(ox), y0.eq(oy), pv0.eq(opv), sh0.eq(osh),
                     pp[0].eq(xl * yl), pp[1].eq(xl * yh), pp[2].eq(xh * yl), pp[3].eq(xh * yh),
                     pv1.eq(pv0), sh1.eq(sh0),
                     pa2.eq(pp[0] + (pp[2] << 16)), pb2.eq(pp[1] + (pp[3] << 16)), pv2.eq(pv1), sh2.eq(sh1),
                     prod3.eq(pa2 + (pb2 << 17)), pv3.eq(pv2), sh3.eq(sh2),
                     raw4.eq(prod3[:64].as_signed()), pr4.eq((prod3 >> 30) + ((prod3 >> 29) & 1)),
                     pvr4.eq((pv3 >> 8) + ((pv3 >> 7) & 1)), sh4.eq(sh3),
                     val5.eq(Mux(raw, raw4, pr4 + pvr4)), sr1_5.eq(sr1), sl_5.eq(sl),
                     zero5.eq(sh4 > 63), pos5.eq(sh4 > 0),
                     t6.eq(val5 >> sr1_5), left6.eq(val5[:32] << sl_5), blv6.eq(blv), blp6.eq(blp), rthr6.eq(sr1_5 + 32),
                     lthr6.eq(31 - sl_5), zero6.eq(zero5), pos6.eq(pos5), neg6.eq(val5[63]), nz6.eq(val5 != 0),
                     w7.eq(Mux(zero6, 0, Mux(pos6, (t6 + 1) >> 1, left6))),
                     ovf7.eq(~zero6 & Mux(pos6, bitlen_exceeds(blv6, blp6, rthr6),
                                                    nz6 & bitlen_exceeds(blv6, blp6, lthr6))), neg7.eq(neg6),
                     out8.eq(Mux(ovf7, Mux(neg7, INT32_MIN, INT32_MAX), sat32(m, w7, f"ls8_sat_{j}")))]
    return out8, prod3
