"""GroupScaler: the 4-bit GEMM_STREAM's group scales, between the systolic array and the accumulator.

An int4 GEMM_STREAM (``wfmt`` Q4_0 / Q4_1, :mod:`systolica.numerics_int4`) computes per output column ``c``,
row ``i`` and group ``g`` of 32 weights along K the term

    T = D[c, g] * G + Mn[c, g] * A        (G = sum_{k in g} q' * a, A = sum_{k in g} a; Q4_0: Mn = 0, q' = q - 8)

and adds ``rshift_round(T, gshift)`` into the accumulator line.  The array gives ``G`` of one K line
(``cols`` weights) per activation beat; a group is ``L = 32 / cols`` K lines, so this unit sums ``L`` array
lines per row in a 64-row partial-sum memory (``gi`` < 64 rows, ``wstream4.MAX_ROWS``) before it scales.

**Scale ring.** The weight stream puts each output line's scales ahead of its codes (:mod:`systolica.wstream4`):
per port ``p`` and group ``g`` the ``R = cols / P`` entries of rows ``r`` (array column ``r * P + p``), int16
``D`` then (Q4_1) int16 ``Mn``.  A ring row holds ``W = max(1, P // 2)`` groups of every column (Q4_0 at four
ports brings two groups a beat); a beat writes its entries into one row (granular writes), and each output line
starts a new row.  ``s_ready`` is low while every row holds scales not yet used; a row is freed when the last
array line of its last group passes.  Rows are taken in order, as the array's lines come.

**Pipeline** (one line a cycle, never stalls; only a group's last line leaves): s0 read the partial sums of
row ``gi`` (transparent to their write) and the ring row; s1 ``sum = line + (gfirst ? 0 : partial)``,
written back unless ``glast``; s2 the operands ``G, A, D, Mn``; s3 the products ``D * G`` and ``Mn * A`` (one
DSP each); s4 ``T + 2**gshift / 2``; s5 that ``>> gshift`` (round half up), its low 32 bits to the accumulator
with the line's address and accumulate flag.  Five cycles after the array.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.numerics_int4 import GROUP
from systolica.wstream4 import MAX_ROWS

__all__ = ["GroupScaler", "q4_tag_layout", "PSUM_BITS", "ASUM_BITS"]

PSUM_BITS = 18  # |G| <= 15 * 128 * 32 < 2**16 (signed, with room)
ASUM_BITS = 14  # |A| <= 128 * 32 = 2**12


def q4_tag_layout() -> data.StructLayout:
    """The array tag of a GEMM line: the accumulator's ``addr`` and ``acc`` first (so an int8 line's tag is
    :func:`~systolica.hw.accumulator.acc_tag_layout` in its low bits), then the 4-bit GEMM's group fields."""
    return data.StructLayout({
        "addr": 16, "acc": 1,
        "gfirst": 1,  # the group's first K line: its partial sums start from 0
        "glast": 1,  # the group's last K line: the group's sums are scaled and leave
        "gend": 1,  # ... and the tile's last row: the group's scales are used up
        "lend": 1,  # the output line's last group: its ring row is done even if not full
        "gi": range(MAX_ROWS),  # the activation row: the partial-sum memory's row
    })


