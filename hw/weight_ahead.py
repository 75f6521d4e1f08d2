"""GEMM_STREAM's weights ahead of the instruction (``config.wstream_ahead``).

Without it a GEMM_STREAM's weight ports start when the instruction executes, so every stream begins with a DRAM
round trip (~100 cycles at the harness's latency) while the array waits.  With it the compute engine keeps a
queue of the GEMM_STREAMs dispatched to it (their weight address, output lines and lines a row, taken from the
word as it enters the command FIFO) and starts the next one's ports as soon as

- the ports are done with the stream before (their FIFOs may still hold its last lines), and
- every compute instruction before it in program order -- and itself -- has popped its tokens from the store
  engine (``pop_next``): a GEMM_STREAM's weights can depend on a STORE only through such a token (the store
  engine pushes it after its B responses; the load engine's tokens say a scratchpad was written, never DRAM),
  and the engine runs in program order, so once those pops are done the weights in DRAM are the ones the
  instruction would read.  (A counter of the words with ``pop_next`` that entered the command FIFO gives each
  stream its ``barrier``; a counter of those pops done, compared modulo 2**counter_bits, says when it is
  reached.)  The LOADs' tokens before a stream -- a norm's gammas, the KV pages of the ATTNs before an output
  projection -- therefore do not hold its ports back.

The ports then read ahead while the line ops before the stream run.  Until the stream begins executing
(``ahead``) each port issues only the bursts its line FIFO has room for (hw/weight_stream.py), so its R
channel never waits for the array: a LOAD burst behind those on the same port (the KV pages an ATTN before
the stream waits for) is never held up by them.  Once the stream executes, the ports keep their usual bursts
in flight.  What is gained is the round trip of each stream that has that many cycles of other work before
it, and with ``config.wstream_pairs``, where the array takes the lines read ahead two beats a cycle, every
line the FIFOs hold when the stream begins, up to half the stream's lines.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, fifo

from systolica.config import AccelConfig
from systolica.isa import OP_BY_NAME, WORD_BITS

from .decode import instr_layout

__all__ = ["weights_ahead", "counter_bits"]


def counter_bits(cfg: AccelConfig) -> int:
    """Bits of the pop and stream counters: two counters never differ by more than the queue's ``cmd_depth + 2``
    entries, so they are compared modulo twice that (a sign bit), and at least 8 bits."""
    return max(8, (cfg.cmd_depth + 2).bit_length() + 1)


def entry_layout(cfg: AccelConfig) -> data.StructLayout:
    """The queue's entry: the stream's weight address, output lines, lines a row per port, pop barrier, pc and
    whether it is a 4-bit one (``wstream_pairs``: its lines are read a beat at a time)."""
    return data.StructLayout({"w": 32, "n": 16, "row_lines": 24, "barrier": counter_bits(cfg), "pc": 32,
                              "q4": 1})


def weights_ahead(m: Module, cfg: AccelConfig, eng, ws, seq, ins, exec_start, stream_begins, abort, row_lines):
    """Drive ``ws``'s start and operands from the queue of dispatched GEMM_STREAMs (see the module docstring), and
    pass its beats to the GEMM sequencer ``seq`` only while the stream they belong to executes.

    ``eng``: the compute engine (its command input); ``ins``: the word it executes, ``exec_start`` its pop cycle;
    ``stream_begins``: a GEMM_STREAM that reads weights begins executing; ``row_lines(k, wfmt, cfg)``: the
    stream's lines a row.  Returns the pc of the stream the ports read (for a bus error)."""
    word = data.View(instr_layout(), eng.cmd_data[:WORD_BITS])
    took = eng.cmd_valid & eng.cmd_ready
    h, gs = word.nop.h, word.gemm_stream
    pops = h.pop_next  # a token from the store engine (see the module docstring)
    is_stream = h.opcode == OP_BY_NAME["GEMM_STREAM"].code
    reads = (gs.m != 0) & (gs.n != 0) & (gs.k != 0)  # no rows, K or outputs: it reads no weights
    cb = counter_bits(cfg)
    entry_l = entry_layout(cfg)
    pops_in, pops_done = Signal(cb, name="ahead_pops_in"), Signal(cb, name="ahead_pops_done")
    with m.If(took & pops):
        m.d.sync += pops_in.eq(pops_in + 1)
    with m.If(exec_start & ins.nop.h.pop_next):
        m.d.sync += pops_done.eq(pops_done + 1)
    # at most cmd_depth streams wait: the command FIFO's and the engine's word (the one before has started)
    m.submodules.ahead_q = q = fifo.SyncFIFOBuffered(width=entry_l.size, depth=cfg.cmd_depth + 2)
    entry = Signal(entry_l, name="ahead_entry")
    m.d.comb += [entry.w.eq(gs.w), entry.n.eq(gs.n), entry.row_lines.eq(row_lines(gs.k, gs.wfmt, cfg)),
                 entry.barrier.eq((pops_in + pops)[:cb]), entry.pc.eq(eng.cmd_data[WORD_BITS:]),
                 entry.q4.eq(gs.wfmt != 0),
                 q.w_data.eq(entry), q.w_en.eq(took & is_stream & reads)]
    head = data.View(entry_l, q.r_data)
    popped = ~(pops_done - head.barrier)[cb - 1]  # pops_done >= barrier, modulo 2**cb
    go = Signal(name="ahead_go")
    started = Signal(name="ahead_started")  # the cycle after a start: the ports' busy is not up yet
    m.d.comb += go.eq(q.r_rdy & popped & ~ws.fetching & ~started & ~abort)
    m.d.sync += started.eq(go)
    m.d.comb += [q.r_en.eq(go), ws.start.eq(go), ws.w.eq(head.w), ws.n.eq(head.n), ws.row_lines.eq(head.row_lines)]
    if cfg.wstream_pairs:
        m.d.comb += ws.single.eq(head.q4)
    # credit mode while the ports read a stream that has not begun: starts and begins counted, modulo 2**cb (streams
    # short enough to sit whole in the FIFOs may be read several ahead, at most the queue's cmd_depth + 2)
    n_start, n_begin = Signal(cb, name="ahead_starts"), Signal(cb, name="ahead_begins")
    with m.If(go):
        m.d.sync += n_start.eq(n_start + 1)
    with m.If(stream_begins):
        m.d.sync += n_begin.eq(n_begin + 1)
    m.d.comb += ws.ahead.eq(n_start != n_begin)
    pc = Signal(32, name="ahead_pc")
    with m.If(go):
        m.d.sync += pc.eq(head.pc)
    # the beats of the executing stream, and no more: the FIFOs behind them may hold the next stream's lines
    # already, which the sequencer (still streaming, its array ready for a tile) must not take.  Its n output
    # lines of row_lines beats each are counted as it takes them (two counters, no product)
    gs = ins.gemm_stream
    open_ = Signal(name="ahead_open")
    row_last, n_last = Signal(24, name="ahead_row_last"), Signal(16, name="ahead_n_last")
    c_row, c_n = Signal(24, name="ahead_c_row"), Signal(16, name="ahead_c_n")
    taken = ws.beat_valid & seq.ws_ready & open_
    m.d.comb += [seq.ws_valid.eq(ws.beat_valid & open_), ws.beat_ready.eq(seq.ws_ready & open_)]
    row_end = c_row == row_last
    if cfg.wstream_pairs:  # two beats at once (an int8 stream: its rows are an even number of lines)
        taken2 = ws.pair_valid & seq.ws2_ready & open_
        m.d.comb += [seq.ws2_valid.eq(ws.pair_valid & open_), ws.pair_ready.eq(seq.ws2_ready & open_),
                     seq.ws2_data.eq(ws.pair_data)]
        row_end = Mux(taken2, c_row + 1 == row_last, row_end)
        taken = taken | taken2
    with m.If(stream_begins):
        m.d.sync += [open_.eq(1), c_row.eq(0), c_n.eq(0), row_last.eq(row_lines(gs.k, gs.wfmt, cfg) - 1),
                     n_last.eq(gs.n - 1)]
    with m.Elif(taken):
        m.d.sync += c_row.eq(c_row + (Mux(taken2, 2, 1) if cfg.wstream_pairs else 1))
        with m.If(row_end):
            m.d.sync += [c_row.eq(0), c_n.eq(c_n + 1)]
            with m.If(c_n == n_last):
                m.d.sync += open_.eq(0)
    return pc
