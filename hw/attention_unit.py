"""Attention unit: one KV tile of streaming (FlashAttention-style) attention for up to ``R`` query rows.

Bit-exact with :func:`systolica.numerics.attn_tile` for the rows of ``q`` of one job.  ``R =
cfg.attn_rows`` rows (the heads of one GQA group) go through the tile *together*: each K and
V line is read once and meets every row's query in parallel dot products, so a group of
``R`` rows costs the tile's lines once instead of ``R`` times.  The unit sees the tile as a
stream of lines and keeps only what its rows need: per row the query (``hd`` bytes), the
tile's scores (one int32 per token: ``max_tokens`` words, a block RAM) and the ``p . V`` sums
(``hd`` lanes of 56 bits).  The full score matrix never exists; across tiles the running
state ``(m, l, o)`` of each row goes in and out through the streams (it lives in the vector
buffer).

Beat sequence of one job of ``n <= R`` rows on ``i_stream`` (``kind``, see :class:`AttnBeat`):

1. ``HDR`` x ``n``: ``data[0] = m``, ``data[1] = l`` (row ``i``'s old state), ``offset``, ``causal``
   (the same for every row: one query position); ``last`` on the job's last row;
2. ``Q`` x ``n * hd/C`` lines, row by row: the query (int8 in each lane), ``exp = qexp`` of the
   row, ``eot`` on each row's last line, ``last`` on the job's last line;
3. ``K`` x ``t * hd/C`` lines: token by token, ``exp = kexp_j``, ``eot`` on each token's last
   line, ``last`` on the tile's last line; the unit accumulates each row's ``q . k_j`` one line
   per cycle, then ``u_j = sat32(rsr(dot * LOG2E_Q30, 10 - qexp - kexp_j))`` (log2 units, Q20);
   masked tokens (``causal and j > offset``) are skipped; each row's running maximum ``m1`` grows;
4. ``V`` x ``t * hd/C`` lines, framed like K: each row's ``p_j = exp2_fx(u_j - m1, 20, 28)`` and
   ``PV += (d_j * v_j) << max(min(vexp_j, 3), 0)`` lane by lane with ``d_j = exp2_fx(u_j - m1, 20, 28,
   down=max(-vexp_j, 0))`` (the weight with V's exponent applied, rounded once a token and row), ``sum p_j``
   per token; then (internal, while the last V lines drain: V needs only ``m1``) ``a = exp2_fx(m - m1, 20,
   30)``, the rescale of each row's old state;
5. (internal: every row's ``L = rsr(l*a, 30) + rsr(sum p, 8)`` and ``r = max(0, bitlen(L) - 21)``, a row a
   cycle through one pipeline) per row, in order: a header line (``hdr``) on ``o_stream`` with ``data[0] =
   sat32(m1 + (r << 20))``, ``data[1] = sat32(rsr(L, r))``, then ``STATE_O`` x ``hd/C`` lines
   in: the row's old ``o`` (``last`` on its last line), each giving the new line
   ``sat32(rsr(rsr(o*a, 30) + rsr(PV, 8), r))`` on ``o_stream``.

``ATTN_OUT`` (:func:`~systolica.numerics.attn_finish`) is a second job type, one row: a ``FIN``
beat with ``data[1] = l``, then the ``hd/C`` lines of ``o`` (kind ``STATE_O``); after one
reciprocal of ``l`` (:class:`~systolica.hw.recip.Reciprocal`, 33 cycles) each line gives
``sat32(rsr(o * y, k - 16))`` (fx), or 0 when ``l = 0``.

With ``cfg.attn_pv_shared`` the rows of a job take turns on ``S = cfg.attn_pv_sets`` ``exp2`` pipelines and sets
of ``C`` p.V lanes instead of a copy each: row ``r`` is on set ``r % S`` in slot ``r // S``; a V line stays on the
stream for ``ceil(n / S)`` cycles (``n`` rows in the job; K is still one line a cycle for all of them), entering
the pipelines once a slot with its rows' scores (the slot rides in the tag), and is taken with its last slot;
each row's ``PV`` sits at the address (slot, line) of its set's memory a lane, and state A's rescales take a
slot a cycle.  A row then costs its K-side products and sum tree, its
score buffer and its state registers, not another ``exp2`` pipeline and ``C`` more p.V products and
56-bit sums; a job's V phase costs ``ceil(n / S)`` times its lines instead of once.

A tile with no unmasked token returns the state unchanged, as numerics does.  GQA groups
of more than ``R`` rows are several jobs over the same tile (it stays in the scratchpad).
Throughput: one K or V line per cycle, so ``2 * hd / C`` cycles per KV token and job (of up
to ``R`` rows), plus per row its header, ``hd/C`` query lines and ``hd/C`` state lines, and a
few cycles per job.  A beat of the wrong kind for the current phase (or more rows than the
job announced, or than the unit holds) sets the sticky ``error`` output and is dropped.

Pipelining (for ECP5 at 100 MHz: each stage one multiply, one carry chain or one barrel shift; a
multiplier has registers right before and after it): K runs in K0, KB, KP (the C-lane products of every
row), a tree of log2(C) adds and K2 (hw/attn_pipes.py), then the scores through the state-line lanes
(hw/attn_state_lines.py: S0 .. S8, whose multipliers also scale the scores, so ``R <= line_width``, and give
state L's ``l * a``); state A puts each row's ``m`` through the ``exp2`` pipeline (X1 .. E5, hw/attn_exp.py);
V its scores (from block RAM) through the same pipeline, then ``p * v`` (P1 .. P3), the shift and the PV read
(P4), its rounding and the PV write (P5).  The states are one-hot (hw/attn_fsm.py).  State L puts the rows'
``l * a`` into lane 0, a row a cycle; as each leaves S3 it enters the row-end pipeline (hw/attn_row_end.py:
one stage each for the two roundings, ``L``, the bit lengths of L's bytes, ``bitlen(L)``, ``r``, the rounding
shift and the header), so the rows' ends overlap; each row's header then enters the lanes (state OUTH) ahead of
its output lines and leaves S8 in order with them, so the rows follow each other through the lanes with no
gap (the header had gone straight to ``o_stream`` and waited for the row before to leave the lanes).  Fixed
latency beyond the lines (RTL): 54 cycles a job (K drains, V drains with the rescales A behind the V lines, the
first row's end) and 2 a row (its header in and out): 43 and 13 when each row's end waited for the row before
(2026-12-06); the last output line leaves 9 cycles after its input line.
"""