class GroupScaler(wiring.Component):
    """Group partial sums and scales of an int4 GEMM_STREAM (module docstring).

    Attributes
    ----------
    start : In(1)
        A GEMM begins: the ring is emptied; ``q41`` (the format is Q4_1: minimums) and ``gshift`` are taken.
    s_valid, s_ready, s_data, s_last : scale beats
        One line of each weight port (``P * cols`` bytes, port ``p`` in bits ``[p * cols * 8, ...)``);
        ``s_last``: the output line's last scale beat.
    i_valid, i_data, i_tag, i_asum : the array's output line (``cols`` int32), its tag (:func:`q4_tag_layout`)
        and the sum of its activations.
    o_valid, o_data, o_addr, o_acc : a scaled group line for the accumulator.
    """

    def __init__(self, cfg: AccelConfig):
        C, P = cfg.cols, cfg.dma_ports
        if C % (2 * P) or C > GROUP or C < 4:
            raise ValueError(f"GroupScaler: cols={C} with dma_ports={P} has no 4-bit datapath "
                             f"(wstream4.config_problem)")
        self.cfg = cfg
        self.P, self.R = P, C // P
        self.W = max(1, P // 2)  # groups a ring row holds: Q4_0 at P ports brings P / 2 groups a beat
        self.ring_rows = max(1, cfg.q4_groups // self.W)
        self.tag = q4_tag_layout()
        super().__init__({
            "start": In(1), "q41": In(1), "gshift": In(4),
            "s_valid": In(1), "s_ready": Out(1), "s_data": In(P * C * 8), "s_last": In(1),
            "i_valid": In(1), "i_data": In(data.ArrayLayout(signed(32), C)), "i_tag": In(self.tag),
            "i_asum": In(signed(ASUM_BITS)),
            "o_valid": Out(1), "o_data": Out(data.ArrayLayout(signed(32), C)), "o_addr": Out(16), "o_acc": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, P, R, W = self.cfg, self.P, self.R, self.W
        C = cfg.cols
        SR = W * R  # entries (slots) of one port in a ring row
        E0, E1 = C // 2, C // 4  # entries a port's scale line holds: Q4_0 (int16 D), Q4_1 (int16 D, int16 Mn)
        rows = self.ring_rows

        q41 = Signal()
        gshift = Signal(4)
        with m.If(self.start):
            m.d.sync += [q41.eq(self.q41), gshift.eq(self.gshift)]

        # ---- the scale ring: row = W groups x C columns x (D, Mn); slot (p, s = w*R + r) at bits (p*SR + s)*32
        ring = memory.Memory(shape=P * SR * 32, depth=rows, init=[])
        m.submodules.ring = ring
        wp = ring.write_port(granularity=32)
        rp = ring.read_port()
        used = Signal(range(rows + 1))  # complete rows not yet used up
        wr_row = Signal(range(rows))
        w_off = Signal(range(SR))  # the beat's first slot in the row (a multiple of its entries a port)
        s_fire = self.s_valid & self.s_ready
        m.d.comb += self.s_ready.eq(used < rows)
        ent = Mux(q41, E1, E0)
        row_done = self.s_last | (w_off + ent == SR)
        m.d.comb += [wp.addr.eq(wr_row), wp.en.eq(0)]
        for p in range(P):
            line = self.s_data[p * C * 8:(p + 1) * C * 8]
            for s in range(SR):
                e0, e1 = s % E0, s % E1
                d0 = line[e0 * 16:e0 * 16 + 16]
                d1 = Cat(line[e1 * 32:e1 * 32 + 16], line[e1 * 32 + 16:e1 * 32 + 32])
                i = p * SR + s
                m.d.comb += wp.data[i * 32:i * 32 + 32].eq(Mux(q41, d1, d0))  # Q4_0: Mn = 0 (the high half)
                hit = Mux(q41, (w_off >> (E1.bit_length() - 1)) == s // E1, (w_off >> (E0.bit_length() - 1)) == s // E0)
                m.d.comb += wp.en[i].eq(s_fire & hit)
        adv_w = Signal()
        m.d.comb += adv_w.eq(s_fire & row_done)
        with m.If(s_fire):
            m.d.sync += w_off.eq(Mux(row_done, 0, w_off + ent))
            with m.If(row_done):
                m.d.sync += wr_row.eq(Mux(wr_row == rows - 1, 0, wr_row + 1))

        # ---- s0: the array's line; read its row's partial sums and the ring row of its group
        pbits = C * PSUM_BITS + ASUM_BITS
        psum = memory.Memory(shape=pbits, depth=MAX_ROWS, init=[])
        m.submodules.psum = psum
        pw = psum.write_port()
        pr = psum.read_port(transparent_for=(pw,))
        t0 = self.i_tag
        rd_row = Signal(range(rows))
        g_w = Signal(range(W))  # the group's slot in the ring row
        m.d.comb += [pr.addr.eq(t0.gi), pr.en.eq(1), rp.addr.eq(rd_row), rp.en.eq(1)]
        adv_r = Signal()
        m.d.comb += adv_r.eq(self.i_valid & t0.gend & ((g_w == W - 1) | t0.lend))
        with m.If(self.i_valid & t0.gend):
            m.d.sync += g_w.eq(Mux(adv_r, 0, g_w + 1))
            with m.If(adv_r):
                m.d.sync += rd_row.eq(Mux(rd_row == rows - 1, 0, rd_row + 1))
        m.d.sync += used.eq(used + adv_w - adv_r)
        with m.If(self.start):  # an empty ring (the previous GEMM used up every row it wrote)
            m.d.sync += [used.eq(0), wr_row.eq(0), w_off.eq(0), rd_row.eq(0), g_w.eq(0)]

        v1 = Signal()
        t1 = Signal(self.tag)
        w1 = Signal(range(W))
        x1 = [Signal(signed(PSUM_BITS), name=f"gl1_{c}") for c in range(C)]
        a1 = Signal(signed(ASUM_BITS))
        m.d.sync += [v1.eq(self.i_valid), t1.eq(t0), w1.eq(g_w), a1.eq(self.i_asum)]
        m.d.sync += [x1[c].eq(self.i_data[c]) for c in range(C)]

        # ---- s1: add the partial sums (a group's first line starts from 0); keep them unless the group ends
        prev = pr.data
        sums = [Signal(signed(PSUM_BITS), name=f"gsum_{c}") for c in range(C)]
        asum = Signal(signed(ASUM_BITS))
        for c in range(C):
            pv = prev[c * PSUM_BITS:(c + 1) * PSUM_BITS].as_signed()
            m.d.comb += sums[c].eq(x1[c] + Mux(t1.gfirst, 0, pv))
        pa = prev[C * PSUM_BITS:].as_signed()
        m.d.comb += asum.eq(a1 + Mux(t1.gfirst, 0, pa))
        m.d.comb += [pw.addr.eq(t1.gi), pw.en.eq(v1 & ~t1.glast), pw.data.eq(Cat(*sums, asum))]
        # the group's scales: slot w1 of the ring row read at s0
        rdat = rp.data
        v2 = Signal()
        G2 = [Signal(signed(PSUM_BITS), name=f"g2_{c}") for c in range(C)]
        D2 = [Signal(signed(16), name=f"d2_{c}") for c in range(C)]
        M2 = [Signal(signed(16), name=f"mn2_{c}") for c in range(C)]
        A2 = Signal(signed(ASUM_BITS))
        addr2, acc2 = Signal(16), Signal()
        m.d.sync += v2.eq(v1 & t1.glast)
        with m.If(v1 & t1.glast):
            m.d.sync += [A2.eq(asum), addr2.eq(t1.addr), acc2.eq(t1.acc)]
            for c in range(C):
                r, p = divmod(c, P)
                slots = [rdat[(p * SR + w * R + r) * 32:(p * SR + w * R + r) * 32 + 32] for w in range(W)]
                sl = slots[0]
                for w in range(1, W):
                    sl = Mux(w1 == w, slots[w], sl)
                m.d.sync += [G2[c].eq(sums[c]), D2[c].eq(sl[:16].as_signed()), M2[c].eq(sl[16:].as_signed())]

        # ---- s2 -> s3: the products (D * G: 16 x 18 bits; Mn * A: 16 x 14 bits), one DSP each
        v3 = Signal()
        p1 = [Signal(signed(34), name=f"dg3_{c}") for c in range(C)]
        p2 = [Signal(signed(30), name=f"ma3_{c}") for c in range(C)]
        addr3, acc3 = Signal(16), Signal()
        m.d.sync += [v3.eq(v2), addr3.eq(addr2), acc3.eq(acc2)]
        m.d.sync += [p1[c].eq(D2[c] * G2[c]) for c in range(C)]
        m.d.sync += [p2[c].eq(M2[c] * A2) for c in range(C)]
        # ---- s3 -> s4: the term T (35 bits) and the rounding bias: rshift_round(T, gshift) = (T + 2**gshift // 2)
        # >> gshift (the bias a register of the instruction's)
        half = Signal(16)
        with m.If(self.start):
            m.d.sync += half.eq((Const(1, 17) << self.gshift) >> 1)
        v4 = Signal()
        T4 = [Signal(signed(36), name=f"t4_{c}") for c in range(C)]
        addr4, acc4 = Signal(16), Signal()
        m.d.sync += [v4.eq(v3), addr4.eq(addr3), acc4.eq(acc3)]
        m.d.sync += [T4[c].eq(p1[c] + p2[c] + half) for c in range(C)]
        # ---- s4 -> s5: the shift alone (four levels of multiplexers), low 32 bits
        v5 = Signal()
        addr5, acc5 = Signal(16), Signal()
        out = [Signal(signed(32), name=f"gout_{c}") for c in range(C)]
        m.d.sync += [v5.eq(v4), addr5.eq(addr4), acc5.eq(acc4)]
        m.d.sync += [out[c].eq((T4[c] >> gshift)[:32]) for c in range(C)]
        m.d.comb += [self.o_valid.eq(v5), self.o_addr.eq(addr5), self.o_acc.eq(acc5)]
        m.d.comb += [self.o_data[c].eq(out[c]) for c in range(C)]
        return m
