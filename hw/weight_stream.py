"""GEMM_STREAM's weight ports: ``dma_ports`` paged DMA readers joined into beats of ``P`` weight lines.

Weight port ``p`` reads its own stream (``systolica/layout.py``, *Weight streams*): ``n * row_lines``
scratchpad lines (:func:`row_lines`: ``k * cols / P`` for int8 weights, the scale and code lines of
:func:`q4_sections` for 4-bit ones) from window offset ``w + p * 4 KiB``, skipping the other ports' pages at
every 4 KiB boundary.  Each port keeps several bursts in flight (enough to cover the DRAM latency) and
assembles its beats into lines in a FIFO of its own; a beat leaves when every port has a line, carrying line
``p`` of the beat from port ``p`` (for int8, column ``g * P + p`` of the tile; the GEMM sequencer pairs beats or
routes the 4-bit sections).  So the ports deliver ``P`` lines (``P * cols`` bytes) a cycle, and the R channels
wait (``rready`` low) when the sequencer does not take them.

With ``config.wstream_pairs`` each port's FIFO is two: an int8 stream's even and odd lines (a toggle a port, back
to the even FIFO at each ``start``: a stream's line 0 is always even, and an int8 stream has an even number of lines
a port, ``k * cols / P``), and ``pair_*`` offers beats ``2i`` and ``2i + 1`` together whenever every port has both:
its tile takes its ``2P`` columns in one cycle, so lines the ports read ahead are taken at twice the rate they
arrive.  A 4-bit stream (``single`` at ``start``) puts every line in the even FIFO, half the lines ahead, and its
scale and code sections take them a beat at a time on ``beat_*``.  So the even FIFO's head is always the next single
beat and the next pair's first: the reads keep no state.

``abort`` stops issuing bursts and drains those in flight (data dropped); ``quiet`` says nothing is in flight.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from systolica.config import AccelConfig
from systolica.layout import WPAGE, select
from systolica.wstream4 import config_problem

from .axi import axi4_read_signature
from .dma import ADDR_BITS, DmaReader

__all__ = ["WeightStream", "stream_outstanding", "row_lines", "q4_sections", "STREAM_FIFO_LINES"]

#: lines each port's FIFO holds: absorbs the skew between ports (their bursts arrive independently)
STREAM_FIFO_LINES = 32


def stream_outstanding(cfg: AccelConfig) -> int:
    """Bursts each weight port keeps in flight: enough that ``config.wstream_latency`` cycles of DRAM hide behind the
    data of the bursts before (``ceil(latency / burst) + 2``: one more for the address register's turnaround), at
    least 3, at most 16 (weight port 0's share of gmem0's read arbiter, ``ARB_DEPTH``).  No more than that: a port
    answers in order, so a LOAD's burst behind them on the same port waits for every beat in flight (measured: the
    kv260 layer at DRAM latency 100, 4 bursts 63.8 k cycles, 5 64.3 k, 6 64.5 k, 10 66.1 k; 3 no longer hides the latency,
    69.9 k; docs/performance.md)."""
    beats = min(cfg.max_burst, WPAGE // cfg.dma_bytes)
    return max(3, min(16, -(-cfg.wstream_latency // beats) + 2))


def q4_sections(k, wfmt, cfg: AccelConfig):
    """``(scale lines, code lines)`` one output line of a 4-bit stream puts in each port's stream, in shifts and
    adds (``k``, ``wfmt``: Amaranth values or ints): ``ceil(k*R*sb / 32)`` (``sb``: 4 bytes for Q4_1,
    ``wfmt`` 2; 2 for Q4_0) and ``k*R / 2`` (``R = cols / dma_ports``, even where the datapath exists)."""
    lg = (cfg.cols // cfg.dma_ports).bit_length() - 1
    scale = select(wfmt == 2, ((k << (lg + 2)) + 31) >> 5, ((k << (lg + 1)) + 31) >> 5)
    return scale, k << (lg - 1)


def row_lines(k, wfmt, cfg: AccelConfig):
    """Lines one output line puts in each port's stream (``k``, ``wfmt``: Amaranth values or ints): int8 ``k * R``,
    4-bit :func:`q4_sections` together (``systolica.layout.wstream_port_bytes / cols`` for one output line:
    tests/hw/test_weight_stream_lines.py)."""
    lg = (cfg.cols // cfg.dma_ports).bit_length() - 1
    if config_problem(cfg) is not None:  # no 4-bit datapath: the decoder refuses wfmt != 0
        return k << lg
    scale, code = q4_sections(k, wfmt, cfg)
    return select(wfmt == 0, k << lg, scale + code)


class BlockFIFO(fifo.SyncFIFOBuffered):
    """A :class:`~amaranth.lib.fifo.SyncFIFOBuffered` whose storage is marked ``ram_style = "block"`` (a deep FIFO of
    wide lines in LUT-RAM would cost thousands of LUTs)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.submodules.storage.attrs["ram_style"] = "block"
        return m


