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
4. (one internal cycle: ``a = exp2_fx(m - m1, 20, 30)``, the rescale of each row's old state);
5. ``V`` x ``t * hd/C`` lines, framed like K: each row's ``p_j = exp2_fx(u_j - m1, 20, 28)`` and
   ``PV += rsr(p_j * v_j, -min(vexp_j, 3))`` lane by lane, ``sum p_j`` per token;
6. per row, in order: (one internal cycle: ``L = rsr(l*a, 30) + rsr(sum p, 8)``,
   ``r = max(0, bitlen(L) - 21)``), a header line (``hdr``) on ``o_stream`` with ``data[0] =
   sat32(m1 + (r << 20))``, ``data[1] = sat32(rsr(L, r))``, then ``STATE_O`` x ``hd/C`` lines
   in: the row's old ``o`` (``last`` on its last line), each giving the new line
   ``sat32(rsr(rsr(o*a, 30) + rsr(PV, 8), r))`` on ``o_stream``.

``ATTN_OUT`` (:func:`~systolica.numerics.attn_finish`) is a second job type, one row: a ``FIN``
beat with ``data[1] = l``, then the ``hd/C`` lines of ``o`` (kind ``STATE_O``); after one
reciprocal of ``l`` (:class:`~systolica.hw.recip.Reciprocal`, 33 cycles) each line gives
``sat32(rsr(o * y, k - 16))`` (fx), or 0 when ``l = 0``.

A tile with no unmasked token returns the state unchanged, as numerics does.  GQA groups
of more than ``R`` rows are several jobs over the same tile (it stays in the scratchpad).
Throughput: one K or V line per cycle, so ``2 * hd / C`` cycles per KV token and job (of up
to ``R`` rows), plus per row its header, ``hd/C`` query lines and ``hd/C`` state lines, and a
few cycles per job.  A beat of the wrong kind for the current phase (or more rows than the
job announced, or than the unit holds) sets the sticky ``error`` output and is dropped.

Pipelining: K runs in three stages (the line's C-lane products of every row; the dot-product
accumulations; the scores, their table-free scaling and the running maxima), V in two (the
score lookups and ``exp2`` tables; the ``p * v`` products and the PV read-modify-writes), so
no stage holds more than one wide multiply chain; the small memories are read
combinationally (LUT-RAM on an FPGA).  The rows' score scalings use the state-line lanes'
multipliers (idle during K), so ``R <= line_width``.
"""

from __future__ import annotations

import enum

from amaranth import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig

from .fixed import bitlen_u, exp2_lookup, rshift_round_sat32, rshift_round_var, sat32
from .recip import Reciprocal

__all__ = ["AttentionUnit", "AttnBeat"]

PV_BITS = 56  # |PV| < 2**50 for t <= 4095 and |v| < 1024 (numerics_attn); 6 bits of margin


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
        from systolica.numerics import EXP_BASE, EXP_DELTA, LOG2E_Q30

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
        pvmems = [mem(f"pvmem{_s(r)}", data.ArrayLayout(signed(PV_BITS), C), self.max_lines) for r in range(R)]
        base = mem("exp_base", unsigned(32), 256, init=[int(v) for v in EXP_BASE])
        # EXP_DELTA < 2**23: stored at its width so that delta * lo fits one DSP48
        delta = mem("exp_delta", unsigned(max(int(v) for v in EXP_DELTA).bit_length()), 256,
                    init=[int(v) for v in EXP_DELTA])
        q_ws, q_rs = [q.write_port() for q in qmems], [q.read_port(domain="comb") for q in qmems]
        # the score buffers (max_tokens words) are read synchronously so that they map to block RAM:
        # the address runs one beat ahead (the token the next V line belongs to)
        u_ws, u_rs = [u.write_port() for u in umems], [u.read_port(domain="sync") for u in umems]
        pv_ws, pv_rs = [v.write_port() for v in pvmems], [v.read_port(domain="comb") for v in pvmems]

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
        li = Signal(range(self.max_lines + 1))  # line within the current token / head
        tok = Signal(range(self.max_tokens + 1))
        anyv = Signal()  # some token of the tile was unmasked (the same for every row: one query position)
        r = Signal(range(64))
        m_new, l_new = Signal(signed(32)), Signal(signed(32))
        fire = i.valid & i.ready
        valid_tok = ~causal | (tok <= offset)
        m_old_o, l_old_o, m1_o = Array(m_old)[ri], Array(l_old)[ri], Array(m1)[ri]
        a_o, sum_p_o = Array(a)[ri], Array(sum_p)[ri]

        # one exp lookup per row serves `a` (state A, frac 30) and p_j (V phase, frac 28)
        exp_in = per_row("exp_in", signed(34))
        exp_off = Signal(range(3))
        e2 = [exp2_lookup(m, exp_in[r], 20, exp_off, base.read_port(domain="comb"), delta.read_port(domain="comb"),
                          f"exp2{_s(r)}") for r in range(R)]

        wrong = Signal()
        with m.If(fire & wrong):
            m.d.sync += self.error.eq(1)

        m.submodules.recip = recip = Reciprocal(33)
        fy, fk = Signal(unsigned(31)), Signal(unsigned(7))
        m.d.comb += recip.i_stream.payload.eq(l_old[0])  # ATTN_OUT jobs are one row

        r_s = Signal(signed(8))  # r as a signed shift amount
        m.d.comb += r_s.eq(r)

        # ---- K pipeline: K1 line products (in state K), K2 dot accumulate, K3 score, each row at once ----
        k1 = Signal(data.StructLayout({"v": 1, "eot": 1, "exp": signed(8), "tok": range(self.max_tokens + 1),
                                       "ok": 1, "part": data.ArrayLayout(signed(32), R)}))
        k2 = Signal(data.StructLayout({"v": 1, "exp": signed(8), "tok": range(self.max_tokens + 1), "ok": 1,
                                       "dot": data.ArrayLayout(signed(32), R)}))
        m.d.sync += [k1.v.eq(0), k2.v.eq(0)]  # the stages below set them when they hold a line
        with m.If(k1.v):
            with m.If(k1.eot):
                m.d.sync += [k2.v.eq(1), k2.exp.eq(k1.exp), k2.tok.eq(k1.tok), k2.ok.eq(k1.ok)]
            for q in range(R):
                full = Signal(signed(32), name=f"dot_full{_s(q)}")
                m.d.comb += full.eq(dot[q] + k1.part[q])
                with m.If(k1.eot):
                    m.d.sync += [dot[q].eq(0), k2.dot[q].eq(full)]
                with m.Else():
                    m.d.sync += dot[q].eq(full)
        score_prod = per_row("score_prod", signed(64))  # k2.dot * LOG2E_Q30, on a state-line multiplier (below)
        with m.If(k2.v & k2.ok):
            m.d.sync += anyv.eq(1)
        for q in range(R):
            shift = Signal(signed(10), name=f"score_shift{_s(q)}")
            m.d.comb += shift.eq(10 - qexp[q] - k2.exp)
            u = rshift_round_sat32(m, score_prod[q], shift, f"score{_s(q)}")  # log2 units, Q20
            m.d.comb += [u_ws[q].addr.eq(k2.tok), u_ws[q].data.eq(u), u_ws[q].en.eq(k2.v & k2.ok)]
            with m.If(k2.v & k2.ok & (u > m1[q])):
                m.d.sync += m1[q].eq(u)

        # ---- V pipeline: V1 p_j (in state V), V2 PV += rsr(p_j * v, -min(vexp, 3)), each row at once ----
        v1 = Signal(data.StructLayout({"v": 1, "p": data.ArrayLayout(unsigned(33), R), "exp": signed(8),
                                       "li": range(self.max_lines + 1), "first": 1, "eot": 1,
                                       "data": data.ArrayLayout(signed(8), C)}))
        m.d.sync += v1.v.eq(0)
        vsh = Signal(signed(10))
        m.d.comb += vsh.eq(-Mux(v1.exp > 3, 3, v1.exp))
        for q in range(R):
            m.d.comb += [pv_ws[q].addr.eq(v1.li), pv_ws[q].en.eq(v1.v)]
            # p_j = exp2_fx(<= 0, 20, 28) <= 2**28: the low 24 bits fit a DSP48's 25-bit signed port, the
            # top 5 bits are a few shifted adds of v (one DSP48 per lane instead of two)
            p_lo, p_hi = v1.p[q][:24], v1.p[q][24:29]
            for c in range(C):
                vc = v1.data[c]
                hi_c = Signal(signed(14), name=f"pv_hi{_s(q)}_{c}")  # v * p_hi, |.| <= 128 * 16
                m.d.comb += hi_c.eq(sum(Mux(p_hi[b], vc << b, 0) for b in range(5)))
                prod = Signal(signed(44), name=f"pv_prod{_s(q)}_{c}")
                m.d.comb += prod.eq(p_lo * vc + (hi_c << 24))
                term = rshift_round_var(m, prod, vsh, PV_BITS, f"pv_term{_s(q)}_{c}", max_left=3)
                m.d.comb += pv_ws[q].data[c].eq(Mux(v1.first, 0, pv_rs[q].data[c]) + term)
            with m.If(v1.v & v1.eot):
                m.d.sync += sum_p[q].eq(sum_p[q] + v1.p[q])
        # the p.V read-modify-write (stage V2) and the O pass share each row's PV read port
        m.d.comb += [q_r.addr.eq(li) for q_r in q_rs]
        m.d.comb += [pv_r.addr.eq(Mux(v1.v, v1.li, li)) for pv_r in pv_rs]
        m.d.comb += [u_r.addr.eq(Mux(fire & ~wrong & p.eot, tok + 1, tok)) for u_r in u_rs]

        # ---- state lines (O pass of ATTN, ATTN_OUT): one datapath of L lanes, shared by both ---------
        # A state line is hd/C of a row per tile, so it may take C/L cycles: lane group g of the held
        # input line is computed each cycle and kept, the last group completes the output line.
        L = self.lanes
        G = C // L
        g = Signal(range(G), name="o_group")
        done_groups = Signal(32 * L * (G - 1), name="o_groups_done", reset_less=True)
        in_out = Signal()  # the FSM is in O or FOUT
        is_fout = Signal()  # ... in FOUT (ATTN_OUT: o * y) rather than O (ATTN: rescale and add p.V)
        y = Signal(unsigned(33))
        m.d.comb += y.eq(Mux(is_fout, fy, a_o))
        pv_o = Array([pv_r.data.as_value() for pv_r in pv_rs])[ri] if R > 1 else pv_rs[0].data.as_value()
        xs = p.data.as_value().word_select(g, 32 * L) if G > 1 else p.data.as_value()
        pvs = pv_o.word_select(g, PV_BITS * L) if G > 1 else pv_o
        fsh = Signal(signed(9))
        m.d.comb += fsh.eq(fk - 16)
        # the lanes' multipliers are idle outside O / FOUT: lane 0 also gives l * a (state L), lanes L-1,
        # L-2, ... the scores dot * LOG2E_Q30 of rows 0, 1, ... (stage K3, states K and KDRAIN); each product
        # thus costs no DSP48s of its own
        in_l = Signal()
        la = Signal(signed(66))
        lanes_out = []
        for j in range(L):
            x = xs[32 * j:32 * j + 32].as_signed()
            mx, my = Signal(signed(32), name=f"st_x_{j}"), Signal(unsigned(33), name=f"st_y_{j}")
            m.d.comb += [mx.eq(x), my.eq(y)]
            srow = L - 1 - j  # the row whose score this lane scales
            if srow < R:
                with m.If(k2.v):
                    m.d.comb += [mx.eq(k2.dot[srow]), my.eq(LOG2E_Q30)]
            if j == 0:
                with m.If(in_l):
                    m.d.comb += mx.eq(l_old_o)
            prod = Signal(signed(66), name=f"st_prod_{j}")  # o * a (O) or o * y (FOUT): one multiplier
            m.d.comb += prod.eq(mx * my)
            if srow < R:
                m.d.comb += score_prod[srow].eq(prod[:64])
            if j == 0:
                m.d.comb += la.eq(prod)
            pv = pvs[PV_BITS * j:PV_BITS * (j + 1)].as_signed()
            big_o = Signal(signed(64), name=f"big_o_{j}")
            m.d.comb += big_o.eq(((prod >> 30) + ((prod >> 29) & 1)) + ((pv >> 8) + ((pv >> 7) & 1)))
            val = Signal(signed(64), name=f"st_val_{j}")
            sh = Signal(signed(9), name=f"st_sh_{j}")
            m.d.comb += [val.eq(Mux(is_fout, prod[:64].as_signed(), big_o)), sh.eq(Mux(is_fout, fsh, r_s))]
            res = rshift_round_sat32(m, val, sh, f"st_new_{j}")
            out = Signal(signed(32), name=f"st_out_{j}")
            m.d.comb += out.eq(Mux(is_fout, Mux(l_old[0] > 0, res, 0), Mux(anyv, res, x)))
            lanes_out.append(out)
        last_group = Signal(name="o_last_group")
        m.d.comb += last_group.eq(g == G - 1)
        if G > 1:
            with m.If(in_out & i.valid & ~wrong & ~last_group):
                m.d.sync += [done_groups.word_select(g, 32 * L).eq(Cat(*lanes_out)), g.eq(g + 1)]

        def state_line():
            """The handshake of a state line: taken (and its output line given) with its last lane group.

            Returns the condition under which the FSM leaves after the row's last state line."""
            m.d.comb += [i.ready.eq(wrong | (last_group & o.ready)), o.valid.eq(i.valid & ~wrong & last_group),
                         o.payload.last.eq(p.last), o.payload.data.eq(Cat(done_groups, *lanes_out))]
            with m.If(fire & ~wrong):
                m.d.sync += g.eq(0)
            return fire & ~wrong & p.last

        with m.FSM(name="attn"):
            with m.State("HDR"):
                # a job's rows: one header each, the last one marked; more than the unit holds is an error
                m.d.comb += [i.ready.eq(1), wrong.eq(((p.kind != AttnBeat.HDR) & (p.kind != AttnBeat.FIN))
                                                     | ((p.kind == AttnBeat.HDR) & ~p.last & (hi == R - 1))
                                                     | ((p.kind == AttnBeat.FIN) & (hi != 0)))]
                with m.If(fire & ~wrong):
                    for q in range(R):
                        with m.If(hi == q):
                            m.d.sync += [m_old[q].eq(p.data[0]), l_old[q].eq(p.data[1]), m1[q].eq(p.data[0])]
                        m.d.sync += dot[q].eq(0)
                    m.d.sync += [offset.eq(p.offset), causal.eq(p.causal), li.eq(0), tok.eq(0), anyv.eq(0),
                                 ri.eq(0)]
                    with m.If(p.kind == AttnBeat.FIN):
                        m.next = "FREQ"
                    with m.Elif(p.last):
                        m.d.sync += [nlast.eq(hi), hi.eq(0)]
                        m.next = "Q"
                    with m.Else():
                        m.d.sync += hi.eq(hi + 1)
            # ---- ATTN_OUT: o / l with one reciprocal per row --------------------------------
            with m.State("FREQ"):
                m.d.comb += recip.i_stream.valid.eq(1)
                with m.If(recip.i_stream.ready):
                    m.next = "FWAIT"
            with m.State("FWAIT"):
                m.d.comb += recip.o_stream.ready.eq(1)
                with m.If(recip.o_stream.valid):
                    m.d.sync += [fy.eq(recip.o_stream.payload.y), fk.eq(recip.o_stream.payload.k)]
                    m.next = "FOUT"
            with m.State("FOUT"):
                m.d.comb += [wrong.eq(p.kind != AttnBeat.STATE_O), in_out.eq(1), is_fout.eq(1)]
                with m.If(state_line()):
                    m.next = "HDR"
            with m.State("Q"):
                # the rows' query lines, row by row: `eot` on each row's last line, `last` on the job's
                m.d.comb += [i.ready.eq(1), wrong.eq((p.kind != AttnBeat.Q) | (p.eot & ~p.last & (hi == nlast)))]
                for q in range(R):
                    m.d.comb += [q_ws[q].addr.eq(li), q_ws[q].en.eq(fire & ~wrong & (hi == q))]
                    m.d.comb += [q_ws[q].data[c].eq(p.data[c]) for c in range(C)]
                with m.If(fire & ~wrong):
                    for q in range(R):
                        with m.If(hi == q):
                            m.d.sync += qexp[q].eq(p.exp)
                    m.d.sync += li.eq(li + 1)
                    with m.If(p.eot):
                        m.d.sync += [li.eq(0), hi.eq(hi + 1)]
                    with m.If(p.last):
                        m.d.sync += [li.eq(0), hi.eq(0)]
                        m.next = "K"
            with m.State("K"):
                m.d.comb += [i.ready.eq(1), wrong.eq(p.kind != AttnBeat.K)]
                # stage K1: q . (this line of k_j) for each row, registered with the token's framing
                with m.If(fire & ~wrong):
                    m.d.sync += [k1.v.eq(1), k1.eot.eq(p.eot), k1.exp.eq(p.exp), k1.tok.eq(tok),
                                 k1.ok.eq(valid_tok)]
                    m.d.sync += [k1.part[q].eq(sum(q_rs[q].data[c] * p.data[c][0:8].as_signed() for c in range(C)))
                                 for q in range(R)]
                    with m.If(p.eot):
                        m.d.sync += [li.eq(0), tok.eq(tok + 1)]
                    with m.Else():
                        m.d.sync += li.eq(li + 1)
                    with m.If(p.last):
                        m.d.sync += [tok.eq(0), li.eq(0)]
                        m.next = "KDRAIN"
            with m.State("KDRAIN"), m.If(~k1.v & ~k2.v):  # the last token's scores are in stage K2 / K3
                m.next = "A"
            with m.State("A"):
                m.d.comb += exp_off.eq(0)
                for q in range(R):
                    diff = Signal(signed(34), name=f"m_diff_in{_s(q)}")
                    m.d.comb += diff.eq(m_old[q] - m1[q])
                    m.d.comb += exp_in[q].eq(sat32(m, diff, f"m_diff{_s(q)}"))
                    m.d.sync += [a[q].eq(e2[q]), sum_p[q].eq(0)]
                m.next = "V"
            with m.State("V"):
                m.d.comb += [i.ready.eq(1), wrong.eq(p.kind != AttnBeat.V)]
                # stage V1: p_j of each row from its score (table lookup), registered with the V line
                m.d.comb += exp_off.eq(2)
                m.d.comb += [exp_in[q].eq(u_rs[q].data - m1[q]) for q in range(R)]
                with m.If(fire & ~wrong):
                    m.d.sync += [v1.v.eq(1), v1.exp.eq(p.exp), v1.li.eq(li), v1.first.eq(tok == 0), v1.eot.eq(p.eot)]
                    m.d.sync += [v1.p[q].eq(Mux(valid_tok, e2[q], 0)) for q in range(R)]
                    m.d.sync += [v1.data[c].eq(p.data[c][0:8]) for c in range(C)]
                    with m.If(p.eot):
                        m.d.sync += [li.eq(0), tok.eq(tok + 1)]
                    with m.Else():
                        m.d.sync += li.eq(li + 1)
                    with m.If(p.last):
                        m.d.sync += li.eq(0)
                        m.next = "VDRAIN"
            with m.State("VDRAIN"), m.If(~v1.v):  # the last V line is still in stage V2
                m.next = "L"
            with m.State("L"):  # row ri's new sum and shift (rows one after another, each before its O pass)
                m.d.comb += in_l.eq(1)  # la = l * a on lane 0's multiplier (y = a here)
                big_l = Signal(unsigned(56))
                m.d.comb += big_l.eq(((la >> 30) + ((la >> 29) & 1)) + ((sum_p_o >> 8) + ((sum_p_o >> 7) & 1)))
                bl = bitlen_u(m, big_l, 56, "l_bitlen")
                rr = Signal(range(64))
                m.d.comb += rr.eq(Mux(bl > 21, bl - 21, 0))
                l_sh = rshift_round_var(m, big_l.as_signed(), rr, 58, "l_shift")
                m.d.sync += r.eq(rr)
                with m.If(anyv):
                    m.d.sync += [m_new.eq(sat32(m, m1_o + (rr << 20), "m_new_sat")),
                                 l_new.eq(sat32(m, l_sh, "l_new_sat"))]
                with m.Else():  # every token masked: the state is unchanged
                    m.d.sync += [m_new.eq(m_old_o), l_new.eq(l_old_o)]
                m.next = "OUTH"
            with m.State("OUTH"):
                m.d.comb += [o.valid.eq(1), o.payload.hdr.eq(1), o.payload.data[0].eq(m_new),
                             o.payload.data[1].eq(l_new)]
                m.d.comb += [o.payload.data[c].eq(0) for c in range(2, C)]
                with m.If(o.ready):
                    m.next = "O"
            with m.State("O"):
                m.d.comb += [wrong.eq(p.kind != AttnBeat.STATE_O), in_out.eq(1)]
                with m.If(fire & ~wrong):
                    m.d.sync += li.eq(li + 1)
                    with m.If(p.last):
                        m.d.sync += li.eq(0)
                with m.If(state_line()):
                    m.d.sync += ri.eq(ri + 1)
                    m.next = "L"
                    with m.If(ri == nlast):
                        m.d.sync += ri.eq(0)
                        m.next = "HDR"
        return m


def _s(r: int) -> str:
    """The suffix of row ``r``'s signals and memories: none for row 0 (the names of the one-row unit)."""
    return "" if r == 0 else f"_r{r}"
