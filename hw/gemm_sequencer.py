"""GEMM on the hardware core's systolic array: walks one GEMM instruction into its operand streams.

The array (:class:`~systolica.hw.systolic_array.SystolicArray`, weight-stationary,
shadow and active weight registers) takes one weight tile ``W[j*C : j*C+C, kk*R : kk*R+R]`` and
then the ``m`` activation slices ``A[i, kk*R : kk*R+R]`` that use it; its
:class:`~systolica.hw.accumulator.Accumulator` adds each partial line into
``acc[dst + i*n + j]`` (overwriting for the first K tile unless the instruction
says ``acc=1``).  With ``rows == cols`` a K tile is exactly one scratchpad line, so
tile ``(j, kk)`` is: weight lines ``w + (j*C + c)*k + kk`` for ``c < C`` and
activation lines ``a + i*k + kk`` for ``i < m``.  Two independent walkers feed
the two streams in the same tile order; the array's shadow scoreboard pairs them,
so the weights of the next tile stream in while the current one computes
(decode, ``m = 1``, runs at one weight line per cycle).

``k = 0`` has no tiles: the result is zero (``acc=0``: lines written with 0).

GEMM_STREAM with 4-bit weights (``wfmt`` Q4_0 / Q4_1, on a config with the datapath: ``wstream4.config_problem``)
streams per output line its scale beats to :class:`~systolica.hw.group_scaler.GroupScaler` and its code beats to
the array, which is built with ``2P`` weight columns (a code line holds two of a port's columns); the array's
lines then pass the scaler on their way to the accumulator (docs/hardware.md, "4-bit weights in the array").
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, memory, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.numerics_int4 import GROUP
from systolica.wstream4 import config_problem

from .accumulator import Accumulator
from .group_scaler import ASUM_BITS, GroupScaler, q4_tag_layout
from .systolic_array import SystolicArray
from .weight_stream import q4_sections
from .word_regs import free_room

__all__ = ["GemmSequencer"]


def _prefetch(m, name: str, width: int, want, rdata, lag: int = 1):
    """Sync-read prefetch into a small FIFO: returns (issue, fifo); ``issue`` claims a place for a read whose data
    come ``lag`` cycles later (1: ``issue`` is the read enable; 2: the caller registers the request first).

    The line read is registered before the FIFO (``staged``): the block RAM's clock-to-data (5.8 ns on ECP5) and
    the buffer's select would otherwise reach the FIFO's LUT-RAM write data in one cycle (12.3 ns on ulx3s).  A
    slot comes back ``lag + 3`` cycles after its claim (the read, register, FIFO, pop), so a depth of ``lag + 3``
    keeps a line a cycle.
    """
    depth = lag + 3
    q = fifo.SyncFIFO(width=width, depth=depth)
    m.submodules[f"{name}_q"] = q
    staged = Signal(name=f"{name}_staged")
    line = Signal(width, name=f"{name}_line", reset_less=True)  # loaded every cycle: `staged` says it is a line
    issue = Signal(name=f"{name}_issue")
    # room (level + staged + pending < depth) as a flip-flop, so that the read enable starts at registers
    room = free_room(m, f"{name}_room", depth, issue, q.r_en & q.r_rdy)  # places not claimed by a read
    m.d.comb += issue.eq(want & room)
    pending = issue
    for k in range(lag):
        nxt = Signal(name=f"{name}_pending" + (f"{k}" if k else ""))
        m.d.sync += nxt.eq(pending)
        pending = nxt
    m.d.sync += [staged.eq(pending), line.eq(rdata)]
    m.d.comb += [q.w_en.eq(staged), q.w_data.eq(line)]
    return issue, q


#: the start's values of a GEMM, from m, k, n and acc alone (:func:`gemm_start_values`)
START_LAYOUT = data.StructLayout({"m1": 16, "k1": 16, "n1": 16, "m_is1": 1, "k_is1": 1, "n_is1": 1,
                                  "w_more": 1, "a_more": 1, "zeros": 1})


def gemm_start_values(m: Module, pre, fields: dict, stream, load) -> None:
    """Load ``pre`` (a :data:`START_LAYOUT` signal) from an instruction's ``fields`` (m, k, n, acc) and ``stream``
    while ``load`` is high.  The engine's word is there a cycle before the sequencer starts and holds while it runs
    (``load``: the sequencer is idle), so at ``start`` the walkers load their last indices and flags from these
    flip-flops, not from the word's selects, subtractions and compares (ulx3s: the word through ``n - 1`` and
    the flags into ``zeros`` and ``a_more``, 10.4-11.1 ns)."""
    mm, k, n = fields["m"], fields["k"], fields["n"]
    nonempty = (mm != 0) & (n != 0)
    with m.If(load):
        m.d.sync += [pre.m1.eq(mm - 1), pre.k1.eq(k - 1), pre.n1.eq(n - 1),
                     pre.m_is1.eq(mm == 1), pre.k_is1.eq(k == 1), pre.n_is1.eq(n == 1),
                     pre.w_more.eq((n != 0) & (k != 0) & ~stream), pre.a_more.eq(nonempty & (k != 0)),
                     pre.zeros.eq((k == 0) & ~fields["acc"] & nonempty)]


class GemmSequencer(wiring.Component):
    """Feeds the systolic array for one GEMM at a time; ``busy`` until every result line is written."""

    def __init__(self, cfg: AccelConfig):
        if cfg.rows != cfg.cols:
            raise ValueError(f"the accelerator's GEMM needs a square array (a K tile = one scratchpad line); "
                             f"config {cfg.name!r} has rows={cfg.rows}, cols={cfg.cols}")
        self.cfg = cfg
        self.P = cfg.dma_ports  # weight lines per stream beat: GEMM_STREAM's ports deliver one each a cycle
        # with the 4-bit datapath a code beat (a line a port) is 2P columns: the array takes 2P columns a beat
        # and an int8 stream's beats pair up; without it, P
        self.q4 = config_problem(cfg) is None
        self.Wc = 2 * self.P if self.q4 else self.P
        self.pairs = bool(cfg.wstream_pairs)  # the ports' two beats a cycle (needs Wc = 2P: the config checks)
        assert not self.pairs or self.Wc == 2 * self.P, cfg.name
        self.tag = q4_tag_layout()
        self.array = SystolicArray(cfg, w_cols=self.Wc, tag_bits=self.tag.size, out_fifo=0)  # accumulator: every line
        acc_layout = data.StructLayout({"data": self.array.o_layout["data"].shape, "last": 1, "tag": 17})
        self.accum = Accumulator(cfg, acc_layout)
        self.scaler = GroupScaler(cfg) if self.q4 else None
        sbits = (cfg.spad_lines - 1).bit_length()
        abits = self.accum.abits
        super().__init__({
            "start": In(1), "a": In(16), "w": In(16), "dst": In(16), "m": In(16), "k": In(16), "n": In(16),
            "acc": In(1), "stream": In(1), "wfmt": In(2), "gshift": In(4), "busy": Out(1), "fire": Out(1),
            # what the start decides from m, k, n (acc), registered by the compute engine from its word a cycle
            # ahead (:func:`gemm_start_values`): the walkers' last indices and their flags
            "pre": In(START_LAYOUT),
            "ws_valid": In(1), "ws_ready": Out(1), "ws_data": In(self.P * cfg.cols * 8),
            **({"ws2_valid": In(1), "ws2_ready": Out(1), "ws2_data": In(2 * self.P * cfg.cols * 8)}
               if self.pairs else {}),
            "a_addr": Out(sbits), "a_en": Out(1), "a_rdata": In(cfg.cols * 8),
            "w_addr": Out(sbits), "w_en": Out(1), "w_rdata": In(cfg.cols * 8),
            "acc_rd": In(memory.ReadPort.Signature(addr_width=abits, shape=self.accum.line)),
            "acc_wr": In(memory.WritePort.Signature(addr_width=abits, shape=self.accum.line)),
            # LOAD's accumulator lines, written through the accumulator's second stage (hw/accumulator.py)
            "ld_en": In(1), "ld_addr": In(abits), "ld_data": In(self.accum.line), "ld_ready": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        C, P, Wc = cfg.cols, self.P, self.Wc
        m.submodules.array, m.submodules.accum = arr, acc = self.array, self.accum
        wiring.connect(m, wiring.flipped(self.acc_rd), acc.rd)
        wiring.connect(m, wiring.flipped(self.acc_wr), acc.wr)
        m.d.comb += [acc.ld_en.eq(self.ld_en), acc.ld_addr.eq(self.ld_addr), acc.ld_data.eq(self.ld_data),
                     self.ld_ready.eq(acc.ld_ready)]

        # Every count below is a nest of small counters over the instruction's fields, never a product
        # of them: m*n*k and friends would each cost DSP48s for a once-per-instruction number.
        zeros = Signal()  # k = 0: lines still to zero (m*n lines from dst, walked as z_i < m, z_j < n)
        z_i = Signal(16)
        z_j = Signal(16)
        zptr = Signal(16)
        # weight walker: tile (j, kk), column c -> line w + (j*C + c)*k + kk
        w_more = Signal()  # weight lines left to read (n*k*C of them)
        w_base = Signal(32)  # w + j*C*k
        w_ptr = Signal(32)
        w_c = Signal(range(C))
        w_kk = Signal(16)
        w_j = Signal(16)
        # activation walker: tile (j, kk), row i -> line a + i*k + kk, tag dst + i*n + j
        a_more = Signal()  # activation lines left to read (m*n*k of them)
        a_ptr = Signal(32)
        t_ptr = Signal(32)
        a_i = Signal(16)
        a_kk = Signal(16)
        a_j = Signal(16)
        # partial lines read but not yet written by the accumulator (prefetch FIFO + array + accumulator)
        inflight = Signal(16)

        streaming = Signal()  # this GEMM's weights come from the weight ports (GEMM_STREAM), not the scratchpad
        q4 = Signal()  # ... as 4-bit codes with group scales (wfmt Q4_0 / Q4_1; the decoder refused the rest)
        # the walkers' last indices, registered at start (no subtract before their comparisons)
        pre = self.pre
        m1, k1, n1 = pre.m1, pre.k1, pre.n1  # (the engine's registers hold while the GEMM runs)
        # "the index is at its last value" of each walker's counters, flip-flops kept beside them (loaded from the
        # counters' next values): no 16-bit compare between a counter and the walker's decisions (ulx3s: a_more
        # and zeros 11.1-11.3 ns through three of them)
        ai_l, akk_l, aj_l = Signal(name="ai_last"), Signal(name="akk_last"), Signal(name="aj_last")
        wkk_l, wj_l = Signal(name="wkk_last"), Signal(name="wj_last")
        zi_l, zj_l = Signal(name="zi_last"), Signal(name="zj_last")
        with m.If(self.start):
            m.d.sync += [ai_l.eq(pre.m_is1), akk_l.eq(pre.k_is1), aj_l.eq(pre.n_is1), wkk_l.eq(pre.k_is1),
                         wj_l.eq(pre.n_is1), zi_l.eq(pre.m_is1), zj_l.eq(pre.n_is1)]
        with m.If(self.start):
            m.d.sync += [
                streaming.eq(self.stream), q4.eq(self.stream & (self.wfmt != 0) & self.q4),
                w_more.eq(pre.w_more), a_more.eq(pre.a_more), zeros.eq(pre.zeros), z_i.eq(0), z_j.eq(0),
                zptr.eq(self.dst),
                w_base.eq(self.w), w_ptr.eq(self.w), w_c.eq(0), w_kk.eq(0), w_j.eq(0),
                a_ptr.eq(self.a), t_ptr.eq(self.dst), a_i.eq(0), a_kk.eq(0), a_j.eq(0),
            ]
        ztail = Signal(3)  # the last zero line is written three cycles after it leaves here (the accumulator's stages)
        m.d.sync += ztail.eq(Cat(zeros, ztail[:2]))
        m.d.comb += self.busy.eq((inflight != 0) | zeros | (ztail != 0) | w_more | a_more)

        # ---- weights from the scratchpad
        # the walkers' flags are low at start (busy is), so start needs no term in their read requests
        w_issue, wq = _prefetch(m, "wq", C * 8, w_more, self.w_rdata)
        m.d.comb += [self.w_addr.eq(w_ptr), self.w_en.eq(w_issue)]
        with m.If(w_issue):
            with m.If(w_c == C - 1):
                m.d.sync += w_c.eq(0)
                with m.If(wkk_l):  # next output tile j: W rows j*C ..
                    nb = w_base + C * self.k
                    m.d.sync += [w_kk.eq(0), wkk_l.eq(k1 == 0), w_j.eq(w_j + 1), wj_l.eq(w_j + 1 == n1),
                                 w_base.eq(nb), w_ptr.eq(nb)]
                    with m.If(wj_l):
                        m.d.sync += w_more.eq(0)
                with m.Else():
                    m.d.sync += [w_kk.eq(w_kk + 1), wkk_l.eq(w_kk + 1 == k1), w_ptr.eq(w_base + w_kk + 1)]
            with m.Else():
                m.d.sync += [w_c.eq(w_c + 1), w_ptr.eq(w_ptr + self.k)]
        # Wc scratchpad lines make one array beat: the first Wc - 1 wait in a gather register (one line a cycle,
        # as before: a tile still takes C cycles from the scratchpad)
        aw = arr.w_stream
        beat = Signal(Wc * C * 8)
        beat_valid = Signal()
        spad_ready = Signal()
        if Wc == 1:
            m.d.comb += [beat.eq(wq.r_data), beat_valid.eq(wq.r_rdy), wq.r_en.eq(spad_ready)]
        else:
            held = Signal((Wc - 1) * C * 8)
            have = Signal(range(Wc))
            full = have == Wc - 1
            m.d.comb += [beat.eq(Cat(held, wq.r_data)), beat_valid.eq(wq.r_rdy & full),
                         wq.r_en.eq(Mux(full, spad_ready, 1))]
            with m.If(wq.r_rdy & wq.r_en):
                m.d.sync += have.eq(Mux(full, 0, have + 1))
                with m.If(~full):
                    m.d.sync += held.eq(Cat(held[C * 8:], wq.r_data) if Wc > 2 else wq.r_data)
        m.d.comb += spad_ready.eq(aw.ready & ~streaming)

        # ---- weights from the ports: int8 beats of P lines (paired into 2P columns when Wc = 2P), or
        # per output line ceil(k*R*sb / 32) scale beats (to the group scaler) then k*R/2 code beats
        if Wc == P:
            s8, s8_valid = self.ws_data, self.ws_valid
            m.d.comb += self.ws_ready.eq(streaming & aw.ready)
        elif self.pairs:  # the weight ports offer the two beats together (config.wstream_pairs): no pairing here
            s8, s8_valid = self.ws2_data, self.ws2_valid
            m.d.comb += self.ws2_ready.eq(streaming & ~q4 & aw.ready)
            s8_ready = 0  # an int8 stream takes no single beats
        else:
            s8, s8_valid = Signal(Wc * C * 8), Signal()
            s8_held = Signal(P * C * 8)
            s8_have = Signal()
            s8_ready = ~s8_have | aw.ready
            m.d.comb += [s8.eq(Cat(s8_held, self.ws_data)), s8_valid.eq(self.ws_valid & s8_have)]
            with m.If(self.start):
                m.d.sync += s8_have.eq(0)
            with m.Elif(streaming & ~q4 & self.ws_valid & s8_ready):
                m.d.sync += s8_have.eq(~s8_have)
                with m.If(~s8_have):
                    m.d.sync += s8_held.eq(self.ws_data)
        src = Mux(streaming, s8, beat)
        src_valid = Mux(streaming, s8_valid, beat_valid)
        wbyte = [[src[(j * C + r) * 8:(j * C + r) * 8 + 8] for r in range(C)] for j in range(Wc)]
        if self.q4:
            q41 = Signal()
            in_scale = Signal()  # the current output line's scale section
            bcnt = Signal(24)
            s_end, c_end = Signal(24), Signal(24)  # the sections' last beats
            with m.If(self.start):
                scale, code = q4_sections(self.k, self.wfmt, cfg)
                m.d.sync += [q41.eq(self.wfmt == 2), in_scale.eq(1), bcnt.eq(0),
                             s_end.eq(scale - 1), c_end.eq(code - 1)]
            sc = self.scaler
            m.submodules.scaler = sc
            ws_fire = self.ws_valid & self.ws_ready
            m.d.comb += [sc.start.eq(self.start), sc.q41.eq(self.wfmt == 2), sc.gshift.eq(self.gshift),
                         sc.s_valid.eq(q4 & in_scale & self.ws_valid), sc.s_data.eq(self.ws_data),
                         sc.s_last.eq(bcnt == s_end)]
            with m.If(q4 & ws_fire):
                sec_end = Mux(in_scale, bcnt == s_end, bcnt == c_end)
                m.d.sync += [bcnt.eq(Mux(sec_end, 0, bcnt + 1)), in_scale.eq(in_scale ^ sec_end)]
            with m.If(q4):
                m.d.comb += [aw.valid.eq(self.ws_valid & ~in_scale),
                             self.ws_ready.eq(Mux(in_scale, sc.s_ready, aw.ready))]
            with m.Else():
                m.d.comb += [aw.valid.eq(src_valid), self.ws_ready.eq(streaming & s8_ready)]
            # a code line of port p: array column half*P + p takes its half `half` (C/2 bytes = C codes);
            # K element r is byte r // 2, nibble r % 2; the weight is q - 8 (Q4_0: q ^ 8 as 4-bit signed) or q
            for j in range(Wc):
                half, p = divmod(j, P)
                for r in range(C):
                    bit = p * C * 8 + half * (C // 2) * 8 + (r // 2) * 8 + (r % 2) * 4
                    q = self.ws_data[bit:bit + 4]
                    w4 = Mux(q41, Cat(q, Const(0, 4)), Cat(q[:3], ~q[3], ~q[3], ~q[3], ~q[3], ~q[3]))
                    m.d.comb += aw.payload[j][r].eq(Mux(q4, w4, wbyte[j][r]))
        else:
            m.d.comb += aw.valid.eq(src_valid)
            m.d.comb += [aw.payload[j][r].eq(wbyte[j][r]) for j in range(Wc) for r in range(C)]

        # ---- activations (tag: accumulator line, accumulate flag, the 4-bit GEMM's group fields; last row of
        # the tile).  A group of 32 weights along K is L = 32 / C K lines: kk's low bits say where in it
        L = GROUP // C
        lb = L.bit_length() - 1
        gpos = a_kk[:lb] if lb else Const(0, 1)
        glast_now = (gpos == L - 1) if lb else Const(1, 1)
        tag_now = Signal(self.tag)
        m.d.comb += [tag_now.addr.eq(t_ptr[:16]),
                     tag_now.acc.eq(self.acc | Mux(q4, (a_kk >> lb) != 0, a_kk != 0)),
                     tag_now.gfirst.eq(gpos == 0), tag_now.glast.eq(glast_now),
                     tag_now.gend.eq(glast_now & ai_l), tag_now.lend.eq(akk_l),
                     tag_now.gi.eq(a_i)]
        side = self.tag.size + 1  # the tag and `last`
        side_now = Signal(side)  # describes the line read this cycle; registered to meet its data
        side_d, side_d2 = Signal(side), Signal(side)
        m.d.comb += side_now.eq(Cat(tag_now.as_value(), ai_l))
        m.d.sync += [side_d.eq(side_now), side_d2.eq(side_d)]
        # the read request is registered (``a_addr_r``, ``a_en_r``): the walk's issue decision reached the scratchpad's
        # 32 block RAMs through the compute engine's and the buffer's port selects in one cycle, the last net across
        # the chip (ulx3s: `a_more` -> `spad_a_mem` address 12.25 ns, 6.6 ns of it routing; 204 endpoints); the
        # data come two cycles after the claim
        a_addr_r = Signal.like(self.a_addr, name="a_addr_r", reset_less=True)
        a_en_r = Signal(name="a_en_r")
        a_issue, aq = _prefetch(m, "aq", C * 8 + side, a_more, Cat(self.a_rdata, side_d2), lag=2)
        m.d.sync += [a_addr_r.eq(a_ptr), a_en_r.eq(a_issue)]
        m.d.comb += [self.a_addr.eq(a_addr_r), self.a_en.eq(a_en_r)]
        with m.If(a_issue):
            with m.If(ai_l):
                m.d.sync += [a_i.eq(0), ai_l.eq(m1 == 0)]
                with m.If(akk_l):
                    m.d.sync += [a_kk.eq(0), akk_l.eq(k1 == 0), a_j.eq(a_j + 1), aj_l.eq(a_j + 1 == n1),
                                 a_ptr.eq(self.a), t_ptr.eq(self.dst + a_j + 1)]
                    with m.If(aj_l):
                        m.d.sync += a_more.eq(0)
                with m.Else():
                    m.d.sync += [a_kk.eq(a_kk + 1), akk_l.eq(a_kk + 1 == k1), a_ptr.eq(self.a + a_kk + 1),
                                 t_ptr.eq(self.dst + a_j)]
            with m.Else():
                m.d.sync += [a_i.eq(a_i + 1), ai_l.eq(a_i + 1 == m1), a_ptr.eq(a_ptr + self.k), t_ptr.eq(t_ptr + self.n)]
        ap = arr.a_stream.payload
        fd = aq.r_data
        m.d.comb += [arr.a_stream.valid.eq(aq.r_rdy), aq.r_en.eq(arr.a_stream.ready),
                     ap.tag.eq(fd[C * 8:C * 8 + side - 1]), ap.last.eq(fd[C * 8 + side - 1])]
        m.d.comb += [ap.data[r].eq(fd[8 * r:8 * r + 8]) for r in range(C)]
        m.d.comb += self.fire.eq(arr.a_stream.valid & arr.a_stream.ready)

        # ---- the array's lines to the accumulator: int8 directly, 4-bit through the group scaler
        o = arr.o_stream
        ai = acc.i_stream
        otag = Signal(self.tag)
        m.d.comb += otag.eq(o.payload.tag)
        if self.q4:
            sc = self.scaler
            m.d.comb += [sc.i_valid.eq(o.valid & q4), sc.i_data.eq(o.payload.data), sc.i_tag.eq(otag),
                         sc.i_asum.eq(self._asum_pipe(m, arr))]
            m.d.comb += [ai.valid.eq(Mux(q4, sc.o_valid, o.valid)),
                         ai.payload.data.eq(Mux(q4, sc.o_data, o.payload.data)),
                         ai.payload.tag.eq(Mux(q4, Cat(sc.o_addr, sc.o_acc), otag.as_value()[:17]))]
        else:
            m.d.comb += [ai.valid.eq(o.valid), ai.payload.data.eq(o.payload.data),
                         ai.payload.tag.eq(otag.as_value()[:17])]

        # ---- completion: every partial line written by the accumulator; k = 0 zero fill
        # (every line read that reaches the accumulator is one write: a 4-bit GEMM's only at a group's end;
        # a write with none in flight is not counted)
        written = acc.wr.en & ~acc.wr_load & (inflight != 0)
        m.d.sync += inflight.eq(inflight + (a_issue & (~q4 | glast_now)) - written)
        m.d.comb += [acc.zero_addr.eq(zptr), acc.zero_en.eq(zeros)]
        with m.If(zeros):
            m.d.sync += zptr.eq(zptr + 1)
            with m.If(zj_l):
                m.d.sync += [z_j.eq(0), zj_l.eq(n1 == 0), z_i.eq(z_i + 1), zi_l.eq(z_i + 1 == m1)]
                with m.If(zi_l):
                    m.d.sync += zeros.eq(0)
            with m.Else():
                m.d.sync += [z_j.eq(z_j + 1), zj_l.eq(z_j + 1 == n1)]
        return m

    def _asum_pipe(self, m, arr):
        """The sum of each activation beat's ``cols`` int8 (the 4-bit GEMM's ``A``), beside the array: taken as
        the beat enters, a registered adder tree a level a cycle, then delays, so that it leaves with the
        beat's output line (``arr.latency`` cycles later, as the array's own tag)."""
        ap, fire = arr.a_stream.payload, arr.a_stream.valid & arr.a_stream.ready
        vals = [Signal(signed(8), name=f"as0_{r}", reset_less=True) for r in range(self.cfg.cols)]
        with m.If(fire):
            m.d.sync += [v.eq(ap.data[r]) for r, v in enumerate(vals)]
        stages = 1
        while len(vals) > 1:
            nxt = [Signal(signed(ASUM_BITS), name=f"as{stages}_{i}", reset_less=True) for i in range(len(vals) // 2)]
            m.d.sync += [n.eq(vals[2 * i] + vals[2 * i + 1]) for i, n in enumerate(nxt)]
            vals, stages = nxt, stages + 1
        out = vals[0]
        assert stages <= arr.latency, (stages, arr.latency)
        for d in range(arr.latency - stages):
            nxt = Signal(signed(ASUM_BITS), name=f"asd_{d}", reset_less=True)
            m.d.sync += nxt.eq(out)
            out = nxt
        return out
