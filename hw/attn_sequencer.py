"""ATTN and ATTN_OUT on the hardware core's :class:`~systolica.hw.attention_unit.AttentionUnit`.

The ``nq`` query rows (a GQA group) go through the tile in jobs of up to ``R =
cfg.attn_rows`` rows (the unit reads each K and V line once for all rows of a job; the
tile stays in the scratchpad for the next job).  Beats of an ATTN job of rows
``r0 .. r0+n-1``, in the unit's contract order:

- ``HDR`` per row: the state line ``state + r`` (``m`` lane 0, ``l`` lane 1; ``init``:
  the empty state ``m = INT32_MIN, l = 0``), ``offset``, ``causal``; ``last`` on the job's last;
- ``Q`` per row: ``hd`` lines ``q + r*hd + li`` (int8 lanes), ``exp`` = lane 0 of ``qexp + r``,
  ``eot`` on the row's last line, ``last`` on the job's;
- ``K``/``V``: ``t*hd`` lines of the tile (``layout.kv_tile``), ``exp`` = lane 0 of the
  token's exponent line, ``eot`` on each token's last line, ``last`` on the tile's;
- ``STATE_O`` per row: the ``hd`` lines of its running output (``init``: zeros), ``last`` on
  each row's last.

The unit answers, row by row, with the new state line, then ``hd`` output lines, written
back in place.  A tile with ``t = 0`` has no K/V beats for the unit to frame, and
its result is the old state unchanged, so those jobs bypass the unit: the state
line (with lanes 2.. cleared) and the ``o`` lines are written back as read.
ATTN_OUT jobs: a ``FIN`` beat (``l``), then the ``hd`` lines of ``o`` -> ``hd`` lines at
``dst + r*hd``.  Beats are read ahead into a FIFO (the unit pauses between phases).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, wiring
from amaranth.lib import enum as aenum
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.isa import OP_BY_NAME, WORD_BITS

from .attention_unit import AttentionUnit, AttnBeat
from .decode import instr_layout
from .word_regs import flag_copies, free_room, lane_mux, word_reg

#: the unit's score buffer in tokens: every tile ATTN can name (its t field is 12 bits: at most 4095)
UNIT_MAX_TOKENS = 4096

__all__ = ["AttnSequencer", "ATTN_OPS"]

ATTN_OPS = ("ATTN", "ATTN_OUT")
#: the beat FIFO's places: a place comes back six cycles after its read (read, its register, data, staged, the
#: FIFO's two stages and the pop), so six keep a beat a cycle flowing
_DEPTH = 6
INT32_MIN = -(1 << 31)


class _Ph(aenum.Enum, shape=3):
    HDR = 0
    Q = 1
    K = 2
    V = 3
    OUT = 4


class AttnSequencer(wiring.Component):
    """Runs one ATTN / ATTN_OUT instruction (``word``) from ``start`` until ``busy`` falls."""

    def __init__(self, cfg: AccelConfig):
        self.cfg = cfg
        self.unit = AttentionUnit(cfg, max_tokens=UNIT_MAX_TOKENS, max_lines=cfg.attn_max_lines)
        C = cfg.cols
        vb = (cfg.vbuf_lines - 1).bit_length()
        sb = (cfg.spad_lines - 1).bit_length()
        super().__init__({
            "start": In(1), "word": In(WORD_BITS), "busy": Out(1),
            "sa_addr": Out(sb), "sa_en": Out(1), "sa_rdata": In(C * 8),  # data lines (q, K, V)
            "sb_addr": Out(sb), "sb_en": Out(1), "sb_rdata": In(C * 8),  # exponent lines
            "va_addr": Out(vb), "va_en": Out(1), "va_rdata": In(C * 32),  # state lines
            "out_addr": Out(vb), "out_en": Out(1), "out_data": Out(C * 32),
        })

    def elaborate(self, platform):
        m = Module()
        C = self.cfg.cols
        m.submodules.unit = u = self.unit
        ins = data.View(instr_layout(), self.word)
        is_out = ins.nop.h.opcode == OP_BY_NAME["ATTN_OUT"].code
        at, ao = ins.attn, ins.attn_out
        nq = Mux(is_out, ao.nq, at.nq)
        hd = Mux(is_out, ao.hd, at.hd)
        state = Mux(is_out, ao.state, at.state)
        bypass = ~is_out & (at.t == 0)
        init = ~is_out & at.init
        # no products of instruction fields (each would be DSP48s): r*hd and o_r*hd are running sums,
        # P*hd a shift, and K/V phases end on their last token's last line.  The word holds still while the
        # sequencer is busy, so what the walk needs of it is registered every cycle (one operation each):
        # the limits the next cycle after start, the tile's bases (two stages) before the K phase (the
        # HDR and Q beats come first)
        def wreg(name, value, shape=None, init=0):
            return word_reg(m, value, name, shape if shape is not None else len(value), init=init, reset_less=True)
        # the walk's compares (tli == hd - 1, tok == t - 1, r == nq - 1, gi == R - 1, and the output's) are
        # flip-flops kept beside their counters, set from the counters' next values: from the start's word, then
        # from these registers (the next value's compare is the counter's own against the limit less 2)
        hd_r = wreg("hd_r", hd)  # the rows' strides: no opcode decode in front of their adders
        hd_m2, hd_one = wreg("hd_m2", hd - 2, signed(8)), wreg("hd_one", hd == 1)
        nq_m2 = wreg("nq_m2", nq - 2, signed(8))
        t_m2, t_one = wreg("t_m2", at.t - 2, signed(14)), wreg("t_one", at.t == 1)
        # the K / V tile's sizes are ATTN's alone (ATTN_OUT and the bypass have no K or V phase): its own field,
        # not the op's multiplexer, so the opcode's decode is not in front of the shift
        php = wreg("php", at.hd << at.page_log2, 21)  # P * hd: lines of K (or V) in the tile layout
        php2p = wreg("php2p", Cat(Const(1, 1), at.hd) << at.page_log2, 22)  # 2 * P * hd + P
        kv_v = wreg("kv_v", at.kv + php, 32)  # the V lines
        kv_ke = wreg("kv_ke", at.kv + (php << 1), 32)  # the K exponent lines
        kv_ve = wreg("kv_ve", at.kv + php2p, 32)  # the V exponent lines
        # the op's flags, registered for every use after the start cycle (the unit's handshake and the walk)
        is_out_r, bypass_r, init_r = wreg("is_out_r", is_out), wreg("bypass_r", bypass), wreg("init_r", init)
        one_row = wreg("one_row", is_out | bypass)  # jobs of one row, straight from HDR to OUT
        # whether the op has lines at all, valid the cycle after start: `active` and `outs` are set at start and
        # fall the next cycle where it is low, and the walk and busy see them ANDed with it, so no test of the
        # word's fields is in front of their flip-flops (flowB active.DI 10.33 ns, outs.DI 10.06 ns)
        any_lines = wreg("any_lines", (nq != 0) & (hd != 0))
        # a copy of bypass for the unit's handshake (bypass_r also selects the 256-bit output line); its other
        # init value keeps Yosys from merging the two.  It and the copies below load from registers (valid two cycles
        # after start: the first beat reaches the FIFO's output five cycles after it): the opcode's decode and t == 0
        # from the instruction word were 10.1 ns on ulx3s
        bypass_2 = ~is_out_r & wreg("t_zero", at.t == 0)
        bypass_h = wreg("bypass_h", bypass_2, init=1)
        # and three more for the output line's 256-bit select, a third of its lanes each: as one flag it was the most
        # congested net of the ulx3s route (docs/boards.md)
        bypass_c = flag_copies(m, bypass_2, 1, "bypass_sel")

        # ---- walk: jobs of up to R rows (r0 .. r0+n-1), phase, row r, line li of K / V (and token j / its
        # line tli; tli is also the line of a row's query or state lines)
        R = self.cfg.attn_rows
        active = Signal()
        r, r0, gi = Signal(6), Signal(6), Signal(range(R))  # row, the job's first row, row within the job
        ph = Signal(_Ph)
        # the phase also one-hot (a flag each, and K-or-V, Q-or-OUT), loaded with ph: the walk's decisions
        # select on flip-flops, not on a decode of ph
        f = {p: Signal(name=f"ph_{p.name.lower()}", init=int(p == _Ph.HDR)) for p in _Ph}
        f_kv, f_qo = Signal(name="ph_kv"), Signal(name="ph_qo")
        groups = ((f_kv, (_Ph.K, _Ph.V)), (f_qo, (_Ph.Q, _Ph.OUT)))

        def goto(p):
            return [ph.eq(p), *[f[x].eq(x == p) for x in _Ph], *[g.eq(p in mem) for g, mem in groups]]

        li = Signal(32)  # line within the K or V phase
        tli = Signal(8)  # line within the token (K, V) or the row (Q, OUT)
        tok = Signal(13)
        # the counters' ends, flip-flops beside them: tli == hd - 1 (the token's or row's last line), tok == t - 1
        # (the tile's last token), r == nq - 1 (the group's last row; r0_last: the job's first row's), gi == R - 1
        # (the job's last).  The compares of the counters behind the phase's end (13 bits of tok against t - 1)
        # were ulx3s's slowest of the walk (flowB tok 10.65 ns, ph 10.63, tli 10.37, active 10.33)
        eot, tok_last = Signal(name="eot"), Signal(name="tok_last")
        r_last, r0_last, gi_last = Signal(name="row_last"), Signal(name="row0_last"), Signal(name="gi_last")
        # the addresses' row parts, kept beside r and r * hd (and their copies at the job's first row r0):
        # the state line state + r, the query's exponent line qexp + r, the query q + r*hd and the state's
        # o lines state + nq + r*hd
        a_st, a_qe = Signal(32, name="a_state"), Signal(32, name="a_qexp")
        a_q, a_o = Signal(32, name="a_q"), Signal(32, name="a_o")
        a_st0, a_qe0, a_q0, a_o0 = (Signal(32, name=f"{x.name}0") for x in (a_st, a_qe, a_q, a_o))
        m.d.sync += active.eq(active & any_lines)  # (the start and the group's end below come later: they win)
        with m.If(self.start):
            m.d.sync += [active.eq(1), r.eq(0), r0.eq(0), gi.eq(0), *goto(_Ph.HDR),
                         li.eq(0), tli.eq(0), tok.eq(0), eot.eq(hd == 1), tok_last.eq(at.t == 1),
                         r_last.eq(nq == 1), r0_last.eq(nq == 1), gi_last.eq(R == 1)]
            m.d.sync += [a_st.eq(state), a_qe.eq(at.qexp), a_q.eq(at.q), a_o.eq(state + nq),
                         a_st0.eq(state), a_qe0.eq(at.qexp), a_q0.eq(at.q), a_o0.eq(state + nq)]
        # the beat FIFO's output is a register (the unit's handshake and payload start at flip-flops)
        m.submodules.q = q = fifo.SyncFIFOBuffered(width=3 + C * 32 + 8 + 2, depth=_DEPTH)
        pending = Signal()
        read = Signal()
        # room in the FIFO for one more beat (level + pending < _DEPTH): a flag beside a count of free places
        # (no adder or compare in front of `read`, which drives ~150 walk registers)
        room = free_room(m, "fifo_room", _DEPTH, read, q.r_rdy & q.r_en)
        # no `~start` term: active & any_lines is low at start (an instruction starts only with every sequencer idle)
        m.d.comb += read.eq(active & any_lines & room)
        # ATTN_OUT and the bypass are jobs of one row; an ATTN job ends at R rows or at the group's last
        job_last = (one_row | r_last | gi_last) if R > 1 else Const(1, 1)
        kv_end = eot & tok_last
        beat_last = (f[_Ph.HDR] & job_last) | (f[_Ph.Q] & eot & job_last) | (f_kv & kv_end) | (f[_Ph.OUT] & eot)
        phase_end = (f[_Ph.HDR] & job_last) | (f_qo & eot & job_last) | (f_kv & kv_end)
        next_row = [r.eq(r + 1), r_last.eq(r == nq_m2), gi.eq(gi + 1), gi_last.eq(gi == R - 2),
                    a_st.eq(a_st + 1), a_qe.eq(a_qe + 1), a_q.eq(a_q + hd_r), a_o.eq(a_o + hd_r)]
        # with one row a job the walk stays on its row until the row's state lines (the job's) are out
        first_row = [r.eq(r0), r_last.eq(r0_last), gi.eq(0), gi_last.eq(0),
                     a_st.eq(a_st0), a_qe.eq(a_qe0), a_q.eq(a_q0), a_o.eq(a_o0)] if R > 1 else []
        job_rows = next_row if R > 1 else []
        kv = at.kv
        # the read addresses and enables are registered (``read_r``): the walk's sums (a_q + tli, kv_ke + tok, ...)
        # and the phase's select reached the buffers' address pins through the compute engine's and the buffers'
        # port multiplexers in one cycle (ulx3s: spad_a_mem 13.2 ns, the top level's slowest after the line FIFO's)
        read_r = Signal(name="read_r")
        va_r = Signal.like(self.va_addr, name="va_addr_r", reset_less=True)
        sa_r = Signal.like(self.sa_addr, name="sa_addr_r", reset_less=True)
        sb_r = Signal.like(self.sb_addr, name="sb_addr_r", reset_less=True)
        m.d.sync += [read_r.eq(read), va_r.eq(Mux(f[_Ph.HDR], a_st, a_o + tli)),
                     sa_r.eq(Mux(f[_Ph.Q], a_q + tli, Mux(f[_Ph.K], kv + li, kv_v + li))),
                     sb_r.eq(Mux(f[_Ph.Q], a_qe, Mux(f[_Ph.K], kv_ke + tok, kv_ve + tok)))]
        m.d.comb += [self.va_addr.eq(va_r), self.va_en.eq(read_r), self.sa_addr.eq(sa_r), self.sa_en.eq(read_r),
                     self.sb_addr.eq(sb_r), self.sb_en.eq(read_r)]
        with m.If(read):
            m.d.sync += [li.eq(li + 1), tli.eq(Mux(eot, 0, tli + 1)), tok.eq(tok + eot),
                         eot.eq(Mux(eot, hd_one, tli == hd_m2))]
            with m.If(eot):
                m.d.sync += tok_last.eq(tok == t_m2)
            with m.If(f[_Ph.HDR]):
                m.d.sync += job_rows
                with m.If(phase_end):
                    m.d.sync += first_row
                    with m.If(one_row):
                        m.d.sync += goto(_Ph.OUT)
                    with m.Else():
                        m.d.sync += goto(_Ph.Q)
            with m.If(f[_Ph.Q]):
                with m.If(eot):
                    m.d.sync += job_rows
                with m.If(phase_end):
                    m.d.sync += [*goto(_Ph.K), *first_row]
            with m.If(f[_Ph.K] & phase_end):
                m.d.sync += goto(_Ph.V)
            with m.If(f[_Ph.V] & phase_end):
                m.d.sync += goto(_Ph.OUT)
            with m.If(f[_Ph.OUT]):
                with m.If(eot):
                    m.d.sync += next_row
                with m.If(phase_end):  # the job's last state line: the next job starts at the next row
                    m.d.sync += [*goto(_Ph.HDR), gi.eq(0), gi_last.eq(R == 1)]
                    if R > 1:
                        m.d.sync += [r0.eq(r + 1), r0_last.eq(r == nq_m2), a_st0.eq(a_st + 1), a_qe0.eq(a_qe + 1),
                                     a_q0.eq(a_q + hd_r), a_o0.eq(a_o + hd_r)]
                    with m.If(r_last):
                        m.d.sync += active.eq(0)
            with m.If(phase_end):
                m.d.sync += [li.eq(0), tli.eq(0), tok.eq(0), eot.eq(hd_one), tok_last.eq(t_one)]
        # the beat, two cycles later with its data (the read's register, then the block RAM's)
        r_ph, r_last, r_eot = Signal(_Ph, name="r_ph"), Signal(name="r_last"), Signal(name="r_eot")
        p_ph, p_last, p_eot = Signal(_Ph), Signal(), Signal()
        m.d.sync += [r_ph.eq(ph), r_last.eq(beat_last), r_eot.eq(eot),
                     pending.eq(read_r), p_ph.eq(r_ph), p_last.eq(r_last), p_eot.eq(r_eot)]
        # the lines go into flip-flops as they come from the block RAMs (``sa_raw`` ..., loaded every cycle:
        # `staged` says a beat is there), the beat's selects after them, into the FIFO's write data: a block
        # RAM's clock-to-data and the line's select reached a register in one cycle (ulx3s: 11.6 ns, 68 endpoints
        # of the nineteenth session's route).  Loaded every cycle, they merge with the other readers' registers of
        # the same port (GEMM's, the vector sequencer's, STORE's) into the block RAM's output register (the ECP5
        # flow's boards/ecp5_absorb.py)
        staged = Signal(name="beat_staged")
        sa_raw = Signal(C * 8, name="sa_raw", reset_less=True)
        sb_raw = Signal(8, name="sb_raw", reset_less=True)
        va_raw = Signal(C * 32, name="va_raw", reset_less=True)
        s_ph, s_last, s_eot = Signal(_Ph, name="s_ph"), Signal(name="s_last"), Signal(name="s_eot")
        s_ext, s_hdr = Signal(name="s_ext"), Signal(name="s_hdr")  # the line's selects, decoded a cycle ahead
        m.d.sync += [staged.eq(pending), sa_raw.eq(self.sa_rdata), sb_raw.eq(self.sb_rdata[:8]),
                     va_raw.eq(self.va_rdata), s_ph.eq(p_ph), s_last.eq(p_last), s_eot.eq(p_eot),
                     s_ext.eq((p_ph == _Ph.Q) | (p_ph == _Ph.K) | (p_ph == _Ph.V)), s_hdr.eq(p_ph == _Ph.HDR)]
        kind = Signal(3)
        with m.Switch(s_ph):
            with m.Case(_Ph.HDR):
                m.d.comb += kind.eq(Mux(is_out_r, AttnBeat.FIN, AttnBeat.HDR))
            with m.Case(_Ph.Q):
                m.d.comb += kind.eq(AttnBeat.Q)
            with m.Case(_Ph.K):
                m.d.comb += kind.eq(AttnBeat.K)
            with m.Case(_Ph.V):
                m.d.comb += kind.eq(AttnBeat.V)
            with m.Case(_Ph.OUT):
                m.d.comb += kind.eq(AttnBeat.STATE_O)
        ext = Cat(*[Cat(sa_raw[8 * c:8 * c + 8], sa_raw[8 * c + 7].replicate(24)) for c in range(C)])
        empty_hdr = Cat(Const(INT32_MIN & 0xFFFF_FFFF, 32), Const(0, 32 * (C - 1)))
        line = Mux(s_ext, ext, Mux(init_r, Mux(s_hdr, empty_hdr, 0), va_raw))
        # the room count covers the two stages: a place is taken at the read and given back at the pop
        # (_DEPTH covers the loop)
        m.d.comb += [q.w_en.eq(staged), q.w_data.eq(Cat(kind, line, sb_raw, s_eot, s_last))]

        # ---- to the unit, or around it (t = 0)
        f_kind = q.r_data[:3]
        f_line = q.r_data[3:3 + C * 32]
        f_exp = q.r_data[3 + C * 32:3 + C * 32 + 8]
        f_eot = q.r_data[3 + C * 32 + 8]
        f_last = q.r_data[3 + C * 32 + 9]
        ip = u.i_stream.payload
        m.d.comb += [u.i_stream.valid.eq(q.r_rdy & ~bypass_h), ip.kind.eq(f_kind), ip.data.eq(f_line),
                     ip.exp.eq(f_exp), ip.eot.eq(f_eot), ip.last.eq(f_last), ip.offset.eq(at.offset),
                     ip.causal.eq(at.causal), u.o_stream.ready.eq(1)]
        m.d.comb += q.r_en.eq(bypass_h | u.i_stream.ready)

        # ---- outputs: ATTN: state line r, then o lines of row r, in place; ATTN_OUT: dst + r*hd + ...
        o_r = Signal(6)
        o_l = Signal(8)
        o_hdr = Signal()  # next ATTN output is a state line
        outs = Signal()  # output lines still expected (a register: the word may be any op when idle)
        # the row's addresses kept as running sums: its state line state + o_r, its first output line
        # (ATTN: state + nq + o_r*hd in place; ATTN_OUT: dst + o_r*hd)
        o_st, o_base = Signal(32, name="o_state"), Signal(32, name="o_base")
        o_l_last, o_r_last = Signal(name="o_l_last"), Signal(name="o_r_last")  # o_l == hd - 1, o_r == nq - 1
        m.d.sync += outs.eq(outs & any_lines)
        with m.If(self.start):
            m.d.sync += [o_r.eq(0), o_l.eq(0), o_hdr.eq(~is_out), outs.eq(1),
                         o_st.eq(state), o_base.eq(Mux(is_out, ao.dst, state + nq)),
                         o_l_last.eq(hd == 1), o_r_last.eq(nq == 1)]
        byp_hdr = f_kind == AttnBeat.HDR
        # the unit's (or the bypass's) output lines are registered, then written (a cycle later)
        got = Signal(name="out_got")
        gdata = Signal(C * 32, name="out_line", reset_less=True)
        m.d.sync += [got.eq(Mux(bypass_r, q.r_rdy, u.o_stream.valid)),
                     gdata.eq(lane_mux(bypass_c, Mux(byp_hdr, f_line[:64], f_line), u.o_stream.payload.data.as_value(),
                                       32))]
        m.d.comb += [self.out_en.eq(got), self.out_data.eq(gdata),
                     self.out_addr.eq(Mux(o_hdr, o_st, o_base + o_l))]
        with m.If(got):
            with m.If(o_hdr):
                m.d.sync += o_hdr.eq(0)
            with m.Elif(o_l_last):
                m.d.sync += [o_l.eq(0), o_l_last.eq(hd_one), o_r.eq(o_r + 1), o_r_last.eq(o_r == nq_m2),
                             o_st.eq(o_st + 1), o_base.eq(o_base + hd_r), o_hdr.eq(~is_out_r)]
                with m.If(o_r_last):
                    m.d.sync += outs.eq(0)
            with m.Else():
                m.d.sync += [o_l.eq(o_l + 1), o_l_last.eq(o_l == hd_m2)]
        m.d.comb += self.busy.eq((active & any_lines) | read_r | pending | staged | q.r_rdy | (outs & any_lines))
        return m