from __future__ import annotations

import enum

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig

from .attn_exp import exp2_pipelines
from .attn_fsm import OneHotFSM
from .attn_pipes import AddrCopies, k_pipeline, pv_pipeline
from .attn_row_end import RowEnd
from .attn_state_lines import KIND_LA, PV_BITS, state_lines
from .attn_state_lines import row_suffix as _s
from .recip import Reciprocal
from .word_regs import stage_reg

__all__ = ["AttentionUnit", "AttnBeat"]


class AttnBeat(enum.IntEnum):
    HDR = 0
    Q = 1
    K = 2
    V = 3
    STATE_O = 4
    FIN = 5


class AttentionUnit(wiring.Component):
    """Streaming attention over one KV tile for up to ``cfg.attn_rows`` query rows (see the module docstring).

    Parameters
    ----------
    cfg : AccelConfig
        ``cols`` = lanes per line.
    max_tokens : int
        Largest tile (tokens) the score buffer holds.
    max_lines : int
        Largest head in lines (``hd / cols``); the ISA's ATTN allows 63.
    """

    def __init__(self, cfg: AccelConfig, *, max_tokens: int = 256, max_lines: int = 63):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
        if not (isinstance(max_tokens, int) and 1 <= max_tokens <= 4096):
            raise ValueError(f"max_tokens={max_tokens!r} must be in 1..4096 (ATTN tiles hold up to 4095 tokens)")
        if not (isinstance(max_lines, int) and 1 <= max_lines <= 63):
            raise ValueError(f"max_lines={max_lines!r} must be in 1..63 (ATTN's hd field)")
        self.cfg, self.max_tokens, self.max_lines = cfg, max_tokens, max_lines
        self.rows = cfg.attn_rows  # query rows of one job, through each K / V line together
        self.pv_shared = bool(cfg.attn_pv_shared) and self.rows > 1  # the rows take turns on sets of p.V lanes
        self.pv_sets = cfg.attn_pv_sets if self.pv_shared else 1  # how many sets (and exp2 pipelines) they share
        self.lanes = cfg.line_width  # lanes of the state-line datapath (O pass, ATTN_OUT)
        C = cfg.cols
        line = data.ArrayLayout(signed(32), C)
        self.i_layout = data.StructLayout({"kind": 3, "data": line, "exp": signed(8), "eot": 1, "last": 1,
                                           "offset": signed(18), "causal": 1})
        self.o_layout = data.StructLayout({"data": line, "hdr": 1, "last": 1})
        super().__init__({
            "i_stream": In(stream.Signature(self.i_layout)),
            "o_stream": Out(stream.Signature(self.o_layout)),
            "error": Out(1),
        })

    def elaborate(self, platform):

        m = Module()
        C, R = self.cfg.cols, self.rows
        i, o = self.i_stream, self.o_stream
        p = i.payload

        # ---- storage per query row of a job: query lines, tile scores, p.V sums; shared exp tables ----
        def mem(name, shape, depth, init=(), attrs=None):
            mm = memory.Memory(shape=shape, depth=depth, init=list(init), attrs=attrs)
            m.submodules[name] = mm
            return mm

        qmems = [mem(f"qmem{_s(r)}", data.ArrayLayout(signed(8), C), self.max_lines) for r in range(R)]
        # block RAM, not UltraRAM: a score buffer is 4 RAMB36 (unused on the UltraScale+ presets) against one of
        # the URAM288 that the large buffers need (on zcu104 the second row's buffer passed the 80% URAM limit)
        umems = [mem(f"umem{_s(r)}", signed(32), self.max_tokens, attrs={"ram_style": "block"}) for r in range(R)]
        # the p.V sums in LUT-RAM, one memory a lane (each with address registers of its own: see pv_raddr)
        # the read and write addresses, one copy a lane each (hw/attn_pipes.py: AddrCopies; half the lanes'
        # memories are addressed in reverse, so that Yosys keeps the copies apart)
        li_w = max(1, (self.max_lines - 1).bit_length())  # addresses 0 .. max_lines - 1
        # rows sharing the lanes (attn_pv_shared): S sets of lanes, row r on set r % S in slot r // S; one memory a
        # lane, addressed by the slot and the line.  A V line enters the S exp2 pipelines NP times, a slot a cycle
        shared = self.pv_shared
        S = self.pv_sets
        NP = -(-R // S)  # slots (passes of a V line)
        row_w = (NP - 1).bit_length() if shared else 0
        PVG = S if shared else R  # lane groups: one a row, or the S sets shared by the rows
        pv_raddr = AddrCopies(m, "pv_raddr", li_w + row_w, C)
        pv_waddr = AddrCopies(m, "pv_waddr", li_w + row_w, C)
        pvmems = [[mem(f"pvmem{_s(r)}_{c}", signed(PV_BITS), pv_raddr.depth) for c in range(C)] for r in range(PVG)]
        q_ws, q_rs = [q.write_port() for q in qmems], [q.read_port(domain="comb") for q in qmems]
        # the score buffers (max_tokens words) are read synchronously so that they map to block RAM (one read
        # port: tests/hw/test_buffer_ports.py): in V the address is tok + 1 (kept beside tok; see u_cur)
        u_ws, u_rs = [u.write_port() for u in umems], [u.read_port(domain="sync") for u in umems]
        pv_ws = [[v.write_port() for v in row] for row in pvmems]
        pv_rs = [[v.read_port(domain="comb") for v in row] for row in pvmems]

        # ---- job state: per query row, and shared by the rows (they see the same tile and mask) --------
        def per_row(name, shape):
            return [Signal(shape, name=f"{name}{_s(r)}") for r in range(R)]

        m_old, l_old, m1 = per_row("m_old", signed(32)), per_row("l_old", signed(32)), per_row("m1", signed(32))
        qexp = per_row("qexp", signed(8))
        dot = per_row("dot", signed(32))
        a = per_row("a", unsigned(33))  # exp2(m - m1), Q30
        sum_p = per_row("sum_p", unsigned(48))  # sum of p_j, Q28: < 4096 * 2**28
        offset, causal = Signal(signed(18)), Signal()
        hi = Signal(range(R), name="hdr_row")  # row of the HDR / Q beat
        ri = Signal(range(R), name="out_row")  # row of the L / OUTH / O pass
        nlast = Signal(range(R), name="last_row")  # the job's last row
        # its slot (the last pass of a V line; shared lanes): the row itself with one set
        nlp = nlast if S == 1 else Signal(range(NP), name="last_slot")
        li = Signal(range(self.max_lines + 1))  # line within the current token / head
        tok = Signal(range(self.max_tokens + 1))
        anyv = Signal()  # some token of the tile was unmasked (the same for every row: one query position)
        row_end = RowEnd(R)  # the rows' new L, shift r and header (a pipeline, a row a cycle: hw/attn_row_end.py)
        fire = i.valid & i.ready
        valid_tok = ~causal | (tok <= offset)
        tok_p1 = Signal(range(self.max_tokens + 2), init=1)  # tok + 1, kept beside tok (the score read address)
        l_old_o, a_o = Array(l_old)[ri], Array(a)[ri]  # state L's l * a and the O pass's a: row ri's

        # the unit's states, one flip-flop each (hw/attn_fsm.py)
        fsm = OneHotFSM(m, ["HDR", "FREQ", "FWAIT", "FOUT", "Q", "K", "KDRAIN", "A", "AW", "V", "VDRAIN", "L",
                            "OUTH", "O", "ODRAIN"], "attn")

        # one exp2 pipeline per row serves `a` (state A, frac 30) and p_j (V phase, frac 28): hw/attn_exp.py; with
        # the rows sharing the p.V lanes one pipeline serves them in turn, the row riding in the tag
        exp_in = per_row("exp_in", signed(32))  # m_old (state A) or the score u_j (V)
        # fo: 30 - frac (A 0, V 2); fd: V's 2 + max(-vexp, 0) (capped at 42: the shift stops at 40), the shift of
        # d_j = p_j * 2**vexp beside p_j's (hw/attn_exp.py)
        e_fields = {"v": 1, "isv": 1, "ok": 1, "fo": range(3), "fd": range(43), "exp": signed(8),
                    "li": range(self.max_lines + 1),
                    "first": 1, "eot": 1, "data": data.ArrayLayout(signed(8), C)}
        e_l = data.StructLayout({**e_fields, "row": range(NP)} if shared else e_fields)  # shared: the slot
        e_in = Signal(e_l, name="exp_issue")  # what enters X1 this cycle (A: isv = 0; V: a line)
        # the V line's fields in every cycle (state A overrides isv and fo): only e_in.v waits for the handshake,
        # so X1's tag registers load without an enable (a reset from `fire` on each was 5 ns of routing)
        m.d.comb += [e_in.isv.eq(1), e_in.ok.eq(valid_tok), e_in.fo.eq(2), e_in.exp.eq(p.exp), e_in.li.eq(li),
                     e_in.first.eq(tok == 0), e_in.eot.eq(p.eot)]

        def down_of(t):  # fd from X1's exp, into X2's tag: `exp` comes from the input FIFO's read data, and
            # its compares and subtract before X1 were among the unit's slowest paths on ECP5 (10.3 ns)
            return Mux(t.exp >= 0, 2, Mux(t.exp < -40, 42, 2 - t.exp))
        m.d.comb += [e_in.data[c].eq(p.data[c][0:8]) for c in range(C)]
        if shared:
            # X1's operands, one a set: its row's (slot * S + set) score or m, and running maximum (registered beside
            # X1: X2 takes x1 - m1); a row past the last (the last slot of R rows on S sets) is a don't-care
            x_rows, m1_xs = [], []
            for g in range(S):
                row_g = e_in.row if S == 1 else e_in.row * S + g
                m1_x = Signal(signed(32), name=f"exp_m1_row{_s(g)}", reset_less=True)
                m.d.sync += m1_x.eq(Array(m1)[row_g])
                x_row = Signal(signed(32), name=f"exp_in_row{_s(g)}")
                m.d.comb += x_row.eq(Array(exp_in)[row_g])
                x_rows.append(x_row)
                m1_xs.append(m1_x)
            etag, e_fin, e_dn = exp2_pipelines(m, e_l, e_in, x_rows, m1_xs, _s, down_field="fd", down_of=down_of)
        else:
            etag, e_fin, e_dn = exp2_pipelines(m, e_l, e_in, exp_in, m1, _s, down_field="fd", down_of=down_of)
        # m_old in state A, else the score read from block RAM (one select: what X1 holds outside A and V is
        # never used)
        e_busy = Signal(name="exp_busy")
        m.d.comb += e_busy.eq(Cat(*[t.v for t in etag]).any())

        # a beat of the kind the state takes: per state, with no priority between the (exclusive) state flags;
        # `tk[s]` (the beat taken and of the right kind) in state s's own logic is then i.valid & ok[s] (HDR, Q,
        # K and V take every beat: ready is 1 there)
        ok = {"HDR": ((p.kind == AttnBeat.HDR) & (p.last | (hi != R - 1))) | ((p.kind == AttnBeat.FIN) & (hi == 0)),
              "Q": (p.kind == AttnBeat.Q) & ~(p.eot & ~p.last & (hi == nlast)),
              "K": p.kind == AttnBeat.K, "V": p.kind == AttnBeat.V, "SL": p.kind == AttnBeat.STATE_O}
        tk = {k: Signal(name=f"take_{k.lower()}") for k in ok}
        m.d.comb += [tk[k].eq(i.valid & v) for k, v in ok.items()]
        good = Signal(name="beat_good")
        take_sl = fsm.group("sl", ["FOUT", "O"])
        # rows sharing the p.V lanes: a V line enters the exp2 pipeline once a row (`e_row`), n cycles, and is
        # taken with its last row (`v_last`, a register: the line stays on the stream until then)
        e_row = Signal(range(NP), name="exp_row")  # the slot (with one set: the row)
        v_last = Signal(init=1, name="v_last_row")
        if shared:
            take_all = Signal(name="take_all")
            m.d.comb += take_all.eq(fsm.group("take3", ["HDR", "Q", "K"]) | (fsm["V"] & v_last))
            m.d.comb += e_in.row.eq(e_row)
        else:
            take_all = fsm.group("take", ["HDR", "Q", "K", "V"])
        m.d.comb += good.eq((fsm["HDR"] & ok["HDR"]) | (fsm["Q"] & ok["Q"]) | (fsm["K"] & ok["K"])
                            | (fsm["V"] & ok["V"]) | (take_sl & ok["SL"]))
        tk_v = Signal(name="take_v_line")  # a V line taken (in state V)
        m.d.comb += tk_v.eq(tk["V"] & v_last)
        wrong = Signal()
        m.d.comb += wrong.eq(~good)
        # the current token's score (V): the buffer reads at tok + 1 (a register: no handshake in front of the
        # block RAM's address), so its output is the current token's score in the cycle after a token's last
        # line was taken (and after AW, whose address is tok = 0), else the next token's: `u_cur` keeps it
        u_new = Signal(name="score_new")  # the buffer's output is the current token's score
        u_cur = [Signal(signed(32), name=f"score_cur{_s(q)}", reset_less=True) for q in range(R)]
        u_now = [Signal(signed(32), name=f"score_now{_s(q)}") for q in range(R)]
        m.d.sync += u_new.eq(fsm["AW"] | (fsm["V"] & tk_v & p.eot))
        m.d.comb += [u_now[q].eq(Mux(u_new, u_rs[q].data, u_cur[q])) for q in range(R)]
        m.d.sync += [u_cur[q].eq(u_now[q]) for q in range(R)]
        m.d.comb += [exp_in[q].eq(Mux(fsm["A"], m_old[q], u_now[q])) for q in range(R)]
        with m.If(fire & wrong):
            m.d.sync += self.error.eq(1)

        # 35 cycles: its operand, bit length and shift registered
        m.submodules.recip = recip = Reciprocal(33, registered=True)
        fy_d, fk = Signal(unsigned(31), name="fy_d"), Signal(unsigned(7))  # the lanes' y operand: y_sl (FWAIT's)
        # ATTN_OUT jobs are one row: l from a register of its own beside the reciprocal (loaded with l_old[0];
        # reset-less, so that Yosys keeps it apart): l_old's other loads had placed it 10 ns of routing away
        # from the reciprocal's operand register, the slowest path measured); l > 0 registered in FREQ
        l_rc, l_pos = Signal(signed(32), name="recip_l", reset_less=True), Signal(name="recip_l_pos")
        m.d.comb += recip.i_stream.payload.eq(l_rc)
        m.d.comb += recip.o_stream.ready.eq(1)  # its one result (35 cycles after FREQ) is taken in FWAIT
        m.d.comb += fy_d.eq(Mux(l_pos, recip.o_stream.payload.y, 0))

        r_s = Signal(signed(8))  # row ri's r as a signed shift amount (the O pass)
        m.d.comb += r_s.eq(Array(row_end.r)[ri])

        # ---- K pipeline (hw/attn_pipes.py): K0, KP the products, the sum tree, K2 the dot-product accumulation
        k0, kp, k_tree, k2 = k_pipeline(m, p, tok, valid_tok, q_rs, qexp, dot, anyv, R, C, self.max_tokens, _s)

        # ---- V pipeline: V1 p_j and d_j (in state V), V2 PV += (d_j * v) << max(vexp, 0), each row at once ----
        # (shared lanes: one row a V1 entry, its PV address the row and the line)
        # p: p_j (for sum p); d: d_j = p_j * 2**min(vexp, 0), rounded once (<= p_j <= 2**28), the lanes' operand
        v1 = stage_reg(data.StructLayout({"v": 1, "p": data.ArrayLayout(unsigned(33), PVG),
                                       "d": data.ArrayLayout(unsigned(29), PVG),
                                       "d3": data.ArrayLayout(unsigned(31), PVG),
                                       "dn": data.ArrayLayout(signed(30), PVG), "exp": signed(8),
                                       "li": unsigned(li_w + row_w) if shared else range(self.max_lines + 1),
                                       "first": 1, "eot": 1, "row": range(NP if shared else R),
                                       "data": data.ArrayLayout(signed(8), C)}), "v1")  # only v resets
        e4 = etag[-1]
        m.d.sync += [v1.v.eq(e4.v & e4.isv), v1.exp.eq(e4.exp), v1.first.eq(e4.first), v1.eot.eq(e4.eot),
                     v1.data.eq(e4.data)]
        m.d.sync += [v1.p[q].eq(Mux(e4.ok, e_fin[q], 0)) for q in range(PVG)]
        # d_j, and 3 d_j and -d_j for the p.v lanes' radix-4 products (hw/lut_mul.py a3, na), registered beside it
        d = [e_dn[q][:29] for q in range(PVG)]
        m.d.sync += [v1.d[q].eq(Mux(e4.ok, d[q], 0)) for q in range(PVG)]
        m.d.sync += [v1.d3[q].eq(Mux(e4.ok, d[q] + (d[q] << 1), 0)) for q in range(PVG)]
        m.d.sync += [v1.dn[q].eq(Mux(e4.ok, -d[q], 0)) for q in range(PVG)]
        if shared:
            m.d.sync += [v1.li.eq(Cat(e4.li[:li_w], e4.row[:row_w])), v1.row.eq(e4.row)]
            with m.If(e4.v & ~e4.isv):  # state A's rescales, one slot an entry (its row on each set)
                for q in range(R):
                    with m.If(e4.row == q // S):
                        m.d.sync += a[q].eq(e_fin[q % S])
            for q in range(R):  # sum p_j once a token (on its last line)
                with m.If(v1.v & v1.eot & (v1.row == q // S)):
                    m.d.sync += sum_p[q].eq(sum_p[q] + v1.p[q % S])
        else:
            m.d.sync += v1.li.eq(e4.li)
            with m.If(e4.v & ~e4.isv):  # state A's rescales
                m.d.sync += [a[q].eq(e_fin[q]) for q in range(R)]
            with m.If(v1.v & v1.eot):  # sum p_j once a token (on its last line), each row
                m.d.sync += [sum_p[q].eq(sum_p[q] + v1.p[q]) for q in range(R)]
        dsp = bool(self.cfg.dsp_muls)
        # V2: P1 .. P5 and the PV read-modify-write (hw/attn_pipes.py): one lane group a row, or one for all
        vt, v_busy = pv_pipeline(m, v1, pv_ws, pv_rs, PVG, C, v1.li.shape(), PV_BITS, _s, pv_waddr, dsp=dsp)
        # the p.V read-modify-write (stage V2) and the O pass share each row's PV read port
        m.d.comb += [q_r.addr.eq(li) for q_r in q_rs]
        # the PV read address is a register (it drives every lane's LUT-RAM): the RMW's line (P4's) a cycle
        # ahead, or in states OUTH and O the O pass's line, li (O updates it with li).  One copy a lane (one
        # register would drive every lane's LUT-RAM: ~450 cells, 6.6 ns of routing measured)
        m.d.sync += pv_raddr.eq(vt[-3].li)
        m.d.comb += [pv_rs[q][c].addr.eq(pv_raddr[c]) for q in range(PVG) for c in range(C)]
        m.d.comb += [u_r.addr.eq(Mux(fsm["V"], tok_p1, tok)) for u_r in u_rs]

        sl = state_lines(m, C=C, R=R, L=self.lanes, max_tokens=self.max_tokens, p=p, o=o, pv_rs=pv_rs, shared=shared,
                         S=S, NP=NP, ri=ri, li_w=li_w, row_w=row_w, fk=fk, anyv=anyv, a_o=a_o, r_s=r_s, k2=k2,
                         l_old_o=l_old_o, u_ws=u_ws, m1=m1, tk=tk, m_hdr=row_end.m_new, l_hdr=row_end.l_new, fy_d=fy_d,
                         fwait=fsm["FWAIT"], fout=fsm["FOUT"])
        tags, adv, pipe_busy, in_l, in_h, la = sl.tags, sl.adv, sl.pipe_busy, sl.in_l, sl.in_h, sl.la
        # the rows' ends, a row a cycle as their l * a leave S3 (issued a cycle apart in state L)
        la_v = Signal(name="row_end_in")
        m.d.comb += la_v.eq(tags[3].v & (tags[3].kind == KIND_LA) & adv)
        row_end.build(m, la_v=la_v, la=la, la_row=tags[3].row, clear=fsm["VDRAIN"], sum_p=sum_p, m1=m1, m_old=m_old,
                      l_old=l_old, anyv=anyv)
        last_group, pv_line_addr, state_line = sl.last_group, sl.pv_line_addr, sl.state_line

        # the unit takes every beat in HDR, Q, K and V (a wrong one to drop it), a state line's with its last
        # lane group (or a wrong beat): `ready` from flip-flops and the beat's kind only
        m.d.comb += i.ready.eq(take_all | (take_sl & (~ok["SL"] | (last_group & adv))))
        if True:  # (the states' blocks)
            with fsm.state("HDR"):
                # a job's rows: one header each, the last one marked; more than the unit holds is an error
                # the row's old state loads in every cycle of HDR while hi is its row (the last load is its beat's:
                # hi moves on as it is taken), so that no wide enable waits for the handshake
                for q in range(R):
                    with m.If(hi == q):
                        m.d.sync += [m_old[q].eq(p.data[0]), l_old[q].eq(p.data[1])]
                        if q == 0:
                            m.d.sync += l_rc.eq(p.data[1])
                    m.d.sync += dot[q].eq(0)
                m.d.sync += [offset.eq(p.offset), causal.eq(p.causal), li.eq(0), tok.eq(0), tok_p1.eq(1),
                             anyv.eq(0), ri.eq(0)]
                with m.If(tk["HDR"]):
                    with m.If(p.kind == AttnBeat.FIN):
                        fsm.goto("FREQ")
                    with m.Elif(p.last):
                        m.d.sync += [nlast.eq(hi), hi.eq(0)]
                        if S > 1:
                            m.d.sync += nlp.eq(Array([Const(r // S, range(NP)) for r in range(R)])[hi])
                        fsm.goto("Q")
                    with m.Else():
                        m.d.sync += hi.eq(hi + 1)
            # ---- ATTN_OUT: o / l with one reciprocal per row --------------------------------
            with fsm.state("FREQ"):
                m.d.comb += recip.i_stream.valid.eq(1)
                m.d.sync += l_pos.eq(l_rc > 0)
                with m.If(recip.i_stream.ready):
                    fsm.goto("FWAIT")
            # (the reciprocal's result comes only in FWAIT: its `ready` is 1, above)
            with fsm.state("FWAIT"), m.If(recip.o_stream.valid):
                m.d.sync += fk.eq(recip.o_stream.payload.k)
                fsm.goto("FOUT")
            with fsm.state("FOUT"), m.If(state_line(True)):
                fsm.goto("ODRAIN")
            with fsm.state("Q"):
                # the rows' query lines, row by row: `eot` on each row's last line, `last` on the job's
                # the query line is written at li in every cycle of Q (li moves on only when a line is taken, so what
                # is written without one is written over by the next line); qexp likewise; m1 starts at m_old
                for q in range(R):
                    m.d.comb += [q_ws[q].addr.eq(li), q_ws[q].en.eq(hi == q)]
                    m.d.comb += [q_ws[q].data[c].eq(p.data[c]) for c in range(C)]
                    with m.If(hi == q):
                        m.d.sync += qexp[q].eq(p.exp)
                    m.d.sync += m1[q].eq(m_old[q])
                with m.If(tk["Q"]):
                    m.d.sync += li.eq(li + 1)
                    with m.If(p.eot):
                        m.d.sync += [li.eq(0), hi.eq(hi + 1)]
                    with m.If(p.last):
                        m.d.sync += [li.eq(0), hi.eq(0)]
                        fsm.goto("K")
            # stage K1: q . (this line of k_j) for each row, registered with the token's framing
            with fsm.state("K"), m.If(tk["K"]):
                m.d.sync += k0.v.eq(1)
                with m.If(p.eot):
                    m.d.sync += [li.eq(0), tok.eq(tok + 1), tok_p1.eq(tok + 2)]
                with m.Else():
                    m.d.sync += li.eq(li + 1)
                with m.If(p.last):
                    m.d.sync += [tok.eq(0), tok_p1.eq(1), li.eq(0)]
                    fsm.goto("KDRAIN")
            with fsm.state("KDRAIN"), m.If(~k0.v & ~kp.v & ~Cat(*[t.v for t in k_tree]).any() & ~k2.v
                                                   & ~pipe_busy):  # the last scores
                fsm.goto("AW")
            # one cycle: the score buffer's address is token 0 (its output is V's first score), the sums cleared.  V
            # needs only m1, not a = exp2(m - m1): the rescales go into the exp2 pipelines after the V lines (state
            # A), and leave them while the last V lines go through P1 .. P5
            with fsm.state("AW"):
                m.d.sync += [sum_p[q].eq(0) for q in range(R)]
                if shared:
                    m.d.sync += [e_row.eq(0), v_last.eq(nlp == 0)]
                fsm.goto("V")
            # stage V1: p_j of each row from its score (the exp2 pipelines), with the V line; shared: the line once
            # a row into the one pipeline, taken with its last row
            if shared:
                with fsm.state("V"), m.If(tk["V"]):
                    m.d.comb += e_in.v.eq(1)
                    m.d.sync += [e_row.eq(e_row + 1), v_last.eq(e_row + 1 == nlp)]
                    with m.If(v_last):
                        m.d.sync += [e_row.eq(0), v_last.eq(nlp == 0)]
            with fsm.state("V"), m.If(tk_v):
                if not shared:
                    m.d.comb += e_in.v.eq(1)
                with m.If(p.eot):
                    m.d.sync += [li.eq(0), tok.eq(tok + 1), tok_p1.eq(tok + 2)]
                with m.Else():
                    m.d.sync += li.eq(li + 1)
                with m.If(p.last):
                    m.d.sync += li.eq(0)
                    fsm.goto("A")
            with fsm.state("A"):  # the rescales a = exp2(m - m1) into the exp2 pipelines (shared: a row a cycle)
                m.d.comb += [e_in.v.eq(1), e_in.isv.eq(0), e_in.fo.eq(0)]  # (the V fields below: don't-cares)
                if shared:
                    m.d.sync += e_row.eq(e_row + 1)
                    with m.If(e_row == nlp):
                        m.d.sync += e_row.eq(0)
                        fsm.goto("VDRAIN")
                else:
                    fsm.goto("VDRAIN")
            # the last V lines are still in V1 / V2, the rescales in the exp2 pipelines (a is registered as each
            # leaves E5)
            with fsm.state("VDRAIN"), m.If(~e_busy & ~v_busy):
                fsm.goto("L")
            with fsm.state("L"):  # each row's l * a on lane 0's multiplier, a row a cycle, into the row ends
                m.d.comb += in_l.eq(1)
                with m.If(adv):
                    m.d.sync += ri.eq(ri + 1)
                    with m.If(ri == nlast):
                        m.d.sync += ri.eq(0)
                        fsm.goto("OUTH")
            # row ri's header into the lanes once its row end has it: it leaves S8 behind the previous row's
            # output lines, so the rows' headers and lines follow each other through the lanes without a gap
            with fsm.state("OUTH"):
                m.d.sync += pv_raddr.eq(pv_line_addr(li))
                with m.If(Array(row_end.ready)[ri]):
                    m.d.comb += in_h.eq(1)
                    with m.If(adv):
                        fsm.goto("O")
            with fsm.state("O"):
                m.d.sync += pv_raddr.eq(pv_line_addr(li))
                with m.If(sl.line_take):  # the state line is taken
                    li_next = Signal.like(li, name="o_li_next")
                    m.d.comb += li_next.eq(li + 1)
                    m.d.sync += [li.eq(li_next)] + pv_raddr.eq(pv_line_addr(li_next))
                    with m.If(p.last):
                        m.d.sync += [li.eq(0)] + pv_raddr.eq(Const(0, li_w + row_w))
                with m.If(state_line(False)):
                    with m.If(ri == nlast):
                        m.d.sync += ri.eq(0)
                        fsm.goto("ODRAIN")
                    with m.Else():
                        m.d.sync += ri.eq(ri + 1)
                        fsm.goto("OUTH")
            with fsm.state("ODRAIN"), m.If(~pipe_busy):  # the job's last output lines leave the lanes
                fsm.goto("HDR")
        return m

