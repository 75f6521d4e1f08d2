"""The attention unit's state-line lanes: one pipeline of ``L`` lanes for the O pass of ATTN and for ATTN_OUT.

Split out of :mod:`~systolica.hw.attention_unit` (the same netlist: the function builds the same signals in the
same order).  A state line (``hd/C`` of them a row and tile) enters as ``C / L`` lane groups, a group a cycle;
the groups are kept as they come out and the last completes the output line.  The lanes' multipliers also scale
the K phase's scores (``dot * LOG2E_Q30``) and give state L's ``l * a``, so those products cost no multipliers
of their own (:mod:`~systolica.hw.attn_lane`: stages S0 .. S8).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amaranth import Array, Cat, Const, Mux, Signal, signed, unsigned
from amaranth.lib import data

from .attn_lane import state_lane
from .word_regs import stage_reg

__all__ = ["StateLines", "state_lines", "PV_BITS", "LANE_STAGES", "KIND_SCORE", "KIND_O", "KIND_LA", "KIND_H",
           "row_suffix"]

#: stages of the state-line lanes (S0 operands .. S8 saturation; hw/attn_lane.py)
LANE_STAGES = 9
# what a lane pipeline entry is (O: an O or FOUT lane group; H: a row's header line, which leaves S8 in order with
# the rows' output lines: its lanes compute nothing, S8 puts the row's (m, l) in the line's first two words)
KIND_SCORE, KIND_O, KIND_LA, KIND_H = 0, 1, 2, 3

PV_BITS = 56  # |PV| < 2**50 for t <= 4095 and |v| < 1024 (numerics_attn); 6 bits of margin


def row_suffix(r: int) -> str:
    """The suffix of row ``r``'s signals and memories: none for row 0 (the names of the one-row unit)."""
    return "" if r == 0 else f"_r{r}"


@dataclass
class StateLines:
    """What the attention unit's states use of the lanes: the pipeline's tags, its advance, whether it holds
    anything, state L's issue flag and its product ``l * a``, state OUTH's issue flag, the lane group's last flag,
    the O pass's p.V address of a line, ``line_take`` (the held state line's last group enters: the line is taken),
    and ``state_line(fout)``, which feeds the held state line's groups and returns the condition on which the row's
    last one is taken."""

    tags: list
    adv: Signal
    pipe_busy: Signal
    in_l: Signal
    in_h: Signal
    la: Signal
    last_group: Signal
    pv_line_addr: Callable
    state_line: Callable
    line_take: Signal