def _no_room(m, cfg: AccelConfig, axi, level, name: str, cap=None):
    """High when one more burst could overfill a port's line FIFO (``level`` lines) together with the beats in flight
    on ``axi``: in credit mode (``wstream_ahead``) a port then issues nothing, so its R channel never waits for a
    stream that has not begun (a LOAD behind those bursts on the same port would wait with it)."""
    bpl = cfg.cols // cfg.dma_bytes
    burst = min(cfg.max_burst, WPAGE // cfg.dma_bytes)
    cap = cfg.wstream_ahead * bpl if cap is None else cap  # beats the FIFO holds
    most = stream_outstanding(cfg) * burst  # (outside credit mode the port keeps that many beats in flight)
    flight = Signal(range(most + 1), name=f"{name}_flight")  # beats asked for and not yet received
    ar = axi.arvalid & axi.arready
    r = axi.rvalid & axi.rready
    m.d.sync += flight.eq(flight + Mux(ar, axi.arlen + 1, 0) - r)
    # (with several beats a line, the line being assembled: up to bpl - 1 beats outside the FIFO)
    return (level * bpl + (bpl - 1) + flight + burst) > cap


class WeightStream(wiring.Component):
    """The weight ports of one GEMM_STREAM: ``start`` with ``w``, ``n`` and ``row_lines`` (the lines one output line
    puts in each port's stream: :func:`row_lines`); beats of ``P`` lines on ``beat_*``."""

    def __init__(self, cfg: AccelConfig):
        self.cfg = cfg
        self.ports = cfg.dma_ports
        members = {f"axi{p}": Out(axi4_read_signature(ADDR_BITS, cfg.dma_bits)) for p in range(self.ports)}
        members |= {
            "start": In(1), "base": In(ADDR_BITS), "w": In(32), "n": In(16), "row_lines": In(24), "abort": In(1),
            "beat_valid": Out(1), "beat_ready": In(1), "beat_data": Out(self.ports * cfg.cols * 8),
            "busy": Out(1), "quiet": Out(1), "bus_error": Out(1),
        }
        if cfg.wstream_ahead:  # ``ahead``: the stream being read has not begun (credit mode); ``fetching``: ports busy
            members |= {"ahead": In(1), "fetching": Out(1)}
        if cfg.wstream_pairs:  # two beats at once; ``single``: the stream started is read a beat at a time (4-bit)
            members |= {"pair_valid": Out(1), "pair_ready": In(1), "pair_data": Out(2 * self.ports * cfg.cols * 8),
                        "single": In(1)}
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg, P, C = self.cfg, self.ports, self.cfg.cols
        db = cfg.dma_bits
        bpl = C // cfg.dma_bytes  # DMA beats per scratchpad line
        beats = Signal(32)
        m.d.comb += beats.eq(self.row_lines * bpl)  # a constant multiple: shifts and adds
        quiet, busy, err = 1, 0, 0
        heads = []
        ahead, pairs = bool(cfg.wstream_ahead), bool(cfg.wstream_pairs)
        fetching = 0
        single = Signal(name="ws_single")  # wstream_pairs: the stream the ports read is a 4-bit one (set at start)
        if pairs:
            with m.If(self.start):
                m.d.sync += single.eq(self.single)
        for p in range(P):
            rd = DmaReader(cfg, outstanding=stream_outstanding(cfg), skip=(P - 1) * WPAGE, holdable=ahead)
            m.submodules[f"rd{p}"] = rd
            wiring.connect(m, wiring.flipped(getattr(self, f"axi{p}")), rd.axi)
            m.d.comb += [rd.start.eq(self.start), rd.base.eq(self.base), rd.addr.eq(self.w + p * WPAGE),
                         rd.stride.eq(self.row_lines * C), rd.rows.eq(self.n), rd.beats.eq(beats),
                         rd.abort.eq(self.abort)]
            if pairs:  # even and odd lines in FIFOs of their own, the write toggle back to even at each start
                fifos = (BlockFIFO(width=C * 8, depth=cfg.wstream_ahead // 2),
                         BlockFIFO(width=C * 8, depth=cfg.wstream_ahead // 2))
                m.submodules[f"q{p}e"], m.submodules[f"q{p}o"] = fifos
                q = _pair_sink(m, fifos, self.start, single, f"{p}")
            else:
                q = BlockFIFO(width=C * 8, depth=cfg.wstream_ahead) if ahead else \
                    fifo.SyncFIFOBuffered(width=C * 8, depth=STREAM_FIFO_LINES)
                m.submodules[f"q{p}"] = q
                fifos = (q,)
            if ahead:  # (a 4-bit stream's lines all go to the even FIFO: half the room)
                cap = Mux(single, cfg.wstream_ahead // 2 * bpl, cfg.wstream_ahead * bpl) if pairs else None
                m.d.comb += rd.hold.eq(self.ahead & _no_room(m, cfg, rd.axi, q.level, f"p{p}", cap))
                fetching = fetching | rd.busy
            if bpl == 1:
                m.d.comb += [q.w_data.eq(rd.beat_data), q.w_en.eq(rd.beat_valid), rd.beat_ready.eq(q.w_rdy)]
            else:  # assemble a line from its beats, the first beat in the low bits
                asm = Signal(C * 8 - db, name=f"asm{p}", reset_less=True)  # a line's first beats
                cnt = Signal(range(bpl), name=f"cnt{p}")
                last = cnt == bpl - 1
                m.d.comb += [rd.beat_ready.eq(q.w_rdy | ~last), q.w_data.eq(Cat(asm, rd.beat_data)),
                             q.w_en.eq(rd.beat_valid & last)]
                with m.If(rd.beat_valid & rd.beat_ready):
                    m.d.sync += cnt.eq(0 if bpl == 1 else (cnt + 1) % bpl)
                    with m.If(~last):
                        m.d.sync += asm.eq(Cat(asm[db:], rd.beat_data) if C * 8 - db > db else rd.beat_data)
                with m.If(self.start):
                    m.d.sync += cnt.eq(0)
            heads.append(fifos)
            quiet = quiet & rd.quiet
            busy = busy | rd.busy
            for f in fifos:
                busy = busy | f.r_rdy
            err = err | rd.bus_error
        m.d.comb += [self.quiet.eq(quiet), self.busy.eq(busy), self.bus_error.eq(err)]
        if ahead:
            m.d.comb += self.fetching.eq(fetching)
        if pairs:
            self._pair_reads(m, heads)
            return m
        all_ready = 1
        for (q,) in heads:
            all_ready = all_ready & q.r_rdy
        m.d.comb += [self.beat_valid.eq(all_ready), self.beat_data.eq(Cat(*(q.r_data for (q,) in heads)))]
        for (q,) in heads:
            m.d.comb += q.r_en.eq(all_ready & self.beat_ready)
        return m

    def _pair_reads(self, m, heads):
        """The read side of the even and odd FIFOs: the even FIFOs' heads are the next single beat (a 4-bit stream's,
        all of whose lines they hold) and the first of the next pair (an int8 stream's, read only in pairs)."""
        even_rdy, odd_rdy = 1, 1
        for qe, qo in heads:
            even_rdy, odd_rdy = even_rdy & qe.r_rdy, odd_rdy & qo.r_rdy
        took_one = even_rdy & self.beat_ready
        took_two = even_rdy & odd_rdy & self.pair_ready & ~self.beat_ready
        m.d.comb += [self.beat_valid.eq(even_rdy), self.pair_valid.eq(even_rdy & odd_rdy),
                     self.beat_data.eq(Cat(*(qe.r_data for qe, _ in heads))),
                     self.pair_data.eq(Cat(*(qe.r_data for qe, _ in heads), *(qo.r_data for _, qo in heads)))]
        for qe, qo in heads:
            m.d.comb += [qe.r_en.eq(took_one | took_two), qo.r_en.eq(took_two)]

class _PairSink:
    """A port's even and odd FIFOs seen from its writer as one FIFO: ``w_data``, ``w_en`` in, ``w_rdy``, ``level``."""

    def __init__(self, width: int, w_rdy, level, name: str):
        self.w_data, self.w_en = Signal(width, name=f"pw_data{name}"), Signal(name=f"pw_en{name}")
        self.w_rdy, self.level = w_rdy, level


def _pair_sink(m, fifos, start, single, name: str) -> _PairSink:
    """The write side of a port's even and odd FIFOs: a toggle a line, back to even at ``start`` (the ports begin a
    stream only once they have written every line of the one before, so a stream's line 0 is always even); held at
    even while ``single`` (a 4-bit stream: every line to the even FIFO)."""
    qe, qo = fifos
    wsel = Signal(name=f"wsel{name}")
    sink = _PairSink(len(qe.w_data), Mux(wsel, qo.w_rdy, qe.w_rdy), qe.level + qo.level, name)
    with m.If(start):
        m.d.sync += wsel.eq(0)
    with m.Elif(sink.w_en & sink.w_rdy & ~single):
        m.d.sync += wsel.eq(~wsel)
    m.d.comb += [qe.w_data.eq(sink.w_data), qo.w_data.eq(sink.w_data),
                 qe.w_en.eq(sink.w_en & ~wsel), qo.w_en.eq(sink.w_en & wsel)]
    return sink
