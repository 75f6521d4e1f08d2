"""Products by a constant in LUTs: shift-and-add over the constant's signed digits, one add a stage.

ECP5's 18x18 multipliers (MULT18X18D) are the 85F's scarcest resource; a product of a ~30-bit
value by a ~30-bit constant takes four of them.  :func:`const_mul` forms it instead from the
constant's canonical signed-digit form (no two adjacent non-zero digits): the shifted copies of
``x`` for the positive digits and those for the negative digits are summed pairwise in two balanced
trees, one add a stage, and the root subtracts the negative sum from the positive one.  No ``$mul``
cell is left for Yosys to map to a DSP.

:func:`systolica.hw.lut_mul.lut_mul` is its counterpart for two variables (partial products of the
narrow operand's bits, for the attention unit's p.V); a constant needs no partial product for its zero
digits, and its signed digits halve the adds, which is why this one stays separate.
"""

from __future__ import annotations

from amaranth import Const, signed

from .line_unit import Stages

__all__ = ["csd", "const_mul", "const_mul_latency"]


def csd(k: int) -> list[tuple[int, int]]:
    """Canonical signed digits of ``k``: ``[(shift, +1 or -1), ...]`` with ``k == sum(d << s)``."""
    digits, s = [], 0
    while k:
        if k & 1:
            d = 2 - (k & 3)  # +1 when k = 1 mod 4, -1 when k = 3 mod 4: the rest is then a multiple of 4
            digits.append((s, d))
            k -= d
        k >>= 1
        s += 1
    return digits


def _depth(n: int) -> int:
    """Stages of a pairwise tree over ``n`` terms (0 for one term: the terms are wires of ``x``)."""
    return max(0, (n - 1).bit_length())


def const_mul_latency(k: int) -> int:
    """Stages :func:`const_mul` takes for the constant ``k`` (at least 1: the result is a register)."""
    digits = csd(k)
    pos = sum(1 for _, d in digits if d > 0)
    neg = len(digits) - pos
    if not pos or not neg:
        return max(1, _depth(max(pos, neg)) + (1 if neg else 0))
    return max(_depth(pos), _depth(neg)) + 1


def const_mul(st: Stages, x, k: int, name: str):
    """``x * k`` for a registered signed ``x`` and an integer constant ``k``, after
    :func:`const_mul_latency` stages of ``st`` (a signed register of ``len(x) + bitlen(|k|) + 1`` bits)."""
    if k == 0:
        raise ValueError(f"{name}: a product by 0 needs no multiplier")
    x = x.as_signed()
    width = len(x) + abs(k).bit_length() + 1
    shape = signed(width)
    digits = csd(k)
    trees = []
    for sign in (1, -1):
        nodes = [x << s for s, d in digits if d == sign]
        level = 0
        while len(nodes) > 1:
            tag = f"{name}_{'pn'[sign < 0]}{level}"
            # an odd node out waits a stage in a register, to meet the sums of its level at the next
            nodes = [st.reg(nodes[j] + nodes[j + 1], f"{tag}_{j // 2}", shape) for j in range(0, len(nodes) - 1, 2)] \
                + [st.reg(v, f"{tag}_odd", shape) for v in nodes[len(nodes) - len(nodes) % 2:]]
            level += 1
        trees.append((nodes[0], level) if nodes else None)
    pos, neg = trees
    if neg is None:  # only positive digits: the tree's root, or x << s as a register
        v, lv = pos
        return v if lv else st.reg(v, f"{name}_p", shape)
    depth = max(neg[1], pos[1] if pos else 0)
    nv = st.delay(neg[0], depth - neg[1], f"{name}_nd", shape) if depth > neg[1] else neg[0]
    if pos is None:
        return st.reg(Const(0, shape) - nv, f"{name}_p", shape)
    pv = st.delay(pos[0], depth - pos[1], f"{name}_pd", shape) if depth > pos[1] else pos[0]
    return st.reg(pv - nv, f"{name}_p", shape)
