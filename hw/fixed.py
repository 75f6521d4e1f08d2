"""Fixed-point building blocks shared by the vector, activation and attention units.

Each function adds combinational logic to a module and returns the result signal;
each is the hardware form of one :mod:`systolica.numerics` primitive, bit for bit.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned

__all__ = ["INT32_MIN", "INT32_MAX", "sat32", "rshift_round_var", "rshift_round_sat32", "bitlen_u", "exp2_lookup",
           "bitlen_tree", "bitlen_parts", "bitlen_exceeds", "mul_pipe", "delay_line"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def sat32(m: Module, x, name: str):
    """``numerics.sat32``: clamp a signed value to int32."""
    out = Signal(signed(32), name=name)
    m.d.comb += out.eq(Mux(x > INT32_MAX, INT32_MAX, Mux(x < INT32_MIN, INT32_MIN, x)))
    return out


def rshift_round_var(m: Module, x, s, width: int, name: str, max_left: int = 0):
    """``numerics.rshift_round(x, s)`` for a signed ``x`` and a signed shift signal ``s``.

    ``s > 0``: ``(x >> s) + ((x >> (s - 1)) & 1)``, 0 for ``s >= 64`` (as numerics);
    ``s <= 0``: ``x << -s``, with ``-s`` capped at ``max_left`` (the caller knows how far a left
    shift can matter).  The result is ``width`` bits, signed.
    """
    # One barrel shifter, not two: with t = x >> (s - 1) = 2 * (x >> s) + bit, the rounded
    # (x >> s) + bit is (t + 1) >> 1 (floor((2q + b + 1) / 2) = q + b for b in {0, 1}).
    sr1 = Signal(range(63), name=f"{name}_sr1")
    m.d.comb += sr1.eq(Mux(s > 63, 62, Mux(s < 1, 0, s - 1)))
    right = Signal(signed(width), name=f"{name}_r")
    m.d.comb += right.eq(((x >> sr1) + 1) >> 1)
    out = Signal(signed(width), name=name)
    if max_left > 0:
        sl = Signal(range(max_left + 1), name=f"{name}_sl")
        m.d.comb += sl.eq(Mux(s < -max_left, max_left, Mux(s > 0, 0, -s)))
        left = x << sl
    else:
        left = x
    m.d.comb += out.eq(Mux(s > 63, 0, Mux(s > 0, right, left)))
    return out


def rshift_round_sat32(m: Module, x, s, name: str):
    """``sat32(rshift_round(x, s))`` for a signed 64-bit ``x`` and a signed shift ``s``.

    Left shifts of 33 or more places saturate any non-zero ``x``, so they are capped there.
    """
    wide = rshift_round_var(m, x, s, 98, f"{name}_w", max_left=33)
    return sat32(m, wide, name)


def bitlen_u(m: Module, x, width: int, name: str):
    """``numerics.bitlen`` of a non-negative ``width``-bit value: a priority encoder."""
    out = Signal(range(width + 1), name=name)
    m.d.comb += out.eq(0)
    for b in range(width):  # the highest set bit wins: later assignments take priority
        with m.If(x[b]):
            m.d.comb += out.eq(b + 1)
    return out


def exp2_lookup(m: Module, u, ufrac: int, frac_off, base_port, delta_port, name: str):
    """``numerics.exp2_fx(u, ufrac, 30 - frac_off)`` with combinational table ports.

    ``u`` is signed and ``<= 0`` (positive values count as 0, as numerics); ``frac_off`` is
    ``30 - frac`` (a constant or a small signal).  ``base_port`` / ``delta_port`` are
    read ports (``domain="comb"``) of the 256-entry ``EXP_BASE`` / ``EXP_DELTA`` tables.
    """
    uc = Signal(signed(len(u)), name=f"{name}_u")
    m.d.comb += uc.eq(Mux(u > 0, 0, u))
    lob = ufrac - 8
    hi = uc[lob:ufrac]
    lo = uc[0:lob]
    m.d.comb += [base_port.addr.eq(hi), delta_port.addr.eq(hi)]
    p = Signal(unsigned(33), name=f"{name}_p")
    m.d.comb += p.eq(base_port.data + ((delta_port.data * lo) >> lob) + (((delta_port.data * lo) >> (lob - 1)) & 1))
    ip = uc >> ufrac  # <= 0
    sh = Signal(range(41), name=f"{name}_sh")
    m.d.comb += sh.eq(Mux(frac_off - ip > 40, 40, frac_off - ip))
    out = Signal(unsigned(33), name=name)
    m.d.comb += out.eq((p + ((Const(1, 1) << sh) >> 1)) >> sh)
    return out


def bitlen_tree(m: Module, x, width: int, name: str):
    """``numerics.bitlen`` of a non-negative ``width``-bit value, as :func:`bitlen_u`, by a balanced tree.

    Halves are combined pairwise (``log2(width)`` 2:1 multiplexers deep) instead of one priority chain
    of ``width`` multiplexers.
    """
    v, pos = bitlen_parts(m, x, width, name)
    out = Signal(range(width + 1), name=name)
    m.d.comb += out.eq(Mux(v, pos + 1, 0))
    return out


def bitlen_parts(m: Module, x, width: int, name: str):
    """:func:`bitlen_tree` without its last step: ``(v, pos)`` with ``bitlen(x) = v ? pos + 1 : 0`` (``v``: any
    bit set, ``pos``: the highest set bit's index).  A consumer that only compares the bit length with a
    threshold compares ``pos`` with the threshold less one instead, so that no incrementer and select follow
    the tree in its cycle (:func:`bitlen_exceeds`)."""
    k = max(1, (width - 1).bit_length())
    xs = Signal(1 << k, name=f"{name}_x")
    m.d.comb += xs.eq(x[:width])
    # level 0: (any bit set, index of the highest set bit) per bit
    nodes = [(xs[b], Const(0, 0)) for b in range(1 << k)]
    for _ in range(k):
        nxt = []
        for j in range(0, len(nodes), 2):
            (vl, pl), (vh, ph) = nodes[j], nodes[j + 1]
            v = Signal(name=f"{name}_v{len(pl)}_{j}")
            pos = Signal(len(pl) + 1, name=f"{name}_p{len(pl)}_{j}")
            m.d.comb += [v.eq(vl | vh), pos.eq(Mux(vh, ph, pl) | (vh << len(pl)) if len(pl) else vh)]
            nxt.append((v, pos))
        nodes = nxt
    return nodes[0]


def bitlen_exceeds(v, pos, thr):
    """``bitlen > thr`` for the bit length ``(v, pos)`` of :func:`bitlen_parts` (``thr`` may be negative):
    ``pos + 1 > thr`` where any bit is set, else ``0 > thr``."""
    return Mux(v, pos >= thr, thr < 0)


def _chunks(x, signed_: bool):
    """18-bit signed pieces of ``x`` (low pieces: 17 bits zero-extended) and their bit offsets."""
    w = len(x)
    pieces = []
    lo = 0
    while True:
        rest = w - lo
        if (signed_ and rest <= 18) or (not signed_ and rest <= 17):
            top = x[lo:]
            pieces.append(((top.as_signed() if signed_ else Cat(top, Const(0, 1)).as_signed()), lo))
            return pieces
        pieces.append((Cat(x[lo:lo + 17], Const(0, 1)).as_signed(), lo))
        lo += 17


def mul_pipe(m: Module, en, a, b, name: str):
    """``a * b`` through registers: one 18 x 18 product a piece (one ECP5 MULT18X18D / DSP48 each),
    then one add a stage.

    ``a`` and ``b`` should be registers (the multiplier's operands).  Stage 1 registers the partial
    products of the 18-bit pieces, stage 2 (where ``b`` has two pieces) adds them per piece of ``a``,
    stage 3 (where ``a`` has two pieces) adds those.  Every stage loads while ``en`` is high.
    Returns ``(product, latency)``: the product is ``len(a) + len(b)`` bits, signed when either is.
    """
    sa, sb = a.shape().signed, b.shape().signed
    pa, pb = _chunks(a, sa), _chunks(b, sb)
    assert len(pa) <= 2 and len(pb) <= 2, (name, len(a), len(b))
    width = len(a) + len(b) + 1
    rows = []
    for i, (ca, oa) in enumerate(pa):
        row = []
        for j, (cb, ob) in enumerate(pb):
            pp = Signal(signed(36), name=f"{name}_pp{i}{j}", reset_less=True)
            with m.If(en):
                m.d.sync += pp.eq(ca * cb)
            row.append((pp, ob))
        rows.append((row, oa))
    lat = 1
    if len(pb) > 1:
        lat += 1
        nrows = []
        for i, (row, oa) in enumerate(rows):
            s = Signal(signed(width), name=f"{name}_row{i}", reset_less=True)
            with m.If(en):
                m.d.sync += s.eq(row[0][0] + (row[1][0] << row[1][1]))
            nrows.append(([(s, 0)], oa))
        rows = nrows
    if len(pa) > 1:
        lat += 1
        s = Signal(signed(width), name=f"{name}_sum", reset_less=True)
        with m.If(en):
            m.d.sync += s.eq(rows[0][0][0][0] + (rows[1][0][0][0] << rows[1][1]))
        prod = s
    else:
        prod = rows[0][0][0][0]
    out = Signal((signed if (sa or sb) else unsigned)(len(a) + len(b)), name=name)
    m.d.comb += out.eq(prod)
    return out, lat


def delay_line(m: Module, en, x, stages: int, name: str):
    """``x`` carried along ``stages`` reset-less registers that move when ``en`` is high (a pipeline's
    side values: they travel with its stages and need no reset)."""
    for j in range(stages):
        r = Signal.like(x, name=f"{name}_{j}", reset_less=True)
        with m.If(en):
            m.d.sync += r.eq(x)
        x = r
    return x
