"""Line ops on the hardware core's vector and activation units: ADD, MUL, REQUANT, ARGMAX, SILU, GELU, ROPE.

One instruction is ``rows`` rows of ``L`` lines.  The vector unit has
``W = cfg.line_width`` lanes, so a ``cols``-wide line goes through it in
``B = cols / W`` beats (:mod:`~systolica.hw.line_serial`); the activation unit
has ``NW = cfg.nonlinear_width`` lanes (a divisor of ``W``), so SILU and GELU
take ``NB = cols / NW`` beats a line, from the same serializer register shifted ``NW`` lanes a cycle
(:func:`~systolica.hw.line_serial.serialize_two_rates`).  The
sequencer reads one line of each operand every ``B`` (``NB``) cycles (synchronous read ports: the data
arrive the next cycle, when beat 0 enters the unit; the serializer's register
feeds beats 1 .. B-1), gathers the unit's output beats back into lines and
writes every output line to the vector buffer at ``dst``, in order.  The units
only stall on output back-pressure, and outputs are always taken, so nothing
here ever waits; with ``B = 1`` it reads a line per cycle.

Operands (systolica/layout.py): ADD/MUL ``a`` and ``b`` (``bcast``: the one row
of ``b`` for every row), REQUANT ``src`` in the accumulator, ``mult`` one
vector-buffer row, the row's exponent in lane 0 of scratchpad line ``exps + r``
(shift ``= shift - exp``); ARGMAX rows of ``ceil(n / cols)`` lines, one output
line per row; SILU/GELU ``src``; ROPE ``heads`` heads of ``hd`` lines per row, where head
line ``l`` rotates its ``C/2`` pairs by cos/sin elements ``l*C/2 ..`` of the row's table
(``hd`` lines: cos half, then sin half), i.e. half ``l % 2`` of table line ``l // 2`` and
half ``(hd + l) % 2`` of line ``(hd + l) // 2`` -- two table reads per line through the
vector buffer's port ``b``, a cycle apart (so ROPE takes ``max(B, 2)`` cycles a line), joined into
the ``b`` line, re-packed per beat into what the vector unit expects: beat ``k`` rotates pairs
``k*W/2 ..`` and gets their ``W/2`` cos, then their ``W/2`` sin elements.  ARGMAX: beat ``k`` of a
line has ``clamp(n_left - k*W, 0, W)`` valid lanes (a beat wholly past ``n`` has 0).
ARGMAX with ``n = 0`` writes rows of zeros.

Reads run ahead of writes, so ``dst == src`` (in place) gives the golden
result; a destination that overlaps a source at another offset is not
supported (the golden simulator reads every operand before writing).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.isa import OP_BY_NAME, WORD_BITS

from .activation import ActivationUnit, ActOp
from .decode import instr_layout
from .line_serial import gather, hold, serialize, serialize_two_rates
from .vector_unit import VecOp, VectorUnit
from .word_regs import flag_copies, lane_mux, word_reg

__all__ = ["VectorSequencer", "VECTOR_OPS"]

VECTOR_OPS = ("ADD", "MUL", "REQUANT", "ARGMAX", "SILU", "GELU", "ROPE")


def _fanout_copies(m: Module, value, load, n: int, name: str) -> list[Signal]:
    """``n`` copies (up to 9) of the flag ``value`` taken when ``load`` is high, valid two cycles after it:
    three registers that Yosys cannot merge (:func:`flag_copies`), each copied again the same three ways the
    next cycle, so that each copy drives a part of a wide multiplexer."""
    out = []
    for j, src in enumerate(flag_copies(m, value, load, f"{name}_l1")):
        out += flag_copies(m, src, 1, f"{name}_l2_{j}")
    return [out[c % len(out)] for c in range(n)]


def _select_m1(w_is: dict, by_op: dict):
    """``by_op[op] - 1`` of the word's op (the last, GELU, when none matches): each difference formed beside the
    others, then one select, as ``Mux(ADD, .., Mux(MUL, .., ..))`` of the fields less one would be."""
    order = ("ADD", "MUL", "REQUANT", "ARGMAX", "SILU", "ROPE")
    out = by_op["GELU"] - 1
    for name in reversed(order):
        out = Mux(w_is[name], by_op[name] - 1, out)
    return out


class VectorSequencer(wiring.Component):
    """Runs one vector-class instruction (``word``) from ``start`` until ``busy`` falls."""

    def __init__(self, cfg: AccelConfig):
        self.cfg = cfg
        self.vec = VectorUnit(cfg)
        self.act = ActivationUnit(cfg)
        C = cfg.cols
        vb = (cfg.vbuf_lines - 1).bit_length()
        super().__init__({
            "start": In(1), "word": In(WORD_BITS), "busy": Out(1),
            "va_addr": Out(vb), "va_en": Out(1), "va_rdata": In(C * 32),
            "vb_addr": Out(vb), "vb_en": Out(1), "vb_rdata": In(C * 32),
            "acc_addr": Out((cfg.acc_lines - 1).bit_length()), "acc_en": Out(1), "acc_rdata": In(C * 32),
            "exp_addr": Out((cfg.spad_lines - 1).bit_length()), "exp_en": Out(1), "exp_rdata": In(C * 8),
            "out_addr": Out(vb), "out_en": Out(1), "out_data": Out(C * 32),
        })

    def elaborate(self, platform):
        m = Module()
        C = self.cfg.cols
        m.submodules.vec, m.submodules.act = vec, act = self.vec, self.act
        from amaranth.lib import data

        ins = data.View(instr_layout(), self.word)
        op = ins.nop.h.opcode
        code = {name: OP_BY_NAME[name].code for name in VECTOR_OPS}
        w_is = {name: op == c for name, c in code.items()}
        # the fields, by op (every op's layout puts them at its own bit positions): decoded from the word in
        # the start cycle into registers, so that no instruction-word decode sits in the line datapath
        w_rows_by_op = {"ADD": ins.add.rows, "MUL": ins.mul.rows, "REQUANT": ins.requant.rows,
                        "ARGMAX": ins.argmax.rows, "SILU": ins.silu.rows, "ROPE": ins.rope.rows, "GELU": ins.gelu.rows}
        n_am = ins.argmax.n
        w_lines_by_op = {"ADD": ins.add.lines, "MUL": ins.mul.lines, "REQUANT": ins.requant.lines,
                         "ARGMAX": (n_am + C - 1) // C, "SILU": ins.silu.lines, "ROPE": ins.rope.hd,
                         "GELU": ins.gelu.lines}
        w_src_a = Mux(w_is["ADD"], ins.add.a, Mux(w_is["MUL"], ins.mul.a, Mux(w_is["ARGMAX"], ins.argmax.src,
                      Mux(w_is["SILU"], ins.silu.src, Mux(w_is["ROPE"], ins.rope.src, ins.gelu.src)))))
        w_src_b = Mux(w_is["ADD"], ins.add.b, Mux(w_is["MUL"], ins.mul.b, ins.requant.mult))
        w_bcast = Mux(w_is["ADD"], ins.add.bcast, Mux(w_is["MUL"], ins.mul.bcast, 1))  # REQUANT: mult is one row
        w_dst = Mux(w_is["ADD"], ins.add.dst, Mux(w_is["MUL"], ins.mul.dst, Mux(w_is["REQUANT"], ins.requant.dst,
                    Mux(w_is["ARGMAX"], ins.argmax.dst, Mux(w_is["SILU"], ins.silu.dst,
                        Mux(w_is["ROPE"], ins.rope.dst, ins.gelu.dst))))))
        is_ = {name: Signal(name=f"is_{name.lower()}") for name in VECTOR_OPS}
        # the instruction's values, loaded at start: no reset (nothing reads them before a start)
        src_b = Signal.like(self.vb_addr, reset_less=True)
        bcast = Signal()
        # lines per group, groups per row, rows: minus 1, flip-flops loaded from the word every cycle (it is there
        # a cycle before start and holds still while the op runs), not at start from the word's field selects
        # (the selects, the subtraction and the start enable into rm1 were 11.4 ns on ulx3s)
        # each op's field less one in parallel, then the op's select: the subtraction after the seven-way select
        # of the fields was a carry chain between the word's decode and lm1 (ulx3s: 10.3 ns)
        lm1 = word_reg(m, _select_m1(w_is, w_lines_by_op), "lm1", unsigned(17), reset_less=True)
        hm1 = word_reg(m, Mux(w_is["ROPE"], ins.rope.heads - 1, 0), "hm1", unsigned(9), reset_less=True)
        rm1 = word_reg(m, _select_m1(w_is, w_rows_by_op), "rm1", unsigned(16), reset_less=True)
        with m.If(self.start):
            m.d.sync += [is_[name].eq(w_is[name]) for name in VECTOR_OPS]
            m.d.sync += [src_b.eq(w_src_b), bcast.eq(w_bcast)]
        # whether the op runs on the activation unit: a register for the control paths, and three copies for
        # the output line's multiplexer (each a third of its lanes), so that no one flag rides a 256-bit select
        to_act = Signal()
        with m.If(self.start):
            m.d.sync += to_act.eq(w_is["SILU"] | w_is["GELU"])
        act_sel = flag_copies(m, w_is["SILU"] | w_is["GELU"], self.start, "act_sel", first=to_act)
        hd = ins.rope.hd

        # ---- input walk: row r, group hh, line l (index (r*H + hh)*L + l: the pointers below step with it); the walk ends
        # with the last line of the last group of the last row
        walking = Signal()  # lines left to read
        r = Signal(16)
        ln = Signal(17)
        hh = Signal(8)  # ROPE head within the row
        trow = Signal(32, reset_less=True)  # ROPE: table + r * hd
        n_left = Signal(17, reset_less=True)  # ARGMAX: lanes of the row not yet read
        pend = Signal(9)  # output lines read or being read, not yet written (fewer than the units' depth)
        zeros = Signal(16)  # ARGMAX n = 0: zero lines still to write
        zeros_nz = Signal()  # zeros != 0, a register (it selects the whole output line)
        optr = Signal(32)
        # whether the walk has lines at all, a flip-flop a cycle ahead of start (the compute engine sets the word a
        # cycle before it starts a sequencer and holds it while busy): the op decode, ARGMAX's lines from n and the
        # compares in front of `walking` were the sequencer's slowest path on ECP5
        # (an OR over the ops of the op's own fields tested, not a test of the fields' seven-way selects: that was
        # 12.8 ns on ulx3s; ARGMAX's ceil(n / C) lines are none exactly when n is 0)
        nonempty = {"ADD": (ins.add.rows != 0) & (ins.add.lines != 0), "MUL": (ins.mul.rows != 0) & (ins.mul.lines != 0),
                    "REQUANT": (ins.requant.rows != 0) & (ins.requant.lines != 0),
                    "ARGMAX": (ins.argmax.rows != 0) & (n_am != 0), "SILU": (ins.silu.rows != 0) & (ins.silu.lines != 0),
                    "ROPE": (ins.rope.rows != 0) & (ins.rope.hd != 0) & (ins.rope.heads != 0),
                    "GELU": (ins.gelu.rows != 0) & (ins.gelu.lines != 0)}
        walk_any = word_reg(m, Cat(*[w_is[name] & nonempty[name] for name in VECTOR_OPS]).any(), "walk_any_w")
        # the walk's three compares (ln == lm1, hh == hm1, r == rm1) are flip-flops kept with their counters, set
        # from the counters' next values, so the issue's decisions (the pointers, the counters, `walking`) wait on
        # no 16- or 17-bit compare (the walk's counters were 11.4 ns on ulx3s)
        ln_end, hh_end, r_end = Signal(name="ln_end"), Signal(name="hh_end"), Signal(name="r_end")
        with m.If(self.start):
            m.d.sync += [walking.eq(walk_any), ln_end.eq(lm1 == 0), hh_end.eq(hm1 == 0), r_end.eq(rm1 == 0),
                         r.eq(0), ln.eq(0), hh.eq(0), trow.eq(ins.rope.table),
                         n_left.eq(n_am), optr.eq(w_dst),
                         zeros.eq(Mux(w_is["ARGMAX"] & (n_am == 0), ins.argmax.rows, 0)),
                         zeros_nz.eq(w_is["ARGMAX"] & (n_am == 0) & (ins.argmax.rows != 0))]
        # a line takes B cycles in the vector unit, NB (>= B) in the activation unit, whose lanes may be
        # fewer (cfg.nonlinear_width): one read every B or NB cycles (ph counts them down)
        B, W = self.cfg.line_beats, self.cfg.line_width
        NB, NW = self.cfg.nonlinear_beats, self.cfg.nonlinear_width
        # ROPE reads two table lines (cos, then sin) through the vector buffer's port b: at least 2 cycles a line
        rope = is_["ROPE"]
        ph = Signal(range(max(NB, 2)))
        issue = Signal()
        # no `~start` term: walking is low at start (an instruction starts only with every sequencer idle)
        m.d.comb += issue.eq(walking & (ph == 0))
        with m.If(issue):
            m.d.sync += ph.eq(Mux(to_act, NB - 1, Mux(rope, max(B, 2) - 1, B - 1)))
        with m.Elif(ph != 0):
            m.d.sync += ph.eq(ph - 1)
        with m.If(self.start):
            m.d.sync += ph.eq(0)
        # a port reads only for the ops whose line it is (REQUANT's a is the accumulator's; SILU, GELU and ARGMAX have
        # no b): a read whose data nobody takes would be a buffer collision by chance (hw/buffers.py _collision)
        reads_a, reads_b = Signal(name="reads_a"), Signal(name="reads_b")
        with m.If(self.start):
            m.d.sync += [reads_a.eq(~w_is["REQUANT"] & ~w_is["ROPE"]),
                         reads_b.eq(w_is["ADD"] | w_is["MUL"] | w_is["REQUANT"] | w_is["ROPE"])]
        # the read addresses as pointers beside the walk (each the address its sum below gave: a = src_a + idx,
        # b = src_b + (bcast ? ln : idx), ROPE's cos line trow + ln // 2, acc = src + idx, exp = exps + r), so the
        # buffer ports' addresses start at flip-flops, not at an adder (the vector sequencer's src_a + idx was
        # on the slowest placed path of the ulx3s top level, into the vector buffer's read address)
        a_ptr, b_ptr = Signal.like(self.va_addr, name="a_ptr"), Signal.like(self.vb_addr, name="b_ptr")
        c_ptr = Signal.like(self.vb_addr, name="cos_ptr")
        acc_ptr, exp_ptr = Signal.like(self.acc_addr, name="acc_ptr"), Signal.like(self.exp_addr, name="exp_ptr")
        with m.If(self.start):
            m.d.sync += [a_ptr.eq(w_src_a), b_ptr.eq(w_src_b), c_ptr.eq(ins.rope.table), acc_ptr.eq(ins.requant.src),
                         exp_ptr.eq(ins.requant.exps)]
        with m.If(issue):
            m.d.sync += [a_ptr.eq(a_ptr + 1), b_ptr.eq(b_ptr + 1), c_ptr.eq(c_ptr + ln[0]), acc_ptr.eq(acc_ptr + 1)]
            with m.If(ln_end):
                m.d.sync += c_ptr.eq(Mux(hh_end, trow + hd, trow))
                with m.If(bcast):
                    m.d.sync += b_ptr.eq(src_b)
                with m.If(hh_end):
                    m.d.sync += exp_ptr.eq(exp_ptr + 1)
        with m.If(issue):
            with m.If(ln_end):
                m.d.sync += [ln.eq(0), ln_end.eq(lm1 == 0), n_left.eq(n_am)]
                with m.If(hh_end):
                    m.d.sync += [hh.eq(0), hh_end.eq(hm1 == 0), r.eq(r + 1), r_end.eq(r + 1 == rm1),
                                 trow.eq(trow + hd)]
                    with m.If(r_end):
                        m.d.sync += walking.eq(0)
                with m.Else():
                    m.d.sync += [hh.eq(hh + 1), hh_end.eq(hh + 1 == hm1)]
            with m.Else():
                m.d.sync += [ln.eq(ln + 1), ln_end.eq(ln + 1 == lm1), n_left.eq(n_left - C)]
        # ROPE, the cycle after an issue: port b reads the sin line and port a the x line, so that x meets sin
        # (and the cos line, which waits a cycle) at the serializer with no line register of its own
        sin_rd = Signal()
        sin_addr, x_addr = Signal.like(self.vb_addr, reset_less=True), Signal.like(self.va_addr, reset_less=True)
        m.d.sync += sin_rd.eq(issue & rope)
        with m.If(issue):
            m.d.sync += [sin_addr.eq(trow + ((hd + ln) >> 1)), x_addr.eq(a_ptr)]
        m.d.comb += [
            self.va_addr.eq(Mux(sin_rd, x_addr, a_ptr)), self.va_en.eq((issue & reads_a) | sin_rd),
            self.vb_addr.eq(Mux(sin_rd, sin_addr, Mux(rope, c_ptr, b_ptr))),
            self.vb_en.eq((issue & reads_b) | sin_rd),
            self.acc_addr.eq(acc_ptr), self.acc_en.eq(issue),
            self.exp_addr.eq(exp_ptr), self.exp_en.eq(issue & is_["REQUANT"]),
        ]
        # ---- the line's data arrive the next cycle and go into flip-flops as they are (``va_r`` ..): a block RAM's
        # clock-to-data (5.8 ns on ECP5) and the routing from it leave no time for a select before a register at
        # 100 MHz (ulx3s: the ROPE table's half select into b_line, 12.2 ns).  So what was decided at the issue
        # follows a cycle later (``iss``, the ``_q`` registers), where the data are.  Then beat 0 enters its unit
        # at once, the other B - 1 beats follow from the serializer's register, one a cycle (hw/line_serial.py)
        va_r, vb_r, acc_r = (Signal(C * 32, name=f"{p}_r", reset_less=True) for p in ("va", "vb", "acc"))
        exp_r = Signal(8, name="exp_r", reset_less=True)
        m.d.sync += [va_r.eq(self.va_rdata), vb_r.eq(self.vb_rdata), acc_r.eq(self.acc_rdata),
                     exp_r.eq(self.exp_rdata[:8])]
        iss = Signal(name="issued")
        first_q, last_q, cos_hi_q, sin_hi_q = Signal(), Signal(), Signal(), Signal()
        nline_q = Signal(17, reset_less=True)
        m.d.sync += [iss.eq(issue), first_q.eq(ln == 0), last_q.eq(ln_end), nline_q.eq(n_left),
                     cos_hi_q.eq(ln[0]), sin_hi_q.eq((hd + ln)[0])]
        valid = Signal()
        first, last = Signal(), Signal()
        nline = Signal(17, reset_less=True)  # ARGMAX: lanes of the row from this line on
        cos_hi, sin_hi = Signal(), Signal()  # ROPE: which half of each table line holds this line's pairs
        m.d.sync += [valid.eq(iss), first.eq(first_q), last.eq(last_q),
                     nline.eq(nline_q), cos_hi.eq(cos_hi_q), sin_hi.eq(sin_hi_q)]
        half = C // 2 * 32
        cos = Mux(cos_hi, vb_r[half:], vb_r[:half])
        # ROPE: the cos line arrives with `valid` and waits a cycle in a register for the x and sin lines; the
        # line loads into the serializer a cycle later
        valid2 = Signal()
        cos_wait = Signal(C // 2 * 32, reset_less=True)
        first2, last2, sin_hi2 = Signal(), Signal(), Signal()
        # (valid's own uses are few: a ROPE copy enables the wait registers, an ARGMAX copy the lane count)
        valid_rope, valid_am = Signal(), Signal()
        m.d.sync += [valid_rope.eq(iss & rope), valid_am.eq(iss & is_["ARGMAX"])]
        m.d.sync += [valid2.eq(valid_rope), first2.eq(first), last2.eq(last), sin_hi2.eq(sin_hi)]
        with m.If(valid_rope):
            m.d.sync += cos_wait.eq(cos)
        sin = Mux(sin_hi2, vb_r[half:], vb_r[:half])
        # the serializers' load strobes (Mux(rope, valid2, valid), split by unit) are registers of their own:
        # each selects a whole line's register, too many loads for a decoded net (ECP5: 5.6 ns of routing)
        load, ld_vec, ld_act = Signal(), Signal(), Signal()
        nxt = Mux(rope, valid_rope, iss)
        m.d.sync += [load.eq(nxt), ld_vec.eq(nxt & ~to_act), ld_act.eq(iss & to_act)]
        # beat k rotates pairs k*W/2 .. of the line: its b is their W/2 cos, then their W/2 sin elements
        hb = W // 2 * 32
        rope_b = Cat(*[Cat(cos_wait[k * hb:(k + 1) * hb], sin[k * hb:(k + 1) * hb]) for k in range(B)])
        # the line multiplexers' selects, a copy per lane: one flag over 256 or 512 bits was 9.2 ns of routing
        # on ECP5.  The copies are a cycle behind the op flags (a line loads two cycles after start at the
        # earliest), and distinct registers, so that Yosys does not merge them back into one (_fanout_copies)
        sel_req = _fanout_copies(m, w_is["REQUANT"], self.start, C, "sel_req")
        sel_rope = _fanout_copies(m, w_is["ROPE"], self.start, C, "sel_rope")
        lane = [slice(c * 32, (c + 1) * 32) for c in range(C)]
        a_sel = Cat(*[Mux(sel_req[c], acc_r[lane[c]], va_r[lane[c]]) for c in range(C)])
        b_sel = Cat(*[Mux(sel_rope[c], rope_b[lane[c]], vb_r[lane[c]]) for c in range(C)])
        # the lines, and what goes with them, are registered before the serializers (a cycle later than their
        # read data): the block RAMs' clock-to-data (5.8 ns on ECP5), the lane selects and the serializer's beat
        # select reached the vector unit's input register in one cycle (ulx3s: 12.9 ns)
        a_line = Signal(len(a_sel), name="a_line", reset_less=True)
        b_line = Signal(len(b_sel), name="b_line", reset_less=True)
        exp_l = Signal(8, name="exp_l", reset_less=True)
        first_l, last_l = Signal(name="first_l"), Signal(name="last_l")
        valid_am_l = Signal(name="valid_am_l")
        nline_l = Signal(17, name="nline_l", reset_less=True)
        m.d.sync += [a_line.eq(a_sel), b_line.eq(b_sel), exp_l.eq(exp_r),
                     first_l.eq(Mux(rope, first2, first)), last_l.eq(Mux(rope, last2, last)),
                     valid_am_l.eq(valid_am), nline_l.eq(nline)]
        load_l, ld_vec_l, ld_act_l = Signal(name="load_l"), Signal(name="ld_vec_l"), Signal(name="ld_act_l")
        m.d.sync += [load_l.eq(load), ld_vec_l.eq(ld_vec), ld_act_l.eq(ld_act)]
        with m.If(self.start):
            m.d.sync += [load_l.eq(0), ld_vec_l.eq(0), ld_act_l.eq(0)]
        if NB == B:
            (a_beat, b_beat), bvalid, bfirst, blast = serialize(m, load_l, [a_line, b_line], [W * 32, W * 32], B,
                                                                "ser", clear=self.start)
            x_beat, xvalid, xlast = a_beat, bvalid, blast
        else:  # the activation unit's narrower beats: from the same register as the vector unit's a beats (one
            # of the two units runs at a time, and a SILU / GELU line is a_line: its lanes select va, not REQUANT's
            # accumulator), shifted NW lanes a cycle instead of W
            (b_beat,), _, _, _ = serialize(m, ld_vec_l, [b_line], [W * 32], B, "ser", clear=self.start)
            (a_beat, bvalid, bfirst, blast), (x_beat, xvalid, xlast) = serialize_two_rates(
                m, ld_vec_l, ld_act_l, a_line, W * 32, NW * 32, "aser", clear=self.start)
        exp = hold(m, load_l, exp_l, "exp_line").as_signed()
        lfirst = hold(m, load_l, first_l, "first_line")
        llast = hold(m, load_l, last_l, "last_line")
        # ARGMAX: valid lanes of this beat, clamp(lanes left in the row - k*W, 0, W)
        nb = Signal(signed(18))
        nreg = Signal(signed(18), reset_less=True)
        m.d.comb += nb.eq(Mux(valid_am_l, nline_l, nreg))
        m.d.sync += nreg.eq(nb - W)
        nl = Mux(nb >= W, W, Mux(nb > 0, nb, 0))
        vp = vec.i_stream.payload
        m.d.comb += [
            vec.i_stream.valid.eq(bvalid & ~to_act),
            vp.op.eq(Mux(is_["ADD"], VecOp.ADD, Mux(is_["MUL"], VecOp.MUL,
                                                     Mux(is_["REQUANT"], VecOp.REQUANT,
                                                         Mux(is_["ROPE"], VecOp.ROPE, VecOp.ARGMAX))))),
            vp.a.eq(a_beat), vp.b.eq(b_beat),
            vp.shift.eq(Mux(is_["REQUANT"], ins.requant.shift - exp, ins.mul.shift)),
            vp.first.eq(lfirst & bfirst), vp.last.eq(llast & blast), vp.n.eq(nl),
            act.i_stream.valid.eq(xvalid & to_act),
            act.i_stream.payload.op.eq(Mux(is_["SILU"], ActOp.SILU, ActOp.GELU)),
            act.i_stream.payload.data.eq(x_beat), act.i_stream.payload.last.eq(llast & xlast),
            vec.o_stream.ready.eq(1), act.o_stream.ready.eq(1),
        ]
        # ---- outputs, in order, to dst: B beats gathered into a line; ARGMAX's one beat per row is a line
        is_am = is_["ARGMAX"]
        am_sel = flag_copies(m, w_is["ARGMAX"], self.start, "am_sel")  # ARGMAX, for the output line (as act_sel)
        if NB == B:
            obeat = Mux(act.o_stream.valid, act.o_stream.payload.data.as_value(), vec.o_stream.payload.data.as_value())
            oline, complete = gather(m, (vec.o_stream.valid | act.o_stream.valid) & ~is_am, obeat, B, "gat",
                                     clear=self.start)
        else:
            vline, vcomplete = gather(m, vec.o_stream.valid & ~is_am, vec.o_stream.payload.data.as_value(), B, "gat",
                                      clear=self.start)
            xline, xcomplete = gather(m, act.o_stream.valid, act.o_stream.payload.data.as_value(), NB, "agat",
                                      clear=self.start)
            # one unit runs at a time (an instruction ends once its outputs are written): no select on complete
            oline, complete = lane_mux(act_sel, xline, vline, 32), vcomplete | xcomplete
        got = Signal()
        m.d.comb += got.eq(complete | (vec.o_stream.valid & is_am))
        m.d.comb += [self.out_addr.eq(optr), self.out_en.eq(got | zeros_nz),
                     self.out_data.eq(Mux(zeros_nz, 0, lane_mux(am_sel, vec.o_stream.payload.data.as_value(), oline, 32)))]
        with m.If(got | zeros_nz):
            m.d.sync += optr.eq(optr + 1)
        # one output line per line read, ARGMAX one per row (at its last line)
        m.d.sync += pend.eq(pend + (issue & (~is_am | ln_end)) - got)
        with m.If(self.start):
            m.d.sync += pend.eq(0)
        with m.If(zeros_nz & ~self.start):
            m.d.sync += [zeros.eq(zeros - 1), zeros_nz.eq(zeros != 1)]
        m.d.comb += self.busy.eq(walking | (pend != 0) | zeros_nz | bvalid | xvalid | iss | valid2 | load_l | ld_act_l)
        return m
