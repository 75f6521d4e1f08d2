"""The end of a query row in the attention unit (hw/attention_unit.py): its new running sum ``L``, the shift
``r`` that keeps ``L`` in 21 bits, and the row's new header ``(m, l)``, one step a state (LW .. LN).

Split out of :mod:`~systolica.hw.attention_unit` (the same netlist: these functions build the same signals, with
the same names, in the same states).  Bit-exact with :func:`systolica.numerics.attn_tile`'s end of a row:

- LW: ``rsr(l * a, 30)`` and ``rsr(sum p, 8)``, the two roundings, as ``l * a`` leaves the state-line lanes;
- LX: ``L``, their sum;
- LB, LC: ``bitlen(L)``, each byte's bit length, then the highest non-zero byte's;
- LR: ``r = max(0, bitlen(L) - 21)`` (and ``r - 1`` for the rounding shift);
- LS: ``rsr(L, r) = ((L >> (r - 1)) + 1) >> 1`` for ``r > 0``, and ``m1 + (r << 20)``;
- LN: the new header (``rsr(L, r) < 2**22``: no saturation), or the old state where every token was masked.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed, unsigned

from .attn_state_lines import KIND_LA
from .fixed import bitlen_u, sat32

__all__ = ["ROW_END_STATES", "RowEnd"]

#: the states :meth:`RowEnd.states` fills in, in order (the unit's FSM declares them)
ROW_END_STATES = ("LW", "LX", "LB", "LC", "LR", "LS", "LN")

NG = 7  # bytes of L (56 bits)


class RowEnd:
    """The end-of-row registers; ``r`` (the shift, which the O pass's lanes read), ``m_new`` and ``l_new`` (the
    header) are the outputs."""

    def __init__(self):
        self.r = Signal(range(64), name="r")
        self.big_l = Signal(unsigned(56), name="big_l")  # L of the row in the L states
        self.la_r = Signal(signed(37), name="la_r", reset_less=True)  # its two terms
        self.sp_r = Signal(unsigned(41), name="sp_r", reset_less=True)
        self.gbl = [Signal(range(9), name=f"l_gbl{k}", reset_less=True) for k in range(NG)]  # bitlen of each byte
        self.bl = Signal(range(57), name="bl", reset_less=True)  # bitlen(L)
        self.r_m1 = Signal(range(64), name="r_m1", reset_less=True)
        self.r_zero = Signal(name="r_zero", reset_less=True)
        self.l_t = Signal(unsigned(56), name="l_t", reset_less=True)
        self.m_r = Signal(signed(34), name="m_r", reset_less=True)
        self.m_new, self.l_new = Signal(signed(32), name="m_new"), Signal(signed(32), name="l_new")

    def states(self, m: Module, fsm, *, tag, la, sum_p, m1, m_old, l_old, anyv) -> None:
        """States LW .. LN (then OUTH) of ``fsm`` for the row whose ``l * a`` is ``la`` (valid when ``tag``, the
        lanes' stage-3 tag, carries it), ``sum p`` is ``sum_p``, running maximum ``m1`` and old state
        ``(m_old, l_old)``; ``anyv``: some token of the tile was unmasked."""
        r, big_l, la_r, sp_r, gbl, bl = self.r, self.big_l, self.la_r, self.sp_r, self.gbl, self.bl
        r_m1, r_zero, l_t, m_r, m_new, l_new = self.r_m1, self.r_zero, self.l_t, self.m_r, self.m_new, self.l_new
        # L = rsr(l*a, 30) + rsr(sum p, 8): the two roundings as the product leaves S3, then their sum
        with fsm.state("LW"), m.If(tag.v & (tag.kind == KIND_LA)):
            m.d.sync += [la_r.eq((la + (1 << 29)) >> 30), sp_r.eq((sum_p + (1 << 7)) >> 8)]
            fsm.goto("LX")
        with fsm.state("LX"):
            m.d.sync += big_l.eq(la_r + sp_r)
            fsm.goto("LB")
        with fsm.state("LB"):  # bitlen(L): each byte's, then the highest non-zero byte's
            m.d.sync += [gbl[k].eq(bitlen_u(m, big_l[8 * k:8 * k + 8], 8, f"l_bitlen{k}")) for k in range(NG)]
            fsm.goto("LC")
        with fsm.state("LC"):
            m.d.sync += bl.eq(0)
            for k in range(NG):  # the highest byte wins: later assignments take priority
                with m.If(gbl[k] != 0):
                    m.d.sync += bl.eq(8 * k + gbl[k])
            fsm.goto("LR")
        with fsm.state("LR"):  # r = max(0, bitlen(L) - 21), and r - 1 for the rounding shift
            m.d.sync += [r.eq(Mux(bl > 21, bl - 21, 0)), r_m1.eq(Mux(bl > 22, bl - 22, 0)), r_zero.eq(bl <= 21)]
            fsm.goto("LS")
        with fsm.state("LS"):  # rsr(L, r) = ((L >> (r - 1)) + 1) >> 1 for r > 0; and m1 + (r << 20)
            m.d.sync += [l_t.eq(big_l >> r_m1), m_r.eq(m1 + (r << 20))]
            fsm.goto("LN")
        with fsm.state("LN"):  # the new header (rsr(L, r) < 2**22: no saturation)
            with m.If(anyv):
                m.d.sync += [m_new.eq(sat32(m, m_r, "m_new_sat")), l_new.eq(Mux(r_zero, big_l, (l_t + 1) >> 1))]
            with m.Else():  # every token masked: the state is unchanged
                m.d.sync += [m_new.eq(m_old), l_new.eq(l_old)]
            fsm.goto("OUTH")
