"""A pipelined multiplier in logic (LUTs and carry chains), for narrow products that should not take a DSP.

ECP5 has 156 MULT18X18D for the whole 8x8 accelerator; a product with one narrow operand (an int8, say)
costs few LUTs as shift-and-add partial products, so Yosys is given no ``$mul`` to map to a multiplier.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned

__all__ = ["lut_mul"]


def lut_mul(m: Module, en, a, b, name: str, a3=None, na=None):
    """``a * b`` in radix 4: ``b``'s 2-bit digits each select a multiple of ``a``, summed by a tree of one add a stage.

    ``a`` and ``b`` should be registers (the operands); ``b`` is the narrow one (its width sets the
    depth: ``ceil(log2(len(b)))`` stages, at least one).  Digit ``j`` (bits ``2j + 1 .. 2j``) selects ``0, a, 2a,
    3a``; a signed ``b``'s top digit weighs ``-2 b[2j+1] + b[2j]`` and selects ``0, a, -2a, -a`` (a lone top bit
    of an odd-width ``b``: ``0`` or ``-a``, or ``a`` unsigned).  ``3a`` (and ``-a``, ``-2a``) is one adder that
    every product of the same ``a`` shares (Yosys merges identical cells).  Stage 1 registers the selected terms,
    half as many as ``b``'s bits; each later stage adds them in pairs.  Every stage loads while ``en`` is high.
    Returns ``(product, latency)``: the product is ``len(a) + len(b)`` bits, signed when either is.

    ``a3``: ``3 * a`` from a register of its own, loaded with ``a`` (of the signedness of ``a``), instead of the
    shared adder: products of one ``a`` spread over a wide line then fan out from a register, not from an adder
    behind ``a``'s register (the attention unit's p.v lanes: that adder and its routing to eight lanes were the
    attention sequencer's slowest path on ECP5).  ``na``: ``-a`` the same way (signed), for a signed ``b``'s top
    digit (``-a``, ``-2a``).
    """
    sa, sb = a.shape().signed, b.shape().signed
    wa, wb = len(a), len(b)
    width = wa + wb + 1  # every partial sum fits (signed, one bit of margin)
    a_s = a.as_signed() if sa else Cat(a, Const(0, 1)).as_signed()  # all arithmetic below is signed
    if a3 is None:
        a3_s = a_s + (a_s << 1)
    elif sa:
        a3_s = a3.as_signed()
    else:
        a3_s = Cat(a3, Const(0, 1)).as_signed()
    na_s = -a_s if na is None else na.as_signed()

    def reg(val, tag):
        s = Signal(signed(width), name=f"{name}_{tag}", reset_less=True)
        with m.If(en):
            m.d.sync += s.eq(val)
        return s

    terms = []  # (register, bit offset)
    for j in range(0, wb, 2):
        top = j + 2 >= wb
        if j + 1 < wb:
            d1, d0 = b[j + 1], b[j]
            if top and sb:
                val = Mux(d1, Mux(d0, na_s, na_s << 1), Mux(d0, a_s, 0))
            else:
                val = Mux(d1, Mux(d0, a3_s, a_s << 1), Mux(d0, a_s, 0))
        else:  # the lone top bit of an odd-width b
            val = Mux(b[j], na_s if sb else a_s, 0)
        terms.append((reg(val, f"d{j // 2}"), j))
    lat = 1
    while len(terms) > 1:
        nxt = []
        for k in range(0, len(terms), 2):
            x, ox = terms[k]
            val = x + (terms[k + 1][0] << (terms[k + 1][1] - ox)) if k + 1 < len(terms) else x
            nxt.append((reg(val, f"s{lat}_{k // 2}"), ox))
        terms = nxt
        lat += 1
    (s, off) = terms[0]
    out = Signal((signed if (sa or sb) else unsigned)(wa + wb), name=name)
    m.d.comb += out.eq(s << off)
    return out, lat
