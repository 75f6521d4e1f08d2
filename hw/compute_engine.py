"""The compute engine: NOP, FINISH, GEMM and GEMM_STREAM (systolic array) and the line ops (vector / activation units).

GEMM is handed to :class:`~systolica.hw.gemm_sequencer.GemmSequencer`, which
streams the operand lines of the instruction from the scratchpad into the
systolic array and lets its accumulator write the result lines; GEMM_STREAM
too, with its weights from :class:`~systolica.hw.weight_stream.WeightStream`
(the engine's own AXI read masters, one per DMA port) instead of the scratchpad; ADD, MUL,
REQUANT, ARGMAX, SILU, GELU and ROPE to :class:`~systolica.hw.vector_sequencer.VectorSequencer`;
QUANT, SOFTMAX, RMSNORM and LAYERNORM to :class:`~systolica.hw.rowpass_sequencer.RowPassSequencer`;
ATTN and ATTN_OUT to :class:`~systolica.hw.attn_sequencer.AttnSequencer`.
The engine retires an instruction once its last result line is written.
"""

from __future__ import annotations

from amaranth.hdl import DomainRenamer, Module, Mux, Signal
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.isa import OP_BY_NAME, WORD_BITS

from .attn_sequencer import ATTN_OPS, AttnSequencer
from .axi import axi4_read_signature
from .dma import ADDR_BITS
from .engines import buffer_ports, engine_members, token_fsm
from .gemm_sequencer import GemmSequencer, gemm_start_values
from .rowpass_sequencer import ROWPASS_OPS, RowPassSequencer
from .vector_sequencer import VECTOR_OPS, VectorSequencer
from .weight_ahead import weights_ahead
from .weight_stream import WeightStream, row_lines
from .word_regs import flag_copies, lane_mux, word_reg

#: attn_beside: the vector unit's ops that go on beside a GEMM_STREAM that runs on -- all but REQUANT, which reads
#: the accumulator the stream writes (the others touch only the vector buffer)
VEC_BESIDE_OPS = tuple(op for op in VECTOR_OPS if op != "REQUANT")
#: everything the compute engine issues beside such a stream (the performance model's sim/perf.py reads it): with
#: NOP, whose pops and pushes only order the engines (the compiler's relay of a store token to the load engine)
BESIDE_STREAM_OPS = ATTN_OPS + VEC_BESIDE_OPS + ("NOP",)

__all__ = ["ComputeEngine"]


