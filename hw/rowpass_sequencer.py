"""Multi-pass row ops on the hardware core's units: QUANT, SOFTMAX, RMSNORM, LAYERNORM.

These ops need statistics of a whole row before they can write any of it, so
the units take each row as a header beat followed by several passes over the
row's lines (the units' "sequencer contract", in their module docstrings):

============  ========================  ==========================================
op            passes per row            outputs
============  ========================  ==========================================
QUANT         2, or 3 with ``split``    exponent line, ``L`` int8 lines (x2 with split) -> scratchpad
SOFTMAX       3                         ``L`` lines -> vector buffer ``dst``
RMSNORM       3 (last with gamma)       ``L`` lines -> vector buffer ``dst``
LAYERNORM     4 (last with gamma, beta) ``L`` lines -> vector buffer ``dst``
============  ========================  ==========================================

``L`` is ``lines`` (QUANT) or ``ceil(n / cols)``.  The units hold ``ready`` low
between passes, so operand lines are read ahead into a small FIFO (synchronous
read ports answer a cycle later) and handed over when the unit takes them;
header beats go through the same FIFO to keep their place in the order.  The vector buffer has
two read ports (hw/buffers.py), so LAYERNORM's output pass reads beta through port ``b`` the
cycle after x and gamma.  A line goes to the unit in ``B = cols / cfg.line_width`` beats (QUANT) or
``NB = cols / cfg.rowpass_width`` beats (SOFTMAX and the norms: :mod:`~systolica.hw.line_unit`;
a header is one beat).  With ``NB = 1`` the FIFO holds whole lines (4); else it holds beats (16):
each line is cut into beats on its way in, by shift registers beside the ports that take it from
the block RAMs and give a beat a cycle into the FIFO (a read waits until the line before has its
last beat out, and until the FIFO has room for all the beats read), so no 770-bit line entry, no
line register waiting for beta and no ``NB``-way beat select exist there (they were the most
congested logic of the ulx3s route, docs/boards.md).  LAYERNORM's output pass then gives a line
every ``NB + 1`` cycles (beta a cycle after x and gamma), which the beats read ahead hide on short
rows.  Each beat passes one of three beat registers on its way to the unit, filled and read
in turn (the unit's logic starts at a 3:1 multiplexer of flip-flops, not at the FIFO's read multiplexer,
and the unit's ``ready`` reaches no beat register's enable, nor the decision to load one).  The instruction's derived counts are registered at
``start``, the read addresses are counters, and the scratchpad addresses of QUANT's two blocks are
pointers (the only product, ``rows * lines`` for block 1's base, is registered from registers).
Output beats are gathered back into lines
(:mod:`~systolica.hw.line_serial`; QUANT's exponent beats are lines of their
own, zero past lane 0), always taken, and written the cycle a line completes.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.isa import OP_BY_NAME, WORD_BITS

from .decode import instr_layout
from .line_serial import gather
from .norm_unit import NormUnit
from .quant_unit import QuantUnit
from .softmax_unit import SoftmaxUnit
from .word_regs import fifo_level_next, flag_copies, lane_mux, word_reg

__all__ = ["RowPassSequencer", "ROWPASS_OPS"]

ROWPASS_OPS = ("QUANT", "SOFTMAX", "RMSNORM", "LAYERNORM")
_HDR, _ROW = 0, 1
_DEPTH = 4
_BEAT_DEPTH = 16  # beats: the depth of one LUT-RAM (ECP5 TRELLIS_DPR16X4)


class RowPassSequencer(wiring.Component):
    """Runs one QUANT / SOFTMAX / RMSNORM / LAYERNORM instruction (``word``) from ``start`` until ``busy`` falls."""

    def __init__(self, cfg: AccelConfig):
        self.cfg = cfg
        # no softmax unit with cfg.softmax_unit = 0 (the decoder refuses SOFTMAX as ILLEGAL_OPCODE there)
        self.quant, self.norm = QuantUnit(cfg), NormUnit(cfg)
        self.softmax = SoftmaxUnit(cfg) if cfg.softmax_unit else None
        C = cfg.cols
        vb = (cfg.vbuf_lines - 1).bit_length()
        sb = (cfg.spad_lines - 1).bit_length()
        super().__init__({
            "start": In(1), "word": In(WORD_BITS), "busy": Out(1),
            "va_addr": Out(vb), "va_en": Out(1), "va_rdata": In(C * 32),
            "vb_addr": Out(vb), "vb_en": Out(1), "vb_rdata": In(C * 32),
            "out_addr": Out(vb), "out_en": Out(1), "out_data": Out(C * 32),
            "spad_addr": Out(sb), "spad_en": Out(1), "spad_data": Out(C * 8),
        })

    def elaborate(self, platform):
        m = Module()
        C = self.cfg.cols
        m.submodules.quant, m.submodules.norm = qu, nu = self.quant, self.norm
        sm = self.softmax
        if sm is not None:
            m.submodules.softmax = sm
        ins = data.View(instr_layout(), self.word)
        # The word holds still from before start until busy falls (the compute engine loads it, waits for its
        # tokens, then starts this sequencer a cycle later), so what start loads is decoded from it a cycle
        # ahead, into flip-flops: start's registers load from registers, not from the opcode's decode.
        def ahead(v, name):
            return word_reg(m, v, f"{name}_w")

        op = ins.nop.h.opcode
        q_ = op == OP_BY_NAME["QUANT"].code
        s_ = (op == OP_BY_NAME["SOFTMAX"].code) if sm is not None else Const(0)
        ln_ = op == OP_BY_NAME["LAYERNORM"].code
        nrm = ins.rmsnorm  # RMSNORM and LAYERNORM share their layout
        rows = Mux(q_, ins.quant.rows, Mux(s_, ins.softmax.rows, nrm.rows))
        n = Mux(s_, ins.softmax.n, nrm.n)
        split = ins.quant.split
        # each one flip-flop from the word (a cycle is all the word is ahead of start)
        is_q, is_s, is_ln = ahead(q_, "is_q"), ahead(s_, "is_s"), ahead(ln_, "is_ln")
        is_n = ahead((op == OP_BY_NAME["RMSNORM"].code) | ln_, "is_n")
        src = ahead(Mux(q_, ins.quant.src, Mux(s_, ins.softmax.src, nrm.src)), "src")
        dst = ahead(Mux(s_, ins.softmax.dst, nrm.dst), "dst")
        L = ahead(Mux(q_, ins.quant.lines, (n + C - 1) // C), "L")
        P = ahead(Mux(q_, 2 + split, Mux(ln_, 4, 3)), "P")  # passes per row
        # rows that are sent at all: SOFTMAX and the norms send nothing for n = 0 (nothing is written)
        send_rows = ahead(Mux(q_ | (n != 0), rows, 0), "send_rows")
        n = ahead(n, "n")
        # what the walk and the outputs compare against, registered at start (the word holds still while busy)
        Lm1 = Signal(17)  # L - 1
        L0 = Signal()  # L == 0: a row is its header alone
        Pm1 = Signal(3)  # the final pass
        last_row = Signal(16)  # send_rows - 1
        with m.If(self.start):
            m.d.sync += [Lm1.eq(L - 1), L0.eq(L == 0), Pm1.eq(P - 1), last_row.eq(send_rows - 1)]

        # ---- walk: per row a header, then P passes of L lines
        r = Signal(16)
        p = Signal(3)
        ln = Signal(17)
        hdr = Signal()  # next beat is the row's header
        active = Signal()
        # the walk decides its next read a cycle ahead: `read` and `push_hdr` are flip-flops loaded from the next
        # values of what they depend on (the `*_n` signals below, each its register's D input), so the buffer
        # ports' enables and the walk's counters start at flip-flops, not at the decision's logic (the row-pass
        # sequencer's walk -> the vector buffer's read port was the slowest placed path of the ulx3s top level)
        active_n, hdr_n = Signal(name="active_n"), Signal(name="hdr_n")
        m.d.comb += [active_n.eq(active), hdr_n.eq(hdr)]
        m.d.sync += [active.eq(active_n), hdr.eq(hdr_n)]
        row_base = Signal.like(self.va_addr)  # src + r*L
        va_ptr = Signal.like(self.va_addr)  # row_base + ln
        g_ptr = Signal.like(self.vb_addr)  # gamma + ln
        gamma = nrm.gamma
        with m.If(self.start):
            m.d.sync += [r.eq(0), p.eq(0), ln.eq(0), row_base.eq(src), va_ptr.eq(src), g_ptr.eq(gamma)]
            m.d.comb += [hdr_n.eq(1), active_n.eq(send_rows != 0)]
        # the FIFO's head goes to the unit in B beats of W lanes (QUANT) or NB beats of NW lanes (the softmax and
        # norm units, NB >= B); a header is one beat.  With NB = 1 the FIFO holds whole lines (x, gamma, beta);
        # else the lines are cut into beats on their way in (`feed_beats`, the module docstring) and it holds beats
        B, W = self.cfg.line_beats, self.cfg.line_width
        NB, NW = self.cfg.rowpass_beats, self.cfg.rowpass_width
        feed_beats = NB > 1
        if feed_beats:
            depth = max(_BEAT_DEPTH, 2 * NB)
            m.submodules.q = q = fifo.SyncFIFO(width=2 + W * 32 + 2 * NW * 32, depth=depth)
        else:
            m.submodules.q = q = fifo.SyncFIFO(width=2 + 3 * C * 32, depth=_DEPTH)
        # a line read is on the ports the next cycle (pending); LAYERNORM's output pass reads beta through
        # port b the cycle after x and gamma (beta_rd), so its lines are complete a cycle later (pend2)
        pending, beta_rd, pend2 = Signal(), Signal(), Signal()
        pend_last = Signal()
        # room for what the next read brings, kept in a flip-flop computed from the next level and the next
        # cycle's entries still to come, so the read enable (the buffer port's select and every block RAM's
        # enable) starts at registers.  Line FIFO: (level + lines in flight) < _DEPTH (pending | beta_rd | pend2
        # then = read | beta_rd now).  Beat FIFO: level + owed + nb <= depth, `owed` the beats read but not yet
        # in the FIFO (in flight or in the serializer), `nb` a line's beats
        room, room_n = Signal(init=1), Signal(name="room_n")
        m.d.sync += room.eq(room_n)
        level_next = fifo_level_next(q)
        left_n = emit_n = None
        if feed_beats:
            nb = Mux(is_q, B, NB)
            left = Signal(range(NB + 1))  # beats of the serializer's line still to go into the FIFO
            emit = Signal(name="emit")  # left != 0, a flip-flop kept with left (_beat_feed): the shift registers'
            # enable, over 3 x 256 bits, was the sequencer's slowest path as a compare of left
            left_n, emit_n = Signal.like(left, name="left_n"), Signal(name="emit_n")
            m.d.comb += [left_n.eq(left), emit_n.eq(emit)]
            m.d.sync += [left.eq(left_n), emit.eq(emit_n)]
        read = Signal(name="read")  # flip-flops: see active_n
        push_hdr = Signal(name="push_hdr")
        if feed_beats:
            # `claimed` = level + owed: a read claims nb beats, a header one, a beat read out of the FIFO frees one
            # (a beat moving from the serializer into the FIFO leaves it as it is).  room = claimed_next + nb <=
            # depth, as compares of the register with constants beside the walk's decision, which only selects
            # one of them at the end (the level's adder, the claim's and the compare in series were the
            # sequencer's slowest path on ECP5)
            claimed = Signal(range(depth + 1), name="claimed")
            pop = q.r_en & q.r_rdy
            m.d.sync += claimed.eq(claimed + Mux(read, nb, 0) + push_hdr - pop)

            # depth - nb and depth - 2 nb, flip-flops (is_q holds still through an instruction; at its start the
            # FIFO is empty and every compare below holds for either nb: depth >= 2 NB >= 2 B)
            cap = [Signal(range(depth + 1), name=f"cap{j}") for j in (1, 2)]
            m.d.sync += [cap[0].eq(Mux(is_q, depth - B, depth - NB)), cap[1].eq(Mux(is_q, depth - 2 * B, depth - 2 * NB))]

            def fits(k, per_read=0):  # claimed + k (+ nb if per_read) + nb <= depth
                return claimed + k <= cap[per_read]
            m.d.comb += room_n.eq(Mux(read, Mux(pop, fits(-1, 1), fits(0, 1)),
                                      Mux(push_hdr, Mux(pop, fits(0), fits(1)), Mux(pop, fits(-1), fits(0)))))
        else:
            m.d.comb += room_n.eq(level_next + (read | beta_rd) < _DEPTH)
        # the walk's three comparisons are flip-flops kept with their counters (each set from the counter's next
        # value, from registers), so no decision of the walk waits on a 16- or 17-bit compare
        final = Signal()  # p == Pm1
        line_end = Signal()  # ln == Lm1
        at_last = Signal()  # r == last_row
        with m.If(self.start):
            m.d.sync += [final.eq(0), line_end.eq(L == 1), at_last.eq(send_rows == 1)]  # P >= 2: pass 0 is not final
        two = is_ln & final
        beta_addr = Signal.like(self.vb_addr)
        m.d.comb += [self.va_addr.eq(va_ptr), self.va_en.eq(read),
                     self.vb_addr.eq(Mux(beta_rd, beta_addr, g_ptr)), self.vb_en.eq(read | beta_rd)]
        pending_n, beta_rd_n, pend2_n = read & ~two, read & two, beta_rd
        m.d.sync += [pending.eq(pending_n), beta_rd.eq(beta_rd_n), pend2.eq(beta_rd)]
        with m.If(read):
            m.d.sync += [pend_last.eq(line_end), beta_addr.eq(g_ptr + Lm1 + 1)]
        with m.If(push_hdr):
            with m.If(L0 | (Pm1 == 7)):  # an empty row: the header is all (QUANT lines = 0)
                m.d.sync += [r.eq(r + 1), at_last.eq(r + 1 == last_row)]
                with m.If(at_last):
                    m.d.comb += active_n.eq(0)
            with m.Else():
                m.d.comb += hdr_n.eq(0)
        with m.If(read):
            m.d.sync += [va_ptr.eq(va_ptr + 1), g_ptr.eq(g_ptr + 1)]
            with m.If(line_end):
                m.d.sync += [ln.eq(0), line_end.eq(Lm1 == 0), g_ptr.eq(gamma), va_ptr.eq(row_base)]
                with m.If(final):
                    m.d.sync += [p.eq(0), final.eq(0), r.eq(r + 1), at_last.eq(r + 1 == last_row),
                                 row_base.eq(va_ptr + 1), va_ptr.eq(va_ptr + 1)]
                    m.d.comb += hdr_n.eq(1)
                    with m.If(at_last):
                        m.d.comb += active_n.eq(0)
                with m.Else():
                    m.d.sync += [p.eq(p + 1), final.eq(p + 1 == Pm1)]
            with m.Else():
                m.d.sync += [ln.eq(ln + 1), line_end.eq(ln + 1 == Lm1)]
        if feed_beats:
            kind, lline, qa, a, b, c = self._beat_feed(m, q, is_q, nb, left, emit, left_n, emit_n, push_hdr, pending,
                                                       pend2, beta_rd, pend_last)
        else:
            kind, lline, qa, a, b, c = self._line_feed(m, q, read, two, beta_rd, pending, pend2, pend_last,
                                                       push_hdr)
        # the next cycle's decisions, from the next values (what they were as logic of the registers before):
        # with beats, the line a read brings is complete in the serializer at the end of its pending / pend2 cycle,
        # and the line before must have its last beat out by then (one beat a cycle); no `~start` term: active is
        # low at start (an instruction starts only with every sequencer idle)
        ser_ok_n = Mux(pending_n | pend2_n, nb <= 1, left_n <= 2) if feed_beats else Const(1)
        ser_empty_n = ~emit_n if feed_beats else Const(1)
        want_n = active_n & room_n & ~beta_rd_n & ser_ok_n
        m.d.sync += [read.eq(want_n & ~hdr_n), push_hdr.eq(want_n & hdr_n & ~pending_n & ~pend2_n & ser_empty_n)]
        took = Signal()  # the unit took the read slot's beat
        # three beat registers (slots) a unit, filled in turn from the FIFO's head and read in turn by the unit: a
        # slot loads when it is empty (its valid bit, a register), so no unit's `ready` reaches the beat registers'
        # enables; each unit reads its slots through a 3:1 multiplexer with a read pointer of its own (`rp_u`,
        # equal to `rp` while the unit runs), so the slots and their select sit beside the unit's first stage.
        # `ld` (the FIFO has a beat and the next write slot is empty) is a flip-flop loaded from the FIFO's next
        # level and the slots' valid bits as they are, not as this cycle's take leaves them: so no unit's `ready`
        # reaches it (ulx3s: a unit's ready -> `took` -> the slots' next valid bits -> `slot_ld` took 12.8 ns),
        # and a slot taken is loaded again two cycles later, which three slots hide (a beat a cycle)
        NS = 3
        ld = Signal(name="slot_ld")
        sv = [Signal(name=f"slot{j}_v") for j in range(NS)]
        wp, rp = Signal(range(NS)), Signal(range(NS))  # the slot the next beat goes into / the unit reads

        def nxt(p):
            return Mux(p == NS - 1, 0, p + 1)

        def at(p, xs):
            return Mux(p[1], xs[2], Mux(p[0], xs[1], xs[0]))
        wp_n = Signal(range(NS), name="wp_n")
        m.d.comb += wp_n.eq(Mux(ld, nxt(wp), wp))
        sv_n = [Signal(name=f"slot{j}_v_n") for j in range(NS)]
        for j in range(NS):
            m.d.comb += sv_n[j].eq((sv[j] | (ld & (wp == j))) & ~(took & (rp == j)))
        with m.If(self.start):
            m.d.comb += [x.eq(0) for x in sv_n] + [wp_n.eq(0)]
        m.d.sync += [wp.eq(wp_n), *[x.eq(y) for x, y in zip(sv, sv_n, strict=True)],
                     ld.eq((fifo_level_next(q) != 0) & ~at(wp_n, sv))]
        with m.If(took):
            m.d.sync += rp.eq(nxt(rp))
        # each unit also keeps the slots' valid bits of its own (set as its slots load, cleared as it takes them):
        # its `valid` is a select of flip-flops beside its slots, not of the sequencer's, which sit where the FIFO
        # is (ulx3s: the slots' valid bits -> the norm unit's valid, 3.1 ns of routing, -> its beat's enables)
        rps = []
        took_u = []
        units = [(qu, is_q, (("data", qa),)), (sm, is_s, (("data", a),)), (nu, is_n, (("a", a), ("b", b), ("c", c)))]
        for unit, sel, fields in [u for u in units if u[0] is not None]:
            nm = unit.__class__.__name__.lower()
            rp_u = Signal(range(NS), name=f"rp_{nm}")
            rps.append(rp_u)
            sv_u = [Signal(name=f"slot{j}_{nm}_v") for j in range(NS)]
            v_u = Signal(name=f"{nm}_valid")
            m.d.comb += v_u.eq(at(rp_u, sv_u))
            t_u = Signal(name=f"{nm}_took")
            m.d.comb += t_u.eq(v_u & unit.i_stream.ready)
            took_u.append(t_u)
            with m.If(t_u):
                m.d.sync += rp_u.eq(nxt(rp_u))
            srcs = [kind, lline, *(v for _, v in fields)]
            regs = [[Signal(len(x), name=f"slot{j}_{nm}_{k}", reset_less=True) for k, x in enumerate(srcs)]
                    for j in range(NS)]
            for j in range(NS):
                with m.If(t_u & (rp_u == j)):
                    m.d.sync += sv_u[j].eq(0)
                with m.If(ld & (wp == j) & sel):  # (an empty slot: not the one taken)
                    m.d.sync += [r_.eq(x) for r_, x in zip(regs[j], srcs, strict=False)]
                    m.d.sync += sv_u[j].eq(1)
                with m.If(self.start):
                    m.d.sync += sv_u[j].eq(0)
            outs = [at(rp_u, rs) for rs in zip(*regs, strict=True)]
            m.d.comb += [unit.i_stream.valid.eq(v_u), unit.i_stream.payload.kind.eq(outs[0]),
                         unit.i_stream.payload.last.eq(outs[1]), unit.o_stream.ready.eq(1)]
            m.d.comb += [getattr(unit.i_stream.payload, f).eq(o_) for (f, _), o_ in zip(fields, outs[2:], strict=False)]
        m.d.comb += took.eq(Cat(*took_u).any())
        m.d.comb += q.r_en.eq(ld)
        with m.If(self.start):
            m.d.sync += [rp.eq(0), *[x.eq(0) for x in rps]]
        m.d.comb += [qu.i_stream.payload.split.eq(split),
                     qu.i_stream.payload.empty.eq(ins.quant.lines == 0),
                     nu.i_stream.payload.n.eq(nrm.n), nu.i_stream.payload.eps.eq(nrm.eps),
                     nu.i_stream.payload.center.eq(is_ln)]

        # ---- outputs: vector buffer (SOFTMAX, norms) in order; scratchpad (QUANT) by block and kind
        rows_out = Signal(16)  # rows whose last output is still to come
        vptr = Signal.like(self.out_addr)
        # QUANT: the next line of block 0 / block 1 (dst + (b*rows + r)*lines + l) and exponent line
        # (exps + b*rows + r); block 1 starts at dst + rows*lines, a product registered from registers
        qp0, qp1 = Signal.like(self.spad_addr), Signal.like(self.spad_addr)
        ep0, ep1 = Signal.like(self.spad_addr), Signal.like(self.spad_addr)
        q_rows, q_lines = Signal(16, reset_less=True), Signal(17, reset_less=True)
        q_dst = Signal.like(self.spad_addr)
        q_blk1 = Signal(33, reset_less=True)
        st1, st2 = Signal(), Signal()  # start, one and two cycles later (the operands, then the product)
        m.d.sync += [st1.eq(self.start), st2.eq(st1), q_blk1.eq(q_rows * q_lines)]
        with m.If(self.start):
            m.d.sync += [vptr.eq(dst), qp0.eq(ins.quant.dst), ep0.eq(ins.quant.exps),
                         ep1.eq(ins.quant.exps + ins.quant.rows), q_rows.eq(ins.quant.rows),
                         q_lines.eq(ins.quant.lines), q_dst.eq(ins.quant.dst),
                         rows_out.eq(send_rows)]  # QUANT sends every row (lines = 0: the header alone)
        # output beats are gathered into lines (hw/line_serial.py); QUANT's exponent beats are lines of their own
        # lanes past n in a row's last line are written as 0 (the golden simulator's padded rows); the norm
        # unit leaves them as computed, so they are masked here, beat by beat (NW lanes, not a whole line):
        # `beat_left` is the row's elements from this beat's lane 0 on, `lanes_left` the same at line starts
        if sm is not None:
            m.d.comb += sm.i_stream.payload.n.eq(ins.softmax.n)
        # the softmax unit's output or the norm unit's (there is no softmax unit: the norm unit's)
        def vsel(f):
            return f(nu) if sm is None else Mux(is_s, f(sm), f(nu))
        vvalid = vsel(lambda u: u.o_stream.valid) & ~is_q
        beat_left = Signal(signed(18))
        lanes_left = Signal(17)
        # lanes_left <= C, a flip-flop kept with lanes_left (from its next value's operands): the compare between
        # the unit's output valid and beat_left's select was the sequencer's slowest path (ulx3s, 9.7 ns)
        ll_last = Signal(name="lanes_left_last")
        with m.If(self.start):
            m.d.sync += [lanes_left.eq(n), beat_left.eq(n), ll_last.eq(n <= C)]
        vraw = vsel(lambda u: u.o_stream.payload.data.as_value())
        # beat_left > c per lane, flags loaded beside beat_left (from its next value's operands): a compare of
        # beat_left before the lanes' select, the line gather and the compute engine's output select was the
        # row-pass sequencer's slowest path on ECP5 (11.5 ns)
        beat_ok = [Signal(name=f"beat_ok_{c}") for c in range(NW)]
        vbeat = Cat(*[Mux(beat_ok[c], vraw[32 * c:32 * c + 32], 0) for c in range(NW)])
        vlast = vsel(lambda u: u.o_stream.payload.last)
        vdata, vout = gather(m, vvalid, vbeat, NB, "vgat", clear=self.start)
        m.d.comb += [self.out_addr.eq(vptr), self.out_en.eq(vout), self.out_data.eq(vdata)]
        row_end = vout & ll_last  # the row's last line completes with this beat
        with m.If(vvalid):
            m.d.sync += beat_left.eq(Mux(row_end, n, beat_left - NW))
            m.d.sync += [beat_ok[c].eq(Mux(row_end, n > c, beat_left > NW + c)) for c in range(NW)]
        with m.If(self.start):
            m.d.sync += [beat_ok[c].eq(n > c) for c in range(NW)]
        with m.If(vout):
            m.d.sync += [vptr.eq(vptr + 1), lanes_left.eq(Mux(ll_last, n, lanes_left - C)),
                         ll_last.eq(Mux(ll_last, n <= C, lanes_left <= 2 * C))]
            with m.If(vlast):
                m.d.sync += rows_out.eq(rows_out - 1)
        qo = qu.o_stream.payload
        qv = qu.o_stream.valid & is_q
        qline, qdone = gather(m, qv & ~qo.exp, qo.data.as_value(), B, "qgat", clear=self.start)
        qw = Signal()  # a scratchpad line is written: an exponent line, or a line's last beat
        m.d.comb += qw.eq((qv & qo.exp) | qdone)
        m.d.comb += [self.spad_en.eq(qw), self.spad_data.eq(Mux(qo.exp, qo.data.as_value(), qline)),
                     self.spad_addr.eq(Mux(qo.exp, Mux(qo.blk, ep1, ep0), Mux(qo.blk, qp1, qp0)))]
        with m.If(st2):
            m.d.sync += qp1.eq(q_dst + q_blk1)
        with m.If(qw):
            with m.If(qo.exp):
                with m.If(qo.blk):
                    m.d.sync += ep1.eq(ep1 + 1)
                with m.Else():
                    m.d.sync += ep0.eq(ep0 + 1)
            with m.Elif(qo.blk):
                m.d.sync += qp1.eq(qp1 + 1)
            with m.Else():
                m.d.sync += qp0.eq(qp0 + 1)
            with m.If(qo.last):
                m.d.sync += rows_out.eq(rows_out - 1)
        m.d.comb += self.busy.eq(active | pending | beta_rd | pend2 | (emit if feed_beats else 0) | q.r_rdy | Cat(*sv).any()
                                 | (rows_out != 0))
        return m

    def _line_feed(self, m, q, read, two, beta_rd, pending, pend2, pend_last, push_hdr):
        """Whole lines into the FIFO (``NB = 1``): entry kind, last, x, gamma, beta (a header is kind 0, no data).
        LAYERNORM's x and gamma wait a cycle for beta.  Returns the head's (kind, last, QUANT's data, a, b, c)."""
        C = self.cfg.cols
        # pending and pend2 again as three copies each, for the FIFO entry's 770-bit multiplexer (a third of its
        # lanes each): as single flags they were the most congested nets of the ulx3s route (docs/boards.md)
        pend_c = flag_copies(m, read & ~two, 1, "pend_sel", first=pending)
        pend2_c = flag_copies(m, beta_rd, 1, "pend2_sel", first=pend2)
        x_wait = Signal(C * 32, reset_less=True)
        g_wait = Signal(C * 32, reset_less=True)
        with m.If(beta_rd):
            m.d.sync += [x_wait.eq(self.va_rdata), g_wait.eq(self.vb_rdata)]
        m.d.comb += [q.w_en.eq(pending | pend2 | push_hdr),
                     q.w_data[:2].eq(Mux(pending | pend2, Cat(_ROW, pend_last), Cat(_HDR, 0))),
                     q.w_data[2:].eq(lane_mux(pend_c, Cat(self.va_rdata, self.vb_rdata, Const(0, C * 32)),
                                              lane_mux(pend2_c, Cat(x_wait, g_wait, self.vb_rdata), 0, 32), 32))]
        a = q.r_data[2:2 + C * 32]
        return q.r_data[0], q.r_data[1], a, a, q.r_data[2 + C * 32:2 + 2 * C * 32], q.r_data[2 + 2 * C * 32:]

    def _beat_feed(self, m, q, is_q, nb, left, emit, left_n, emit_n, push_hdr, pending, pend2, beta_rd, pend_last):
        """Lines cut into beats on their way into the FIFO (``NB > 1``): entry kind, last, QUANT's W lanes of x
        (the first NW of them the softmax's / norm's ``a``), NW lanes of gamma, NW of beta.

        Three line registers (x, gamma, beta) take the line from the ports as it comes (a clock enable, no select
        before them: a block RAM's clock-to-data and the routing leave no time for one at 100 MHz; ulx3s: the
        shift registers that were here took 11.3 ns): x and gamma in the cycle after the read (pending;
        LAYERNORM's output pass: beta_rd), beta a cycle later (pend2; else its beats read 0, ``b_zero``).  From
        the next cycle they give one beat a cycle (``left`` counts them down, ``kx`` / ``kb`` up from each
        register's load: the beat is a select of the register by the count), each straight into the FIFO,
        which always has room for them (the read waited for it).  So the FIFO and the unit's beat registers see
        beats, not lines: no line register waits for beta, and no 8-way beat select of 770-bit entries sits
        after the FIFO.  A header goes in once the serializer is empty (it follows the row's last beat)."""
        C = self.cfg.cols
        W, NW, B, NB = self.cfg.line_width, self.cfg.rowpass_width, self.cfg.line_beats, self.cfg.rowpass_beats
        sx, sg, sb = (Signal(C * 32, name=f"feed_{n}", reset_less=True) for n in ("x", "gamma", "beta"))
        kx, kb = Signal(range(NB), name="feed_kx"), Signal(range(NB), name="feed_kb")
        b_zero = Signal(name="feed_b_zero")
        last = Signal(name="feed_last")
        with m.If(emit):  # (left and emit through their next values left_n, emit_n: the walk reads them)
            m.d.comb += [left_n.eq(left - 1), emit_n.eq(left != 1)]
            m.d.sync += [kx.eq(kx + 1), kb.eq(kb + 1)]
        with m.If(pending | beta_rd):
            m.d.sync += [sx.eq(self.va_rdata), sg.eq(self.vb_rdata), kx.eq(0)]
        with m.If(pending | pend2):
            m.d.comb += [left_n.eq(nb), emit_n.eq(1)]
            m.d.sync += [last.eq(pend_last), sb.eq(self.vb_rdata), b_zero.eq(~pend2), kb.eq(0)]
        # beat k: QUANT's W lanes k*W .. of x, or (the rest) NW lanes k*NW .. of x, gamma and beta (x's lanes past
        # NW are QUANT's alone: the others read the first NW)
        xw = sx.word_select(kx[:max(1, (B - 1).bit_length())], W * 32) if B > 1 else sx[:W * 32]
        xn = sx.word_select(kx, NW * 32)
        x_beat = Cat(Mux(is_q, xw[:NW * 32], xn), xw[NW * 32:])
        b_beat = Mux(b_zero, 0, sb.word_select(kb, NW * 32))
        beat = Cat(_ROW, last & (left == 1), x_beat, sg.word_select(kx, NW * 32), b_beat)
        m.d.comb += [q.w_en.eq(emit | push_hdr), q.w_data.eq(Mux(emit, beat, Cat(_HDR, 0)))]
        qa = q.r_data[2:2 + W * 32]
        g0 = 2 + W * 32
        return q.r_data[0], q.r_data[1], qa, qa[:NW * 32], q.r_data[g0:g0 + NW * 32], q.r_data[g0 + NW * 32:]