def state_lines(m, *, C: int, R: int, L: int, max_tokens: int, p, o, pv_rs, shared: bool, S: int, NP: int, ri,
                li_w: int, row_w: int, fk, anyv, a_o, r_s, k2, l_old_o, u_ws, m1, tk, m_hdr, l_hdr, fy_d, fwait,
                fout) -> StateLines:
    """The state-line lanes of an :class:`~systolica.hw.attention_unit.AttentionUnit` (see the module docstring):
    built into ``m`` from the unit's beat payload ``p``, output stream ``o``, the rows' p.V read ports ``pv_rs``,
    the O pass's row ``ri``, ATTN_OUT's reciprocal's ``fk``, the K pipeline's last stage ``k2`` (its
    scores go through the lanes' multipliers), the rows' score buffers ``u_ws`` and running maxima ``m1``, and
    their new headers ``m_hdr`` / ``l_hdr`` (lists: a header entry leaving S8 puts its row's in the line); ``fy_d``
    is ATTN_OUT's ``y`` (the reciprocal's, or 0) in state FWAIT (flag ``fwait``; ``fout``: state FOUT's flag)."""
    from systolica.numerics import LOG2E_Q30

    # ---- state lines (O pass of ATTN, ATTN_OUT): one pipeline of L lanes, shared by both ---------
    # A state line is hd/C of a row per tile, so it may take C/L cycles: lane group g of the held
    # input line enters the pipeline each cycle, the groups are kept as they come out and the last
    # completes the output line.  The lanes' multipliers also give the scores dot * LOG2E_Q30 of rows
    # 0, 1, ... on lanes L-1, L-2, ... (stage K3, in state K) and l * a on lane 0 (state L), so those
    # products cost no DSP48s of their own.  Stages, one operation each (see LANE_STAGES):
    # S0 operands; S1 the four 16/17-bit partial products (one MULT18X18D each); S2, S3 their sums;
    # S4 the roundings of o*a >> 30 and PV >> 8; S5 their sum; S6 the barrel shift; S7 its rounding;
    # S8 the saturation.  Every stage moves together (``adv``): only a finished output line waiting
    # for ``o.ready`` holds the pipeline.
    G = C // L
    NS = LANE_STAGES
    g = Signal(range(G), name="o_group")
    done_groups = Signal(32 * L * (G - 1), name="o_groups_done", reset_less=True)
    is_fout = Signal()  # the FSM is in FOUT (ATTN_OUT: o * y) rather than O (ATTN: rescale and add p.V)
    pv_lines = [Cat(*[pv_r.data for pv_r in row]) for row in pv_rs]
    # row ri's PV: its set's lanes (shared: ri % S) at its slot (ri // S)
    if shared and S > 1:
        ri_set = Array([Const(r % S, range(S)) for r in range(R)])[ri]
        ri_slot = Array([Const(r // S, range(NP)) for r in range(R)])[ri]
    else:
        ri_set = ri_slot = ri
    pv_o = Array(pv_lines)[ri_set] if len(pv_lines) > 1 else pv_lines[0]

    def pv_line_addr(line):
        """The PV address of the O pass's ``line`` of row ``ri``."""
        return Cat(line[:li_w], ri_slot[:row_w]) if shared else line
    xs = p.data.as_value().word_select(g, 32 * L) if G > 1 else p.data.as_value()
    pvs = pv_o.word_select(g, PV_BITS * L) if G > 1 else pv_o
    fsh = Signal(signed(10))
    m.d.comb += fsh.eq(fk - 16)
    tag_l = data.StructLayout({"v": 1, "kind": 2, "raw": 1, "last": 1, "grp": range(G),
                               "tok": range(max_tokens + 1), "ok": 1, "row": range(R)})
    tags = [stage_reg(tag_l, f"lane_s{s}") for s in range(NS)]  # only the valid bits reset
    iss = Signal(tag_l, name="lane_issue")  # what enters S0 this cycle (iss.v = 0: nothing)
    adv = Signal(name="lane_adv")
    pipe_busy = Signal(name="lane_busy")
    m.d.comb += pipe_busy.eq(Cat(*[t.v for t in tags]).any())
    t_out = tags[NS - 1]
    out_line = Signal(name="lane_out_line")  # S8 holds the last lane group of an output line, or a header
    out_h = Signal(name="lane_out_hdr")
    m.d.comb += [out_h.eq(t_out.v & (t_out.kind == KIND_H)),
                 out_line.eq((t_out.v & (t_out.kind == KIND_O) & (t_out.grp == G - 1)) | out_h),
                 adv.eq(~out_line | o.ready)]
    with m.If(adv):
        m.d.sync += tags[0].eq(iss)
        m.d.sync += [tags[s + 1].eq(tags[s]) for s in range(NS - 1)]
    in_l = Signal()  # state L issues l * a on lane 0 (row ri's)
    in_h = Signal()  # state OUTH issues row ri's header
    la = Signal(signed(66))  # l * a: lane 0's product in S3
    # the O pass's and FOUT's y operand and PV enable, registered a cycle ahead (the FOUT flag and anyv selecting
    # 33 bits of every lane's S0 operand were 10.9 ns on ulx3s): what they select is stable in O and FOUT and in
    # the cycle before (y in FWAIT's last cycle, a and anyv long before O, ri moves only when O ends), so
    # the register holds the same value there; elsewhere the lanes' entries that use them are not issued
    y_sl = Signal(unsigned(33), name="st_y_sl", reset_less=True)
    pv_on = Signal(name="st_pv_on")
    with m.If(fwait):
        m.d.sync += [y_sl.eq(fy_d), pv_on.eq(0)]
    with m.Elif(~fout):
        m.d.sync += [y_sl.eq(Mux(anyv, a_o, 1 << 30)), pv_on.eq(anyv)]
    lanes_out = []
    for j in range(L):
        def reg(name, shape, j=j):
            return Signal(shape, name=f"{name}_{j}", reset_less=True)
        # S0 operands (comb selection, then registered)
        ox, oy = Signal(signed(32), name=f"st_x_{j}"), Signal(unsigned(33), name=f"st_y_{j}")
        opv, osh = Signal(signed(PV_BITS), name=f"st_pv_{j}"), Signal(signed(10), name=f"st_sh_{j}")
        x = xs[32 * j:32 * j + 32].as_signed()
        pvj = pvs[PV_BITS * j:PV_BITS * (j + 1)].as_signed()
        # FOUT: o * y, or 0 when l <= 0; O: rsr(o*a, 30) + rsr(PV, 8) >> r; every token masked: x * 2**30 >> 30 = x
        m.d.comb += [ox.eq(x), oy.eq(y_sl), opv.eq(Mux(pv_on, pvj, 0))]
        with m.If(is_fout):
            m.d.comb += osh.eq(fsh)
        with m.Else():
            m.d.comb += osh.eq(Mux(anyv, r_s, 0))
        srow = L - 1 - j  # the row whose score this lane scales
        if srow < R:
            with m.If(k2.v):
                m.d.comb += [ox.eq(k2.dot[srow]), oy.eq(LOG2E_Q30), osh.eq(k2.sh[srow])]
        if j == 0:
            with m.If(in_l):
                m.d.comb += [ox.eq(l_old_o), oy.eq(a_o)]
        # S0 .. S8 (hw/attn_lane.py)
        out8, prod3 = state_lane(m, adv, ox, oy, opv, osh, tags[4].raw, j, PV_BITS)
        if j == 0:
            m.d.comb += la.eq(prod3)
        lanes_out.append(out8)
        if srow < R:  # the score of row srow (stage K3's end): into the score buffer and the running maximum
            q = srow
            wen = Signal(name=f"score_wen{row_suffix(q)}")
            m.d.comb += wen.eq(t_out.v & (t_out.kind == KIND_SCORE) & t_out.ok)
            m.d.comb += [u_ws[q].addr.eq(t_out.tok), u_ws[q].data.eq(out8), u_ws[q].en.eq(wen)]
            # the running maximum a cycle later, from a register of the score beside m1 (S8 also drives the
            # score buffer and the output line: its compare into m1 was the slowest path, 11 ns of routing);
            # m1 is next read in X2 of state A's rescale, two cycles after its last update here.  The compare is
            # registered beside the score (sc9 > m1, 32 bits, into m1's enable was 10.0 ns on ulx3s): against the
            # m1 of the next cycle, which is sc9 where this cycle updates it (state Q's load of m1 never meets a score)
            sc9 = Signal(signed(32), name=f"score_s9{row_suffix(q)}", reset_less=True)
            wen9 = Signal(name=f"score_w9{row_suffix(q)}")
            gt9 = Signal(name=f"score_gt9{row_suffix(q)}", reset_less=True)
            upd9 = wen9 & gt9
            m.d.sync += [sc9.eq(out8), wen9.eq(wen), gt9.eq(Mux(upd9, out8 > sc9, out8 > m1[q]))]
            with m.If(upd9):
                m.d.sync += m1[q].eq(sc9)
    with m.If(k2.v):  # the scores of every row, one lane each
        m.d.comb += [iss.v.eq(1), iss.kind.eq(KIND_SCORE), iss.raw.eq(1), iss.tok.eq(k2.tok), iss.ok.eq(k2.ok)]
    with m.If(in_l & adv):
        m.d.comb += [iss.v.eq(1), iss.kind.eq(KIND_LA), iss.row.eq(ri)]
    with m.If(in_h & adv):
        m.d.comb += [iss.v.eq(1), iss.kind.eq(KIND_H), iss.row.eq(ri)]
    with m.If(adv & t_out.v & (t_out.kind == KIND_O) & (t_out.grp != G - 1)):
        if G > 1:
            m.d.sync += done_groups.word_select(t_out.grp, 32 * L).eq(Cat(*lanes_out))
    # a header line: the row's (m, l), zeros after them
    hdr_line = Cat(Array(m_hdr)[t_out.row], Array(l_hdr)[t_out.row], *([Const(0, 32 * (C - 2))] if C > 2 else []))
    m.d.comb += [o.payload.last.eq(t_out.last), o.payload.hdr.eq(out_h),
                 o.payload.data.eq(Mux(out_h, hdr_line, Cat(done_groups, *lanes_out)))]
    with m.If(out_line):
        m.d.comb += o.valid.eq(1)
    last_group = Signal(name="o_last_group", init=int(G == 1))  # g == G - 1, a register beside g
    # the held line's last group enters: with G > 1 the beat fed the line's earlier groups and stays valid until
    # it is taken (stream rules), so no handshake is needed (valid & kind into li, the p.V address and the state
    # flags were the unit's slowest paths on ulx3s, 13.1 ns)
    line_take = Signal(name="o_line_take")
    m.d.comb += line_take.eq((last_group if G > 1 else tk["SL"]) & adv)

    def state_line(fout: bool):
        """A state line's lane groups into the pipeline, one a cycle; the line is taken with its last.

        Returns the condition under which the FSM leaves after the row's last state line."""
        m.d.comb += is_fout.eq(fout)
        # only the valid bit depends on the beat's handshake (the tag's fields are don't-cares without it)
        m.d.comb += [iss.kind.eq(KIND_O), iss.raw.eq(fout), iss.last.eq(p.last), iss.grp.eq(g)]
        with m.If(tk["SL"] & adv):
            m.d.comb += iss.v.eq(1)
            m.d.sync += [g.eq(Mux(last_group, 0, g + 1)), last_group.eq(Mux(last_group, G == 1, g == G - 2))]
        return line_take & p.last
    return StateLines(tags, adv, pipe_busy, in_l, in_h, la, last_group, pv_line_addr, state_line, line_take)
