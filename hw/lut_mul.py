"""A pipelined multiplier in logic (LUTs and carry chains), for narrow products that should not take a DSP.

ECP5 has 156 MULT18X18D for the whole 8x8 accelerator; a product with one narrow operand (an int8, say)
costs few LUTs as shift-and-add partial products, so Yosys is given no ``$mul`` to map to a multiplier.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned

__all__ = ["lut_mul"]


def lut_mul(m: Module, en, a, b, name: str):
    """``a * b`` as the partial products of ``b``'s bits, summed by a tree of one add a stage.

    ``a`` and ``b`` should be registers (the operands); ``b`` is the narrow one (its width sets the
    depth: ``ceil(log2(len(b)))`` stages, at least one).  Partial product ``i`` is ``a << i`` where bit
    ``i`` of ``b`` is set; a signed ``b``'s top bit weighs ``-2**(len(b) - 1)`` (that partial product is
    subtracted).  Stage 1 forms the partial products and adds them in pairs; each later stage adds
    pairs of the sums before it.  Every stage loads while ``en`` is high.
    Returns ``(product, latency)``: the product is ``len(a) + len(b)`` bits, signed when either is.
    """
    sa, sb = a.shape().signed, b.shape().signed
    wa, wb = len(a), len(b)
    width = wa + wb + 1  # every partial sum fits (signed, one bit of margin)
    a_s = a.as_signed() if sa else Cat(a, Const(0, 1)).as_signed()  # all arithmetic below is signed
    # (value, weight sign, bit offset): the terms still to add
    terms = [(Mux(b[i], a_s, 0), -1 if (sb and i == wb - 1) else 1, i) for i in range(wb)]
    lat = 0
    while len(terms) > 1 or lat == 0:
        nxt = []
        for j in range(0, len(terms), 2):
            s = Signal(signed(width), name=f"{name}_s{lat}_{j // 2}", reset_less=True)
            if j + 1 < len(terms):
                (x, gx, ox), (y, gy, oy) = terms[j], terms[j + 1]
                sh = oy - ox  # oy > ox: offsets grow along the list
                if gx == gy:
                    val, g = x + (y << sh), gx
                elif gy < 0:
                    val, g = x - (y << sh), 1
                else:
                    val, g = (y << sh) - x, 1
            else:
                (x, g, ox) = terms[j]
                val = x
                if g < 0:  # a lone negative term (a 1-bit signed b): negate it here
                    val, g = -x, 1
            with m.If(en):
                m.d.sync += s.eq(val)
            nxt.append((s, g, terms[j][2]))
        terms = nxt
        lat += 1
    (s, g, off) = terms[0]
    out = Signal((signed if (sa or sb) else unsigned)(wa + wb), name=name)
    m.d.comb += out.eq(s << off)
    return out, lat