class ComputeEngine(wiring.Component):
    """Executes the compute instructions of the command stream."""

    def __init__(self, cfg: AccelConfig, line_domain: str = "sync"):
        """``line_domain``: the clock domain of the row-pass and attention sequencers (the accelerator gives them
        one of their own, on the same clock, whose reset is a register of its own: hw/accelerator.py)."""
        self.cfg, self.line_domain = cfg, line_domain
        self.gemm = GemmSequencer(cfg)
        self.vseq = VectorSequencer(cfg)
        self.rseq = RowPassSequencer(cfg)
        self.aseq = AttnSequencer(cfg)
        p = buffer_ports(cfg)
        line = self.gemm.accum.line
        abits = self.gemm.accum.abits
        members = engine_members(cfg) | {
            "a_addr": Out(p["spad"][0]), "a_en": Out(1), "a_rdata": In(p["spad"][1]),
            "w_addr": Out(p["spad"][0]), "w_en": Out(1), "w_rdata": In(p["spad"][1]),
            "accum_rd": In(memory.ReadPort.Signature(addr_width=abits, shape=line)),
            "accum_wr": In(memory.WritePort.Signature(addr_width=abits, shape=line)),
            "acc_ld_en": In(1), "acc_ld_addr": In(abits), "acc_ld_data": In(line), "acc_ld_ready": Out(1),
            "va_addr": Out(p["vbuf"][0]), "va_en": Out(1), "va_rdata": In(p["vbuf"][1]),
            "vb_addr": Out(p["vbuf"][0]), "vb_en": Out(1), "vb_rdata": In(p["vbuf"][1]),
            "acc_addr": Out(p["acc"][0]), "acc_en": Out(1), "acc_rdata": In(p["acc"][1]),
            "out_addr": Out(p["vbuf"][0]), "out_en": Out(1), "out_data": Out(p["vbuf"][1]),
            "spad_waddr": Out(p["spad"][0]), "spad_wen": Out(1), "spad_wdata": Out(p["spad"][1]),
            "mac_active": Out(1),
            "win_base": In(ADDR_BITS), "abort": In(1), "dma_quiet": Out(1), "bus_error": Out(1), "bus_pc": Out(32),
        }
        if cfg.attn_beside:  # the attention unit's own scratchpad copy (its data lines)
            members |= {"t_addr": Out(p["spad"][0]), "t_en": Out(1), "t_rdata": In(p["spad"][1])}
        for port in range(cfg.dma_ports):  # GEMM_STREAM's weight ports (read channels only)
            members[f"wrd{port}"] = Out(axi4_read_signature(ADDR_BITS, cfg.dma_bits))
        super().__init__(members)

    def _in_line_domain(self, seq):
        return seq if self.line_domain == "sync" else DomainRenamer(self.line_domain)(seq)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        # which sequencer an instruction belongs to, decoded from the word as it leaves the command FIFO and
        # kept in flip-flops beside it: the buffer-port multiplexers and the start pulses select on registers
        kinds = {"stream": ("GEMM_STREAM",), "gemm": ("GEMM", "GEMM_STREAM"), "vec": VECTOR_OPS,
                 "row": ROWPASS_OPS, "attn": ATTN_OPS}
        if cfg.attn_beside:
            kinds["vec_beside"] = VEC_BESIDE_OPS
            kinds["nop"] = ("NOP",)
        kind = {k: Signal(name=f"is_{k}") for k in kinds}
        # and three copies each of "attn" and "row" for the output line's multiplexer, a third of its lanes
        # each: one flag over the 256-bit line and the read multiplexers was the most congested net of the
        # ulx3s route (docs/boards.md)
        out_sel = {}
        # and a copy of the word for each line sequencer, loaded with it: one word decoded by all of them let Yosys
        # share their decodes (rseq's opcode test and line count feeding vseq's lm1, 12.3 ns estimated on ulx3s),
        # which the placer could put near none of them.  Four registers Yosys cannot merge: reset or not, initially
        # zeros or ones
        seq_word = {}

        def on_load(nxt):
            for k, kw in (("vec", dict(init=(1 << WORD_BITS) - 1, reset_less=True)), ("row", dict(init=0)),
                          ("attn", dict(init=(1 << WORD_BITS) - 1))):
                seq_word[k] = Signal(WORD_BITS, name=f"word_{k}", **kw)
                m.d.sync += seq_word[k].eq(nxt.as_value())
            for k, names in kinds.items():
                hit = 0
                for name in names:
                    hit = hit | (nxt.nop.h.opcode == OP_BY_NAME[name].code)
                m.d.sync += kind[k].eq(hit)
                if k in ("attn", "row"):
                    out_sel[k] = flag_copies(m, hit, 1, f"out_is_{k}", first=kind[k])

        # attn_beside: a GEMM_STREAM without pushes retires as it starts and runs on (weights, array,
        # accumulator) while the engine goes on with ATTN / ATTN_OUT, the vector unit's ops but REQUANT, and NOP
        # behind it; any other instruction waits in POP until it has finished (`hold`).  They share no buffer one
        # writes and the other reads (the stream reads the scratchpad's "a" port and writes the accumulator; ATTN
        # reads the scratchpad through a copy of its own, the vector ops only the vector buffer, NOP nothing), so
        # no address needs comparing; a token a NOP or an ATTN pushes cannot release a LOAD over the stream's
        # lines, which the compiler keeps live over the block
        beside = bool(cfg.attn_beside)
        gemm_busy, hold = Signal(name="gemm_busy"), Signal(name="hold_for_gemm")
        ins, exec_start, exec_done, _ = token_fsm(m, self, cfg, on_load, hold=hold if beside else None,
                                                  busy=gemm_busy if beside else None)
        # the sequencers start a cycle after the token handshake (COMPUTE_START_CYCLES): their first
        # buffer reads and DMA requests begin at this flip-flop, not at the token queues' logic
        begin = Signal()
        m.d.sync += begin.eq(exec_start)
        is_stream, is_gemm = kind["stream"], kind["gemm"]
        if beside:
            # the GEMM path's word, pc and kind, held while it runs: loaded from the engine's word (stable since
            # POP) while the path is idle, so they are this instruction's when it begins
            gword = Signal.like(ins.as_value(), name="gemm_word", reset_less=True)
            g_pc = Signal(32, name="gemm_pc", reset_less=True)
            g_stream, g_gemm = Signal(name="gemm_is_stream"), Signal(name="gemm_is_gemm")
            with m.If(~gemm_busy):
                m.d.sync += [gword.eq(ins.as_value()), g_pc.eq(self.pc), g_stream.eq(is_stream), g_gemm.eq(is_gemm)]
            gins = data.View(ins.shape(), gword)
            g, gs = gins.gemm, gins.gemm_stream
            is_stream_g = g_stream
            m.d.comb += self.bus_pc.eq(g_pc)
        else:
            g, gs = ins.gemm, ins.gemm_stream
            is_stream_g = is_stream
            m.d.comb += self.bus_pc.eq(self.pc)
        m.submodules.gemm = seq = self.gemm
        # GEMM and GEMM_STREAM share dst, a, m, k, n, acc except for where the fields sit in the word
        m.d.comb += [seq.start.eq(begin & is_gemm), seq.a.eq(Mux(is_stream_g, gs.a, g.a)), seq.w.eq(g.w),
                     seq.dst.eq(Mux(is_stream_g, gs.dst, g.dst)), seq.m.eq(Mux(is_stream_g, gs.m, g.m)),
                     seq.k.eq(Mux(is_stream_g, gs.k, g.k)), seq.n.eq(Mux(is_stream_g, gs.n, g.n)),
                     seq.acc.eq(Mux(is_stream_g, gs.acc, g.acc)), seq.stream.eq(is_stream_g),
                     seq.wfmt.eq(Mux(is_stream_g, gs.wfmt, 0)), seq.gshift.eq(gs.gshift)]
        # the start's values from m, k, n, acc of the engine's word (not gword: the word is this instruction's a
        # cycle before `begin`, gword only at it), loaded while the GEMM path is idle, held while it runs
        w_gemm, w_gs = ins.gemm, ins.gemm_stream
        gemm_start_values(m, seq.pre, {f: Mux(is_stream, getattr(w_gs, f), getattr(w_gemm, f)) for f in ("m", "k", "n", "acc")},
                          is_stream, ~gemm_busy)
        m.submodules.wstream = ws = WeightStream(cfg)
        for port in range(cfg.dma_ports):
            wiring.connect(m, wiring.flipped(getattr(self, f"wrd{port}")), getattr(ws, f"axi{port}"))
        # the weights are read only when a tile uses them: no rows, no K or no outputs read nothing.  Both that
        # test and the row's line count are flip-flops loaded from the word every cycle: the word is there a
        # cycle before `begin` (and holds still until the instruction ends), so the stream's start values
        # load from registers, not from the word's arithmetic
        gs = ins.gemm_stream  # the stream's start values: from the engine's word (the walkers hold them once started)
        if cfg.wstream_ahead:  # the ports start from a queue of the dispatched streams (hw/weight_ahead.py)
            ws_any = word_reg(m, (gs.m != 0) & (gs.n != 0) & (gs.k != 0), "ws_any")
            ws_pc = weights_ahead(m, cfg, self, ws, seq, ins, exec_start, begin & is_stream & ws_any, self.abort,
                                  row_lines)
            start = []
        else:
            ws_lines = word_reg(m, row_lines(gs.k, gs.wfmt, cfg), "ws_row_lines")
            ws_any = word_reg(m, (gs.m != 0) & (gs.n != 0) & (gs.k != 0), "ws_any")
            start = [ws.start.eq(begin & is_stream & ws_any), ws.base.eq(self.win_base), ws.w.eq(gs.w),
                     ws.n.eq(gs.n), ws.row_lines.eq(ws_lines)]
        m.d.comb += start or [ws.base.eq(self.win_base)]
        handshake = [] if cfg.wstream_ahead else [seq.ws_valid.eq(ws.beat_valid), ws.beat_ready.eq(seq.ws_ready)]
        m.d.comb += [ws.abort.eq(self.abort), *handshake, seq.ws_data.eq(ws.beat_data),
                     self.dma_quiet.eq(ws.quiet), self.bus_error.eq(ws.bus_error & ~self.abort)]
        m.submodules.vseq = vs = self.vseq
        is_vec = kind["vec"]
        rs = self.rseq
        m.submodules.rseq = self._in_line_domain(rs)
        is_row = kind["row"]
        m.d.comb += [vs.start.eq(begin & is_vec), vs.word.eq(seq_word["vec"]),
                     rs.start.eq(begin & is_row), rs.word.eq(seq_word["row"]),
                     self.acc_addr.eq(vs.acc_addr), self.acc_en.eq(vs.acc_en), vs.acc_rdata.eq(self.acc_rdata),
                     vs.exp_rdata.eq(self.a_rdata)]
        # QUANT's scratchpad lines are registered on their way to the write port, as the line ops' results are
        # (below): the quant unit's output fields selected the line's address, then the port's select, into the
        # write addresses of both scratchpad copies' block RAMs in one cycle (ulx3s: `spad_w_mem`'s ADA, 10.8 ns).
        # A line lands a cycle later; the instruction's end, its tokens and the next instruction's reads come
        # cycles after that (PUSH, then IDLE and POP)
        s_addr = Signal.like(self.spad_waddr, name="spad_waddr_r", reset_less=True)
        s_data = Signal.like(self.spad_wdata, name="spad_wdata_r", reset_less=True)
        s_en = Signal(name="spad_wen_r")
        m.d.sync += [s_addr.eq(rs.spad_addr), s_data.eq(rs.spad_data), s_en.eq(rs.spad_en)]
        m.d.comb += [self.spad_waddr.eq(s_addr), self.spad_wen.eq(s_en), self.spad_wdata.eq(s_data)]
        at = self.aseq
        m.submodules.aseq = self._in_line_domain(at)
        is_attn = kind["attn"]
        m.d.comb += [at.start.eq(begin & is_attn), at.word.eq(seq_word["attn"]), at.sb_rdata.eq(self.w_rdata)]
        if beside:  # its data lines through its own copy
            m.d.comb += [self.t_addr.eq(at.sa_addr), self.t_en.eq(at.sa_en), at.sa_rdata.eq(self.t_rdata)]
        else:
            m.d.comb += at.sa_rdata.eq(self.a_rdata)
        # the vector-buffer ports belong to whichever line sequencer runs the instruction
        for port in ("va", "vb"):
            for seq_ in (vs, rs):
                m.d.comb += getattr(seq_, f"{port}_rdata").eq(getattr(self, f"{port}_rdata"))
            m.d.comb += [getattr(self, f"{port}_addr").eq(Mux(is_row, getattr(rs, f"{port}_addr"),
                                                              getattr(vs, f"{port}_addr"))),
                         getattr(self, f"{port}_en").eq(getattr(vs, f"{port}_en") | getattr(rs, f"{port}_en"))]
        m.d.comb += at.va_rdata.eq(self.va_rdata)
        with m.If(is_attn):
            m.d.comb += [self.va_addr.eq(at.va_addr), self.va_en.eq(at.va_en)]
        # the line ops' results are registered on their way to the vector buffer's write port: the sequencers'
        # output selects and the units' last stages reached the block RAMs' write data in one cycle (ulx3s: 13.1 ns)
        o_addr = Signal.like(self.out_addr, name="out_addr_r", reset_less=True)
        o_data = Signal.like(self.out_data, name="out_data_r", reset_less=True)
        o_en = Signal(name="out_en_r")
        m.d.sync += [o_addr.eq(Mux(is_attn, at.out_addr, Mux(is_row, rs.out_addr, vs.out_addr))),
                     o_en.eq(vs.out_en | rs.out_en | at.out_en),
                     o_data.eq(lane_mux(out_sel["attn"], at.out_data,
                                        lane_mux(out_sel["row"], rs.out_data, vs.out_data, 32), 32))]
        m.d.comb += [self.out_addr.eq(o_addr), self.out_en.eq(o_en), self.out_data.eq(o_data)]
        # the scratchpad's "a" read port serves GEMM's activations, REQUANT's exponent lines and ATTN's
        # data lines; the "w" port GEMM's weights and ATTN's exponent lines
        # (attn_beside: a GEMM_STREAM running on keeps the "a" port while the next word, a line op, waits in POP)
        with m.If(is_vec & ~gemm_busy if beside else is_vec):
            m.d.comb += [self.a_addr.eq(vs.exp_addr), self.a_en.eq(vs.exp_en)]
        if not beside:
            with m.Elif(is_attn):
                m.d.comb += [self.a_addr.eq(at.sa_addr), self.a_en.eq(at.sa_en)]
        with m.Else():
            m.d.comb += [self.a_addr.eq(seq.a_addr), self.a_en.eq(seq.a_en)]
        m.d.comb += [self.w_addr.eq(Mux(is_attn, at.sb_addr, seq.w_addr)), self.w_en.eq(seq.w_en | at.sb_en)]
        m.d.comb += [seq.a_rdata.eq(self.a_rdata), seq.w_rdata.eq(self.w_rdata),
                     self.mac_active.eq(seq.fire)]
        wiring.connect(m, wiring.flipped(self.accum_rd), seq.acc_rd)
        wiring.connect(m, wiring.flipped(self.accum_wr), seq.acc_wr)
        m.d.comb += [seq.ld_en.eq(self.acc_ld_en), seq.ld_addr.eq(self.acc_ld_addr), seq.ld_data.eq(self.acc_ld_data),
                     self.acc_ld_ready.eq(seq.ld_ready)]
        # NOP and FINISH finish a cycle after they start; GEMM when the sequencer has written its last line
        # (wstream_ahead: the ports and their FIFOs may be on the next stream already; the sequencer takes every line
        # of its own before it is done)
        m.d.comb += gemm_busy.eq(seq.busy if cfg.wstream_ahead else seq.busy | ws.busy)
        if cfg.wstream_ahead:  # a bus error is the stream's whose weights the ports read
            m.d.comb += self.bus_pc.eq(ws_pc)
        if beside:
            h = ins.nop.h
            runs_on = is_stream & ~h.push_prev & ~h.push_next  # a GEMM_STREAM that runs on behind the engine
            free = is_attn | kind["vec_beside"] | kind["nop"]  # what may run beside it
            m.d.comb += [hold.eq(gemm_busy & ~free),
                         exec_done.eq(self.executing & ~begin & ~vs.busy & ~rs.busy & ~at.busy
                                      & (~gemm_busy | free | runs_on))]
        else:
            m.d.comb += exec_done.eq(self.executing & ~begin & ~gemm_busy & ~vs.busy & ~rs.busy & ~at.busy)
        return m
