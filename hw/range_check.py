"""The decoder's range checks, evaluated from the formulas of :mod:`systolica.layout` on one shared multiplier.

The operand extents (:data:`systolica.layout.EXTENTS`) and the DMA contract (``dma_lines``, ``dma_end``)
are plain arithmetic.  The decoder does not re-type them: it calls them on symbolic fields (:class:`Sym`),
which records each formula as an expression tree, and :class:`Lowering` turns that tree into Amaranth
values.  Every product of two non-constant operands wider than two bits becomes a *product slot*: a
register that the decoder fills, one product per cycle, from a single shared multiplier (a few DSP
slices instead of one multiplier per product).  Everything else stays combinational around those
registers: sums, constant multiples (shifts for powers of two), shifts by a field, selects, and
products by a 1- or 2-bit value (a few adders).  A sum that adds product slots to terms of the fields alone
(LOAD / STORE's DMA end: ``dram + rows * stride - stride + lines * bytes``) is re-associated by
:meth:`Lowering.split_sum`: the field terms are summed a cycle ahead in a register of their own (the word holds
still from TAKE on, the slots are written later), so one adder follows the slots, not a chain of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from amaranth.hdl import Const, Mux, Signal, Value

__all__ = ["Sym", "sym_fields", "Lowering", "SLOT_BITS"]

SLOT_BITS = 64  # width of a product register; readers use only the product's own width (Yosys trims the rest)


class Sym:
    """A symbolic value in a layout formula: a field, or an operation on symbolic values and ints."""

    __slots__ = ("kind", "args", "key")
    __hash__ = None  # ``==`` builds a node; memoize on :attr:`key`

    def __init__(self, kind: str, *args):
        self.kind, self.args = kind, args
        self.key = (kind, *(a.key if isinstance(a, Sym) else ("int", a) if isinstance(a, int) else a
                            for a in args))

    def _op(kind):  # a factory for the operator methods below
        return lambda self, other: Sym(kind, self, _check(other))

    def _rop(kind):
        return lambda self, other: Sym(kind, _check(other), self)

    def __add__(self, other):
        if isinstance(other, int):  # fold constants: (n + 8) - 1 is n + 7, which stays unsigned
            base, c = (self.args[0], self.args[1]) if self.kind == "add" and isinstance(self.args[1], int) \
                else (self, 0)
            c += other
            return base if c == 0 else Sym("add", base, c) if c > 0 else Sym("sub", base, -c)
        return Sym("add", self, _check(other))

    def __sub__(self, other):
        return self + -other if isinstance(other, int) else Sym("sub", self, _check(other))

    __radd__, __rsub__ = __add__, _rop("sub")
    __mul__, __rmul__ = _op("mul"), _rop("mul")
    __floordiv__, __rfloordiv__ = _op("floordiv"), _rop("floordiv")
    __lshift__, __rlshift__ = _op("lshift"), _rop("lshift")
    __eq__, __ne__ = _op("eq"), _op("ne")
    del _op, _rop

    def mux(self, a, b) -> Sym:
        """``a`` if this value is non-zero else ``b`` (what :func:`systolica.layout.select` calls)."""
        return Sym("select", self, _check(a), _check(b))

    def __bool__(self):
        raise TypeError("a layout formula branches on a field value (Python `if`, `and`, `or`, min/max): the "
                        "hardware cannot evaluate it; write it with systolica.layout.select and arithmetic")

    def __repr__(self):
        return f"Sym{self.key!r}"


def _check(x):
    if isinstance(x, (Sym, int)):
        return x
    raise TypeError(f"a layout formula mixes a field with {type(x).__name__} {x!r}; only ints and fields work")


def sym_fields(names) -> dict[str, Sym]:
    """Symbolic values for the fields ``names`` of an op."""
    return {n: Sym("field", n) for n in names}


def _pow2(c: int) -> bool:
    return c > 0 and c & (c - 1) == 0


class Lowering:
    """Amaranth values for traced formulas of one op, with its products on shared slot registers.

    ``fields`` maps field names to the Amaranth values of the decoded word; ``slots`` is the list of
    product registers shared by all ops (extended as needed).  After lowering, :attr:`products` holds
    the operands ``(a, b)`` of slot ``j`` in the order they must be computed: the operands of a product
    may use the slots before it, never after.
    """

    def __init__(self, fields: Mapping[str, Value], slots: list[Signal], name: str = ""):
        self.fields = fields
        self.slots = slots
        self.name = name
        self.products: list[tuple[Value, Value]] = []
        self._memo: dict[tuple, Any] = {}
        self._slotted: set[tuple] = set()  # keys of the formulas whose value reads a product slot

    def split_sum(self, x, early: Callable[[Value], Value]):
        """The value of ``x`` with its terms re-associated: where ``x`` is a sum (``+`` / ``-`` at its top) of
        terms that read product slots and terms that do not, the latter are summed by themselves and handed to
        ``early`` (which registers them: they are ready before the slots are) and the result is that register
        plus the slot terms.  The same number as ``self(x)``: Amaranth's sums are exact (they widen), so the
        order of the additions does not change the value."""
        terms = _terms(x)
        vals = [(sign, self(t)) for sign, t in terms]
        slotted = [isinstance(t, Sym) and t.key in self._slotted for _, t in terms]
        late = [sv for sv, sl in zip(vals, slotted, strict=True) if sl]
        free = [sv for sv, sl in zip(vals, slotted, strict=True) if not sl]
        if not late or len(free) < 2:  # nothing to move ahead, or one field term: no adder to save
            return self(x)
        out = early(_signed_sum(free))
        for sign, v in late:
            out = out + v if sign > 0 else out - v
        return out

    def __call__(self, x):
        """The Amaranth value (or int) of a traced formula ``x``."""
        if isinstance(x, int):
            return x
        hit = self._memo.get(x.key)
        if hit is None:
            n = len(self.products)
            hit = self._memo[x.key] = self._lower(x)
            if len(self.products) > n or any(isinstance(a, Sym) and a.key in self._slotted for a in x.args):
                self._slotted.add(x.key)
        return hit

    def _lower(self, x: Sym):
        if x.kind == "field":
            return self.fields[x.args[0]]
        if x.kind == "mul":  # x * select(c, k1, k2) with constant k1, k2 is select(c, x * k1, x * k2): no multiplier
            for s, other in (x.args, x.args[::-1]):
                if isinstance(s, Sym) and s.kind == "select" and all(isinstance(k, int) for k in s.args[1:]):
                    c, k1, k2 = s.args
                    return Mux(self(c), self(Sym("mul", other, k1)), self(Sym("mul", other, k2)))
        args = [self(a) for a in x.args]
        if all(isinstance(a, int) for a in args):  # constant folding (cannot happen with fields, kept for safety)
            return _FOLD[x.kind](*args)
        if x.kind == "select":
            return Mux(*args)
        a, b = args
        if x.kind == "mul":
            return self._mul(a, b)
        if x.kind == "floordiv":
            if not isinstance(b, int) or b <= 0:
                raise TypeError(f"{self.name}: division by a non-constant or non-positive value {b!r}")
            return Value.cast(a).shift_right(b.bit_length() - 1) if _pow2(b) else a // b
        if x.kind == "lshift" and isinstance(a, int):
            a = Const(a)
        return _FOLD[x.kind](a, b)

    def _mul(self, a, b):
        if isinstance(b, int):
            a, b = b, a
        if isinstance(a, int):  # a constant multiple: a shift for powers of two
            if a == 0:
                return 0
            return Value.cast(b).shift_left(a.bit_length() - 1) if _pow2(a) else b * a
        a, b = Value.cast(a), Value.cast(b)
        if a.shape().signed or b.shape().signed:
            raise TypeError(f"{self.name}: signed product {a!r} * {b!r}; the shared multiplier is unsigned")
        if len(a) > len(b):
            a, b = b, a
        if len(a) <= 2:  # by a 1- or 2-bit value: one or two adders, no multiplier
            return sum((Mux(a[i], b << i, 0) for i in range(len(a))), Const(0, len(b) + len(a)))
        width = len(a) + len(b)
        if width > SLOT_BITS:
            raise ValueError(f"{self.name}: a {len(a)} x {len(b)}-bit product does not fit a {SLOT_BITS}-bit slot")
        j = len(self.products)
        self.products.append((a, b))
        if j == len(self.slots):
            self.slots.append(Signal(SLOT_BITS, name=f"product{j}", reset_less=True))
        return self.slots[j][:width]


def _terms(x) -> list[tuple[int, Any]]:
    """``x`` as signed terms of its top-level ``+`` / ``-`` nodes: ``[(+1 or -1, term), ...]``."""
    if isinstance(x, Sym) and x.kind in ("add", "sub"):
        a, b = x.args
        tb = _terms(b)
        return _terms(a) + (tb if x.kind == "add" else [(-sign, t) for sign, t in tb])
    return [(1, x)]


def _signed_sum(terms):
    """The sum of ``[(sign, value), ...]`` (values or ints), in order."""
    out = Const(0, 1)
    for sign, v in terms:
        out = out + v if sign > 0 else out - v
    return out


_FOLD: dict[str, Callable] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "lshift": lambda a, b: a << b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "select": lambda c, a, b: a if c else b,
}
