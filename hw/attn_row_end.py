"""The end of a job's query rows in the attention unit (hw/attention_unit.py): each row's new running sum ``L``,
the shift ``r`` that keeps ``L`` in 21 bits, and the row's new header ``(m, l)``: a pipeline of seven stages
(LW .. LN), a row a cycle, so a job's rows end together instead of one after another.

Bit-exact with :func:`systolica.numerics.attn_tile`'s end of a row:

- LW: ``rsr(l * a, 30)`` and ``rsr(sum p, 8)``, the two roundings, as ``l * a`` leaves the state-line lanes (S3);
- LX: ``L``, their sum;
- LB, LC: ``bitlen(L)``, each byte's bit length, then the highest non-zero byte's;
- LR: ``r = max(0, bitlen(L) - 21)`` (and ``r - 1`` for the rounding shift);
- LS: ``rsr(L, r) = ((L >> (r - 1)) + 1) >> 1`` for ``r > 0``, and ``m1 + (r << 20)``; the row's ``r`` is kept
  (the O pass's lanes read it);
- LN: the new header (``rsr(L, r) < 2**22``: no saturation), or the old state where every token was masked; the
  row's ``ready`` flag is set.

Each stage carries a valid bit and the row, and moves on every cycle: the rows' ``l * a`` enter the state-line
lanes a cycle apart (state L) and leave S3 a cycle apart.  Per row the outputs are registers: ``r``, ``m_new``,
``l_new`` and ``ready`` (cleared with ``clear`` before the job's rows enter).
"""

from __future__ import annotations

from amaranth import Array, Module, Mux, Signal, signed, unsigned

from .fixed import bitlen_u, sat32

__all__ = ["ROW_END_STAGES", "RowEnd"]

#: the pipeline's stages, in order
ROW_END_STAGES = ("LW", "LX", "LB", "LC", "LR", "LS", "LN")

NG = 7  # bytes of L (56 bits)


class RowEnd:
    """The end-of-row pipeline for ``rows`` query rows; per row ``r`` (the shift), ``m_new`` and ``l_new`` (the
    header) and ``ready`` (the three are valid) are the outputs."""

    def __init__(self, rows: int):
        R = rows
        self.rows = R
        self.r = [Signal(range(64), name=f"r_row{q}", reset_less=True) for q in range(R)]
        self.m_new = [Signal(signed(32), name=f"m_new_row{q}", reset_less=True) for q in range(R)]
        self.l_new = [Signal(signed(32), name=f"l_new_row{q}", reset_less=True) for q in range(R)]
        self.ready = [Signal(name=f"hdr_ready_row{q}") for q in range(R)]

    def build(self, m: Module, *, la_v, la, la_row, clear, sum_p, m1, m_old, l_old, anyv) -> None:
        """The pipeline: row ``la_row``'s ``l * a`` is ``la`` in a cycle with ``la_v``; ``sum_p``, ``m1``,
        ``m_old`` and ``l_old`` are the rows' (lists), ``anyv`` some token of the tile was unmasked; ``clear``
        resets the rows' ``ready`` flags."""
        R = self.rows

        def stage(name, shape):
            return Signal(shape, name=f"re_{name}", reset_less=True)

        def valid(name):
            return Signal(name=f"re_{name}_v")

        def row(name):
            return Signal(range(R), name=f"re_{name}_row", reset_less=True)
        order = list(ROW_END_STAGES[:-1])  # LN writes the row's own registers: no valid bit or row of its own
        vs = {s: valid(s.lower()) for s in order}
        rows = {s: row(s.lower()) for s in order}
        m.d.sync += [vs["LW"].eq(la_v), rows["LW"].eq(la_row)]
        for a, b in zip(order, order[1:], strict=False):
            m.d.sync += [vs[b].eq(vs[a]), rows[b].eq(rows[a])]

        # LW: L = rsr(l*a, 30) + rsr(sum p, 8): the two roundings as the product leaves S3, then (LX) their sum
        la_r, sp_r = stage("la_r", signed(37)), stage("sp_r", unsigned(41))
        m.d.sync += [la_r.eq((la + (1 << 29)) >> 30), sp_r.eq((Array(sum_p)[la_row] + (1 << 7)) >> 8)]
        big_l = stage("big_l", unsigned(56))  # L (LX), then carried on to LS: LB .. LS use it
        m.d.sync += big_l.eq(la_r + sp_r)
        # LB, LC: bitlen(L): each byte's, then the highest non-zero byte's
        gbl = [stage(f"l_gbl{k}", range(9)) for k in range(NG)]
        big_b = stage("big_l_b", unsigned(56))
        m.d.sync += [gbl[k].eq(bitlen_u(m, big_l[8 * k:8 * k + 8], 8, f"l_bitlen{k}")) for k in range(NG)]
        m.d.sync += big_b.eq(big_l)
        bl, big_c = stage("bl", range(57)), stage("big_l_c", unsigned(56))
        m.d.sync += [bl.eq(0), big_c.eq(big_b)]
        for k in range(NG):  # the highest byte wins: later assignments take priority
            with m.If(gbl[k] != 0):
                m.d.sync += bl.eq(8 * k + gbl[k])
        # LR: r = max(0, bitlen(L) - 21), and r - 1 for the rounding shift
        r, r_m1, r_zero = stage("r", range(64)), stage("r_m1", range(64)), stage("r_zero", 1)
        big_r = stage("big_l_r", unsigned(56))
        m.d.sync += [r.eq(Mux(bl > 21, bl - 21, 0)), r_m1.eq(Mux(bl > 22, bl - 22, 0)), r_zero.eq(bl <= 21),
                     big_r.eq(big_c)]
        # LS: rsr(L, r) = ((L >> (r - 1)) + 1) >> 1 for r > 0; and m1 + (r << 20); the row keeps its r
        l_t, m_r = stage("l_t", unsigned(56)), stage("m_r", signed(34))
        r_zero_s, big_s = stage("r_zero_s", 1), stage("big_l_s", unsigned(22))  # L < 2**21 where r = 0
        m.d.sync += [l_t.eq(big_r >> r_m1), m_r.eq(Array(m1)[rows["LR"]] + (r << 20)), r_zero_s.eq(r_zero),
                     big_s.eq(big_r[:22])]
        # LN: the new header (rsr(L, r) < 2**22: no saturation), or the old state where every token was masked
        m_sat = sat32(m, m_r, "m_new_sat")
        m_n = Mux(anyv, m_sat, Array(m_old)[rows["LS"]])
        l_n = Mux(anyv, Mux(r_zero_s, big_s, (l_t + 1) >> 1), Array(l_old)[rows["LS"]])
        for q in range(R):
            with m.If(vs["LR"] & (rows["LR"] == q)):
                m.d.sync += self.r[q].eq(r)
            with m.If(vs["LS"] & (rows["LS"] == q)):
                m.d.sync += [self.m_new[q].eq(m_n), self.l_new[q].eq(l_n), self.ready[q].eq(1)]
            with m.If(clear):
                m.d.sync += self.ready[q].eq(0)
